// Reading a Prometheus text exposition in tests: its samples, and promtool's verdict on it.
import { spawnSync } from 'node:child_process';
import { call, type CallResult } from '../../helpers.ts';

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export function samples(text: string): Sample[] {
  const found: Sample[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    const pairs = (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g);
    for (const [, key, value] of pairs) labels[key] = value;
    found.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return found;
}

/** The samples named `name` whose labels include `labels`. */
export const matching = (text: string, name: string, labels: Record<string, string> = {}) =>
  samples(text).filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));

/** The value of the one sample named `name` with `labels`; throws unless exactly one matches. */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number {
  const found = matching(text, name, labels);
  if (found.length !== 1) throw new Error(`${found.length} samples of ${name} ${JSON.stringify(labels)}`);
  return found[0].value;
}

/** `promtool check metrics` on the text: its exit status and everything it printed (problems, warnings). */
export function promtool(text: string): { status: number | null; output: string } {
  const result = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (result.error) throw result.error;
  return { status: result.status, output: `${result.stdout}${result.stderr}`.trim() };
}

export const scrape = (baseUrl: string, token: string, path = '/metrics'): Promise<CallResult> =>
  call(baseUrl, 'GET', path, { headers: { authorization: `Bearer ${token}` } });
