import { Migration } from '@mikro-orm/migrations';

/**
 * Suppression (opt-in, `suppress=true` on a deletion request): capture drops later events of the
 * erased persons' distinct ids until the suppression is lifted (unsuppress). One row per project and
 * distinct id while active (`lifted_at` null), naming the deletion request that asked for it and
 * counting the events dropped since. A lifted row is kept, so the request's status still shows what
 * was dropped. Capture checks the active rows through an in-process cache per API process
 * (api/capture/suppression-cache.ts): every insert, delete and lift notifies
 * `deletion_suppression_changed` with the project id (a TRUNCATE with `*`), whichever process makes
 * it; counting dropped events (an update of dropped_count only) notifies nothing. Row-level triggers:
 * pg_notify sends one notification per distinct payload and transaction, so a bulk suppression of a
 * project sends one.
 */
export class Migration0049DeletionSuppression extends Migration {
  override name = '0049-deletion-suppression';

  override up(): void {
    this.addSql(`create table deletion_suppression (
      id bigserial primary key,
      project_id integer not null references project(id) on delete cascade,
      distinct_id varchar(400) not null,
      request_id bigint not null references async_deletion(id) on delete cascade,
      created_at timestamptz not null default now(),
      dropped_count bigint not null default 0,
      lifted_at timestamptz
    )`);
    this.addSql(
      `create unique index deletion_suppression_active_idx on deletion_suppression (project_id, distinct_id) where lifted_at is null`,
    );
    this.addSql(`create index deletion_suppression_request_idx on deletion_suppression (request_id)`);
    this.addSql(`
      create function notify_deletion_suppression_changed() returns trigger language plpgsql as $$
      begin
        if tg_op = 'TRUNCATE' then
          perform pg_notify('deletion_suppression_changed', '*');
        elsif tg_op = 'DELETE' then
          perform pg_notify('deletion_suppression_changed', old.project_id::text);
        else
          perform pg_notify('deletion_suppression_changed', new.project_id::text);
          if tg_op = 'UPDATE' and new.project_id is distinct from old.project_id then
            perform pg_notify('deletion_suppression_changed', old.project_id::text);
          end if;
        end if;
        return null;
      end $$`);
    this.addSql(`create trigger deletion_suppression_changed
      after insert or delete or update of project_id, distinct_id, lifted_at on deletion_suppression
      for each row execute function notify_deletion_suppression_changed()`);
    this.addSql(`create trigger deletion_suppression_truncated after truncate on deletion_suppression
      for each statement execute function notify_deletion_suppression_changed()`);
  }
}
