// The one place an event store is built from configuration (EVENT_STORE).
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Config } from '../config.ts';
import type { EventStore } from './event-store.ts';
import { createPostgresEventStore } from './postgres.ts';

export function createEventStore(config: Config, orm: MikroORM): EventStore {
  const postgres = createPostgresEventStore(orm, { deleteChunk: config.deletion.chunkSize });
  switch (config.events.engine) {
    case 'postgres':
      return postgres;
    default:
      throw new Error(`EVENT_STORE=${config.events.engine} is not available yet`);
  }
}
