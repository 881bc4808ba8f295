// Per-project retention settings through PATCH /api/projects/:id/, their validation, the activity-log
// entry of a change, and the shape of the retention preview and run list (the worker test,
// test/shared/retention/retention.test.ts, checks that a run removes what the preview counts).
import { describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { apiWithAccount, call, createKey } from '../../helpers.ts';

const { api, account } = await apiWithAccount();
const path = `/api/projects/${account.projectId}/`;
const patch = (body: unknown, key = account.apiKey) => call(api.baseUrl, 'PATCH', path, { key, body });

describe('PATCH /api/projects/:id/ retention settings', () => {
  it('are unset (kept forever) on a new project', async () => {
    const res = await call(api.baseUrl, 'GET', path, { key: account.apiKey });
    expect(res.body).toMatchObject({ event_retention_days: null, recording_retention_days: null });
  });

  it('sets and reads back event and recording retention days, and unsets them with null', async () => {
    const set = await patch({ event_retention_days: 30, recording_retention_days: 7 });
    expect(set.status).toBe(200);
    expect(set.body).toMatchObject({ id: account.projectId, event_retention_days: 30, recording_retention_days: 7 });
    const read = await call(api.baseUrl, 'GET', path, { key: account.apiKey });
    expect(read.body).toMatchObject({ event_retention_days: 30, recording_retention_days: 7 });

    const unset = await patch({ recording_retention_days: null });
    expect(unset.status).toBe(200);
    expect(unset.body).toMatchObject({ event_retention_days: 30, recording_retention_days: null });
    await patch({ event_retention_days: null });
  });

  it.each([
    [{ event_retention_days: 0 }, 'event_retention_days', 'min_value'],
    [{ event_retention_days: -3 }, 'event_retention_days', 'min_value'],
    [{ recording_retention_days: 0 }, 'recording_retention_days', 'min_value'],
    [{ recording_retention_days: -1 }, 'recording_retention_days', 'min_value'],
    [{ recording_retention_days: 1.5 }, 'recording_retention_days', 'invalid_input'],
    [{ event_retention_days: '30' }, 'event_retention_days', 'invalid_input'],
    [{ event_retention_days: 10_000_000 }, 'event_retention_days', 'max_value'],
  ])('refuses %j with a 400 naming the field, and changes nothing', async (body, attr, code) => {
    const res = await patch(body);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ type: 'validation_error', attr });
    expect(Object.keys(res.body).sort()).toEqual(['attr', 'code', 'detail', 'type']);
    if (code !== 'invalid_input') expect(res.body.code).toBe(code);
    const read = await call(api.baseUrl, 'GET', path, { key: account.apiKey });
    expect(read.body).toMatchObject({ event_retention_days: null, recording_retention_days: null });
  });

  it('refuses malformed JSON with a 400, not a 500', async () => {
    const res = await patch('{"event_retention_days": ');
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ type: 'invalid_request', code: 'parse_error' });
  });

  it('needs project:write', async () => {
    const reader = await createKey(api.orm, account.userId, { scopes: ['project:read'] });
    const res = await patch({ event_retention_days: 30 }, reader);
    expect(res.status).toBe(403);
    expect(res.body).toMatchObject({ type: 'authentication_error', code: 'permission_denied' });
  });

  it('records each change in the activity log, with before and after', async () => {
    await patch({ event_retention_days: 90 });
    await patch({ event_retention_days: 90 }); // no change, no entry
    await patch({ event_retention_days: 60, recording_retention_days: 14 });
    const entries = await sql(
      api.orm,
      `select activity, user_id, detail from activity_log where scope = 'Project' and item_id = ? and project_id = ?
        order by created_at`,
      [String(account.projectId), account.projectId],
    );
    const retention = entries.filter((e) =>
      e.detail.changes.some((c: { field: string }) => c.field.endsWith('_retention_days')),
    );
    expect(retention.slice(-2).map((e) => e.detail.changes)).toEqual([
      [{ type: 'Project', action: 'changed', field: 'event_retention_days', before: null, after: 90 }],
      [
        { type: 'Project', action: 'changed', field: 'event_retention_days', before: 90, after: 60 },
        { type: 'Project', action: 'changed', field: 'recording_retention_days', before: null, after: 14 },
      ],
    ]);
    expect(retention.slice(-2).map((e) => [e.activity, e.user_id])).toEqual([
      ['updated', account.userId],
      ['updated', account.userId],
    ]);
    await patch({ event_retention_days: null, recording_retention_days: null });
  });
});

describe('GET /api/projects/:id/retention/preview/ and /runs/', () => {
  it('says nothing is removed while retention is unset', async () => {
    const res = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/retention/preview/`, {
      key: account.apiKey,
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      event_retention_days: null,
      recording_retention_days: null,
      event_cutoff: null,
      recording_cutoff: null,
      events: 0,
      events_in_dropped_partitions: 0,
      partitions_dropped: [],
      recordings: 0,
      snapshots: 0,
    });
    // The default off-peak window, 03:00 UTC, next.
    const next = new Date(res.body.next_run_at);
    expect(next.getUTCHours()).toBe(3);
    expect(next.getTime()).toBeGreaterThan(Date.now());
    expect(next.getTime()).toBeLessThanOrEqual(Date.now() + 86_400_000);
  });

  it('draws the line at 00:00 UTC of the next run’s day minus the retention days', async () => {
    await patch({ event_retention_days: 30, recording_retention_days: 7 });
    try {
      const res = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/retention/preview/`, {
        key: account.apiKey,
      });
      // The days it counts with.
      expect(res.body).toMatchObject({ event_retention_days: 30, recording_retention_days: 7 });
      const next = new Date(res.body.next_run_at);
      const day = Date.UTC(next.getUTCFullYear(), next.getUTCMonth(), next.getUTCDate());
      expect(res.body.event_cutoff).toBe(new Date(day - 30 * 86_400_000).toISOString());
      expect(res.body.recording_cutoff).toBe(new Date(day - 7 * 86_400_000).toISOString());
    } finally {
      await patch({ event_retention_days: null, recording_retention_days: null });
    }
  });

  it('lists no runs for a project that never had one, and needs project:read', async () => {
    const res = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/retention/runs/`, {
      key: account.apiKey,
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ count: 0, results: [], next: null, previous: null });
    const other = await createKey(api.orm, account.userId, { scopes: ['person:read'] });
    const denied = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/retention/preview/`, {
      key: other,
    });
    expect(denied.status).toBe(403);
  });
});
