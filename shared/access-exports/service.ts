// Access exports as the API makes them: the persons found as bulk_delete finds them (ids or uuids,
// and the owners of distinct ids), a dry run (what would be exported, per store, nothing written), and
// the request recorded with its read-access log entry in one transaction under the deletion requests'
// Idempotency-Key rules (per project, user and key); the worker's job is handed over after the commit
// (or by the reconciler, when Redis is down then).
import type { EntityManager } from '@mikro-orm/postgresql';
import { listPersonAccess, recordPersonAccess } from '../access-log/index.ts';
import { answerOnce, type IdempotencyKey } from '../deletions/index.ts';
import { personRecordings, type EventStore } from '../events/index.ts';
import { hashKeyOverridesOf } from '../flags/index.ts';
import { personsByIdsOrDistinctIds, type PersonWithIds } from '../persons/index.ts';
import { personCohorts } from '../cohorts/index.ts';
import type { Actor } from '../platform/activity-log.ts';
import { enqueueAccessExports, requeueAccessExports, type Queues } from '../platform/queues.ts';
import { exportView, insertExport, pendingExportIds, type AccessExportView } from './store.ts';

/** Distinct ids (and ids) one request may name, as Mixpanel's retrievals take them. */
export const ACCESS_EXPORT_MAX_IDS = 2000;

/** Who asked, for the request and its read-access log entry. */
export interface AccessRequester extends Actor {
  requestId: string | null;
  clientAddress: string | null;
}

/** No person matched the ids: nothing was recorded. */
export class NoPersonsFound extends Error {}

/** The persons a request names, as bulk_delete finds them (a person named both ways once). */
export const exportPersons = (em: EntityManager, projectId: number, ids: string[], distinctIds: string[]) =>
  personsByIdsOrDistinctIds(em, projectId, ids, distinctIds);

export interface AccessExportDryRun {
  dry_run: true;
  persons_found: number;
  /** What the archive would hold now, per store (ClickHouse only with EVENT_STORE=clickhouse). */
  would_export: {
    postgres: {
      persons: number;
      distinct_ids: number;
      events: number;
      recordings: number;
      cohort_memberships: number;
      flag_hash_key_overrides: number;
      access_log_entries: number;
    };
    clickhouse?: { events: number };
  };
}

/** What exporting `persons` now would hand over, per store; reads only. */
export async function previewAccessExport(
  em: EntityManager,
  events: EventStore,
  projectId: number,
  persons: PersonWithIds[],
): Promise<AccessExportDryRun> {
  const uuids = persons.map((p) => p.uuid);
  const distinctIds = persons.flatMap((p) => p.distinct_ids);
  const counts = await events.countExportEvents(projectId, {
    cutoff: new Date().toISOString(),
    personIds: uuids,
    distinctIds,
  });
  let cohortMemberships = 0;
  for (const p of persons) cohortMemberships += (await personCohorts(em, events, projectId, String(p.id))).length;
  const accessEntries = new Set<string>();
  for (const uuid of uuids)
    for (let offset = 0; ; offset += 1000) {
      const page = await listPersonAccess(em, { projectId, personUuid: uuid, limit: 1000, offset });
      for (const r of page) accessEntries.add(r.id);
      if (page.length < 1000) break;
    }
  return {
    dry_run: true,
    persons_found: persons.length,
    would_export: {
      postgres: {
        persons: persons.length,
        distinct_ids: distinctIds.length,
        events: counts.postgres ?? 0,
        recordings: (await personRecordings(em, projectId, uuids, distinctIds)).length,
        cohort_memberships: cohortMemberships,
        flag_hash_key_overrides: (
          await hashKeyOverridesOf(
            em,
            projectId,
            persons.map((p) => String(p.id)),
          )
        ).length,
        access_log_entries: accessEntries.size,
      },
      ...(counts.clickhouse === undefined ? {} : { clickhouse: { events: counts.clickhouse } }),
    },
  };
}

/**
 * Records an export of the persons `ids`/`distinctIds` name and its read-access log entry in one
 * transaction, under `key` (a retry with it answers the first answer, `replayed`; the key with another
 * request: 'key_reused'); then hands the job to the worker. Throws NoPersonsFound when none matches.
 */
export async function requestAccessExport(
  em: EntityManager,
  requester: AccessRequester,
  key: IdempotencyKey | null,
  ask: { ids: string[]; distinctIds: string[] },
  queues: Pick<Queues, 'deletions'>,
): Promise<{ status: number; body: unknown; replayed: boolean } | 'key_reused'> {
  return answerOnce(em, requester.projectId, key, async (tx) => {
    const persons = await exportPersons(tx, requester.projectId, ask.ids, ask.distinctIds);
    if (persons.length === 0) throw new NoPersonsFound('No person matches these ids or distinct ids.');
    const row = await insertExport(tx, {
      projectId: requester.projectId,
      userId: requester.userId,
      apiKeyId: requester.keyId ?? null,
      personUuids: persons.map((p) => p.uuid),
      personIds: persons.map((p) => String(p.id)),
      distinctIds: [...new Set(persons.flatMap((p) => p.distinct_ids))],
      request: { ids: ask.ids, distinct_ids: ask.distinctIds },
    });
    await recordPersonAccess(tx, {
      projectId: requester.projectId,
      userId: requester.userId,
      apiKeyId: requester.keyId ?? null,
      action: 'access_export_create',
      personUuids: persons.map((p) => p.uuid),
      requestId: requester.requestId,
      clientAddress: requester.clientAddress,
      details: { access_export_id: row.id },
    });
    return {
      answer: { status: 202, body: exportView(row) },
      afterCommit: () => enqueueAccessExports(queues.deletions, [row.id]),
    };
  });
}

/** Records a read of an export's archive in the persons' read-access log. */
export async function recordExportDownload(
  em: EntityManager,
  requester: AccessRequester,
  view: AccessExportView,
): Promise<void> {
  await recordPersonAccess(em, {
    projectId: requester.projectId,
    userId: requester.userId,
    apiKeyId: requester.keyId ?? null,
    action: 'access_export_download',
    personUuids: view.person_uuids,
    requestId: requester.requestId,
    clientAddress: requester.clientAddress,
    details: { access_export_id: view.id, manifest_sha256: view.manifest_sha256 },
  });
}

/** The worker's reconciler pass: every pending export gets a live job (Redis may have been down at the request). */
export async function reconcileAccessExports(deps: { orm: { em: EntityManager }; queues: Pick<Queues, 'deletions'> }) {
  const em = deps.orm.em.fork();
  const pending = await pendingExportIds(em);
  if (pending.length === 0) return [];
  return requeueAccessExports(deps.queues.deletions, pending, async (ids) => {
    const still = new Set(await pendingExportIds(em));
    return ids.filter((id) => still.has(id));
  });
}
