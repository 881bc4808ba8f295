// An access export with EVENT_STORE=clickhouse: a person's events still only in PostgreSQL's buffer,
// shipped and still buffered (in both stores), and shipped and trimmed from PostgreSQL (ClickHouse only)
// are each exported once; a copy ClickHouse holds twice counts once. The archive verifies with tar,
// sha256sum -c and openssl, and its event count equals a SQL count over both stores.
import { randomUUID } from 'node:crypto';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildAccessExport } from '../../../shared/access-exports/index.ts';
import { exportById, insertExport } from '../../../shared/access-exports/store.ts';
import { receiptSigner } from '../../../shared/deletions/index.ts';
import { createClickHouseEventStore, type ClickHouseEventStore } from '../../../shared/events/clickhouse.ts';
import { withPostgresSource } from '../../../shared/events/create.ts';
import { createPostgresEventStore } from '../../../shared/events/postgres.ts';
import { loadConfig, type Config } from '../../../shared/platform/config.ts';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { logger } from '../../../shared/platform/logger.ts';
import { chdbClient, chdbDatabase } from '../../clickhouse.ts';
import { sql } from '../../db.ts';
import { createAccount, type TestAccount } from '../../helpers.ts';
import { openArchive } from './archive.ts';

let orm: MikroORM;
let ch: ClickHouseEventStore;
let account: TestAccount;
let config: Config;
let dir: string;
beforeAll(async () => {
  config = loadConfig();
  orm = await initOrm(config.databaseUrl, 4);
  ch = createClickHouseEventStore(chdbClient(), chdbDatabase('access_export'), orm);
  await ch.migrate();
  account = await createAccount(orm);
  dir = await mkdtemp(join(tmpdir(), 'access-export-ch-'));
  config.accessExports.dir = join(dir, 'archives');
});
afterAll(async () => {
  await sql(orm, `delete from event_trim where ts_from = '-infinity' and ts_to = 'infinity'`);
  await orm?.close();
  await rm(dir, { recursive: true, force: true });
});

const at = (offsetSeconds: number) => new Date(Date.UTC(2025, 5, 1, 12, 0, 0) + offsetSeconds * 1000);
const chText = (d: Date) => d.toISOString().replace('T', ' ').replace('Z', '');

async function inPostgres(uuid: string, distinctId: string, person: string, when: Date, properties: object) {
  await sql(
    orm,
    `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
     values (?, ?, 'e', ?, ?, ?::jsonb, ?, ?)`,
    [uuid, account.projectId, distinctId, person, JSON.stringify(properties), when, when],
  );
}
async function inClickHouse(uuid: string, distinctId: string, person: string, when: Date, properties: object) {
  await ch.insertRows(
    [
      {
        uuid,
        project_id: account.projectId,
        event: 'e',
        distinct_id: distinctId,
        person_id: person,
        properties: JSON.stringify(properties),
        timestamp: chText(when),
        created_at: chText(when),
      },
    ],
    randomUUID(),
  );
}

