// The operators' read-only view of deletion requests: those not done yet by default (requests wait in
// PostgreSQL for their window, up to a week, before any queue job exists, so the queue dashboard cannot
// show them), or those of one status (?status=cancelled, completed…); each verified request links to its
// signed receipt (JSON, at /admin/deletions/receipts/<id>) and names the key that signed it.
// Served beside the dashboard, behind the same credentials (admin.ts); plain HTML, no script.
import { isBigintId, isId } from '../../shared/platform/ids.ts';
import type { Context } from 'koa';
import { deletionCrons, lastWindowStart, type ScheduledDeletionMode } from '../../shared/deletions/index.ts';
import { deletionReceiptOfRequest } from '../../shared/deletions/index.ts';
import {
  DELETION_STATUSES,
  deletionCountsByStatus,
  listOperatorDeletionRequests,
  OPERATOR_DELETION_FILTERS,
  type OperatorDeletionFilter,
  type OperatorDeletionView,
} from '../../shared/deletions/index.ts';
import { defaultSchedules, nextRun, recordedSchedules } from '../../shared/platform/schedules.ts';
import type { AppDeps } from '../deps.ts';
import { notFound, validationError } from '../http/errors.ts';

export const DELETIONS_PAGE_PATH = '/admin/deletions';
/** A verified request's signed receipt as JSON: `${DELETION_RECEIPTS_PATH}/<request id>`. */
export const DELETION_RECEIPTS_PATH = `${DELETIONS_PAGE_PATH}/receipts`;
const PAGE_ROWS = 500;

/** Nothing but this page's own inline styles. */
export const OPERATOR_PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'self'";

const escapeHtml = (value: unknown) =>
  String(value ?? '')
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;');

/** "in 2 d 5 h", "3 min ago": how far `iso` is from now, to the two largest units. */
function relative(iso: string, now: Date): string {
  const seconds = Math.round((Date.parse(iso) - now.getTime()) / 1000);
  const units: [string, number][] = [
    ['d', 86_400],
    ['h', 3600],
    ['min', 60],
    ['s', 1],
  ];
  let rest = Math.abs(seconds);
  const parts: string[] = [];
  for (const [unit, size] of units) {
    if (rest >= size && parts.length < 2) {
      parts.push(`${Math.floor(rest / size)} ${unit}`);
      rest %= size;
    }
  }
  const span = parts.join(' ') || '0 s';
  return seconds >= 0 ? `in ${span}` : `${span} ago`;
}

/** `2026-11-29 05:00:00` (UTC, as the page says) and how far away; the exact instant in `datetime`. */
const time = (iso: string | null, now: Date) =>
  iso
    ? `<time datetime="${iso}">${iso.slice(0, 19).replace('T', ' ')}</time> <small>(${relative(iso, now)})</small>`
    : '';

/** When the request runs (or ran), in words, from its status, mode and the window's cron. */
function whenItRuns(r: OperatorDeletionView, crons: Record<ScheduledDeletionMode, string>, now: Date): string {
  if (r.status === 'cancelled') return `cancelled ${time(r.cancelled_at, now)}`;
  if (r.status === 'completed') return `verified ${time(r.delete_verified_at, now)}`;
  if (r.status === 'failed') return `retry ${time(r.next_attempt_at, now)}`;
  if (r.status === 'running') return `running since ${time(r.started_at, now)}`;
  if (r.mode === 'immediate') return 'as soon as a worker takes it';
  if (r.released_at) return `window opened, released ${time(r.released_at, now)}`;
  const cron = crons[r.mode as ScheduledDeletionMode];
  if (!cron) return '';
  const opened = lastWindowStart(cron, now);
  // Made before the last window opened but not released: the next reconcile releases it.
  if (r.created_at && Date.parse(r.created_at) < opened.getTime())
    return `window opened ${time(opened.toISOString(), now)}, due now`;
  const next = nextRun(cron, now);
  return `${escapeHtml(r.mode)} window ${time(next.toISOString(), now)}`;
}

const COLUMNS = [
  'id',
  'project',
  'person',
  'type',
  'mode',
  'status',
  'requested',
  'runs',
  'attempts',
  'failures',
  'last error',
  'next attempt',
  'receipt',
];

/** A verified request's receipt: the JSON link and the id of the key that signed it. */
const receiptCell = (r: OperatorDeletionView) =>
  r.receipt_key_id
    ? `<a href="${DELETION_RECEIPTS_PATH}/${escapeHtml(r.id)}" class="receipt">receipt (JSON)</a> <small>key <code class="key-id">${escapeHtml(r.receipt_key_id)}</code></small>`
    : '';

function row(r: OperatorDeletionView, crons: Record<ScheduledDeletionMode, string>, now: Date): string {
  const cells = [
    escapeHtml(r.id),
    escapeHtml(r.project_id),
    `<code>${escapeHtml(r.person_uuid)}</code>`,
    escapeHtml(r.deletion_type),
    escapeHtml(r.mode),
    `<span class="status ${escapeHtml(r.status)}">${escapeHtml(r.status)}</span>`,
    time(r.created_at, now),
    whenItRuns(r, crons, now),
    escapeHtml(r.attempts),
    escapeHtml(r.failures),
    r.last_error ? `<pre>${escapeHtml(r.last_error)}</pre>` : '',
    time(r.next_attempt_at, now),
    receiptCell(r),
  ];
  const tds = cells.map((c) => `<td>${c}</td>`).join('');
  return `<tr data-id="${escapeHtml(r.id)}" data-status="${escapeHtml(r.status)}">${tds}</tr>`;
}

