// Many decompression bombs at once against a real API process, measured from outside: the process's
// resident memory (/proc/<pid>/status), /_health's latency, the event loop's longest delay as the API
// itself saw it (monitorEventLoopDelay through /metrics), and the answers to valid batches sent
// meanwhile. Shared by test/api/capture/bomb-barrage.test.ts and bench/decode-bombs.ts.
import { readFileSync, writeFileSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { gzipSync } from 'node:zlib';

export interface Shot {
  path: string;
  body: string | Buffer;
  headers?: Record<string, string>;
}

export interface BarrageResult {
  /** Bomb answers: status → count (0: no answer). */
  bombStatuses: Record<number, number>;
  /** One answer of each status among the bombs: its JSON body and Retry-After header. */
  bombAnswers: Record<number, { body: unknown; retryAfter: string | null }>;
  /** Answers to the valid batches sent while the bombs were in flight, in order. */
  validStatuses: number[];
  /** The process's peak resident memory during the barrage (VmHWM after a reset, else sampled VmRSS). */
  peakRssMb: number;
  /** /_health round trips during the barrage, ms. */
  healthMs: number[];
  /** The longest event-loop delay the API measured during the barrage, ms. */
  eventLoopDelayMaxMs: number;
  /** From the first bomb sent to the last answered. */
  ms: number;
}

const MB = 1024 * 1024;

/** VmRSS or VmHWM of a process, in MB. */
export function memoryMb(pid: number, field: 'VmRSS' | 'VmHWM' = 'VmRSS'): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)![1]);
  return (kb * 1024) / MB;
}

/** Resets the process's peak RSS (VmHWM) to its current RSS; false where the kernel refuses. */
function resetPeakRss(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

/** The API's nodejs_eventloop_lag_max_seconds in ms; prom-client resets it at each scrape. */
export async function eventLoopDelayMaxMs(baseUrl: string, metricsToken: string): Promise<number> {
  const text = await (
    await fetch(`${baseUrl}/metrics`, { headers: { authorization: `Bearer ${metricsToken}` } })
  ).text();
  const match = /^nodejs_eventloop_lag_max_seconds\s+(\S+)$/m.exec(text);
  if (!match) throw new Error('no nodejs_eventloop_lag_max_seconds in /metrics');
  return Number(match[1]) * 1000;
}

/** A posthog-node style batch (gzip, Content-Encoding: gzip) of `events` events. */
export function validBatch(projectToken: string, events = 10): Shot {
  const batch = Array.from({ length: events }, (_, i) => ({
    event: 'barrage check',
    distinct_id: `barrage-${i}`,
    properties: { $lib: 'posthog-node', i },
    timestamp: new Date().toISOString(),
  }));
  return {
    path: '/batch/',
    body: gzipSync(JSON.stringify({ api_key: projectToken, batch })),
    headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
  };
}

/**
 * Probes `workerData.url` every 20 ms until told to stop; posts 'started' after a first probe, then the
 * round trips (ms; Infinity: no answer).
 */
const PROBER = `
const { parentPort, workerData } = require('node:worker_threads');
const times = [];
let done = false;
parentPort.once('message', () => { done = true; });
(async () => {
  await fetch(workerData.url).then((r) => r.arrayBuffer());
  parentPort.postMessage('started');
  while (!done) {
    const started = performance.now();
    const ok = await fetch(workerData.url, { signal: AbortSignal.timeout(60000) }).then(
      async (r) => { await r.arrayBuffer(); return r.ok; },
      () => false,
    );
    times.push(ok ? performance.now() - started : Infinity);
    await new Promise((r) => setTimeout(r, 20));
  }
  parentPort.postMessage(times);
})();
`;

const send = (baseUrl: string, shot: Shot, answers?: BarrageResult['bombAnswers']) =>
  fetch(baseUrl + shot.path, {
    method: 'POST',
    body: shot.body as BodyInit,
    headers: { 'content-type': 'text/plain', ...shot.headers },
    signal: AbortSignal.timeout(120_000),
  }).then(
    async (response) => {
      const text = await response.text();
      if (answers && !answers[response.status]) {
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {}
        answers[response.status] = { body, retryAfter: response.headers.get('retry-after') };
      }
      return response.status;
    },
    () => 0,
  );

/**
 * Sends every bomb at once and, while they are in flight, a valid batch every `validEveryMs` and a
 * /_health probe every 20 ms.
 */
export async function barrage(options: {
  baseUrl: string;
  pid: number;
  metricsToken: string;
  bombs: Shot[];
  valid: Shot;
  validEveryMs?: number;
}): Promise<BarrageResult> {
  const { baseUrl, pid } = options;
  await eventLoopDelayMaxMs(baseUrl, options.metricsToken); // resets the API's histogram
  const hwm = resetPeakRss(pid);
  let peakRss = memoryMb(pid);
  const sampler = setInterval(() => {
    peakRss = Math.max(peakRss, memoryMb(pid));
  }, 10);
  let done = false;
  // /_health is probed from a thread of its own: this one is busy sending the bombs, and its delays
  // would count as the API's.
  const prober = new Worker(PROBER, { eval: true, workerData: { url: `${baseUrl}/_health` } });
  await new Promise((resolve) => prober.once('message', resolve)); // its first probe answered: started
  const healthMs = new Promise<number[]>((resolve) => prober.once('message', resolve));
  const validStatuses: Promise<number>[] = [];
  const validSender = (async () => {
    while (!done) {
      validStatuses.push(send(baseUrl, options.valid));
      await new Promise((r) => setTimeout(r, options.validEveryMs ?? 100));
    }
  })();
  const started = performance.now();
  const bombAnswers: BarrageResult['bombAnswers'] = {};
  const statuses = await Promise.all(options.bombs.map((bomb) => send(baseUrl, bomb, bombAnswers)));
  const ms = performance.now() - started;
  done = true;
  prober.postMessage('stop');
  await validSender;
  const valid = await Promise.all(validStatuses);
  clearInterval(sampler);
  peakRss = Math.max(peakRss, memoryMb(pid), hwm ? memoryMb(pid, 'VmHWM') : 0);
  const bombStatuses: Record<number, number> = {};
  for (const status of statuses) bombStatuses[status] = (bombStatuses[status] ?? 0) + 1;
  return {
    bombStatuses,
    bombAnswers,
    validStatuses: valid,
    peakRssMb: peakRss,
    healthMs: await healthMs,
    eventLoopDelayMaxMs: await eventLoopDelayMaxMs(baseUrl, options.metricsToken),
    ms,
  };
}
