// The public face of shared/webhooks/: the only file other folders import.
export { DeliveryAttemptFailed, deliverWebhook } from './deliver.ts';
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
  deliveryProgress,
  failDelivery,
  findWebhook,
  listDeliveries,
  listWebhooks,
  overdueDeliveryIds,
  purgeOldDeliveries,
  type DeliveryView,
  type StoredWebhook,
} from './store.ts';
