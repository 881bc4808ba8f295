// Person processing during ingestion (PostHog's plugin server, ingestion/persons): find or create the person of each event, apply its
// $set_once / $set / $unset, and merge persons on $identify / $create_alias / $merge_dangerously.
// Runs inside the request's transaction; persons are locked (FOR UPDATE) before they are changed, so
// concurrent requests for the same distinct ids never create duplicates or lose property updates.
import type { EntityManager } from '@mikro-orm/postgresql';
import { type Kysely, type Selectable, sql } from 'kysely';
import { type DB, db, prepared } from '../platform/db/kysely.ts';
import { copyHashKeyOverrides } from '../flags/index.ts';
import { clipped } from '../platform/text.ts';
import { applyPropertyUpdate, type Properties, type PropertyUpdate } from './property-rules.ts';
import { isIllegalDistinctId, personUpdateOf } from './person-updates.ts';
import { personUuidFor } from './person-uuid.ts';

/** A warning person processing leaves (capture records it as an ingestion warning). */
export interface PersonWarning {
  type: 'cannot_merge_with_illegal_distinct_id' | 'cannot_merge_already_identified';
  eventUuid: string | null;
  distinctId: string | null;
  details: Record<string, unknown>;
}

/** Where the warnings go: capture's list of ingestion warnings. */
export type WarningSink = { push: (warning: PersonWarning) => unknown };

export interface IngestEvent {
  uuid: string;
  event: string;
  distinctId: string;
  properties: Properties;
  timestamp: Date;
}

/** A person this transaction holds: its columns (created_at as a Date), and what it did to them. */
type LockedPerson = Pick<Selectable<DB['person']>, 'id' | 'uuid' | 'properties' | 'is_identified' | 'version'> & {
  created_at: Date;
  changed: boolean;
  /** Created by this transaction: its first event becomes `$creator_event_uuid`. */
  created: boolean;
};

/** The other distinct id an event asks to merge with, if it is a merge event. */
export function mergePartner(event: IngestEvent): string | null {
  const p = event.properties;
  if (event.event === '$identify' && typeof p.$anon_distinct_id === 'string') return p.$anon_distinct_id;
  if (
    (event.event === '$create_alias' || event.event === '$merge_dangerously') &&
    (typeof p.alias === 'string' || typeof p.alias === 'number')
  )
    return String(p.alias);
  return null;
}

const isEmptyUpdate = (u: PropertyUpdate) =>
  Object.keys(u.set ?? {}).length === 0 && Object.keys(u.setOnce ?? {}).length === 0 && (u.unset ?? []).length === 0;

/** person_distinct_id.distinct_id is varchar(400): PostgreSQL counts characters, so code points. */
const storableDistinctId = (id: string) => id.length <= 400 || [...id].length <= 400;

export const processesPerson = (event: IngestEvent) => event.properties.$process_person_profile !== false;

/**
 * Processes the person side of `events` in order. Returns, per event, the uuid of its person
 * (for personless events the deterministic uuid, as PostHog records it); a merge it refuses adds a
 * warning to `warnings`.
 */
export async function processPersons(
  em: EntityManager,
  projectId: number,
  events: IngestEvent[],
  warnings: WarningSink = [] as PersonWarning[],
): Promise<string[]> {
  const session = new PersonSession(em, projectId, warnings);
  const personIds: string[] = new Array(events.length);
  let run: number[] = [];
  const flushRun = async () => {
    if (run.length === 0) return;
    const indexes = run;
    run = [];
    // A run holds no merge, so each distinct id's events concern its person only: a person the run
    // creates is inserted with what all its events leave (written once), the others are updated below.
    const created = await session.loadOrCreate(
      indexes.map((i) => events[i]),
      true,
    );
    for (const i of indexes)
      personIds[i] = created.has(events[i].distinctId)
        ? session.uuidOf(events[i].distinctId)!
        : (session.applyIfLocked(events[i]) ?? session.uuidOf(events[i].distinctId)!);
  };
  // A personless event's deterministic uuid, once per distinct id (anonymous visitors send many events each).
  const personless = new Map<string, string>();
  for (const [index, event] of events.entries()) {
    if (!processesPerson(event)) {
      let uuid = session.uuidOf(event.distinctId) ?? personless.get(event.distinctId);
      if (uuid === undefined) {
        uuid = personUuidFor(projectId, event.distinctId);
        personless.set(event.distinctId, uuid);
      }
      personIds[index] = uuid;
      continue;
    }
    const partner = mergePartner(event);
    if (partner === null || partner === event.distinctId) {
      run.push(index);
      continue;
    }
    const illegal = !storableDistinctId(partner)
      ? partner
      : isIllegalDistinctId(partner)
        ? partner
        : isIllegalDistinctId(event.distinctId)
          ? event.distinctId
          : null;
    if (illegal !== null) {
      warnings.push({
        type: 'cannot_merge_with_illegal_distinct_id',
        eventUuid: event.uuid,
        distinctId: event.distinctId,
        details: {
          eventName: event.event,
          illegalDistinctId: clipped(illegal),
          otherDistinctId: clipped(illegal === partner ? event.distinctId : partner),
          reason: storableDistinctId(illegal) ? 'illegal distinct id' : 'distinct id over 400 characters',
        },
      });
      run.push(index);
      continue;
    }
    await flushRun();
    personIds[index] = await session.merge(event, partner);
  }
  await flushRun();
  await session.save();
  return personIds;
}

