// How much SDK-body decoding one API process does at once. Every body is bounded by its endpoint's
// limit, but without this the number decoded together is not: 320 lz64 bombs sent at once each grew
// to their 20 MB limit together (9.7 GB). Here all decodes together hold at most `budgetBytes` of
// decoded output, and:
// - a body that decodes to at most `smallBytes` is decoded at once, without waiting, while the small
//   decodes together hold less than a quarter of the budget (SDK batches are this size: they never
//   queue behind bombs);
// - a larger one is decoded again, from the start, in one of `concurrency` slots. A request waits
//   at most `queueMs` for a slot; past that, or when the slots' output would pass the budget, it
//   gets 503 with Retry-After (PostHog's error body).
import { ApiError } from '../http/errors.ts';

export interface DecodeLimits {
  budgetBytes: number;
  concurrency: number;
  smallBytes: number;
  queueMs: number;
}

/** The output passed what this decode may produce: its limit, or the small decode's allowance. */
export class DecodeCapExceeded extends Error {}

/** A small decode found the budget full: it goes on in a slot. */
class SmallOverBudget extends Error {}

/** The process is decoding all it may: 503, try again shortly. */
export const decodingBusy = () =>
  new ApiError(
    503,
    'server_error',
    'service_unavailable',
    'The server is decoding too many request bodies at once. Try again in a second.',
    null,
    { 'Retry-After': '1' },
  );

/**
 * What a decode calls before holding `bytes` more of output; throws when the budget cannot take them
 * (a small decode then goes on in a slot; in a slot it is a 503).
 */
export type Reserve = (bytes: number) => void;

export class DecodeBudget {
  /** Bytes of decoded output held by every decode now, and by the small ones among them. */
  inFlightBytes = 0;
  smallInFlightBytes = 0;
  /** Slots in use, and requests waiting for one. */
  active = 0;
  private readonly waiting: (() => void)[] = [];

  readonly limits: DecodeLimits;

  constructor(limits: DecodeLimits) {
    this.limits = limits;
  }

  get waitingCount(): number {
    return this.waiting.length;
  }

  /**
   * Runs `decode(capBytes, reserve)`, first as a small decode (cap: `smallBytes`), then, if it throws DecodeCapExceeded below `limitBytes`, again in a slot with cap
   * `limitBytes`. Rethrows DecodeCapExceeded when the output passes `limitBytes`.
   */
  async run<T>(limitBytes: number, decode: (capBytes: number, reserve: Reserve) => Promise<T>): Promise<T> {
    const { smallBytes } = this.limits;
    if (smallBytes > 0) {
      try {
        return await this.withLease(Math.min(smallBytes, limitBytes), decode, true);
      } catch (error) {
        const goesOn =
          error instanceof SmallOverBudget || (error instanceof DecodeCapExceeded && smallBytes < limitBytes);
        if (!goesOn) throw error;
      }
    }
    await this.acquireSlot();
    try {
      return await this.withLease(limitBytes, decode, false);
    } finally {
      this.releaseSlot();
    }
  }

  private async withLease<T>(
    capBytes: number,
    decode: (capBytes: number, reserve: Reserve) => Promise<T>,
    small: boolean,
  ): Promise<T> {
    const { budgetBytes } = this.limits;
    let held = 0;
    const reserve: Reserve = (bytes) => {
      if (small) {
        // Small decodes share a quarter of the budget, so that they never crowd out the slots.
        const over = this.smallInFlightBytes + bytes > budgetBytes / 4 || this.inFlightBytes + bytes > budgetBytes;
        if (over) throw new SmallOverBudget();
        this.smallInFlightBytes += bytes;
      } else if (this.inFlightBytes + bytes > budgetBytes) throw decodingBusy();
      this.inFlightBytes += bytes;
      held += bytes;
    };
    try {
      return await decode(capBytes, reserve);
    } finally {
      this.inFlightBytes -= held;
      if (small) this.smallInFlightBytes -= held;
    }
  }

  private acquireSlot(): Promise<void> {
    if (this.active < this.limits.concurrency && this.waiting.length === 0) {
      this.active++;
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      const grant = () => {
        clearTimeout(timer);
        this.active++;
        resolve();
      };
      const timer = setTimeout(() => {
        this.waiting.splice(this.waiting.indexOf(grant), 1);
        reject(decodingBusy());
      }, this.limits.queueMs);
      this.waiting.push(grant);
    });
  }

  private releaseSlot(): void {
    this.active--;
    this.waiting.shift()?.();
  }
}

const budgets = new WeakMap<object, DecodeBudget>();

/** The process's budget for these settings (one per configuration object: per process, or per test app). */
export function decodeBudgetFor(config: { decode: DecodeLimits }): DecodeBudget {
  const existing = budgets.get(config);
  if (existing) return existing;
  const budget = new DecodeBudget(config.decode);
  budgets.set(config, budget);
  return budget;
}
