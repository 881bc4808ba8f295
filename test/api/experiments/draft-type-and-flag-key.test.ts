// Seed: `type` and `feature_flag_key` are writable. PATCH changes them on a draft (no start_date),
// keeping the experiment's flag consistent (an existing flag with the key is reused, else one is
// made from the experiment's variants and holdout); once launched, a 400 naming the field.
import { describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { apiWithAccount, call } from '../../helpers.ts';

const { api, account } = await apiWithAccount();
const P = () => `/api/projects/${account.projectId}`;
const req = (method: string, path: string, body?: unknown) =>
  call(api.baseUrl, method, `${P()}${path}`, { key: account.apiKey, body });
const create = async (body: Record<string, unknown>) => {
  const res = await req('POST', '/experiments/', body);
  expect(res.status, res.text).toBe(201);
  return res.body;
};
const patch = (id: number, body: unknown) => req('PATCH', `/experiments/${id}/`, body);
const flagsWithKey = (key: string) =>
  sql(api.orm, `select id, key, name, active, deleted, filters from feature_flag where project_id = ? and key = ?`, [
    account.projectId,
    key,
  ]);
const VARIANTS = [
  { key: 'control', name: 'C', rollout_percentage: 34 },
  { key: 'a', name: 'A', rollout_percentage: 33 },
  { key: 'b', name: 'B', rollout_percentage: 33 },
];

describe('PATCH type on a draft', () => {
  it('changes the type, and null is allowed', async () => {
    const exp = await create({ name: 'Typed', feature_flag_key: 'typed' });
    expect(exp.type).toBe('product');
    const res = await patch(exp.id, { type: 'web' });
    expect(res.status, res.text).toBe(200);
    expect(res.body.type).toBe('web');
    expect((await req('GET', `/experiments/${exp.id}/`)).body.type).toBe('web');
    expect((await patch(exp.id, { type: null })).body.type).toBeNull();
    const bad = await patch(exp.id, { type: 'other' });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ code: 'invalid_choice', attr: 'type' });
  });
});

describe('PATCH feature_flag_key on a draft', () => {
  it('makes a flag from the experiment’s variants and holdout when none has the key; the old flag stays', async () => {
    const holdout = await req('POST', '/experiment_holdouts/', { name: 'H', filters: [{ rollout_percentage: 10 }] });
    const parameters = { feature_flag_variants: VARIANTS, ensure_experience_continuity: true };
    const exp = await create({ name: 'Rekey', feature_flag_key: 'rekey-old', parameters, holdout_id: holdout.body.id });
    const res = await patch(exp.id, { feature_flag_key: 'rekey-new' });
    expect(res.status, res.text).toBe(200);
    expect(res.body.feature_flag_key).toBe('rekey-new');
    const inactiveSticky = { key: 'rekey-new', active: false, ensure_experience_continuity: true };
    expect(res.body.feature_flag).toMatchObject(inactiveSticky);
    expect(res.body.feature_flag.id).not.toBe(exp.feature_flag.id);
    expect(res.body.feature_flag.filters.multivariate.variants).toEqual(VARIANTS);
    expect(res.body.feature_flag.filters.holdout).toEqual({ id: holdout.body.id, exclusion_percentage: 10 });
    const [flag] = await flagsWithKey('rekey-new');
    expect(flag.name).toBe('Feature Flag for Experiment Rekey');
    expect(await flagsWithKey('rekey-old')).toMatchObject([{ id: exp.feature_flag.id, deleted: false, active: false }]);

    // Launching afterwards activates the experiment's (new) flag, not the old one.
    const launched = await patch(exp.id, { start_date: '2026-01-01T00:00:00Z' });
    expect(launched.body.feature_flag).toMatchObject({ key: 'rekey-new', active: true });
    expect((await flagsWithKey('rekey-old'))[0].active).toBe(false);
  });

  it('applies parameters and start_date sent in the same PATCH to the new flag', async () => {
    const exp = await create({ name: 'Both', feature_flag_key: 'both-old' });
    const res = await patch(exp.id, {
      feature_flag_key: 'both-new',
      parameters: { feature_flag_variants: VARIANTS },
      start_date: '2026-01-01T00:00:00Z',
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.feature_flag).toMatchObject({ key: 'both-new', active: true });
    expect(res.body.feature_flag.filters.multivariate.variants).toEqual(VARIANTS);
  });

  it('reuses an existing eligible flag with that key, as create does', async () => {
    const owner = await create({ name: 'Owner', feature_flag_key: 'shared-target' });
    const exp = await create({ name: 'Mover', feature_flag_key: 'mover' });
    const res = await patch(exp.id, { feature_flag_key: 'shared-target' });
    expect(res.status, res.text).toBe(200);
    expect(res.body.feature_flag.id).toBe(owner.feature_flag.id);
    expect(await flagsWithKey('shared-target')).toHaveLength(1);
  });

  it('refuses an ineligible or malformed key and changes nothing', async () => {
    const insert = `insert into feature_flag (project_id, key, filters) values (?, 'plain-flag', '{"groups": []}')`;
    await sql(api.orm, insert, [account.projectId]);
    const exp = await create({ name: 'Stay', feature_flag_key: 'stay' });
    const ineligible = await patch(exp.id, { feature_flag_key: 'plain-flag', description: 'not saved' });
    expect(ineligible.status).toBe(400);
    expect(ineligible.body.detail).toBe('Feature flag is not eligible for experiments.');
    const malformed = await patch(exp.id, { feature_flag_key: 'bad key!' });
    expect(malformed.status).toBe(400);
    expect(malformed.body.code).toBe('invalid_key');
    const after = (await req('GET', `/experiments/${exp.id}/`)).body;
    expect(after).toMatchObject({ feature_flag_key: 'stay', description: null });
    expect(after.feature_flag.id).toBe(exp.feature_flag.id);
    expect(await flagsWithKey('bad key!')).toEqual([]);
  });

  it('lets drafts moved to one new key at the same time share one flag (no 500)', async () => {
    const names = [1, 2, 3, 4, 5].map((i) => `race-${i}`);
    const drafts = await Promise.all(names.map((name) => create({ name, feature_flag_key: name })));
    const results = await Promise.all(drafts.map((d) => patch(d.id, { feature_flag_key: 'race-target' })));
    expect(results.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    const flags = await flagsWithKey('race-target');
    expect(flags).toHaveLength(1);
    expect(new Set(results.map((r) => r.body.feature_flag.id))).toEqual(new Set([flags[0].id]));
  });
});

describe('PATCH type or feature_flag_key once launched', () => {
  it('answers a 400 naming the field and saying why; sending the current value is fine', async () => {
    const exp = await create({ name: 'Running', feature_flag_key: 'running', start_date: '2026-01-01T00:00:00Z' });
    const key = await patch(exp.id, { feature_flag_key: 'running-2' });
    expect(key.status).toBe(400);
    expect(key.body).toMatchObject({ type: 'validation_error', code: 'invalid_input', attr: 'feature_flag_key' });
    expect(key.body.detail).toMatch(/launched/);
    const type = await patch(exp.id, { type: 'web' });
    expect(type.status).toBe(400);
    expect(type.body).toMatchObject({ type: 'validation_error', code: 'invalid_input', attr: 'type' });
    expect(type.body.detail).toMatch(/launched/);
    const same = await patch(exp.id, { feature_flag_key: 'running', type: 'product', description: 'ok' });
    expect(same.status, same.text).toBe(200);
    expect(same.body).toMatchObject({ feature_flag_key: 'running', type: 'product', description: 'ok' });
    expect(await flagsWithKey('running-2')).toEqual([]);
  });
});
