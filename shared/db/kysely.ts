// The typed query builder for tables that have an entity: the Kysely instance MikroORM builds
// (em.getKysely()), typed by the entities both processes configure (shared/entities/index.ts), and
// bound to the caller's transaction when there is one (MikroORM 7 hands Kysely the transaction
// context). Table and column names are the database's (snake_case), as in the migrations. A raw
// `sql` fragment (from 'kysely') is for what Kysely cannot say (JSONB operators, window functions),
// inside a typed query; rows()/run() in ./sql.ts stay for statements on tables without an entity
// (the partitioned `event` table, behind shared/events/) and for DDL.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { InferKyselyDB } from '@mikro-orm/postgresql';
import { type Compilable, type CompiledQuery, createQueryId, type Kysely } from 'kysely';
import type { entities } from '../entities/index.ts';

/** Every entity's table, as Kysely sees it: `DB['person']['project_id']` is a number. */
export type DB = InferKyselyDB<(typeof entities)[number]>;

/** The query builder for `em`, inside its transaction when it has one. */
export const db = (em: EntityManager): Kysely<DB> => em.getKysely<DB>();

// A statement run on a hot path (auth on every request, /flags, ingestion's per-batch statements),
// built once. Building a Kysely query (its frozen nodes, the references it parses) and compiling it
// cost 30–140 µs a statement against 6 µs to format the same text: on /batch a sixth of person
// processing's CPU, on /flags half again the statement's client CPU. A prepared statement is built
// and compiled on its first run with markers in place of its values; every run then sends the same
// text with its own values bound where the markers were.
type Slot = { arg: number } | { value: unknown };

/**
 * `build(db, ...values)` as a statement compiled once. Its values may only be bound (passed to where(),
 * values(), a sql`` fragment…), never read while building: the first run passes markers in their place.
 */
export function prepared<A extends unknown[], O>(
  build: (db: Kysely<DB>, ...values: A) => Compilable<O>,
): (db: Kysely<DB>, ...values: A) => Promise<O[]> {
  let template: { compiled: CompiledQuery<O>; slots: Slot[] } | undefined;
  return async (db, ...values) => {
    if (!template) {
      const markers = values.map((_, i) => `\u0000prepared value ${i}\u0000`);
      const compiled = build(db, ...(markers as A)).compile();
      const slots = compiled.parameters.map((value): Slot => {
        const arg = typeof value === 'string' ? markers.indexOf(value) : -1;
        return arg >= 0 ? { arg } : { value };
      });
      template = { compiled, slots };
    }
    const parameters = template.slots.map((slot) => ('arg' in slot ? values[slot.arg] : slot.value));
    const { rows } = await db.executeQuery<O>({ ...template.compiled, parameters, queryId: createQueryId() });
    return rows;
  };
}
