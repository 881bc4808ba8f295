// The public face of shared/ingestion/: the only file other folders import.
export { ingestEvents } from './ingest.ts';
export {
  purgeWarningsJob,
  recordWarnings,
  warningSummaries,
  type IngestionWarningInput,
  type WarningSummary,
} from './warnings.ts';
