// Property filters → SQL, on their own: the fragments' text and parameters, the refusals, and (in the last
// describe only) what a few fragments select when PostgreSQL runs them over a VALUES list of jsonb rows.
import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { config } from '../../../shared/platform/config.ts';
import { containsPattern } from '../../../shared/platform/db/sql.ts';
import {
  FilterError,
  PROPERTY_OPERATORS,
  type PropertyFilterItem,
  propertyConditionSql,
  propertyFiltersSql,
  type SqlFragment,
} from '../../../shared/platform/db/property-filters.ts';

const COL = 'p.properties';
const TEXT = `(${COL}->>?)`;
const jsonNumberCheck = (comparison: string) =>
  `case when jsonb_typeof(${COL}->?) = 'number' then (${COL}->?)::numeric ${comparison} else true end`;
const cond = (item: PropertyFilterItem) => propertyConditionSql(item, COL);
const placeholders = (sql: string) => sql.split('?').length - 1;

describe('propertyConditionSql: one fragment per operator', () => {
  it('exact: GIN-index candidates ANDed in front of the containment-or-text test', () => {
    expect(cond({ key: 'k', operator: 'exact', value: 'v' })).toEqual({
      sql: `((${COL} @> ?::jsonb) and (${COL} @> ?::jsonb or ${TEXT} = ?))`,
      params: ['{"k":"v"}', '{"k":"v"}', 'k', 'v'],
    });
  });

  it('exact is the default operator (missing or null)', () => {
    const exact = cond({ key: 'k', operator: 'exact', value: 'v' });
    expect(cond({ key: 'k', value: 'v' })).toEqual(exact);
    expect(cond({ key: 'k', operator: null, value: 'v' })).toEqual(exact);
  });

  it('exact with a numeric string also looks for the number (and a number for the string)', () => {
    const expected = {
      sql: `((${COL} @> ?::jsonb or ${COL} @> ?::jsonb) and (${COL} @> ?::jsonb or ${TEXT} = ?))`,
    };
    expect(cond({ key: 'k', value: '12' })).toEqual({
      ...expected,
      params: ['{"k":"12"}', '{"k":12}', '{"k":"12"}', 'k', '12'],
    });
    expect(cond({ key: 'k', value: 12 })).toEqual({
      ...expected,
      params: ['{"k":12}', '{"k":"12"}', '{"k":12}', 'k', '12'],
    });
  });

  it('exact with a long number keeps every digit in the candidate', () => {
    const digits = '123456789012345678901234567890';
    const { params } = cond({ key: 'k', value: digits });
    expect(params).toContain(`{"k":${digits}}`);
  });

  it('exact with a list: any of the values', () => {
    expect(cond({ key: 'k', value: ['a', 'b'] })).toEqual({
      sql:
        `((${COL} @> ?::jsonb or ${COL} @> ?::jsonb) and ` +
        `(${COL} @> ?::jsonb or ${TEXT} = ? or ${COL} @> ?::jsonb or ${TEXT} = ?))`,
      params: ['{"k":"a"}', '{"k":"b"}', '{"k":"a"}', 'k', 'a', '{"k":"b"}', 'k', 'b'],
    });
  });

  it('in is exact; not_in is is_not', () => {
    expect(cond({ key: 'k', operator: 'in', value: ['a', 1] })).toEqual(cond({ key: 'k', value: ['a', 1] }));
    expect(cond({ key: 'k', operator: 'not_in', value: ['a', 1] })).toEqual(
      cond({ key: 'k', operator: 'is_not', value: ['a', 1] }),
    );
  });

  it('is_not: the negation, with a missing key counting as "not"', () => {
    expect(cond({ key: 'k', operator: 'is_not', value: true })).toEqual({
      sql: `not coalesce((${COL} @> ?::jsonb or ${TEXT} = ?), false)`,
      params: ['{"k":true}', 'k', 'true'],
    });
  });

  it('icontains: an escaped ILIKE pattern', () => {
    expect(cond({ key: 'k', operator: 'icontains', value: '50%_off\\' })).toEqual({
      sql: `(${TEXT} ilike ? and ${TEXT} is not null)`,
      params: ['k', '%50\\%\\_off\\\\%', 'k'],
    });
  });

  it('not_icontains', () => {
    expect(cond({ key: 'k', operator: 'not_icontains', value: 7 })).toEqual({
      sql: `coalesce(not (${TEXT} ilike ?), true)`,
      params: ['k', '%7%'],
    });
  });

  it('regex and not_regex: the pattern as given; regex a plain `~` once the pattern is known to compile', () => {
    expect(cond({ key: 'k', operator: 'regex', value: '^a.*(' })).toEqual({
      sql: `(case when regex_matches('', ?) is not null then (${TEXT} ~ ? and ${TEXT} is not null) else false end)`,
      params: ['^a.*(', 'k', '^a.*(', 'k'],
    });
    expect(cond({ key: 'k', operator: 'not_regex', value: '^a' })).toEqual({
      sql: `coalesce(not regex_matches(${TEXT}, ?), true)`,
      params: ['k', '^a'],
    });
  });

  it.each([
    ['gt', '>'],
    ['gte', '>='],
    ['lt', '<'],
    ['lte', '<='],
  ])(
    '%s: a numeric comparison an index on the number can serve, behind a JSON-number check; the value a number parameter',
    (operator, sign) => {
      expect(cond({ key: 'k', operator, value: '3.5' })).toEqual({
        sql: `(${jsonNumberCheck(`${sign} ?`)} and (try_numeric(${TEXT}) ${sign} ? and (try_numeric(${TEXT}) ${sign} ?) is not null))`,
        params: ['k', 'k', 3.5, 'k', 3.5, 'k', 3.5],
      });
    },
  );

  it('between and not_between: two numbers', () => {
    expect(cond({ key: 'k', operator: 'between', value: [1, '5'] })).toEqual({
      sql: `(${jsonNumberCheck('between ? and ?')} and (try_numeric(${TEXT}) between ? and ? and (try_numeric(${TEXT}) between ? and ?) is not null))`,
      params: ['k', 'k', 1, 5, 'k', 1, 5, 'k', 1, 5],
    });
    expect(cond({ key: 'k', operator: 'not_between', value: ['-1', 2.5] })).toEqual({
      sql: `(${jsonNumberCheck('not between ? and ?')} and not coalesce(try_numeric(${TEXT}) between ? and ?, false))`,
      params: ['k', 'k', -1, 2.5, 'k', -1, 2.5],
    });
  });

  it('is_set and is_not_set: jsonb_exists (no `?` operator to clash with placeholders); a value is ignored', () => {
    expect(cond({ key: 'k', operator: 'is_set' })).toEqual({ sql: `jsonb_exists(${COL}, ?)`, params: ['k'] });
    expect(cond({ key: 'k', operator: 'is_not_set', value: { any: 'thing' } })).toEqual({
      sql: `not jsonb_exists(${COL}, ?)`,
      params: ['k'],
    });
  });

  it('date operators: the date as an ISO instant parameter', () => {
    const param = ['k', '2024-01-02T00:00:00.000Z'];
    expect(cond({ key: 'k', operator: 'is_date_before', value: '2024-01-02' })).toEqual({
      sql: `coalesce(try_timestamptz(${TEXT}) < ?::timestamptz, false)`,
      params: param,
    });
    expect(cond({ key: 'k', operator: 'is_date_after', value: '2024-01-02T00:00:00Z' })).toEqual({
      sql: `coalesce(try_timestamptz(${TEXT}) > ?::timestamptz, false)`,
      params: param,
    });
    expect(cond({ key: 'k', operator: 'is_date_exact', value: '2024-01-02' })).toEqual({
      sql: `coalesce(try_timestamptz(${TEXT})::date = ?::date, false)`,
      params: param,
    });
  });

  it('a list for a scalar operator: any of them (OR); for a negated one: none of them (AND)', () => {
    expect(cond({ key: 'k', operator: 'icontains', value: ['a', 'b'] })).toEqual({
      sql: `((${TEXT} ilike ? and ${TEXT} is not null) or (${TEXT} ilike ? and ${TEXT} is not null))`,
      params: ['k', '%a%', 'k', 'k', '%b%', 'k'],
    });
    expect(cond({ key: 'k', operator: 'not_regex', value: ['a', 'b'] })).toEqual({
      sql: `(coalesce(not regex_matches(${TEXT}, ?), true) and coalesce(not regex_matches(${TEXT}, ?), true))`,
      params: ['k', 'a', 'k', 'b'],
    });
    expect(cond({ key: 'k', operator: 'gt', value: [1, 2] }).params).toEqual([
      ...['k', 'k', 1, 'k', 1, 'k', 1],
      ...['k', 'k', 2, 'k', 2, 'k', 2],
    ]);
  });

  it('a one-item list is the item', () => {
    expect(cond({ key: 'k', operator: 'regex', value: ['a'] })).toEqual(
      cond({ key: 'k', operator: 'regex', value: 'a' }),
    );
  });

  it('type person, event, null or missing are plain conditions', () => {
    const plain = cond({ key: 'k', value: 'v' });
    for (const type of ['person', 'event', null, undefined])
      expect(cond({ type, key: 'k', value: 'v' })).toEqual(plain);
  });

  it('a special resolver takes the items it knows and leaves the others', () => {
    const cohort: SqlFragment = { sql: 'in_cohort(?)', params: [7] };
    const special = (item: PropertyFilterItem) => (item.type === 'cohort' ? cohort : undefined);
    expect(propertyConditionSql({ type: 'cohort', key: 'id', value: 7 }, COL, special)).toBe(cohort);
    expect(propertyConditionSql({ key: 'k', value: 'v' }, COL, special)).toEqual(cond({ key: 'k', value: 'v' }));
  });
});

