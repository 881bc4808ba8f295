// PostHog property filters over the `properties` JSON text of ClickHouse's `events`, for the event
// filters of behavioural cohorts. The tree is checked first by property-filters.ts (the PostgreSQL
// builder: its FilterErrors are the answer for a malformed filter on either engine); this file only
// says the same conditions in ClickHouse. A property's text is PostgreSQL's `->>`: a string's value,
// any other JSON's own text, NULL when the key is missing or null; each operator treats NULL as
// PostgreSQL's statement does (no match, or a match for the negated ones). Where the engines read a
// value their own way the answers can differ at the edges: regular expressions are re2 here and POSIX
// there (the same for ordinary patterns; one JavaScript refuses matches nothing), numbers are
// Float64 here and numeric there (digits past the 15th, text such as '0x10'), and dates are read by
// parseDateTime64BestEffort here and timestamptz's input there (the same for ISO 8601).
import { propertyFiltersSql, type PropertyFilterItem } from '../platform/db/property-filters.ts';
import { parseStorableDate } from '../platform/time.ts';

type Scalar = string | number | boolean;

const LIST_OPERATORS = new Set(['exact', 'is_not', 'in', 'not_in', 'between', 'not_between']);
const NEGATED = new Set(['is_not', 'not_in', 'not_icontains', 'not_regex', 'not_between']);

const asText = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v));

/**
 * The filter tree as a ClickHouse condition on `column` (a String of JSON), its values bound as
 * named parameters added to `params` (prefix `f`). Throws FilterError for a malformed tree.
 */
export function clickHouseFilterSql(filters: unknown, column: string, params: Record<string, unknown>): string {
  propertyFiltersSql(filters ?? [], column); // the checks, and their errors
  let n = 0;
  const bind = (value: unknown, type: string) => {
    const name = `f${n++}`;
    params[name] = value;
    return `{${name}:${type}}`;
  };
  const build = (node: unknown): string => {
    if (Array.isArray(node)) return combine(node.map(build), 'AND');
    const group = node as { type?: unknown; values?: unknown };
    if ((group.type === 'AND' || group.type === 'OR') && Array.isArray(group.values))
      return combine(group.values.map(build), group.type);
    return condition(node as PropertyFilterItem, column, bind);
  };
  return build(filters ?? []);
}

/**
 * PostgreSQL's `->>` in ClickHouse: a property's text (a string's value, any other value's JSON), NULL
 * for a missing key or a JSON null. `key` is an SQL expression (a bound parameter or a literal).
 */
export function jsonText(column: string, key: string): string {
  const kind = `JSONType(${column}, ${key})`;
  return `if(${kind} = 'Null', NULL, if(${kind} = 'String', JSONExtractString(${column}, ${key}), JSONExtractRaw(${column}, ${key})))`;
}

function combine(parts: string[], joiner: 'AND' | 'OR'): string {
  return parts.length === 0 ? '1' : `(${parts.join(` ${joiner} `)})`;
}

function condition(item: PropertyFilterItem, column: string, bind: (v: unknown, type: string) => string): string {
  const operator = typeof item.operator === 'string' ? item.operator : 'exact';
  const key = bind(item.key, 'String');
  const values = (
    operator === 'is_set' || operator === 'is_not_set' ? [] : Array.isArray(item.value) ? item.value : [item.value]
  ) as Scalar[];
  const kind = `JSONType(${column}, ${key})`;
  const text = jsonText(column, key);
  const number = `toFloat64OrNull(trimBoth(${text}))`;
  const one = (op: string, vs: Scalar[]): string => {
    const [value] = vs;
    switch (op) {
      case 'exact':
      case 'in':
      case 'is_not':
      case 'not_in': {
        // Text equality, or (jsonb containment) a JSON number equal to a number given.
        const any = vs
          .map((v) =>
            typeof v === 'number'
              ? `(${text} = ${bind(asText(v), 'String')} OR (${kind} IN ('Int64', 'UInt64', 'Double') AND JSONExtractFloat(${column}, ${key}) = ${bind(v, 'Float64')}))`
              : `${text} = ${bind(asText(v), 'String')}`,
          )
          .join(' OR ');
        const matched = `coalesce(${any}, 0)`;
        return op === 'is_not' || op === 'not_in' ? `NOT ${matched}` : matched;
      }
      case 'icontains':
        return `coalesce(positionCaseInsensitiveUTF8(${text}, ${bind(asText(value), 'String')}) > 0, 0)`;
      case 'not_icontains':
        return `coalesce(positionCaseInsensitiveUTF8(${text}, ${bind(asText(value), 'String')}) = 0, 1)`;
      case 'regex':
      case 'not_regex': {
        const pattern = asText(value);
        if (!validPattern(pattern)) return op === 'regex' ? '0' : '1';
        const matched = `match(${text}, ${bind(pattern, 'String')})`;
        return op === 'regex' ? `coalesce(${matched}, 0)` : `coalesce(NOT ${matched}, 1)`;
      }
      case 'gt':
      case 'gte':
      case 'lt':
      case 'lte': {
        const sign = { gt: '>', gte: '>=', lt: '<', lte: '<=' }[op];
        return `coalesce(${number} ${sign} ${bind(Number(value), 'Float64')}, 0)`;
      }
      case 'between':
      case 'not_between': {
        const within = `${number} BETWEEN ${bind(Number(vs[0]), 'Float64')} AND ${bind(Number(vs[1]), 'Float64')}`;
        return op === 'between' ? `coalesce(${within}, 0)` : `NOT coalesce(${within}, 0)`;
      }
      case 'is_set':
        return `JSONHas(${column}, ${key})`;
      case 'is_not_set':
        return `NOT JSONHas(${column}, ${key})`;
      case 'is_date_exact':
      case 'is_date_before':
      case 'is_date_after': {
        const bound = bind((parseStorableDate(asText(value)) as Date).toISOString(), 'String');
        const at = `parseDateTime64BestEffortOrNull(${text}, 6, 'UTC')`;
        const given = `parseDateTime64BestEffort(${bound}, 6, 'UTC')`;
        if (op === 'is_date_exact') return `coalesce(toDate(${at}) = toDate(${given}), 0)`;
        return `coalesce(${at} ${op === 'is_date_before' ? '<' : '>'} ${given}, 0)`;
      }
      default:
        throw new Error(`unchecked operator ${op}`);
    }
  };
  if (values.length > 1 && !LIST_OPERATORS.has(operator))
    return combine(
      values.map((v) => one(operator, [v])),
      NEGATED.has(operator) ? 'AND' : 'OR',
    );
  return one(operator, values);
}

function validPattern(pattern: string): boolean {
  try {
    new RegExp(pattern);
    return true;
  } catch {
    return false;
  }
}
