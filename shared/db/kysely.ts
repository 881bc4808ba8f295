// The typed query builder for tables that have an entity: the Kysely instance MikroORM builds
// (em.getKysely()), typed by the entities both processes configure (shared/entities/index.ts), and
// bound to the caller's transaction when there is one (MikroORM 7 hands Kysely the transaction
// context). Table and column names are the database's (snake_case), as in the migrations. A raw
// `sql` fragment (from 'kysely') is for what Kysely cannot say (JSONB operators, window functions),
// inside a typed query; rows()/run() in ./sql.ts stay for statements on tables without an entity
// (the partitioned `event` table, behind shared/events/) and for DDL.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { InferKyselyDB } from '@mikro-orm/postgresql';
import type { Kysely } from 'kysely';
import type { entities } from '../entities/index.ts';

/** Every entity's table, as Kysely sees it: `DB['person']['project_id']` is a number. */
export type DB = InferKyselyDB<(typeof entities)[number]>;

/** The query builder for `em`, inside its transaction when it has one. */
export const db = (em: EntityManager): Kysely<DB> => em.getKysely<DB>();
