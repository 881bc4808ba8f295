// TEST-ONLY: a small HTTP front that owns a chDB data directory and answers the part of ClickHouse's HTTP
// interface that @clickhouse/client uses, so the real API and worker processes can run with
// EVENT_STORE=clickhouse on machines that have the engine (chDB, installed by `npm ci`) but no ClickHouse
// server. It is never part of the product: production runs a ClickHouse server (README, "Event store").
//
//   node test/clickhouse-server.ts --port 8123 --path /tmp/chdb-dir     (prints "listening <port>")
//
// What it answers, as ClickHouse's HTTP interface does:
// - GET/HEAD /ping: "Ok.\n".
// - POST (or GET) /: the statement is the `query` URL parameter followed by the body (an INSERT's data),
//   or the body alone; `database` (USE), `default_format`, `query_id` and `param_<name>` (query parameters,
//   given in ClickHouse's escaped text form and bound with `SET param_<name>`, exactly as the server reads
//   them); every other URL parameter is a setting (`SET name = value`), HTTP-only settings aside.
//   A gzip request body (Content-Encoding: gzip) is unpacked; answers are not compressed.
// - Answers carry X-ClickHouse-Query-Id, X-ClickHouse-Format, X-ClickHouse-Timezone and
//   X-ClickHouse-Summary; an error is the engine's exception text with its code in
//   X-ClickHouse-Exception-Code and the status the server gives that code (400, 404 or 500).
// Statements run one at a time (chDB has one session per directory).
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { gunzipSync } from 'node:zlib';
import { Session } from 'chdb';

/** Settings that shape the HTTP exchange itself, not the query (ClickHouse ignores them inside a session). */
const HTTP_ONLY = new Set([
  'wait_end_of_query',
  'send_progress_in_http_headers',
  'http_headers_progress_interval_ms',
  'http_response_buffer_size',
  'enable_http_compression',
  'http_zlib_compression_level',
  'http_native_compression_disable_checksumming_on_decompress',
  'cancel_http_readonly_queries_on_client_close',
]);
/** URL parameters that are neither settings nor query parameters. */
const NOT_SETTINGS = new Set([
  'query',
  'database',
  'default_format',
  'query_id',
  'session_id',
  'session_timeout',
  'session_check',
  'user',
  'password',
  'quota_key',
  'compress',
  'decompress',
  'role',
]);
/** The HTTP status ClickHouse's server answers for an exception code (HTTPHandler's mapping; others: 500). */
const STATUS_OF_CODE: Record<number, number> = {
  27: 400, // CANNOT_PARSE_INPUT_ASSERTION_FAILED
  36: 400, // BAD_ARGUMENTS
  38: 400, // CANNOT_PARSE_DATE
  41: 400, // CANNOT_PARSE_DATETIME
  43: 400, // ILLEGAL_TYPE_OF_ARGUMENT
  46: 404, // UNKNOWN_FUNCTION
  47: 404, // UNKNOWN_IDENTIFIER
  53: 400, // TYPE_MISMATCH
  60: 404, // UNKNOWN_TABLE
  62: 400, // SYNTAX_ERROR
  72: 400, // CANNOT_PARSE_NUMBER
  73: 400, // UNKNOWN_FORMAT
  81: 404, // UNKNOWN_DATABASE
  115: 400, // UNKNOWN_SETTING
  130: 400, // CANNOT_READ_ARRAY_FROM_TEXT
  456: 400, // UNKNOWN_QUERY_PARAMETER
  457: 400, // BAD_QUERY_PARAMETER
};

/** A string as a ClickHouse SQL literal. */
const literal = (value: string) => `'${value.replaceAll('\\', '\\\\').replaceAll("'", "\\'")}'`;
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;

class RequestError extends Error {
  readonly code: number;
  constructor(code: number, message: string) {
    super(message);
    this.code = code;
  }
}

async function bodyOf(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const raw = Buffer.concat(chunks);
  const encoding = req.headers['content-encoding'];
  if (encoding === 'gzip') return gunzipSync(raw).toString('utf8');
  if (encoding !== undefined && encoding !== 'identity')
    throw new RequestError(36, `Code: 36. DB::Exception: Unknown Content-Encoding: ${encoding}. (BAD_ARGUMENTS)`);
  return raw.toString('utf8');
}

