import type { EventStoreDeps } from '../shared/events/index.ts';
import type { Deps } from '../shared/platform/deps.ts';

/** What the worker hands to the job bodies the features export: the platform's contract and the event store. */
export type WorkerDeps = Deps & EventStoreDeps;
