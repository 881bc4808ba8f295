// A signed receipt for every verified deletion request: the rows found before (equal to a direct count
// taken before the deletion) and after (all zero) in each store, verifiable with node:crypto and openssl
// against the served public key; a changed byte fails. Real API, real BullMQ worker, PostgreSQL and Redis.
import { canonicalJson } from '../../../shared/platform/canonical-json.ts';
import { execFile } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { EntityManager } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { failEventDeletesOf, sql } from '../../db.ts';
import { deletePersonData } from '../../../shared/deletions/job.ts';
import { capture } from '../../fixtures.ts';
import { call, eventually, manageJson, apiAndWorker } from '../../helpers.ts';
import { loadConfig } from '../../../shared/platform/config.ts';
import { receiptKeys, receiptSigner, verifyReceiptSignature } from '../../../shared/deletions/receipts.ts';

const exec = promisify(execFile);
const {
  prefix,
  api,
  worker,
  accounts: [account, other],
} = await apiAndWorker({ accounts: 2 });
const dir = await mkdtemp(join(tmpdir(), 'receipts-'));
afterAll(() => rm(dir, { recursive: true, force: true }));

const P = () => `/api/projects/${account.projectId}/persons`;
const get = (path: string, key = account.apiKey) => call(api.baseUrl, 'GET', path, { key });
const count = async (query: string, params: unknown[]) => (await sql(api.orm, query, params))[0].n as number;

/** Verifies with `openssl pkeyutl -verify` (exit status 0: valid). */
async function opensslVerifies(content: string, signatureB64: string, publicKeyPem: string): Promise<boolean> {
  const [body, sig, pub] = ['body.json', 'sig.bin', 'pub.pem'].map((f) => join(dir, f));
  await writeFile(body, content);
  await writeFile(sig, Buffer.from(signatureB64, 'base64'));
  await writeFile(pub, publicKeyPem);
  try {
    await exec('openssl', ['pkeyutl', '-verify', '-pubin', '-inkey', pub, '-rawin', '-in', body, '-sigfile', sig]);
    return true;
  } catch {
    return false;
  }
}

