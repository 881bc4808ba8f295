import { spawn, type ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, eventually, startApi, type TestApi } from '../../helpers.ts';
import { freePort } from '../../services.ts';

let api: TestApi;
let ownRedis: ChildProcess | undefined;

beforeAll(async () => {
  api = await startApi();
});
afterAll(async () => {
  ownRedis?.kill('SIGKILL');
  await api.close();
});

describe('health and readiness', () => {
  it('reports liveness and readiness when PostgreSQL and Redis answer', async () => {
    expect((await call(api.baseUrl, 'GET', '/_health')).body).toEqual({ status: 'ok' });
    // A process that has just started is not ready until its Redis connection is up (seen in a full run:
    // 503 with redis "unavailable" 30 ms after start): wait for that, then every check must be ok.
    const ready = await eventually(async () => {
      const answer = await call(api.baseUrl, 'GET', '/_ready/');
      return answer.status === 200 ? answer : null;
    });
    expect(ready.body.checks).toEqual({
      postgres: 'ok',
      redis: 'ok',
      queues: 'ok',
      throttle: 'disabled',
      auth_cache: 'disabled',
      migrations: 'ok',
    });
  });

  it('fails readiness with 503 when its Redis is stopped', async () => {
    // A Redis server of this test's own, so stopping it disturbs no other test file.
    const port = await freePort();
    ownRedis = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      { stdio: 'ignore' },
    );
    const app = await startApi((config) => {
      config.redisUrl = `redis://127.0.0.1:${port}`;
    });
    try {
      let ready: Awaited<ReturnType<typeof call>> | undefined;
      for (let i = 0; i < 50; i++) {
        ready = await call(app.baseUrl, 'GET', '/_ready');
        if (ready.status === 200) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(ready!.status).toBe(200);
      ownRedis.kill('SIGKILL');
      await new Promise((r) => ownRedis!.once('exit', r));
      const down = await call(app.baseUrl, 'GET', '/_ready');
      expect(down.status).toBe(503);
      expect(down.body).toMatchObject({
        status: 'unavailable',
        checks: {
          postgres: 'ok',
          redis: 'unavailable',
          queues: 'unavailable',
          throttle: 'disabled',
          auth_cache: 'disabled',
          migrations: 'ok',
        },
      });
    } finally {
      await app.close();
    }
  });
});
