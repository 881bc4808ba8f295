// The operator pages: the queue dashboard (bull-board) at /admin/queues and the deletion requests
// not done yet at /admin/deletions, behind HTTP basic auth, with password guessing throttled per
// client address and user name and for all clients together (guardCredentialCheck). A right password
// also sets a signed sign-in cookie, ops_proof, with which that browser is counted on its own, so
// others guessing from its address cannot lock it out. ADMIN_PASSWORD reads: its dashboard is
// bull-board's read-only board and any other method than GET is refused with 403. ADMIN_WRITE_PASSWORD may also retry, clean, remove, promote,
// pause or empty. Without either password configured nothing is mounted.
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { KoaAdapter } from '@bull-board/koa';
import { createHash, createHmac } from 'node:crypto';
import type { Context, Middleware } from 'koa';
import type { AppDeps } from '../deps.ts';
import { sameSecret } from '../http/auth.ts';
import { methodNotAllowed, notFound, permissionDenied } from '../http/errors.ts';
import { guardCredentialCheck } from '../http/throttle.ts';
import { DELETION_RECEIPTS_PATH, DELETIONS_PAGE_PATH, deletionReceiptJson, deletionsPage } from './deletions-page.ts';

export const ADMIN_BASE_PATH = '/admin/queues';
const PROOF_COOKIE = 'ops_proof';
const PROOF_SECONDS = 30 * 24 * 3600;

type Role = 'read' | 'write';

/** The `user:password` of a Basic Authorization header, or null when there is none. */
function basicCredential(header: string): string | null {
  const match = /^Basic\s+(.+)$/i.exec(header);
  return match ? Buffer.from(match[1], 'base64').toString('utf8') : null;
}

/** bull-board at ADMIN_BASE_PATH; read-only, it hides every action and refuses them itself too. */
function board(deps: AppDeps, readOnlyMode: boolean): Middleware {
  const adapter = new KoaAdapter();
  adapter.setBasePath(ADMIN_BASE_PATH);
  createBullBoard({
    queues: Object.values(deps.queues).map((q) => new BullMQAdapter(q, { readOnlyMode, allowRetries: !readOnlyMode })),
    serverAdapter: adapter,
    options: {
      uiConfig: {
        boardTitle: readOnlyMode ? 'Queues (read-only)' : 'Queues',
        miscLinks: [{ text: 'Deletion requests', url: DELETIONS_PAGE_PATH }],
      },
    },
  });
  // The adapter ships its own copy of the Koa types; the middleware is the same at run time.
  return adapter.registerPlugin() as unknown as Middleware;
}

/**
 * The board's page may load only what this server serves: its template links Google Fonts, which
 * goes (the UI falls back to the system's sans-serif), and a CSP holds the page to this origin.
 */
const DASHBOARD_CSP = [
  "default-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "object-src 'none'",
  "base-uri 'self'",
  "frame-ancestors 'none'",
].join('; ');
const EXTERNAL_LINK = /<link\b[^>]*\bhref="(?:https?:)?\/\/[^"]*"[^>]*>\s*/gi;

function keepPageLocal(ctx: Context): void {
  if (typeof ctx.body !== 'string' || !ctx.response.is('html')) return;
  ctx.body = ctx.body.replace(EXTERNAL_LINK, '');
  ctx.set('Content-Security-Policy', DASHBOARD_CSP);
}