// The statements of person processing, each built once (prepared.ts): this path runs a few dozen per request.

/**
 * Creates the persons of `records` (JSON: uuid, distinct_id, properties, created_at) and links their distinct
 * ids, in one statement; `linked` is false where another request linked the distinct id meanwhile.
 */
const createPersons = prepared((db: Kysely<DB>, records: string, projectId: number) =>
  db
    .with('r', (q) =>
      q
        .selectFrom(
          sql<{
            uuid: string;
            distinct_id: string;
            properties: Properties;
            created_at: Date;
          }>`jsonb_to_recordset(${records}::jsonb)`.as<'r'>(
            sql`r(uuid uuid, distinct_id text, properties jsonb, created_at timestamptz)`,
          ),
        )
        .selectAll(),
    )
    .with('p', (q) =>
      q
        .insertInto('person')
        .columns(['uuid', 'project_id', 'properties', 'created_at', 'version'])
        .expression((eb) =>
          eb
            .selectFrom('r')
            .select([
              'r.uuid',
              eb.val(projectId).as('project_id'),
              'r.properties',
              'r.created_at',
              eb.val('0').as('version'),
            ])
            .orderBy('r.uuid'),
        )
        .onConflict((oc) => oc.columns(['project_id', 'uuid']).doNothing())
        .returning(['id', 'uuid']),
    )
    .with('l', (q) =>
      q
        .insertInto('person_distinct_id')
        .columns(['project_id', 'person_id', 'distinct_id'])
        .expression((eb) =>
          eb
            .selectFrom('p')
            .innerJoin('r', 'r.uuid', 'p.uuid')
            .select([eb.val(projectId).as('project_id'), 'p.id', 'r.distinct_id'])
            .orderBy('r.distinct_id'),
        )
        .onConflict((oc) => oc.columns(['project_id', 'distinct_id']).doNothing())
        .returning('distinct_id'),
    )
    .selectFrom('p')
    .innerJoin('r', 'r.uuid', 'p.uuid')
    .leftJoin('l', 'l.distinct_id', 'r.distinct_id')
    .select((eb) => ['p.id', 'p.uuid', 'r.distinct_id', eb('l.distinct_id', 'is not', null).as('linked')]),
);

// One index probe per distinct id (a LATERAL … LIMIT 1 is not flattened into a join), so the whole
// key is always the index condition. With `= any(array)`, statistics older than the project (it
// looked empty) made the planner scan all the project's distinct ids and filter: ingestion into a
// new project slowed as it grew, down to ~550 events/s in bench/ingestion.
export const personsOf = (db: Kysely<DB>, distinctIds: string[], projectId: number) =>
  db
    .selectFrom(sql<{ distinct_id: string }>`unnest(${distinctIds}::text[])`.as<'r'>(sql`r(distinct_id)`))
    .crossJoinLateral((eb) =>
      eb
        .selectFrom('person_distinct_id as d')
        .select('d.person_id')
        .where('d.project_id', '=', projectId)
        .whereRef('d.distinct_id', '=', 'r.distinct_id')
        .limit(1)
        .as('d'),
    )
    .innerJoin('person as p', 'p.id', 'd.person_id')
    .select(['r.distinct_id', 'p.id', 'p.uuid', 'p.properties', 'p.is_identified', 'p.created_at', 'p.version']);
const lockingPersonsOf = (db: Kysely<DB>, distinctIds: string[], projectId: number) =>
  personsOf(db, distinctIds, projectId).orderBy('p.id').forUpdate('p');

