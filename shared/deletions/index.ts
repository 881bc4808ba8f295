// The public face of shared/deletions/: the only file other folders import.
export { deletePersonData, deletionJobFailed, type HeldEventStore } from './job.ts';
export {
  RECEIPT_ALGORITHM,
  deletionReceipt,
  deletionReceiptOfRequest,
  listDeletionReceipts,
  receiptKeys,
  receiptSigner,
  signReceiptBody,
  type ReceiptSigner,
} from './receipts.ts';
export {
  countScrubRecordings,
  deleteScrubRecordings,
  type RecordingScrubMatch,
} from './recording-scrub.ts';
export { deletionCrons, lastWindowStart, nextWindowStart, type ScheduledDeletionMode } from './schedule.ts';
export {
  IDEMPOTENCY_KEY_MAX_LENGTH,
  answerOnce,
  cancelDeletion,
  enqueueAfterDeletions,
  idempotencyKey,
  previewPersonDeletions,
  recordPersonDeletions,
  retryDeletion,
  unsuppressDeletion,
  type DeletionOptions,
  type IdempotencyKey,
} from './service.ts';
export {
  DELETION_STATUSES,
  OPERATOR_DELETION_FILTERS,
  deletionAges,
  deletionCountsByStatus,
  deletionRequestsByIds,
  listDeletionRequests,
  listOperatorDeletionRequests,
  recordDeletionRequests,
  releaseDeletions,
  type DeletionRequestView,
  type DeletionStatus,
  type OperatorDeletionFilter,
  type OperatorDeletionView,
} from './store.ts';
export {
  activeSuppressions,
  countDropped,
  directLookup,
  dropSuppressed,
  projectSuppressions,
  type SuppressedIds,
  type SuppressionLookup,
} from './suppression.ts';
export { reconcileDeletions, releaseDeletionBatch } from './window-job.ts';
