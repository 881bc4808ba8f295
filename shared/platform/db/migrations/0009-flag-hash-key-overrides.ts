import { Migration } from '@mikro-orm/migrations';

/**
 * Experience continuity: when an anonymous user identifies, flags with ensure_experience_continuity
 * keep bucketing the person by the anonymous id it was first evaluated with.
 */
export class Migration0009FlagHashKeyOverrides extends Migration {
  override name = '0009-flag-hash-key-overrides';

  override up(): void {
    this.addSql(`
      create table feature_flag_hash_key_override (
        id bigserial primary key,
        project_id integer not null references project(id) on delete cascade,
        person_id bigint not null references person(id) on delete cascade,
        feature_flag_key varchar(400) not null,
        hash_key varchar(400) not null,
        unique (project_id, person_id, feature_flag_key)
      )`);
  }
}