/** The statement chDB runs for one request: the session's parameters and settings, the database, the query. */
function statementOf(url: URL, body: string): { sql: string; format: string } {
  const prelude: string[] = [];
  let format = 'TabSeparated';
  for (const [name, value] of url.searchParams) {
    if (name.startsWith('param_')) {
      if (!IDENTIFIER.test(name.slice(6)))
        throw new RequestError(
          457,
          `Code: 457. DB::Exception: Bad query parameter name ${name}. (BAD_QUERY_PARAMETER)`,
        );
      prelude.push(`SET ${name} = ${literal(value)}`);
    } else if (name === 'default_format') format = value;
    else if (!NOT_SETTINGS.has(name) && !HTTP_ONLY.has(name)) {
      if (!IDENTIFIER.test(name))
        throw new RequestError(115, `Code: 115. DB::Exception: Unknown setting ${name}. (UNKNOWN_SETTING)`);
      prelude.push(`SET ${name} = ${literal(value)}`);
    }
  }
  const database = url.searchParams.get('database') ?? 'default';
  if (!IDENTIFIER.test(database))
    throw new RequestError(81, `Code: 81. DB::Exception: Database ${database} does not exist. (UNKNOWN_DATABASE)`);
  prelude.push(`USE ${database}`);
  const query = url.searchParams.get('query');
  const text = query === null ? body : body ? `${query}\n${body}` : query;
  if (text.trim() === '') throw new RequestError(62, 'Code: 62. DB::Exception: Empty query. (SYNTAX_ERROR)');
  return { sql: `${prelude.join('; ')}; ${text}`, format };
}

export function serve(path: string, port: number, host = '127.0.0.1') {
  const session = new Session(path);
  let turn: Promise<unknown> = Promise.resolve();
  const inTurn = <T>(work: () => Promise<T>): Promise<T> => {
    const next = turn.then(work, work);
    turn = next.catch(() => undefined);
    return next;
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://front');
    if (url.pathname === '/ping' && (req.method === 'GET' || req.method === 'HEAD')) {
      res.writeHead(200, { 'content-type': 'text/plain; charset=UTF-8' }).end('Ok.\n');
      return;
    }
    if (url.pathname !== '/' || (req.method !== 'POST' && req.method !== 'GET')) {
      res.writeHead(404, { 'content-type': 'text/plain; charset=UTF-8' }).end(`There is no handle ${url.pathname}\n`);
      return;
    }
    const queryId = url.searchParams.get('query_id') ?? randomUUID();
    const headers = {
      'x-clickhouse-query-id': queryId,
      'x-clickhouse-timezone': 'UTC',
      'x-clickhouse-server-display-name': 'chdb-test-front',
    };
    try {
      const { sql, format } = statementOf(url, await bodyOf(req));
      const result = await inTurn(() => session.queryAsync(sql, { format }));
      const summary = {
        read_rows: String(result.rowsRead ?? 0),
        read_bytes: String(result.bytesRead ?? 0),
        written_rows: '0',
        written_bytes: '0',
        total_rows_to_read: '0',
        result_rows: String(result.rowsRead ?? 0),
        result_bytes: String(result.bytesRead ?? 0),
        elapsed_ns: String(Math.round((result.elapsed ?? 0) * 1e9)),
      };
      const bytes = Buffer.from(result.bytes());
      res
        .writeHead(200, {
          ...headers,
          'x-clickhouse-format': format,
          'x-clickhouse-summary': JSON.stringify(summary),
          'content-type': format.startsWith('JSON') ? 'application/json; charset=UTF-8' : 'text/plain; charset=UTF-8',
          'content-length': bytes.length,
        })
        .end(bytes);
    } catch (error) {
      const code =
        error instanceof RequestError
          ? error.code
          : Number((error as { clickhouseCode?: number }).clickhouseCode ?? 1001);
      const message = (error as Error).message;
      const text = /^Code: \d+/.test(message) ? message : `Code: ${code}. DB::Exception: ${message}. (STD_EXCEPTION)`;
      res
        .writeHead(STATUS_OF_CODE[code] ?? 500, {
          ...headers,
          'x-clickhouse-exception-code': String(code),
          'content-type': 'text/plain; charset=UTF-8',
        })
        .end(`${text} (version chdb-test-front)\n`);
    }
  };
  const server = createServer((req, res) => {
    handle(req, res).catch((error) => {
      if (!res.headersSent) res.writeHead(500).end(`Code: 1001. DB::Exception: ${(error as Error).message}\n`);
    });
  });
  server.listen(port, host);
  const close = () =>
    new Promise<void>((done) =>
      server.close(() => {
        session.close();
        done();
      }),
    );
  return { server, close };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({ options: { port: { type: 'string' }, path: { type: 'string' } } });
  if (!values.port || !values.path) {
    console.error('usage: node test/clickhouse-server.ts --port PORT --path CHDB_DIRECTORY');
    process.exit(2);
  }
  const { server, close } = serve(values.path, Number(values.port));
  server.on('listening', () => console.log(`listening ${(server.address() as { port: number }).port}`));
  for (const signal of ['SIGTERM', 'SIGINT'] as const)
    process.on(signal, () => void close().then(() => process.exit(0)));
}
