// Long request-body work (lz64 decoding, JSON parsing of big batches) shares the event loop in turns.
// A task works at most SLICE_MS, then waits for its turn; waiting tasks resume one per event-loop
// iteration, first come first served. With a setImmediate per task instead, every task that yielded
// resumes in the same check phase: 32 decodes working 8 ms each stopped the loop for a quarter of a
// second per iteration, and `/_health` waited behind them.

const SLICE_MS = 8;

const waiting: (() => void)[] = [];
let scheduled = false;

function resumeNext(): void {
  const next = waiting.shift();
  // Scheduled again before the task runs: an immediate queued now runs in the next iteration, after
  // the poll phase has served the sockets.
  scheduled = waiting.length > 0;
  if (scheduled) setImmediate(resumeNext);
  next?.();
}

/** Resolves in a later event-loop iteration, after the tasks that were waiting before this one. */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => {
    waiting.push(resolve);
    if (!scheduled) {
      scheduled = true;
      setImmediate(resumeNext);
    }
  });
}

/**
 * A task's pause: call it often; it waits for the task's next turn once the task has worked SLICE_MS
 * since its last one. The first call always waits, so tasks that start together (bodies arriving in
 * one poll phase) join the queue rather than each working a whole slice in the same iteration.
 */
export function slicer(): () => Promise<void> {
  let started = Number.NEGATIVE_INFINITY;
  return async () => {
    if (performance.now() - started < SLICE_MS) return;
    await nextTurn();
    started = performance.now();
  };
}
