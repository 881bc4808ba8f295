// Generated bad input against every declared route: malformed JSON, wrong types, huge strings and
// arrays, unknown fields, invalid ids, SQL/JSON metacharacters in query parameters. The answer is
// always PostHog's error body with a 4xx, or a success; never a 500. A rejected request changes
// nothing: every table with a project_id column is fingerprinted before and after.
// Then, for every route, each declared body field and query parameter gets each fixed hostile value:
// JSON 10,000 deep, numbers past int8 and past a double, NUL and lone surrogates, 100k-character
// strings, out-of-range dates and malformed property filters — against real objects (a person, an
// experiment, …) so the handlers behind validation run too. After each route the API still answers.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { allRoutes } from '../../../api/routes.ts';
import type { RouteDefinition } from '../../../api/http/routes.ts';
import type { JsonSchema } from '../../../api/http/validation.ts';
import { call, createAccount, startApi, type TestAccount, type TestApi } from '../../helpers.ts';
import { accessRecorderOf } from '../../../api/http/access-log.ts';
import { capture } from '../../fixtures.ts';

const RUNS_PER_ROUTE = Number(process.env.ROBUSTNESS_RUNS ?? 30);
const casesRun: Record<string, number> = {};

let api: TestApi;
let account: TestAccount;
let projectTables: string[] = [];

beforeAll(async () => {
  api = await startApi((config) => {
    config.maxJsonBodyBytes = 256 * 1024;
  });
  account = await createAccount(api.orm);
  // Every table (not partition) with a project_id column, including ones added later.
  const rows = await api.orm.em
    .fork()
    .getConnection()
    .execute<{ table_name: string }[]>(
      `select c.relname as table_name from pg_class c
       join pg_namespace n on n.oid = c.relnamespace and n.nspname = 'public'
       join pg_attribute a on a.attrelid = c.oid and a.attname = 'project_id' and not a.attisdropped
      where c.relkind in ('r', 'p') and not c.relispartition`,
    );
  projectTables = [...new Set(rows.map((r) => r.table_name))].sort();
  fixtures = await createFixtures();
});
afterAll(async () => {
  const total = Object.values(casesRun).reduce((a, b) => a + b, 0);
  console.log(
    `robustness: ${total} generated requests over ${Object.keys(casesRun).length} routes (${RUNS_PER_ROUTE} per route)`,
  );
  await api.close();
});

/** Every project table's row count and content hash, in one statement (one round trip per request checked). */
async function fingerprint(): Promise<string> {
  // A successful read of persons is recorded in the read-access log in the background: every record
  // handed over so far is written first, so a 4xx is compared with all its predecessors' writes.
  await accessRecorderOf(api.orm).drain();
  const parts = projectTables.map(
    (table) =>
      `select '${table}:' || count(*) || ':' || md5(coalesce(string_agg(t::text, '|' order by t::text), '')) as part
         from "${table}" t where project_id = ?`,
  );
  const conn = api.orm.em.fork().getConnection();
  const params = projectTables.map(() => account.projectId);
  const rows = await conn.execute<{ part: string }[]>(parts.join(' union all '), params);
  return rows.map((r) => r.part).join(',');
}

const nasty = fc.oneof(
  fc.constantFrom(
    "'; drop table person; --",
    '" OR 1=1 --',
    '\\',
    '%',
    '_',
    '{"a":',
    '[[[',
    '\u0000',
    '$where',
    '../../etc/passwd',
    '$' + '{7*7}',
    '\ud800',
  ),
  fc.string({ maxLength: 50 }),
  fc.string({ minLength: 5000, maxLength: 20000 }),
);
const anyJson = fc.jsonValue({ maxDepth: 3 });
const idLike = fc.oneof(
  fc.constantFrom(
    'abc',
    '-1',
    '0',
    '99999999999999999999999',
    '1.5',
    'null',
    '%27',
    '00000000-0000-0000-0000-00000000000g',
    '1;select',
  ),
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
    fc
      .record({ key: known, value: fc.oneof(anyJson, nasty, fc.array(nasty, { maxLength: 3000 })) })
      .map(({ key, value }) => JSON.stringify({ [key]: value })),
    fc.dictionary(fc.string({ maxLength: 12 }), anyJson, { maxKeys: 5 }).map((v) => JSON.stringify(v)),
  );
}

function badQuery(route: RouteDefinition) {
  const properties = Object.keys((route.query?.properties as Record<string, unknown>) ?? {});
  const names = fc.constantFrom(...properties, 'limit', 'offset', 'format', 'properties', 'search', 'ordering');
  return fc
    .array(
      fc.tuple(
        names,
        fc.oneof(
          nasty,
          anyJson.map((v) => JSON.stringify(v)),
        ),
      ),
      { maxLength: 4 },
    )
    .map((pairs) => {
      const params = new URLSearchParams();
      for (const [name, value] of pairs) params.append(name, value);
      return params.toString();
    });
}

function pathWith(route: RouteDefinition, id: string): string {
  return `${route.path.replace(':project_id', String(account.projectId)).replace(/:[a-z_]+/g, encodeURIComponent(id))}/`;
}

