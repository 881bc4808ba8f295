import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { responseMismatch } from '../../../api/http/validation.ts';
import { experimentSchema } from '../../../api/experiments/serializers.ts';
import { personRecordSchema } from '../../../api/persons/serializers.ts';
import { call, startApi, type TestApi } from '../../helpers.ts';
import { lintProblems, structuralProblems } from './lint.ts';

let api: TestApi;
let doc: any;
beforeAll(async () => {
  api = await startApi();
  const res = await call(api.baseUrl, 'GET', '/api/schema/');
  expect(res.status).toBe(200);
  doc = res.body;
});
afterAll(() => api.close());

/** The schema a component or inline schema resolves to. */
function deref(schema: any): any {
  if (!schema?.$ref) return schema;
  return deref(
    schema.$ref
      .slice(2)
      .split('/')
      .reduce((node: any, key: string) => node[key], doc),
  );
}
const responseSchema = (path: string, method: string, status: string) =>
  deref(doc.paths[path][method].responses[status].content['application/json'].schema);

/** Whether a schema takes any JSON value, or an object or list whose members may be any JSON value. */
function freeForm(schema: any): boolean {
  const types = [schema.type ?? []].flat();
  if (!types.length) return Object.keys(schema).every((k) => ['description', 'title'].includes(k));
  if (types.includes('object')) return schema.additionalProperties === true && !schema.properties;
  if (types.includes('array')) return freeForm(schema.items);
  return false;
}

// The Experiment fields of PostHog's experiment serializer, in the seed's order.
const SEED_EXPERIMENT_FIELDS = [
  'id',
  'name',
  'description',
  'start_date',
  'end_date',
  'feature_flag_key',
  'feature_flag',
  'holdout',
  'holdout_id',
  'exposure_cohort',
  'parameters',
  'secondary_metrics',
  'saved_metrics',
  'saved_metrics_ids',
  'filters',
  'archived',
  'deleted',
  'created_by',
  'created_at',
  'updated_at',
  'type',
  'exposure_criteria',
  'metrics',
  'metrics_secondary',
  'stats_config',
  'conclusion',
  'conclusion_comment',
  'primary_metrics_ordered_uuids',
  'secondary_metrics_ordered_uuids',
  'user_access_level',
];
// Fields the seed calls free-form: their members may be any JSON value.
const FREE_FORM = [
  'parameters',
  'secondary_metrics',
  'filters',
  'exposure_criteria',
  'metrics',
  'metrics_secondary',
  'stats_config',
  'primary_metrics_ordered_uuids',
  'secondary_metrics_ordered_uuids',
];

describe('GET /api/schema/ is a document a client generator can use', () => {
  it('is a valid OpenAPI 3.1 document (structure, and every schema a valid JSON Schema 2020-12)', () => {
    expect(structuralProblems(doc)).toEqual([]);
  });

  it('passes the lint: required properties defined, objects declare additionalProperties, $refs resolve, 2xx bodies', () => {
    expect(lintProblems(doc)).toEqual([]);
  });

  it('describes every field of the seed Experiment, free-form ones as any JSON value', () => {
    const experiment = responseSchema('/api/projects/{project_id}/experiments/{id}/', 'get', '200');
    expect(Object.keys(experiment.properties)).toEqual(expect.arrayContaining(SEED_EXPERIMENT_FIELDS));
    // Never null when read (a generated type gets one shape; PostHog's agent toolkit wants the key).
    expect(experiment.required).toContain('saved_metrics_ids');
    expect(experiment.properties.saved_metrics_ids.type).toBe('array');
    for (const method of ['post', 'patch', 'put']) {
      const path = `/api/projects/{project_id}/experiments/${method === 'post' ? '' : '{id}/'}`;
      const body = doc.paths[path][method].requestBody.content['application/json'].schema;
      expect(body.properties, method).toHaveProperty('saved_metrics_ids');
    }
    for (const field of FREE_FORM) expect(freeForm(experiment.properties[field]), field).toBe(true);
    expect(deref(experiment.properties.feature_flag).properties.filters.additionalProperties).toBe(true);
  });

  it('names each shared shape once: operations refer to components/schemas', () => {
    const list =
      doc.paths['/api/projects/{project_id}/experiments/'].get.responses['200'].content['application/json'].schema;
    expect(list.properties.results.items).toEqual({ $ref: '#/components/schemas/Experiment' });
    expect(doc.components.schemas.Experiment.properties.created_by).toEqual({ $ref: '#/components/schemas/UserBasic' });
  });

  it('lets a client read person.properties.email: person properties are an open object', () => {
    const person = responseSchema('/api/projects/{project_id}/persons/{id}/', 'get', '200');
    expect(person.properties.properties).toMatchObject({ type: 'object', additionalProperties: true });
    expect(person.additionalProperties).toBe(false);
  });
});

