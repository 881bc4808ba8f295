// Seed: every person endpoint accepts `format` (csv or json). With format=csv an endpoint that answers
// data answers the rows of its JSON answer as CSV, flattened as the list export flattens them
// (`properties.<key>`, `distinct_ids.<n>`, sorted header), formula-looking strings guarded, numbers not.
import { describe, expect, it } from 'vitest';
import { buildOpenApiDocument } from '../../../api/openapi/document.ts';
import { allRoutes } from '../../../api/routes.ts';
import { sql } from '../../db.ts';
import { capture } from '../../fixtures.ts';
import { apiWithAccount, call, type CallResult } from '../../helpers.ts';

const { api, account } = await apiWithAccount();
const P = () => `/api/projects/${account.projectId}/persons`;
const day = (d: number, h = 12) => `2026-03-${String(d).padStart(2, '0')}T${String(h).padStart(2, '0')}:00:00Z`;
const tricky = { balance: -5, ratio: 0.25, code: '-7', note: '=HYPERLINK("x")', sum: '-1+2', at: '@SUM(A1)' };

// ada completes signup → activate → pay; bob only signs up and asks for help; the sp* persons are merged
// (two distinct ids each) for split; the del* persons are deleted.
await capture(api.baseUrl, account.projectToken, [
  {
    event: 'signup',
    distinct_id: 'ada',
    timestamp: day(2),
    properties: { $set: { email: 'ada@x.com', ...tricky, nested: { a: { b: 1 } }, tags: ['x', 'y'] } },
  },
  { event: 'activate', distinct_id: 'ada', timestamp: day(3) },
  { event: 'pay', distinct_id: 'ada', timestamp: day(4), properties: { $set: { plan: 'pro' } } },
  // `nested` is an object for ada, a string for bob: the export has both columns.
  {
    event: 'signup',
    distinct_id: 'bob',
    timestamp: day(2),
    properties: { $set: { email: 'bob@x.com', nested: 'flat' } },
  },
  { event: 'help', distinct_id: 'bob', timestamp: day(3) },
  ...['sp1', 'sp2'].flatMap((id) => [
    { event: 'e', distinct_id: id, timestamp: day(1) },
    { event: '$identify', distinct_id: id, timestamp: day(1, 13), properties: { $anon_distinct_id: `${id}-anon` } },
  ]),
  ...['del1', 'del2', 'del3', 'del4'].map((id) => ({ event: 'e', distinct_id: id, timestamp: day(1) })),
]);

const personOf = async (distinctId: string) =>
  (await call(api.baseUrl, 'GET', `${P()}/?distinct_id=${distinctId}`, { key: account.apiKey })).body.results[0];
const ada = await personOf('ada');
const [{ id: cohortId }] = await sql(
  api.orm,
  `insert into cohort (project_id, name, is_static, count) values (?, 'static', true, 1) returning id`,
  [account.projectId],
);
await sql(api.orm, `insert into cohort_person (cohort_id, person_id) values (?, ?)`, [cohortId, ada.id]);

/** RFC 4180: quoted fields hold commas, doubled quotes and line breaks; records end with CRLF. */
function parseCsv(text: string): string[][] {
  const records: string[][] = [];
  let record: string[] = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') field += text[i++];
      else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') {
      record.push(field);
      field = '';
    } else if (c === '\r' && text[i + 1] === '\n') {
      records.push([...record, field]);
      [record, field] = [[], ''];
      i++;
    } else field += c;
  }
  if (field !== '' || record.length) records.push([...record, field]);
  return records;
}

/** The list export's flattening, written out independently: nested keys joined with `.`, empty containers dropped. */
function flat(value: unknown, prefix = '', out: Record<string, unknown> = {}): Record<string, unknown> {
  if (value !== null && typeof value === 'object') {
    for (const [key, inner] of Object.entries(value)) flat(inner, prefix ? `${prefix}.${key}` : key, out);
  } else out[prefix] = value;
  return out;
}

