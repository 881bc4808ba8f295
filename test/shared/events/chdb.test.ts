// chDB (the ClickHouse engine in-process) answers through @clickhouse/client: the way the
// ClickHouse event store's tests reach a real engine.
import { describe, expect, it } from 'vitest';
import { chdbClient, chdbDatabase } from '../../clickhouse.ts';

describe('chDB through @clickhouse/client', () => {
  it('runs DDL, inserts and parameterised queries on a MergeTree table', async () => {
    const client = chdbClient();
    const db = chdbDatabase();
    await client.command({ query: `create database ${db}` });
    await client.command({
      query: `create table ${db}.t (project_id Int64, at DateTime, name String) engine = MergeTree order by (project_id, at)`,
    });
    await client.insert({
      table: `${db}.t`,
      values: [
        { project_id: 1, at: '2026-01-01 00:00:00', name: 'a' },
        { project_id: 1, at: '2026-01-01 00:00:05', name: 'b' },
        { project_id: 2, at: '2026-01-01 00:00:00', name: 'a' },
      ],
      format: 'JSONEachRow',
    });
    const result = await client.query({
      query: `select version() as version,
                     windowFunnel(60)(at, name = 'a', name = 'b') as level
                from ${db}.t where project_id = {project:Int64}`,
      query_params: { project: 1 },
      format: 'JSONEachRow',
    });
    const [row] = await result.json<{ version: string; level: number }>();
    expect(row.version).toMatch(/^26\.7\./);
    expect(row.level).toBe(2);
  });
});