const authenticated = allRoutes.filter((r) => r.scopes !== null);

describe.each(authenticated.map((r) => [`${r.method} ${r.path}`, r] as const))('%s', (name, route) => {
  it('never answers 500 and rejects without changing anything', async () => {
    const sendsBody = ['POST', 'PATCH', 'PUT'].includes(route.method);
    casesRun[name] = 0;
    const check = await checker(route, name);
    await fc.assert(
      fc.asyncProperty(
        idLike,
        badQuery(route),
        sendsBody ? badBody(route) : fc.constant(undefined),
        async (id, query, body) => {
          await check(`${pathWith(route, id)}${query ? `?${query}` : ''}`, body);
        },
      ),
      { numRuns: RUNS_PER_ROUTE, endOnFailure: true },
    );
  });

  it('answers each hostile value class, in every field it can reach, with a 4xx or a success; stays up', async () => {
    const check = await checker(route, name);
    const path = pathWith(route, fixtureIdFor(route));
    // Refused before any schema (parsing, NUL, lone surrogates, the request head's size): once per route.
    await check(`${path}?search=a%00b`);
    await check(`${path}?search=a%ED%A0%80b`);
    await check(`${path}?search=${'x'.repeat(100_000)}`); // past Node's 16 KB request head: 431 before the app
    const query = (route.query?.properties as Record<string, JsonSchema>) ?? {};
    for (const [param, schema] of Object.entries(query)) {
      for (const value of HUGE_NUMBERS) await check(`${path}?${param}=${value}`);
      if (/date/.test(param)) for (const value of QUERY_DATES) await check(`${path}?${param}=${value}`);
      if (JSON_PARAM.test(param) && accepts(schema, 'string')) {
        await check(`${path}?${param}=${DEEP_QUERY}`);
        for (const filter of MALFORMED_FILTERS) await check(`${path}?${param}=${encodeURIComponent(filter)}`);
      }
    }
    if (!['POST', 'PATCH', 'PUT'].includes(route.method)) return expectAlive();
    const base = VALID_BODIES[`${route.method} ${route.path}`] ?? {};
    const withField = (field: string, raw: string) => {
      const prefix = JSON.stringify({ ...base, [field]: undefined }).slice(0, -1);
      return `${prefix === '{' ? '{' : `${prefix},`}${JSON.stringify(field)}:${raw}}`;
    };
    const fields = (route.body?.properties as Record<string, JsonSchema>) ?? {};
    const first = Object.keys(fields)[0] ?? 'name';
    for (const raw of [DEEP_JSON, '"a\\u0000b"', '"a\\ud800b"', '{"\\udc00": 1}']) {
      await check(path, withField(first, raw));
    }
    await check(path, DEEP_JSON);
    for (const [field, schema] of Object.entries(fields)) {
      if (accepts(schema, 'number')) for (const raw of HUGE_NUMBERS) await check(path, withField(field, raw));
      if (accepts(schema, 'string')) await check(path, withField(field, JSON.stringify('x'.repeat(100_000))));
      if (/date/.test(field)) for (const raw of BODY_DATES) await check(path, withField(field, raw));
      if (JSON_PARAM.test(field) && (accepts(schema, 'array') || accepts(schema, 'object')))
        for (const filter of MALFORMED_FILTERS) await check(path, withField(field, filter));
    }
    await expectAlive();
  });
});

async function expectAlive() {
  const health = await call(api.baseUrl, 'GET', '/_health');
  expect(health.status).toBe(200);
}

/** Whether a field's schema lets a value of this JSON type through (untyped fields take anything). */
function accepts(schema: JsonSchema | undefined, type: 'string' | 'number' | 'array' | 'object'): boolean {
  const declared = schema?.type;
  if (declared === undefined) return schema?.enum === undefined && schema?.const === undefined;
  const types = Array.isArray(declared) ? declared : [declared];
  return types.includes(type) || (type === 'number' && types.includes('integer'));
}

/**
 * Sends one request and checks it: below 500, PostHog's error body on a 4xx, and no change to the
 * project's data on a 4xx (one fingerprint per request: the state after the previous one is known).
 */
async function checker(route: RouteDefinition, name: string) {
  let known = await fingerprint();
  return async (pathAndQuery: string, body?: string) => {
    casesRun[name] = (casesRun[name] ?? 0) + 1;
    const res = await call(api.baseUrl, route.method, pathAndQuery, { key: account.apiKey, body });
    const sent = `${route.method} ${pathAndQuery.slice(0, 200)} ${body?.slice(0, 200) ?? ''}`;
    const what = `${sent} → ${res.status} ${res.text.slice(0, 300)}`;
    expect(res.status, what).toBeLessThan(500);
    if (res.status >= 400) {
      if (!(route.method === 'DELETE' && res.status === 405))
        expect(Object.keys(res.body ?? {}).sort(), what).toEqual(['attr', 'code', 'detail', 'type']);
      expect(await fingerprint(), what).toBe(known);
    } else {
      known = await fingerprint();
    }
  };
}