describe('a receipt for every verified request', () => {
  let receipts: any[];
  let before: Record<string, number>;
  let person: any;

  beforeAll(async () => {
    await capture(api.baseUrl, account.projectToken, [
      ...Array.from({ length: 12 }, (_, i) => ({ event: 'e', distinct_id: 'rc-victim', properties: { i } })),
      { event: '$identify', distinct_id: 'rc-victim', properties: { $anon_distinct_id: 'rc-device' } },
      { event: 'e', distinct_id: 'rc-device' },
      { event: '$set', distinct_id: 'rc-victim', properties: { $set: { email: 'private@example.com' } } },
      { event: 'e', distinct_id: 'rc-bystander' },
    ]);
    person = (await get(`${P()}/?distinct_id=rc-victim`)).body.results[0];
    const [{ id: cohortId }] = await sql(
      api.orm,
      `insert into cohort (project_id, name, is_static, count) values (?, 'static', true, 1) returning id`,
      [account.projectId],
    );
    await sql(api.orm, `insert into cohort_person (cohort_id, person_id) values (?, ?)`, [cohortId, person.id]);
    await sql(
      api.orm,
      `insert into feature_flag_hash_key_override (project_id, person_id, feature_flag_key, hash_key) values (?, ?, 'f', 'rc-device')`,
      [account.projectId, person.id],
    );
    for (const session of ['rc-s1', 'rc-s2']) {
      await sql(
        api.orm,
        `insert into session_recording (project_id, session_id, distinct_id, person_id, start_time, end_time)
         values (?, ?, 'rc-victim', ?, now(), now())`,
        [account.projectId, session, person.uuid],
      );
      await sql(
        api.orm,
        `insert into session_recording_snapshot (project_id, session_id, timestamp, data)
         select ?, ?, now(), '{}' from generate_series(1, 3)`,
        [account.projectId, session],
      );
    }
    // Events a tracking plan held back: two of the person's distinct ids' and one of a bystander's.
    for (const distinctId of ['rc-victim', 'rc-device', 'rc-bystander'])
      await sql(
        api.orm,
        `insert into quarantined_event (project_id, uuid, event, distinct_id, properties, timestamp, violations, plan_version)
         values (?, gen_random_uuid(), 'tap', ?, '{"email": "private@example.com"}', now(), '[]', 1)`,
        [account.projectId, distinctId],
      );
    // The direct count, taken before the deletion.
    const p = [account.projectId, person.id];
    before = {
      persons: await count(`select count(*)::int as n from person where project_id = ? and id = ?`, p),
      distinct_ids: await count(
        `select count(*)::int as n from person_distinct_id where project_id = ? and person_id = ?`,
        p,
      ),
      cohort_memberships: await count(`select count(*)::int as n from cohort_person where person_id = ?`, [person.id]),
      flag_hash_key_overrides: await count(
        `select count(*)::int as n from feature_flag_hash_key_override where project_id = ? and person_id = ?`,
        p,
      ),
      events: await count(
        `select count(*)::int as n from event where project_id = ? and (person_id = ? or distinct_id in ('rc-victim', 'rc-device'))`,
        [account.projectId, person.uuid],
      ),
      recordings: await count(
        `select count(*)::int as n from session_recording where project_id = ? and person_id = ?`,
        [account.projectId, person.uuid],
      ),
      quarantined_events: await count(
        `select count(*)::int as n from quarantined_event where project_id = ? and distinct_id in ('rc-victim', 'rc-device')`,
        [account.projectId],
      ),
      recording_snapshots: await count(
        `select count(*)::int as n from session_recording_snapshot where project_id = ? and session_id in ('rc-s1', 'rc-s2')`,
        [account.projectId],
      ),
    };
    expect(before).toEqual({
      persons: 1,
      distinct_ids: 2,
      cohort_memberships: 1,
      flag_hash_key_overrides: 1,
      events: 15,
      quarantined_events: 2,
      recordings: 2,
      recording_snapshots: 6,
    });
    const res = await call(api.baseUrl, 'DELETE', `${P()}/${person.uuid}/?delete_events=true&delete_recordings=true`, {
      key: account.apiKey,
    });
    expect(res.status).toBe(204);
    await worker.deps.queues.deletions.add('release-batch', { mode: 'weekly' });
    receipts = await eventually(async () => {
      const list = await get(`${P()}/deletion_receipts/?person_uuid=${person.uuid}`);
      return list.body.count === 2 ? list.body.results : null;
    });
  });

  it('counts before equal the direct count, every after is 0, with the statement that verified it', async () => {
    const events = receipts.find((r) => r.receipt.deletion_type === 'person_events');
    const recordings = receipts.find((r) => r.receipt.deletion_type === 'person_recordings');
    const personStores = ['persons', 'distinct_ids', 'cohort_memberships', 'flag_hash_key_overrides'];
    expect(Object.keys(events.receipt.stores).sort()).toEqual([...personStores, 'events', 'quarantined_events'].sort());
    expect(Object.keys(recordings.receipt.stores).sort()).toEqual(
      [...personStores, 'recordings', 'recording_snapshots'].sort(),
    );
    for (const receipt of [events, recordings])
      for (const [name, store] of Object.entries<any>(receipt.receipt.stores)) {
        expect(store.before, name).toBe(before[name]);
        expect(store.after, name).toBe(0);
        expect(store.verified_by, name).toMatch(/^select count\(\*\)/);
      }
    // And nothing is left indeed; the bystander's quarantined event stays.
    expect(
      await count(`select count(*)::int as n from quarantined_event where project_id = ? group by distinct_id`, [
        account.projectId,
      ]),
    ).toBe(1);
    expect(
      await count(`select count(*)::int as n from event where project_id = ? and person_id = ?`, [
        account.projectId,
        person.uuid,
      ]),
    ).toBe(0);
    expect(events.receipt).toMatchObject({
      receipt_version: 1,
      request_id: events.request_id,
      project_id: account.projectId,
      person_uuid: person.uuid,
      deletion_type: 'person_events',
      mode: 'weekly',
      requested_by: { user_id: account.userId, api_key_id: expect.any(String), api_key_label: expect.any(String) },
      key_id: events.key_id,
      algorithm: 'Ed25519',
    });
    expect([...events.receipt.distinct_ids].sort()).toEqual(['rc-device', 'rc-victim']);
    for (const time of ['cutoff', 'accepted_at', 'started_at', 'verified_at'])
      expect(events.receipt[time]).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    // It holds no property of the person: it outlives them.
    expect(JSON.stringify(receipts)).not.toContain('private@example.com');
  });

  it('the signature verifies with node:crypto and openssl against the served key; a changed byte fails', async () => {
    const keys = await get(`${P()}/deletion_receipts/public_key/`);
    expect(keys.status).toBe(200);
    expect(keys.body.public_key).toMatch(/^-----BEGIN PUBLIC KEY-----/);
    for (const r of receipts) {
      const key = keys.body.keys.find((k: any) => k.key_id === r.key_id);
      expect(key).toBeDefined();
      expect(r.signed_content).toBe(canonicalJson(r.receipt));
      expect(verifyReceiptSignature(r.signed_content, r.signature, key.public_key)).toBe(true);
      expect(await opensslVerifies(r.signed_content, r.signature, key.public_key)).toBe(true);
      // One byte changed: a digit of a count, then the signature itself.
      const changed = r.signed_content.replace('"after":0', '"after":1');
      expect(changed).not.toBe(r.signed_content);
      expect(verifyReceiptSignature(changed, r.signature, key.public_key)).toBe(false);
      expect(await opensslVerifies(changed, r.signature, key.public_key)).toBe(false);
      const sig = Buffer.from(r.signature, 'base64');
      sig[10] ^= 1;
      expect(verifyReceiptSignature(r.signed_content, sig.toString('base64'), key.public_key)).toBe(false);
      expect(await opensslVerifies(r.signed_content, sig.toString('base64'), key.public_key)).toBe(false);
    }
  });

  it('shows a request with its receipt from the command line (deletion show), the same receipt the API serves', async () => {
    const [r] = receipts;
    const env = { REDIS_PREFIX: prefix };
    const shown = await manageJson(['deletion', 'show', '--id', r.request_id], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.json.request).toMatchObject({ id: r.request_id, status: 'completed', project_id: account.projectId });
    expect(shown.json.receipt).toEqual(r);
    const elsewhere = await manageJson(['deletion', 'show', '--id', r.request_id, '--project', '999999999'], env);
    expect(elsewhere.code).toBe(1);
    expect(elsewhere.stderr).toContain(`No deletion request ${r.request_id} in project 999999999`);
    expect((await manageJson(['deletion', 'show', '--id', 'x1'], env)).code).toBe(1);
  }, 120_000);

  it('serves one receipt as JSON and as CSV', async () => {
    const [r] = receipts;
    const one = await get(`${P()}/deletion_receipts/${r.request_id}/`);
    expect(one.status).toBe(200);
    expect(one.body).toEqual(r);
    const csv = await get(`${P()}/deletion_receipts/${r.request_id}/?format=csv`);
    expect(csv.status).toBe(200);
    expect(csv.headers.get('content-type')).toMatch(/^text\/csv/);
    const [header, row] = csv.text.trim().split('\r\n');
    expect(header).toContain('receipt.stores.persons.before');
    expect(header).toContain('signature');
    expect(row).toContain(r.signature);
    const list = await get(`${P()}/deletion_receipts/?format=csv&person_uuid=${person.uuid}`);
    expect(list.text.trim().split('\r\n')).toHaveLength(3);
  });

  it('unknown, malformed and other projects’ ids are 404 with PostHog’s body', async () => {
    const notFound = { type: 'invalid_request', code: 'not_found', detail: 'Not found.', attr: null };
    const [r] = receipts;
    for (const path of [
      `${P()}/deletion_receipts/999999999/`,
      `${P()}/deletion_receipts/abc/`,
      `${P()}/deletion_receipts/99999999999999999999999/`,
      `/api/projects/${other.projectId}/persons/deletion_receipts/${r.request_id}/`,
    ]) {
      const res = await get(path, path.includes(`/${other.projectId}/`) ? other.apiKey : account.apiKey);
      expect(res.status, path).toBe(404);
      expect(res.body, path).toEqual(notFound);
    }
    const otherList = await get(`/api/projects/${other.projectId}/persons/deletion_receipts/`, other.apiKey);
    expect(otherList.body.count).toBe(0);
  });
});

