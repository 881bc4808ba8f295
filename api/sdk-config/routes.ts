// The remote config posthog-js loads on every page: /array/<token>/config.js (a script, tried
// first) and /array/<token>/config (JSON, its fallback). Public, by project API token, like PostHog's.
// CORS comes from the app's SDK CORS middleware (api/capture/routes.ts), for errors too.
import type { EntityManager } from '@mikro-orm/postgresql';
import { notFound } from '../http/errors.ts';
import { defineRoute, type RouteContext } from '../http/routes.ts';
import { sdkPreflight } from '../capture/routes.ts';
import { projectByTokenWithFlags } from '../../shared/accounts/index.ts';

// PostHog's CDN keeps these 5 minutes; a new first flag reaches browsers that late, as there.
const CACHE_CONTROL = 'public, max-age=300';

/**
 * What this service knows of a project, in PostHog's remote-config shape: no session recording,
 * surveys, heatmaps, product tours, conversations, exception or console-log capture; autocapture
 * allowed; events to /i/v0/e/; whether any flag is active, so the SDK asks /flags only when useful.
 * Null for an unknown token.
 */
async function remoteConfig(em: EntityManager, token: string): Promise<Record<string, unknown> | null> {
  if (token.length > 200 || token.includes('\u0000')) return null;
  const project = await projectByTokenWithFlags(em, token);
  if (!project) return null;
  return {
    token: project.api_token,
    supportedCompression: ['gzip', 'gzip-js'],
    hasFeatureFlags: project.has_flags,
    captureDeadClicks: false,
    capturePerformance: false,
    autocapture_opt_out: false,
    autocaptureExceptions: false,
    analytics: { endpoint: '/i/v0/e/' },
    elementsChainAsString: true,
    errorTracking: { autocaptureExceptions: false, suppressionRules: [] },
    logs: { captureConsoleLogs: false },
    sessionRecording: false,
    heatmaps: false,
    conversations: false,
    // No `surveys` key, not even false: given one, posthog-js fetches its surveys bundle from the
    // API host's /static/, which this service does not serve (a 404 and a console error per page).
    productTours: false,
    defaultIdentifiedOnly: true,
    siteApps: [],
  };
}

async function configFor(ctx: RouteContext): Promise<Record<string, unknown>> {
  const config = await remoteConfig(ctx.state.em, ctx.state.params.token);
  if (!config) throw notFound();
  ctx.set('Cache-Control', CACHE_CONTROL);
  return config;
}

/**
 * The script form: the config without siteApps, which sit beside it (PostHog inlines site apps'
 * code there; this service has none). JSON.stringify escapes the token and values, and `<` too so
 * no `</script>` can end an inlined copy early.
 */
function configScript(config: Record<string, unknown>): string {
  const { siteApps, ...rest } = config;
  const js = (value: unknown) => JSON.stringify(value).replace(/</g, '\\u003c');
  return (
    '(function() {\n' +
    '  window._POSTHOG_REMOTE_CONFIG = window._POSTHOG_REMOTE_CONFIG || {};\n' +
    `  window._POSTHOG_REMOTE_CONFIG[${js(config.token)}] = { config: ${js(rest)}, siteApps: ${js(siteApps)} };\n` +
    '})();\n'
  );
}

// Open: PostHog adds settings to this object release by release, and posthog-js ignores unknown ones.
const configSchema = {
  type: 'object',
  required: ['token', 'supportedCompression', 'hasFeatureFlags', 'analytics', 'sessionRecording', 'siteApps'],
  properties: {
    token: { type: 'string' },
    supportedCompression: { type: 'array', items: { type: 'string' } },
    hasFeatureFlags: { type: 'boolean' },
    analytics: { type: 'object', properties: { endpoint: { type: 'string' } }, additionalProperties: true },
    sessionRecording: { type: 'boolean' },
    siteApps: { type: 'array', items: {} },
  },
  additionalProperties: true,
};

const notFoundResponse = { 404: { description: 'Unknown project API token' } };

export const sdkConfigRoutes = [
  sdkPreflight('/array/:token/config'),
  sdkPreflight('/array/:token/config.js'),
  defineRoute({
    method: 'GET',
    path: '/array/:token/config',
    summary: 'Remote config for posthog-js (JSON), by project API token',
    tags: ['capture'],
    scopes: null,
    responses: { 200: { description: 'The project’s SDK config', schema: configSchema }, ...notFoundResponse },
    handler: async (ctx) => {
      ctx.body = await configFor(ctx);
    },
  }),
  defineRoute({
    method: 'GET',
    path: '/array/:token/config.js',
    summary: 'Remote config for posthog-js (script setting window._POSTHOG_REMOTE_CONFIG[token])',
    tags: ['capture'],
    scopes: null,
    responses: {
      200: { description: 'JavaScript', schema: { type: 'string' }, contentType: 'application/javascript' },
      ...notFoundResponse,
    },
    handler: async (ctx) => {
      ctx.body = configScript(await configFor(ctx));
      ctx.type = 'application/javascript';
    },
  }),
];
