// The queue dashboard (bull-board) at /admin/queues, behind HTTP basic auth with ADMIN_PASSWORD.
// Without a password configured the dashboard is not mounted at all.
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { KoaAdapter } from '@bull-board/koa';
import type { Middleware } from 'koa';
import { timingSafeEqual } from 'node:crypto';
import type { AppDeps } from '../deps.ts';

export const ADMIN_BASE_PATH = '/admin/queues';

function credentialsMatch(header: string, user: string, password: string): boolean {
  const match = /^Basic\s+(.+)$/i.exec(header);
  if (!match) return false;
  const given = Buffer.from(Buffer.from(match[1], 'base64').toString('utf8'));
  const expected = Buffer.from(`${user}:${password}`);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

export function queueDashboard(deps: AppDeps): Middleware | null {
  if (!deps.config.adminPassword) return null;
  const adapter = new KoaAdapter();
  adapter.setBasePath(ADMIN_BASE_PATH);
  createBullBoard({ queues: Object.values(deps.queues).map((q) => new BullMQAdapter(q)), serverAdapter: adapter });
  // The adapter ships its own copy of the Koa types; the middleware is the same at run time.
  const board = adapter.registerPlugin() as unknown as Middleware;
  const user = process.env.ADMIN_USER ?? 'admin';
  return async (ctx, next) => {
    if (ctx.path !== ADMIN_BASE_PATH && !ctx.path.startsWith(`${ADMIN_BASE_PATH}/`)) return next();
    if (!credentialsMatch(ctx.get('authorization'), user, deps.config.adminPassword)) {
      ctx.status = 401;
      ctx.set('WWW-Authenticate', 'Basic realm="queues"');
      ctx.body = { type: 'authentication_error', code: 'not_authenticated', detail: 'Authentication credentials were not provided.', attr: null };
      return;
    }
    return board(ctx, next);
  };
}
