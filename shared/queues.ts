// Queue names, job payloads and the BullMQ connection settings both processes share.
// Jobs carry only ids: the source of truth for every request is its row in PostgreSQL.
import { config } from './config.ts';

export const QUEUE_PREFIX = `${config.redisPrefix}:bull`;
