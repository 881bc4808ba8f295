import { pino } from 'pino';
import { config } from './config.ts';

export const logger = pino({
  level: config.logLevel,
  base: { service: config.serviceName },
});
export type Logger = typeof logger;
