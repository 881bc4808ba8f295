// The public face of shared/scrubs/: the only file other folders import. Scrubs by content: events
// matching a name, property filters, distinct ids and a time range deleted or stripped of keys, and
// recordings of distinct ids in a time range deleted, with the deletions' proof machinery.
export { reconcileScrubs, runScrub, scrubJobFailed } from './job.ts';
export {
  SCRUB_MAX_DAYS,
  SCRUB_MAX_DISTINCT_IDS,
  SCRUB_MAX_KEYS,
  ScrubInputError,
  cancelScrub,
  checkScrub,
  createScrub,
  getScrub,
  listScrubs,
  previewScrub,
  type ScrubDryRun,
  type ScrubInput,
} from './service.ts';
export type { ScrubAction, ScrubFilter, ScrubMode, ScrubStatus, ScrubTarget, ScrubView } from './store.ts';
