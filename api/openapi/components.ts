// Schemas the document names once under components/schemas and refers to wherever a route uses them,
// so a generated client has one Experiment type, not one per operation.
import { definitionSchema } from '../event-definitions/schemas.ts';
import {
  experimentSchema,
  featureFlagSchema,
  holdoutSchema,
  savedMetricLinkSchema,
} from '../experiments/serializers.ts';
import { organizationBasicSchema, organizationDetailSchema } from '../organizations/serializers.ts';
import { deletionRequestSchema } from '../persons/deletion-requests.ts';
import { personListItemSchema, personListRowSchema, personRecordSchema } from '../persons/serializers.ts';
import { projectBasicSchema, projectDetailSchema } from '../projects/serializers.ts';
import { userBasicSchema } from '../users/serializers.ts';

export const NAMED_SCHEMAS: Record<string, object> = {
  Experiment: experimentSchema,
  ExperimentFeatureFlag: featureFlagSchema,
  ExperimentHoldout: holdoutSchema,
  SavedMetricLink: savedMetricLinkSchema,
  UserBasic: userBasicSchema,
  Person: personRecordSchema,
  PersonListRow: personListRowSchema,
  PersonActor: personListItemSchema,
  DeletionRequest: deletionRequestSchema,
  EventDefinition: definitionSchema,
  Project: projectBasicSchema,
  ProjectDetail: projectDetailSchema,
  OrganizationBasic: organizationBasicSchema,
  Organization: organizationDetailSchema,
};
