// `npm run -s architecture [-- --json]`: counts how far the tree keeps its layering rules
// (../shared/ENGINEERING.md "Layout"; issue #44), from the import statements and the statements that
// write tables. Exits 0 whatever it finds: it measures, the tests decide (test/architecture.test.ts).
//   api_inside_imports     api/ or worker/ files importing a feature's file other than its index.ts
//   worker_sql_files       worker/ files that build SQL (Kysely, rows()/run(), em.execute, raw statements)
//   api_sql_files          api/ files that build SQL
//   cross_feature_inside   imports of another feature's non-index file from inside a feature
//   shared_folder_cycles   strongly connected groups of shared/ folders (imports of entities aside)
//   platform_feature_imports  imports of a feature from the platform (shared/platform/)
//   tables_written_from_several_modules  tables that INSERT/UPDATE/DELETE statements in more than one folder write
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const FEATURES = [
  'access-exports',
  'accounts',
  'cohorts',
  'deletions',
  'event-definitions',
  'events',
  'experiments',
  'flags',
  'ingestion',
  'persons',
  'retention',
  'scrubs',
  'tracking-plan',
  'webhooks',
];

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(root, dir))) {
    const path = join(dir, name);
    if (statSync(join(root, path)).isDirectory()) out.push(...filesUnder(path));
    else if (name.endsWith('.ts')) out.push(path);
  }
  return out;
}

interface Import {
  from: string;
  to: string;
  typeOnly: boolean;
}

const IMPORT = /^(?:import|export)\s+(type\s+)?[^'";]*?from\s+'(\.[^']+)'/gms;

function importsOf(file: string): Import[] {
  const text = readFileSync(join(root, file), 'utf8');
  const out: Import[] = [];
  for (const match of text.matchAll(IMPORT)) {
    out.push({ from: file, to: relative(root, resolve(root, dirname(file), match[2])), typeOnly: Boolean(match[1]) });
  }
  return out;
}

/** The feature a shared/ file belongs to, or null (the platform). */
export function featureOf(file: string): string | null {
  const [top, folder] = file.split('/');
  return top === 'shared' && FEATURES.includes(folder) ? folder : null;
}

/** The folder of a shared/ file as a node of the folder graph: shared/<folder> or shared (top-level files). */
const sharedFolder = (file: string) => {
  const parts = file.split('/');
  return parts.length > 2 ? `${parts[0]}/${parts[1]}` : parts[0];
};

// Building SQL: Kysely (db(em), getKysely, the kysely package), shared/platform/db/sql.ts's statement helpers,
// or the driver's own execute.
const SQL_BUILDING = [
  /from 'kysely'/,
  /import\s*\{[^}]*\b(?:db|rows|run|prepared)\b[^}]*\}\s*from\s*'[^']*db\/(?:kysely|sql)\.ts'/s,
  /\bgetKysely\(/,
  /\bem\.(?:execute|getConnection)\(/,
];
const buildsSql = (file: string) => {
  const text = code(readFileSync(join(root, file), 'utf8'));
  return SQL_BUILDING.some((pattern) => pattern.test(text));
};

const WRITES = [
  /\b(?:insertInto|updateTable|deleteFrom|mergeInto)\(\s*'([a-z_]+)'/g,
  /\b(?:insert\s+into|delete\s+from)\s+([a-z_]+)\b(?=[\s(])/gi,
  /\bupdate\s+([a-z_]+)\s+(?:\w+\s+)?set\b/gi,
];
/** The text without comments (line comments and block comment lines), so prose is not read as SQL. */
const code = (text: string) =>
  text
    .split('\n')
    .filter((line) => !/^\s*(?:\/\/|\*|\/\*)/.test(line))
    .map((line) => line.replace(/\s\/\/ .*$/, ''))
    .join('\n');

function tablesWritten(file: string): Set<string> {
  const text = code(readFileSync(join(root, file), 'utf8'));
  const out = new Set<string>();
  for (const pattern of WRITES) {
    for (const match of text.matchAll(pattern)) out.add(match[1].toLowerCase());
  }
  return out;
}

/** Strongly connected components of more than one node (Tarjan). */
function cycles(graph: Map<string, Set<string>>): string[][] {
  let index = 0;
  const indexOf = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string) => {
    indexOf.set(v, index);
    low.set(v, index++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!indexOf.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, indexOf.get(w)!));
    }
    if (low.get(v) === indexOf.get(v)) {
      const group: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        group.push(w);
      } while (w !== v);
      if (group.length > 1) out.push(group.sort());
    }
  };
  for (const v of graph.keys()) if (!indexOf.has(v)) visit(v);
  return out;
}

export function measure() {
  const api = filesUnder('api');
  const worker = filesUnder('worker');
  const shared = filesUnder('shared').filter((f) => !f.startsWith('shared/platform/db/migrations/'));
  const isInside = (to: string) => featureOf(to) !== null && !to.endsWith('/index.ts');

  const apiInside = [...api, ...worker].flatMap(importsOf).filter((i) => isInside(i.to));
  const crossInside = shared
    .flatMap(importsOf)
    .filter((i) => featureOf(i.from) !== null && isInside(i.to) && featureOf(i.to) !== featureOf(i.from));
  const platformFeature = shared
    .flatMap(importsOf)
    .filter((i) => featureOf(i.from) === null && featureOf(i.to) !== null);

  const graph = new Map<string, Set<string>>();
  for (const i of shared.flatMap(importsOf)) {
    if (!i.to.startsWith('shared/') || i.to.startsWith('shared/platform/entities/')) continue;
    const [a, b] = [sharedFolder(i.from), sharedFolder(i.to)];
    if (a === b) continue;
    if (!graph.has(a)) graph.set(a, new Set());
    graph.get(a)!.add(b);
  }

  const writers = new Map<string, Set<string>>();
  for (const file of [...api, ...worker, ...shared, ...filesUnder('scripts')]) {
    const folder = file.startsWith('shared/') ? sharedFolder(file) : file.split('/')[0];
    for (const table of tablesWritten(file)) {
      if (!writers.has(table)) writers.set(table, new Set());
      writers.get(table)!.add(folder);
    }
  }
  const several = [...writers].filter(([, folders]) => folders.size > 1).sort(([a], [b]) => (a < b ? -1 : 1));

  return {
    api_inside_imports: apiInside.map((i) => `${i.from} → ${i.to}`),
    worker_sql_files: worker.filter(buildsSql),
    api_sql_files: api.filter(buildsSql),
    cross_feature_inside: crossInside.map((i) => `${i.from} → ${i.to}`),
    shared_folder_cycles: cycles(graph),
    platform_feature_imports: platformFeature.map((i) => `${i.from} → ${i.to}`),
    tables_written_from_several_modules: several.map(
      ([table, folders]) => `${table}: ${[...folders].sort().join(', ')}`,
    ),
  };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const result = measure();
  if (process.argv.includes('--json')) console.log(JSON.stringify(result, null, 2));
  else {
    for (const [name, list] of Object.entries(result)) {
      console.log(`${name}: ${list.length}`);
      for (const item of list.slice(0, process.argv.includes('--all') ? undefined : 8))
        console.log(`  ${Array.isArray(item) ? item.join(' ⇄ ') : item}`);
      if (!process.argv.includes('--all') && list.length > 8) console.log(`  … ${list.length - 8} more (--all)`);
    }
  }
}