describe('propertyConditionSql: malformed filters are FilterErrors', () => {
  const refused = (item: PropertyFilterItem, message: string | RegExp) => {
    expect(() => cond(item)).toThrow(FilterError);
    expect(() => cond(item)).toThrow(message);
  };

  it('unknown or non-string operator', () => {
    refused({ key: 'k', operator: 'contains', value: 'v' }, 'Unknown property filter operator "contains".');
    refused({ key: 'k', operator: 5, value: 'v' }, 'Unknown property filter operator "5".');
    refused({ key: 'k', operator: ['exact'], value: 'v' }, 'Unknown property filter operator "["exact"]".');
  });

  it('missing, empty or non-string key', () => {
    for (const key of [undefined, '', 5, null, ['k']])
      refused({ key, value: 'v' }, 'Each property filter needs a "key".');
  });

  it('unsupported type', () => {
    refused({ type: 'cohort', key: 'id', value: 1 }, 'Unsupported property filter type "cohort".');
    refused({ type: 'AND', key: 'k', value: 1 }, 'Unsupported property filter type "AND".');
  });

  it('a value is needed (missing, null, empty list) except for is_set / is_not_set', () => {
    for (const value of [undefined, null, []])
      refused({ key: 'k', operator: 'exact', value }, '"exact" needs a value.');
    refused({ key: 'k', operator: 'gt' }, '"gt" needs a value.');
  });

  it('values are strings, finite numbers or booleans', () => {
    const message = '"exact" values must be strings, numbers or booleans.';
    for (const value of [{ a: 1 }, [['a']], [null], Number.NaN, Number.POSITIVE_INFINITY, ['a', { b: 1 }]])
      refused({ key: 'k', value }, message);
  });

  it('at most 1000 values', () => {
    expect(cond({ key: 'k', value: Array.from({ length: 1000 }, (_, i) => i) }).params.length).toBeGreaterThan(1000);
    refused(
      { key: 'k', value: Array.from({ length: 1001 }, (_, i) => i) },
      'At most 1000 values in one property filter.',
    );
  });

  it('NUL characters and lone surrogates in keys or values', () => {
    const message = /null characters or lone surrogates/;
    refused({ key: 'a\u0000', value: 'v' }, message);
    refused({ key: '\ud800', value: 'v' }, message);
    refused({ key: 'k', value: 'v\u0000' }, message);
    refused({ key: 'k', operator: 'icontains', value: ['ok', '\udc00'] }, message);
  });

  it('numeric operators need numbers', () => {
    for (const value of ['abc', '', true, '1e400', '1_000', 'NaN'])
      refused({ key: 'k', operator: 'gte', value }, '"gte" needs a number.');
  });

  // Found while writing these tests: only '' is refused, and Number(' ') is 0, so a blank value is "gte 0".
  // (Fixed.)
  it('BUG: a blank (whitespace-only) value is not a number', () => {
    refused({ key: 'k', operator: 'gte', value: ' ' }, '"gte" needs a number.');
  });

  it("numbers are read with JavaScript's Number(): hex, binary and padded strings are accepted", () => {
    expect(cond({ key: 'k', operator: 'gt', value: '0x10' }).params).toEqual(['k', 'k', 16, 'k', 16, 'k', 16]);
    expect(cond({ key: 'k', operator: 'gt', value: '0b11' }).params).toEqual(['k', 'k', 3, 'k', 3, 'k', 3]);
    expect(cond({ key: 'k', operator: 'gt', value: ' 7 ' }).params).toEqual(['k', 'k', 7, 'k', 7, 'k', 7]);
  });

  it('between needs exactly two numbers', () => {
    refused({ key: 'k', operator: 'between', value: 1 }, '"between" needs two numbers.');
    refused({ key: 'k', operator: 'not_between', value: [1, 2, 3] }, '"not_between" needs two numbers.');
    refused({ key: 'k', operator: 'between', value: [1, 'x'] }, '"between" needs a number.');
  });

  it('date operators need a date in years 1–9999', () => {
    for (const value of ['garbage', '10000-01-01', 'yesterday', true])
      refused({ key: 'k', operator: 'is_date_after', value }, '"is_date_after" needs a date between years 1 and 9999.');
  });
});

