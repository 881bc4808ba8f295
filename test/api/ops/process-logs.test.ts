// What the processes write when something around them is wrong: a taken port ends the API with one
// line naming the port and its variable; a worker without Redis backs off its logging instead of
// writing several lines a second; every log line says which process and host wrote it.
import { createServer, type Server } from 'node:net';
import { hostname } from 'node:os';
import { afterAll, describe, expect, it } from 'vitest';
import { eventually, uniqueRedisPrefix } from '../../helpers.ts';
import { freePort, startNode, startWorkerProcess, type ServiceProcess } from '../../services.ts';

const started: ServiceProcess[] = [];
let holder: Server | undefined;
afterAll(async () => {
  await Promise.all(started.map((p) => p.stop()));
  holder?.close();
});

const logLines = (output: string) => output.split('\n').filter((line) => line.startsWith('{'));

describe('process logs', () => {
  it('a taken port ends the API with one line naming the port and PORT, no stack trace', async () => {
    const port = await freePort();
    holder = createServer();
    await new Promise<void>((resolve) => holder!.listen(port, '127.0.0.1', resolve));
    const api = startNode('api/main.ts', { HOST: '127.0.0.1', PORT: String(port), LOG_LEVEL: 'info' });
    started.push(api);
    const code = await new Promise<number | null>((resolve) => api.child.once('exit', resolve));
    expect(code).toBe(1);
    const output = api.output();
    expect(output).not.toMatch(/\n\s+at /); // no stack frames
    const fatal = output.split('\n').filter((line) => line.includes(String(port)) && /taken|in use/.test(line));
    expect(fatal, output).toHaveLength(1);
    expect(fatal[0]).toContain('PORT');
  });

  it('a worker without Redis logs its connection errors a few times a minute, each line with pid and host', async () => {
    const closed = await freePort(); // nobody listens there
    const worker = startWorkerProcess({
      REDIS_URL: `redis://127.0.0.1:${closed}`,
      REDIS_PREFIX: uniqueRedisPrefix(),
      LOG_LEVEL: 'info',
    });
    started.push(worker);
    // The first connection error is logged at once.
    await eventually(
      async () => (logLines(worker.output()).some((l) => /redis|connection/i.test(l)) ? true : null),
      20_000,
    );
    const before = logLines(worker.output()).length;
    // A rate, not an absence: ten seconds of an outage (today's main wrote about 43 lines in them).
    await new Promise((resolve) => setTimeout(resolve, 10_000));
    const during = logLines(worker.output()).slice(before);
    expect(during.length, during.join('\n')).toBeLessThanOrEqual(4);
    for (const line of logLines(worker.output())) {
      const entry = JSON.parse(line);
      expect(entry.pid).toBe(worker.child.pid);
      expect(entry.hostname).toBe(hostname());
    }
  }, 60_000);
});
