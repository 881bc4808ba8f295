// Small helpers every benchmark uses: percentiles of latency samples and a progress line.

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
