// Access exports through the real API and BullMQ worker (PostgreSQL event store): the request under
// the deletion requests' rules (closed schemas, dry run that writes nothing, Idempotency-Key per user),
// the archive verified with tar, sha256sum -c and openssl against the served key, its event count
// equal to SQL's; the download streamed from the file; expiry (410 after); a later deletion receipt of
// the person citing the manifest's SHA-256.
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdtemp, readdir, readFile, readlink, rm, stat, writeFile } from 'node:fs/promises';
import { get as httpGet } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accessRecorderOf } from '../../../api/http/access-log.ts';
import { expireAccessExports } from '../../../shared/access-exports/index.ts';
import { defaultSchedules } from '../../../shared/platform/schedules.ts';
import { loadConfig } from '../../../shared/platform/config.ts';
import { sql } from '../../db.ts';
import { capture } from '../../fixtures.ts';
import { apiAndWorker, call, eventually } from '../../helpers.ts';
import { openArchive } from '../../shared/access-exports/archive.ts';

const dir = await mkdtemp(join(tmpdir(), 'access-exports-api-'));
afterAll(() => rm(dir, { recursive: true, force: true }));
const archives = join(dir, 'archives');
const {
  api,
  worker,
  accounts: [account, other],
} = await apiAndWorker({
  accounts: 2,
  configure: (config) => {
    config.accessExports.dir = archives;
  },
});

const P = () => `/api/projects/${account.projectId}/persons`;
const A = () => `${P()}/access_exports`;
const post = (body: unknown, options: { query?: string; headers?: Record<string, string>; key?: string } = {}) =>
  call(api.baseUrl, 'POST', `${A()}/${options.query ?? ''}`, {
    key: options.key ?? account.apiKey,
    body,
    headers: options.headers,
  });
const get = (path: string, key = account.apiKey) => call(api.baseUrl, 'GET', path, { key });
const exportRows = async () =>
  (await sql(api.orm, `select count(*)::int as n from access_export where project_id = ?`, [account.projectId]))[0]
    .n as number;
const accessActions = async (uuid: string) =>
  (
    await sql<{ action: string }>(
      api.orm,
      `select action from person_access_log where project_id = ? and person_uuids @> array[?]::uuid[] order by id`,
      [account.projectId, uuid],
    )
  ).map((r) => r.action);

/** Waits for the export's job to finish and answers the export as GET shows it. */
const built = (id: string) =>
  eventually(async () => {
    const res = await get(`${A()}/${id}/`);
    return ['completed', 'failed'].includes(res.body.status) ? res.body : null;
  }, 60_000);

async function download(id: string): Promise<{ path: string; res: Response }> {
  const res = await fetch(`${api.baseUrl}${A()}/${id}/download/`, {
    headers: { authorization: `Bearer ${account.apiKey}` },
  });
  const path = join(dir, `download-${id}.tar.gz`);
  if (res.ok) await pipeline(Readable.fromWeb(res.body as any), createWriteStream(path));
  return { path, res };
}

const servedKey = async () => (await get(`${P()}/deletion_receipts/public_key/`)).body.public_key as string;

