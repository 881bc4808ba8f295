// The worker's side of an access export: one .tar.gz per request, built on disk. Each part is written
// as NDJSON to a file of a working folder, its rows counted and its SHA-256 taken as it is written;
// then manifest.json (every part's name, rows, bytes and SHA-256; the request, its cutoff and times)
// is signed with the deletion receipts' Ed25519 key (manifest.sig), SHA256SUMS lists every member, and
// the members are streamed into the archive. Nothing is built in memory: the events go from the event
// store's cursor to disk batch by batch.
import type { Job } from 'bullmq';
import { createHash, sign } from 'node:crypto';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import { constants, createGzip, type Gzip } from 'node:zlib';
import { mkdir, rm, stat, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import { listPersonAccess } from '../access-log/index.ts';
import { personCohorts } from '../cohorts/index.ts';
import { RECEIPT_ALGORITHM, receiptSigner } from '../deletions/index.ts';
import { personRecordings, type EventStoreDeps } from '../events/index.ts';
import { hashKeyOverridesOf } from '../flags/index.ts';
import { personsByIds, propertiesTimeline } from '../persons/index.ts';
import { canonicalJson } from '../platform/canonical-json.ts';
import type { Deps } from '../platform/deps.ts';
import type { JobData } from '../platform/jobs.ts';
import { claimExport, completeExport, exportById, noteExportError, type AccessExportRow } from './store.ts';
import { gzipMember, TarGzWriter } from './tar.ts';

/** The event that counts as an exposure to a flag (and so to its experiments), as the experiments feature reads it. */
const EXPOSURE_EVENT = '$feature_flag_called';
/** Events the property history is rebuilt from, per person: as the properties_timeline endpoint reads them. */
const PROPERTY_HISTORY_EVENTS = 10_000;
const ACCESS_LOG_PAGE = 1000;

/**
 * One NDJSON member being written: rows counted and its SHA-256 taken as they go, compressed on the
 * way to disk (gzip on libuv's thread pool, beside the reading) into the gzip member the archive takes
 * as it is (tar.ts).
 */
class Part {
  readonly name: string;
  readonly path: string;
  rows = 0;
  bytes = 0;
  readonly #hash = createHash('sha256');
  readonly #gzip: Gzip;
  readonly #done: Promise<void>;

  constructor(folder: string, name: string) {
    this.name = name;
    this.path = join(folder, `${name}.gz`);
    // A large buffer (a stream option zlib passes on; its options type omits it), so the thread pool
    // compresses one batch while the next is read and made lines.
    const options = { level: constants.Z_BEST_SPEED, chunkSize: 256 * 1024, highWaterMark: 16 << 20 };
    this.#gzip = createGzip(options);
    this.#done = pipeline(this.#gzip, createWriteStream(this.path, { flags: 'wx' }));
    this.#done.catch(() => undefined);
  }

  /** Appends lines (JSON texts without newlines); waits while the file is behind. */
  async lines(lines: readonly string[]): Promise<void> {
    if (lines.length === 0) return;
    const chunk = Buffer.from(`${lines.join('\n')}\n`, 'utf8');
    this.rows += lines.length;
    this.bytes += chunk.length;
    this.#hash.update(chunk);
    if (!this.#gzip.write(chunk)) await Promise.race([once(this.#gzip, 'drain'), this.#done]);
  }

  rowsOf(values: readonly unknown[]): Promise<void> {
    return this.lines(values.map((v) => JSON.stringify(v)));
  }

  async close(): Promise<{ name: string; rows: number; bytes: number; sha256: string }> {
    this.#gzip.end();
    await this.#done;
    return { name: this.name, rows: this.rows, bytes: this.bytes, sha256: this.#hash.digest('hex') };
  }

  destroy(): void {
    this.#gzip.destroy();
  }
}

/** The archive's top folder, and its file name. */
export const archiveFolder = (id: string) => `access-export-${id}`;

/**
 * Job body: builds the export's archive (see the top of this file) and marks it completed. Retried by
 * BullMQ on an error (each attempt builds anew); accessExportFailed marks it failed after the last.
 */
export async function buildAccessExport(job: Job<JobData['accessExport']>, deps: Deps & EventStoreDeps) {
  const em = deps.orm.em.fork();
  const row = await claimExport(em, job.data.exportId);
  if (!row) return { skipped: 'not pending' };
  const dir = resolve(deps.config.accessExports.dir);
  const token = randomBytes(6).toString('hex');
  const work = join(dir, `.build-${row.id}-${token}`);
  const final = join(dir, `${archiveFolder(row.id)}-${token}.tar.gz`);
  await mkdir(work, { recursive: true });
  try {
    const built = await buildArchive(deps, row, work, final);
    const kept = await completeExport(em, row.id, {
      ...built,
      filePath: final,
      ttlHours: deps.config.accessExports.ttlHours,
    });
    if (!kept) await rm(final, { force: true });
    return { exportId: row.id, rows: built.manifest.files, bytes: built.sizeBytes, kept };
  } catch (error) {
    await rm(final, { force: true });
    await noteExportError(em, row.id, (error as Error).message, false);
    throw error;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** After the job's last attempt failed: the export is failed, its last error kept. */
export async function accessExportFailed(job: Job<JobData['accessExport']>, error: Error, deps: Deps) {
  await noteExportError(deps.orm.em.fork(), job.data.exportId, error.message, true);
}

async function buildArchive(deps: Deps & EventStoreDeps, row: AccessExportRow, work: string, final: string) {
  const em = deps.orm.em.fork();
  const projectId = row.project_id;
  const parts: Part[] = [];
  const part = (name: string) => {
    const p = new Part(work, name);
    parts.push(p);
    return p;
  };
  try {
    // Persons and their distinct ids as they are now (a person deleted since is absent).
    const persons = await personsByIds(em, projectId, row.person_ids);
    const uuidOf = new Map(persons.map((p) => [String(p.id), p.uuid]));
    const personsPart = part('persons.ndjson');
    await personsPart.rowsOf(
      persons.map((p) => ({
        id: String(p.id),
        uuid: p.uuid,
        created_at: new Date(p.created_at).toISOString(),
        is_identified: p.is_identified,
        properties: p.properties,
        distinct_ids: p.distinct_ids,
      })),
    );
    const distinctIdsPart = part('distinct_ids.ndjson');
    await distinctIdsPart.rowsOf(
      persons.flatMap((p) => p.distinct_ids.map((distinct_id) => ({ person_uuid: p.uuid, distinct_id }))),
    );
    // The group: every uuid asked for, and the distinct ids then and now.
    const distinctIds = [...new Set([...row.distinct_ids, ...persons.flatMap((p) => p.distinct_ids)])];
    const group = { cutoff: row.cutoff, personIds: row.person_uuids, distinctIds };

    const historyPart = part('property_history.ndjson');
    for (const p of persons) {
      const events = await deps.events.personEvents(
        projectId,
        String(p.id),
        new Date(row.cutoff),
        PROPERTY_HISTORY_EVENTS,
      );
      await historyPart.rowsOf(
        propertiesTimeline(events, new Date(0)).map((point) => ({ person_uuid: p.uuid, ...point })),
      );
    }

    // Every event once; the exposures among them beside.
    const eventsPart = part('events.ndjson');
    const exposuresPart = part('experiment_exposures.ndjson');
    const eventStores = await deps.events.exportPersonEvents(projectId, group, async (batch) => {
      await eventsPart.lines(batch.lines);
      const exposures: unknown[] = [];
      for (let i = 0; i < batch.names.length; i++) {
        if (batch.names[i] !== EXPOSURE_EVENT) continue;
        const e = JSON.parse(batch.lines[i]);
        exposures.push({
          uuid: e.uuid,
          timestamp: e.timestamp,
          distinct_id: e.distinct_id,
          feature_flag: e.properties?.$feature_flag ?? null,
          feature_flag_response: e.properties?.$feature_flag_response ?? null,
        });
      }
      await exposuresPart.rowsOf(exposures);
    });

    await part('recordings.ndjson').rowsOf(await personRecordings(em, projectId, row.person_uuids, distinctIds));
    const cohortsPart = part('cohort_memberships.ndjson');
    for (const p of persons)
      await cohortsPart.rowsOf(
        (await personCohorts(em, deps.events, projectId, String(p.id))).map((c) => ({
          person_uuid: p.uuid,
          cohort_id: c.id,
          cohort_name: c.name,
        })),
      );
    await part('flag_hash_key_overrides.ndjson').rowsOf(
      (
        await hashKeyOverridesOf(
          em,
          projectId,
          persons.map((p) => String(p.id)),
        )
      ).map((o) => ({
        person_uuid: uuidOf.get(o.person_id) ?? null,
        feature_flag_key: o.feature_flag_key,
        hash_key: o.hash_key,
      })),
    );
    // Who read the persons' data, this export's request included; an entry naming several of them once.
    const accessPart = part('access_log.ndjson');
    const seen = new Set<string>();
    for (const uuid of row.person_uuids)
      for (let offset = 0; ; offset += ACCESS_LOG_PAGE) {
        const page = await listPersonAccess(em, { projectId, personUuid: uuid, limit: ACCESS_LOG_PAGE, offset });
        await accessPart.rowsOf(page.filter((r) => !seen.has(r.id) && seen.add(r.id)));
        if (page.length < ACCESS_LOG_PAGE) break;
      }

    const files = [];
    for (const p of parts) files.push(await p.close());
    const signer = await receiptSigner(em, deps.config.deletion.receiptPrivateKey);
    const builtAt = new Date().toISOString();
    const manifest = {
      manifest_version: 1,
      export_id: row.id,
      project_id: projectId,
      request: {
        ids: row.request.ids ?? [],
        distinct_ids: row.request.distinct_ids ?? [],
        person_uuids: row.person_uuids,
        person_distinct_ids: row.distinct_ids,
        requested_by: { user_id: row.created_by_id ?? null, api_key_id: row.api_key_id ?? null },
      },
      cutoff: row.cutoff,
      requested_at: row.created_at,
      started_at: row.started_at,
      built_at: builtAt,
      event_stores: eventStores,
      algorithm: RECEIPT_ALGORITHM,
      key_id: signer.keyId,
      files,
    };
    const manifestBytes = Buffer.from(canonicalJson(manifest), 'utf8');
    const signature = sign(null, manifestBytes, signer.privateKey);
    const manifestSha256 = createHash('sha256').update(manifestBytes).digest('hex');
    const extra: [string, Buffer][] = [
      ['manifest.json', manifestBytes],
      ['manifest.sig', signature],
      ['public_key.pem', Buffer.from(signer.publicKeyPem, 'utf8')],
    ];
    for (const [name, bytes] of extra) await writeFile(join(work, `${name}.gz`), gzipMember(bytes), { flag: 'wx' });
    // SHA256SUMS in sha256sum's own format, every other member listed: `sha256sum -c SHA256SUMS` in the folder.
    const sums = [
      ...files.map((f) => `${f.sha256}  ${f.name}`),
      ...extra.map(([name, bytes]) => `${createHash('sha256').update(bytes).digest('hex')}  ${name}`),
    ];
    const sumsBytes = Buffer.from(`${sums.join('\n')}\n`, 'utf8');
    await writeFile(join(work, 'SHA256SUMS.gz'), gzipMember(sumsBytes), { flag: 'wx' });
    const sizes = new Map<string, number>([
      ...extra.map(([name, bytes]): [string, number] => [name, bytes.length]),
      ['SHA256SUMS', sumsBytes.length],
      ...files.map((f): [string, number] => [f.name, f.bytes]),
    ]);

    const folder = archiveFolder(row.id);
    const mtime = new Date(builtAt);
    const tar = new TarGzWriter(final);
    try {
      await tar.addDirectory(folder, mtime);
      for (const name of ['manifest.json', 'manifest.sig', 'SHA256SUMS', 'public_key.pem', ...files.map((f) => f.name)])
        await tar.addCompressedFile(`${folder}/${name}`, join(work, `${name}.gz`), sizes.get(name)!, mtime);
      await tar.finish();
    } catch (error) {
      tar.abort();
      throw error;
    }
    return {
      sizeBytes: (await stat(final)).size,
      manifest,
      manifestSha256,
      signature: signature.toString('base64'),
      keyId: signer.keyId,
      completedAt: builtAt,
    };
  } finally {
    for (const p of parts) p.destroy();
  }
}

/** Where a completed export's archive is, for a download (null: none, or its file is gone). */
export async function exportArchive(
  em: Parameters<typeof exportById>[0],
  projectId: number,
  id: string,
): Promise<{ path: string; size: number } | null> {
  const found = await exportById(em, projectId, id);
  if (!found?.file_path || found.status !== 'completed') return null;
  try {
    return { path: found.file_path, size: (await stat(found.file_path)).size };
  } catch {
    return null;
  }
}
