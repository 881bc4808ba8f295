// `npm start`: everything on this machine. Ensures PostgreSQL and Redis run, creates and migrates
// the database, bootstraps a new install (printing its API key once), then runs the API and one worker.
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import {
  bootstrapInstall,
  createPersonalApiKey,
  deletePersonalApiKeysLabelled,
  installOwner,
  userCount,
} from '../shared/accounts/index.ts';
import { config } from '../shared/platform/config.ts';
import { ensureDatabase } from '../shared/platform/db/ensure-database.ts';
import { initOrm, migrate } from '../shared/platform/db/orm.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const services = spawnSync('bash', ['scripts/ensure-services.sh'], { cwd: root, stdio: 'inherit' });
if (services.status !== 0) process.exit(services.status ?? 1);

await ensureDatabase(config.databaseDirectUrl);
const orm = await initOrm();
let keyMessage: string;
try {
  await migrate(orm);
  const em = orm.em.fork();
  const count = await userCount(em);
  if (count === 0) {
    const install = await bootstrapInstall(em, { email: config.adminEmail });
    keyMessage =
      `Personal API key (all scopes, shown only now — keep it): ${install.apiKey}\n` +
      `Project ${install.project.id}, project API token for SDKs: ${install.project.apiToken}`;
  } else {
    // Only hashes are stored, so an earlier key cannot be shown again: replace the one key this
    // command owns (label "npm start") and print the new one. Every other key stays as it is.
    const owner = await installOwner(em);
    if (owner) {
      await deletePersonalApiKeysLabelled(em, owner.id, 'npm start');
      const { value } = await createPersonalApiKey(em, { userId: owner.id, label: 'npm start', scopes: ['*'] });
      keyMessage = `Personal API key for this run (all scopes; replaces the one printed by the previous \`npm start\`): ${value}`;
    } else {
      keyMessage = 'No active user: create one with `npm run bootstrap -- --force`.';
    }
  }
} finally {
  await orm.close();
}

const children = [
  spawn(process.execPath, ['api/main.ts'], {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, SERVICE_NAME: 'api' },
  }),
  spawn(process.execPath, ['worker/main.ts'], {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, SERVICE_NAME: 'worker' },
  }),
];
const base = `http://${config.host}:${config.port}`;
console.log(`\nAPI: ${base}   (try: curl -H "Authorization: Bearer <key>" ${base}/api/projects/)\n${keyMessage}\n`);

let exiting = false;
const stopAll = (signal: NodeJS.Signals) => {
  if (exiting) return;
  exiting = true;
  for (const child of children) child.kill(signal);
};
process.on('SIGINT', () => stopAll('SIGINT'));
process.on('SIGTERM', () => stopAll('SIGTERM'));
for (const child of children)
  child.on('exit', (code) => {
    stopAll('SIGTERM');
    process.exitCode = code ?? 0;
  });
