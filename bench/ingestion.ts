// Ingestion throughput at BENCH_CONCURRENCY (8) senders, two comparisons, each in interleaved pairs of
// 10-s windows (bench/harness.ts interleavedPairs; BENCH_PAIRS, BENCH_WINDOW_SECONDS), the order
// alternating so a machine shared with other work weighs on both sides alike:
//   1. personless: gzipped /batch requests of 100 events that all say `$process_person_profile: false`
//      (posthog-js's default for anonymous users) against one raw multi-row INSERT of the same 100
//      events into the event table (its partitions and indexes, as the API writes) on as many pg
//      connections. Target ≥ 0.6×.
//   2. with persons: gzipped /batch requests of 100 events, half from new distinct ids (persons
//      created), half from returning ones (a pool of 5,000, some $set), against the SAME statements the
//      API sends for such a batch, replayed by a bare `pg` client on as many connections, in the
//      transaction the API opens. The statements are recorded from an API process of their own
//      (bench/record-queries.ts, loaded with --import) for one batch once its caches are warm, then
//      replayed with each batch's own distinct ids, event uuids and persons, so each replay does the work
//      the API would do for that batch. Persons stay synchronous (a 200 means stored with its person), so
//      this measures what the API adds around the statements it needs. Target ≥ 0.9×.
// Each prints its pairs, CPU per request of each process, then `ratio (target ≥ X) load L`.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import pg from 'pg';
import {
  BENCH_DATABASE_URL,
  benchSetup,
  closeIdleConnections,
  interleavedPairs,
  type PairSide,
  postOk,
  printPairs,
  startApiProcess,
} from './harness.ts';
import { createAccount } from '../test/helpers.ts';
import { personUuidFor } from '../shared/persons/index.ts';

const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
const BATCH = 100;
const RETURNING = 5000;

const { orm, account, pool: meterPool } = await benchSetup();
const pool = new pg.Pool({ connectionString: BENCH_DATABASE_URL, max: CONCURRENCY });
const api = await startApiProcess();
const baselineProjectId = (await createAccount(orm)).projectId;
const loadAverage = () => os.loadavg()[0].toFixed(1);

interface Event {
  event: string;
  distinct_id: string;
  uuid: string;
  timestamp: string;
  properties: Record<string, unknown>;
}

/** Batch `i` as today's SDKs send it: half new distinct ids, half returning ones, every fifth with a $set. */
function personBatch(i: number): Event[] {
  return Array.from({ length: BATCH }, (_, j) => {
    const returning = j % 2 === 0;
    const distinctId = returning ? `returning-${(i * 31 + j) % RETURNING}` : `new-${i}-${j}`;
    return {
      event: j % 10 === 0 ? '$identify' : `event_${j % 20}`,
      distinct_id: distinctId,
      uuid: randomUUID(),
      timestamp: new Date().toISOString(),
      properties: {
        $lib: 'bench',
        path: `/page/${j}`,
        ...(j % 5 === 0 ? { $set: { plan: j % 3 ? 'free' : 'pro', seen: i } } : {}),
      },
    };
  });
}

/** Batch `i` of anonymous visitors (ten per batch) as posthog-js sends it by default: no person work. */
function personlessBatch(i: number): Event[] {
  return Array.from({ length: BATCH }, (_, j) => ({
    event: j % 3 === 0 ? '$pageview' : `event_${j % 20}`,
    distinct_id: `anon-${i}-${j % 10}`,
    uuid: randomUUID(),
    timestamp: new Date().toISOString(),
    properties: { $lib: 'bench', $process_person_profile: false, $current_url: `https://example.com/page/${j}` },
  }));
}

// Batch numbers are shared by every side and never repeat, so "new" distinct ids are new to the API.
let batchNumber = 0;

const gzippedBatch = (events: Event[]) =>
  gzipSync(JSON.stringify({ api_key: account.projectToken, sent_at: new Date().toISOString(), batch: events }));

/** A side sending /batch requests to `baseUrl`; idle keep-alive sockets are closed after the other side's window. */
function apiSide(name: string, baseUrl: string, events: (i: number) => Event[]): PairSide {
  let last = 0;
  return {
    name,
    serverPid: api.child.pid,
    warmup: 50,
    request: async () => {
      // The API sat idle through the other side's window, longer than its 5-s keep-alive timeout: a request
      // on a socket it is closing fails with "socket hang up".
      if (Date.now() - last > 4000) closeIdleConnections();
      await postOk(`${baseUrl}/batch/`, gzippedBatch(events(batchNumber++)), { 'content-encoding': 'gzip' });
      last = Date.now();
    },
  };
}

