// A user as the API's basic user shape (created_by, owner, updated_by, verified_by …), read inside a
// typed query as one JSON object (null when there is no such user): the Kysely form of userColumns
// (shared/accounts/) for stores that query through db(em).
import { type Expression, expressionBuilder } from 'kysely';
import { jsonObjectFrom } from 'kysely/helpers/postgres';
import type { DB } from './kysely.ts';

/** The user whose id is `id`, as {id, uuid, distinct_id, first_name, last_name, email, …}, or null. */
export function userBasicOf(id: Expression<number | null>) {
  return jsonObjectFrom(
    expressionBuilder<DB>()
      .selectFrom('app_user as u')
      .select([
        'u.id',
        'u.uuid',
        'u.distinct_id',
        'u.first_name',
        'u.last_name',
        'u.email',
        'u.is_email_verified',
        'u.hedgehog_config',
        'u.role_at_organization',
      ])
      .where('u.id', '=', id),
  );
}
