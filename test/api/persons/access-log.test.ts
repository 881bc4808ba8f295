// The read-access log through the API: every read route that answers with persons' data records exactly one
// row (who, with which key, as what action, whose data, the request id and the client address as the throttles
// see it); a failed read records nothing; the log is listed per person and per project (filters, pages, CSV)
// under scope person:read, and reading it is itself recorded.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { capture } from '../../fixtures.ts';
import { accessRecorderOf } from '../../../api/http/access-log.ts';
import { call, createAccount, createKeyWithId, startApi, type TestAccount, type TestApi } from '../../helpers.ts';

let api: TestApi;
let account: TestAccount;
let key: { id: string; value: string };
const P = () => `/api/projects/${account.projectId}/persons`;
const day = (d: number) => `2026-03-${String(d).padStart(2, '0')}T12:00:00Z`;
let uuidOf: Record<string, string>;

beforeAll(async () => {
  // One proxy in front: the client address is the last X-Forwarded-For entry, as the throttles read it.
  api = await startApi((config) => {
    config.trustProxy = 1;
  });
  account = await createAccount(api.orm);
  key = await createKeyWithId(api.orm, account.userId, {
    scopes: ['person:read', 'person:write', 'cohort:read', 'activity_log:read'],
  });
  await capture(api.baseUrl, account.projectToken, [
    { event: 'signup', distinct_id: 'u1', timestamp: day(2), properties: { $set: { email: 'u1@x.com', plan: 'a' } } },
    { event: 'activate', distinct_id: 'u1', timestamp: day(3), properties: { $set: { plan: 'b' } } },
    { event: 'signup', distinct_id: 'u2', timestamp: day(2), properties: { $set: { email: 'u2@x.com' } } },
    { event: 'signup', distinct_id: 'u3', timestamp: day(4) },
  ]);
  const persons = await sql<{ uuid: string; distinct_id: string }>(
    api.orm,
    `select p.uuid::text as uuid, d.distinct_id from person p join person_distinct_id d on d.person_id = p.id
      where p.project_id = ?`,
    [account.projectId],
  );
  uuidOf = Object.fromEntries(persons.map((p) => [p.distinct_id, p.uuid]));
  // An activity row for u1 (a property change by the API).
  const patched = await call(api.baseUrl, 'PATCH', `${P()}/${uuidOf.u1}/`, {
    key: account.apiKey,
    body: { properties: { vip: true } },
  });
  expect(patched.status).toBe(200);
});
afterAll(() => api.close());

interface Row {
  user_id: number | null;
  api_key_id: string | null;
  action: string;
  person_uuids: string[];
  request_id: string;
  client_address: string | null;
  details: Record<string, unknown>;
}
/** The rows of a request, once this process's recorder has written what it holds. */
const rowsOf = async (requestId: string) => {
  await accessRecorderOf(api.orm).drain();
  return rows(requestId);
};
const rows = (requestId: string) =>
  sql<Row>(
    api.orm,
    `select user_id, api_key_id, action, person_uuids::text[] as person_uuids, request_id, client_address, details
       from person_access_log where request_id = ? order by id`,
    [requestId],
  );

/** A request from client 198.51.100.7 (behind the proxy, which appended it) with its own request id. */
async function read(method: string, path: string, body?: unknown) {
  const requestId = `test-${randomUUID()}`;
  const res = await call(api.baseUrl, method, path, {
    key: key.value,
    body,
    headers: { 'x-request-id': requestId, 'x-forwarded-for': '10.9.9.9, 198.51.100.7' },
  });
  expect(res.headers.get('x-request-id')).toBe(requestId);
  return { res, requestId, rows: await rowsOf(requestId) };
}

const funnelEvents = encodeURIComponent(
  JSON.stringify([
    { id: 'signup', order: 0 },
    { id: 'activate', order: 1 },
  ]),
);

