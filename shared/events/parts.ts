// An experiment's read (EventStore.experimentEvents) in parts by distinct id range, on either engine:
// how many parts, their bounds, and reading them in turn with the next one asked for while this one
// is taken in (the engine works while the worker folds). Distinct ids are ordered bytewise (UTF-8),
// as ClickHouse compares strings and PostgreSQL's `collate "C"` does.

/**
 * A read goes in parts of about this many events, so a worker holds about a part and the next one at
 * a time; at most this many parts (each part scans the range's names and times again).
 */
export const EXPERIMENT_READ_PART = 750_000;
export const EXPERIMENT_READ_PARTS = 64;

/** Strings in byte (UTF-8) order: ClickHouse's and PostgreSQL's `collate "C"`. */
export const byteOrder = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

/** How many parts a read of about `events` events takes. */
export const partsFor = (events: number, partEvents: number) =>
  Math.max(1, Math.min(EXPERIMENT_READ_PARTS, Math.ceil(events / partEvents)));

/** The bounds between parts from candidate distinct ids in byte order: none missing, none repeated. */
export const partBounds = (candidates: readonly (string | null)[]): string[] =>
  candidates.filter((b, i): b is string => b !== null && b !== candidates[i - 1]);

/** Part i's distinct ids: at or after `from`, before `to` (null: no bound on that side). */
export const partRange = (bounds: readonly string[], i: number) => ({
  from: i > 0 ? bounds[i - 1] : null,
  to: i < bounds.length ? bounds[i] : null,
});

/**
 * The answers of `count` parts in order, each part asked for while the one before is taken in. A
 * reader that stops early has `discard` called on the answer already asked for (a connection it
 * would otherwise hold).
 */
export async function* inTurn<T>(
  count: number,
  read: (i: number) => Promise<T>,
  discard?: (answer: T) => unknown,
): AsyncGenerator<T> {
  let next: Promise<T> | null = read(0);
  try {
    for (let i = 0; next; i++) {
      const answer: T = await next;
      next = i + 1 < count ? read(i + 1) : null;
      next?.catch(() => {}); // (awaited in turn, or discarded below)
      yield answer;
    }
  } finally {
    if (next && discard) next.then(discard).catch(() => {});
  }
}
