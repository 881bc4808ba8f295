// Small helpers every benchmark uses: percentiles of latency samples and a progress line.
import { readdirSync, readFileSync } from 'node:fs';

/** The p-th percentile (0–100) of `samples` in milliseconds, nearest-rank. */
export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank];
}

export function summarize(samples: number[]) {
  return { n: samples.length, p50: percentile(samples, 50), p99: percentile(samples, 99) };
}

/** Milliseconds taken by `fn`. */
export async function timed(fn: () => Promise<unknown>): Promise<number> {
  const start = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - start) / 1e6;
}

/** Rewrites one status line on the terminal (plain lines when not a TTY). */
export function progress(message: string): void {
  if (process.stdout.isTTY) process.stdout.write(`\r\x1b[K${message}`);
  else console.log(message);
}

/** CPU seconds (user + system) each process has used so far, by pid, from /proc (Linux; empty elsewhere). */
function cpuByPid(only?: number): Map<number, number> {
  const seconds = new Map<number, number>();
  let pids: string[];
  try {
    pids = only === undefined ? readdirSync('/proc').filter((entry) => /^\d+$/.test(entry)) : [String(only)];
  } catch {
    return seconds;
  }
  for (const p of pids) {
    try {
      if (only === undefined && !readFileSync(`/proc/${p}/cmdline`, 'utf8').startsWith('postgres')) continue;
      // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
      const fields = readFileSync(`/proc/${p}/stat`, 'utf8').split(') ')[1].split(' ');
      seconds.set(Number(p), (Number(fields[11]) + Number(fields[12])) / 100); // USER_HZ is 100 on Linux
    } catch {
      // The process ended between listing and reading.
    }
  }
  return seconds;
}

/**
 * Starts measuring the CPU of the process `pid`, or with `pid` omitted of every PostgreSQL server
 * process on this machine; the returned function gives the CPU seconds they used since. Counted per
 * process, so one that ends meanwhile (an idle pool connection closed) drops out instead of taking
 * its earlier CPU with it.
 */
export function cpuMeter(pid?: number): () => number {
  const before = cpuByPid(pid);
  return () => {
    let used = 0;
    for (const [p, seconds] of cpuByPid(pid)) used += seconds - (before.get(p) ?? 0);
    return used;
  };
}