/** The persons of `distinctIds`, locked. */
const lockPersons = prepared(lockingPersonsOf);

/**
 * The persons of `distinctIds`, locked, then (one statement) those of `findOnly`, found but not locked:
 * what only a locked person needs is null in their rows.
 */
const lockAndFindPersons = prepared((db: Kysely<DB>, distinctIds: string[], findOnly: string[], projectId: number) =>
  db
    .with('locked', () => lockingPersonsOf(db, distinctIds, projectId))
    .selectFrom('locked')
    .select((eb) => [
      'locked.distinct_id',
      'locked.id',
      'locked.uuid',
      eb.ref('locked.properties').$castTo<Properties | null>().as('properties'),
      eb.ref('locked.is_identified').$castTo<boolean | null>().as('is_identified'),
      eb.ref('locked.created_at').$castTo<Date | null>().as('created_at'),
      eb.ref('locked.version').$castTo<string | null>().as('version'),
      sql<boolean>`true`.as('locked'),
    ])
    .unionAll((eb) =>
      eb
        .selectFrom(personsOf(db, findOnly, projectId).as('f'))
        .select([
          'f.distinct_id',
          'f.id',
          'f.uuid',
          sql<null>`null`.as('properties'),
          sql<null>`null`.as('is_identified'),
          sql<null>`null`.as('created_at'),
          sql<null>`null`.as('version'),
          sql<boolean>`false`.as('locked'),
        ]),
    ),
);

/** A merge: the other person's distinct ids, static cohorts and flag hash keys move to the target, then it goes. */
const moveDistinctIds = prepared((db: Kysely<DB>, targetId: string, otherId: string) =>
  db.updateTable('person_distinct_id').set({ person_id: targetId }).where('person_id', '=', otherId),
);
const copyCohortMemberships = prepared((db: Kysely<DB>, targetId: string, otherId: string) =>
  db
    .insertInto('cohort_person')
    .columns(['cohort_id', 'person_id', 'version'])
    .expression((eb) =>
      eb
        .selectFrom('cohort_person')
        .select(['cohort_id', eb.val(targetId).as('person_id'), 'version'])
        .where('person_id', '=', otherId),
    )
    .onConflict((oc) => oc.doNothing()),
);
const deletePerson = prepared((db: Kysely<DB>, id: string) => db.deleteFrom('person').where('id', '=', id));

/** Links a distinct id to a person, unless another person holds it. */
const addDistinctId = prepared((db: Kysely<DB>, projectId: number, personId: string, distinctId: string) =>
  db
    .insertInto('person_distinct_id')
    .values({ project_id: projectId, person_id: personId, distinct_id: distinctId })
    .onConflict((oc) => oc.columns(['project_id', 'distinct_id']).doNothing()),
);

/** Writes persons (JSON: id, properties, is_identified, created_at, version) in one statement. */
const savePersons = prepared((db: Kysely<DB>, persons: string) =>
  db
    .updateTable('person as p')
    .from(
      sql<{
        id: string;
        properties: Properties;
        is_identified: boolean;
        created_at: Date;
        version: string;
      }>`jsonb_to_recordset(${persons}::jsonb)`.as<'v'>(
        sql`v(id bigint, properties jsonb, is_identified boolean, created_at timestamptz, version bigint)`,
      ),
    )
    .set((eb) => ({
      properties: eb.ref('v.properties'),
      is_identified: eb.ref('v.is_identified'),
      created_at: eb.ref('v.created_at'),
      version: eb(eb.fn<string>('greatest', ['p.version', 'v.version']), '+', '1'),
    }))
    .whereRef('p.id', '=', 'v.id'),
);

/** Persons locked by this transaction, by distinct id, with their pending property changes. */
class PersonSession {
  private readonly byDistinctId = new Map<string, LockedPerson>();
  /**
   * Uuids of persons found, not locked, for distinct ids whose events change nothing (no $set,
   * $set_once or $unset): such an event needs its person's uuid only. A merge moves them as it moves the ids.
   */
  private readonly unlocked = new Map<string, string>();
  private readonly em: EntityManager;
  private readonly projectId: number;

  private readonly warnings: WarningSink;

  constructor(em: EntityManager, projectId: number, warnings: WarningSink) {
    this.em = em;
    this.projectId = projectId;
    this.warnings = warnings;
  }

  /** The typed statements of this transaction. */
  private get db(): Kysely<DB> {
    return db(this.em);
  }

  uuidOf(distinctId: string): string | undefined {
    return this.byDistinctId.get(distinctId)?.uuid ?? this.unlocked.get(distinctId);
  }