describe('a batch (bulk_delete): each receipt counts its own request', () => {
  it('events before per person equal a direct count, though one pass deletes them all', async () => {
    const ids = ['rb-0', 'rb-1', 'rb-2'];
    await capture(
      api.baseUrl,
      account.projectToken,
      ids.flatMap((id, i) => Array.from({ length: 2 * i + 1 }, () => ({ event: 'e', distinct_id: id }))),
    );
    const persons = await Promise.all(ids.map(async (id) => (await get(`${P()}/?distinct_id=${id}`)).body.results[0]));
    const direct = new Map<string, number>();
    for (const p of persons)
      direct.set(
        p.uuid,
        await count(
          `select count(*)::int as n from event where project_id = ? and (person_id = ? or distinct_id = ?)`,
          [account.projectId, p.uuid, p.distinct_ids[0]],
        ),
      );
    expect([...direct.values()]).toEqual([1, 3, 5]);
    const res = await call(api.baseUrl, 'POST', `${P()}/bulk_delete/`, {
      key: account.apiKey,
      body: { distinct_ids: ids, delete_events: true },
    });
    expect(res.status).toBeLessThan(300);
    await worker.deps.queues.deletions.add('release-batch', { mode: 'weekly' });
    for (const p of persons) {
      const [receipt] = await eventually(async () => {
        const list = await get(`${P()}/deletion_receipts/?person_uuid=${p.uuid}`);
        return list.body.count === 1 ? list.body.results : null;
      });
      expect(receipt.receipt.stores.events).toMatchObject({ before: direct.get(p.uuid), after: 0 });
      expect(receipt.receipt.stores.persons).toMatchObject({ before: 1, after: 0 });
    }
  });
});

