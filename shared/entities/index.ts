// Every entity, for the ORM configuration of both processes.
import { DeletionIdempotencyKey } from './deletion-idempotency-key.ts';
import { Organization, OrganizationMembership } from './organization.ts';
import { PersonalApiKey } from './personal-api-key.ts';
import { Project } from './project.ts';
import { User } from './user.ts';

export { DeletionIdempotencyKey, Organization, OrganizationMembership, PersonalApiKey, Project, User };

export const entities = [Organization, OrganizationMembership, Project, User, PersonalApiKey, DeletionIdempotencyKey];