/** What a cell holds once parsed: numbers and booleans as written, formula-looking strings behind a `'`. */
function cell(value: unknown): string {
  if (value === null || value === undefined) return '';
  if (typeof value !== 'string') return String(value);
  const plainNumber = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(value);
  return /^[=+\-@\t\r]/.test(value) && !plainNumber ? `'${value}` : value;
}

/** Rows of a JSON answer: a `{results}` envelope's results, else the object itself. */
const rowsOf = (body: any): unknown[] => (Array.isArray(body?.results) ? body.results : [body]);
// The persons of the funnel, correlation and lifecycle envelope {results: [{people, count}]} are its rows.
const peopleOf = (body: any): unknown[] => body.results.flatMap((r: any) => r.people);

/**
 * The CSV answer holds exactly `rows`, flattened: the sorted header of every flattened key, one record per row.
 * Columns matching `volatile` must be there but may differ in value (a repeated request moves a timestamp).
 */
function expectCsvOf(res: CallResult, rows: unknown[], volatile = /^$/) {
  expect(res.status, res.text).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/csv/);
  const flats = rows.map((row) => flat(row));
  const columns = [...new Set(flats.flatMap((row) => Object.keys(row)))].sort();
  const [header, ...records] = parseCsv(res.text);
  expect(header).toEqual(columns);
  expect(records.length).toBeGreaterThan(0);
  expect(records).toHaveLength(flats.length);
  records.forEach((record, i) => {
    expect(record).toHaveLength(columns.length);
    columns.forEach((column, j) => {
      if (!volatile.test(column)) expect(record[j], `row ${i} ${column}`).toBe(cell(flats[i][column]));
    });
  });
  return { header, records };
}

const json = async (method: string, path: string, body?: unknown) => {
  const res = await call(api.baseUrl, method, path, { key: account.apiKey, body });
  expect(res.status, res.text).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  return res.body;
};
const csv = (method: string, path: string, body?: unknown) =>
  call(api.baseUrl, method, `${path}${path.includes('?') ? '&' : '?'}format=csv`, { key: account.apiKey, body });
/** The same read as JSON and as CSV. */
async function sameRead(method: string, path: string, body?: unknown, rows = rowsOf) {
  const answer = await json(method, path, body);
  return expectCsvOf(await csv(method, path, body), rows(answer));
}

const funnelEvents = [
  { id: 'signup', order: 0 },
  { id: 'activate', order: 1 },
  { id: 'pay', order: 2 },
];
const funnelQuery = `events=${encodeURIComponent(JSON.stringify(funnelEvents))}&date_from=2026-03-01&date_to=2026-03-10`;
const correlationQuery =
  `${funnelQuery}&funnel_correlation_person_entity=${encodeURIComponent('{"id":"help","type":"events"}')}` +
  '&funnel_correlation_person_converted=false';