/** The same 100 personless events as one multi-row INSERT through pg, the row as the API stores it. */
const rawInsert: PairSide = {
  name: 'raw INSERT',
  warmup: 50,
  request: async () => {
    const values: unknown[] = [];
    const now = new Date().toISOString();
    const personIds = new Map<string, string>();
    const tuples = personlessBatch(batchNumber++).map((e, k) => {
      const personId = personIds.get(e.distinct_id) ?? personUuidFor(baselineProjectId, e.distinct_id);
      personIds.set(e.distinct_id, personId);
      values.push(e.uuid, baselineProjectId, e.event, e.distinct_id, personId, JSON.stringify(e.properties));
      values.push(e.timestamp, now);
      const b = k * 8;
      return `($${b + 1}::uuid, $${b + 2}::int, $${b + 3}, $${b + 4}, $${b + 5}::uuid, $${b + 6}::jsonb, $${b + 7}::timestamptz, $${b + 8}::timestamptz)`;
    });
    await pool.query(
      `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
       values ${tuples.join(', ')} on conflict do nothing`,
      values,
    );
  },
};

async function compare(title: string, target: number, a: PairSide, b: PairSide): Promise<void> {
  const loadBefore = loadAverage();
  const result = await interleavedPairs({ a, b, concurrency: CONCURRENCY, meterPool });
  printPairs(`${title}, ${CONCURRENCY} senders, ${BATCH} events per request`, { a, b }, result);
  console.log(
    `  ${title}: ratio ${result.median.ratio.toFixed(2)}× (target ≥ ${target}) load ${loadBefore}–${loadAverage()}` +
      ` (1-min load average before–after, ${os.availableParallelism()} cores)`,
  );
}

console.log(`ingestion (load average ${loadAverage()})`);

// 1. Personless.
await compare('personless', 0.6, apiSide('API /batch', api.baseUrl, personlessBatch), rawInsert);
await pool.query('delete from event where project_id = $1', [baselineProjectId]);

// 2. With persons. Every returning distinct id gets its person first (so "new" and "returning" mean it),
// then ANALYZE as autovacuum would (it is off on this machine: the planner would think the project empty).
const setupBatches = Array.from({ length: RETURNING / BATCH }, (_, b) =>
  Array.from({ length: BATCH }, (_, j) => ({
    event: 'event_0',
    distinct_id: `returning-${b * BATCH + j}`,
    uuid: randomUUID(),
    timestamp: new Date().toISOString(),
    properties: { $lib: 'bench', $set: { plan: 'free' } },
  })),
);
for (const events of setupBatches)
  await postOk(`${api.baseUrl}/batch/`, gzippedBatch(events), { 'content-encoding': 'gzip' });
await pool.query('analyze person; analyze person_distinct_id; analyze event');

/** One statement a request sent, as recorded. */
interface Statement {
  connection: number;
  text: string;
  values: unknown[] | null;
}