let person: any;
beforeAll(async () => {
  await capture(api.baseUrl, account.projectToken, [
    ...Array.from({ length: 9 }, (_, i) => ({ event: 'pageview', distinct_id: 'ax-victim', properties: { i } })),
    { event: '$identify', distinct_id: 'ax-victim', properties: { $anon_distinct_id: 'ax-device' } },
    { event: 'e', distinct_id: 'ax-device' },
    { event: '$set', distinct_id: 'ax-victim', properties: { $set: { email: 'private@example.com' } } },
    ...['control', 'test'].map((v) => ({
      event: '$feature_flag_called',
      distinct_id: 'ax-victim',
      properties: { $feature_flag: 'checkout', $feature_flag_response: v },
    })),
    { event: 'e', distinct_id: 'ax-bystander' },
  ]);
  person = (await get(`${P()}/?distinct_id=ax-victim`)).body.results[0];
  const [{ id: cohortId }] = await sql(
    api.orm,
    `insert into cohort (project_id, name, is_static, count) values (?, 'static ax', true, 1) returning id`,
    [account.projectId],
  );
  await sql(api.orm, `insert into cohort_person (cohort_id, person_id) values (?, ?)`, [cohortId, person.id]);
  await sql(
    api.orm,
    `insert into feature_flag_hash_key_override (project_id, person_id, feature_flag_key, hash_key) values (?, ?, 'checkout', 'ax-device')`,
    [account.projectId, person.id],
  );
  await sql(
    api.orm,
    `insert into session_recording (project_id, session_id, distinct_id, person_id, start_time, end_time)
     values (?, 'ax-s1', 'ax-victim', ?, now(), now())`,
    [account.projectId, person.uuid],
  );
});

describe('POST …/persons/access_exports/', () => {
  it('refuses what it does not take (closed query and body), too many ids, and no ids; 404 for nobody', async () => {
    expect((await post({ ids: [person.uuid] }, { query: '?dryrun=true' })).status).toBe(400);
    expect((await post({ ids: [person.uuid], include: 'all' })).status).toBe(400);
    expect((await post({ ids: [person.uuid] }, { query: '?dry_run=yes' })).status).toBe(400);
    const many = await post({ distinct_ids: Array.from({ length: 2001 }, (_, i) => `d${i}`) });
    expect(many.status).toBe(400);
    expect(many.body).toMatchObject({ type: 'validation_error', attr: 'distinct_ids' });
    expect((await post({})).status).toBe(400);
    const nobody = await post({ distinct_ids: ['ax-nobody'] });
    expect(nobody.status).toBe(404);
    expect(nobody.body).toMatchObject({ type: 'invalid_request', code: 'not_found' });
    // Another project's person is nobody here.
    expect((await post({ ids: [person.uuid] }, { key: other.apiKey })).status).toBe(403);
    expect(await exportRows()).toBe(0);
  });

  it('dry_run=true counts per store and writes nothing (no row, no job, no file, no access-log entry)', async () => {
    // Reads made before are written in the background: every one of them is in the table first.
    await accessRecorderOf(api.orm).drain();
    const logBefore = await accessActions(person.uuid);
    const res = await post({ distinct_ids: ['ax-device'] }, { query: '?dry_run=true' });
    expect(res.status).toBe(200);
    const [{ n: events }] = await sql(
      api.orm,
      `select count(*)::int as n from event where project_id = ? and (person_id = ? or distinct_id in ('ax-victim', 'ax-device'))`,
      [account.projectId, person.uuid],
    );
    expect(res.body).toEqual({
      dry_run: true,
      persons_found: 1,
      would_export: {
        postgres: {
          persons: 1,
          distinct_ids: 2,
          events,
          recordings: 1,
          cohort_memberships: 1,
          flag_hash_key_overrides: 1,
          access_log_entries: logBefore.length,
        },
      },
    });
    expect(events).toBe(14);
    expect(await exportRows()).toBe(0);
    expect(await accessActions(person.uuid)).toEqual(logBefore);
    expect(await readdir(archives).catch(() => [])).toEqual([]);
    // No job either: a build job names an access_export row (none was made), and the queue is shared with
    // the other test files running beside this one, so its counts are not this test's to assert.
  });
});