describe('propertyFiltersSql: trees', () => {
  const a = { key: 'a', operator: 'is_set' };
  const b = { key: 'b', operator: 'is_not_set' };
  const A = cond(a);
  const B = cond(b);

  it('empty, null or undefined filters match everything', () => {
    for (const filters of [[], null, undefined, { type: 'OR', values: [] }, [[], { type: 'AND', values: [] }]])
      expect(propertyFiltersSql(filters, COL).sql).toMatch(/^\(?true/);
    expect(propertyFiltersSql([], COL)).toEqual({ sql: 'true', params: [] });
  });

  it('a list is ANDed; an OR group ORed; an AND group ANDed', () => {
    expect(propertyFiltersSql([a, b], COL)).toEqual({ sql: `(${A.sql} and ${B.sql})`, params: ['a', 'b'] });
    expect(propertyFiltersSql({ type: 'OR', values: [a, b] }, COL)).toEqual({
      sql: `(${A.sql} or ${B.sql})`,
      params: ['a', 'b'],
    });
    expect(propertyFiltersSql({ type: 'AND', values: [a, b] }, COL)).toEqual(propertyFiltersSql([a, b], COL));
  });

  it('nested groups keep their parentheses and parameter order', () => {
    const tree = { type: 'OR', values: [{ type: 'AND', values: [a, b] }, [b], a] };
    expect(propertyFiltersSql(tree, COL)).toEqual({
      sql: `((${A.sql} and ${B.sql}) or (${B.sql}) or ${A.sql})`,
      params: ['a', 'b', 'b', 'a'],
    });
  });

  it('a lone item at the top is one condition', () => {
    expect(propertyFiltersSql(a, COL)).toEqual(A);
  });

  it('a group without a values list is read as an item (and refused for its type)', () => {
    expect(() => propertyFiltersSql({ type: 'OR', values: 'x' }, COL)).toThrow(
      'Unsupported property filter type "OR".',
    );
    expect(() => propertyFiltersSql({ type: 'or', values: [a] }, COL)).toThrow(
      'Unsupported property filter type "or".',
    );
  });

  it('non-object nodes are refused', () => {
    for (const node of ['x', 5, true])
      expect(() => propertyFiltersSql(node, COL)).toThrow('Each property filter must be an object.');
    for (const node of [null, 'x', 0])
      expect(() => propertyFiltersSql([a, node], COL)).toThrow('Each property filter must be an object.');
  });

  // The top list is depth 0, so an item may sit at depth 5 (five lists or groups around it), not 6.
  const nest = (levels: number, inner: unknown): unknown => (levels === 0 ? inner : [nest(levels - 1, inner)]);
  it('nesting: five levels around an item is accepted, six are refused', () => {
    expect(propertyFiltersSql(nest(5, a), COL)).toEqual({ sql: `(((((${A.sql})))))`, params: ['a'] });
    expect(() => propertyFiltersSql(nest(6, a), COL)).toThrow(FilterError);
    expect(() => propertyFiltersSql(nest(6, a), COL)).toThrow('Property filters are nested too deeply.');
    // Groups count as levels like lists, and an empty node that deep is refused too.
    const groups = (levels: number): unknown => (levels === 0 ? [] : { type: 'OR', values: [groups(levels - 1)] });
    expect(() => propertyFiltersSql(groups(5), COL)).not.toThrow();
    expect(() => propertyFiltersSql(groups(6), COL)).toThrow('Property filters are nested too deeply.');
  });

  it('at most 100 conditions in the whole tree (groups do not count)', () => {
    const items = (n: number) => Array.from({ length: n }, (_, i) => ({ key: `k${i}`, operator: 'is_set' }));
    expect(propertyFiltersSql(items(100), COL).params).toHaveLength(100);
    expect(() => propertyFiltersSql(items(101), COL)).toThrow('At most 100 property filters.');
    const split = [
      { type: 'OR', values: items(60) },
      { type: 'AND', values: [items(41)] },
    ];
    expect(() => propertyFiltersSql(split, COL)).toThrow('At most 100 property filters.');
  });

  it('an error deep inside the tree surfaces as a FilterError', () => {
    expect(() => propertyFiltersSql({ type: 'OR', values: [a, [{ key: 'k', operator: 'nope' }]] }, COL)).toThrow(
      FilterError,
    );
  });
});

describe('values and keys are always parameters (fast-check)', () => {
  // A marker no fragment's SQL contains: if any part of a key or value were inlined, the marker would show.
  const MARK = '§';
  const storable = (s: string) => s.isWellFormed() && !s.includes('\u0000');
  const text = fc.string({ unit: 'binary', maxLength: 12 }).filter(storable);
  const marked = text.map((s) => `${MARK}${s}`);
  const TEXT_OPERATORS = ['exact', 'is_not', 'icontains', 'not_icontains', 'regex', 'not_regex', 'in', 'not_in'];

  it('text operators: key and value never in the SQL, always in the parameters', () => {
    fc.assert(
      fc.property(fc.constantFrom(...TEXT_OPERATORS), marked, marked, (operator, key, value) => {
        const { sql, params } = cond({ key, operator, value });
        expect(sql).not.toContain(MARK);
        expect(params).toContain(key);
        // The value itself, or (icontains) its escaped pattern.
        expect(params.includes(value) || params.includes(containsPattern(value))).toBe(true);
        expect(placeholders(sql)).toBe(params.length);
      }),
      { numRuns: 500 },
    );
  });

  it('the SQL text of a non-exact operator does not depend on the key or value at all', () => {
    const ops = TEXT_OPERATORS.filter((o) => !['exact', 'in'].includes(o));
    fc.assert(
      fc.property(fc.constantFrom(...ops), text.filter(Boolean), text, (operator, key, value) => {
        expect(cond({ key, operator, value }).sql).toBe(cond({ key: 'k', operator, value: 'v' }).sql);
      }),
    );
  });

  // Any operator, any scalar values (valid or not): either a FilterError, or one parameter per placeholder.
  const scalar = fc.oneof(marked, fc.double(), fc.integer(), fc.boolean(), fc.constant(null));
  const item = fc.record({
    key: fc.oneof(marked, fc.constant('')),
    operator: fc.constantFrom(...PROPERTY_OPERATORS, 'bogus'),
    value: fc.oneof(scalar, fc.array(scalar, { maxLength: 3 })),
  });
  const tree = fc.letrec((tie) => ({
    node: fc.oneof({ depthSize: 'small' }, item, tie('list'), tie('group')),
    list: fc.array(tie('node'), { maxLength: 3 }),
    group: fc.record({ type: fc.constantFrom('AND', 'OR'), values: fc.array(tie('node'), { maxLength: 3 }) }),
  })).node;

  it('any tree: a FilterError, or SQL without the marker and one parameter per placeholder', () => {
    fc.assert(
      fc.property(tree, (filters) => {
        let fragment: SqlFragment | FilterError;
        try {
          fragment = propertyFiltersSql(filters, COL);
        } catch (error) {
          fragment = error as FilterError;
        }
        expect(fragment instanceof FilterError || !fragment.sql.includes(MARK)).toBe(true);
        expect(fragment instanceof FilterError || placeholders(fragment.sql) === fragment.params.length).toBe(true);
      }),
      { numRuns: 500 },
    );
  });
});

// What the fragments mean: PostgreSQL (the test database, which has try_numeric, try_timestamptz and
// regex_matches from the migrations) evaluates them over these rows.
describe('semantics against PostgreSQL', () => {
  const ROWS: Record<string, unknown>[] = [
    { k: 'Hello World' }, // 0
    { k: 12 }, // 1
    { k: '12' }, // 2
    { k: true }, // 3
    { k: null }, // 4
    {}, // 5
    { k: '2024-01-02T10:00:00Z' }, // 6
    { k: '50%_off' }, // 7
    { k: { a: 1 } }, // 8
    { k: 12.5 }, // 9
    { k: '5000' }, // 10
    { k: 'NaN' }, // 11
  ];
  let client: pg.Client;

  beforeAll(async () => {
    client = new pg.Client({ connectionString: config.databaseDirectUrl });
    await client.connect();
    await client.query(`set timezone = 'UTC'`);
  });
  afterAll(async () => {
    await client?.end();
  });

  /** The indexes of ROWS the filters select. */
  async function matching(filters: unknown): Promise<number[]> {
    const { sql, params } = propertyFiltersSql(filters, 't.properties');
    let n = 1;
    const numbered = sql.replace(/\?/g, () => `$${n++ + 1}`);
    const result = await client.query<{ i: number }>(
      `select t.i from jsonb_array_elements($1::jsonb) with ordinality as t0(properties, ord)
         cross join lateral (select (t0.ord - 1)::int as i, t0.properties) t
        where ${numbered} order by t.i`,
      [JSON.stringify(ROWS), ...params],
    );
    return result.rows.map((r) => r.i);
  }

  it.each([
    ['exact text', { key: 'k', value: 'Hello World' }, [0]],
    ['exact is case-sensitive', { key: 'k', value: 'hello world' }, []],
    ['exact "12" matches the number and the string', { key: 'k', value: '12' }, [1, 2]],
    ['exact 12 matches the number and the string', { key: 'k', value: 12 }, [1, 2]],
    ['exact true matches the boolean', { key: 'k', value: true }, [3]],
    ['exact "true" matches the boolean', { key: 'k', value: 'true' }, [3]],
    ['exact list', { key: 'k', value: ['12.5', 'Hello World'] }, [0, 9]],
    // An object's text is jsonb's rendering ({"a": 1}, with a space): compact JSON text does not match it.
    ['exact JSON text of an object, as jsonb writes it', { key: 'k', value: '{"a": 1}' }, [8]],
    ['exact compact JSON text of an object', { key: 'k', value: '{"a":1}' }, []],
    [
      'is_not: missing and null rows included',
      { key: 'k', operator: 'is_not', value: '12' },
      [0, 3, 4, 5, 6, 7, 8, 9, 10, 11],
    ],
    ['icontains is case-insensitive', { key: 'k', operator: 'icontains', value: 'WORLD' }, [0]],
    ['icontains treats % and _ literally', { key: 'k', operator: 'icontains', value: '%_' }, [7]],
    ["icontains over a number's text", { key: 'k', operator: 'icontains', value: '2.' }, [9]],
    [
      'not_icontains: missing and null rows included',
      { key: 'k', operator: 'not_icontains', value: 'o' },
      [1, 2, 3, 4, 5, 6, 8, 9, 10, 11],
    ],
    ['regex', { key: 'k', operator: 'regex', value: '^1' }, [1, 2, 9]],
    ['a bad regex matches nothing', { key: 'k', operator: 'regex', value: '(' }, []],
    [
      'not_regex with a bad regex matches everything',
      { key: 'k', operator: 'not_regex', value: '(' },
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
    ],
    ['gt compares numbers, not text ("NaN" is not a number)', { key: 'k', operator: 'gt', value: 100 }, [10]],
    ['lte over numbers and numeric strings', { key: 'k', operator: 'lte', value: '12' }, [1, 2]],
    ['between is inclusive', { key: 'k', operator: 'between', value: [12, 12.5] }, [1, 2, 9]],
    [
      'not_between: non-numbers included',
      { key: 'k', operator: 'not_between', value: [0, 100] },
      [0, 3, 4, 5, 6, 7, 8, 10, 11],
    ],
    ['is_set: a null value is set', { key: 'k', operator: 'is_set' }, [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]],
    ['is_not_set', { key: 'k', operator: 'is_not_set' }, [5]],
    ['is_date_before', { key: 'k', operator: 'is_date_before', value: '2024-01-03' }, [6]],
    ['is_date_after', { key: 'k', operator: 'is_date_after', value: '2024-01-02T10:00:00Z' }, []],
    ['is_date_exact', { key: 'k', operator: 'is_date_exact', value: '2024-01-02' }, [6]],
    [
      'OR group',
      {
        type: 'OR',
        values: [
          { key: 'k', value: true },
          { key: 'k', operator: 'is_not_set' },
        ],
      },
      [3, 5],
    ],
    [
      'AND list',
      [
        { key: 'k', operator: 'gte', value: 12 },
        { key: 'k', operator: 'lt', value: 13 },
      ],
      [1, 2, 9],
    ],
    ['empty filters', [], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]],
  ])('%s', async (_name, filters, expected) => {
    expect(await matching(filters)).toEqual(expected);
  });

  // Found while writing these tests: try_numeric reads "NaN" as numeric NaN, which PostgreSQL orders above
  // every number, so a property holding the text "NaN" passes every gt/gte filter (PostHog's ClickHouse
  // comparison with nan is false). Fixed by migration 0042.
  it('BUG: a "NaN" text is not greater than a number', async () => {
    expect(await matching({ key: 'k', operator: 'gt', value: 1e300 })).toEqual([]);
  });
});
