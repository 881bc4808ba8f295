// Session settings every process's database connections start with. They are set on the database
// (migration 0021), not sent as startup parameters, which a transaction-mode pooler refuses.
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { pgArray, rows, run } from '../../../shared/platform/db/sql.ts';
import { sql } from '../../db.ts';

describe('database sessions', () => {
  it('run without JIT compilation, through the ORM and through a plain connection alike', async () => {
    const orm = await initOrm(process.env.DATABASE_URL!);
    try {
      expect((await sql<{ jit: string }>(orm, 'show jit'))[0].jit).toBe('off');
    } finally {
      await orm.close();
    }
    const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
    await client.connect();
    try {
      expect((await client.query('show jit')).rows[0].jit).toBe('off');
    } finally {
      await client.end();
    }
  });

  it('send no startup options (PgBouncer refuses them)', async () => {
    const { ormConfig } = await import('../../../shared/platform/db/orm.ts');
    expect(JSON.stringify(ormConfig(process.env.DATABASE_URL!).driverOptions ?? {})).not.toContain('options');
  });

  it("rows() runs in the caller's transaction, and outside one reads as MikroORM's own path does", async () => {
    const orm = await initOrm(process.env.DATABASE_URL!);
    try {
      const em = orm.em.fork();
      const setting = `select current_setting('application_name') as name`;
      await em.transactional(async (tx) => {
        await run(tx, `set local application_name = 'rows-in-transaction'`);
        expect(await rows(tx, setting)).toEqual([{ name: 'rows-in-transaction' }]);
      });
      expect(await rows(em, setting)).not.toEqual([{ name: 'rows-in-transaction' }]);
      // Lists expand for `in (?)`, arrays go as literals, and every type reads back as through MikroORM.
      const query = `select x, ?::timestamptz as at, ?::jsonb as doc, 12345678901234::bigint as big, 1.5::numeric as n,
                            array['a', 'b'] as list, null::text as nothing
                       from unnest(?::int[]) x where x in (?) order by x`;
      const params = ['2024-03-05T10:20:30.123Z', JSON.stringify({ a: [1, 'two'] }), pgArray([1, 2, 3]), [2, 3]];
      const outside = await rows(em, query, params);
      expect(outside.map((row) => row.x)).toEqual([2, 3]);
      expect(outside).toEqual(await em.transactional((tx) => rows(tx, query, params)));
    } finally {
      await orm.close();
    }
  });
});
