// The API's recorder of reads: each answer carrying persons' data waits until its row is committed, and
// is not sent if the row could not be (the read fails instead). Rows of concurrent requests are written
// together: while one statement is on its way, the rows of the requests finishing meanwhile gather and
// go in the next one (a group commit). A lone request is written at once, in a statement of its own; under
// load a statement carries many rows, so the log costs far less than an INSERT per request. Nothing is
// kept only in memory past its request: a process that dies has sent no answer whose row is not written.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { AccessEntry } from './index.ts';
import { type AccessRow, insertAccessRows } from './store.ts';

export interface AccessRecorder {
  /** Resolves once the read's row is committed; rejects when it could not be. A read of no person records nothing. */
  record(entry: AccessEntry): Promise<void>;
  /** Resolves once every row handed over so far is written (or has failed its request). */
  drain(): Promise<void>;
}

/** The most rows one statement carries; more wait for the next. */
const MAX_BATCH = 1000;

let recording = true;
/**
 * Turns the recorder off (true: on again). Only bench/access-log.ts calls it, in an API process of its
 * own, to measure the log's cost: no setting reaches it, so a deployed API always records.
 */
export function setAccessRecordingForBench(on: boolean): void {
  recording = on;
}

const rowOf = (entry: AccessEntry): AccessRow => ({
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

interface Waiting {
  row: AccessRow;
  resolve: () => void;
  reject: (error: unknown) => void;
}

/** A recorder writing through `orm`'s pool (a fresh EntityManager per statement). */
export function createAccessRecorder(orm: { em: EntityManager }): AccessRecorder {
  let waiting: Waiting[] = [];
  let flushing: Promise<void> | null = null;

  async function flush(): Promise<void> {
    while (waiting.length > 0) {
      const batch = waiting.length <= MAX_BATCH ? waiting : waiting.slice(0, MAX_BATCH);
      waiting = waiting.length <= MAX_BATCH ? [] : waiting.slice(MAX_BATCH);
      try {
        await insertAccessRows(
          orm.em.fork(),
          batch.map((w) => w.row),
        );
        for (const w of batch) w.resolve();
      } catch (error) {
        for (const w of batch) w.reject(error);
      }
    }
    flushing = null;
  }

  return {
    record(entry) {
      if (!recording || entry.personUuids.length === 0) return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        waiting.push({ row: rowOf(entry), resolve, reject });
        flushing ??= flush();
      });
    },
    async drain() {
      while (flushing) await flushing;
    },
  };
}
