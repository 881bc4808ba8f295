// The public face of shared/webhooks/: the only file other folders import.
export { deliverWebhookJob, purgeDeliveriesJob, reconcileWebhookDeliveries, webhookJobFailed } from './job.ts';
export {
  WEBHOOK_EVENT_TYPES,
  WEBHOOK_SECRET_MAX_LENGTH,
  WEBHOOK_URL_MAX_LENGTH,
  WebhookInputError,
  createWebhook,
  maskSecret,
  queueWebhookEvents,
  updateWebhook,
} from './service.ts';
export {
  deleteWebhook,
  findWebhook,
  listDeliveries,
  listWebhooks,
  type DeliveryView,
  type StoredWebhook,
} from './store.ts';