export function queueDashboard(deps: AppDeps): Middleware | null {
  const { adminUser: user, adminPassword: readPassword, adminWritePassword: writePassword } = deps.config;
  if (!readPassword && !writePassword) return null;
  const boards: Record<Role, Middleware> = { read: board(deps, true), write: board(deps, false) };
  const guard = {
    prefix: deps.config.redisPrefix,
    failuresPerMinute: deps.config.opsAuthFailuresPerMinute,
    failuresPerHour: deps.config.opsAuthFailuresPerHour,
  };

  /** Which credential the request carries; both are compared, so the time taken tells nothing. */
  const roleOf = (given: string): Role | null => {
    const read = !!readPassword && sameSecret(given, `${user}:${readPassword}`);
    const write = !!writePassword && sameSecret(given, `${user}:${writePassword}`);
    return write ? 'write' : read ? 'read' : null;
  };

  // A sign-in proof is `<expiry>.<HMAC of it>`, keyed by a digest of the credential it proves: it
  // cannot be made without the password, and it is void once that password changes. It tells the
  // guard nothing the Basic header the browser sends anyway would not.
  const proofKeys = [readPassword, writePassword]
    .filter(Boolean)
    .map((password) => createHash('sha256').update(`ops-proof\0${user}:${password}`).digest());
  const sign = (key: Buffer, expires: string) =>
    createHmac('sha256', key).update(`${PROOF_COOKIE}.${expires}`).digest('base64url');
  /** A short id of the request's valid proof, or null. */
  const proofOf = (ctx: Context): string | null => {
    const match = /^(\d{1,12})\.([\w-]{43})$/.exec(ctx.cookies.get(PROOF_COOKIE) ?? '');
    if (!match || Number(match[1]) * 1000 <= Date.now()) return null;
    const valid = proofKeys.some((key) => sameSecret(match[2], sign(key, match[1])));
    return valid ? createHash('sha256').update(match[2]).digest('base64url').slice(0, 22) : null;
  };
  const issueProof = (ctx: Context, role: Role) => {
    const expires = String(Math.floor(Date.now() / 1000) + PROOF_SECONDS);
    const key = proofKeys[role === 'write' && readPassword ? 1 : 0];
    ctx.cookies.set(PROOF_COOKIE, `${expires}.${sign(key, expires)}`, {
      path: '/admin',
      maxAge: PROOF_SECONDS * 1000,
      httpOnly: true,
      sameSite: 'strict',
      secure: ctx.secure,
      overwrite: true,
    });
  };

  return async (ctx, next) => {
    const receipt = ctx.path.startsWith(`${DELETION_RECEIPTS_PATH}/`)
      ? ctx.path.slice(DELETION_RECEIPTS_PATH.length + 1)
      : null;
    const deletions = ctx.path === DELETIONS_PAGE_PATH || receipt !== null;
    if (!deletions && ctx.path !== ADMIN_BASE_PATH && !ctx.path.startsWith(`${ADMIN_BASE_PATH}/`)) return next();
    const given = basicCredential(ctx.get('authorization'));
    const role = given === null ? null : roleOf(given);
    // No credential is no guess (a browser asks first without one): 401 without counting.
    const proof = given === null ? null : proofOf(ctx);
    const client = { address: ctx.ip, user: given?.split(':')[0] ?? '', proof };
    const right = given !== null && (await guardCredentialCheck(deps.redis, guard, 'admin', client, role !== null));
    if (!right || role === null) {
      ctx.status = 401;
      ctx.set('WWW-Authenticate', 'Basic realm="queues"');
      ctx.body = {
        type: 'authentication_error',
        code: 'not_authenticated',
        detail: 'Authentication credentials were not provided.',
        attr: null,
      };
      return;
    }
    if (!proof) issueProof(ctx, role);
    const reading = ctx.method === 'GET' || ctx.method === 'HEAD';
    if (deletions) {
      if (!reading) throw methodNotAllowed(ctx.method, ['GET', 'HEAD']);
      if (receipt !== null) return deletionReceiptJson(ctx, deps, receipt);
      return deletionsPage(ctx, deps, ADMIN_BASE_PATH);
    }
    if (!reading && role === 'read')
      throw permissionDenied('The read-only dashboard credential cannot change queues (ADMIN_WRITE_PASSWORD can).');
    // What bull-board does not serve must not fall through to the app from inside it: its error
    // handler would turn the app's 404 into a 500.
    let unserved = false;
    await boards[role](ctx, async () => {
      unserved = true;
    });
    if (unserved && ctx.status === 404 && ctx.body === undefined) throw notFound();
    keepPageLocal(ctx);
  };
}