describe('every read of persons’ data is recorded', () => {
  const cases: [string, string, () => string, () => string[], unknown?][] = [
    ['person_retrieve', 'GET', () => `${P()}/${uuidOf.u1}/`, () => [uuidOf.u1]],
    ['person_list', 'GET', () => `${P()}/?email=u2@x.com`, () => [uuidOf.u2]],
    ['person_list', 'GET', () => `${P()}/`, () => [uuidOf.u1, uuidOf.u2, uuidOf.u3]],
    ['person_list_csv', 'GET', () => `${P()}/?format=csv`, () => [uuidOf.u1, uuidOf.u2, uuidOf.u3]],
    ['person_properties_timeline', 'GET', () => `${P()}/${uuidOf.u1}/properties_timeline/`, () => [uuidOf.u1]],
    ['person_cohorts', 'GET', () => `${P()}/cohorts/?person_id=${uuidOf.u2}`, () => [uuidOf.u2]],
    ['person_activity', 'GET', () => `${P()}/${uuidOf.u1}/activity/`, () => [uuidOf.u1]],
    ['person_activity', 'GET', () => `${P()}/activity/`, () => [uuidOf.u1]],
    [
      'person_funnel',
      'GET',
      () => `${P()}/funnel/?events=${funnelEvents}&date_from=2026-03-01&date_to=2026-03-10&funnel_step=2`,
      () => [uuidOf.u1],
    ],
    [
      'person_funnel',
      'POST',
      () => `${P()}/funnel/?date_from=2026-03-01&date_to=2026-03-10&funnel_step=-2`,
      () => [uuidOf.u2, uuidOf.u3],
      {
        events: [
          { id: 'signup', order: 0 },
          { id: 'activate', order: 1 },
        ],
      },
    ],
    [
      'person_funnel_correlation',
      'GET',
      () =>
        `${P()}/funnel/correlation/?events=${funnelEvents}&date_from=2026-03-01&date_to=2026-03-10` +
        `&funnel_correlation_person_entity=${encodeURIComponent('{"id":"signup","type":"events"}')}`,
      () => [uuidOf.u1],
    ],
    [
      'person_lifecycle',
      'GET',
      () => `${P()}/lifecycle/?target_date=2026-03-02&lifecycle_type=new`,
      () => [uuidOf.u1, uuidOf.u2],
    ],
    ['access_log_read', 'GET', () => `${P()}/${uuidOf.u3}/access_log/`, () => [uuidOf.u3]],
    ['access_log_read', 'GET', () => `${P()}/access_log/?person_uuid=${uuidOf.u2}`, () => [uuidOf.u2]],
  ];
  it.each(cases)('%s: %s %s', async (action, method, path, persons, body) => {
    const { res, rows } = await read(method, path(), body);
    expect(res.status).toBe(200);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      action,
      user_id: account.userId,
      api_key_id: key.id,
      client_address: '198.51.100.7',
    });
    expect(rows[0].person_uuids.sort()).toEqual(persons().sort());
  });

  it('says how the data went out (csv) and records a retrieve by numeric id under the person’s uuid', async () => {
    const [{ id }] = await sql(api.orm, `select id::text from person where uuid = ?`, [uuidOf.u2]);
    const { rows } = await read('GET', `${P()}/${id}/?format=csv`);
    expect(rows).toMatchObject([{ action: 'person_retrieve', person_uuids: [uuidOf.u2], details: { format: 'csv' } }]);
    const csv = await read('GET', `${P()}/?format=csv&distinct_id=u3`);
    expect(csv.res.text).toContain(uuidOf.u3);
    expect(csv.rows).toMatchObject([{ action: 'person_list_csv', person_uuids: [uuidOf.u3], details: { page: 1 } }]);
  });

  it('records nothing for a failed read or a read of no one', async () => {
    expect((await read('GET', `${P()}/${randomUUID()}/`)).rows).toEqual([]); // 404
    expect((await read('GET', `${P()}/not-an-id/`)).rows).toEqual([]); // 400
    expect((await read('GET', `${P()}/cohorts/`)).rows).toEqual([]); // 400: person_id missing
    const empty = await read('GET', `${P()}/?email=nobody@x.com`);
    expect(empty.res.body.results).toEqual([]);
    expect(empty.rows).toEqual([]);
  });

  it('does not record writes (the activity log has them) nor reads by another project’s key', async () => {
    const patch = await read('PATCH', `${P()}/${uuidOf.u3}/`, { properties: { x: 1 } });
    expect(patch.res.status).toBe(200);
    expect(patch.rows).toEqual([]);
    const other = await createAccount(api.orm);
    const res = await call(api.baseUrl, 'GET', `/api/projects/${other.projectId}/persons/${uuidOf.u1}/`, {
      key: other.apiKey,
      headers: { 'x-request-id': 'other-project-read' },
    });
    expect(res.status).toBe(404);
    expect(await rowsOf('other-project-read')).toEqual([]);
  });
});

