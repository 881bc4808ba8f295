// Session settings every process's database connections start with.
import { afterEach, describe, expect, it } from 'vitest';
import { initOrm } from '../../shared/db/orm.ts';
import { sql } from '../db.ts';

async function sessionJit(): Promise<string> {
  const orm = await initOrm(process.env.DATABASE_URL!);
  try {
    const [row] = await sql<{ jit: string }>(orm, 'show jit');
    return row.jit;
  } finally {
    await orm.close();
  }
}

describe('database sessions', () => {
  const before = process.env.DATABASE_JIT;
  afterEach(() => {
    if (before === undefined) delete process.env.DATABASE_JIT;
    else process.env.DATABASE_JIT = before;
  });

  it('run without JIT compilation by default', async () => {
    delete process.env.DATABASE_JIT;
    expect(await sessionJit()).toBe('off');
  });

  it('allow JIT when DATABASE_JIT=on', async () => {
    process.env.DATABASE_JIT = 'on';
    expect(await sessionJit()).toBe('on');
  });

  it('read DATABASE_JIT like every other on/off setting', async () => {
    process.env.DATABASE_JIT = 'true';
    expect(await sessionJit()).toBe('on');
    process.env.DATABASE_JIT = '0';
    expect(await sessionJit()).toBe('off');
  });
});
