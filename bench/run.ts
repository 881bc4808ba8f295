// `npm run bench [-- name …]`: runs every benchmark in bench/ (or the named ones) one after another,
// each in its own process so one cannot skew the next. Figures are printed by each benchmark.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const dir = fileURLToPath(new URL('.', import.meta.url));
const wanted = process.argv.slice(2);
const all = readdirSync(dir)
  .filter((f) => f.endsWith('.ts') && !['run.ts', 'stats.ts', 'harness.ts', 'generate.ts'].includes(f))
  .map((f) => f.replace(/\.ts$/, ''))
  .sort();
const selected = wanted.length ? all.filter((name) => wanted.includes(name)) : all;
if (selected.length === 0) {
  console.error(`no benchmark named ${wanted.join(', ')}; available: ${all.join(', ')}`);
  process.exit(1);
}
let failed = 0;
for (const name of selected) {
  console.log(`\n=== bench/${name}.ts`);
  const run = spawnSync(process.execPath, [`${dir}${name}.ts`], { stdio: 'inherit', env: process.env });
  if (run.status !== 0) failed++;
}
process.exit(failed ? 1 : 0);