describe('request ids', () => {
  it('keeps a sane X-Request-Id, replaces any other with a uuid, and records the one it answers with', async () => {
    for (const given of ['has space', 'x'.repeat(201), 'tab\there']) {
      const res = await call(api.baseUrl, 'GET', `${P()}/${uuidOf.u1}/`, {
        key: key.value,
        headers: { 'x-request-id': given },
      });
      const answered = res.headers.get('x-request-id')!;
      expect(answered).toMatch(/^[0-9a-f-]{36}$/);
      expect(await rowsOf(answered)).toMatchObject([{ action: 'person_retrieve' }]);
    }
    const none = await call(api.baseUrl, 'GET', `${P()}/${uuidOf.u1}/`, { key: key.value });
    expect(none.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    // Without X-Forwarded-For the socket's address is the client's.
    expect(await rowsOf(none.headers.get('x-request-id')!)).toMatchObject([{ client_address: '127.0.0.1' }]);
  });
});

describe('GET /persons/access_log and /persons/:id/access_log', () => {
  it('lists a person’s reads newest first, from `since`, in pages with next and previous, by id or uuid', async () => {
    const person = uuidOf.u2;
    const start = new Date();
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await read('GET', `${P()}/${person}/`)).requestId);
    const [{ id: numericId }] = await sql(api.orm, `select id::text from person where uuid = ?`, [person]);
    const since = encodeURIComponent(start.toISOString());
    const first = await call(api.baseUrl, 'GET', `${P()}/${numericId}/access_log/?since=${since}&limit=2`, {
      key: key.value,
    });
    expect(first.status).toBe(200);
    expect(first.body.results.map((r: any) => r.request_id)).toEqual([ids[2], ids[1]]);
    expect(first.body.results[0]).toMatchObject({
      action: 'person_retrieve',
      person_uuids: [person],
      user_id: account.userId,
      api_key_id: key.id,
      client_address: '198.51.100.7',
    });
    expect(first.body.previous).toBeNull();
    const second = await call(api.baseUrl, 'GET', first.body.next.replace(api.baseUrl, ''), { key: key.value });
    // Reading the first page added a row of this person (newer than all): the next page still goes on from where
    // the first page stopped, neither repeating a row nor showing the new one.
    expect(first.body.next).toContain(`through_id=`);
    expect(second.body.results.map((r: any) => r.action)).toEqual(['person_retrieve']);
    expect(second.body.results[0].request_id).toBe(ids[0]);
    expect(second.body.next).toBeNull();
    expect(second.body.previous).toContain('limit=2');
    const again = await call(api.baseUrl, 'GET', second.body.previous.replace(api.baseUrl, ''), { key: key.value });
    expect(again.body.results.map((r: any) => r.request_id)).toEqual([ids[2], ids[1]]);
    // A fresh first page shows the reads of the log too.
    const fresh = await call(api.baseUrl, 'GET', `${P()}/${person}/access_log/?since=${since}`, { key: key.value });
    expect(fresh.body.results.map((r: any) => r.action)).toEqual([
      'access_log_read',
      'access_log_read',
      'access_log_read',
      'person_retrieve',
      'person_retrieve',
      'person_retrieve',
    ]);
    // Another person's reads are not listed under this one.
    const project = await call(api.baseUrl, 'GET', `${P()}/access_log/?person_uuid=${uuidOf.u3}&since=${since}`, {
      key: key.value,
    });
    expect(project.body.results.every((r: any) => r.person_uuids.includes(uuidOf.u3))).toBe(true);
    expect(project.body.results.some((r: any) => ids.includes(r.request_id))).toBe(false);
  });

  it('lists the project’s reads (unfiltered: the persons of the page are recorded as read) and only its own', async () => {
    const other = await createAccount(api.orm);
    const res = await call(api.baseUrl, 'GET', `/api/projects/${other.projectId}/persons/access_log/`, {
      key: other.apiKey,
    });
    expect(res.body.results).toEqual([]);
    const mine = await read('GET', `${P()}/access_log/?limit=5`);
    expect(mine.res.body.results).toHaveLength(5);
    const named = new Set(mine.res.body.results.flatMap((r: any) => r.person_uuids));
    expect(mine.rows).toHaveLength(1);
    expect(new Set(mine.rows[0].person_uuids)).toEqual(named);
  });

  it('answers CSV, one row per read', async () => {
    const retrieved = await read('GET', `${P()}/${uuidOf.u1}/`);
    const res = await call(api.baseUrl, 'GET', `${P()}/${uuidOf.u1}/access_log/?format=csv&limit=1`, {
      key: key.value,
    });
    expect(res.headers.get('content-type')).toContain('text/csv');
    const [header, row] = res.text.trim().split('\r\n');
    expect(header.split(',')).toEqual(
      expect.arrayContaining(['action', 'person_uuids', 'request_id', 'client_address', 'timestamp', 'user_id']),
    );
    expect(row).toContain(retrieved.requestId);
    expect(res.headers.get('link')).toContain('format=csv');
  });

  it('refuses bad input with 400 and an unknown person with 404', async () => {
    const bad = await call(api.baseUrl, 'GET', `${P()}/access_log/?since=yesterday`, { key: key.value });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ type: 'validation_error', attr: 'since' });
    expect((await call(api.baseUrl, 'GET', `${P()}/access_log/?person_uuid=x`, { key: key.value })).status).toBe(400);
    expect((await call(api.baseUrl, 'GET', `${P()}/${randomUUID()}/access_log/`, { key: key.value })).status).toBe(404);
  });

  it('needs scope person:read', async () => {
    const noPersons = await createKeyWithId(api.orm, account.userId, { scopes: ['cohort:read'] });
    for (const path of [`${P()}/access_log/`, `${P()}/${uuidOf.u1}/access_log/`]) {
      const res = await call(api.baseUrl, 'GET', path, { key: noPersons.value });
      expect(res.status).toBe(403);
      expect(res.body.detail).toBe("API key missing required scope 'person:read'");
    }
    const ok = await call(api.baseUrl, 'GET', `${P()}/access_log/`, { key: key.value });
    expect(ok.status).toBe(200);
  });
});
