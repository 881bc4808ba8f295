// A retention run that removes a whole month: the partition drop against deleting the same rows.
// BENCH_RETENTION_ROWS (1,000,000) events of one project in one past month (its own partition), a
// project keeping 30 days. Run 1: the month holds only that project's rows, so the run drops it.
// Run 2: the same rows again, plus one row of a project that keeps everything, so the month must stay
// and the run deletes the rows by range in chunks (DELETION_CHUNK_SIZE). Prints both runs' times, the
// drop statement's own time (lock, check, drop) and the count the run's record needs beforehand.
import { config } from '../shared/platform/config.ts';
import { runRetention } from '../shared/retention/index.ts';
import { createAccount } from '../test/helpers.ts';
import { benchSetup } from './harness.ts';
import { progress, timed } from './stats.ts';

const ROWS = Number(process.env.BENCH_RETENTION_ROWS ?? 1_000_000);
const MONTH = { name: 'event_y1982m03', from: '1982-03-01T00:00:00Z', to: '1982-04-01T00:00:00Z' };

const { orm, account, pool } = await benchSetup();
const keeper = await createAccount(orm);
await pool.query(`update project set event_retention_days = 30 where id = $1`, [account.projectId]);

async function fillMonth(withKeeperRow: boolean) {
  await pool.query(`drop table if exists ${MONTH.name}`);
  await pool.query(`delete from event_default where timestamp >= $1 and timestamp < $2`, [MONTH.from, MONTH.to]);
  await pool.query(
    `create table ${MONTH.name} partition of event for values from ('${MONTH.from}') to ('${MONTH.to}')`,
  );
  progress(`retention: inserting ${ROWS} events into ${MONTH.name}…`);
  await pool.query(
    `insert into event (uuid, project_id, event, distinct_id, properties, timestamp)
     select gen_random_uuid(), $1, 'pageview', 'user-' || (i % 5000), '{"$current_url":"https://example.com/a"}',
            $2::timestamptz + (i * interval '1 second' * (2678400.0 / $3))
       from generate_series(0, $3 - 1) i`,
    [account.projectId, MONTH.from, ROWS],
  );
  if (withKeeperRow)
    await pool.query(
      `insert into event (uuid, project_id, event, distinct_id, timestamp) values (gen_random_uuid(), $1, 'x', 'k', '1982-03-15')`,
      [keeper.projectId],
    );
  await pool.query(`vacuum analyze ${MONTH.name}`);
}

const run = async () => {
  let result: Awaited<ReturnType<typeof runRetention>> | undefined;
  const ms = await timed(async () => {
    result = await runRetention(orm.em.fork(), new Date(), {
      chunk: config.deletion.chunkSize,
      lockTimeoutMs: 2000,
      lockAttempts: 10,
    });
  });
  const mine = result!.projects.find((p) => p.projectId === account.projectId)!;
  return { ms, events: mine.events, dropMs: result!.dropMs[MONTH.name], dropped: mine.partitionsDropped };
};

await fillMonth(false);
const countMs = await timed(() => pool.query(`select project_id, count(*) from ${MONTH.name} group by project_id`));
const drop = await run();
await fillMonth(true);
const del = await run();
// The deleted rows' space comes back only with a vacuum (a dropped partition's files are gone at once).
const vacuumMs = await timed(() => pool.query(`vacuum ${MONTH.name}`));
await pool.query(`drop table if exists ${MONTH.name}`);
await pool.query(`update project set event_retention_days = null where id = $1`, [account.projectId]);

console.log(`\nretention of one month, ${ROWS} events:`);
console.log('run | events removed | run ms | event table locked ms | detached table dropped ms | vacuum after ms');
console.log(
  `partition drop (${drop.dropped.join(',')}) | ${drop.events} | ${drop.ms.toFixed(0)} | ${drop.dropMs?.locked.toFixed(1)} | ${drop.dropMs?.drop.toFixed(1)} | -`,
);
console.log(`row delete (month kept) | ${del.events} | ${del.ms.toFixed(0)} | - | - | ${vacuumMs.toFixed(0)}`);
console.log(`ratio delete/drop run: ${(del.ms / drop.ms).toFixed(1)}x`);
console.log(`(the per-project count the drop's record needs, done before the drop: ${countMs.toFixed(0)} ms)`);
await pool.end();
await orm.close();
