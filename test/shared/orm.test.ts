// Session settings every process's database connections start with. They are set on the database
// (migration 0021), not sent as startup parameters, which a transaction-mode pooler refuses.
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { initOrm } from '../../shared/db/orm.ts';
import { sql } from '../db.ts';

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
    const { ormConfig } = await import('../../shared/db/orm.ts');
    expect(JSON.stringify(ormConfig(process.env.DATABASE_URL!).driverOptions ?? {})).not.toContain('options');
  });
});
