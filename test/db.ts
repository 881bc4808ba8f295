// Reading the test database directly, for assertions about what was stored.
import { randomUUID } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/postgresql';

export function sql<T = any>(orm: MikroORM, query: string, params: unknown[] = []): Promise<T[]> {
  return orm.em.fork().getConnection().execute<T[]>(query, params);
}

/** Every person of a project with its distinct ids, by distinct id order. */
export async function personsOf(orm: MikroORM, projectId: number) {
  return sql<{
    id: string;
    uuid: string;
    properties: Record<string, any>;
    is_identified: boolean;
    distinct_ids: string[];
    created_at: string;
  }>(
    orm,
    `select p.id, p.uuid, p.properties, p.is_identified, p.created_at,
            array(select d.distinct_id from person_distinct_id d where d.person_id = p.id order by d.distinct_id) as distinct_ids
       from person p where p.project_id = ? order by p.id`,
    [projectId],
  );
}

/** A fault in PostgreSQL: deleting this distinct id's events raises, until the returned function removes it. */
export async function failEventDeletesOf(orm: MikroORM, distinctId: string): Promise<() => Promise<void>> {
  const name = `fail_${randomUUID().replace(/-/g, '')}`;
  await sql(
    orm,
    `create function ${name}() returns trigger language plpgsql as $$ begin raise exception 'injected fault'; end $$`,
  );
  await sql(
    orm,
    `create trigger ${name} before delete on event for each row when (old.distinct_id = '${distinctId}') execute function ${name}()`,
  );
  return async () => {
    await sql(orm, `drop trigger ${name} on event`);
    await sql(orm, `drop function ${name}()`);
  };
}