  /**
   * Locks the persons of these events' distinct ids, creating the missing ones, each with the
   * timestamp of its first event. With `applyEvents`, a person created here gets the properties its
   * events in `events` leave, applied in order as apply() would (so it is written once, not inserted
   * and then updated); returns the distinct ids whose events were so applied.
   */
  async loadOrCreate(events: IngestEvent[], applyEvents = false): Promise<Set<string>> {
    const applied = new Set<string>();
    // With `applyEvents`, a stored person none of whose events here changes it is found, not locked.
    const changing = new Set<string>();
    for (const e of events)
      if (!applyEvents || !isEmptyUpdate(personUpdateOf(e.event, e.properties))) changing.add(e.distinctId);
    const wanted = [...new Set(events.map((e) => e.distinctId))].filter((id) => !this.byDistinctId.has(id)).sort();
    const toLock = wanted.filter((id) => changing.has(id));
    const toFind = wanted.filter((id) => !changing.has(id) && !this.unlocked.has(id));
    if (toLock.length === 0 && toFind.length === 0) return applied;
    for (const id of toLock) this.unlocked.delete(id); // found before; now its person changes
    await this.lockExisting(toLock, toFind);
    const missing = new Set(wanted.filter((id) => !this.byDistinctId.has(id) && !this.unlocked.has(id)));
    if (missing.size === 0) return applied;
    const drafts = new Map<string, LockedPerson>();
    for (const e of events) {
      if (!missing.has(e.distinctId)) continue;
      let draft = drafts.get(e.distinctId);
      if (!draft) {
        draft = {
          id: '',
          uuid: personUuidFor(this.projectId, e.distinctId),
          properties: {},
          is_identified: false,
          created_at: e.timestamp,
          version: '0',
          changed: false,
          created: true,
        };
        drafts.set(e.distinctId, draft);
      }
      if (applyEvents) this.update(draft, personUpdateOf(e.event, e.properties), e.uuid);
    }
    const rows = [...drafts].map(([distinctId, d]) => ({
      uuid: d.uuid,
      distinct_id: distinctId,
      properties: d.properties,
      created_at: d.created_at.toISOString(),
    }));
    // One statement creates the persons and links their distinct ids. Deterministic uuids make a
    // concurrent create of the same distinct id collide on the person and wait; a distinct id another
    // request linked meanwhile collides on person_distinct_id (the person created for it is an orphan).
    const inserted = await createPersons(this.db, JSON.stringify(rows), this.projectId);
    // Persons this transaction created are its own until it commits (no other can see or lock them).
    const orphans: string[] = [];
    for (const row of inserted) {
      if (!row.linked) {
        orphans.push(String(row.id));
        continue;
      }
      const person = drafts.get(row.distinct_id)!;
      person.id = String(row.id);
      person.changed = false; // written as inserted
      this.byDistinctId.set(row.distinct_id, person);
      if (applyEvents) applied.add(row.distinct_id);
    }
    // A person created here whose distinct id another request claimed meanwhile has no ids: remove it.
    if (orphans.length > 0) await this.db.deleteFrom('person').where('id', 'in', orphans).execute();
    // Distinct ids another request created a person for: lock that person.
    const theirs = [...missing].filter((id) => !this.byDistinctId.has(id));
    if (theirs.length > 0) await this.lockExisting(theirs);
    for (const id of missing)
      if (!this.byDistinctId.has(id)) throw new Error('person for distinct id could not be created');
    return applied;
  }

  /** Locks the persons of `distinctIds` and finds (unlocked) those of `findOnly`, in one statement. */
  private async lockExisting(distinctIds: string[], findOnly: string[] = []): Promise<void> {
    const rows =
      findOnly.length === 0
        ? (await lockPersons(this.db, distinctIds, this.projectId)).map((row) => ({ ...row, locked: true }))
        : await lockAndFindPersons(this.db, distinctIds, findOnly, this.projectId);
    for (const row of rows) if (row.locked === false) this.unlocked.set(row.distinct_id, row.uuid);
    const byId = new Map<string, LockedPerson>();
    for (const person of this.byDistinctId.values()) byId.set(String(person.id), person);
    for (const row of rows) {
      if (row.locked === false) continue;
      const key = String(row.id);
      let person = byId.get(key);
      if (!person) {
        person = {
          id: key,
          uuid: row.uuid,
          properties: row.properties ?? {},
          is_identified: row.is_identified ?? false,
          created_at: new Date(row.created_at ?? 0),
          version: String(row.version),
          changed: false,
          created: false,
        };
        byId.set(key, person);
      }
      this.byDistinctId.set(row.distinct_id, person);
    }
  }

