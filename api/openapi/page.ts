// A self-contained, browsable reference page rendered from the OpenAPI document (no external
// scripts or fonts, so it works offline and behind strict CSPs).
import type { buildOpenApiDocument } from './document.ts';

type Document = ReturnType<typeof buildOpenApiDocument>;
type Schema = Record<string, any>;

const escapeHtml = (text: string) =>
  text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** A plausible example value for a schema: its own example/default first, then by type. */
export function exampleFor(schema: Schema | undefined, depth = 0): unknown {
  if (!schema || depth > 4) return null;
  if (schema.examples?.length) return schema.examples[0];
  if (schema.example !== undefined) return schema.example;
  if (schema.default !== undefined) return schema.default;
  if (schema.enum?.length) return schema.enum[0];
  const type = Array.isArray(schema.type) ? schema.type.find((t: string) => t !== 'null') : schema.type;
  switch (type) {
    case 'object': {
      const out: Record<string, unknown> = {};
      const required: string[] = schema.required ?? [];
      const props = Object.entries((schema.properties ?? {}) as Record<string, Schema>);
      for (const [key, value] of props.filter(([k]) => required.includes(k) || props.length <= 4))
        out[key] = exampleFor(value, depth + 1);
      return out;
    }
    case 'array':
      return [exampleFor(schema.items, depth + 1)];
    case 'integer':
    case 'number':
      return 1;
    case 'boolean':
      return true;
    case 'string':
      if (schema.format === 'uuid') return '0190e1b2-3c4d-7e5f-8a9b-0c1d2e3f4a5b';
      if (schema.format === 'date-time') return '2026-01-01T00:00:00Z';
      return 'string';
    default:
      return null;
  }
}

function curlExample(method: string, path: string, operation: any, baseUrl: string): string {
  const url = baseUrl + path.replace('{project_id}', '@current').replace(/\{[a-z_]+\}/g, '1');
  const lines = [`curl -X ${method.toUpperCase()} '${url}'`];
  if ((operation.security ?? []).length) lines.push(`  -H 'Authorization: Bearer $POSTHOG_PERSONAL_API_KEY'`);
  const body = operation.requestBody?.content?.['application/json']?.schema;
  if (body) {
    lines.push(`  -H 'Content-Type: application/json'`);
    lines.push(`  -d '${JSON.stringify(exampleFor(body)).replace(/'/g, "'\\''")}'`);
  }
  return lines.join(' \\\n');
}

export function renderReferencePage(document: Document, baseUrl: string): string {
  const byTag = new Map<string, { method: string; path: string; operation: any }[]>();
  for (const [path, methods] of Object.entries(document.paths)) {
    for (const [method, operation] of Object.entries(methods as Record<string, any>)) {
      const tag = operation.tags?.[0] ?? 'other';
      if (!byTag.has(tag)) byTag.set(tag, []);
      byTag.get(tag)!.push({ method, path, operation });
    }
  }
  const sections = [...byTag.entries()]
    .map(([tag, operations]) => {
      const items = operations
        .map(({ method, path, operation }) => {
          const params = (operation.parameters ?? [])
            .map(
              (p: any) =>
                `<tr><td><code>${escapeHtml(p.name)}</code></td><td>${p.in}</td><td>${p.required ? 'yes' : 'no'}</td><td><code>${escapeHtml(JSON.stringify(p.schema))}</code></td></tr>`,
            )
            .join('');
          const body = operation.requestBody?.content?.['application/json']?.schema;
          const responses = Object.entries(operation.responses ?? {})
            .map(([status, r]: [string, any]) => `<li><b>${status}</b> ${escapeHtml(r.description ?? '')}</li>`)
            .join('');
          return `<section class="op" id="${escapeHtml(operation.operationId)}">
  <h3><span class="method ${method}">${method.toUpperCase()}</span> <code class="path">${escapeHtml(path)}</code></h3>
  <p>${escapeHtml(operation.summary ?? '')}</p>
  <p class="scopes">${escapeHtml(operation.description ?? '')}</p>
  ${params ? `<table><thead><tr><th>parameter</th><th>in</th><th>required</th><th>schema</th></tr></thead><tbody>${params}</tbody></table>` : ''}
  ${body ? `<details><summary>Request body schema</summary><pre>${escapeHtml(JSON.stringify(body, null, 2))}</pre></details>` : ''}
  <h4>Example request</h4>
  <pre class="example">${escapeHtml(curlExample(method, path, operation, baseUrl))}</pre>
  <h4>Responses</h4><ul>${responses}</ul>
</section>`;
        })
        .join('\n');
      return `<h2 id="tag-${escapeHtml(tag)}">${escapeHtml(tag)}</h2>\n${items}`;
    })
    .join('\n');
  const nav = [...byTag.keys()].map((tag) => `<a href="#tag-${escapeHtml(tag)}">${escapeHtml(tag)}</a>`).join(' · ');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(document.info.title)} — API reference</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2rem auto;padding:0 1rem;color:#1d1f27}
code,pre{font-family:ui-monospace,monospace}pre{background:#f4f4f6;padding:.75rem;overflow-x:auto;border-radius:4px}
.op{border-top:1px solid #ddd;padding:.5rem 0}.method{display:inline-block;min-width:4.5em;text-align:center;border-radius:3px;color:#fff;padding:0 .3em;font-size:.85em}
.get{background:#2f80ed}.post{background:#27ae60}.patch{background:#f2994a}.put{background:#9b51e0}.delete{background:#eb5757}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ddd;padding:.2rem .5rem;text-align:left}.scopes{color:#555}
</style></head><body>
<h1>${escapeHtml(document.info.title)}</h1>
<p>${escapeHtml(document.info.description ?? '')} Machine-readable: <a href="/api/schema/">/api/schema/</a> (OpenAPI 3.1).</p>
<p>Authenticate with <code>Authorization: Bearer &lt;personal API key&gt;</code>. Errors always have the body <code>{"type","code","detail","attr"}</code>.</p>
<nav>${nav}</nav>
${sections}
</body></html>`;
}