describe('a deletion retried after a partial failure', () => {
  it('events before still equal a direct count taken before the first attempt: each delete counted its own rows', async () => {
    await capture(api.baseUrl, account.projectToken, [{ event: 'e', distinct_id: 'rr-victim' }]);
    const person = (await get(`${P()}/?distinct_id=rr-victim`)).body.results[0];
    // Old events (deleted by the first window) and recent ones under another distinct id of the person
    // (their window fails the first time).
    await sql(
      api.orm,
      `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
       select gen_random_uuid(), ?, 'old', 'rr-victim', ?::uuid, '{}'::jsonb, '2001-01-01'::timestamptz + g * interval '1 hour', '2001-02-01'
         from generate_series(1, 4) g
       union all
       select gen_random_uuid(), ?, 'recent', 'rr-other', ?::uuid, '{}'::jsonb, now() - interval '1 hour', now() - interval '1 hour'
         from generate_series(1, 3) g`,
      [account.projectId, person.uuid, account.projectId, person.uuid],
    );
    const res = await call(api.baseUrl, 'POST', `${P()}/${person.uuid}/delete_events/`, { key: account.apiKey });
    expect(res.status).toBe(200);
    const requestId = String(res.body.deletion_requests[0].id);
    const direct = await count(
      `select count(*)::int as n from event where project_id = ? and (person_id = ? or distinct_id = 'rr-victim')`,
      [account.projectId, person.uuid],
    );
    expect(direct).toBe(8);
    const job = { id: 'direct', data: { deletionId: requestId }, updateProgress: async () => undefined } as any;
    const restore = await failEventDeletesOf(api.orm, 'rr-other');
    try {
      await expect(deletePersonData(job, worker.deps)).rejects.toThrow('injected fault');
    } finally {
      await restore();
    }
    // Partly done: the old events are gone (and counted), the recent ones not.
    const left = await count(`select count(*)::int as n from event where project_id = ? and person_id = ?`, [
      account.projectId,
      person.uuid,
    ]);
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThan(direct);
    expect(await deletePersonData(job, worker.deps)).toMatchObject({ requests: 1 });
    const [receipt] = (await get(`${P()}/deletion_receipts/?person_uuid=${person.uuid}`)).body.results;
    expect(receipt.receipt.stores.events).toMatchObject({ before: direct, after: 0 });
  });
});

