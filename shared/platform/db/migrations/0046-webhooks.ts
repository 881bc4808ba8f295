import { Migration } from '@mikro-orm/migrations';

/**
 * Signed webhooks per project (shared/webhooks/): the customer's endpoints and the event types each
 * receives, and the delivery log. A delivery row is the outbox of one event for one webhook, written in
 * the transaction of the change it reports; the worker posts it (its BullMQ job carries only the id) and
 * records every attempt on it. The reconciler finds pending rows through the partial index; the daily
 * maintenance job purges finished deliveries past 30 days by created_at.
 */
export class Migration0046Webhooks extends Migration {
  override name = '0046-webhooks';

  override up(): void {
    this.addSql(`create table webhook (
      id serial primary key,
      project_id integer not null references project(id) on delete cascade,
      url varchar(2048) not null,
      secret varchar(200) not null,
      event_types text[] not null,
      enabled boolean not null default true,
      created_by_id integer references app_user(id) on delete set null,
      created_at timestamptz not null default now()
    )`);
    this.addSql(`create index webhook_project_idx on webhook (project_id)`);
    this.addSql(`create table webhook_delivery (
      id bigserial primary key,
      webhook_id integer not null references webhook(id) on delete cascade,
      event_type varchar(100) not null,
      payload jsonb not null,
      status varchar(20) not null default 'pending',
      attempts integer not null default 0,
      last_status_code integer,
      last_error text,
      attempt_log jsonb not null default '[]',
      next_attempt_at timestamptz,
      delivered_at timestamptz,
      created_at timestamptz not null default now()
    )`);
    this.addSql(`create index webhook_delivery_webhook_idx on webhook_delivery (webhook_id, id)`);
    this.addSql(`create index webhook_delivery_pending_idx on webhook_delivery (id) where status = 'pending'`);
    this.addSql(`create index webhook_delivery_created_idx on webhook_delivery (created_at)`);
  }
}
