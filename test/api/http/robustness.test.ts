// Generated bad input against every declared route: malformed JSON, wrong types, huge strings and
// arrays, unknown fields, invalid ids, SQL/JSON metacharacters in query parameters. The answer is
// always PostHog's error body with a 4xx, or a success; never a 500. A rejected request changes
// nothing: every table with a project_id column is fingerprinted before and after.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { allRoutes } from '../../../api/routes.ts';
import type { RouteDefinition } from '../../../api/http/routes.ts';
import { call, createAccount, startApi, type TestAccount, type TestApi } from '../../helpers.ts';

const RUNS_PER_ROUTE = Number(process.env.ROBUSTNESS_RUNS ?? 30);
export const casesRun: Record<string, number> = {};

let api: TestApi;
let account: TestAccount;
let projectTables: string[] = [];

beforeAll(async () => {
  api = await startApi((config) => {
    config.maxJsonBodyBytes = 256 * 1024;
  });
  account = await createAccount(api.orm);
  // Every table (not partition) with a project_id column, including ones added later.
  const rows = await api.orm.em.fork().getConnection().execute<{ table_name: string }[]>(
    `select c.relname as table_name from pg_class c
       join pg_namespace n on n.oid = c.relnamespace and n.nspname = 'public'
       join pg_attribute a on a.attrelid = c.oid and a.attname = 'project_id' and not a.attisdropped
      where c.relkind in ('r', 'p') and not c.relispartition`,
  );
  projectTables = [...new Set(rows.map((r) => r.table_name))].sort();
});
afterAll(async () => {
  const total = Object.values(casesRun).reduce((a, b) => a + b, 0);
  console.log(`robustness: ${total} generated requests over ${Object.keys(casesRun).length} routes (${RUNS_PER_ROUTE} per route)`);
  await api.close();
});

async function fingerprint(): Promise<string> {
  const conn = api.orm.em.fork().getConnection();
  const parts: string[] = [];
  for (const table of projectTables) {
    const [row] = await conn.execute<any[]>(
      `select count(*)::int as n, md5(coalesce(string_agg(t::text, '|' order by t::text), '')) as h from "${table}" t where project_id = ?`,
      [account.projectId],
    );
    parts.push(`${table}:${row.n}:${row.h}`);
  }
  return parts.join(',');
}

const nasty = fc.oneof(
  fc.constantFrom("'; drop table person; --", '" OR 1=1 --', '\\', '%', '_', '{"a":', '[[[', '\u0000', '$where', '../../etc/passwd', '${7*7}', '\ud800'),
  fc.string({ maxLength: 50 }),
  fc.string({ minLength: 5000, maxLength: 20000 }),
);
const anyJson = fc.jsonValue({ maxDepth: 3 });
const idLike = fc.oneof(
  fc.constantFrom('abc', '-1', '0', '99999999999999999999999', '1.5', 'null', '%27', '00000000-0000-0000-0000-00000000000g', '1;select'),
  fc.uuid(),
  fc.nat().map(String),
);

/** A request body that is wrong in some way for most routes. */
function badBody(route: RouteDefinition) {
  const properties = Object.keys((route.body?.properties as Record<string, unknown>) ?? {});
  const known = properties.length ? fc.constantFrom(...properties) : fc.constant('name');
  return fc.oneof(
    fc.constantFrom('{', '{"a": }', 'null', '[]', '"text"', '123', '{"a":1,}', 'NaN'),
    anyJson.map((v) => JSON.stringify(v)),
    fc.record({ key: known, value: fc.oneof(anyJson, nasty, fc.array(nasty, { maxLength: 3000 })) }).map(({ key, value }) => JSON.stringify({ [key]: value })),
    fc.dictionary(fc.string({ maxLength: 12 }), anyJson, { maxKeys: 5 }).map((v) => JSON.stringify(v)),
  );
}

function badQuery(route: RouteDefinition) {
  const properties = Object.keys((route.query?.properties as Record<string, unknown>) ?? {});
  const names = fc.constantFrom(...properties, 'limit', 'offset', 'format', 'properties', 'search', 'ordering');
  return fc.array(fc.tuple(names, fc.oneof(nasty, anyJson.map((v) => JSON.stringify(v)))), { maxLength: 4 }).map((pairs) => {
    const params = new URLSearchParams();
    for (const [name, value] of pairs) params.append(name, value);
    return params.toString();
  });
}

function pathWith(route: RouteDefinition, id: string): string {
  return route.path.replace(':project_id', String(account.projectId)).replace(/:[a-z_]+/g, encodeURIComponent(id)) + '/';
}

const authenticated = allRoutes.filter((r) => r.scopes !== null);

describe.each(authenticated.map((r) => [`${r.method} ${r.path}`, r] as const))('%s', (name, route) => {
  it('never answers 500 and rejects without changing anything', async () => {
    const sendsBody = ['POST', 'PATCH', 'PUT'].includes(route.method);
    casesRun[name] = 0;
    await fc.assert(
      fc.asyncProperty(idLike, badQuery(route), sendsBody ? badBody(route) : fc.constant(undefined), async (id, query, body) => {
        casesRun[name]++;
        const before = await fingerprint();
        const res = await call(api.baseUrl, route.method, `${pathWith(route, id)}${query ? `?${query}` : ''}`, {
          key: account.apiKey,
          body,
        });
        expect(res.status, `${res.status} ${res.text.slice(0, 300)}`).toBeLessThan(500);
        if (res.status >= 400) {
          if (!(route.method === 'DELETE' && res.status === 405)) {
            expect(Object.keys(res.body ?? {}).sort()).toEqual(['attr', 'code', 'detail', 'type']);
          }
          expect(await fingerprint()).toBe(before);
        }
      }),
      { numRuns: RUNS_PER_ROUTE, endOnFailure: true },
    );
  });
});
