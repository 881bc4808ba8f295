// Prepared statements (shared/platform/db/kysely.ts prepared()): built once, then run with each call's values,
// through rows()'s simple protocol when given the EntityManager and plain values, else through Kysely's
// binding. Every way gives the same rows, values with quotes, backslashes and `$1` included.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { sql } from 'kysely';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { type DB, db, prepared, questionMarked } from '../../../shared/platform/db/kysely.ts';
import type { Kysely } from 'kysely';
import { createAccount, type TestAccount } from '../../helpers.ts';

let orm: MikroORM;
let account: TestAccount;
const awkward = ["o'hara", 'back\\slash', '$1 and ? and $$', 'ünï ✓', "'; drop table person; --"];

beforeAll(async () => {
  orm = await initOrm(process.env.DATABASE_URL!);
  account = await createAccount(orm);
  const em = orm.em.fork();
  for (const distinctId of awkward) {
    const [person] = await db(em)
      .insertInto('person')
      .values({ uuid: crypto.randomUUID(), project_id: account.projectId })
      .returning('id')
      .execute();
    await db(em)
      .insertInto('person_distinct_id')
      .values({
        project_id: account.projectId,
        person_id: person.id,
        distinct_id: distinctId,
      })
      .execute();
  }
});
afterAll(async () => {
  await orm?.close();
});

const owner = prepared((kysely: Kysely<DB>, projectId: number, distinctId: string) =>
  kysely
    .selectFrom('person_distinct_id as d')
    .innerJoin('person as p', 'p.id', 'd.person_id')
    .select(['d.distinct_id', 'p.id', 'p.properties', 'p.is_identified'])
    .where('d.project_id', '=', projectId)
    .where('d.distinct_id', '=', distinctId),
);
const owners = prepared((kysely: Kysely<DB>, projectId: number, distinctIds: string[]) =>
  kysely
    .selectFrom('person_distinct_id as d')
    .select(['d.distinct_id'])
    .where('d.project_id', '=', projectId)
    .where('d.distinct_id', '=', sql<string>`any(${distinctIds}::text[])`),
);

describe('prepared statements', () => {
  it('give the same rows through the pool, through Kysely and inside a transaction', async () => {
    const em = orm.em.fork();
    for (const distinctId of [...awkward, 'nobody']) {
      const viaPool = await owner(em, account.projectId, distinctId);
      const viaKysely = await owner(db(em), account.projectId, distinctId);
      const inTransaction = await em.transactional((tx) => owner(tx, account.projectId, distinctId));
      expect(viaPool).toEqual(viaKysely);
      expect(inTransaction).toEqual(viaKysely);
      expect(viaPool.map((r) => r.distinct_id)).toEqual(distinctId === 'nobody' ? [] : [distinctId]);
    }
  });

  it('bind an array as one PostgreSQL array, not a list', async () => {
    const found = await owners(orm.em.fork(), account.projectId, awkward);
    expect(found.map((r) => r.distinct_id).sort()).toEqual([...awkward].sort());
  });

  it('are said with ? only where $1…$n each stand once and in order, and no ? is in the text', () => {
    expect(questionMarked('select a from t where b = $1 and c = $2', 2)).toBe('select a from t where b = ? and c = ?');
    expect(questionMarked('select a from t where b = $2 and c = $1', 2)).toBeNull();
    expect(questionMarked('select a from t where b = $1 and c = $1', 1)).toBeNull();
    expect(questionMarked("select a from t where p ? 'k' and b = $1", 1)).toBeNull();
    expect(questionMarked('select a from t where b = $1', 2)).toBeNull();
  });
});
