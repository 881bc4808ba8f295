import { pino } from 'pino';
import { config } from './config.ts';

export const logger = pino({
  level: process.env.NODE_ENV === 'test' && !process.env.LOG_LEVEL ? 'silent' : config.logLevel,
  base: { service: process.env.SERVICE_NAME ?? 'analytics' },
});
export type Logger = typeof logger;
