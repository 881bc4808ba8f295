// The tracking plan end to end through the API: a violating event is quarantined (listed with its
// violations), replayed after the plan is fixed and stored once — also when two replays run at once;
// stamp, omit, drop and a drop rule at capture; the ingestion warnings each leaves; the violation
// counters in the event definitions API; the diff of a proposed plan; bad documents are 400s.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { apiWithAccount, call, createAccount, type TestAccount } from '../../helpers.ts';

const METRICS_TOKEN = 'tracking-plan-metrics';
const { api, account } = await apiWithAccount((config) => {
  config.metricsToken = METRICS_TOKEN;
});

const rest = (a: TestAccount, method: string, path: string, body?: unknown, headers?: Record<string, string>) =>
  call(api.baseUrl, method, `/api/projects/${a.projectId}/tracking_plan${path}`, { key: a.apiKey, body, headers });

async function capture(a: TestAccount, batch: object[]) {
  const res = await call(api.baseUrl, 'POST', '/batch/', { body: { api_key: a.projectToken, batch } });
  expect(res.status).toBe(200);
}

const ev = (event: string, properties: Record<string, unknown>, distinctId = 'user-1') => ({
  event,
  distinct_id: distinctId,
  uuid: randomUUID(),
  properties,
});

const stored = async (a: TestAccount, uuid: string) =>
  sql<{ properties: Record<string, unknown> }>(
    api.orm,
    `select properties from event where project_id = ? and uuid = ?`,
    [a.projectId, uuid],
  );
const warningTypes = async (a: TestAccount, uuid: string) =>
  (
    await sql<{ type: string }>(
      api.orm,
      `select type from ingestion_warning where project_id = ? and event_uuid = ? order by type`,
      [a.projectId, uuid],
    )
  ).map((r) => r.type);

const signup = {
  type: 'object',
  required: ['plan'],
  properties: { plan: { enum: ['free', 'pro'] }, seats: { type: 'integer' } },
};

async function putPlan(a: TestAccount, document: object) {
  const res = await rest(a, 'PUT', '/', document);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body;
}

