import { hostname } from 'node:os';
import { pino } from 'pino';
import { config } from './config.ts';

export const logger = pino({
  level: config.logLevel,
  // Which process on which host wrote a line: several API and worker processes share a log store.
  base: { service: config.serviceName, pid: process.pid, hostname: hostname() },
});
export type Logger = typeof logger;

/**
 * Writes an error that repeats while something is away (Redis down: every connection, queue and
 * worker reports each retry): the first occurrence at once, later ones at most once per `intervalMs`,
 * with how many were left out since the last line written.
 */
export function repeatingErrorLog(
  write: (fields: Record<string, unknown>) => void,
  intervalMs = 30_000,
): (fields: Record<string, unknown>) => void {
  let lastWritten = Number.NEGATIVE_INFINITY;
  let leftOut = 0;
  return (fields) => {
    const now = Date.now();
    if (now - lastWritten < intervalMs) {
      leftOut++;
      return;
    }
    write(leftOut > 0 ? { ...fields, repeatsLeftOut: leftOut } : fields);
    lastWritten = now;
    leftOut = 0;
  };
}
