// The User shape of the seed (created_by, owner, updated_by, verified_by …).
import { nullableOpenObject, nullableString, record } from '../http/schemas.ts';

/** The user a row names under `prefix` (its columns `<prefix>_id`, `<prefix>_email`… as userColumns() selects them), or null. */
export function userBasic(row: { readonly [column: string]: unknown }, prefix: string) {
  if (row[`${prefix}_id`] === null || row[`${prefix}_id`] === undefined) return null;
  return {
    id: row[`${prefix}_id`],
    uuid: row[`${prefix}_uuid`],
    distinct_id: row[`${prefix}_distinct_id`],
    first_name: row[`${prefix}_first_name`],
    last_name: row[`${prefix}_last_name`],
    email: row[`${prefix}_email`],
    is_email_verified: row[`${prefix}_is_email_verified`],
    hedgehog_config: row[`${prefix}_hedgehog_config`],
    role_at_organization: row[`${prefix}_role_at_organization`],
  };
}

export const userBasicSchema = record(
  {
    id: { type: 'integer' },
    uuid: { type: 'string', format: 'uuid' },
    distinct_id: { type: 'string' },
    first_name: { type: 'string' },
    last_name: { type: 'string' },
    email: { type: 'string' },
    is_email_verified: { type: ['boolean', 'null'] },
    hedgehog_config: nullableOpenObject(),
    role_at_organization: nullableString,
  },
  { nullable: true },
);
