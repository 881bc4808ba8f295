// A realistic event set for benchmarks: persons (a tenth with a second, anonymous distinct id), and
// events over `days` days with a skewed activity per person and a web-app mix: pageviews,
// autocapture, identify, signups, carts, purchases (an `amount`, a few as strings, a few not
// numbers), and `$feature_flag_called` for an experiment's flag (`$feature_flag_response` stable per
// person, a few persons seeing both variants) and for other flags. Rows are made by the server
// (INSERT … SELECT over generate_series, in chunks through one pg connection): ~10M in minutes.
// Each chunk is the next slice of time, its rows in time order with time-ordered uuids (as SDKs send
// UUIDv7), as ingestion writes them: the table is laid out by time and the uuid and event-name indexes
// grow at their ends instead of taking every row at a random page.
//
//   node bench/generate.ts            generates BENCH_EVENTS (10,000,000) events, BENCH_PERSONS
//                                     (200,000) persons, BENCH_DAYS (90) days into a new project
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { progress } from './stats.ts';

export interface GenerateOptions {
  projectId: number;
  events: number;
  persons: number;
  days: number;
  /** The experiment's flag; its variants are `control` and `test`. */
  flagKey: string;
  /** The end of the generated period (exclusive); default now. */
  end?: Date;
  /** Rows per statement. */
  chunk?: number;
  /** Called after each chunk; default: a progress line. */
  onProgress?: (done: number, total: number, what: string) => void;
}

/** Share of each event name (the rest: $pageview). */
export const EVENT_MIX = {
  $autocapture: 0.15,
  $feature_flag_called: 0.1,
  $identify: 0.03,
  signup: 0.02,
  cart: 0.08,
  purchase: 0.04,
};

