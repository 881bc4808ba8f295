// PostHog's error body (drf-exceptions-hog): {type, code, detail, attr}. Every error the API
// answers with goes through ApiError, so the body shape lives in one place.

export type ErrorType =
  | 'validation_error'
  | 'invalid_request'
  | 'authentication_error'
  | 'throttled_error'
  | 'server_error';

export class ApiError extends Error {
  readonly status: number;
  readonly type: ErrorType;
  readonly code: string;
  readonly attr: string | null;
  readonly headers: Record<string, string>;

  constructor(
    status: number,
    type: ErrorType,
    code: string,
    detail: string,
    attr: string | null = null,
    headers: Record<string, string> = {},
  ) {
    super(detail);
    this.status = status;
    this.type = type;
    this.code = code;
    this.attr = attr;
    this.headers = headers;
  }

  get body() {
    return { type: this.type, code: this.code, detail: this.message, attr: this.attr };
  }
}

export const validationError = (detail: string, attr: string | null = null, code = 'invalid_input') =>
  new ApiError(400, 'validation_error', code, detail, attr);

export const notFound = (detail = 'Not found.') => new ApiError(404, 'invalid_request', 'not_found', detail);

export const permissionDenied = (detail = 'You do not have permission to perform this action.') =>
  new ApiError(403, 'authentication_error', 'permission_denied', detail);

export const notAuthenticated = () =>
  new ApiError(
    401,
    'authentication_error',
    'not_authenticated',
    'Authentication credentials were not provided.',
    null,
    {
      'WWW-Authenticate': 'Bearer',
    },
  );

export const authenticationFailed = (detail: string) =>
  new ApiError(401, 'authentication_error', 'authentication_failed', detail, null, { 'WWW-Authenticate': 'Bearer' });

/** `allowed`: the methods the path is routed for, named in the Allow header. */
export const methodNotAllowed = (method: string, allowed?: string[]) =>
  new ApiError(
    405,
    'invalid_request',
    'method_not_allowed',
    `Method "${method}" not allowed.`,
    null,
    allowed ? { Allow: allowed.join(', ') } : {},
  );

/** 410: what was there is gone for good (an expired access export's archive). */
export const gone = (detail: string) => new ApiError(410, 'invalid_request', 'gone', detail);

/** 409: the resource is not in a state that allows this (claimed, running, not built yet …). */
export const conflict = (detail: string) => new ApiError(409, 'invalid_request', 'conflict', detail);

export const parseError = (detail: string) => new ApiError(400, 'invalid_request', 'parse_error', detail);

export const payloadTooLarge = (limitBytes: number) =>
  new ApiError(
    413,
    'invalid_request',
    'payload_too_large',
    `Request body is larger than the limit of ${limitBytes} bytes.`,
  );

export const unsupportedMediaType = (contentType: string) =>
  new ApiError(415, 'invalid_request', 'unsupported_media_type', `Unsupported media type "${contentType}" in request.`);

/** 429 with Retry-After and, like every throttled answer, the X-RateLimit-* headers of the limit passed. */
export const throttled = (waitSeconds: number, limit: number) =>
  new ApiError(
    429,
    'throttled_error',
    'throttled',
    `Request was throttled. Expected available in ${waitSeconds} second${waitSeconds === 1 ? '' : 's'}.`,
    null,
    {
      'Retry-After': String(waitSeconds),
      'X-RateLimit-Limit': String(limit),
      'X-RateLimit-Remaining': '0',
      'X-RateLimit-Reset': String(waitSeconds),
    },
  );