describe('format=csv on the nineteen person endpoints', () => {
  it('list: the export holds the rows of the JSON list, nested properties in columns of their own', async () => {
    const { header } = await sameRead('GET', `${P()}/`);
    expect(header).toEqual(expect.arrayContaining(['properties.nested', 'properties.nested.a.b', 'properties.tags.1']));
  });

  it('retrieve: the JSON answer’s columns and values, plus the list export’s person columns', async () => {
    const answer = await json('GET', `${P()}/${ada.id}/`);
    const res = await csv('GET', `${P()}/${ada.id}/`);
    expect(res.headers.get('content-type')).toMatch(/^text\/csv/);
    const [header, record, ...rest] = parseCsv(res.text);
    expect(rest).toEqual([]);
    for (const [column, value] of Object.entries(flat(answer))) {
      expect(record[header.indexOf(column)], column).toBe(cell(value));
    }
  });

  it('PATCH', async () => {
    const body = { properties: { score: -3, formula: '@SUM(A1)' } };
    const answer = await json('PATCH', `${P()}/${ada.id}/`, body);
    const { header, records } = expectCsvOf(await csv('PATCH', `${P()}/${ada.id}/`, body), [answer]);
    expect(records[0][header.indexOf('properties.score')]).toBe('-3');
    expect(records[0][header.indexOf('properties.formula')]).toBe("'@SUM(A1)");
  });

  it('update_property', async () => {
    const path = `${P()}/${ada.id}/update_property/?key=level&value=-2`;
    expectCsvOf(await csv('POST', path), [await json('POST', path)]);
  });

  it('delete_property', async () => {
    const path = `${P()}/${ada.id}/delete_property/?$unset=plan`;
    const { header } = expectCsvOf(await csv('POST', path), [await json('POST', path)]);
    expect(header).toContain('success');
  });

  it('activity of a person and of all persons (after the changes above)', async () => {
    const { header } = await sameRead('GET', `${P()}/${ada.id}/activity/`);
    expect(header).toContain('detail.changes.0.field');
    await sameRead('GET', `${P()}/activity/`);
  });

  it('properties_timeline: one row per point', async () => {
    await sameRead('GET', `${P()}/${ada.id}/properties_timeline/`, undefined, (body) => body.points);
  });

  it('cohorts', async () => {
    await sameRead('GET', `${P()}/cohorts/?person_id=${ada.uuid}`);
  });

  it('funnel GET and POST: one row per person', async () => {
    const { records } = await sameRead('GET', `${P()}/funnel/?${funnelQuery}&funnel_step=1`, undefined, peopleOf);
    expect(records).toHaveLength(2);
    const body = { events: funnelEvents, funnel_step: 3, date_from: '2026-03-01', date_to: '2026-03-10' };
    await sameRead('POST', `${P()}/funnel/`, body, peopleOf);
  });

  it('funnel correlation GET and POST', async () => {
    await sameRead('GET', `${P()}/funnel/correlation/?${correlationQuery}`, undefined, peopleOf);
    await sameRead('POST', `${P()}/funnel/correlation/?${correlationQuery}`, { events: funnelEvents }, peopleOf);
  });

  it('lifecycle', async () => {
    await sameRead('GET', `${P()}/lifecycle/?target_date=2026-03-02&lifecycle_type=new`, undefined, peopleOf);
  });

  it('split', async () => {
    const answer = await json('POST', `${P()}/${(await personOf('sp1')).id}/split/`, {});
    expect(answer.split_distinct_ids).toHaveLength(1);
    // The same split of the other merged person answers the same, with its own ids.
    const expected = JSON.parse(JSON.stringify(answer).replaceAll('sp1', 'sp2'));
    expectCsvOf(await csv('POST', `${P()}/${(await personOf('sp2')).id}/split/`, {}), [expected]);
  });

  it('delete_events and delete_recordings (a repeat moves the cutoff)', async () => {
    const volatile = /^deletion_requests\.\d+\.(cutoff|created_at)$/;
    for (const action of ['delete_events', 'delete_recordings']) {
      const path = `${P()}/${(await personOf('bob')).id}/${action}/`;
      const answer = await json('POST', path);
      const { header } = expectCsvOf(await csv('POST', path), [answer], volatile);
      expect(header).toContain('deletion_requests.0.status');
    }
  });

  it('bulk_delete', async () => {
    const answer = await json('POST', `${P()}/bulk_delete/`, { distinct_ids: ['del1'], delete_events: true });
    expect(answer.persons_deleted).toBe(1);
    const volatile = /^deletion_requests\.\d+\.(id|person_uuid|cutoff|created_at)$/;
    const res = await csv('POST', `${P()}/bulk_delete/`, { distinct_ids: ['del2'], delete_events: true });
    expectCsvOf(res, [answer], volatile);
    expect(await personOf('del2')).toBeUndefined();
  });

  it('DELETE answers no data: 204 with no body, format=csv accepted', async () => {
    const res = await csv('DELETE', `${P()}/${(await personOf('del3')).id}/`);
    expect(res.status).toBe(204);
    expect(res.text).toBe('');
    expect(await personOf('del3')).toBeUndefined();
  });
});

