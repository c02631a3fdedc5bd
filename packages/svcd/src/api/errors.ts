// The one place where errors become HTTP answers: every error body is {error, request_id}.
//
// A 5xx body names the failing part only ("metering store unavailable", "container engine
// unavailable", "internal server error"): what a backend said (hosts, users, file paths, driver
// and engine messages) goes to the log line, which carries the same request id (reqId) as the
// answer's X-Request-Id, so a client's report finds the detail.
import { STATUS_CODES } from 'node:http';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, ServerBusyError } from '../errors.js';
import { RuntimeUnavailableError } from '../runtime/index.js';

export const BODY_LIMIT_BYTES = 1024 * 1024;

/** The answer's request id (X-Request-Id, set by server.ts on every request). */
export const REQUEST_ID_HEADER = 'x-request-id';

/** The body of every error answer. */
export function errorBody(request: FastifyRequest, message: string): { error: string; request_id: string } {
  return { error: message, request_id: request.id };
}

/**
 * What reaches the handler: Fastify's own errors, and whatever a route or a library threw, which
 * may carry no `code`, or one that is not a string (Fastify's type gives every error a string).
 */
type HandledError = Omit<FastifyError, 'code'> & { code?: unknown };

function validationMessage(err: HandledError): string {
  const first = err.validation?.[0];
  if (!first) return err.message;
  const where = err.validationContext ?? 'request';
  const field = first.instancePath ? first.instancePath.slice(1).replaceAll('/', '.') : '';
  const missing = (first.params as { missingProperty?: string }).missingProperty;
  const extra = (first.params as { additionalProperty?: string }).additionalProperty;
  if (missing) return `${where}: ${field ? `${field}.` : ''}${missing} is required`;
  if (extra) return `${where}: ${field ? `${field}: ` : ''}unknown or invalid field ${JSON.stringify(extra)}`;
  return `${where}: ${field ? `${field} ` : ''}${first.message ?? 'is invalid'}`;
}

export function errorHandler(err: HandledError, request: FastifyRequest, reply: FastifyReply): void {
  if (reply.raw.headersSent) {
    // A stream failed after its answer started: nothing can be sent any more.
    request.log.warn({ err }, 'error after the response started');
    reply.raw.destroy();
    return;
  }
  // Errors are JSON whatever the route answers otherwise (text/plain logs).
  void reply.type('application/json; charset=utf-8');
  if (err instanceof AppError) {
    // A server at its own capacity is working as designed: worth a warning, not an error page.
    if (err instanceof ServerBusyError) request.log.warn({ err }, 'request refused: server busy');
    else if (err.status >= 500) request.log.error({ err }, 'request failed');
    // A 500 is a broken invariant: its message is for the log. Other messages are written for
    // the client (src/errors.ts); what they wrap is in `cause`, logged above.
    const message = err.status === 500 ? 'internal server error' : err.message;
    void reply.code(err.status).headers(err.headers).send(errorBody(request, message));
    return;
  }
  if (err instanceof RuntimeUnavailableError) {
    // Its message is the engine client's (socket path, address): logged, not answered.
    request.log.error({ err }, 'container engine unavailable');
    void reply.code(503).send(errorBody(request, 'container engine unavailable'));
    return;
  }
  if (err.validation) {
    void reply.code(400).send(errorBody(request, validationMessage(err)));
    return;
  }
  if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    void reply.code(413).send(errorBody(request, `request body too large (max ${BODY_LIMIT_BYTES / (1024 * 1024)} MB)`));
    return;
  }
  const status = err.statusCode ?? 500;
  if (status >= 400 && status < 500) {
    // Fastify's own refusals are written for the client. Anything else with a 4xx status is a
    // library's error that no domain code caught (the engine client's carry the engine's 404 or
    // 409, with its words): the status stands, the words go to the log.
    if (typeof err.code === 'string' && err.code.startsWith('FST_')) {
      void reply.code(status).send(errorBody(request, err.message));
      return;
    }
    request.log.warn({ err }, 'uncaught client error of a dependency');
    void reply.code(status).send(errorBody(request, (STATUS_CODES[status] ?? 'request refused').toLowerCase()));
    return;
  }
  request.log.error({ err }, 'unexpected error');
  void reply.code(500).send(errorBody(request, 'internal server error'));
}