describe('an export, end to end', () => {
  let created: any;
  let done: any;
  let opened: Awaited<ReturnType<typeof openArchive>>;

  beforeAll(async () => {
    const headers = { 'Idempotency-Key': 'ax-first' };
    created = await post({ ids: [String(person.id)], distinct_ids: ['ax-device'] }, { headers });
    expect(created.status).toBe(202);
    expect(created.body).toMatchObject({ status: 'pending', person_uuids: [person.uuid], manifest: null });
    done = await built(created.body.id);
    const { path, res } = await download(created.body.id);
    expect(res.status).toBe(200);
    opened = await openArchive(path, await mkdtemp(join(dir, 'open-')));
  });

  it('answers a retry with the same Idempotency-Key with the first answer and makes nothing new; another request with it is 422', async () => {
    const again = await post(
      { ids: [String(person.id)], distinct_ids: ['ax-device'] },
      { headers: { 'Idempotency-Key': 'ax-first' } },
    );
    expect(again.status).toBe(202);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(created.body);
    const reused = await post({ ids: [person.uuid] }, { headers: { 'Idempotency-Key': 'ax-first' } });
    expect(reused.status).toBe(422);
    expect(reused.body).toMatchObject({ code: 'idempotency_key_reused' });
    expect(await exportRows()).toBe(1);
  });

  it('builds an archive that verifies with tar, sha256sum -c and openssl against the served key', async () => {
    expect(done.status).toBe('completed');
    expect(opened.members).toEqual(
      [
        'SHA256SUMS',
        'access_log.ndjson',
        'cohort_memberships.ndjson',
        'distinct_ids.ndjson',
        'events.ndjson',
        'experiment_exposures.ndjson',
        'flag_hash_key_overrides.ndjson',
        'manifest.json',
        'manifest.sig',
        'persons.ndjson',
        'property_history.ndjson',
        'public_key.pem',
        'recordings.ndjson',
      ].sort(),
    );
    expect(await opened.sumsCheck()).toBe(true);
    expect(await opened.opensslVerifies(await servedKey())).toBe(true);
    // The status answers the same manifest, its SHA-256 and signature.
    expect(done.manifest).toEqual(opened.manifest);
    expect(done.manifest_sha256).toBe(createHash('sha256').update(opened.manifestText).digest('hex'));
    expect(Buffer.from(done.signature, 'base64')).toEqual(await readFile(join(opened.folder, 'manifest.sig')));
  });

  it('fails verification when a byte changes (each check can fail)', async () => {
    const events = join(opened.folder, 'events.ndjson');
    const original = await readFile(events);
    await writeFile(events, Buffer.concat([original, Buffer.from('\n')]));
    expect(await opened.sumsCheck()).toBe(false);
    await writeFile(events, original);
    expect(await opened.sumsCheck()).toBe(true);
    const manifest = join(opened.folder, 'manifest.json');
    await writeFile(manifest, opened.manifestText.replace('"rows":', '"rows": '));
    expect(await opened.opensslVerifies(await servedKey())).toBe(false);
    await writeFile(manifest, opened.manifestText);
    expect(await opened.opensslVerifies(await servedKey())).toBe(true);
  });

  it("holds the person's data: every event once (equal to SQL), exposures, history, cohorts, flag keys, recordings", async () => {
    const events = await opened.lines('events.ndjson');
    const [{ n }] = await sql(
      api.orm,
      `select count(*)::int as n from event where project_id = ? and (person_id = ? or distinct_id in ('ax-victim', 'ax-device'))`,
      [account.projectId, person.uuid],
    );
    expect(events.length).toBe(n);
    expect(new Set(events.map((e) => e.uuid)).size).toBe(n);
    expect(events.some((e) => e.distinct_id === 'ax-bystander')).toBe(false);
    const files = Object.fromEntries(opened.manifest.files.map((f: any) => [f.name, f]));
    expect(files['events.ndjson'].rows).toBe(n);
    expect(opened.manifest.event_stores).toEqual({ postgres: n });
    const [{ n: exposures }] = await sql(
      api.orm,
      `select count(*)::int as n from event where project_id = ? and person_id = ? and event = '$feature_flag_called'`,
      [account.projectId, person.uuid],
    );
    expect(exposures).toBe(2);
    const exposed = await opened.lines('experiment_exposures.ndjson');
    expect(exposed.map((e) => e.feature_flag_response).sort()).toEqual(['control', 'test']);
    expect((await opened.lines('persons.ndjson'))[0]).toMatchObject({
      uuid: person.uuid,
      properties: { email: 'private@example.com' },
    });
    expect((await opened.lines('distinct_ids.ndjson')).map((d) => d.distinct_id).sort()).toEqual([
      'ax-device',
      'ax-victim',
    ]);
    const history = await opened.lines('property_history.ndjson');
    expect(history.at(-1).properties).toMatchObject({ email: 'private@example.com' });
    expect(await opened.lines('cohort_memberships.ndjson')).toEqual([
      expect.objectContaining({ person_uuid: person.uuid, cohort_name: 'static ax' }),
    ]);
    expect(await opened.lines('flag_hash_key_overrides.ndjson')).toEqual([
      { person_uuid: person.uuid, feature_flag_key: 'checkout', hash_key: 'ax-device' },
    ]);
    expect((await opened.lines('recordings.ndjson')).map((r) => r.session_id)).toEqual(['ax-s1']);
    expect(opened.manifest).toMatchObject({
      export_id: created.body.id,
      cutoff: created.body.cutoff,
      request: { ids: [String(person.id)], distinct_ids: ['ax-device'], person_uuids: [person.uuid] },
    });
  });

  it("records the export and each download in the person's read-access log (the archive lists the export)", async () => {
    // The archive's log holds the export's request and the reads before it (the GET of the person list).
    const archived = (await opened.lines('access_log.ndjson')).map((r) => r.action);
    expect(archived).toContain('access_export_create');
    expect(archived).toContain('person_list');
    const exportActions = async () => (await accessActions(person.uuid)).filter((a) => a.startsWith('access_export'));
    expect(await exportActions()).toEqual(['access_export_create', 'access_export_download']);
    await download(created.body.id);
    expect(await exportActions()).toEqual(['access_export_create', 'access_export_download', 'access_export_download']);
  });

  it('streams the download from the archive file with its Content-Length (application/gzip)', async () => {
    const res = await fetch(`${api.baseUrl}${A()}/${created.body.id}/download/`, {
      headers: { authorization: `Bearer ${account.apiKey}` },
    });
    expect(res.headers.get('content-type')).toBe('application/gzip');
    expect(Number(res.headers.get('content-length'))).toBe(done.size_bytes);
    expect(Buffer.from(await res.arrayBuffer()).length).toBe(done.size_bytes);
  });
});

