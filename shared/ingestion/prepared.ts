// Typed statements of the ingestion path, built once. Building a Kysely query (its frozen nodes, the
// references it parses) costs 30–140 µs a statement, compiling it a little more, against 6 µs to format
// the same text: on /batch, with a few dozen statements per request, that was a sixth of person
// processing's CPU. A prepared statement is built and compiled on its first run with markers in place
// of its values; every run then sends the same text with its own values bound where the markers were.
import { type Compilable, type CompiledQuery, createQueryId, type Kysely } from 'kysely';
import type { DB } from '../db/kysely.ts';

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
