export class TimeoutError extends Error {}

/**
 * `promise`, or a TimeoutError after `ms`. The timer never keeps the process alive, and a late
 * rejection of `promise` is swallowed (its caller has already moved on).
 */
export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  promise.catch(() => undefined);
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(`${what} did not answer within ${ms} ms`)), ms);
    timer.unref();
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