type Operation = { path: string; method: string; op: any };
const operations = (): Operation[] =>
  Object.entries(doc.paths).flatMap(([path, item]: [string, any]) =>
    Object.entries(item).map(([method, op]) => ({ path, method, op })),
  );
/** The JSON types a schema admits (its `type`, or those of its anyOf/oneOf branches). */
const typesOf = (schema: any): string[] =>
  [schema.type ?? [], ...[...(schema.anyOf ?? []), ...(schema.oneOf ?? [])].map(typesOf)].flat(2);

describe('what a strict generated client needs', () => {
  it('types each path id as the id the API answers, so `id: exp.id` type-checks', () => {
    const checked: string[] = [];
    for (const { path, method, op } of operations()) {
      const match = /^(.*\/)\{id\}\//.exec(path);
      if (!match) continue;
      const list = doc.paths[match[1]]?.get?.responses['200']?.content['application/json']?.schema;
      if (!list) continue;
      const answered = deref(deref(list).properties.results.items).properties.id;
      const param = op.parameters.find((p: any) => p.in === 'path' && p.name === 'id').schema;
      expect(typesOf(param), `${method} ${path}`).toEqual(expect.arrayContaining(typesOf(answered)));
      checked.push(`${method} ${path}`);
    }
    expect(checked).toEqual(
      expect.arrayContaining([
        'get /api/projects/{project_id}/experiments/{id}/',
        'put /api/projects/{project_id}/experiments/{id}/',
        'post /api/projects/{project_id}/experiments/{id}/duplicate/',
        'patch /api/projects/{project_id}/experiment_holdouts/{id}/',
        'get /api/projects/{project_id}/experiment_saved_metrics/{id}/',
        'patch /api/projects/{project_id}/persons/{id}/',
        'post /api/projects/{project_id}/persons/{id}/split/',
        'put /api/projects/{project_id}/event_definitions/{id}/',
      ]),
    );
    const experimentId = doc.paths['/api/projects/{project_id}/experiments/{id}/'].get.parameters[1].schema;
    expect(experimentId.type).toBe('integer');
    const personId = doc.paths['/api/projects/{project_id}/persons/{id}/'].get.parameters[1].schema;
    expect(typesOf(personId).sort()).toEqual(['integer', 'string']); // its id, or its uuid
  });

  it('declares text/csv beside JSON on every answer that format=csv turns into CSV', () => {
    const csvOperations = operations().filter(({ op }) =>
      op.parameters.some((p: any) => p.name === 'format' && p.schema.enum?.includes('csv')),
    );
    expect(csvOperations.length).toBeGreaterThanOrEqual(19);
    for (const { path, method, op } of csvOperations) {
      for (const [status, response] of Object.entries<any>(op.responses)) {
        if (!status.startsWith('2') || status === '204') continue;
        expect(Object.keys(response.content), `${method} ${path} ${status}`).toEqual(['application/json', 'text/csv']);
        expect(response.content['text/csv'].schema.type).toBe('string');
      }
    }
  });

  it('documents the error body with every error status, and 404 wherever a path names something', () => {
    const error = { $ref: '#/components/schemas/Error' };
    const bodyless: string[] = [];
    for (const { path, method, op } of operations()) {
      for (const [status, response] of Object.entries<any>(op.responses)) {
        if (Number(status) < 400) continue;
        if (!response.content) {
          bodyless.push(`${method} ${path} ${status}`);
          continue;
        }
        // Readiness documents its own 503 body; everything else answers PostHog's error body.
        if (path !== '/_ready') {
          expect(Object.keys(response.content), `${method} ${path} ${status}`).toEqual(['application/json']);
          expect(response.content['application/json'].schema, `${method} ${path} ${status}`).toEqual(error);
        }
      }
      if (op.security.length && path.includes('{')) expect(op.responses, `${method} ${path}`).toHaveProperty('404');
    }
    // The one error answered without a body: experiment DELETE (seed: 405, no body).
    expect(bodyless).toEqual(['delete /api/projects/{project_id}/experiments/{id}/ 405']);
    const persons = doc.paths['/api/projects/{project_id}/persons/{id}/'];
    expect(persons.get.responses['404'].content['application/json'].schema).toEqual(error);
    expect(persons.get.responses['400'].content['application/json'].schema).toEqual(error);
  });

  it('requires a request body only where the request cannot do without one', () => {
    const required = (path: string, method: string) =>
      doc.paths[`/api/projects/{project_id}/${path}`][method].requestBody.required;
    // The seed's query forms: key/value and $unset may come in the query instead.
    expect(required('persons/{id}/update_property/', 'post')).toBe(false);
    expect(required('persons/{id}/delete_property/', 'post')).toBe(false);
    expect(required('persons/bulk_delete/', 'post')).toBe(false);
    expect(required('persons/{id}/', 'patch')).toBe(true);
    expect(required('experiments/', 'post')).toBe(true);
    expect(required('experiments/{id}/', 'put')).toBe(true);
  });

  it('offers PUT (a full update) where PostHog does', () => {
    for (const path of ['experiments/{id}/', 'event_definitions/{id}/', 'persons/{id}/'])
      expect(doc.paths[`/api/projects/{project_id}/${path}`].put, path).toBeDefined();
    const put = doc.paths['/api/projects/{project_id}/experiments/{id}/'].put;
    expect(put.requestBody.content['application/json'].schema.required).toEqual(['name', 'feature_flag_key']);
    expect(put.responses['200'].content['application/json'].schema).toEqual({
      $ref: '#/components/schemas/Experiment',
    });
  });
});

