// Typed errors. Domain code throws these; api/errors.ts maps each to its status and `{error}`
// body in one place. Anything else is a 500 with a generic message.
//
// The message of a 4xx or 503 is the client's answer: it says what the client can act on, or
// which part of svc failed, never a backend's own words (hosts, users, paths, driver messages).
// Those go in `cause`, which is logged with the request id and never sent.

export class AppError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly headers: Record<string, string> = {},
    cause?: unknown,
  ) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
  }
}

/** 400: the request is malformed or breaks a rule. */
export class ValidationError extends AppError {
  constructor(message: string) {
    super(400, message);
  }
}

/** 401: bad or missing credentials. */
export class UnauthorizedError extends AppError {
  constructor(message = 'unauthorized') {
    super(401, message);
  }
}

/** 403: the caller is known but may not do this. */
export class ForbiddenError extends AppError {
  constructor(message: string) {
    super(403, message);
  }
}

/** 404: missing, or owned by another tenant; the two are deliberately the same answer. */
export class NotFoundError extends AppError {
  constructor(what: string) {
    super(404, `${what} not found`);
  }
}

/** 409: quota exceeded, name conflict, wrong state. */
export class ConflictError extends AppError {
  constructor(message: string) {
    super(409, message);
  }
}

/** 409 with the spec's fixed prefix for quota hits (a quota hit is 409, not 429). */
export class QuotaExceededError extends ConflictError {
  constructor(detail: string) {
    super(`quota exceeded: ${detail}`);
  }
}

/** 413: a body or a file past a cap the route states. */
export class TooLargeError extends AppError {
  constructor(message: string) {
    super(413, message);
  }
}

/** 422: registration uniqueness; the message is vague on purpose. */
export class UnprocessableError extends AppError {
  constructor(message: string) {
    super(422, message);
  }
}

/** 429 with Retry-After in whole seconds; `limiter` says which limit it was (operator metrics). */
export class RateLimitedError extends AppError {
  constructor(
    retryAfterSeconds: number,
    readonly limiter: 'tenant' | 'global' | 'client_ip' | 'registration_ip' | 'registration_global' | 'client_connections',
    message = 'rate limit exceeded',
  ) {
    super(429, message, { 'retry-after': String(Math.max(1, Math.ceil(retryAfterSeconds))) });
  }
}

/**
 * 503: a dependency (engine, store, registration capacity) is unavailable. `message` names the
 * failing part ("metering store unavailable"); the underlying error goes in `cause`.
 */
export class UnavailableError extends AppError {
  constructor(message: string, cause?: unknown) {
    super(503, message, {}, cause);
  }
}

/** 500 for broken invariants: the message is logged, the client sees a generic one. */
export class InternalError extends AppError {
  constructor(message: string, cause?: unknown) {
    super(500, message, {}, cause);
  }
}

/** 503 with Retry-After: this svcd is at one of its own capacity limits; another try may land elsewhere or later. */
export class ServerBusyError extends AppError {
  constructor(message: string, retryAfterSeconds: number) {
    super(503, message, { 'retry-after': String(retryAfterSeconds) });
  }
}
