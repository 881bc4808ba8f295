// The API's recorder of reads. A read's row is handed over when its answer is ready and written in the
// background with the rows of other reads: one statement for every row gathered in FLUSH_MS (or at
// MAX_BATCH rows), so a read costs a share of a statement and of a commit rather than a commit of its own
// (which, waited for, halved GET-by-id throughput: bench/access-log.ts). What holds:
//  - a row handed over is written, or retried until it is: a statement that fails keeps its rows (logged at
//    error level, tried again with a growing delay); a row PostgreSQL refuses for its data is logged in full
//    at error level instead of blocking the others;
//  - while MAX_PENDING rows wait (PostgreSQL unreachable), `record` throws: the read fails instead of
//    handing out data that might never be recorded;
//  - on shutdown `close` writes what waits; rows it still cannot write are logged, each in full, at error
//    level, and any read after `close` throws;
//  - a process killed outright (SIGKILL, out of memory, power) loses the rows of its last FLUSH_MS (and of
//    a statement on its way): the one way a row is lost, bounded by that window.
import type { EntityManager } from '@mikro-orm/postgresql';
import { logger } from '../platform/logger.ts';
import type { AccessEntry } from './index.ts';
import { type AccessRow, insertAccessRows } from './store.ts';

export interface AccessRecorder {
  /**
   * Hands the read's row over (a read of no person records nothing); resolves once it is taken. Rejects when
   * the row cannot be taken (too many rows waiting for PostgreSQL, or the recorder closed): the read must then
   * fail.
   */
  record(entry: AccessEntry): Promise<void>;
  /** Resolves once every row handed over so far is written; rejects if a write failed meanwhile. */
  drain(): Promise<void>;
  /** Writes what waits (trying until `timeoutMs`), logs any row it could not write, and takes no more. */
  close(timeoutMs?: number): Promise<void>;
}

/** How long a row waits for others before its statement goes. */
const FLUSH_MS = 100;
/** The most rows one statement carries. */
const MAX_BATCH = 500;
/** Rows waiting beyond which reads fail rather than wait in memory (PostgreSQL is unreachable). */
const MAX_PENDING = 50_000;
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 30_000;

/** `on`: buffered (what runs); `off`: nothing recorded; `unbatched`: one INSERT per read, its answer waiting for it. */
export type RecordingMode = 'on' | 'off' | 'unbatched';
let mode: RecordingMode = 'on';
/**
 * Changes how this process records. Only bench/access-log.ts calls it, in API processes of its own, to
 * measure what the log costs (and what one INSERT per read would): no setting reaches it, so a deployed API
 * always records.
 */
export function setAccessRecordingForBench(to: RecordingMode): void {
  mode = to;
}
/** PostgreSQL refused the statement for its data (SQLSTATE class 22 or 23), not for being unreachable. */
const refusedData = (error: unknown): boolean => {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^2[23]/.test(code);
};

/** An entry as the batch statement takes it, stamped now. */
export const rowOf = (entry: AccessEntry): AccessRow => ({
  project_id: entry.projectId,
  user_id: entry.userId,
  api_key_id: entry.apiKeyId,
  action: entry.action,
  person_uuids: [...new Set(entry.personUuids)],
  request_id: entry.requestId,
  client_address: entry.clientAddress,
  details: entry.details ?? {},
  timestamp: Date.now(),
});

/** A recorder writing through `orm`'s pool (a fresh EntityManager per statement). */
export function createAccessRecorder(orm: { em: EntityManager }): AccessRecorder {
  let pending: AccessRow[] = [];
  let timer: NodeJS.Timeout | null = null;
  let writing: Promise<void> | null = null;
  let retryMs = 0;
  let closed = false;
  let lastError: unknown = null;

  /**
   * A batch PostgreSQL refused for its data: each row alone, so the others are written; a row refused alone
   * can never be written and is logged in full at error level instead (never dropped unsaid).
   */
  async function writeOneByOne(batch: AccessRow[]): Promise<void> {
    for (const [i, row] of batch.entries()) {
      try {
        await insertAccessRows(orm.em.fork(), [row]);
      } catch (error) {
        if (!refusedData(error)) {
          pending = [...batch.slice(i), ...pending];
          throw error;
        }
        logger.error({ err: error, accessLogRow: row }, 'read-access log: row refused by PostgreSQL, logged here');
      }
    }
  }

  /** Writes what waits, a batch at a time; a failed batch goes back to the front and waits its retry. */
  async function write(): Promise<void> {
    while (pending.length > 0) {
      const batch = pending.slice(0, MAX_BATCH);
      pending = pending.slice(batch.length);
      let failure: unknown;
      try {
        await insertAccessRows(orm.em.fork(), batch);
        retryMs = 0;
        lastError = null;
        continue;
      } catch (error) {
        failure = error;
      }
      if (refusedData(failure)) {
        try {
          await writeOneByOne(batch);
          continue;
        } catch (error) {
          failure = error; // the rows not written are back in front
        }
      } else pending = [...batch, ...pending];
      lastError = failure;
      retryMs = Math.min(RETRY_MAX_MS, retryMs ? retryMs * 2 : RETRY_FIRST_MS);
      logger.error(
        { err: failure, waiting: pending.length, retryMs },
        'read-access log: rows not written yet, retrying',
      );
      schedule(retryMs);
      return;
    }
  }

  function schedule(ms: number) {
    if (timer) return;
    timer = setTimeout(() => {
      timer = null;
      writing ??= write().finally(() => {
        writing = null;
        if (pending.length > 0 && !timer && retryMs === 0) schedule(0);
      });
    }, ms);
    timer.unref();
  }

  /** Writes everything now; rejects (rows kept) when a statement fails. */
  async function flushNow(): Promise<void> {
    if (timer) {
      clearTimeout(timer);
      timer = null;
    }
    while (writing) await writing;
    retryMs = 0;
    await write();
    if (pending.length > 0) throw lastError; // write() has scheduled the retry
  }

  return {
    async record(entry) {
      if (mode === 'off' || entry.personUuids.length === 0) return;
      if (closed) throw new Error('read-access log closed: the API is shutting down');
      if (pending.length >= MAX_PENDING)
        throw new Error(`read-access log: ${pending.length} rows wait for PostgreSQL; refusing reads until written`);
      if (mode === 'unbatched') return insertAccessRows(orm.em.fork(), [rowOf(entry)]);
      pending.push(rowOf(entry));
      if (pending.length >= MAX_BATCH && retryMs === 0) {
        if (timer) clearTimeout(timer);
        timer = null;
        schedule(0);
      } else schedule(FLUSH_MS);
    },
    drain: flushNow,
    async close(timeoutMs = 5_000) {
      closed = true;
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        try {
          await flushNow();
          return;
        } catch {
          if (Date.now() >= deadline) break;
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      }
      for (const row of pending) logger.error({ accessLogRow: row }, 'read-access log: row not written at shutdown');
      pending = [];
    },
  };
}
