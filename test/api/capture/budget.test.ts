// The process-wide decode budget's rules, on decodes whose progress the test controls: small bodies
// never wait behind large ones, larger ones wait at most DECODE_QUEUE_MS, the bytes held never pass
// the budget, and everything held is given back when a decode ends, however it ends.
import { describe, expect, it } from 'vitest';
import { DecodeBudget, DecodeCapExceeded, type Reserve } from '../../../api/capture/budget.ts';
import { ApiError } from '../../../api/http/errors.ts';

const MB = 1024 * 1024;
const limits = { budgetBytes: 64 * MB, concurrency: 2, smallBytes: 1 * MB, queueMs: 200 };

/** A decode that produces `bytes` of output (reserved 64 KB at a time) and then waits for `release`. */
function decodeOf(bytes: number) {
  let release!: () => void;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  let started = 0;
  const decode = async (capBytes: number, reserve: Reserve) => {
    started++;
    for (let done = 0; done < bytes; done += 64 * 1024) {
      if (done + 64 * 1024 > capBytes) throw new DecodeCapExceeded();
      reserve(64 * 1024);
    }
    await released;
    return 'decoded';
  };
  return { decode, release, starts: () => started };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('DecodeBudget', () => {
  it('decodes a small body at once while every large slot is taken', async () => {
    const budget = new DecodeBudget(limits);
    const big = [decodeOf(8 * MB), decodeOf(8 * MB)];
    const running = big.map((d) => budget.run(20 * MB, d.decode));
    await settle();
    expect(budget.large.active).toBe(2);
    const small = decodeOf(256 * 1024);
    const answer = budget.run(20 * MB, small.decode);
    small.release();
    expect(await answer).toBe('decoded');
    expect(small.starts()).toBe(1);
    for (const d of big) d.release();
    expect(await Promise.all(running)).toEqual(['decoded', 'decoded']);
    expect(budget.inFlightBytes).toBe(0);
  });

  it('decodes a larger body again in a slot, and refuses one past its limit with DecodeCapExceeded', async () => {
    const budget = new DecodeBudget(limits);
    const large = decodeOf(4 * MB);
    large.release();
    expect(await budget.run(20 * MB, large.decode)).toBe('decoded');
    expect(large.starts()).toBe(2); // small first, then in a slot
    const bomb = decodeOf(30 * MB);
    await expect(budget.run(20 * MB, bomb.decode)).rejects.toBeInstanceOf(DecodeCapExceeded);
    expect(budget.inFlightBytes).toBe(0);
    expect(budget.large.active).toBe(0);
  });

  it('lets a body wait for a slot at most queueMs, then answers 503 with Retry-After', async () => {
    const budget = new DecodeBudget(limits);
    const busy = [decodeOf(4 * MB), decodeOf(4 * MB)];
    const running = busy.map((d) => budget.run(20 * MB, d.decode));
    await settle();
    const waiting = decodeOf(4 * MB);
    waiting.release();
    const started = performance.now();
    const error = await budget.run(20 * MB, waiting.decode).catch((e: unknown) => e);
    expect(performance.now() - started).toBeGreaterThanOrEqual(limits.queueMs - 5);
    expect(error).toBeInstanceOf(ApiError);
    expect((error as ApiError).status).toBe(503);
    expect((error as ApiError).body).toMatchObject({ type: 'server_error', code: 'service_unavailable', attr: null });
    expect((error as ApiError).headers['Retry-After']).toBe('1');
    expect(budget.large.waitingCount).toBe(0);
    // One that gets a slot within queueMs decodes.
    const next = decodeOf(4 * MB);
    next.release();
    const queued = budget.run(20 * MB, next.decode);
    busy[0].release();
    expect(await queued).toBe('decoded');
    busy[1].release();
    await Promise.all(running);
    expect(budget.large.active).toBe(0);
  });

  it('never holds more than the budget: a slot decode that would pass it gets 503, and the bytes come back', async () => {
    const budget = new DecodeBudget({ ...limits, budgetBytes: 24 * MB });
    const first = decodeOf(20 * MB);
    const running = budget.run(20 * MB, first.decode);
    await settle();
    expect(budget.inFlightBytes).toBe(20 * MB);
    const second = decodeOf(20 * MB);
    const error = await budget.run(20 * MB, second.decode).catch((e: unknown) => e);
    expect((error as ApiError).status).toBe(503);
    expect(budget.inFlightBytes).toBe(20 * MB);
    first.release();
    await running;
    expect(budget.inFlightBytes).toBe(0);
  });

  it('has as many small slots as a quarter of the budget holds; one more waits for one, at most queueMs', async () => {
    const budget = new DecodeBudget({ ...limits, budgetBytes: 8 * MB }); // 2 small slots of 1 MB
    const small = Array.from({ length: 3 }, () => decodeOf(512 * 1024));
    const running = small.map((d) => budget.run(20 * MB, d.decode));
    await settle();
    expect(budget.small.active).toBe(2);
    expect(budget.small.waitingCount).toBe(1);
    expect(budget.inFlightBytes).toBe(2 * MB); // each small slot holds its whole allowance
    small[0].release();
    small[2].release();
    expect(await running[0]).toBe('decoded');
    expect(await running[2]).toBe('decoded');
    const holding = decodeOf(512 * 1024); // with small[1], both small slots taken again
    const holdingRun = budget.run(20 * MB, holding.decode);
    await settle();
    const late = decodeOf(512 * 1024);
    late.release();
    const error = await budget.run(20 * MB, late.decode).catch((e: unknown) => e);
    expect((error as ApiError).status).toBe(503);
    expect(late.starts()).toBe(0);
    holding.release();
    await holdingRun;
    small[1].release();
    await running[1];
    expect(budget.inFlightBytes).toBe(0);
  });
});
