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
import { canonicalJson } from '../platform/canonical-json.ts';
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { type Expression, sql } from 'kysely';
import { db } from '../platform/db/kysely.ts';
import { pagedSelect } from '../platform/db/paged.ts';
import { run } from '../platform/db/sql.ts';
import type { DeletedKeyCount } from '../events/index.ts';

export const RECEIPT_ALGORITHM = 'Ed25519';

// ---- Canonical form and signatures ---------------------------------------------------------------

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
    await db(em)
      .insertInto('deletion_receipt_key')
      .values({ id: signer.keyId, public_key: signer.publicKeyPem })
      .onConflict((oc) => oc.column('id').doUpdateSet({ retired_at: null }))
      .execute();
    return signer;
  }
  return em.transactional(async (tx) => {
    const txEm = tx;
    await db(txEm)
      .selectNoFrom((eb) =>
        eb.fn('pg_advisory_xact_lock', [eb.fn('hashtext', [sql.lit('deletion_receipt_key')])]).as('locked'),
      )
      .execute();
    const found = await db(txEm)
      .selectFrom('deletion_receipt_key')
      .select('private_key')
      .where('private_key', 'is not', null)
      .where('retired_at', 'is', null)
      .orderBy('created_at', 'desc')
      .limit(1)
      .executeTakeFirst();
    if (found?.private_key) return signerFor(createPrivateKey(found.private_key));
    const { privateKey } = generateKeyPairSync('ed25519');
    const signer = signerFor(privateKey);
    await db(txEm)
      .insertInto('deletion_receipt_key')
      .values({
        id: signer.keyId,
        public_key: signer.publicKeyPem,
        private_key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
      })
      .execute();
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
  // Ordered by the selected created_at (its text), as before.
  const keys = await db(em)
    .selectFrom('deletion_receipt_key')
    .select((eb) => [
      'id as key_id',
      'public_key',
      isoOf(eb.ref('created_at')).$notNull().as('created_at'),
      isoOf(eb.ref('retired_at')).as('retired_at'),
    ])
    .orderBy('created_at', 'desc')
    .orderBy('deletion_receipt_key.id')
    .execute();
  return keys.map((key) => ({
    key_id: key.key_id,
    algorithm: RECEIPT_ALGORITHM,
    public_key: key.public_key,
    created_at: key.created_at,
    retired_at: key.retired_at,
  }));
}

// ---- Counts before -------------------------------------------------------------------------------

/** A timestamptz as ISO-8601 UTC with microseconds (PostgreSQL's full precision, the cutoff's too). */
const isoOf = (column: Expression<unknown>) =>
  sql<string | null>`to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

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
  const found = await db(em)
    .selectFrom('person as p')
    .select((eb) => [
      eb.cast<string>('p.uuid', 'text').as('uuid'),
      eb.cast<string>('p.id', 'text').as('id'),
      eb
        .cast<number>(
          eb
            .selectFrom('person_distinct_id as d')
            .select((c) => c.fn.countAll().as('n'))
            .whereRef('d.person_id', '=', 'p.id'),
          'integer',
        )
        .as('d'),
      eb
        .cast<number>(
          eb
            .selectFrom('cohort_person as c')
            .select((c) => c.fn.countAll().as('n'))
            .whereRef('c.person_id', '=', 'p.id'),
          'integer',
        )
        .as('c'),
      eb
        .cast<number>(
          eb
            .selectFrom('feature_flag_hash_key_override as o')
            .select((c) => c.fn.countAll().as('n'))
            .whereRef('o.person_id', '=', 'p.id'),
          'integer',
        )
        .as('o'),
    ])
    .where('p.project_id', '=', projectId)
    .where((eb) => eb('p.id', '=', eb.fn.any(eb.val(personIds))))
    .execute();
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
  const who = await db(em)
    .selectNoFrom((eb) => [
      eb
        .selectFrom('app_user')
        .select('email')
        .where((s) => s('id', '=', s.cast<number>(s.val(requester.userId), 'integer')))
        .as('email'),
      eb
        .selectFrom('personal_api_key')
        .select('label')
        .where((s) => s('id', '=', s.cast<string>(s.val(requester.keyId), 'text')))
        .as('label'),
    ])
    .executeTakeFirstOrThrow();
  const requests = await db(em)
    .selectFrom('async_deletion')
    .select((eb) => [eb.cast<string>('id', 'text').as('id'), 'key', 'receipt_basis'])
    .where((eb) => eb('id', '=', eb.fn.any(eb.val(requestIds))))
    .execute();
  const updates = requests.map((r) => {
    const basis: ReceiptBasis = (r.receipt_basis as ReceiptBasis | null) ?? {};
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
  await db(em)
    .updateTable('async_deletion')
    .from(
      sql<{
        id: string;
        basis: Record<string, unknown>;
      }>`jsonb_to_recordset(${JSON.stringify(updates)}::jsonb)`.as<'u'>(sql`u(id bigint, basis jsonb)`),
    )
    .set((eb) => ({ receipt_basis: eb.ref('u.basis') }))
    .whereRef('async_deletion.id', '=', 'u.id')
    .execute();
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
    await addFoundBefore(em, 'events', total);
  };
}

/**
 * Adds rows a delete removed to its requests' counts found before in `store` (request id → rows), in
 * the delete's transaction: what every attempt removed adds up to what was there before the first.
 */
export async function addFoundBefore(em: EntityManager, store: string, total: Map<string, number>): Promise<void> {
  if (!total.size) return;
  const payload = JSON.stringify([...total].map(([id, n]) => ({ id, n })));
  await db(em)
    .updateTable('async_deletion')
    .from(sql<{ id: string; n: string }>`jsonb_to_recordset(${payload}::jsonb)`.as<'c'>(sql`c(id bigint, n bigint)`))
    .set({
      receipt_basis: sql`jsonb_set(coalesce(async_deletion.receipt_basis, '{}'), '{before}',
        coalesce(async_deletion.receipt_basis->'before', '{}') || jsonb_build_object(${store}::text,
          coalesce((async_deletion.receipt_basis->'before'->>${store}::text)::bigint, 0) + c.n))`,
    })
    .whereRef('async_deletion.id', '=', 'c.id')
    .execute();
}

/** The same for a recordings request: its sessions (kept, to verify their snapshots) and their snapshots. */
export async function recordRecordingsBefore(
  em: EntityManager,
  id: string,
  match: { sql: string; params: unknown[] },
): Promise<void> {
  const basis = await db(em)
    .selectFrom('async_deletion')
    .select((eb) => sql<boolean>`${eb.ref('receipt_basis')}->'before'->'recordings' is not null`.as('counted'))
    .where('id', '=', id)
    .executeTakeFirst();
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

/** A request's receipt, built (deletionReceipts) and then signed (signDeletionReceipts), ready to store. */
export interface UnsignedReceipt {
  request_id: string;
  project_id: number;
  body: ReturnType<typeof receiptBody>;
}
export interface SignedReceipt extends UnsignedReceipt {
  signature: string;
  key_id: string;
}

/**
 * The instant the receipts state as verified_at: the time of a statement of its own, run once every
 * count after has finished (completeDeletions stores the same instant as delete_verified_at).
 */
export async function receiptVerifiedAt(em: EntityManager): Promise<string> {
  const { now } = await db(em).selectNoFrom(isoOf(sql`now()`).$notNull().as('now')).executeTakeFirstOrThrow();
  return now;
}

/**
 * The batch's receipts, built once every store has been counted after: `stores` are its requests with
 * their other stores counted (receiptStoresAfter), `verified` what the job itself counted for the whole
 * batch (its events, or its recordings: a batch's statement matches the union of its requests, so zero
 * for it is zero for each). Throws if anything is left.
 */
export function deletionReceipts(
  stores: ReceiptRequest[],
  verified: Record<string, StoreVerification>,
  verifiedAt: string,
  signer: ReceiptSigner,
): UnsignedReceipt[] {
  return stores.map((r) => ({
    request_id: r.id,
    project_id: r.project_id,
    body: receiptBody(r, verified, verifiedAt, signer),
  }));
}

/** Signs built receipts on the thread pool: about 45 µs of CPU each, 1000 in a bulk_delete's batch. */
export function signDeletionReceipts(receipts: UnsignedReceipt[], signer: ReceiptSigner): Promise<SignedReceipt[]> {
  return Promise.all(
    receipts.map(async (r) => ({
      ...r,
      signature: await signAsync(canonicalJson(r.body), signer.privateKey),
      key_id: signer.keyId,
    })),
  );
}

/** In the transaction that marks the batch completed (completeDeletions, at the receipts' verified_at). */
export async function insertDeletionReceipts(em: EntityManager, receipts: SignedReceipt[]): Promise<void> {
  if (!receipts.length) return;
  // One parameter (the receipts as a JSON array), bound beside the text as Kysely sends every value, in
  // the caller's transaction: formatting a megabyte of JSON into the statement's text cost MikroORM's
  // formatter 100–300 ms per 1000 receipts, and a multi-row VALUES of 5000 parameters about as much
  // again to plan.
  await db(em)
    .insertInto('deletion_receipt')
    .columns(['request_id', 'project_id', 'body', 'signature', 'key_id'])
    .expression((eb) =>
      eb
        .selectFrom(
          sql<{
            request_id: string;
            project_id: number;
            body: Record<string, unknown>;
            signature: string;
            key_id: string;
          }>`jsonb_to_recordset(${JSON.stringify(receipts)}::jsonb)`.as<'r'>(
            sql`r(request_id bigint, project_id int, body jsonb, signature text, key_id text)`,
          ),
        )
        .select(['r.request_id', 'r.project_id', 'r.body', 'r.signature', 'r.key_id']),
    )
    .onConflict((oc) => oc.column('request_id').doNothing())
    .execute();
}

/**
 * The batch's requests with what their receipts need: their row, and their other stores (person stores,
 * recording snapshots) counted after, in one statement.
 */
export function receiptStoresAfter(em: EntityManager, batch: string[]) {
  return (
    db(em)
      .selectFrom('async_deletion as a')
      // Its person row ids and session ids, from its receipt basis.
      .innerJoinLateral(
        sql<{ ids: string[]; sessions: string[] }>`(select
        array(select jsonb_array_elements_text(a.receipt_basis->'person_ids'))::bigint[] as ids,
        array(select jsonb_array_elements_text(a.receipt_basis->'session_ids')) as sessions)`.as('x'),
        (join) => join.onTrue(),
      )
      .select((eb) => {
        // Only requests that deleted a person have person stores, only recordings requests snapshots.
        const countIf = (among: 'x.ids' | 'x.sessions', count: Expression<unknown>) =>
          eb
            .case()
            .when(eb.fn('cardinality', [among]), '>', 0)
            .then(eb.cast<number>(count, 'integer'))
            .else(sql.lit(0))
            .end();
        const inIds = (column: Expression<unknown>) => sql<boolean>`${column} = any(x.ids)`;
        return [
          eb.cast<string>('a.id', 'text').as('id'),
          'a.project_id',
          'a.key',
          'a.distinct_ids',
          'a.deletion_type',
          'a.mode',
          'a.created_by_id',
          isoOf(eb.ref('a.cutoff')).as('cutoff'),
          isoOf(eb.ref('a.created_at')).as('accepted_at'),
          isoOf(eb.ref('a.started_at')).as('started_at'),
          eb.fn.coalesce('a.receipt_basis', sql<Record<string, unknown>>`'{}'`).as('basis'),
          // The access exports of the person (shared/access-exports' table, read here): what was held,
          // cited by what was deleted.
          sql<AccessExportCitation[]>`coalesce((select jsonb_agg(jsonb_build_object(
              'export_id', x.id::text, 'manifest_sha256', x.manifest_sha256,
              'built_at', ${isoOf(sql.ref('x.completed_at'))}) order by x.completed_at, x.id)
            from access_export x
           where x.project_id = a.project_id and x.manifest_sha256 is not null
             and a.key = any(x.person_uuids::text[])), '[]')`.as('access_exports'),
          countIf(
            'x.ids',
            eb
              .selectFrom('person as p')
              .select((c) => c.fn.countAll().as('n'))
              .whereRef('p.project_id', '=', 'a.project_id')
              .where((c) => inIds(c.ref('p.id'))),
          ).as('persons'),
          countIf(
            'x.ids',
            eb
              .selectFrom('person_distinct_id as d')
              .select((c) => c.fn.countAll().as('n'))
              .whereRef('d.project_id', '=', 'a.project_id')
              .where((c) => inIds(c.ref('d.person_id'))),
          ).as('distinct_ids_after'),
          countIf(
            'x.ids',
            eb
              .selectFrom('cohort_person as c')
              .select((c) => c.fn.countAll().as('n'))
              .where((c) => inIds(c.ref('c.person_id'))),
          ).as('cohort_memberships'),
          countIf(
            'x.ids',
            eb
              .selectFrom('feature_flag_hash_key_override as o')
              .select((c) => c.fn.countAll().as('n'))
              .whereRef('o.project_id', '=', 'a.project_id')
              .where((c) => inIds(c.ref('o.person_id'))),
          ).as('flag_hash_key_overrides'),
          countIf(
            'x.sessions',
            eb
              .selectFrom('session_recording_snapshot as n')
              .select((c) => c.fn.countAll().as('n'))
              .whereRef('n.project_id', '=', 'a.project_id')
              .where((c) => sql<boolean>`${c.ref('n.session_id')} = any(x.sessions)`),
          ).as('recording_snapshots'),
        ];
      })
      .where((eb) => eb('a.id', '=', eb.fn.any(eb.val(batch))))
      .orderBy('a.id')
      .execute()
  );
}

type ReceiptRequest = Awaited<ReturnType<typeof receiptStoresAfter>>[number];

/**
 * Another feature's signed statement (a scrub's receipt): base64 of the Ed25519 signature of `body`'s
 * canonical form, verifiable like a deletion receipt (`openssl pkeyutl -verify -rawin`).
 */
export const signReceiptBody = (body: unknown, signer: ReceiptSigner): Promise<string> =>
  signAsync(canonicalJson(body), signer.privateKey);

/** An access export of the person a receipt cites: its manifest's SHA-256 (the archive's manifest.json). */
interface AccessExportCitation {
  export_id: string;
  manifest_sha256: string;
  built_at: string;
}

/** Ed25519 on libuv's thread pool: a batch's 1000 signatures do not hold the event loop, and use every core. */
const signAsync = (content: string, key: KeyObject) =>
  new Promise<string>((resolve, reject) =>
    sign(null, Buffer.from(content, 'utf8'), key, (error, signature) =>
      error ? reject(error) : resolve(signature.toString('base64')),
    ),
  );

/** Stores whose rows found before are counted by the deletes (addFoundBefore): none found is 0, not unknown. */
const COUNTED_BY_DELETES = ['events', 'quarantined_events'];

function receiptBody(
  r: ReceiptRequest,
  verified: Record<string, StoreVerification>,
  verifiedAt: string,
  signer: ReceiptSigner,
) {
  const basis = r.basis as ReceiptBasis;
  const before = basis.before ?? {};
  const stores: Record<string, { before: number | null; after: number; verified_by: string }> = {};
  if (basis.person_ids) {
    stores.persons = { before: before.persons ?? null, after: r.persons, verified_by: PERSON_STORE_AFTER.persons };
    for (const name of ['distinct_ids', 'cohort_memberships', 'flag_hash_key_overrides'] as const)
      stores[name] = {
        before: before[name] ?? null,
        after: name === 'distinct_ids' ? r.distinct_ids_after : r[name],
        verified_by: PERSON_STORE_AFTER[name],
      };
  }
  // Events (and held events) are counted as the deletes remove them: a request none of whose deletes found a row has no count, 0.
  for (const [name, v] of Object.entries(verified))
    stores[name] = {
      before: before[name] ?? (COUNTED_BY_DELETES.includes(name) ? 0 : null),
      after: v.after,
      verified_by: v.statement,
    };
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
    verified_at: verifiedAt,
    stores,
    // Present only when the person was exported: a receipt of a person never exported keeps its form.
    ...(r.access_exports.length > 0 ? { access_exports: r.access_exports } : {}),
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

/** Receipts, with the columns a DeletionReceiptView shows. */
const receiptRows = (em: EntityManager) =>
  db(em)
    .selectFrom('deletion_receipt')
    .select((eb) => [
      eb.cast<string>('request_id', 'text').as('request_id'),
      'project_id',
      'body',
      'signature',
      'key_id',
      isoOf(eb.ref('created_at')).$notNull().as('created_at'),
    ]);

function receiptView(row: Awaited<ReturnType<ReturnType<typeof receiptRows>['execute']>>[number]): DeletionReceiptView {
  return {
    request_id: row.request_id,
    project_id: row.project_id,
    person_uuid: row.body.person_uuid as string,
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
  const found = await receiptRows(em)
    .where('project_id', '=', projectId)
    .where('request_id', '=', requestId)
    .executeTakeFirst();
  return found ? receiptView(found) : null;
}

/** A request's receipt whatever its project (the operators' page, behind the operator credential). */
export async function deletionReceiptOfRequest(
  em: EntityManager,
  requestId: string,
): Promise<DeletionReceiptView | null> {
  const found = await receiptRows(em).where('request_id', '=', requestId).executeTakeFirst();
  return found ? receiptView(found) : null;
}

/** A page of a project's receipts, newest first (optionally one person's), and how many match. */
export async function listDeletionReceipts(
  em: EntityManager,
  filter: { projectId: number; personUuid?: string | null },
  page: { limit: number; offset: number },
): Promise<{ count: number; results: DeletionReceiptView[] }> {
  let query = receiptRows(em).where('project_id', '=', filter.projectId);
  const uuid = filter.personUuid?.toLowerCase();
  if (uuid !== undefined) query = query.where((eb) => eb(sql<string>`${eb.ref('body')}->>'person_uuid'`, '=', uuid));
  // By the selected columns, as before: created_at as text, request_id as text.
  const found = await pagedSelect(em, query.orderBy('created_at', 'desc').orderBy('request_id', 'desc'), page);
  return { count: found.count, results: found.rows.map(receiptView) };
}
