// The floor for an HTTP read: the user's card's stack with nothing of ours — Koa, @koa/router and the
// benchmark's raw SQL through pg, with no authentication, validation or ORM. Started as its own process,
// like the API, by bench/persons.ts and bench/flags.ts; its routes have the API's paths.
import { Router } from '@koa/router';
import Koa from 'koa';
import pg from 'pg';
import { config } from '../../shared/config.ts';

const pool = new pg.Pool({ connectionString: config.databaseUrl, max: config.databasePoolMax });
const app = new Koa();
const router = new Router();
router.get('/_health', (ctx) => {
  ctx.body = { ok: true };
});
router.get('/api/projects/:project_id/persons/:id', async (ctx) => {
  const { project_id: projectId, id } = ctx.params;
  if (!/^\d+$/.test(projectId) || !/^\d+$/.test(id)) return ctx.throw(404);
  // The statement the API sends for a GET by id (shared/persons/store.ts findPerson), sent as the API sends
  // it: values inlined (the path's digits), so PostgreSQL runs the same text through the same protocol.
  const { rows } = await pool.query(
    `select q.id::text as id, q.uuid, q.properties, q.is_identified, q.created_at,
            array(select d.distinct_id from person_distinct_id d where d.person_id = q.id order by d.id) as distinct_ids
       from (select p.* from person p where p.project_id = ${projectId} and p.id = '${id}') q `,
  );
  if (!rows[0]) ctx.throw(404);
  ctx.body = rows[0];
});
// The HTTP floor for /flags (bench/flags.ts): the body read and parsed, a constant answer, no database.
router.post('/flags', async (ctx) => {
  let body = '';
  for await (const chunk of ctx.req) body += chunk;
  JSON.parse(body);
  ctx.body = { flags: {}, errorsWhileComputingFlags: false };
});
app.use(router.routes());
app.use(router.allowedMethods());
app.listen(config.port, '127.0.0.1');