const DEEP_JSON = '['.repeat(10_000) + ']'.repeat(10_000);
/** Brackets stay unencoded in a URL's query: 7,000 deep fits Node's 16 KB request head. */
const DEEP_QUERY = '['.repeat(7000) + ']'.repeat(7000);
const HUGE_NUMBERS = ['1e309', '-1e309', String(2n ** 63n), '9999999999999999999'];
const BODY_DATES = ['"0000-01-01T00:00:00Z"', '"+010000-01-01T00:00:00Z"', '"9999-12-31T23:59:59-01:00"'];
const QUERY_DATES = ['0000-01-01', '%2B010000-01-01', '-9999y'];
/** Fields and parameters that carry JSON filters, steps or id lists. */
const JSON_PARAM = /properties|filters|events|metrics|query|ids/;
/** Property filters PostHog's shapes do not allow, or whose values the database cannot compare. */
const MALFORMED_FILTERS = [
  '[{"key":"email"}]',
  '[{"key":"email","operator":"icontains"}]',
  '[{"key":"email","operator":"regex","value":null}]',
  '[{"key":"n","operator":"gt","value":"1e309"}]',
  '[{"key":"n","operator":"lt","value":1e309}]',
  '[{"key":"n","operator":"between","value":[1]}]',
  '[{"key":"d","operator":"is_date_after","value":"0000-01-01"}]',
  '[{"key":"email","value":[[["x"]]]}]',
  '[{"key":"email","value":{"a":1}}]',
  '[{"key":"email","value":"\\ud800"}]',
  '[{"type":"cohort","key":"id","value":"abc"}]',
  '[{"type":"cohort","key":"id","value":99999999999999999999}]',
  '[{"type":"behavioral","key":"x","value":"performed_event","explicit_datetime":"0000-01-01"}]',
  '[{"type":"behavioral","key":"x","value":"performed_event","time_value":1e300,"time_interval":"year"}]',
  '{"type":"OR","values":[{"type":"AND","values":[{"key":"a"}]}]}',
  `{"type":"OR","values":${'['.repeat(60)}${']'.repeat(60)}}`,
  '[null]',
  '[',
];

const MEAN_METRIC = { kind: 'ExperimentMetric', metric_type: 'mean' };

interface Fixtures {
  person: string;
  eventDefinition: string;
  experiment: string;
  holdout: string;
  savedMetric: string;
}
let fixtures: Fixtures;

/** Real objects for the routes with ids, so handlers run past "not found". */
async function createFixtures(): Promise<Fixtures> {
  const P = `/api/projects/${account.projectId}`;
  const post = async (path: string, body: unknown) => {
    const res = await call(api.baseUrl, 'POST', `${P}${path}`, { key: account.apiKey, body });
    expect(res.status, res.text).toBe(201);
    return String(res.body.id);
  };
  const signup = { event: 'signed up', distinct_id: 'robust-1', properties: { $set: { email: 'r@example.com' } } };
  await capture(api.baseUrl, account.projectToken, [signup]);
  const persons = await call(api.baseUrl, 'GET', `${P}/persons/`, { key: account.apiKey });
  const definitions = await call(api.baseUrl, 'GET', `${P}/event_definitions/`, { key: account.apiKey });
  return {
    person: persons.body.results[0].uuid,
    eventDefinition: definitions.body.results[0].id,
    experiment: await post('/experiments/', { name: 'Robust', feature_flag_key: 'robust' }),
    holdout: await post('/experiment_holdouts/', { name: 'Robust', filters: [{ rollout_percentage: 10 }] }),
    savedMetric: await post('/experiment_saved_metrics/', { name: 'Robust', query: MEAN_METRIC }),
  };
}

/** The fixture a route's id names; DELETE routes get an id that names nothing, so fixtures survive. */
function fixtureIdFor(route: RouteDefinition): string {
  if (route.method === 'DELETE') return '999999999';
  if (route.path.includes('/organizations/')) return account.organizationId;
  const byPath: [string, string][] = [
    ['/persons/:id', fixtures.person],
    ['/event_definitions/:id', fixtures.eventDefinition],
    ['/experiments/:id', fixtures.experiment],
    ['/experiment_holdouts/:id', fixtures.holdout],
    ['/experiment_saved_metrics/:id', fixtures.savedMetric],
  ];
  return byPath.find(([part]) => route.path.includes(part))?.[1] ?? '1';
}

/** Bodies that pass validation, so a hostile value in one field meets the handler, not "field required". */
const VALID_BODIES: Record<string, Record<string, unknown>> = {
  'POST /api/projects/:project_id/experiments': { name: 'Hostile', feature_flag_key: 'hostile' },
  'POST /api/projects/:project_id/experiment_holdouts': { name: 'Hostile', filters: [{ rollout_percentage: 5 }] },
  'POST /api/projects/:project_id/experiment_saved_metrics': { name: 'Hostile', query: MEAN_METRIC },
  'POST /api/projects/:project_id/persons/:id/update_property': { key: 'k', value: 'v' },
};