/** What the API sends for `events`: recorded by an API process of its own, caches warmed by 30 batches first. */
async function recordStatements(events: Event[]): Promise<Statement[]> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-ingestion-'));
  const file = path.join(dir, 'statements.jsonl');
  const recorder = new URL('./record-queries.ts', import.meta.url).href;
  const recording = await startApiProcess({ BENCH_RECORD_FILE: file }, [`--import=${recorder}`]);
  try {
    for (let i = 0; i < 30; i++)
      await postOk(`${recording.baseUrl}/batch/`, gzippedBatch(personBatch(batchNumber++)), {
        'content-encoding': 'gzip',
      });
    const offset = statSync(file).size;
    await postOk(`${recording.baseUrl}/batch/`, gzippedBatch(events), { 'content-encoding': 'gzip' });
    return readFileSync(file, 'utf8')
      .slice(offset)
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Statement);
  } finally {
    await recording.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

const recordedBatch = batchNumber++;
const recordedEvents = personBatch(recordedBatch);
const statements = await recordStatements(recordedEvents);
console.log(`  with persons: the API sent ${statements.length} statements for one batch of ${BATCH} events:`);
for (const s of statements)
  console.log(`    ${s.text.replace(/\s+/g, ' ').slice(0, 100)}${s.values ? ` (${s.values.length} parameters)` : ''}`);

// The returning persons, to give each replay its own batch's persons.
const { rows: returningRows } = await pool.query<{ distinct_id: string; id: string; uuid: string }>(
  `select d.distinct_id, p.id::text, p.uuid::text from person_distinct_id d join person p on p.id = d.person_id
    where d.project_id = $1 and d.distinct_id like 'returning-%'`,
  [account.projectId],
);
const returning = new Map(returningRows.map((r) => [r.distinct_id, r]));
if (returning.size !== RETURNING) throw new Error(`${returning.size} returning persons, not ${RETURNING}`);

// What differs between batches in a statement: event and person uuids, distinct ids, and persons' row ids
// (the `"id":"…"` of the person update's JSON).
const TOKEN =
  /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\b(?:new-\d+-\d+|returning-\d+)\b|(?<="id":")\d+(?=")/g;

/** The recorded batch's tokens, each to be replaced by its counterpart in another batch. */
function counterparts(events: Event[]): Map<string, string> {
  const map = new Map<string, string>();
  recordedEvents.forEach((recorded, j) => {
    const now = events[j];
    map.set(recorded.uuid, now.uuid);
    map.set(recorded.distinct_id, now.distinct_id);
    if (recorded.distinct_id.startsWith('new-')) {
      map.set(
        personUuidFor(account.projectId, recorded.distinct_id),
        personUuidFor(account.projectId, now.distinct_id),
      );
    } else {
      const [from, to] = [returning.get(recorded.distinct_id)!, returning.get(now.distinct_id)!];
      map.set(from.uuid, to.uuid);
      map.set(from.id, to.id);
    }
  });
  return map;
}

// Each recorded string cut once into literal text and the recorded batch's tokens (the same for every
// replay), so a replay only looks its tokens up: this process's CPU counts against the replay.
type Template = string | { pieces: (string | { token: string })[] } | Template[] | unknown;
const recordedTokens = counterparts(recordedEvents);
function compile(value: unknown): Template {
  if (Array.isArray(value)) return value.map(compile);
  if (typeof value !== 'string') return value;
  const pieces: (string | { token: string })[] = [];
  let last = 0;
  for (const match of value.matchAll(TOKEN)) {
    if (!recordedTokens.has(match[0])) continue;
    pieces.push(value.slice(last, match.index), { token: match[0] });
    last = match.index + match[0].length;
  }
  if (pieces.length === 0) return value;
  pieces.push(value.slice(last));
  return { pieces };
}
const templates = statements.map((s) => ({
  text: compile(s.text),
  values: s.values && (compile(s.values) as Template[]),
}));

function render(template: Template, map: Map<string, string>): unknown {
  if (Array.isArray(template)) return template.map((t) => render(t, map));
  if (template !== null && typeof template === 'object' && 'pieces' in template)
    return (template.pieces as (string | { token: string })[])
      .map((p) => (typeof p === 'string' ? p : map.get(p.token)!))
      .join('');
  return template;
}

/** The recorded statements as they would be for `events`: each distinct id, event uuid and person swapped. */
function statementsFor(events: Event[]): Statement[] {
  const map = counterparts(events);
  return templates.map((t, k) => ({
    connection: statements[k].connection,
    text: render(t.text, map) as string,
    values: t.values && (render(t.values, map) as unknown[]),
  }));
}

const RETRYABLE = new Set(['40P01', '40001']); // as the API: a deadlock or serialization failure is retried

/** Batch `i`'s statements on one connection of the pool, in order (BEGIN … COMMIT as recorded). */
async function replay(events: Event[]): Promise<void> {
  const batch = statementsFor(events);
  const client = await pool.connect();
  try {
    for (let attempt = 1; ; attempt++) {
      try {
        for (const s of batch) await (s.values ? client.query(s.text, s.values) : client.query(s.text));
        return;
      } catch (error) {
        await client.query('rollback');
        if (attempt < 4 && RETRYABLE.has((error as { code?: string }).code ?? '')) continue;
        throw error;
      }
    }
  } finally {
    client.release();
  }
}

// The replay does the batch's work: its new persons linked, its events stored with their persons.
const checked = batchNumber++;
const checkEvents = personBatch(checked);
await replay(checkEvents);
const {
  rows: [check],
} = await pool.query(
  `select (select count(*)::int from person_distinct_id where project_id = $1 and distinct_id like $2) as persons,
          (select count(*)::int from event e where e.uuid = any($3::uuid[]) and e.person_id = any($4::uuid[])) as events`,
  [
    account.projectId,
    `new-${checked}-%`,
    checkEvents.map((e) => e.uuid),
    checkEvents.map((e) =>
      e.distinct_id.startsWith('new-')
        ? personUuidFor(account.projectId, e.distinct_id)
        : returning.get(e.distinct_id)!.uuid,
    ),
  ],
);
if (check.persons !== BATCH / 2 || check.events !== BATCH)
  throw new Error(`a replayed batch stored ${check.persons} new persons and ${check.events} events`);

await compare('with persons', 0.9, apiSide('API /batch', api.baseUrl, personBatch), {
  name: 'replayed statements',
  warmup: 50,
  request: () => replay(personBatch(batchNumber++)),
});

await api.stop();
await pool.end();
await meterPool.end();
await orm.close();
