/** Every scope a personal API key can hold (besides `*`). */
export const SCOPE_OBJECTS = [
  'experiment',
  'person',
  'activity_log',
  'cohort',
  'event_definition',
  'project',
  'organization',
  'feature_flag',
  'query',
  'user',
] as const;

export const ALL_SCOPES: string[] = SCOPE_OBJECTS.flatMap((o) => [`${o}:read`, `${o}:write`]);

export function isValidScope(scope: string): boolean {
  return scope === '*' || ALL_SCOPES.includes(scope);
}

/**
 * Whether a key's scopes grant `required`. Null or empty scopes are a legacy key with full access;
 * `*` grants everything; `X:write` implies `X:read`.
 */
export function scopesGrant(keyScopes: readonly string[] | null | undefined, required: string): boolean {
  if (!keyScopes || keyScopes.length === 0) return true;
  if (keyScopes.includes('*') || keyScopes.includes(required)) return true;
  const [object, action] = required.split(':');
  return action === 'read' && keyScopes.includes(`${object}:write`);
}
