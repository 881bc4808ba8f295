// Two API processes (api/main.ts, each with its plan cache listening on tracking_plan_changed): a plan
// or drop rule put through one is applied by the other's capture within 5 s. The other process has
// served the project first, so it holds the old plan in memory: only the notification can change it.
import { randomUUID } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { sql } from '../../db.ts';
import { call, createAccount, type TestAccount } from '../../helpers.ts';
import { startApiProcess } from '../../services.ts';

/** The bound: every API process applies a new plan or rule within this. */
const APPLIED_WITHIN_MS = 5000;

let orm: MikroORM;
let account: TestAccount;
let one: Awaited<ReturnType<typeof startApiProcess>>;
let two: Awaited<ReturnType<typeof startApiProcess>>;

beforeAll(async () => {
  orm = await initOrm(process.env.DATABASE_URL!);
  account = await createAccount(orm);
  [one, two] = await Promise.all([
    startApiProcess({ RATE_LIMIT_ENABLED: 'false' }),
    startApiProcess({ RATE_LIMIT_ENABLED: 'false' }),
  ]);
}, 180_000);
afterAll(async () => {
  await Promise.all([one?.stop(), two?.stop()]);
  await orm?.close();
});

const putThrough = async (baseUrl: string, path: string, body: unknown) => {
  const res = await call(baseUrl, 'PUT', `/api/projects/${account.projectId}/tracking_plan${path}`, {
    key: account.apiKey,
    body,
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
};

/** Captures one event through `baseUrl`; answers whether it was stored. */
async function storedThrough(baseUrl: string, event: string, properties: Record<string, unknown>) {
  const uuid = randomUUID();
  const res = await call(baseUrl, 'POST', '/batch/', {
    body: { api_key: account.projectToken, batch: [{ event, distinct_id: 'd', uuid, properties }] },
  });
  expect(res.status).toBe(200);
  const found = await sql(orm, `select 1 from event where project_id = ? and uuid = ?`, [account.projectId, uuid]);
  const held = await sql(orm, `select 1 from quarantined_event where project_id = ? and uuid = ?`, [
    account.projectId,
    uuid,
  ]);
  return { stored: found.length === 1, quarantined: held.length === 1 };
}

/** Polls capture through `baseUrl` until `done` holds; answers how long it took from `since`. */
async function appliedAfter(since: number, check: () => Promise<boolean>): Promise<number> {
  for (;;) {
    if (await check()) return Date.now() - since;
    if (Date.now() - since > APPLIED_WITHIN_MS * 4) throw new Error('never applied');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('two API processes', () => {
  it('a plan put through one is enforced by the other within 5 s, and so is a drop rule', async () => {
    // The second process serves the project first: it now holds "no plan".
    expect(await storedThrough(two.baseUrl, 'order', {})).toEqual({ stored: true, quarantined: false });

    const planned = Date.now();
    await putThrough(one.baseUrl, '/', {
      events: { order: { mode: 'quarantine', schema: { type: 'object', required: ['total'] } } },
    });
    const planMs = await appliedAfter(planned, async () => (await storedThrough(two.baseUrl, 'order', {})).quarantined);
    expect(planMs).toBeLessThan(APPLIED_WITHIN_MS);
    expect(await storedThrough(two.baseUrl, 'order', { total: 3 })).toEqual({ stored: true, quarantined: false });

    expect((await storedThrough(two.baseUrl, 'ping', {})).stored).toBe(true);
    const ruled = Date.now();
    await putThrough(one.baseUrl, '/drop_rules/', { drop_rules: [{ event: 'ping' }] });
    const ruleMs = await appliedAfter(ruled, async () => !(await storedThrough(two.baseUrl, 'ping', {})).stored);
    expect(ruleMs).toBeLessThan(APPLIED_WITHIN_MS);
    // The rule's version kept the plan: orders are still checked on both.
    expect((await storedThrough(one.baseUrl, 'order', {})).quarantined).toBe(true);
    expect((await storedThrough(two.baseUrl, 'order', {})).quarantined).toBe(true);
  }, 120_000);
});