describe('a receipt is signed after every count after', () => {
  it('its verified_at is not before the end of the events survivors count, and is the request’s delete_verified_at', async () => {
    await capture(api.baseUrl, account.projectToken, [
      { event: 'e', distinct_id: 'rv-victim' },
      { event: 'e', distinct_id: 'rv-victim' },
    ]);
    const person = (await get(`${P()}/?distinct_id=rv-victim`)).body.results[0];
    const res = await call(api.baseUrl, 'POST', `${P()}/${person.uuid}/delete_events/`, { key: account.apiKey });
    expect(res.status).toBe(200);
    const requestId = String(res.body.deletion_requests[0].id);
    // The event store's survivors count, taking a while as on a large table (the job's other statements
    // run meanwhile), then the database's clock once it has answered.
    const counted: string[] = [];
    const events = worker.deps.events;
    const deps = {
      ...worker.deps,
      events: {
        ...events,
        countPersonEvents: async (...args: Parameters<typeof events.countPersonEvents>) => {
          await sql(api.orm, 'select pg_sleep(0.2)');
          const n = await events.countPersonEvents(...args);
          const [{ t }] = await sql(
            api.orm,
            `select to_char(clock_timestamp() at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as t`,
          );
          counted.push(t);
          return n;
        },
      },
    };
    const job = { id: 'verified-at', data: { deletionId: requestId }, updateProgress: async () => undefined } as any;
    expect(await deletePersonData(job, deps)).toMatchObject({ requests: 1 });
    expect(counted).toHaveLength(1);
    const [receipt] = (await get(`${P()}/deletion_receipts/?person_uuid=${person.uuid}`)).body.results;
    expect(receipt.receipt.stores.events).toMatchObject({ before: 2, after: 0 });
    // Same format (ISO-8601 UTC, microseconds): the strings order as the instants.
    expect(receipt.receipt.verified_at >= counted[0], `${receipt.receipt.verified_at} >= ${counted[0]}`).toBe(true);
    const [stored] = await sql(
      api.orm,
      `select to_char(delete_verified_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as t from async_deletion where id = ?`,
      [requestId],
    );
    expect(stored.t).toBe(receipt.receipt.verified_at);
  });
});

describe('keys', () => {
  it('a configured key signs, and every key that signed stays served with its id (rotation)', async () => {
    const generated = (await get(`${P()}/deletion_receipts/public_key/`)).body;
    const { privateKey } = generateKeyPairSync('ed25519');
    const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const em = api.orm.em.fork() as EntityManager;
    const configured = await receiptSigner(em, pem);
    expect(configured.keyId).not.toBe(generated.key_id);
    const ids = (await receiptKeys(em)).map((k) => k.key_id);
    expect(ids).toContain(configured.keyId);
    expect(ids).toContain(generated.key_id);
    // The generated key is the one until a key is configured; a second call finds the same.
    expect((await receiptSigner(em.fork() as EntityManager, '')).keyId).toBe(generated.key_id);
  });

  it('DELETION_RECEIPT_PRIVATE_KEY must be an Ed25519 PEM; a file works too', async () => {
    const env = (extra: Record<string, string>) => loadConfig({ ...extra });
    expect(() => env({ DELETION_RECEIPT_PRIVATE_KEY: 'nope' })).toThrow(
      'DELETION_RECEIPT_PRIVATE_KEY must be a PEM private key',
    );
    const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({ type: 'pkcs8', format: 'pem' });
    expect(() => env({ DELETION_RECEIPT_PRIVATE_KEY: rsa.toString() })).toThrow('must be an Ed25519 key, got rsa');
    const pem = generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const file = join(dir, 'key.pem');
    await writeFile(file, pem);
    expect(env({ DELETION_RECEIPT_PRIVATE_KEY_FILE: file }).deletion.receiptPrivateKey).toBe(pem);
    expect(env({ DELETION_RECEIPT_PRIVATE_KEY: pem.replace(/\n/g, '\\n') }).deletion.receiptPrivateKey).toBe(pem);
    expect(() => env({ DELETION_RECEIPT_PRIVATE_KEY_FILE: join(dir, 'missing.pem') })).toThrow('cannot be read');
  });
});
