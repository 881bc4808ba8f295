import type { EntityManager } from '@mikro-orm/postgresql';
import { ApiError } from './errors.ts';
import { projectByToken, type ProjectRow } from '../../shared/accounts/index.ts';

/** PostHog's answer when an SDK's project API key (phc_…) is missing or unknown. */
export const invalidProjectToken = () =>
  new ApiError(
    401,
    'authentication_error',
    'invalid_api_key',
    'Project API key invalid. You can find your project API key in PostHog project settings.',
  );

/** The project an SDK's project API token belongs to; 401 in PostHog's words otherwise. */
export async function projectByApiToken(em: EntityManager, token: unknown): Promise<ProjectRow> {
  if (typeof token !== 'string' || token.trim() === '' || token.length > 200 || token.includes('\u0000'))
    throw invalidProjectToken();
  const project = await projectByToken(em, token.trim());
  if (!project) throw invalidProjectToken();
  return project;
}
