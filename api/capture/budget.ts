// How much SDK-body decoding one API process does at once. Every body is bounded by its endpoint's
// limit, but without this the number decoded together is not: 320 lz64 bombs sent at once each grew
// to their 20 MB limit together (9.7 GB). Here all decodes together hold at most `budgetBytes` of
// decoded output, and:
// - every body is first decoded in a small slot, allowed `smallBytes` of output: as many small slots
//   as a quarter of the budget holds (32 of 1 MB by default). SDK batches fit: they never queue
//   behind bombs, only, briefly, behind the small part of other decodes;
// - a larger one is decoded again, from the start, in one of `concurrency` large slots, reserving
//   its output from the budget as it grows.
// A request waits at most `queueMs` for its slots; past that, or when a large slot's output would
// pass the budget, it gets 503 with Retry-After (PostHog's error body).
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { ApiError } from '../http/errors.ts';

export interface DecodeLimits {
  budgetBytes: number;
  concurrency: number;
  smallBytes: number;
  queueMs: number;
}

/** The output passed what this decode may produce: its limit, or the small decode's allowance. */
export class DecodeCapExceeded extends Error {}

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

/** What a decode calls before holding `bytes` more of output; throws 503 when the budget cannot take them. */
export type Reserve = (bytes: number) => void;

/** A number of slots with a FIFO queue; a request waits for one until its deadline, then gets 503. */
class Slots {
  active = 0;
  private readonly waiting: (() => void)[] = [];
  readonly capacity: number;

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  get waitingCount(): number {
    return this.waiting.length;
  }

  acquire(deadline: number): Promise<void> {
    if (this.active < this.capacity && this.waiting.length === 0) {
      this.active++;
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      const grant = () => {
        clearTimeout(timer);
        this.active++;
        resolve();
      };
      const timer = setTimeout(
        () => {
          this.waiting.splice(this.waiting.indexOf(grant), 1);
          reject(decodingBusy());
        },
        Math.max(0, deadline - performance.now()),
      );
      this.waiting.push(grant);
    });
  }

  release(): void {
    this.active--;
    this.waiting.shift()?.();
  }
}

export class DecodeBudget {
  /** Bytes of decoded output held by every decode now (a small decode counts its whole allowance). */
  inFlightBytes = 0;
  /** Small decodes: as many as a quarter of the budget holds, each allowed `smallBytes`. */
  readonly small: Slots;
  /** Larger decodes: `concurrency` at once. */
  readonly large: Slots;
  /** Bytes read and decoded since the last collection this budget asked for, and its pending timer. */
  private handledSinceCollection = 0;
  private collection: NodeJS.Timeout | undefined;

  readonly limits: DecodeLimits;

  constructor(limits: DecodeLimits) {
    this.limits = limits;
    const smallSlots = limits.smallBytes > 0 ? Math.floor(limits.budgetBytes / 4 / limits.smallBytes) : 0;
    this.small = new Slots(Math.max(1, smallSlots));
    this.large = new Slots(limits.concurrency);
  }

  /**
   * Runs `decode(capBytes, reserve)`, first as a small decode (cap: `smallBytes`), then, if it throws
   * DecodeCapExceeded below `limitBytes`, again in a large slot with cap `limitBytes`. Waits for a slot
   * at most `queueMs` in all (503 past it). Rethrows DecodeCapExceeded when the output passes
   * `limitBytes`. `inputBytes`: the size of the body, counted towards the collection after a surge.
   */
  async run<T>(
    limitBytes: number,
    decode: (capBytes: number, reserve: Reserve) => Promise<T>,
    inputBytes = 0,
  ): Promise<T> {
    this.handledSinceCollection += inputBytes;
    const { smallBytes, queueMs } = this.limits;
    const deadline = performance.now() + queueMs;
    try {
      if (smallBytes > 0) {
        const capBytes = Math.min(smallBytes, limitBytes);
        await this.small.acquire(deadline);
        this.inFlightBytes += capBytes; // the whole allowance, held from the start: it never waits for bytes
        try {
          return await decode(capBytes, () => undefined);
        } catch (error) {
          if (!(error instanceof DecodeCapExceeded) || smallBytes >= limitBytes) throw error;
        } finally {
          this.inFlightBytes -= capBytes;
          this.small.release();
        }
      }
      await this.large.acquire(deadline);
      try {
        return await this.withLease(limitBytes, decode);
      } finally {
        this.large.release();
      }
    } finally {
      this.collectAfterSurge();
    }
  }

  private async withLease<T>(capBytes: number, decode: (capBytes: number, reserve: Reserve) => Promise<T>): Promise<T> {
    let held = 0;
    const reserve: Reserve = (bytes) => {
      if (this.inFlightBytes + bytes > this.limits.budgetBytes) throw decodingBusy();
      this.inFlightBytes += bytes;
      held += bytes;
    };
    try {
      return await decode(capBytes, reserve);
    } finally {
      this.inFlightBytes -= held;
      this.handledSinceCollection += held;
    }
  }

  /**
   * Gives memory back after a surge: once the bodies read and decoded since the last collection add
   * up to half the budget and no decode has run for a second, one full garbage collection. An idle
   * process runs none by itself, and the surge's garbage (request bodies, decoded output the decoders
   * could not free themselves) would stay resident.
   */
  private collectAfterSurge(): void {
    if (this.handledSinceCollection < this.limits.budgetBytes / 2 || this.collection) return;
    let lastSeen = this.handledSinceCollection;
    const check = () => {
      const busy = this.small.active + this.large.active > 0 || this.handledSinceCollection !== lastSeen;
      if (busy) {
        lastSeen = this.handledSinceCollection;
        this.collection = setTimeout(check, COLLECT_AFTER_QUIET_MS).unref();
        return;
      }
      this.collection = undefined;
      this.handledSinceCollection = 0;
      fullCollection();
    };
    this.collection = setTimeout(check, COLLECT_AFTER_QUIET_MS).unref();
  }
}

const COLLECT_AFTER_QUIET_MS = 1000;

let collector: (() => void) | undefined;
/** A full collection: `gc` where the process runs with --expose-gc, else exposed once for a context of its own. */
function fullCollection(): void {
  if (!collector) {
    const exposed = (globalThis as { gc?: () => void }).gc;
    if (exposed) collector = exposed;
    else {
      setFlagsFromString('--expose-gc');
      collector = runInNewContext('gc') as () => void;
    }
  }
  collector();
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
