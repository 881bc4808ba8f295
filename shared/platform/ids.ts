// The one id rule: an id as a path, a query or a command gives it is digits only, within its column's
// integer type (an integer id takes at most 9 digits, a bigint id 18), so a longer one names no row
// rather than failing the statement. Route schemas say which an `:id` is (api/http/routes.ts checks it).
export const ID_PATTERN = '^[0-9]{1,9}$';
export const BIGINT_ID_PATTERN = '^[0-9]{1,18}$';

const ID = new RegExp(ID_PATTERN);
const BIGINT_ID = new RegExp(BIGINT_ID_PATTERN);

/** An integer (int4) id: a project's, an experiment's, a webhook's, … */
export const isId = (text: unknown): text is string => typeof text === 'string' && ID.test(text);
/** A bigint id: a person's, a deletion request's. */
export const isBigintId = (text: unknown): text is string => typeof text === 'string' && BIGINT_ID.test(text);