describe('what the server demands and answers, documented', () => {
  it('a person update (PUT and PATCH) requires `properties`, which the server demands', async () => {
    for (const method of ['put', 'patch']) {
      const body =
        doc.paths['/api/projects/{project_id}/persons/{id}/'][method].requestBody.content['application/json'];
      expect(body.schema.required, method).toEqual(['properties']);
    }
  });

  it('/flags and /decide document the 400 and 401 they answer', async () => {
    const answered = {
      400: await call(api.baseUrl, 'POST', '/flags/', { body: [1] }),
      401: await call(api.baseUrl, 'POST', '/decide/', { body: { token: 'phc_nobody', distinct_id: 'd' } }),
    };
    expect(answered[400].status).toBe(400);
    expect(answered[401].status).toBe(401);
    for (const [path, method] of [
      ['/flags/', 'post'],
      ['/flags/', 'get'],
      ['/decide/', 'post'],
    ]) {
      const responses = doc.paths[path][method].responses;
      for (const status of ['400', '401'])
        expect(responses[status]?.content?.['application/json']?.schema, `${method} ${path} ${status}`).toEqual({
          $ref: '#/components/schemas/Error',
        });
    }
  });

  it('types a deletion request id one way everywhere: as the string the API answers', () => {
    const answered = doc.components.schemas.DeletionRequest.properties.id;
    expect(typesOf(answered)).toEqual(['string']);
    const seen: string[] = [];
    for (const { path, method, op } of operations()) {
      for (const param of op.parameters) {
        const names =
          (path.includes('/deletion_status/{id}/') && param.name === 'id') ||
          (path.includes('/deletion_receipts/{request_id}/') && param.name === 'request_id');
        if (param.in !== 'path' || !names) continue;
        expect(param.schema, `${method} ${path} ${param.name}`).toEqual(answered);
        seen.push(`${method} ${path}`);
      }
    }
    expect(seen).toHaveLength(5); // cancel (POST and DELETE), unsuppress, retry, a receipt
    const receipt = responseSchema('/api/projects/{project_id}/persons/deletion_receipts/{request_id}/', 'get', '200');
    expect(receipt.properties.request_id).toEqual(answered);
    expect(receipt.properties.receipt.properties.request_id).toEqual(answered);
  });
});

