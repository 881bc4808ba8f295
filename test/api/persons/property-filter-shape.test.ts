// The shape of a person `properties` filter item, checked per operator as PostHog does: is_set and
// is_not_set need no value, every other operator does (with a number, two numbers or a date where the
// operator compares those). A malformed item is a 400 on `properties`; no filter value ever reaches
// the SQL text (it is always a bound parameter), so no input can become SQL.
import { describe, expect, it } from 'vitest';
import { propertyConditionSql, propertyFiltersSql, FilterError } from '../../../shared/platform/db/property-filters.ts';
import { apiWithAccount, call } from '../../helpers.ts';

const { api, account } = await apiWithAccount();

/** GET persons filtered by `properties` as sent (a string) or as JSON. */
const list = (filters: unknown) => {
  const raw = typeof filters === 'string' ? filters : JSON.stringify(filters);
  return call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/persons/?properties=${encodeURIComponent(raw)}`, {
    key: account.apiKey,
  });
};

const VALUE_OPERATORS = [
  'exact',
  'is_not',
  'icontains',
  'not_icontains',
  'regex',
  'not_regex',
  'gt',
  'gte',
  'lt',
  'lte',
  'is_date_exact',
  'is_date_before',
  'is_date_after',
  'between',
  'not_between',
  'in',
  'not_in',
];

describe('person properties filter items', () => {
  it.each([...VALUE_OPERATORS, undefined])('operator %s without a value is a 400 on properties', async (operator) => {
    const res = await list([{ key: 'email', type: 'person', ...(operator ? { operator } : {}) }]);
    expect(res.status, res.text).toBe(400);
    expect(res.body).toMatchObject({ type: 'validation_error', attr: 'properties' });
    expect(res.body.detail).toMatch(/value/i);
  });

  it.each(VALUE_OPERATORS)('operator %s with a null value is a 400 on properties', async (operator) => {
    const res = await list([{ key: 'email', operator, value: null }]);
    expect(res.status, res.text).toBe(400);
    expect(res.body.attr).toBe('properties');
  });

  it.each([
    '[{"type":"behavioral","key":"signed up","value":"performed_event","explicit_datetime":"0000-01-01"}]',
    '[{"type":"behavioral","key":"signed up","value":"performed_event","time_value":1e300,"time_interval":"year"}]',
    '[{"type":"behavioral","key":"signed up","value":"performed_event_multiple","operator_value":1e309}]',
    '[{"type":"behavioral","key":"a\\u0000","value":"performed_event"}]',
  ])('behavioral item %s is a 400 on properties', async (raw) => {
    const res = await list(raw);
    expect(res.status, res.text).toBe(400);
    expect(res.body.attr).toBe('properties');
  });

  it.each(['is_set', 'is_not_set'])('operator %s needs no value', async (operator) => {
    const res = await list([{ key: 'email', operator }]);
    expect(res.status, res.text).toBe(200);
  });

  it.each([
    [{ key: 'n', operator: 'gt', value: '1e309' }],
    [{ key: 'n', operator: 'between', value: [0, 1e308 * 10] }],
    [{ key: 'd', operator: 'is_date_before', value: '0000-01-01' }],
    [{ key: 'd', operator: 'is_date_after', value: '+010000-01-01T00:00:00Z' }],
    [{ key: 'email', operator: 'exact', value: [] }],
    [{ key: 'email', operator: 'icontains', value: { a: 1 } }],
    [{ key: 'email', operator: 'regex', value: [['a']] }],
    [{ key: 'email', operator: 'exact', value: ['a', null] }],
    [{ key: 'email', operator: 'in', value: Array.from({ length: 1001 }, (_, i) => i) }],
    [{ key: ['email'], operator: 'exact', value: 'x' }],
    [{ key: 'email', operator: 'exact', value: 'a\ud800' }],
    [{ key: 'email', operator: 'icontains', value: ['ok', 'a\u0000'] }],
    [{ key: 'e\udc00', operator: 'is_set' }],
  ])('%j is a 400 on properties', async (item) => {
    const res = await list([item]);
    expect(res.status, res.text).toBe(400);
    expect(res.body.attr).toBe('properties');
  });
});

describe('the SQL of a filter', () => {
  it('holds only placeholders: every parameter is a string or a finite number', () => {
    const items = [
      { key: 'a', value: 'x' },
      { key: 'a', operator: 'is_not', value: [1, true, 'y'] },
      { key: 'a', operator: 'icontains', value: 5 },
      { key: 'a', operator: 'gt', value: '3' },
      { key: 'a', operator: 'between', value: [1, 2] },
      { key: 'a', operator: 'is_set' },
      { key: 'a', operator: 'is_date_after', value: '2024-01-01' },
    ];
    for (const item of items) {
      const { sql, params } = propertyConditionSql(item, 'p.properties');
      expect(sql.split('?').length - 1, sql).toBe(params.length);
      for (const p of params) {
        const bound = typeof p === 'string' || (typeof p === 'number' && Number.isFinite(p));
        expect(bound, `${JSON.stringify(item)} → ${String(p)}`).toBe(true);
      }
    }
  });

  it('reads a list value of a one-value operator as PostHog does: any of them (none of them, negated)', async () => {
    const conn = api.orm.em.fork().getConnection();
    const matches = async (item: Record<string, unknown>, properties: Record<string, unknown>) => {
      const { sql, params } = propertyConditionSql(item, 'p.properties');
      const probe = `select ${sql} as m from (select ?::jsonb as properties) p`;
      const [row] = await conn.execute<{ m: boolean }[]>(probe, [...params, JSON.stringify(properties)]);
      return row.m;
    };
    const person = { email: 'x@b.com' };
    expect(await matches({ key: 'email', operator: 'icontains', value: ['@a.', '@b.'] }, person)).toBe(true);
    expect(await matches({ key: 'email', operator: 'icontains', value: ['@a.', '@c.'] }, person)).toBe(false);
    expect(await matches({ key: 'email', operator: 'not_icontains', value: ['@a.', '@b.'] }, person)).toBe(false);
    expect(await matches({ key: 'email', operator: 'not_icontains', value: ['@a.', '@c.'] }, person)).toBe(true);
    expect(await matches({ key: 'n', operator: 'gt', value: ['10', 2] }, { n: 5 })).toBe(true);
    expect(await matches({ key: 'n', operator: 'is_set', value: 'is_set' }, { n: 5 })).toBe(true);
  });

  it('refuses a value-less item before building any SQL', () => {
    expect(() => propertyFiltersSql([{ key: 'a', operator: 'exact' }], 'p.properties')).toThrow(FilterError);
  });
});
