// Personless events (posthog-js's anonymous traffic) of known names are one INSERT, sent alone: one
// statement is atomic without BEGIN and COMMIT around it. Anything more (persons, a new event name, a
// warning) keeps the transaction. Counts what the API sends through its ORM's pool.
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { personUuidFor } from '../../../shared/persons/person-uuid.ts';
import { sql } from '../../db.ts';
import { call, createAccount, startApi } from '../../helpers.ts';

// With the API process's caches on, as it runs: the project and the suppressions come from memory.
const api = await startApi(undefined, { projectCache: true, suppressionCache: true });
afterAll(() => api.close());
const account = await createAccount(api.orm);

/** The statements (their first words) the API's pool runs while `run` runs. */
async function statementsDuring(run: () => Promise<void>): Promise<string[]> {
  const pool = (await api.orm.em.getConnection().getNativeClient()) as unknown as pg.Pool;
  const sent: string[] = [];
  const wrapped = new WeakSet<pg.PoolClient>();
  const onAcquire = (client: pg.PoolClient) => {
    if (wrapped.has(client)) return;
    wrapped.add(client);
    const query = client.query;
    client.query = function (this: pg.PoolClient, ...args: unknown[]) {
      const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text: string }).text;
      if (counting) sent.push(text.trim().split(/\s+/).slice(0, 2).join(' ').toLowerCase());
      return (query as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof client.query;
  };
  let counting = true;
  pool.on('acquire', onAcquire);
  try {
    await run();
  } finally {
    counting = false;
    pool.off('acquire', onAcquire);
  }
  return sent;
}

const personless = (distinctId: string, event = 'anonymous view') => ({
  event,
  distinct_id: distinctId,
  uuid: randomUUID(),
  properties: { $process_person_profile: false, $current_url: 'https://example.com' },
});
async function capture(batch: object[]) {
  const res = await call(api.baseUrl, 'POST', '/batch/', { body: { api_key: account.projectToken, batch } });
  expect(res.status).toBe(200);
}

describe('personless events', () => {
  it('of known names are one INSERT, no transaction; stored with their deterministic person uuid', async () => {
    await capture([personless('warm-up')]); // the definition and the project's ingested_event written
    const batch = [personless('anon-1'), personless('anon-2'), personless('anon-1')];
    const sent = await statementsDuring(() => capture(batch));
    expect(sent).toEqual(['insert into']);
    const stored = await sql(api.orm, `select distinct_id, person_id from event where uuid in (?) order by uuid`, [
      batch.map((e) => e.uuid),
    ]);
    expect(stored).toHaveLength(3);
    for (const row of stored) expect(row.person_id).toBe(personUuidFor(account.projectId, row.distinct_id));
  });

  it('with a new event name, or beside an event with a person, keep the transaction', async () => {
    const newName = await statementsDuring(() => capture([personless('anon-3', `new name ${randomUUID()}`)]));
    expect(newName[0]).toBe('begin');
    expect(newName.at(-1)).toBe('commit');
    const withPerson = await statementsDuring(() =>
      capture([personless('anon-4'), { event: 'anonymous view', distinct_id: 'someone', uuid: randomUUID() }]),
    );
    expect(withPerson[0]).toBe('begin');
    expect(withPerson.at(-1)).toBe('commit');
  });
});