describe('the reference page’s samples and version', () => {
  // What each error status answers: its type and, where one code stands for the status, that code.
  const FITTING: Record<string, { type: string; code?: string }> = {
    400: { type: 'validation_error' },
    401: { type: 'authentication_error' },
    403: { type: 'authentication_error', code: 'permission_denied' },
    404: { type: 'invalid_request', code: 'not_found' },
    405: { type: 'invalid_request', code: 'method_not_allowed' },
    409: { type: 'invalid_request', code: 'conflict' },
    410: { type: 'invalid_request', code: 'gone' },
    413: { type: 'invalid_request', code: 'payload_too_large' },
    422: { type: 'invalid_request', code: 'idempotency_key_reused' },
    429: { type: 'throttled_error', code: 'throttled' },
    503: { type: 'server_error' },
  };

  it('shows each error status with a sample error body that fits it, not validation_error for all', () => {
    const statuses = new Set<string>();
    for (const { path, method, op } of operations()) {
      for (const [status, response] of Object.entries<any>(op.responses)) {
        const json = response.content?.['application/json'];
        if (Number(status) < 400 || json?.schema?.$ref !== '#/components/schemas/Error') continue;
        statuses.add(status);
        const where = `${method} ${path} ${status}`;
        expect(FITTING[status], where).toBeDefined();
        expect(json.example, where).toMatchObject(FITTING[status]);
        expect(responseMismatch(doc.components.schemas.Error, json.example), where).toBeNull();
      }
    }
    expect([...statuses].sort()).toEqual(Object.keys(FITTING).sort());
    // An SDK endpoint's 401 is about its project token, a management endpoint's about the personal API key.
    expect(doc.paths['/flags/'].post.responses['401'].content['application/json'].example.code).toBe('invalid_api_key');
    expect(
      doc.paths['/api/projects/{project_id}/persons/'].get.responses['401'].content['application/json'].example.code,
    ).toBe('not_authenticated');
  });

  it('says the version package.json says', () => {
    const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8'));
    expect(doc.info.version).toBe(pkg.version);
  });
});

describe('the response check (VALIDATE_RESPONSES=1) is strict about undeclared fields', () => {
  const person = {
    id: 1,
    name: 'a',
    distinct_ids: ['a'],
    properties: { email: 'a@example.com', nested: { any: [1] } },
    created_at: '2024-01-01T00:00:00Z',
    uuid: '0190a0a0-0000-7000-8000-000000000000',
    last_seen_at: null,
  };

  it('accepts a documented body, with anything inside a free-form member', () => {
    expect(responseMismatch(personRecordSchema, person)).toBeNull();
  });

  it('refuses a field the schema does not declare, at any depth', () => {
    expect(responseMismatch(personRecordSchema, { ...person, surprise: 1 })).toContain(
      'must NOT have additional properties',
    );
    const flag = {
      id: 1,
      team_id: 1,
      name: '',
      key: 'k',
      filters: {},
      deleted: false,
      active: true,
      ensure_experience_continuity: false,
      has_encrypted_payloads: false,
      version: 1,
      evaluation_runtime: 'all',
      evaluation_tags: [],
    };
    const partial = { ...experimentSchema, required: [] };
    expect(responseMismatch(partial, { feature_flag: flag })).toBeNull();
    expect(responseMismatch(partial, { feature_flag: { ...flag, surprise: true } })).toBe(
      '/feature_flag must NOT have additional properties',
    );
  });
});
