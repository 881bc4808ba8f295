// What an event asks of its person: PostHog's normalisation of $set / $set_once / $unset (the plugin server's ingestion/persons code and utils/event.ts).
import { unsetKeys, type Properties, type PropertyUpdate } from './property-rules.ts';

// Properties PostHog copies onto the person ($set) and, as $initial_*, once ($set_once).
const AUTO_PERSON_PROPERTIES = [
  '$browser',
  '$browser_version',
  '$device_type',
  '$current_url',
  '$pathname',
  '$os',
  '$os_version',
  '$referring_domain',
  '$referrer',
  '$app_build',
  '$app_name',
  '$app_namespace',
  '$app_version',
  'utm_source',
  'utm_medium',
  'utm_campaign',
  'utm_content',
  'utm_name',
  'utm_term',
  'gclid',
  'gad_source',
  'gclsrc',
  'dclid',
  'gbraid',
  'wbraid',
  'fbclid',
  'msclkid',
  'twclid',
  'li_fat_id',
  'mc_cid',
  'igshid',
  'ttclid',
];
const NO_AUTO_PROPERTIES = new Set(['$snapshot', '$performance_event']);
const OS_PROPERTIES = new Set(['$os', '$os_version']);

const asObject = (value: unknown): Properties =>
  value && typeof value === 'object' && !Array.isArray(value) ? (value as Properties) : {};

/** The person update an event carries, after PostHog's normalisation. */
export function personUpdateOf(event: string, properties: Properties): PropertyUpdate {
  const set = { ...asObject(properties.$set) };
  const setOnce = { ...asObject(properties.$set_once) };
  if (!NO_AUTO_PROPERTIES.has(event)) {
    const isServer = properties.$is_server === true;
    for (const key of AUTO_PERSON_PROPERTIES) {
      if (!Object.hasOwn(properties, key) || (isServer && OS_PROPERTIES.has(key))) continue;
      if (!Object.hasOwn(set, key)) set[key] = properties[key];
      const initialKey = `$initial_${key.startsWith('$') ? key.slice(1) : key}`;
      if (!Object.hasOwn(setOnce, initialKey)) setOnce[initialKey] = properties[key];
    }
  }
  return { set, setOnce, unset: unsetKeys(properties.$unset) };
}

// Distinct ids PostHog refuses to merge on (its person merge code's illegal distinct ids).
const ILLEGAL_CASE_INSENSITIVE = new Set([
  'anonymous',
  'guest',
  'distinctid',
  'distinct_id',
  'id',
  'not_authenticated',
  'email',
  'undefined',
  'true',
  'false',
]);
const ILLEGAL_CASE_SENSITIVE = new Set(['[object Object]', 'NaN', 'None', 'none', 'null', '0', 'undefined']);

export function isIllegalDistinctId(id: string): boolean {
  const trimmed = id.trim();
  if (trimmed === '') return true;
  const unquoted = trimmed.replace(/^(['"])(.*)\1$/, '$2');
  return ILLEGAL_CASE_SENSITIVE.has(trimmed) || ILLEGAL_CASE_INSENSITIVE.has(unquoted.toLowerCase());
}
