// The browsable API reference: Redoc (a maintained OpenAPI renderer) drawing /api/schema/ in the
// browser. Its standalone bundle is served by this server from node_modules, so the page fetches
// nothing from elsewhere, and the page's Content-Security-Policy holds it to that.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { gzipSync } from 'node:zlib';

const require = createRequire(import.meta.url);
export const REDOC_VERSION: string = require('redoc/package.json').version;

/** Where the page loads the bundle from; the version in the URL lets it be cached for good. */
export const REDOC_BUNDLE_PATH = '/api/docs/redoc.standalone.js';
const bundleUrl = `${REDOC_BUNDLE_PATH}?v=${REDOC_VERSION}`;

// The sidebar's "API docs by Redocly" shows their logo from their CDN, whatever the options: an
// empty inline image instead (the CSP would block the request, but the browser would still try).
const REDOCLY_LOGO = 'https://cdn.redoc.ly/redoc/logo-mini.svg';
const NO_LOGO = 'data:image/svg+xml,%3Csvg xmlns=%27http://www.w3.org/2000/svg%27 width=%271%27 height=%271%27/%3E';

let bundle: { raw: Buffer; gzip: Buffer } | null = null;
/** The bundle (1.1 MB) and its gzip (about a third), read and compressed once per process. */
export function redocBundle(): { raw: Buffer; gzip: Buffer } {
  if (!bundle) {
    const source = readFileSync(require.resolve('redoc/bundles/redoc.standalone.js'), 'utf8');
    const raw = Buffer.from(source.replaceAll(REDOCLY_LOGO, NO_LOGO));
    bundle = { raw, gzip: gzipSync(raw) };
  }
  return bundle;
}

// Redoc's default theme names Roboto and Montserrat (which its CLI template loads from Google
// Fonts); the fonts the machine has are used instead.
const THEME = {
  typography: {
    fontFamily: 'system-ui, -apple-system, "Segoe UI", sans-serif',
    headings: { fontFamily: 'system-ui, -apple-system, "Segoe UI", sans-serif' },
    code: { fontFamily: 'ui-monospace, "DejaVu Sans Mono", monospace' },
  },
};

/**
 * Only this origin: scripts, the document, styles (Redoc's styled-components write inline styles),
 * images and fonts; Redoc's search index runs in a worker made from a blob.
 */
export const REFERENCE_PAGE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "worker-src 'self' blob:",
  "connect-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

// Redoc's path bar (the path beside the method) clips what overflows it, and at its font's normal line
// height that is the underscores of a path: `bulk_delete` read as `bulk delete`. A taller line holds them.
const PATH_BAR_STYLE = '.http-verb+span{line-height:1.5}';

const escapeAttribute = (text: string) => text.replace(/&/g, '&amp;').replace(/'/g, '&#39;').replace(/</g, '&lt;');

/** The page: Redoc's element (options as attributes, read by the bundle as it loads) and the bundle. */
export function referencePage(title: string, documentUrl: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeAttribute(title)} — API reference</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{margin:0}${PATH_BAR_STYLE}</style>
</head><body>
<redoc spec-url='${escapeAttribute(documentUrl)}' theme='${escapeAttribute(JSON.stringify(THEME))}'
  path-in-middle-panel='true' required-props-first='true'></redoc>
<script src='${escapeAttribute(bundleUrl)}'></script>
</body></html>`;
}