describe('access export with EVENT_STORE=clickhouse', () => {
  it('exports buffered, shipped-and-buffered and trimmed events once each, verifiable with tar, sha256sum and openssl', async () => {
    const personUuid = randomUUID();
    const [{ id: personId }] = await sql<{ id: string }>(
      orm,
      `insert into person (project_id, uuid, properties) values (?, ?, '{"email": "x@example.com"}') returning id::text`,
      [account.projectId, personUuid],
    );
    await sql(orm, `insert into person_distinct_id (project_id, person_id, distinct_id) values (?, ?, 'axc-1')`, [
      account.projectId,
      personId,
    ]);
    const trimmed = randomUUID(); // shipped, then trimmed from PostgreSQL: ClickHouse only (written twice)
    const shipped = randomUUID(); // shipped, still in the buffer: both stores
    const buffered = randomUUID(); // not shipped yet: PostgreSQL only
    await inClickHouse(trimmed, 'axc-1', personUuid, at(0), { n: 1 });
    await inClickHouse(trimmed, 'axc-1', personUuid, at(0), { n: 1 });
    await inPostgres(shipped, 'axc-1', personUuid, at(60), { n: 2 });
    await inClickHouse(shipped, 'axc-1', personUuid, at(60), { n: 2 });
    await inPostgres(buffered, 'axc-1', personUuid, at(120), { n: 3 });
    // The trim's mark: everything at or before the trimmed event's (created_at, uuid) is gone from PostgreSQL.
    await sql(
      orm,
      `insert into event_trim (ts_from, ts_to, created_at, uuid) values ('-infinity', 'infinity', ?, ?)
       on conflict (ts_from, ts_to) do update set created_at = excluded.created_at, uuid = excluded.uuid`,
      [at(0), trimmed],
    );
    const events = withPostgresSource(createPostgresEventStore(orm, { deleteChunk: 1000 }), ch, orm);
    const deps = { config, orm, logger, events, queues: null, connection: null } as any;

    expect(
      await events.countExportEvents(account.projectId, {
        cutoff: new Date().toISOString(),
        personIds: [personUuid],
        distinctIds: ['axc-1'],
      }),
    ).toEqual({ postgres: 2, clickhouse: 1 });

    const row = await insertExport(orm.em.fork(), {
      projectId: account.projectId,
      userId: account.userId,
      apiKeyId: null,
      personUuids: [personUuid],
      personIds: [personId],
      distinctIds: ['axc-1'],
      request: { ids: [personUuid], distinct_ids: [] },
    });
    const result = await buildAccessExport({ data: { exportId: row.id } } as any, deps);
    expect(result).toMatchObject({ kept: true });
    const done = (await exportById(orm.em.fork(), account.projectId, row.id))!;
    expect(done.status).toBe('completed');
    expect(await readdir(config.accessExports.dir)).toEqual([done.file_path!.split('/').at(-1)]);

    const opened = await openArchive(done.file_path!, await mkdtemp(join(dir, 'open-')));
    expect(await opened.sumsCheck()).toBe(true);
    const signer = await receiptSigner(orm.em.fork(), config.deletion.receiptPrivateKey);
    expect(await opened.opensslVerifies(signer.publicKeyPem)).toBe(true);
    const exported = await opened.lines('events.ndjson');
    expect(exported.map((e) => e.uuid).sort()).toEqual([trimmed, shipped, buffered].sort());
    expect(opened.manifest.event_stores).toEqual({ postgres: 2, clickhouse: 1 });
    // The SQL count over both stores: PostgreSQL's rows, and ClickHouse's uuids PostgreSQL no longer holds.
    const [{ n: inPg }] = await sql<{ n: number }>(
      orm,
      `select count(*)::int as n from event where project_id = ? and (person_id = ? or distinct_id = 'axc-1')`,
      [account.projectId, personUuid],
    );
    const onlyCh = await ch.client.query({
      query: `SELECT uniqExact(uuid) AS n FROM ${ch.database}.events WHERE project_id = {p:Int64} AND uuid NOT IN {pg:Array(UUID)}`,
      query_params: { p: account.projectId, pg: [shipped, buffered] },
      format: 'JSONEachRow',
    });
    const [{ n: inChOnly }] = await onlyCh.json<{ n: string }>();
    expect(exported.length).toBe(inPg + Number(inChOnly));
    expect(opened.manifest.files.find((f: any) => f.name === 'events.ndjson').rows).toBe(exported.length);
    // Both stores write the same members: the trimmed event (from ClickHouse) reads as PostgreSQL's would.
    const fromCh = exported.find((e) => e.uuid === trimmed);
    expect(fromCh).toEqual({
      uuid: trimmed,
      event: 'e',
      distinct_id: 'axc-1',
      person_id: personUuid,
      timestamp: '2025-06-01T12:00:00.000000Z',
      created_at: '2025-06-01T12:00:00.000000Z',
      properties: { n: 1 },
    });
    expect(exported.find((e) => e.uuid === buffered)).toEqual({
      ...fromCh,
      uuid: buffered,
      timestamp: '2025-06-01T12:02:00.000000Z',
      created_at: '2025-06-01T12:02:00.000000Z',
      properties: { n: 3 },
    });
  });
});
