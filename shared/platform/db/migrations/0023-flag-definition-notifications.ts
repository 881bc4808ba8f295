import { Migration } from '@mikro-orm/migrations';

/**
 * Every change to what flag evaluation reads notifies `flag_definitions_changed` with the ids of the
 * projects it touched (comma-separated; `*` for a TRUNCATE or too many to list), whichever process
 * makes it (API, worker, manage CLI, psql). API processes keep flag definitions per project token and
 * drop those projects' on this notification (api/flags/cache.ts). The tables: feature_flag
 * (experiments create, launch and modify flags), experiment_holdout (its exclusion is copied into its
 * experiments' flags), cohort (definitions flag conditions may refer to; not its count or calculation
 * state) and project (a token rolled, a project deleted; not its other settings). Statement-level
 * with transition tables, so a bulk change sends one notification and an update that changed nothing
 * watched sends none (ingestion's `update project set ingested_event` stays quiet).
 */
export class Migration0023FlagDefinitionNotifications extends Migration {
  override name = '0023-flag-definition-notifications';

  override up(): void {
    // tg_argv[0]: the column holding the project id; tg_argv[1]: for updates, the watched columns
    // (comma-separated), or none for any change to the row.
    this.addSql(`
      create function notify_flag_definitions_changed() returns trigger language plpgsql as $$
      declare
        project_column text := tg_argv[0];
        changed text := 'to_jsonb(o) is distinct from to_jsonb(n)';
        ids text;
      begin
        if tg_op = 'TRUNCATE' then
          ids := '*';
        elsif tg_op = 'INSERT' then
          execute format('select string_agg(distinct %I::text, '','') from new_rows', project_column) into ids;
        elsif tg_op = 'DELETE' then
          execute format('select string_agg(distinct %I::text, '','') from old_rows', project_column) into ids;
        else
          if tg_nargs > 1 then
            select format('(%s) is distinct from (%s)',
                          string_agg(format('o.%I', c), ', '), string_agg(format('n.%I', c), ', '))
              into changed from unnest(string_to_array(tg_argv[1], ',')) c;
          end if;
          execute format(
            'select string_agg(distinct p::text, '','') from old_rows o join new_rows n on n.id = o.id,
               lateral (values (o.%1$I), (n.%1$I)) v(p) where %2$s', project_column, changed) into ids;
        end if;
        if ids is null then
          return null;
        end if;
        perform pg_notify('flag_definitions_changed', case when length(ids) > 7000 then '*' else ids end);
        return null;
      end $$`);
    const watch = (table: string, projectColumn: string, updateColumns?: string) => {
      const args = updateColumns ? `'${projectColumn}', '${updateColumns}'` : `'${projectColumn}'`;
      const trigger = (event: string, referencing: string) =>
        `create trigger ${table}_flags_${event} after ${event} on ${table} ${referencing}
           for each statement execute function notify_flag_definitions_changed(${args})`;
      this.addSql(trigger('insert', 'referencing new table as new_rows'));
      this.addSql(trigger('update', 'referencing old table as old_rows new table as new_rows'));
      this.addSql(trigger('delete', 'referencing old table as old_rows'));
      this.addSql(trigger('truncate', ''));
    };
    watch('feature_flag', 'project_id');
    watch('experiment_holdout', 'project_id');
    watch('cohort', 'project_id', 'filters,query,is_static,deleted');
    watch('project', 'id', 'api_token');
  }
}
