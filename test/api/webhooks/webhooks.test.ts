// A project's webhooks over the API: the secret shown once, http(s) URLs only, PostHog's 400 body for bad
// input, other projects' webhooks 404, scopes. Delivery itself is tested in test/shared/webhooks/webhooks.test.ts.
import { describe, expect, it } from 'vitest';
import { apiWithAccount, call, createAccount, createKey, startApi } from '../../helpers.ts';

const { api, account } = await apiWithAccount();
const P = `/api/projects/${account.projectId}/webhooks`;
const as = (method: string, path: string, body?: unknown, key = account.apiKey) =>
  call(api.baseUrl, method, path, { key, body });

describe('webhooks', () => {
  it('create shows the secret once; read, list, update and delete', async () => {
    const created = await as('POST', `${P}/`, { url: 'https://hooks.example.com/x', event_types: ['deletion.failed'] });
    expect(created.status, created.text).toBe(201);
    expect(created.body).toMatchObject({
      url: 'https://hooks.example.com/x',
      event_types: ['deletion.failed'],
      enabled: true,
    });
    const { id, secret } = created.body;
    expect(secret).toMatch(/^whsec_[0-9a-f]{64}$/);
    expect(created.body.secret_mask).toBe(`whsec_...${secret.slice(-4)}`);

    const got = await as('GET', `${P}/${id}/`);
    expect(got.status).toBe(200);
    expect(got.body).not.toHaveProperty('secret');
    expect(got.body.secret_mask).toBe(created.body.secret_mask);
    const list = await as('GET', `${P}/`);
    expect(list.body).toMatchObject({ count: 1, next: null, previous: null });
    expect(list.body.results[0]).not.toHaveProperty('secret');

    const patched = await as('PATCH', `${P}/${id}/`, { enabled: false, event_types: ['deletion.queued'] });
    expect(patched.status, patched.text).toBe(200);
    expect(patched.body).toMatchObject({ enabled: false, event_types: ['deletion.queued'] });
    expect(patched.body).not.toHaveProperty('secret');
    const given = 'my-own-secret-0123456789';
    const rotated = await as('PATCH', `${P}/${id}/`, { secret: given });
    expect(rotated.body.secret).toBe(given);

    const deliveries = await as('GET', `${P}/${id}/deliveries/`);
    expect(deliveries.body).toEqual({ count: 0, next: null, previous: null, results: [] });

    expect((await as('DELETE', `${P}/${id}/`)).status).toBe(204);
    expect((await as('GET', `${P}/${id}/`)).status).toBe(404);
  });

  it('a given secret is kept; every event type unless given', async () => {
    const created = await as('POST', `${P}/`, { url: 'http://hooks.example.com:9/hook', secret: 'a-secret-of-my-own' });
    expect(created.status, created.text).toBe(201);
    expect(created.body.secret).toBe('a-secret-of-my-own');
    expect(created.body.event_types).toHaveLength(11); // every type, scrub.* and experiment.guardrail_tripped included
  });

  it.each([
    ['http://127.0.0.1:8080/hook', '127.0.0.1'],
    ['http://10.1.2.3/hook', '10.1.2.3'],
    ['http://169.254.169.254/latest/meta-data/', '169.254.169.254'],
    ['http://[::1]:8080/hook', '::1'],
    ['https://[::ffff:127.0.0.1]/hook', '::ffff:7f00:1'],
    ['http://0.0.0.0/', '0.0.0.0'],
    ['http://192.168.1.1/', '192.168.1.1'],
    ['http://[fd00::1]/', 'fd00::1'],
    ['http://[fe80::1]/', 'fe80::1'],
    ['http://localhost:8080/hook', '127.0.0.1'], // a name that resolves to loopback
    // IPv6 forms that carry an IPv4 address: IPv4-compatible, NAT64, 6to4, IPv4-mapped.
    ['http://[::127.0.0.1]/', '::7f00:1'],
    ['http://[64:ff9b::127.0.0.1]/', '64:ff9b::7f00:1'],
    ['http://[2002:7f00:1::]/', '2002:7f00:1::'],
    ['http://[::ffff:10.0.0.1]/', '::ffff:a00:1'],
    ['http://[64:ff9b::169.254.169.254]/', '64:ff9b::a9fe:a9fe'],
    // IANA special-purpose IPv4: shared (CGNAT), IETF protocol assignments, benchmarking, documentation,
    // multicast, reserved, broadcast.
    ['http://100.64.0.1/', '100.64.0.1'],
    ['http://100.127.255.254/', '100.127.255.254'],
    ['http://192.0.0.192/', '192.0.0.192'],
    ['http://198.18.0.1/', '198.18.0.1'],
    ['http://198.19.255.1/', '198.19.255.1'],
    ['http://192.0.2.10/', '192.0.2.10'],
    ['http://224.0.0.1/', '224.0.0.1'],
    ['http://239.255.255.250/', '239.255.255.250'],
    ['http://240.0.0.1/', '240.0.0.1'],
    ['http://255.255.255.255/', '255.255.255.255'],
    ['http://0x7f.1/', '127.0.0.1'], // the URL parser's spelling of 127.0.0.1
    // IPv6 special-purpose: multicast, documentation, Teredo, discard-only, NAT64 local use.
    ['http://[ff02::1]/', 'ff02::1'],
    ['http://[2001:db8::1]/', '2001:db8::1'],
    ['http://[2001::1]/', '2001::1'],
    ['http://[100::1]/', '100::1'],
    ['http://[64:ff9b:1::1]/', '64:ff9b:1::1'],
  ])('a URL to a private address (%s) is refused by default: 400 with PostHog’s body', async (url, address) => {
    const res = await as('POST', `${P}/`, { url });
    expect(res.status, res.text).toBe(400);
    expect(res.body).toMatchObject({ type: 'validation_error', code: 'invalid_input', attr: 'url' });
    expect(res.body.detail).toContain(address);
    const created = await as('POST', `${P}/`, { url: 'https://ok.example.com/' });
    const patched = await as('PATCH', `${P}/${created.body.id}/`, { url });
    expect(patched.status).toBe(400);
    expect(patched.body).toMatchObject({ type: 'validation_error', code: 'invalid_input', attr: 'url' });
    expect((await as('DELETE', `${P}/${created.body.id}/`)).status).toBe(204); // under WEBHOOK_MAX_PER_PROJECT
  });

  it.each([
    'http://8.8.8.8/hook',
    'https://1.1.1.1/',
    'http://93.184.215.14:8080/',
    'http://100.128.0.1/', // just past the shared 100.64.0.0/10
    'http://198.20.0.1/', // just past benchmarking 198.18.0.0/15
    'http://[2606:4700:4700::1111]/',
    'http://[2a00:1450:4001:80b::200e]/',
    'http://[64:ff9b::8.8.8.8]/', // NAT64 of a public address
    'http://[2002:808:808::1]/', // 6to4 of a public address
    'http://[::ffff:8.8.8.8]/',
  ])('a URL to a public address (%s) is accepted', async (url) => {
    const res = await as('POST', `${P}/`, { url });
    expect(res.status, res.text).toBe(201);
    expect((await as('DELETE', `${P}/${res.body.id}/`)).status).toBe(204);
  });

  it('a project has at most WEBHOOK_MAX_PER_PROJECT (10) webhooks: one more is 400 with PostHog’s body', async () => {
    const owner = await createAccount(api.orm);
    const path = `/api/projects/${owner.projectId}/webhooks/`;
    const create = () =>
      call(api.baseUrl, 'POST', path, { key: owner.apiKey, body: { url: 'https://hooks.example.com/' } });
    // Made at the same time: exactly 10 are created.
    const answers = await Promise.all(Array.from({ length: 14 }, create));
    expect(answers.map((r) => r.status).sort()).toEqual([...Array(10).fill(201), ...Array(4).fill(400)]);
    const refused = answers.find((r) => r.status === 400)!;
    expect(refused.body).toEqual({
      type: 'validation_error',
      code: 'max_count',
      detail: 'A project may have at most 10 webhooks: delete one to create another.',
      attr: null,
    });
    expect((await call(api.baseUrl, 'GET', path, { key: owner.apiKey })).body.count).toBe(10);
    // Another project is not affected; a deleted webhook makes room.
    const mine = await as('POST', `${P}/`, { url: 'https://ok.example.com/' });
    expect(mine.status).toBe(201);
    expect((await as('DELETE', `${P}/${mine.body.id}/`)).status).toBe(204);
    const id = answers.find((r) => r.status === 201)!.body.id;
    expect((await call(api.baseUrl, 'DELETE', `${path}${id}/`, { key: owner.apiKey })).status).toBe(204);
    expect((await create()).status).toBe(201);
    expect((await create()).status).toBe(400);
  });

  it('WEBHOOK_ALLOW_PRIVATE_URLS=true lets an operator post inside the network', async () => {
    const open = await startApi((config) => {
      config.webhooks.allowPrivateUrls = true;
    });
    try {
      for (const url of ['http://127.0.0.1:8080/hook', 'http://localhost/hook', 'http://[::1]/', 'http://10.0.0.5/']) {
        const res = await call(open.baseUrl, 'POST', `${P}/`, { key: account.apiKey, body: { url } });
        expect(res.status, res.text).toBe(201);
      }
    } finally {
      await open.close();
    }
  });

  it.each([
    ['ftp://example.com/x', 'Enter a valid URL: only http and https URLs are accepted.'],
    ['javascript:alert(1)', 'Enter a valid URL.'],
    ['file:///etc/passwd', 'Enter a valid URL.'],
    ['not a url', 'Enter a valid URL.'],
    ['/relative/path', 'Enter a valid URL.'],
    ['https://user:pass@example.com/', 'Enter a valid URL: a user name or password in the URL is not accepted.'],
  ])('a URL %s is 400 with PostHog’s body', async (url, detail) => {
    const res = await as('POST', `${P}/`, { url });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ type: 'validation_error', code: 'invalid', detail, attr: 'url' });
    // An update too.
    const created = await as('POST', `${P}/`, { url: 'https://ok.example.com/' });
    const patched = await as('PATCH', `${P}/${created.body.id}/`, { url });
    expect(patched.status).toBe(400);
    expect(patched.body.attr).toBe('url');
    expect((await as('DELETE', `${P}/${created.body.id}/`)).status).toBe(204); // under WEBHOOK_MAX_PER_PROJECT
  });

  it('other bad input is 400 with PostHog’s body', async () => {
    const cases: [unknown, string | null][] = [
      [{}, 'url'],
      [{ url: `https://example.com/${'a'.repeat(2100)}` }, 'url'],
      [{ url: 'https://example.com/', event_types: ['person.created'] }, 'event_types__0'],
      [{ url: 'https://example.com/', event_types: [] }, 'event_types'],
      [{ url: 'https://example.com/', secret: 'short' }, 'secret'],
      [{ url: 'https://example.com/', secret: 'has spaces in the secret' }, 'secret'],
      // whsec_ announces a Standard Webhooks secret: base64 must follow.
      [{ url: 'https://example.com/', secret: 'whsec_not-base64-at-all!' }, 'secret'],
      [{ url: 'https://example.com/', enabled: 'yes' }, 'enabled'],
      [{ url: 42 }, 'url'],
    ];
    for (const [body, attr] of cases) {
      const res = await as('POST', `${P}/`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.type).toBe('validation_error');
      expect(typeof res.body.detail).toBe('string');
      expect(res.body.attr, JSON.stringify(body)).toBe(attr);
    }
    expect((await as('POST', `${P}/`, '{"url":')).status).toBe(400);
  });

  it("another project's webhook is 404, and ids that are not numbers too", async () => {
    const other = await createAccount(api.orm);
    const theirs = await call(api.baseUrl, 'POST', `/api/projects/${other.projectId}/webhooks/`, {
      key: other.apiKey,
      body: { url: 'https://theirs.example.com/' },
    });
    expect(theirs.status).toBe(201);
    for (const [method, path] of [
      ['GET', `${P}/${theirs.body.id}/`],
      ['PATCH', `${P}/${theirs.body.id}/`],
      ['DELETE', `${P}/${theirs.body.id}/`],
      ['GET', `${P}/${theirs.body.id}/deliveries/`],
      ['GET', `${P}/abc/`],
      ['GET', `${P}/99999999999999/deliveries/`],
    ]) {
      const res = await as(method, path, method === 'PATCH' ? { enabled: false } : undefined);
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.body).toEqual({ type: 'invalid_request', code: 'not_found', detail: 'Not found.', attr: null });
    }
    // Still there, unchanged.
    const still = await call(api.baseUrl, 'GET', `/api/projects/${other.projectId}/webhooks/${theirs.body.id}/`, {
      key: other.apiKey,
    });
    expect(still.body.enabled).toBe(true);
    expect((await as('GET', `${P}/`)).body.results.map((w: any) => w.id)).not.toContain(theirs.body.id);
  });

  it('project:read lists, project:write changes', async () => {
    const reader = await createKey(api.orm, account.userId, { scopes: ['project:read'] });
    expect((await as('GET', `${P}/`, undefined, reader)).status).toBe(200);
    const refused = await as('POST', `${P}/`, { url: 'https://example.com/' }, reader);
    expect(refused.status).toBe(403);
    expect(refused.body.detail).toBe("API key missing required scope 'project:write'");
  });
});
