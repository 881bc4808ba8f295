import { createClient, type ClickHouseClientConfigOptions } from '@clickhouse/client';
import { createChdbConnection } from 'chdb/connection';
import { readFileSync } from 'node:fs';
const client = createClient({ connection: createChdbConnection({ path: '/work/scratch/chdb' }) as unknown as ClickHouseClientConfigOptions['connection'] });
const params = JSON.parse(readFileSync('/tmp/pv.json', 'utf8'));
const files = process.argv.slice(2);
for (let rep = 0; rep < 3; rep++) {
  const out: string[] = [];
  for (const f of files) {
    const t = performance.now();
    const r = await (await client.query({ query: readFileSync(f, 'utf8'), query_params: params, format: 'JSONCompactEachRow' })).json();
    out.push(`${f.replace('/tmp/', '')} ${(performance.now() - t).toFixed(0)}ms ${JSON.stringify(r).slice(0, 40)}`);
  }
  console.log(out.join(' | '));
}
await client.close();
