// A deletion request's cutoff is kept to the microsecond on its way through the worker (the request is
// loaded through its entity, AsyncDeletion): data recorded in the cutoff's last millisecond but before it is
// deleted, data after it is kept.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { loadConfig } from '../../../shared/platform/config.ts';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { logger } from '../../../shared/platform/logger.ts';
import { deletePersonData } from '../../../shared/deletions/job.ts';
import type { WorkerDeps } from '../../../worker/deps.ts';
import { createEventStore } from '../../../shared/events/create.ts';
import { sql } from '../../db.ts';
import { createAccount, type TestAccount } from '../../helpers.ts';

const CUTOFF = '2024-01-02 03:04:05.123456+00';
const BEFORE = '2024-01-02 03:04:05.1234+00'; // after the cutoff's millisecond starts, before the cutoff
const AFTER = '2024-01-02 03:04:05.123457+00';

let orm: MikroORM;
let deps: WorkerDeps;
let account: TestAccount;
beforeAll(async () => {
  const config = loadConfig();
  orm = await initOrm(config.databaseUrl, 2);
  // No Redis: the job enqueues nothing for a handful of rows and no webhook (vacuums only past thousands).
  deps = {
    config,
    orm,
    events: createEventStore(config, orm),
    logger,
    connection: null,
    // Nothing is enqueued: no webhook is subscribed here, so the job hands over no delivery.
    queues: { webhooks: null },
  } as unknown as WorkerDeps;
  account = await createAccount(orm);
});
afterAll(() => orm?.close());

const request = async (type: 'person_events' | 'person_recordings', person: string, distinctId: string) =>
  (
    await sql<{ id: string }>(
      orm,
      `insert into async_deletion (project_id, deletion_type, key, mode, distinct_ids, cutoff)
       values (?, ?, ?, 'immediate', ?::text[], ?) returning id::text`,
      [account.projectId, type, person, `{${distinctId}}`, CUTOFF],
    )
  )[0].id;
const run = (id: string) =>
  deletePersonData({ id: 'direct', data: { deletionId: id }, updateProgress: async () => undefined } as any, deps);

describe('a deletion request’s cutoff', () => {
  it('bounds the events deleted to the microsecond', async () => {
    const person = randomUUID();
    for (const [distinctId, at] of [
      ['cutoff-events', BEFORE],
      ['cutoff-events', AFTER],
    ])
      await sql(
        orm,
        `insert into event (uuid, project_id, event, distinct_id, person_id, timestamp, created_at) values (?, ?, 'e', ?, ?, ?, ?)`,
        [randomUUID(), account.projectId, distinctId, person, at, at],
      );
    const id = await request('person_events', person, 'cutoff-events');
    expect(await run(id)).toEqual({ deleted: 1, requests: 1 });
    const left = await sql<{ at: string }>(
      orm,
      `select to_char(timestamp at time zone 'UTC', 'SS.US') as at from event where project_id = ? and person_id = ?`,
      [account.projectId, person],
    );
    expect(left).toEqual([{ at: '05.123457' }]);
  });

  it('bounds the recordings deleted to the microsecond', async () => {
    const person = randomUUID();
    for (const [session, at] of [
      ['cutoff-before', BEFORE],
      ['cutoff-after', AFTER],
    ])
      await sql(
        orm,
        `insert into session_recording (project_id, session_id, distinct_id, person_id, start_time, end_time, created_at)
         values (?, ?, 'cutoff-recordings', ?, ?, ?, ?)`,
        [account.projectId, `${session}-${person}`, person, at, at, at],
      );
    const id = await request('person_recordings', person, 'cutoff-recordings');
    expect(await run(id)).toEqual({ deleted: 1, requests: 1 });
    const left = await sql<{ session_id: string }>(
      orm,
      `select session_id from session_recording where project_id = ? and person_id = ?`,
      [account.projectId, person],
    );
    expect(left).toEqual([{ session_id: `cutoff-after-${person}` }]);
  });
});
