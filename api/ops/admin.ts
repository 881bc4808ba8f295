// The operator pages: the queue dashboard (bull-board) at /admin/queues and the deletion requests
// not done yet at /admin/deletions, behind HTTP basic auth, with password guessing throttled per
// client address. ADMIN_PASSWORD reads: its dashboard is bull-board's read-only board and any other
// method than GET is refused with 403. ADMIN_WRITE_PASSWORD may also retry, clean, remove, promote,
// pause or empty. Without either password configured nothing is mounted.
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { KoaAdapter } from '@bull-board/koa';
import type { Context, Middleware } from 'koa';
import type { AppDeps } from '../deps.ts';
import { sameSecret } from '../http/auth.ts';
import { methodNotAllowed, notFound, permissionDenied } from '../http/errors.ts';
import { guardCredentialCheck } from '../http/throttle.ts';
import { DELETIONS_PAGE_PATH, deletionsPage } from './deletions-page.ts';

export const ADMIN_BASE_PATH = '/admin/queues';

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
  const guard = { prefix: deps.config.redisPrefix, failuresPerMinute: deps.config.opsAuthFailuresPerMinute };

  /** Which credential the request carries; both are compared, so the time taken tells nothing. */
  const roleOf = (given: string): Role | null => {
    const read = !!readPassword && sameSecret(given, `${user}:${readPassword}`);
    const write = !!writePassword && sameSecret(given, `${user}:${writePassword}`);
    return write ? 'write' : read ? 'read' : null;
  };

  return async (ctx, next) => {
    const deletions = ctx.path === DELETIONS_PAGE_PATH;
    if (!deletions && ctx.path !== ADMIN_BASE_PATH && !ctx.path.startsWith(`${ADMIN_BASE_PATH}/`)) return next();
    const given = basicCredential(ctx.get('authorization'));
    const role = given === null ? null : roleOf(given);
    // No credential is no guess (a browser asks first without one): 401 without counting.
    const right = given !== null && (await guardCredentialCheck(deps.redis, guard, 'admin', ctx.ip, role !== null));
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
    const reading = ctx.method === 'GET' || ctx.method === 'HEAD';
    if (deletions) {
      if (!reading) throw methodNotAllowed(ctx.method, ['GET', 'HEAD']);
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
