// The webhook events of scrubs: scrub.queued, .running, .completed, .failed and .cancelled, one per
// transition, queued in the transition's transaction (shared/webhooks/). Data: the scrub as its status
// endpoint shows it (with its receipt once completed).
import type { EntityManager } from '@mikro-orm/postgresql';
import { canonicalJson } from '../platform/canonical-json.ts';
import { queueWebhookEvents } from '../webhooks/index.ts';
import { scrubById } from './store.ts';

export type ScrubTransition = 'queued' | 'running' | 'completed' | 'failed' | 'cancelled';

/** Queues `scrub.<transition>` for the scrub; returns the delivery ids, to hand to the queue after the commit. */
export function queueScrubEvents(
  em: EntityManager,
  projectId: number,
  transition: ScrubTransition,
  id: string,
): Promise<string[]> {
  return queueWebhookEvents(em, projectId, `scrub.${transition}`, async () => {
    const scrub = await scrubById(em, projectId, id, canonicalJson);
    return scrub ? [{ scrub }] : [];
  });
}
