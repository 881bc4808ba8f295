// The typed query builder for tables that have an entity: the Kysely instance MikroORM builds
// (em.getKysely()), typed by the entities both processes configure (shared/entities/index.ts), and
// bound to the caller's transaction when there is one (MikroORM 7 hands Kysely the transaction
// context). Table and column names are the database's (snake_case), as in the migrations, not the
// entities' property names (which MikroORM 7 could hand Kysely): so a typed query, a raw `sql` fragment
// inside it, the migrations, psql and the receipts' published verification statements all name a
// column the same way, and nothing maps names between them. A raw
// `sql` fragment (from 'kysely') is for what Kysely cannot say (JSONB operators, window functions),
// inside a typed query; rows()/run() in ./sql.ts stay for statements on tables without an entity
// (the partitioned `event` table, behind shared/events/) and for DDL.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { InferKyselyDB } from '@mikro-orm/postgresql';
import { type Compilable, type CompiledQuery, createQueryId, Kysely } from 'kysely';
import { rows } from './sql.ts';
import type { entities } from '../entities/index.ts';

/** Every entity's table, as Kysely sees it: `DB['person']['project_id']` is a number. */
export type DB = InferKyselyDB<(typeof entities)[number]>;

/** The query builder for `em`, inside its transaction when it has one. */
export const db = (em: EntityManager): Kysely<DB> => em.getKysely<DB>();

/** The query builder for either: an EntityManager's, or one already taken (a prepared statement's build). */
export const kyselyOf = (target: EntityManager | Kysely<DB>): Kysely<DB> =>
  target instanceof Kysely ? target : db(target);

// A statement run on a hot path (auth on every request, /flags, GET by id, ingestion's per-batch
// statements), built once. Building a Kysely query (its frozen nodes, the references it parses) and
// compiling it cost 30–140 µs a statement against 6 µs to format the same text: on /batch a sixth of
// person processing's CPU, on /flags half again the statement's client CPU. A prepared statement is
// built and compiled on its first run with markers in place of its values; every run then sends the
// same text with its own values bound where the markers were.
//
// Run with an EntityManager and plain values (strings, numbers, booleans, null), the statement
// goes through rows() instead (./sql.ts): outside a transaction that is one simple-protocol message on
// the pool, as every statement went before the stores moved to Kysely; Kysely's pg driver sends
// Parse/Bind/Describe/Execute for each run, which cost GET by id about a fifth more CPU in the API and
// in PostgreSQL (bench/persons.ts). Arrays and JSON values keep Kysely's binding.
type Slot = { arg: number } | { value: unknown };

const plain = (value: unknown) =>
  value === null ||
  typeof value === 'string' ||
  typeof value === 'number' ||
  typeof value === 'boolean' ||
  typeof value === 'bigint';

/** The statement with `?` for `$1…$n` (each once, in order), or null where it cannot be said so. */
export function questionMarked(text: string, parameters: number): string | null {
  if (text.includes('?')) return null; // a JSONB operator would read as a placeholder
  let next = 1;
  const marked = text.replace(/\$(\d+)/g, (_, n: string) => (Number(n) === next++ ? '?' : '\u0000'));
  return next === parameters + 1 && !marked.includes('\u0000') ? marked : null;
}

/**
 * `build(db, ...values)` as a statement compiled once. Its values may only be bound (passed to where(),
 * values(), a sql`` fragment…), never read while building: the first run passes markers in their place.
 * Run it with the EntityManager (or, inside a transaction already taken, its Kysely instance).
 */
export function prepared<A extends unknown[], O>(
  build: (db: Kysely<DB>, ...values: A) => Compilable<O>,
): (target: EntityManager | Kysely<DB>, ...values: A) => Promise<O[]> {
  let template: { compiled: CompiledQuery<O>; slots: Slot[]; text: string | null } | undefined;
  return async (target, ...values) => {
    const kysely = kyselyOf(target);
    if (!template) {
      const markers = values.map((_, i) => `\u0000prepared value ${i}\u0000`);
      const compiled = build(kysely, ...(markers as A)).compile();
      const slots = compiled.parameters.map((value): Slot => {
        const arg = typeof value === 'string' ? markers.indexOf(value) : -1;
        return arg >= 0 ? { arg } : { value };
      });
      template = { compiled, slots, text: questionMarked(compiled.sql, slots.length) };
    }
    const parameters = template.slots.map((slot) => ('arg' in slot ? values[slot.arg] : slot.value));
    if (!(target instanceof Kysely) && template.text !== null && parameters.every(plain))
      return rows<O>(target, template.text, parameters);
    const result = await kysely.executeQuery<O>({ ...template.compiled, parameters, queryId: createQueryId() });
    return result.rows;
  };
}
