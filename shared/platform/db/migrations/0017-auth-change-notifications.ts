import { Migration } from '@mikro-orm/migrations';

/**
 * Every change that can alter what a personal API key may do notifies `auth_changed`, whichever
 * process makes it (API, manage CLI, psql). API processes cache authentication results and drop
 * them on this notification (api/http/auth-cache.ts). Statement-level, so a bulk change sends one
 * notification; PostgreSQL also folds repeats within a transaction. A key's last_used_at is left
 * out: it changes on use and grants nothing.
 */
export class Migration0017AuthChangeNotifications extends Migration {
  override name = '0017-auth-change-notifications';

  override up(): void {
    this.addSql(`
      create function notify_auth_changed() returns trigger language plpgsql as $$
      begin
        perform pg_notify('auth_changed', tg_table_name);
        return null;
      end $$`);
    this.addSql(
      `create trigger personal_api_key_auth_changed after update of user_id, secure_value, scopes, scoped_teams, scoped_organizations or delete on personal_api_key for each statement execute function notify_auth_changed()`,
    );
    this.addSql(
      `create trigger app_user_auth_changed after update of is_active, current_project_id or delete on app_user for each statement execute function notify_auth_changed()`,
    );
    this.addSql(
      `create trigger organization_membership_auth_changed after insert or update or delete on organization_membership for each statement execute function notify_auth_changed()`,
    );
    this.addSql(
      `create trigger project_auth_changed after insert or update or delete on project for each statement execute function notify_auth_changed()`,
    );
  }
}