const TITLES: Record<OperatorDeletionFilter, string> = {
  open: 'Deletion requests not done',
  pending: 'Pending deletion requests',
  running: 'Running deletion requests',
  failed: 'Failed deletion requests',
  cancelled: 'Cancelled deletion requests',
  completed: 'Completed (verified) deletion requests',
  all: 'All deletion requests',
};

/** `?project=ID`: null when absent; a 400 when malformed. */
function projectFilter(ctx: Context): number | null {
  const project = ctx.query.project;
  if (project !== undefined && (typeof project !== 'string' || !isId(project)))
    throw validationError('project must be a project id', 'project');
  return project === undefined ? null : Number(project);
}

/** `?status=`: open (the default: pending, running, failed), all, or one status (the API's words, as the CLI's). */
function statusFilter(ctx: Context): OperatorDeletionFilter {
  const status = ctx.query.status ?? 'open';
  if (typeof status !== 'string' || !(OPERATOR_DELETION_FILTERS as readonly string[]).includes(status))
    throw validationError(`status must be one of ${OPERATOR_DELETION_FILTERS.join(', ')}`, 'status');
  return status as OperatorDeletionFilter;
}

/** `GET /admin/deletions/receipts/<request id>`: the request's signed receipt, as the API serves it. */
export async function deletionReceiptJson(ctx: Context, deps: AppDeps, requestId: string): Promise<void> {
  const receipt = isBigintId(requestId) ? await deletionReceiptOfRequest(deps.orm.em.fork(), requestId) : null;
  if (!receipt) throw notFound();
  ctx.status = 200;
  ctx.set('Cache-Control', 'no-store');
  ctx.body = receipt;
}

/** The page for `GET /admin/deletions[?project=ID][&status=…]`. */
export async function deletionsPage(ctx: Context, deps: AppDeps, dashboardPath: string): Promise<void> {
  const projectId = projectFilter(ctx);
  const status = statusFilter(ctx);
  const now = new Date();
  const em = deps.orm.em.fork();
  const { total, results } = await listOperatorDeletionRequests(em, { projectId, status, limit: PAGE_ROWS });
  const counts = await deletionCountsByStatus(em);
  // The windows the workers follow (recorded in PostgreSQL; seeded from the settings if no worker has).
  const crons = deletionCrons((await recordedSchedules(em, defaultSchedules(deps.config))).schedules);
  const byStatus = DELETION_STATUSES.map((s) => `${s} <b>${counts.find((c) => c.status === s)?.n ?? 0}</b>`).join(
    ' · ',
  );
  const order = ['cancelled', 'completed', 'all'].includes(status) ? 'newest first' : 'failed first, then oldest';
  const shown = total > results.length ? `the first ${results.length} of ${total} (${order})` : `${total}`;
  const link = (s: OperatorDeletionFilter) => {
    const query = new URLSearchParams({
      ...(projectId === null ? {} : { project: String(projectId) }),
      ...(s === 'open' ? {} : { status: s }),
    });
    const href = `${DELETIONS_PAGE_PATH}${query.size ? `?${query}` : ''}`;
    return s === status ? `<b>${s}</b>` : `<a href="${escapeHtml(href)}" data-status="${s}">${s}</a>`;
  };
  ctx.status = 200;
  ctx.type = 'text/html; charset=utf-8';
  ctx.set('Content-Security-Policy', OPERATOR_PAGE_CSP);
  ctx.set('Cache-Control', 'no-store');
  ctx.body = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Deletion requests</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#1d1f27;font-size:14px}
@media (max-width:600px){body{margin:.75rem}}
p,h1{overflow-wrap:anywhere}
.table-scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;width:100%}
td code,td pre{overflow-wrap:anywhere;word-break:break-word}
th,td{border-bottom:1px solid #ddd;padding:.35rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f4f6;position:sticky;top:0}code,pre{font-family:ui-monospace,monospace;font-size:12px}
time{white-space:nowrap}small{color:#666}
pre{margin:0;white-space:pre-wrap;min-width:12rem;max-width:28rem;max-height:6rem;overflow:auto;color:#a11}
.status{padding:0 .4em;border-radius:3px}.failed{background:#fbe3e3;color:#a11}.pending{background:#fff4d6}
.running{background:#e3effb}.cancelled{background:#eee;color:#555}.completed{background:#e2f5e6}
nav a,nav b{margin-right:1rem;display:inline-block}nav.filters{margin-top:.5rem}
</style></head><body>
<nav><a href="${escapeHtml(dashboardPath)}">Queue dashboard</a><a href="${DELETIONS_PAGE_PATH}">All projects</a></nav>
<nav class="filters">Show: ${OPERATOR_DELETION_FILTERS.map(link).join(' ')}</nav>
<h1>${TITLES[status]}${projectId === null ? '' : ` — project ${projectId}`}</h1>
<p>In PostgreSQL, every project: ${byStatus}. Shown: ${shown}${projectId === null ? '' : ' of this project'}.
Times are UTC. Read-only: retry a failed request with <code>npm run manage -- deletion retry --id ID</code>,
release a window's requests now with <code>npm run manage -- deletion run-window --mode weekly|off_peak</code>.</p>
<div class="table-scroll"><table><thead><tr>${COLUMNS.map((c) => `<th>${c}</th>`).join('')}</tr></thead>
<tbody>${results.map((r) => row(r, crons, now)).join('\n')}</tbody></table></div>
${results.length ? '' : `<p>None${status === 'open' ? ': every request is done' : ''}.</p>`}
</body></html>`;
}
