// `npm run manage -- tracking-plan diff|apply FILE --project ID`: a plan kept in the customer's repository,
// checked and applied from the command line (in this process, as `main` runs it); the API sees it.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { main } from '../../scripts/manage.ts';
import { apiWithAccount, call } from '../helpers.ts';

const { api, account } = await apiWithAccount();

async function manage(...args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main([...args, '--json'], { out: (t) => out.push(t), err: (t) => err.push(t) });
  let json: any = null;
  try {
    json = JSON.parse(out.join('\n'));
  } catch {}
  return { code, json, stderr: err.join('\n') };
}

const dir = mkdtempSync(join(tmpdir(), 'tracking-plan-'));
const file = (name: string, content: string) => {
  const path = join(dir, name);
  writeFileSync(path, content);
  return path;
};

describe('tracking-plan commands', () => {
  it('diff shows the changes, apply makes a version the API serves', async () => {
    const plan = file(
      'plan.json',
      JSON.stringify({ events: { paid: { mode: 'stamp', schema: { required: ['amount'] } } } }),
    );
    const project = String(account.projectId);
    const diff = await manage('tracking-plan', 'diff', plan, '--project', project);
    expect(diff.code, diff.stderr).toBe(0);
    expect(diff.json).toMatchObject({ current_version: null, events_added: ['paid'] });
    const applied = await manage('tracking-plan', 'apply', plan, '--project', project);
    expect(applied.code, applied.stderr).toBe(0);
    expect(applied.json).toMatchObject({ project: account.projectId, version: 1 });
    const served = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/tracking_plan/`, {
      key: account.apiKey,
    });
    expect(served.body).toMatchObject({ version: 1, document: { events: { paid: { mode: 'stamp' } } } });
  });

  it('a bad file, a bad schema or a missing FILE fail with one line', async () => {
    const project = String(account.projectId);
    const notJson = await manage('tracking-plan', 'apply', file('bad.json', '{'), '--project', project);
    expect(notJson.code).toBe(1);
    expect(notJson.stderr).toContain('is not JSON');
    const badSchema = file('schema.json', JSON.stringify({ events: { x: { schema: { type: 'nope' } } } }));
    const refused = await manage('tracking-plan', 'apply', badSchema, '--project', project);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('events.x.schema');
    expect((await manage('tracking-plan', 'apply', '--project', project)).code).toBe(2);
  });
});
