// Loaded into a server process with `--import` by bench/ingestion.ts: appends every statement the
// process sends through `pg` (both copies: MikroORM's and the top-level one) to BENCH_RECORD_FILE, one
// JSON line each: the connection (numbered per process), the text, and the parameters as sent. The
// bench replays what one request sent, so its baseline is the API's own statements, not a guess.
import { appendFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const file = process.env.BENCH_RECORD_FILE;
if (!file) throw new Error('record-queries: BENCH_RECORD_FILE is not set');

const require = createRequire(import.meta.url);
const copies = new Set<{ prototype: { query: (...args: unknown[]) => unknown } }>();
copies.add(require('pg').Client);
copies.add(createRequire(require.resolve('@mikro-orm/postgresql'))('pg').Client);

const connections = new WeakMap<object, number>();
let nextConnection = 0;
for (const Client of copies) {
  const query = Client.prototype.query;
  Client.prototype.query = function (this: object, ...args: unknown[]) {
    if (!connections.has(this)) connections.set(this, ++nextConnection);
    const [config, values] = args;
    const text = typeof config === 'string' ? config : (config as { text: string }).text;
    const params = typeof config === 'string' ? values : ((config as { values?: unknown }).values ?? values);
    const line = { connection: connections.get(this), text, values: Array.isArray(params) ? params : null };
    appendFileSync(file, `${JSON.stringify(line)}\n`);
    return query.apply(this, args);
  };
}
