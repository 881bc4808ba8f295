import { defineEntity, p } from '@mikro-orm/core';

/**
 * The event shipper's shipped-up-to mark per target (shared/events/shipper.ts): a (created_at, uuid)
 * position in `event`, the batch in flight, and whether the distinct-id mirror has been filled.
 */
export const EventShipment = defineEntity({
  name: 'EventShipment',
  tableName: 'event_shipment',
  properties: {
    target: p.string().length(40).primary(),
    createdAt: p.datetime(),
    uuid: p.uuid(),
    pendingCreatedAt: p.datetime().nullable(),
    pendingUuid: p.uuid().nullable(),
    shipped: p.bigint('string').defaultRaw('0'),
    distinctIdsMirrored: p.boolean().default(false),
    updatedAt: p.datetime().defaultRaw('now()'),
  },
});

/**
 * The outbox of distinct ids whose person changed (insert, merge, split, delete), written by statement
 * triggers on person_distinct_id once a shipment exists; the shipper mirrors them to ClickHouse.
 */
export const PersonDistinctIdChange = defineEntity({
  name: 'PersonDistinctIdChange',
  tableName: 'person_distinct_id_change',
  properties: {
    seq: p.bigint('string').primary().autoincrement(),
    projectId: p.integer(),
    distinctId: p.string().length(400),
  },
});

/**
 * What PostgreSQL's `event` no longer holds because ClickHouse does (shared/events/buffer.ts): events
 * with a timestamp in [tsFrom, tsTo) and (created_at, uuid) at or before the mark.
 */
export const EventTrim = defineEntity({
  name: 'EventTrim',
  tableName: 'event_trim',
  properties: {
    tsFrom: p.datetime().primary(),
    tsTo: p.datetime().primary(),
    createdAt: p.datetime(),
    uuid: p.uuid(),
    updatedAt: p.datetime().defaultRaw('now()'),
  },
});
