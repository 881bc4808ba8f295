// The like-for-like baselines for the API's hot reads: the user's card's stack with nothing of ours —
// Koa, @koa/router and pg, with no authentication, validation or ORM — doing the same work the API must
// and sending the same bytes. Started as its own process, like the API, by bench/persons.ts and
// bench/flags.ts (which check that the answers are the API's, byte for byte); its routes have the API's paths.
//   BASELINE_PERSON_SQL: the API's GET-by-id statement with `{project_id}` and `{id}` where the API inlines
//     the path's values (bench/persons.ts captures it from the API's code), so PostgreSQL runs the same text.
//   BASELINE_FLAGS: JSON [{ token, projectId, contentType, answer (base64) }]: what the API answered one
//     /flags request of each project (bench/flags.ts captures it), sent for every request with that token.
import { Router } from '@koa/router';
import Koa from 'koa';
import pg from 'pg';
import { config } from '../../shared/platform/config.ts';

const pool = new pg.Pool({ connectionString: config.databaseUrl, max: config.databasePoolMax });
const app = new Koa();
const router = new Router();
router.get('/_health', (ctx) => {
  ctx.body = { ok: true };
});

const personSql =
  process.env.BASELINE_PERSON_SQL ??
  `select q.id::text as id, q.uuid, q.properties, q.is_identified, q.created_at,
          array(select d.distinct_id from person_distinct_id d where d.person_id = q.id order by d.id) as distinct_ids
     from (select p.* from person p where p.project_id = {project_id} and p.id = '{id}') q`;
// The API's person record (api/persons/serializers.ts personRecord), written out plainly.
const ANONYMOUS_ID = /^([a-z0-9]+-){4}([a-z0-9]+)$/;
const iso = (value: Date | string) => {
  const text = new Date(value).toISOString();
  const millis = text.slice(20, 23);
  return millis === '000' ? `${text.slice(0, 19)}Z` : `${text.slice(0, 19)}.${millis}000Z`;
};
router.get('/api/projects/:project_id/persons/:id', async (ctx) => {
  const { project_id: projectId, id } = ctx.params;
  if (!/^\d+$/.test(projectId) || !/^\d+$/.test(id)) return ctx.throw(404);
  const { rows } = await pool.query(personSql.replace('{project_id}', projectId).replace('{id}', id));
  const person = rows[0];
  if (!person) return ctx.throw(404);
  const distinctIds = [...person.distinct_ids].sort(
    (a: string, b: string) => Number(ANONYMOUS_ID.test(a)) - Number(ANONYMOUS_ID.test(b)),
  );
  const props = person.properties;
  ctx.body = {
    id: Number(person.id),
    name: String(props.email || props.name || props.username || (distinctIds[0] ?? person.id)),
    distinct_ids: distinctIds,
    properties: props,
    created_at: iso(person.created_at),
    uuid: person.uuid,
    last_seen_at: null,
  };
});

// /flags: the body read and parsed, the project found by its token in memory, its captured answer sent.
const flagProjects = new Map<string, { projectId: number; contentType: string; answer: Buffer }>();
for (const { token, projectId, contentType, answer } of JSON.parse(process.env.BASELINE_FLAGS ?? '[]'))
  flagProjects.set(token, { projectId, contentType, answer: Buffer.from(answer, 'base64') });
router.post('/flags', async (ctx) => {
  let body = '';
  for await (const chunk of ctx.req) body += chunk;
  const project = flagProjects.get(JSON.parse(body).token);
  if (!project) return ctx.throw(401);
  ctx.type = project.contentType;
  ctx.body = project.answer;
});
app.use(router.routes());
app.use(router.allowedMethods());
app.listen(config.port, '127.0.0.1');