  /** apply() for an event whose person is locked; undefined for one only found (its event changes nothing). */
  applyIfLocked(event: IngestEvent): string | undefined {
    return this.byDistinctId.has(event.distinctId) ? this.apply(event) : undefined;
  }

  /** Applies an ordinary event's update to its (locked) person; returns the person's uuid. */
  apply(event: IngestEvent, update: PropertyUpdate = personUpdateOf(event.event, event.properties)): string {
    const person = this.byDistinctId.get(event.distinctId)!;
    this.update(person, update, event.uuid);
    return person.uuid;
  }

  private update(person: LockedPerson, update: PropertyUpdate, eventUuid: string): void {
    const { properties, changed } = applyPropertyUpdate(person.properties, update);
    const first = person.created && !Object.hasOwn(properties, '$creator_event_uuid');
    if (first) properties.$creator_event_uuid = eventUuid;
    if (changed || first) {
      person.properties = properties;
      person.changed = true;
    }
  }

  /** $identify / $create_alias / $merge_dangerously: `event.distinctId` is the person merged into. */
  async merge(event: IngestEvent, otherId: string): Promise<string> {
    const targetId = event.distinctId;
    await this.lockExisting([targetId, otherId].filter((id) => !this.byDistinctId.has(id)).sort());
    const target = this.byDistinctId.get(targetId);
    const other = this.byDistinctId.get(otherId);
    const update = personUpdateOf(event.event, event.properties);

    if (!target && !other) {
      await this.loadOrCreate([event]);
      const created = this.byDistinctId.get(targetId)!;
      await this.addDistinctId(created, otherId);
      this.markIdentified(created);
      this.update(created, update, event.uuid);
      return created.uuid;
    }
    if (!target || !other) {
      const existing = (target ?? other)!;
      await this.addDistinctId(existing, target ? otherId : targetId);
      this.markIdentified(existing);
      this.update(existing, update, event.uuid);
      return existing.uuid;
    }
    if (target.id === other.id || (other.is_identified && event.event !== '$merge_dangerously')) {
      // Already one person, or the other person is identified: PostHog refuses to merge it.
      if (target.id !== other.id)
        this.warnings.push({
          type: 'cannot_merge_already_identified',
          eventUuid: event.uuid,
          distinctId: targetId,
          details: {
            eventName: event.event,
            sourcePersonDistinctId: clipped(otherId),
            targetPersonDistinctId: clipped(targetId),
            reason: 'the other person is already identified; use $merge_dangerously to merge it',
          },
        });
      this.update(target, update, event.uuid);
      return target.uuid;
    }
    target.properties = { ...other.properties, ...target.properties };
    // The earlier of two Dates (Math.min would make a number).
    target.created_at = target.created_at < other.created_at ? target.created_at : other.created_at;
    target.version = String(Math.max(Number(target.version), Number(other.version)));
    target.is_identified = true;
    target.changed = true;
    this.update(target, update, event.uuid);
    await moveDistinctIds(this.db, target.id, other.id);
    await copyCohortMemberships(this.db, target.id, other.id);
    await copyHashKeyOverrides(this.db, target.id, other.id);
    await deletePerson(this.db, other.id);
    for (const [distinctId, person] of this.byDistinctId)
      if (person === other) this.byDistinctId.set(distinctId, target);
    for (const [distinctId, uuid] of this.unlocked) if (uuid === other.uuid) this.unlocked.set(distinctId, target.uuid);
    return target.uuid;
  }

  private markIdentified(person: LockedPerson) {
    if (!person.is_identified) {
      person.is_identified = true;
      person.changed = true;
    }
  }

  private async addDistinctId(person: LockedPerson, distinctId: string) {
    await addDistinctId(this.db, this.projectId, person.id, distinctId);
    this.byDistinctId.set(distinctId, person);
  }

  /** Writes every changed person in one statement. */
  async save(): Promise<void> {
    const changed = [...new Set(this.byDistinctId.values())].filter((p) => p.changed);
    if (changed.length === 0) return;
    const values = JSON.stringify(
      changed.map((p) => ({
        id: p.id,
        properties: p.properties,
        is_identified: p.is_identified,
        created_at: p.created_at.toISOString(),
        version: p.version,
      })),
    );
    await savePersons(this.db, values);
  }
}
