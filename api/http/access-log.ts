// Recording reads of persons' data (shared/access-log): a route that answers with persons' data declares
// its `personAccess` action, and its handler names the persons its answer holds with `personsRead`. Once
// the handler has answered (2xx), the route middleware hands one row (who: user and API key; how: action,
// request id, client address as the throttles see it; whose: the persons) to the process's recorder, which
// writes it within 100 ms with the rows of other reads (shared/access-log/recorder.ts says what holds). A
// failed read records nothing; a read whose row the recorder cannot take fails (500) rather than hand out
// data that might go unrecorded.
import type { MikroORM } from '@mikro-orm/postgresql';
import { ApiError } from './errors.ts';
import type { Context } from 'koa';
import { type AccessEntry, type AccessRecorder, createAccessRecorder } from '../../shared/access-log/index.ts';

/** What a handler read: the persons' uuids and what else the row should say (a filter, a format). */
export interface PersonsRead {
  personUuids: readonly string[];
  details?: Record<string, unknown>;
}

const recorders = new WeakMap<object, AccessRecorder>();

/** The process's recorder for `orm` (one per ORM, so concurrent requests share its statements). */
export function accessRecorderOf(orm: MikroORM): AccessRecorder {
  let recorder = recorders.get(orm);
  if (!recorder) {
    recorder = createAccessRecorder(orm);
    recorders.set(orm, recorder);
  }
  return recorder;
}

/** Names the persons whose data the handler's answer holds (called again: those persons join). */
export function personsRead(ctx: Context, personUuids: readonly string[], details?: Record<string, unknown>): void {
  const already = ctx.state.personsRead as PersonsRead | undefined;
  ctx.state.personsRead = already
    ? { personUuids: [...already.personUuids, ...personUuids], details: { ...already.details, ...details } }
    : { personUuids, details };
}

/** The log row of a read of `personUuids` by this request's key, as `action`. */
export function accessEntry(ctx: Context, action: string, read: PersonsRead): AccessEntry {
  const { project, auth } = ctx.state as { project: { id: number }; auth: { userId: number; keyId: string } };
  return {
    projectId: project.id,
    userId: auth.userId,
    apiKeyId: auth.keyId,
    action,
    personUuids: read.personUuids,
    requestId: (ctx.state.requestId as string | undefined) ?? null,
    clientAddress: ctx.request.ip || null,
    details: read.details,
  };
}

/** Records the read `ctx.state.personsRead` names as `action` (nothing read: nothing recorded). */
export function recordPersonsRead(ctx: Context, action: string): Promise<void> {
  const read = ctx.state.personsRead as PersonsRead | undefined;
  return read ? recordPersonsReadNow(ctx, action, read) : Promise.resolve();
}

/** Records a read as `action` now (a streamed answer: before each part of it is written). */
export async function recordPersonsReadNow(ctx: Context, action: string, read: PersonsRead): Promise<void> {
  if (read.personUuids.length === 0) return;
  try {
    await accessRecorderOf(ctx.deps.orm).record(accessEntry(ctx, action, read));
  } catch {
    // The log cannot take the row (PostgreSQL unreachable long enough to fill its backlog, or the
    // process shutting down): the data is not handed out unrecorded, and the client may retry.
    throw new ApiError(
      503,
      'server_error',
      'access_log_unavailable',
      'This read cannot be recorded in the read-access log now; try again shortly.',
      null,
      { 'Retry-After': '5' },
    );
  }
}
