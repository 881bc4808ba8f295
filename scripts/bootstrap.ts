// `npm run bootstrap [-- --email you@example.com]`: creates the first organization, project, user
// and an all-scopes personal API key, and prints the key once. Refuses when users already exist
// unless --force is given; with --if-new it then only migrates and succeeds (Docker's one-shot).
import { parseArgs } from 'node:util';
import { bootstrapInstall, userCount } from '../shared/accounts/index.ts';
import { initOrm, migrate } from '../shared/platform/db/orm.ts';

const { values } = parseArgs({
  options: {
    email: { type: 'string', default: 'admin@example.com' },
    force: { type: 'boolean', default: false },
    'if-new': { type: 'boolean', default: false },
  },
});

const orm = await initOrm();
try {
  await migrate(orm);
  const em = orm.em.fork();
  const count = await userCount(em);
  if (count > 0 && values['if-new']) {
    console.log('This install already has users: migrated, nothing else to do.');
  } else if (count > 0 && !values.force) {
    console.error('This install already has users; pass --force to create another organization and key.');
    process.exitCode = 1;
  } else {
    const result = await bootstrapInstall(em, { email: values.email! });
    console.log(
      `Project ${result.project.id} ("${result.project.name}"), project API token ${result.project.apiToken}`,
    );
    console.log(`Personal API key (shown once, all scopes): ${result.apiKey}`);
  }
} finally {
  await orm.close();
}
