// Body parsing and schema validation, exercised through a route declared only for this test.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../../../api/app.ts';
import { allRoutes } from '../../../api/routes.ts';
import { defineRoute } from '../../../api/http/routes.ts';
import { call, createAccount, serveApp, startApi, type TestAccount, type TestApi } from '../../helpers.ts';
import type { Server } from 'node:http';

let api: TestApi;
let account: TestAccount;
let server: Server;
let baseUrl: string;

const echo = defineRoute({
  method: 'POST',
  path: '/api/projects/:project_id/test_echo',
  summary: 'test only',
  scopes: ['project:write'],
  body: {
    type: 'object',
    additionalProperties: false,
    required: ['name'],
    properties: {
      name: { type: 'string', minLength: 1, maxLength: 10 },
      count: { type: 'integer', minimum: 0 },
      kind: { enum: ['a', 'b'] },
      when: { type: 'string', format: 'date-time' },
      nested: { type: 'object', properties: { items: { type: 'array', items: { type: 'integer' } } } },
    },
  },
  handler: (ctx) => {
    ctx.body = ctx.state.body;
  },
});

const liar = defineRoute({
  method: 'GET',
  path: '/api/projects/:project_id/test_liar',
  summary: 'test only: answers something other than it documents',
  scopes: [],
  responses: {
    200: { description: 'x', schema: { type: 'object', required: ['id'], properties: { id: { type: 'integer' } } } },
  },
  handler: (ctx) => {
    ctx.body = { id: 'not-an-integer' };
  },
});

beforeAll(async () => {
  api = await startApi((config) => {
    config.maxJsonBodyBytes = 2048;
  });
  account = await createAccount(api.orm);
  ({ server, baseUrl } = await serveApp(createApp(api.deps, [...allRoutes, echo, liar])));
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  await api.close();
});

const post = (body: unknown, headers?: Record<string, string>) =>
  call(baseUrl, 'POST', `/api/projects/${account.projectId}/test_echo/`, { key: account.apiKey, body, headers });

describe('request bodies', () => {
  it('answers malformed JSON with 400 parse_error, not 500', async () => {
    const res = await post('{"name": ');
    expect(res.status).toBe(400);
    expect(res.body.type).toBe('invalid_request');
    expect(res.body.code).toBe('parse_error');
    expect(res.body.detail).toMatch(/^JSON parse error - /);
    expect(res.body.attr).toBeNull();
  });

  it('answers an oversize body with 413 in the error shape', async () => {
    const res = await post({ name: 'x'.repeat(5000) });
    expect(res.status).toBe(413);
    expect(res.body).toEqual({
      type: 'invalid_request',
      code: 'payload_too_large',
      detail: 'Request body is larger than the limit of 2048 bytes.',
      attr: null,
    });
  });

  it('answers a non-JSON content type with 415', async () => {
    const res = await post('name=x', { 'content-type': 'application/x-www-form-urlencoded' });
    expect(res.status).toBe(415);
    expect(res.body.code).toBe('unsupported_media_type');
  });
});

describe('validation errors use DRF codes and attr paths', () => {
  const cases: [unknown, Record<string, unknown>][] = [
    [{}, { code: 'required', detail: 'This field is required.', attr: 'name' }],
    [{ name: null }, { code: 'null', detail: 'This field may not be null.', attr: 'name' }],
    [{ name: '' }, { code: 'blank', detail: 'This field may not be blank.', attr: 'name' }],
    [
      { name: 'x'.repeat(11) },
      { code: 'max_length', detail: 'Ensure this field has no more than 10 characters.', attr: 'name' },
    ],
    [
      { name: 'x', kind: 'c' },
      { code: 'invalid_choice', detail: '"c" is not a valid choice.', attr: 'kind' },
    ],
    [
      { name: 'x', count: 'many' },
      { code: 'invalid_input', detail: 'A valid integer is required.', attr: 'count' },
    ],
    [
      { name: 'x', nested: { items: [1, 'two'] } },
      { code: 'invalid_input', detail: 'A valid integer is required.', attr: 'nested__items__1' },
    ],
    [
      { name: 'x', when: 'yesterday' },
      { code: 'invalid_input', attr: 'when' },
    ],
    [
      { name: 'x', surprise: 1 },
      { code: 'invalid_input', attr: 'surprise' },
    ],
    [[1, 2], { code: 'not_a_dict', attr: null }],
  ];
  it.each(cases)('%j', async (body, expected) => {
    const res = await post(body);
    expect(res.status).toBe(400);
    expect(res.body.type).toBe('validation_error');
    expect(res.body).toMatchObject(expected);
  });

  it('rejects NUL characters in bodies and query strings as DRF does', async () => {
    const res = await post({ name: 'a\u0000b' });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      type: 'validation_error',
      code: 'null_characters_not_allowed',
      detail: 'Null characters are not allowed.',
      attr: 'name',
    });
    const query = await call(baseUrl, 'GET', `/api/projects/${account.projectId}/persons/?email=%00`, {
      key: account.apiKey,
    });
    expect(query.status).toBe(400);
    expect(query.body.attr).toBe('email');
  });

  it('passes valid bodies through', async () => {
    const res = await post({ name: 'ok', count: 3, kind: 'a', nested: { items: [1] } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ name: 'ok', count: 3, kind: 'a', nested: { items: [1] } });
  });
});

describe('response contract checking (tests run with VALIDATE_RESPONSES=1)', () => {
  it('turns a response that contradicts its documented schema into a failure', async () => {
    const res = await call(baseUrl, 'GET', `/api/projects/${account.projectId}/test_liar/`, { key: account.apiKey });
    expect(res.status).toBe(500);
    expect(res.body.code).toBe('response_contract');
    expect(res.body.detail).toContain('/id must be integer');
  });
});