describe('pages', () => {
  it('a CSV page keeps its next page in a Link header, a CSV URL that answers the next rows', async () => {
    const res = await csv('GET', `${P()}/activity/?limit=1`);
    const next = /^<([^>]+)>; rel="next"$/.exec(res.headers.get('link') ?? '')?.[1];
    expect(next).toBeDefined();
    expect(new URL(next!).searchParams.get('format')).toBe('csv');
    const { pathname, search } = new URL(next!);
    const page2 = await call(api.baseUrl, 'GET', pathname + search, { key: account.apiKey });
    expectCsvOf(page2, rowsOf(await json('GET', `${P()}/activity/?limit=1&page=2`)));
    const funnel = await csv('GET', `${P()}/funnel/?${funnelQuery}&funnel_step=1&limit=1`);
    expect(parseCsv(funnel.text)).toHaveLength(2);
    expect(funnel.headers.get('link')).toMatch(/offset=1.*; rel="next"$/);
    expect((await csv('GET', `${P()}/cohorts/?person_id=${ada.uuid}`)).headers.get('link')).toBeNull();
  });
});

describe('formula guard', () => {
  it('leaves numbers and number-looking strings alone, guards strings a spreadsheet would run', async () => {
    for (const path of [`${P()}/?distinct_id=ada`, `${P()}/${ada.id}/update_property/?key=k&value=1`]) {
      const res = await csv(path.includes('update_property') ? 'POST' : 'GET', path);
      const [header, record] = parseCsv(res.text);
      const value = (key: string) => record[header.indexOf(`properties.${key}`)];
      expect(value('balance'), path).toBe('-5'); // a JSON number
      expect(value('ratio')).toBe('0.25');
      expect(value('code')).toBe('-7'); // a string holding a plain number: a spreadsheet reads a constant
      expect(value('note')).toBe(`'=HYPERLINK("x")`);
      expect(value('sum')).toBe("'-1+2"); // starts like a number but is a formula
      expect(value('at')).toBe("'@SUM(A1)");
      expect(value('nested.a.b')).toBe('1');
    }
  });
});

describe('format is declared where it is honoured', () => {
  const document = buildOpenApiDocument(allRoutes) as any;
  const personPaths = Object.keys(document.paths).filter(
    // Deletion status, receipts, the read-access log and access exports are ours, not the seed's nineteen
    // (receipts' CSV: test/shared/deletions/deletion-receipts.test.ts; the access log's:
    // test/api/persons/access-log.test.ts; an access export answers an archive, not rows).
    (p) =>
      p.includes('/persons') &&
      !p.includes('/deletion_status') &&
      !p.includes('/deletion_receipts') &&
      !p.includes('/access_log') &&
      !p.includes('/access_exports'),
  );

  it('documents format on each of the nineteen person operations', () => {
    const operations = personPaths.flatMap((p) =>
      Object.entries(document.paths[p])
        .filter(([method]) => !(p.endsWith('/persons/') && method === 'post')) // creating a person: 405 by design
        .filter(([method]) => method !== 'put') // PUT /persons/:id is PATCH's update under another method
        .map(([method, op]: [string, any]) => [`${method} ${p}`, op.parameters.find((q: any) => q.name === 'format')]),
    );
    expect(operations).toHaveLength(19);
    for (const [name, format] of operations) expect(format?.schema?.enum, name).toEqual(['json', 'csv']);
  });

  it('refuses an unknown format, and routes beyond the nineteen still answer JSON', async () => {
    const body = { properties: {} };
    const bad = await call(api.baseUrl, 'PATCH', `${P()}/${ada.id}/?format=xml`, { key: account.apiKey, body });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ code: 'invalid_choice', attr: 'format' });
    const status = await call(api.baseUrl, 'GET', `${P()}/deletion_status/?format=csv`, { key: account.apiKey });
    expect(status.status).toBe(200);
    expect(status.headers.get('content-type')).toMatch(/^application\/json/);
  });
});