describe('a large archive', () => {
  it('is read from its file as the client reads it, not first into memory', async () => {
    await capture(api.baseUrl, account.projectToken, [{ event: 'e', distinct_id: 'ax-big' }]);
    const big = (await get(`${P()}/?distinct_id=ax-big`)).body.results[0];
    // 40,000 events of 400 random hex characters: an archive of several megabytes gzip cannot shrink.
    await sql(
      api.orm,
      `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
       select gen_random_uuid(), ?, 'big', 'ax-big', ?, jsonb_build_object('blob',
              (select string_agg(md5(random()::text || g::text || k::text), '') from generate_series(1, 12) k)),
              now() - make_interval(secs => g), now() - make_interval(secs => g)
         from generate_series(1, 40000) g`,
      [account.projectId, big.uuid],
    );
    const res = await post({ ids: [big.uuid] });
    expect(res.status).toBe(202);
    const done = await built(res.body.id);
    expect(done.status).toBe('completed');
    expect(done.manifest.files.find((f: any) => f.name === 'events.ndjson').rows).toBe(40_001);
    expect(done.size_bytes).toBeGreaterThan(8_000_000);
    const [{ file_path: archive }] = await sql(api.orm, `select file_path from access_export where id = ?`, [
      res.body.id,
    ]);
    // Read the first chunk and stop reading: the API (in this process) holds the archive open and has
    // read only as far as the socket took.
    const response = await new Promise<import('node:http').IncomingMessage>((resolve, reject) =>
      httpGet(
        `${api.baseUrl}${A()}/${res.body.id}/download/`,
        { headers: { authorization: `Bearer ${account.apiKey}` } },
        resolve,
      ).on('error', reject),
    );
    expect(response.statusCode).toBe(200);
    await new Promise((resolve) => response.once('data', resolve));
    response.pause();
    const position = await eventually(async () => {
      for (const fd of await readdir('/proc/self/fd')) {
        const target = await readlink(`/proc/self/fd/${fd}`).catch(() => '');
        if (target !== archive) continue;
        const info = await readFile(`/proc/self/fdinfo/${fd}`, 'utf8').catch(() => '');
        return { pos: Number(/pos:\s+(\d+)/.exec(info)?.[1]) };
      }
      return null;
    });
    expect(position.pos).toBeLessThan((await stat(archive)).size / 2);
    response.destroy();
  }, 180_000);
});

