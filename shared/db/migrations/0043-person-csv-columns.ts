import { Migration } from '@mikro-orm/migrations';

/**
 * The CSV columns each project's persons have (`properties.<path>`, `distinct_ids.<n>`), kept by triggers
 * so a whole-project export writes its header without scanning every person first (2.4 s at 1,000,000).
 * A write that adds a column adds its row; a write that may remove the last holder of one (delete, $unset,
 * a distinct id moved away) only marks the row `unsure`, and the export checks unsure rows before trusting
 * them (shared/persons/store.ts, personCsvColumns). Adding never waits on a row that is not unsure, and
 * marking never waits on one that is, so ingestion and deletions do not queue behind each other here.
 */
export class Migration0043PersonCsvColumns extends Migration {
  override name = '0043-person-csv-columns';

  override up(): void {
    this.addSql(`
      create table person_csv_column (
        project_id integer not null references project(id) on delete cascade,
        name text not null,
        unsure boolean not null default false,
        primary key (project_id, name)
      )`);

    // The CSV's flattening of a person's properties (api/persons/csv.ts): every leaf as a dotted path,
    // list items by position; an empty object or list has no column.
    this.addSql(`
      create function person_property_columns(properties jsonb) returns setof text
      language sql immutable parallel safe as $$
        with recursive leaf(path, value) as (
          select key, value from jsonb_each(case jsonb_typeof(properties) when 'object' then properties else '{}' end)
          union all
          select l.path || '.' || c.key, c.value from leaf l cross join lateral (
            select key, value from jsonb_each(case jsonb_typeof(l.value) when 'object' then l.value else '{}' end)
            union all
            select (i - 1)::text, value
              from jsonb_array_elements(case jsonb_typeof(l.value) when 'array' then l.value else '[]' end)
              with ordinality a(value, i)
          ) c where jsonb_typeof(l.value) in ('object', 'array'))
        select 'properties.' || path from leaf where jsonb_typeof(value) not in ('object', 'array')
      $$`);

    this.addSql(`
      create function add_person_csv_columns(projects integer[], names text[]) returns void language sql as $$
        update person_csv_column t set unsure = false
          from unnest(projects, names) a(project_id, name)
         where t.project_id = a.project_id and t.name = a.name and t.unsure;
        insert into person_csv_column (project_id, name)
        select distinct project_id, name from unnest(projects, names) a(project_id, name) order by 1, 2
        on conflict do nothing;
      $$`);
    this.addSql(`
      create function doubt_person_csv_columns(projects integer[], names text[]) returns void language sql as $$
        update person_csv_column t set unsure = true
          from unnest(projects, names) a(project_id, name)
         where t.project_id = a.project_id and t.name = a.name and not t.unsure;
      $$`);

    // person: inserted rows add their paths, deleted rows doubt theirs, an update does both for what it changed.
    this.addSql(`
      create function person_csv_columns_inserted() returns trigger language plpgsql as $$
      begin
        perform add_person_csv_columns(array_agg(project_id), array_agg(name))
           from (select distinct n.project_id, c.name from new_rows n, person_property_columns(n.properties) c(name)) a;
        return null;
      end $$`);
    this.addSql(`
      create function person_csv_columns_deleted() returns trigger language plpgsql as $$
      begin
        perform doubt_person_csv_columns(array_agg(project_id), array_agg(name))
           from (select distinct o.project_id, c.name from old_rows o, person_property_columns(o.properties) c(name)) a;
        return null;
      end $$`);
    this.addSql(`
      create function person_csv_columns_updated() returns trigger language plpgsql as $$
      begin
        -- Doubts first: one person's lost path may be another's gain in the same statement.
        perform doubt_person_csv_columns(array_agg(project_id) filter (where not added),
                                         array_agg(name) filter (where not added)),
                add_person_csv_columns(array_agg(project_id) filter (where added), array_agg(name) filter (where added))
           from (select distinct n.project_id, d.name, d.added
                   from new_rows n join old_rows o on o.id = n.id
                   cross join lateral (
                     select coalesce(a.name, r.name) as name, a.name is not null as added
                       from (select person_property_columns(n.properties) as name) a
                       full join (select person_property_columns(o.properties) as name) r on r.name = a.name
                      where a.name is null or r.name is null) d
                  where n.properties is distinct from o.properties) x;
        return null;
      end $$`);
    this.addSql(`create trigger person_csv_columns_inserted after insert on person referencing new table as new_rows
                 for each statement execute function person_csv_columns_inserted()`);
    this.addSql(`create trigger person_csv_columns_deleted after delete on person referencing old table as old_rows
                 for each statement execute function person_csv_columns_deleted()`);
    this.addSql(`create trigger person_csv_columns_updated after update on person
                 referencing old table as old_rows new table as new_rows
                 for each statement execute function person_csv_columns_updated()`);

    // person_distinct_id: a person holding n ids needs distinct_ids.0 … n-1 (the export shows at most 1000);
    // a person that lost ids may have been the only one to need the highest of those columns.
    this.addSql(`
      create function gain_person_csv_id_columns(projects integer[], persons bigint[]) returns void language sql as $$
        select add_person_csv_columns(array_agg(g.project_id), array_agg('distinct_ids.' || k))
          from (select distinct project_id, person_id from unnest(projects, persons) u(project_id, person_id)) g
          cross join lateral (select count(*)::int as n from person_distinct_id d where d.person_id = g.person_id) c
          cross join generate_series(0, least(c.n, 1000) - 1) k;
      $$`);
    this.addSql(`
      create function lose_person_csv_id_columns(projects integer[], persons bigint[]) returns void language sql as $$
        select doubt_person_csv_columns(array_agg(l.project_id), array_agg('distinct_ids.' || k))
          from (select project_id, person_id, count(*)::int as lost
                  from unnest(projects, persons) u(project_id, person_id) group by 1, 2) l
          cross join lateral (select count(*)::int as n from person_distinct_id d where d.person_id = l.person_id) c
          cross join generate_series(c.n, least(c.n + l.lost, 1000) - 1) k;
      $$`);
    this.addSql(`
      create function person_csv_columns_ids_inserted() returns trigger language plpgsql as $$
      begin
        perform gain_person_csv_id_columns(array_agg(project_id), array_agg(person_id)) from new_rows;
        return null;
      end $$`);
    this.addSql(`
      create function person_csv_columns_ids_deleted() returns trigger language plpgsql as $$
      begin
        perform lose_person_csv_id_columns(array_agg(project_id), array_agg(person_id)) from old_rows;
        return null;
      end $$`);
    this.addSql(`
      create function person_csv_columns_ids_moved() returns trigger language plpgsql as $$
      begin
        perform lose_person_csv_id_columns(array_agg(o.project_id), array_agg(o.person_id)),
                gain_person_csv_id_columns(array_agg(n.project_id), array_agg(n.person_id))
           from new_rows n join old_rows o on o.id = n.id where n.person_id <> o.person_id;
        return null;
      end $$`);
    this.addSql(`create trigger person_csv_columns_ids_inserted after insert on person_distinct_id
                 referencing new table as new_rows for each statement execute function person_csv_columns_ids_inserted()`);
    this.addSql(`create trigger person_csv_columns_ids_deleted after delete on person_distinct_id
                 referencing old table as old_rows for each statement execute function person_csv_columns_ids_deleted()`);
    this.addSql(`create trigger person_csv_columns_ids_moved after update on person_distinct_id
                 referencing old table as old_rows new table as new_rows
                 for each statement execute function person_csv_columns_ids_moved()`);

    // The columns of the persons already stored.
    this.addSql(`
      insert into person_csv_column (project_id, name)
      select distinct p.project_id, c.name from person p, person_property_columns(p.properties) c(name)
      union
      select project_id, 'distinct_ids.' || k
        from (select project_id, max(n) as n
                from (select project_id, count(*) as n from person_distinct_id group by project_id, person_id) c
               group by project_id) m
        cross join generate_series(0, least(m.n, 1000) - 1) k`);
  }
}
