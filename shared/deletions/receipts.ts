// Deletion receipts: for every verified deletion request, a signed statement of what was found before
// and after in each store it covers. The counts before are kept on the request (async_deletion.receipt_basis):
// person stores counted by the API in the transaction that deletes the person, recordings by the worker
// when it claims the request, events by the worker's delete statements themselves (each reports its rows
// by person and distinct id, added to the requests in its own transaction); the counts after are
// taken at verification, and the receipt is written in the transaction that marks the request completed.
// A receipt holds ids, counts and times, never a property, so it outlives the person.
//
// Signature: Ed25519 over the receipt's canonical form, JSON with every object's keys sorted (by UTF-16
// code units, as Array.prototype.sort) and no whitespace, strings and numbers as JSON.stringify writes
// them. The key is DELETION_RECEIPT_PRIVATE_KEY(_FILE), or, when unset, one generated on first use and
// kept in PostgreSQL (deletion_receipt_key) so every process signs with the same key. Every public key
// that ever signed stays in that table and is served with its id, so old receipts verify after a rotation.
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { pgArray, rows, run, runBound } from '../db/sql.ts';
import type { DeletedKeyCount } from '../events/event-store.ts';

export const RECEIPT_ALGORITHM = 'Ed25519';

// ---- Canonical form and signatures ---------------------------------------------------------------

/** JSON with sorted keys and no whitespace: the bytes a receipt's signature covers. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') {
    if (typeof value === 'number' && !Number.isFinite(value)) throw new Error('a receipt holds only finite numbers');
    if (value === undefined) throw new Error('a receipt holds no undefined values');
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const keys = Object.keys(value).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`).join(',')}}`;
}

export interface ReceiptSigner {
  keyId: string;
  privateKey: KeyObject;
  publicKeyPem: string;
}

/** A key's id: the first 16 hex digits of the SHA-256 of its public key (DER SubjectPublicKeyInfo). */
export function receiptKeyId(publicKey: KeyObject): string {
  return createHash('sha256')
    .update(publicKey.export({ type: 'spki', format: 'der' }))
    .digest('hex')
    .slice(0, 16);
}

const signerFor = (privateKey: KeyObject): ReceiptSigner => {
  const publicKey = createPublicKey(privateKey);
  return {
    keyId: receiptKeyId(publicKey),
    privateKey,
    publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
  };
};

// One signer per configured key and database, for the life of the process (a rotation applies on restart).
const signers = new Map<string, Promise<ReceiptSigner>>();

/**
 * The key receipts are signed with: the configured one (its public key recorded in deletion_receipt_key),
 * or else the generated one in deletion_receipt_key, made on first use (under a lock, so concurrent
 * processes agree on one).
 */
export function receiptSigner(em: EntityManager, configuredPem: string): Promise<ReceiptSigner> {
  const cacheKey = `${em.config.get('dbName')}\n${configuredPem}`;
  let signer = signers.get(cacheKey);
  if (!signer) {
    signer = loadSigner(em.fork(), configuredPem);
    signers.set(cacheKey, signer);
    signer.catch(() => signers.delete(cacheKey));
  }
  return signer;
}

async function loadSigner(em: EntityManager, configuredPem: string): Promise<ReceiptSigner> {
  if (configuredPem) {
    const signer = signerFor(createPrivateKey(configuredPem));
    await run(
      em,
      `insert into deletion_receipt_key (id, public_key) values (?, ?) on conflict (id) do update set retired_at = null`,
      [signer.keyId, signer.publicKeyPem],
    );
    return signer;
  }
  return em.transactional(async (tx) => {
    const txEm = tx;
    await rows(txEm, `select pg_advisory_xact_lock(hashtext('deletion_receipt_key'))`);
    const [found] = await rows<{ private_key: string }>(
      txEm,
      `select private_key from deletion_receipt_key where private_key is not null and retired_at is null
        order by created_at desc limit 1`,
    );
    if (found) return signerFor(createPrivateKey(found.private_key));
    const { privateKey } = generateKeyPairSync('ed25519');
    const signer = signerFor(privateKey);
    await run(txEm, `insert into deletion_receipt_key (id, public_key, private_key) values (?, ?, ?)`, [
      signer.keyId,
      signer.publicKeyPem,
      privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    ]);
    return signer;
  });
}

