// The public face of shared/ingestion/: the only file other folders import.
export { ingestEvents, ingestEventsInTransaction } from './ingest.ts';
export {
  purgeWarningsJob,
  recordWarnings,
  warningSummaries,
  type IngestionWarningInput,
  type IngestionWarningType,
  type WarningSummary,
} from './warnings.ts';