export async function generateEvents(
  pool: pg.Pool,
  options: GenerateOptions,
): Promise<{ events: number; persons: number; seconds: number }> {
  const { projectId, events, persons, days, flagKey } = options;
  const end = options.end ?? new Date();
  const chunk = options.chunk ?? 250_000;
  const count = (n: number) => n.toLocaleString('en');
  const report = options.onProgress ?? ((done, total, what) => progress(`  ${what}: ${count(done)} / ${count(total)}`));
  const started = Date.now();
  const client = await pool.connect();
  try {
    // Persons are numbered 0..persons-1 in this session's lookup table; events pick them by number.
    await client.query(`create temp table gen_person (i int primary key, id bigint, uuid uuid)`);
    for (let from = 0; from < persons; from += chunk) {
      const to = Math.min(persons, from + chunk);
      await client.query(
        `with made as (
           insert into person (uuid, project_id, properties, created_at)
           select gen_random_uuid(), $1,
                  jsonb_build_object('email', 'user' || g || '@example.com',
                                     'plan', case when g % 7 = 0 then 'pro' else 'free' end),
                  $3::timestamptz - make_interval(days => $4)
             from generate_series($2::int, $5::int - 1) g
           returning id, uuid, (properties->>'email') as email)
         insert into gen_person select split_part(substr(email, 5), '@', 1)::int, id, uuid from made`,
        [projectId, from, end, days, to],
      );
      report(to, persons, 'persons');
    }
    await client.query(
      `insert into person_distinct_id (project_id, person_id, distinct_id)
       select $1::int, id, 'u' || i from gen_person
       union all select $1::int, id, 'anon-' || i from gen_person where i % 10 = 0`,
      [projectId],
    );
    await client.query(`analyze gen_person`);
    if (!process.stdout.isTTY || options.onProgress) report(persons, persons, 'persons');
    else console.log('');

    const m = EVENT_MIX;
    // Cumulative thresholds of the mix, in the CASE order below.
    const shares = [m.$autocapture, m.$feature_flag_called, m.$identify, m.signup, m.cart, m.purchase];
    const cuts: number[] = [];
    for (const share of shares) cuts.push((cuts.at(-1) ?? 0) + share);
    await client.query(`select setseed(0.42)`);
    for (let from = 0; from < events; from += chunk) {
      const n = Math.min(chunk, events - from);
      await client.query(
        `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
         select (substr(s.ms, 1, 8) || '-' || substr(s.ms, 9, 4) || substr(gen_random_uuid()::text, 14))::uuid,
                $1, s.event,
                case when p.i % 10 = 0 and s.r3 < 0.3 then 'anon-' || p.i else 'u' || p.i end, p.uuid,
                case s.event
                  when '$pageview' then
                    jsonb_build_object('$current_url', 'https://shop.example.com/p/' || (s.r2 * 500)::int,
                                       '$browser', case when s.r3 < 0.6 then 'Chrome' else 'Safari' end)
                  when '$autocapture' then
                    jsonb_build_object('$event_type', 'click', '$el_text', 'Button ' || (s.r2 * 40)::int)
                  when '$feature_flag_called' then case when s.r2 < 0.6
                    -- the experiment's flag: a stable variant per person, a few persons see both
                    then jsonb_build_object('$feature_flag', $5::text, '$feature_flag_response',
                           case when (p.i % 2 = 0) <> (p.i % 100 = 7 and s.r3 < 0.5) then 'control' else 'test' end)
                    else jsonb_build_object('$feature_flag', 'other-flag-' || (s.r2 * 10)::int,
                                            '$feature_flag_response', true) end
                  when 'purchase' then jsonb_build_object('amount', case
                    when s.r2 < 0.02 then to_jsonb(round((s.r3 * 200)::numeric, 2)::text)
                    when s.r2 < 0.03 then to_jsonb('n/a'::text)
                    -- the test variant spends a little more
                    else to_jsonb(round((s.r3 * 200 * case when p.i % 2 = 0 then 1 else 1.05 end)::numeric, 2)) end)
                  else '{}'::jsonb end,
                s.ts, s.ts
           from (select case when r < $6 then '$autocapture' when r < $7 then '$feature_flag_called'
                             when r < $8 then '$identify' when r < $9 then 'signup' when r < $10 then 'cart'
                             when r < $11 then 'purchase' else '$pageview' end as event,
                        -- skewed: a few persons do many events
                        floor($4::int * power(random(), 2))::int as i, r2, r3, ts,
                        lpad(to_hex((extract(epoch from ts) * 1000)::bigint), 12, '0') as ms
                   from (select random() as r, random() as r2, random() as r3,
                                -- this chunk's slice of the period: rows from..from+n of all, spread evenly
                                $3::timestamptz - make_interval(days => $12::int)
                                  + make_interval(secs => ($13::int + random() * $2::int) / $14::float8
                                                          * 86400 * $12::int) as ts
                           from generate_series(1, $2::int)) g) s
           join gen_person p on p.i = s.i
          order by s.ts`,
        [projectId, n, end, persons, flagKey, ...cuts, days, from, events],
      );
      report(from + n, events, 'events');
    }
    if (process.stdout.isTTY && !options.onProgress) console.log('');
    await client.query(`drop table gen_person`);
    await client.query(`analyze person; analyze person_distinct_id; analyze event`);
  } finally {
    client.release();
  }
  return { events, persons, seconds: (Date.now() - started) / 1000 };
}

// Run as a program, also through a symbolic link (as scripts/manage.ts checks), not when imported.
if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { benchSetup } = await import('./harness.ts');
  const { orm, account, pool } = await benchSetup();
  const events = Number(process.env.BENCH_EVENTS ?? 10_000_000);
  const persons = Number(process.env.BENCH_PERSONS ?? 200_000);
  const days = Number(process.env.BENCH_DAYS ?? 90);
  console.log(`generate: ${events} events, ${persons} persons, ${days} days into project ${account.projectId}…`);
  const flagKey = 'bench-experiment';
  const r = await generateEvents(pool, { projectId: account.projectId, events, persons, days, flagKey });
  console.log(`  done in ${r.seconds.toFixed(0)} s (${Math.round(r.events / r.seconds)} events/s)`);
  await pool.end();
  await orm.close();
}
