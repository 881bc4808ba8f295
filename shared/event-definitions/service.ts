// Changing an event definition with PostHog's rules: hidden and verified exclude each other, the
// owner must belong to the organization, verifying records who and when; every change is logged.
import type { EntityManager } from '@mikro-orm/postgresql';
import { isOrganizationMember } from '../accounts/index.ts';
import { type ActivityChange, type Actor, recordActivity } from '../platform/activity-log.ts';
import { type DefinitionChange, type DefinitionRow, deleteDefinition, updateDefinition } from './store.ts';

/** Input an event-definition rule refuses: the message and the field (PostHog's `attr`). */
export class EventDefinitionInputError extends Error {
  readonly attr: string | null;
  constructor(message: string, attr: string | null = null) {
    super(message);
    this.attr = attr;
  }
}

/** What an update may carry (the API's request schema validates the shapes first). */
export interface DefinitionInput {
  description?: string;
  tags?: string[];
  owner?: number | null;
  verified?: boolean;
  hidden?: boolean;
  default_columns?: string[];
  post_to_slack?: boolean;
}

export async function changeDefinition(
  em: EntityManager,
  actor: Actor,
  before: DefinitionRow,
  body: DefinitionInput,
): Promise<void> {
  if (body.hidden === true && body.verified === true)
    throw new EventDefinitionInputError('An event cannot be both hidden and verified');
  const next: DefinitionChange = {
    description: body.description ?? before.description,
    tags: body.tags !== undefined ? [...new Set<string>(body.tags)] : before.tags,
    owner_id: body.owner !== undefined ? body.owner : before.owner_id,
    default_columns: body.default_columns ?? before.default_columns,
    post_to_slack: body.post_to_slack ?? before.post_to_slack,
    hidden: before.hidden,
    verified: before.verified,
    verified_at: before.verified_at,
    verified_by_id: before.verified_by_id,
  };
  const ownerIsMember =
    body.owner === undefined ||
    body.owner === null ||
    (await isOrganizationMember(em, actor.organizationId, body.owner));
  if (!ownerIsMember) throw new EventDefinitionInputError('The owner must be a member of this organization.', 'owner');
  if (body.verified === true && !before.verified)
    Object.assign(next, { verified: true, verified_at: new Date(), verified_by_id: actor.userId, hidden: false });
  if (body.verified === true) next.hidden = false;
  if (body.verified === false) Object.assign(next, { verified: false, verified_at: null, verified_by_id: null });
  if (body.hidden === true)
    Object.assign(next, { hidden: true, verified: false, verified_at: null, verified_by_id: null });
  if (body.hidden === false) next.hidden = false;

  const changes: ActivityChange[] = [];
  const compare: [string, unknown, unknown][] = [
    ['description', before.description, next.description],
    ['tags', before.tags, next.tags],
    ['owner', before.owner_id, next.owner_id],
    ['verified', before.verified, next.verified],
    ['hidden', before.hidden, next.hidden],
    ['default_columns', before.default_columns, next.default_columns],
  ];
  for (const [field, was, is] of compare) {
    if (JSON.stringify(was) !== JSON.stringify(is))
      changes.push({ type: 'EventDefinition', action: 'changed', field, before: was, after: is });
  }
  await em.fork().transactional(async (tx) => {
    await updateDefinition(tx, before.id, next, actor.userId);
    await recordActivity(tx, {
      ...actor,
      scope: 'EventDefinition',
      itemId: before.id,
      activity: 'changed',
      detail: { name: before.name, changes },
    });
  });
}

/** Deletes a definition (its events stay; the next one of that name recreates it), logged. */
export async function removeDefinition(em: EntityManager, actor: Actor, row: DefinitionRow): Promise<void> {
  await em.fork().transactional(async (tx) => {
    await deleteDefinition(tx, row.id);
    await recordActivity(tx, {
      ...actor,
      scope: 'EventDefinition',
      itemId: row.id,
      activity: 'deleted',
      detail: { name: row.name },
    });
  });
}