/** Whether `signature` (base64) is the key's Ed25519 signature of `content`. */
export function verifyReceiptSignature(content: string, signature: string, publicKeyPem: string): boolean {
  return verify(null, Buffer.from(content, 'utf8'), createPublicKey(publicKeyPem), Buffer.from(signature, 'base64'));
}

export interface ReceiptKeyView {
  key_id: string;
  algorithm: string;
  public_key: string;
  created_at: string;
  retired_at: string | null;
}

/** Every key that signs or signed receipts, newest first. */
export async function receiptKeys(em: EntityManager): Promise<ReceiptKeyView[]> {
  return rows<ReceiptKeyView>(
    em,
    `select id as key_id, ? as algorithm, public_key, ${iso('created_at')} as created_at, ${iso('retired_at')} as retired_at
       from deletion_receipt_key order by created_at desc, id`,
    [RECEIPT_ALGORITHM],
  );
}

// ---- Counts before -------------------------------------------------------------------------------

/** A timestamptz as ISO-8601 UTC with microseconds (PostgreSQL's full precision, the cutoff's too). */
const iso = (column: string) => `to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

export interface PersonStoreCounts {
  personIds: string[];
  persons: number;
  distinctIds: number;
  cohortMemberships: number;
  flagHashKeyOverrides: number;
}

/** The person rows (and what hangs on them) of these persons, counted before the API deletes them; by uuid. */
export async function personStoresBefore(
  em: EntityManager,
  projectId: number,
  personIds: string[],
): Promise<Map<string, PersonStoreCounts>> {
  const found = await rows<{ uuid: string; id: string; d: number; c: number; o: number }>(
    em,
    `select p.uuid::text as uuid, p.id::text as id,
            (select count(*) from person_distinct_id d where d.person_id = p.id)::int as d,
            (select count(*) from cohort_person c where c.person_id = p.id)::int as c,
            (select count(*) from feature_flag_hash_key_override o where o.person_id = p.id)::int as o
       from person p where p.project_id = ? and p.id = any(?::bigint[])`,
    [projectId, pgArray(personIds)],
  );
  const byUuid = new Map<string, PersonStoreCounts>();
  for (const r of found) {
    const seen = byUuid.get(r.uuid) ?? {
      personIds: [],
      persons: 0,
      distinctIds: 0,
      cohortMemberships: 0,
      flagHashKeyOverrides: 0,
    };
    seen.personIds.push(r.id);
    seen.persons += 1;
    seen.distinctIds += r.d;
    seen.cohortMemberships += r.c;
    seen.flagHashKeyOverrides += r.o;
    byUuid.set(r.uuid, seen);
  }
  return byUuid;
}

interface ReceiptBasis {
  requested_by?: {
    user_id: number | null;
    email: string | null;
    api_key_id: string | null;
    api_key_label: string | null;
  };
  /** Internal ids of the person rows the request's transaction deleted (their stores are verified by them). */
  person_ids?: string[];
  /** Sessions of a recordings request found before (their snapshots are verified by them). */
  session_ids?: string[];
  before?: Record<string, number>;
}

/**
 * In the API's transaction, after the requests are recorded: who asked (user and key) and the person
 * stores found before. A request that a pending one took in adds its person rows to the pending one's.
 */
export async function recordRequestBasis(
  em: EntityManager,
  requestIds: string[],
  requester: { userId: number | null; keyId: string | null },
  personStores: Map<string, PersonStoreCounts>,
): Promise<void> {
  if (requestIds.length === 0) return;
  const [who] = await rows<{ email: string | null; label: string | null }>(
    em,
    `select (select email from app_user where id = ?) as email, (select label from personal_api_key where id = ?) as label`,
    [requester.userId, requester.keyId],
  );
  const requests = await rows<{ id: string; key: string; receipt_basis: ReceiptBasis | null }>(
    em,
    `select id::text, key, receipt_basis from async_deletion where id = any(?::bigint[])`,
    [pgArray(requestIds)],
  );
  const updates = requests.map((r) => {
    const basis: ReceiptBasis = r.receipt_basis ?? {};
    basis.requested_by ??= {
      user_id: requester.userId,
      email: who.email,
      api_key_id: requester.keyId,
      api_key_label: who.label,
    };
    const stores = personStores.get(r.key);
    if (stores) {
      const before = basis.before ?? {};
      basis.person_ids = [...(basis.person_ids ?? []), ...stores.personIds];
      before.persons = (before.persons ?? 0) + stores.persons;
      before.distinct_ids = (before.distinct_ids ?? 0) + stores.distinctIds;
      before.cohort_memberships = (before.cohort_memberships ?? 0) + stores.cohortMemberships;
      before.flag_hash_key_overrides = (before.flag_hash_key_overrides ?? 0) + stores.flagHashKeyOverrides;
      basis.before = before;
    }
    return { id: r.id, basis };
  });
  await run(
    em,
    `update async_deletion a set receipt_basis = u.basis
       from jsonb_to_recordset(?::jsonb) as u(id bigint, basis jsonb) where a.id = u.id`,
    [JSON.stringify(updates)],
  );
}

/** One request of a deletion group: what its events were matched by. */
export interface EventCountTarget {
  id: string;
  key: string;
  distinctIds: string[] | null;
}

/**
 * The events found before, counted by the deletes themselves: each delete statement reports its rows
 * by (person uuid, distinct id), and each count is added, in the delete's transaction, to every request
 * of the group whose uuid or distinct ids it matches (once per request). A row is found before exactly
 * when a delete of the request removes it (only what existed at the cutoff is deleted), so the sum over
 * every attempt equals a count taken before the first, without a scan of its own.
 */
export function eventCounter(requests: EventCountTarget[]) {
  const byKey = Map.groupBy(requests, (r) => r.key.toLowerCase());
  const byDistinctId = new Map<string, EventCountTarget[]>();
  for (const r of requests)
    for (const d of r.distinctIds ?? []) byDistinctId.set(d, [...(byDistinctId.get(d) ?? []), r]);
  return async (em: EntityManager, counts: DeletedKeyCount[]): Promise<void> => {
    const total = new Map<string, number>();
    for (const c of counts) {
      const matched = new Set([
        ...(c.personId ? (byKey.get(c.personId.toLowerCase()) ?? []) : []),
        ...(byDistinctId.get(c.distinctId) ?? []),
      ]);
      for (const r of matched) total.set(r.id, (total.get(r.id) ?? 0) + c.n);
    }
    if (!total.size) return;
    await runBound(
      em,
      `update async_deletion a
          set receipt_basis = jsonb_set(coalesce(a.receipt_basis, '{}'), '{before}',
                coalesce(a.receipt_basis->'before', '{}') || jsonb_build_object('events',
                  coalesce((a.receipt_basis->'before'->>'events')::bigint, 0) + c.n))
         from jsonb_to_recordset($1::jsonb) as c(id bigint, n bigint)
        where a.id = c.id`,
      [JSON.stringify([...total].map(([id, n]) => ({ id, n })))],
    );
  };
}

/** The same for a recordings request: its sessions (kept, to verify their snapshots) and their snapshots. */
export async function recordRecordingsBefore(
  em: EntityManager,
  id: string,
  match: { sql: string; params: unknown[] },
): Promise<void> {
  const [basis] = await rows<{ counted: boolean }>(
    em,
    `select receipt_basis->'before'->'recordings' is not null as counted from async_deletion where id = ?`,
    [id],
  );
  if (!basis || basis.counted) return;
  await run(
    em,
    `with s as (select project_id, session_id from session_recording where ${match.sql})
     update async_deletion a
        set receipt_basis = jsonb_set(coalesce(a.receipt_basis, '{}'), '{before}',
              coalesce(a.receipt_basis->'before', '{}') || jsonb_build_object(
                'recordings', (select count(*) from s),
                'recording_snapshots', (select count(*) from session_recording_snapshot n
                                         where (n.project_id, n.session_id) in (select project_id, session_id from s))))
            || jsonb_build_object('session_ids', coalesce((select jsonb_agg(session_id order by session_id) from s), '[]'))
      where a.id = ?`,
    [...match.params, id],
  );
}

// ---- The receipt ---------------------------------------------------------------------------------

export interface StoreVerification {
  after: number;
  /** The statement that counted `after`, its parameters named as in the receipt. */
  statement: string;
}

// Person stores are verified by the internal ids of the rows the request deleted: the same uuid and
// distinct ids may come back later as a new person (new events), which the request does not cover.
const PERSON_STORE_AFTER: Record<string, string> = {
  persons: `select count(*) from person where project_id = $project_id and id = any($person_row_ids)`,
  distinct_ids: `select count(*) from person_distinct_id where project_id = $project_id and person_id = any($person_row_ids)`,
  cohort_memberships: `select count(*) from cohort_person where person_id = any($person_row_ids)`,
  flag_hash_key_overrides: `select count(*) from feature_flag_hash_key_override where project_id = $project_id and person_id = any($person_row_ids)`,
};
const SNAPSHOTS_AFTER = `select count(*) from session_recording_snapshot where project_id = $project_id and session_id = any($session_ids_found_before)`;

export class ReceiptVerificationError extends Error {}

/**
 * In the transaction that marks the batch completed (after completeDeletions): counts each request's
 * other stores after, and writes its signed receipt. `verified` is what the job itself verified for the
 * whole batch (its events, or its recordings): a batch's statement matches the union of its requests, so
 * zero for it is zero for each. Throws (the transaction rolls back, the job retries) if anything is left.
 */
export async function writeDeletionReceipts(
  em: EntityManager,
  batch: string[],
  verified: Record<string, StoreVerification>,
  signer: ReceiptSigner,
): Promise<void> {
  const requests = await rows<Record<string, any>>(
    em,
    `select a.id::text as id, a.project_id, a.key, a.distinct_ids, a.deletion_type, a.mode, a.created_by_id,
            ${iso('a.cutoff')} as cutoff, ${iso('a.created_at')} as accepted_at, ${iso('a.started_at')} as started_at,
            ${iso('a.delete_verified_at')} as verified_at, coalesce(a.receipt_basis, '{}') as basis,
            -- Only requests that deleted a person have person stores, only recordings requests snapshots.
            case when cardinality(x.ids) > 0 then (select count(*) from person p
              where p.project_id = a.project_id and p.id = any(x.ids))::int else 0 end as persons,
            case when cardinality(x.ids) > 0 then (select count(*) from person_distinct_id d
              where d.project_id = a.project_id and d.person_id = any(x.ids))::int else 0 end as distinct_ids_after,
            case when cardinality(x.ids) > 0 then (select count(*) from cohort_person c
              where c.person_id = any(x.ids))::int else 0 end as cohort_memberships,
            case when cardinality(x.ids) > 0 then (select count(*) from feature_flag_hash_key_override o
              where o.project_id = a.project_id and o.person_id = any(x.ids))::int else 0 end as flag_hash_key_overrides,
            case when cardinality(x.sessions) > 0 then (select count(*) from session_recording_snapshot n
              where n.project_id = a.project_id and n.session_id = any(x.sessions))::int else 0 end as recording_snapshots
       from async_deletion a
       cross join lateral (select array(select jsonb_array_elements_text(a.receipt_basis->'person_ids'))::bigint[] as ids,
                                  array(select jsonb_array_elements_text(a.receipt_basis->'session_ids')) as sessions) x
      where a.id = any(?::bigint[]) order by a.id`,
    [pgArray(batch)],
  );
  const receipts = await Promise.all(
    requests.map(async (r) => {
      const body = receiptBody(r, verified, signer);
      const signature = await signAsync(canonicalJson(body), signer.privateKey);
      return {
        request_id: r.id,
        project_id: r.project_id as number,
        body,
        signature,
        key_id: signer.keyId,
      };
    }),
  );
  if (!receipts.length) return;
  // One bound parameter (the receipts as a JSON array) in the caller's transaction: formatting a
  // megabyte of JSON into the statement's text cost MikroORM's formatter 100–300 ms per 1000 receipts,
  // and a multi-row VALUES of 5000 parameters about as much again to plan.
  await runBound(
    em,
    `insert into deletion_receipt (request_id, project_id, body, signature, key_id)
     select request_id, project_id, body, signature, key_id
       from jsonb_to_recordset($1::jsonb) as r(request_id bigint, project_id int, body jsonb, signature text, key_id text)
     on conflict (request_id) do nothing`,
    [JSON.stringify(receipts)],
  );
}

/** Ed25519 on libuv's thread pool: a batch's 1000 signatures do not hold the event loop, and use every core. */
const signAsync = (content: string, key: KeyObject) =>
  new Promise<string>((resolve, reject) =>
    sign(null, Buffer.from(content, 'utf8'), key, (error, signature) =>
      error ? reject(error) : resolve(signature.toString('base64')),
    ),
  );

function receiptBody(r: Record<string, any>, verified: Record<string, StoreVerification>, signer: ReceiptSigner) {
  const basis = r.basis as ReceiptBasis;
  const before = basis.before ?? {};
  const stores: Record<string, { before: number | null; after: number; verified_by: string }> = {};
  if (basis.person_ids) {
    stores.persons = { before: before.persons ?? null, after: r.persons, verified_by: PERSON_STORE_AFTER.persons };
    for (const name of ['distinct_ids', 'cohort_memberships', 'flag_hash_key_overrides'])
      stores[name] = {
        before: before[name] ?? null,
        after: name === 'distinct_ids' ? r.distinct_ids_after : r[name],
        verified_by: PERSON_STORE_AFTER[name],
      };
  }
  // Events are counted as the deletes remove them: a request none of whose deletes found a row has no count, 0.
  for (const [name, v] of Object.entries(verified))
    stores[name] = { before: before[name] ?? (name === 'events' ? 0 : null), after: v.after, verified_by: v.statement };
  if (basis.session_ids)
    stores.recording_snapshots = {
      before: before.recording_snapshots ?? null,
      after: r.recording_snapshots,
      verified_by: SNAPSHOTS_AFTER,
    };
  const left = Object.entries(stores).filter(([, s]) => s.after !== 0);
  if (left.length)
    throw new ReceiptVerificationError(
      `deletion request ${r.id}: ${left.map(([name, s]) => `${s.after} ${name}`).join(', ')} left; retrying`,
    );
  return {
    receipt_version: 1,
    algorithm: RECEIPT_ALGORITHM,
    key_id: signer.keyId,
    request_id: r.id,
    project_id: r.project_id,
    person_uuid: r.key,
    distinct_ids: r.distinct_ids ?? [],
    deletion_type: r.deletion_type,
    mode: r.mode,
    cutoff: r.cutoff,
    requested_by: basis.requested_by ?? {
      user_id: r.created_by_id,
      email: null,
      api_key_id: null,
      api_key_label: null,
    },
    accepted_at: r.accepted_at,
    started_at: r.started_at,
    verified_at: r.verified_at,
    stores,
  };
}

// ---- What the API serves -------------------------------------------------------------------------

export interface DeletionReceiptView {
  request_id: string;
  project_id: number;
  person_uuid: string;
  created_at: string;
  algorithm: string;
  key_id: string;
  /** Base64 of the Ed25519 signature of `signed_content`. */
  signature: string;
  /** The receipt's canonical form: exactly the bytes signed. */
  signed_content: string;
  receipt: Record<string, unknown>;
}

const RECEIPT_COLUMNS = `request_id::text, project_id, body, signature, key_id, ${iso('created_at')} as created_at`;

function receiptView(row: Record<string, any>): DeletionReceiptView {
  return {
    request_id: row.request_id,
    project_id: row.project_id,
    person_uuid: row.body.person_uuid,
    created_at: row.created_at,
    algorithm: RECEIPT_ALGORITHM,
    key_id: row.key_id,
    signature: row.signature,
    signed_content: canonicalJson(row.body),
    receipt: row.body,
  };
}

export async function deletionReceipt(
  em: EntityManager,
  projectId: number,
  requestId: string,
): Promise<DeletionReceiptView | null> {
  const [found] = await rows(
    em,
    `select ${RECEIPT_COLUMNS} from deletion_receipt where project_id = ? and request_id = ?`,
    [projectId, requestId],
  );
  return found ? receiptView(found) : null;
}

/** A request's receipt whatever its project (the operators' page, behind the operator credential). */
export async function deletionReceiptOfRequest(
  em: EntityManager,
  requestId: string,
): Promise<DeletionReceiptView | null> {
  const [found] = await rows(em, `select ${RECEIPT_COLUMNS} from deletion_receipt where request_id = ?`, [requestId]);
  return found ? receiptView(found) : null;
}

/** A page of a project's receipts, newest first (optionally one person's), and how many match. */
export async function listDeletionReceipts(
  em: EntityManager,
  filter: { projectId: number; personUuid?: string | null },
  page: { limit: number; offset: number },
): Promise<{ count: number; results: DeletionReceiptView[] }> {
  const where = `project_id = ? and (?::text is null or body->>'person_uuid' = ?)`;
  const uuid = filter.personUuid?.toLowerCase() ?? null;
  const params = [filter.projectId, uuid, uuid];
  const [{ count }] = await rows<{ count: number }>(
    em,
    `select count(*)::int as count from deletion_receipt where ${where}`,
    params,
  );
  const found = await rows(
    em,
    `select ${RECEIPT_COLUMNS} from deletion_receipt where ${where}
      order by created_at desc, request_id desc limit ? offset ?`,
    [...params, page.limit, page.offset],
  );
  return { count, results: found.map(receiptView) };
}