describe('tracking plan', () => {
  it('without a plan, capture stores events as sent and GET answers version null', async () => {
    const a = await createAccount(api.orm);
    const e = ev('signed up', { plan: 'gold' });
    await capture(a, [e]);
    expect(await stored(a, e.uuid)).toHaveLength(1);
    const res = await rest(a, 'GET', '/');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ version: null, document: null, created_at: null, created_by_id: null });
  });

  it('PUT makes versions with who and when; bad documents and schemas are 400s naming where', async () => {
    const a = await createAccount(api.orm);
    const first = await putPlan(a, { events: { 'signed up': { mode: 'quarantine', schema: signup } } });
    expect(first.version).toBe(1);
    expect(first.created_by_id).toBe(a.userId);
    const second = await putPlan(a, { default_mode: 'allow', events: {} });
    expect(second.version).toBe(2);
    const versions = await rest(a, 'GET', '/versions/');
    expect(versions.body.count).toBe(2);
    expect(versions.body.results.map((v: { version: number }) => v.version)).toEqual([2, 1]);
    const badMode = await rest(a, 'PUT', '/', { events: { x: { mode: 'explode' } } });
    expect(badMode.status).toBe(400);
    expect(badMode.body.type).toBe('validation_error');
    const badSchema = await rest(a, 'PUT', '/', { events: { x: { schema: { type: 'nonsense' } } } });
    expect(badSchema.status).toBe(400);
    expect(badSchema.body.attr).toBe('events.x.schema');
    const unknown = await rest(a, 'PUT', '/', { events: {}, enforce: true });
    expect(unknown.status).toBe(400);
    expect((await rest(a, 'GET', '/')).body.version).toBe(2);
  });

  it('quarantines a violating event, lists it, replays it after the plan is fixed: stored once', async () => {
    const a = await createAccount(api.orm);
    await putPlan(a, { events: { 'signed up': { mode: 'quarantine', schema: signup } } });
    const bad = ev('signed up', { plan: 'enterprise', seats: 3 });
    const good = ev('signed up', { plan: 'pro' });
    await capture(a, [bad, good]);
    expect(await stored(a, bad.uuid)).toHaveLength(0);
    expect(await stored(a, good.uuid)).toHaveLength(1);
    expect(await warningTypes(a, bad.uuid)).toEqual(['event_quarantined_by_plan']);
    // An SDK's retry holds nothing twice.
    await capture(a, [bad]);

    const listed = await rest(a, 'GET', '/quarantine/?event=signed%20up');
    expect(listed.status).toBe(200);
    expect(listed.body.count).toBe(1);
    expect(listed.body.results[0]).toMatchObject({
      uuid: bad.uuid,
      event: 'signed up',
      plan_version: 1,
      violations: [{ kind: 'enum', property: 'plan' }],
    });
    expect((await rest(a, 'GET', '/quarantine/?event=other')).body.count).toBe(0);

    // Under the same plan, a replay keeps it.
    const kept = await rest(a, 'POST', '/quarantine/replay/', {});
    expect(kept.status).toBe(200);
    expect(kept.body).toMatchObject({ selected: 1, stored: 0, still_violating: 1 });

    await putPlan(a, {
      events: {
        'signed up': { mode: 'quarantine', schema: { ...signup, properties: { plan: { type: 'string' } } } },
      },
    });
    const dry = await rest(a, 'POST', '/quarantine/replay/', { dry_run: true });
    expect(dry.body).toMatchObject({ dry_run: true, selected: 1, stored: 1 });
    expect(await stored(a, bad.uuid)).toHaveLength(0);

    const replayed = await rest(a, 'POST', '/quarantine/replay/', { event: 'signed up' }, { 'Idempotency-Key': 'k1' });
    expect(replayed.status).toBe(200);
    expect(replayed.body).toMatchObject({ status: 'done', selected: 1, stored: 1, still_violating: 0 });
    expect(await stored(a, bad.uuid)).toHaveLength(1);
    expect((await rest(a, 'GET', '/quarantine/')).body.count).toBe(0);
    // A retry with the key answers the first answer and stores nothing more.
    const again = await rest(a, 'POST', '/quarantine/replay/', { event: 'signed up' }, { 'Idempotency-Key': 'k1' });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(replayed.body);
    // It went through ingestion: the person exists.
    const persons = await sql(api.orm, `select 1 from person_distinct_id where project_id = ? and distinct_id = ?`, [
      a.projectId,
      'user-1',
    ]);
    expect(persons).toHaveLength(1);
  });

  it('two concurrent replays store each quarantined event once', async () => {
    const a = await createAccount(api.orm);
    await putPlan(a, { events: { buy: { mode: 'quarantine', schema: { required: ['price'] } } } });
    const batch = Array.from({ length: 300 }, (_, i) => ev('buy', { n: i }, `buyer-${i % 7}`));
    await capture(a, batch);
    expect((await rest(a, 'GET', '/quarantine/?limit=1')).body.count).toBe(300);
    await putPlan(a, { events: { buy: { mode: 'quarantine', schema: { type: 'object' } } } });
    const [one, two] = await Promise.all([
      rest(a, 'POST', '/quarantine/replay/', {}),
      rest(a, 'POST', '/quarantine/replay/', {}),
    ]);
    expect(one.status).toBe(200);
    expect(two.status).toBe(200);
    expect(one.body.stored + two.body.stored).toBe(300);
    const [{ n, distinct }] = await sql<{ n: number; distinct: number }>(
      api.orm,
      `select count(*)::int as n, count(distinct uuid)::int as distinct from event where project_id = ? and event = 'buy'`,
      [a.projectId],
    );
    expect({ n, distinct }).toEqual({ n: 300, distinct: 300 });
  });

  it('replay is a closed request: an unknown member or a non-boolean dry_run is a 400', async () => {
    const a = await createAccount(api.orm);
    expect((await rest(a, 'POST', '/quarantine/replay/', { dryRun: true })).status).toBe(400);
    expect((await rest(a, 'POST', '/quarantine/replay/', { dry_run: 'yes' })).status).toBe(400);
  });

  it('a person deleted after the event was quarantined stays deleted: the replay drops it', async () => {
    const a = await createAccount(api.orm);
    await putPlan(a, { events: { buy: { mode: 'quarantine', schema: { required: ['price'] } } } });
    const e = ev('buy', {}, 'gone-user');
    await capture(a, [e]);
    await sql(
      api.orm,
      `insert into async_deletion (project_id, deletion_type, key, mode, distinct_ids, created_at)
       values (?, 'person', ?, 'immediate', array['gone-user'], now() + interval '1 second')`,
      [a.projectId, randomUUID()],
    );
    await putPlan(a, { events: { buy: { mode: 'quarantine' } } });
    const res = await rest(a, 'POST', '/quarantine/replay/', {});
    expect(res.body).toMatchObject({ selected: 1, stored: 0, dropped: 1 });
    expect(await stored(a, e.uuid)).toHaveLength(0);
    expect(await warningTypes(a, e.uuid)).toContain('event_dropped_person_deleted');
  });

  it('stamp, omit, drop and a drop rule, each with its warning; allow stores as sent and counts', async () => {
    const a = await createAccount(api.orm);
    const needsPlan = { type: 'object', required: ['plan'], properties: { plan: { type: 'string' } } };
    await putPlan(a, {
      events: {
        stamped: { mode: 'stamp', schema: needsPlan },
        omitted: { mode: 'omit', schema: { properties: { plan: { type: 'string' }, seats: { type: 'integer' } } } },
        dropped: { mode: 'drop', schema: needsPlan },
        allowed: { mode: 'allow', schema: needsPlan },
      },
      drop_rules: [{ event: 'noise' }, { property: { key: 'bot', value: true } }, { distinct_id: 'spammer' }],
    });
    const stamped = ev('stamped', { other: 1 });
    const omitted = ev('omitted', { plan: 7, seats: 'many', keep: 'yes' });
    const dropped = ev('dropped', {});
    const allowed = ev('allowed', {});
    const noise = ev('noise', { plan: 'x' });
    const bot = ev('anything', { bot: true });
    const notBot = ev('anything', { bot: false });
    const spam = ev('anything', {}, 'spammer');
    await capture(a, [stamped, omitted, dropped, allowed, noise, bot, notBot, spam]);

    const [s] = await stored(a, stamped.uuid);
    expect(s.properties.$plan_violations).toEqual([
      { kind: 'required', property: 'plan', message: expect.any(String) },
    ]);
    expect(await warningTypes(a, stamped.uuid)).toEqual(['event_plan_violations_stamped']);
    const [o] = await stored(a, omitted.uuid);
    expect(o.properties).toMatchObject({ keep: 'yes' });
    expect(o.properties).not.toHaveProperty('plan');
    expect(o.properties).not.toHaveProperty('seats');
    expect(await warningTypes(a, omitted.uuid)).toEqual(['event_plan_properties_omitted']);
    expect(await stored(a, dropped.uuid)).toHaveLength(0);
    expect(await warningTypes(a, dropped.uuid)).toEqual(['event_dropped_by_plan']);
    const [al] = await stored(a, allowed.uuid);
    expect(al.properties).toEqual({});
    expect(await warningTypes(a, allowed.uuid)).toEqual([]);
    for (const e of [noise, bot, spam]) {
      expect(await stored(a, e.uuid)).toHaveLength(0);
      expect(await warningTypes(a, e.uuid)).toEqual(['event_dropped_by_rule']);
    }
    expect(await stored(a, notBot.uuid)).toHaveLength(1);

    // The counters show in the event definitions API (list and retrieve).
    const list = await call(api.baseUrl, 'GET', `/api/projects/${a.projectId}/event_definitions/?search=allowed`, {
      key: a.apiKey,
    });
    const def = list.body.results.find((d: { name: string }) => d.name === 'allowed');
    expect(def.plan_violations).toMatchObject({
      total: 1,
      counts: [{ plan_version: 1, kind: 'required', count: 1 }],
    });
    const one = await call(api.baseUrl, 'GET', `/api/projects/${a.projectId}/event_definitions/${def.id}/`, {
      key: a.apiKey,
    });
    expect(one.body.plan_violations.total).toBe(1);
    // And in Prometheus.
    const metrics = await fetch(`${api.baseUrl}/metrics`, {
      headers: { authorization: `Bearer ${METRICS_TOKEN}` },
    }).then((r) => r.text());
    expect(metrics).toMatch(/tracking_plan_violations_total\{kind="required"\} [1-9]/);
    expect(metrics).toMatch(/tracking_plan_events_total\{outcome="drop_rule"\} [1-9]/);
  });

  it('drop rules alone, without a plan, through …/drop_rules/', async () => {
    const a = await createAccount(api.orm);
    const res = await rest(a, 'PUT', '/drop_rules/', { drop_rules: [{ event: 'heartbeat' }] });
    expect(res.status).toBe(200);
    expect((await rest(a, 'GET', '/drop_rules/')).body).toEqual({ version: 1, drop_rules: [{ event: 'heartbeat' }] });
    const beat = ev('heartbeat', {});
    const other = ev('other', {});
    await capture(a, [beat, other]);
    expect(await stored(a, beat.uuid)).toHaveLength(0);
    expect(await stored(a, other.uuid)).toHaveLength(1);
  });

  it("diff answers what a proposed plan changes and how many of the last 7 days' events it would find violating", async () => {
    const a = await createAccount(api.orm);
    await putPlan(a, { events: { a: { schema: { type: 'object' } }, gone: {} } });
    await capture(a, [ev('a', { x: 1 }), ev('a', { x: 'y' }), ev('b', {})]);
    const res = await rest(a, 'POST', '/diff/', {
      events: { a: { mode: 'quarantine', schema: { properties: { x: { type: 'integer' } } } }, c: {} },
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      current_version: 1,
      events_added: ['c'],
      events_removed: ['gone'],
      events_changed: [{ event: 'a', schema_changed: true, mode_before: 'allow', mode_after: 'quarantine' }],
      last_7_days: { events: 3, checked: 3, sampled: false, would_violate: 1, violate_now: 0 },
    });
    expect(res.body.last_7_days.by_event).toEqual([{ event: 'a', would_violate: 1, mode: 'quarantine' }]);
  });
});

void account;