describe('expiry', () => {
  it('removes archives past ACCESS_EXPORT_TTL_HOURS and records it; a download afterwards is 410', async () => {
    expect(defaultSchedules(loadConfig()).find((s) => s.schedulerId === 'access-export-expiry')).toMatchObject({
      job: 'expireAccessExports',
      setting: 'ACCESS_EXPORT_EXPIRE_CRON',
    });
    const res = await post({ distinct_ids: ['ax-victim'] });
    const done = await built(res.body.id);
    const [{ file_path: archive }] = await sql(api.orm, `select file_path from access_export where id = ?`, [
      res.body.id,
    ]);
    expect(Date.parse(done.expires_at) - Date.parse(done.completed_at)).toBe(168 * 3600_000);
    // Not yet due: it stays (exports made earlier in this file go).
    await expireAccessExports(null, worker.deps, new Date(Date.parse(done.expires_at) - 1000));
    expect((await stat(archive)).size).toBe(done.size_bytes);
    expect((await get(`${A()}/${res.body.id}/`)).body.status).toBe('completed');
    const after = new Date(Date.parse(done.expires_at) + 1000);
    expect((await expireAccessExports(null, worker.deps, after)).removed).toBeGreaterThanOrEqual(1);
    await expect(stat(archive)).rejects.toThrow();
    const expired = (await get(`${A()}/${res.body.id}/`)).body;
    expect(expired).toMatchObject({ status: 'expired', manifest_sha256: done.manifest_sha256 });
    expect(expired.removed_at).not.toBeNull();
    const gone = await get(`${A()}/${res.body.id}/download/`);
    expect(gone.status).toBe(410);
    expect(gone.body).toMatchObject({ type: 'invalid_request', code: 'gone' });
  });
});

describe('a later deletion receipt', () => {
  it("cites the person's export manifests' SHA-256, and still verifies", async () => {
    await capture(api.baseUrl, account.projectToken, [{ event: 'e', distinct_id: 'ax-deleted' }]);
    const gone = (await get(`${P()}/?distinct_id=ax-deleted`)).body.results[0];
    const res = await post({ distinct_ids: ['ax-deleted'] });
    const done = await built(res.body.id);
    expect(done.status).toBe('completed');
    const del = await call(api.baseUrl, 'DELETE', `${P()}/${gone.uuid}/?delete_events=true`, { key: account.apiKey });
    expect(del.status).toBe(204);
    await worker.deps.queues.deletions.add('release-batch', { mode: 'weekly' });
    const receipt = await eventually(async () => {
      const list = await get(`${P()}/deletion_receipts/?person_uuid=${gone.uuid}`);
      return list.body.count === 1 ? list.body.results[0] : null;
    }, 60_000);
    expect(receipt.receipt.access_exports).toEqual([
      { export_id: res.body.id, manifest_sha256: done.manifest_sha256, built_at: done.completed_at },
    ]);
    const { verify, createPublicKey } = await import('node:crypto');
    expect(
      verify(
        null,
        Buffer.from(receipt.signed_content),
        createPublicKey(await servedKey()),
        Buffer.from(receipt.signature, 'base64'),
      ),
    ).toBe(true);
  });
});
