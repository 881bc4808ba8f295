// Every route of the API, one list per resource folder.
import { accessExportRoutes } from './access-exports/routes.ts';
import { captureRoutes } from './capture/routes.ts';
import { eventDefinitionRoutes } from './event-definitions/routes.ts';
import { experimentRoutes } from './experiments/routes.ts';
import { flagRoutes } from './flags/routes.ts';
import { ingestionWarningRoutes } from './ingestion-warnings/routes.ts';
import { holdoutRoutes } from './experiments/holdouts.ts';
import { savedMetricRoutes } from './experiments/saved-metrics.ts';
import { organizationRoutes } from './organizations/routes.ts';
import { opsRoutes } from './ops/routes.ts';
import { openApiRoutes } from './openapi/routes.ts';
import { personAnalysisRoutes } from './persons/analysis-routes.ts';
import { accessLogRoutes } from './persons/access-log-routes.ts';
import { deletionRequestRoutes } from './persons/deletion-requests.ts';
import { personDeletionRoutes, personRoutes } from './persons/routes.ts';
import { deletionReceiptRoutes } from './persons/receipt-routes.ts';
import { projectRoutes } from './projects/routes.ts';
import { retentionRoutes } from './retention/routes.ts';
import { scrubRouteList } from './scrubs/routes.ts';
import { sdkConfigRoutes } from './sdk-config/routes.ts';
import { introspectionRoutes } from './users/routes.ts';
import { webhookRoutes } from './webhooks/routes.ts';
import { trackingPlanRoutes } from './tracking-plan/routes.ts';
import type { RouteDefinition } from './http/routes.ts';

export const allRoutes: RouteDefinition[] = [
  ...opsRoutes,
  ...projectRoutes,
  ...retentionRoutes,
  ...organizationRoutes,
  ...captureRoutes,
  ...ingestionWarningRoutes,
  ...personRoutes,
  ...personDeletionRoutes,
  ...deletionRequestRoutes,
  ...deletionReceiptRoutes,
  ...scrubRouteList,
  ...accessExportRoutes,
  ...personAnalysisRoutes,
  ...accessLogRoutes,
  ...eventDefinitionRoutes,
  ...trackingPlanRoutes,
  ...experimentRoutes,
  ...holdoutRoutes,
  ...savedMetricRoutes,
  ...flagRoutes,
  ...sdkConfigRoutes,
  ...introspectionRoutes,
  ...webhookRoutes,
];
allRoutes.push(...openApiRoutes(() => allRoutes));
