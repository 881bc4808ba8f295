// The floor for an HTTP read: a bare Koa handler running the benchmark's raw SQL through pg, with no
// authentication, validation or ORM. Started as its own process, like the API, by bench/persons.ts.
import Koa from 'koa';
import pg from 'pg';
import { config } from '../../shared/config.ts';

const pool = new pg.Pool({ connectionString: config.databaseUrl, max: config.databasePoolMax });
const app = new Koa();
app.use(async (ctx) => {
  if (ctx.path === '/_health') {
    ctx.body = { ok: true };
    return;
  }
  const match = /^\/projects\/(\d+)\/persons\/(\d+)\/?$/.exec(ctx.path);
  if (!match) return ctx.throw(404);
  const { rows } = await pool.query(
    `select p.*, array(select distinct_id from person_distinct_id d where d.person_id = p.id) as distinct_ids from person p where project_id = $1 and id = $2`,
    [Number(match[1]), match[2]],
  );
  if (!rows[0]) ctx.throw(404);
  ctx.body = rows[0];
});
app.listen(config.port, '127.0.0.1');
