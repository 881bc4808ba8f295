// Seed: the Holdout inside an experiment carries `created_by`, a User: the holdout's creator.
import { describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { apiWithAccount, call, createKey } from '../../helpers.ts';
import { createUser } from '../../../shared/accounts/service.ts';

const { api, account } = await apiWithAccount();
const base = () => `/api/projects/${account.projectId}`;
const req = (key: string, method: string, path: string, body?: unknown) =>
  call(api.baseUrl, method, `${base()}${path}`, { key, body });

describe('holdout.created_by in experiment responses', () => {
  it('is the user who created the holdout (not the experiment creator), in every experiment response', async () => {
    const em = api.orm.em.fork();
    const email = `holdout-maker-${account.projectId}@example.com`;
    const maker = await createUser(em, { email, firstName: 'Hold', organizationId: account.organizationId });
    const makerKey = await createKey(api.orm, maker.id);

    const filters = [{ rollout_percentage: 10 }];
    const holdout = await req(makerKey, 'POST', '/experiment_holdouts/', { name: 'H', filters });
    expect(holdout.status).toBe(201);
    const created = await req(account.apiKey, 'POST', '/experiments/', {
      name: 'E',
      feature_flag_key: 'holdout-creator',
      holdout_id: holdout.body.id,
    });
    expect(created.status).toBe(201);
    expect(created.body.created_by.id).toBe(account.userId);

    const [user] = await sql(api.orm, `select id, uuid, distinct_id from app_user where id = ?`, [maker.id]);
    const expected = { id: user.id, uuid: user.uuid, distinct_id: user.distinct_id, first_name: 'Hold', email };
    const id = created.body.id;
    const responses = [
      created.body,
      (await req(account.apiKey, 'GET', `/experiments/${id}/`)).body,
      (await req(account.apiKey, 'PATCH', `/experiments/${id}/`, { description: 'd' })).body,
      (await req(account.apiKey, 'GET', '/experiments/')).body.results.find((e: any) => e.id === id),
    ];
    for (const experiment of responses) expect(experiment.holdout.created_by).toMatchObject(expected);
  });

  it('is null when the holdout has no creator any more', async () => {
    const filters = [{ rollout_percentage: 5 }];
    const holdout = await req(account.apiKey, 'POST', '/experiment_holdouts/', { name: 'H2', filters });
    await sql(api.orm, `update experiment_holdout set created_by_id = null where id = ?`, [holdout.body.id]);
    const body = { name: 'E2', feature_flag_key: 'holdout-creator-2', holdout_id: holdout.body.id };
    const created = await req(account.apiKey, 'POST', '/experiments/', body);
    expect(created.status).toBe(201);
    expect(created.body.holdout).toMatchObject({ id: holdout.body.id, created_by: null });
  });
});
