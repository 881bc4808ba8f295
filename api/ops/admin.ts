// The operator pages: the queue dashboard (bull-board) at /admin/queues and the deletion requests
// not done yet at /admin/deletions, behind HTTP basic auth with ADMIN_PASSWORD, with password
// guessing throttled per client address. Without a password configured they are not mounted at all.
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { KoaAdapter } from '@bull-board/koa';
import type { Middleware } from 'koa';
import type { AppDeps } from '../deps.ts';
import { sameSecret } from '../http/auth.ts';
import { methodNotAllowed } from '../http/errors.ts';
import { guardCredentialCheck } from '../http/throttle.ts';
import { DELETIONS_PAGE_PATH, deletionsPage } from './deletions-page.ts';

export const ADMIN_BASE_PATH = '/admin/queues';

/** The `user:password` of a Basic Authorization header, or null when there is none. */
function basicCredential(header: string): string | null {
  const match = /^Basic\s+(.+)$/i.exec(header);
  return match ? Buffer.from(match[1], 'base64').toString('utf8') : null;
}

export function queueDashboard(deps: AppDeps): Middleware | null {
  if (!deps.config.adminPassword) return null;
  const adapter = new KoaAdapter();
  adapter.setBasePath(ADMIN_BASE_PATH);
  createBullBoard({
    queues: Object.values(deps.queues).map((q) => new BullMQAdapter(q)),
    serverAdapter: adapter,
    options: { uiConfig: { miscLinks: [{ text: 'Deletion requests', url: DELETIONS_PAGE_PATH }] } },
  });
  // The adapter ships its own copy of the Koa types; the middleware is the same at run time.
  const board = adapter.registerPlugin() as unknown as Middleware;
  const user = deps.config.adminUser;
  const guard = { prefix: deps.config.redisPrefix, failuresPerMinute: deps.config.opsAuthFailuresPerMinute };
  return async (ctx, next) => {
    const deletions = ctx.path === DELETIONS_PAGE_PATH;
    if (!deletions && ctx.path !== ADMIN_BASE_PATH && !ctx.path.startsWith(`${ADMIN_BASE_PATH}/`)) return next();
    const given = basicCredential(ctx.get('authorization'));
    // No credential is no guess (a browser asks first without one): 401 without counting.
    const matches = given !== null && sameSecret(given, `${user}:${deps.config.adminPassword}`);
    const right = given !== null && (await guardCredentialCheck(deps.redis, guard, 'admin', ctx.ip, matches));
    if (!right) {
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
    if (deletions) {
      if (ctx.method !== 'GET' && ctx.method !== 'HEAD') throw methodNotAllowed(ctx.method);
      return deletionsPage(ctx, deps, ADMIN_BASE_PATH);
    }
    return board(ctx, next);
  };
}
