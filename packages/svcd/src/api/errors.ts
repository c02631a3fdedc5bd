// The one place where errors become HTTP answers: every error body is {error: string}.
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../errors.js';

export const BODY_LIMIT_BYTES = 1024 * 1024;

function validationMessage(err: FastifyError): string {
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

export function errorHandler(err: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  if (reply.raw.headersSent) {
    // A stream failed after its answer started: nothing can be sent any more.
    request.log.warn({ err }, 'error after the response started');
    reply.raw.destroy();
    return;
  }
  // Errors are JSON whatever the route answers otherwise (text/plain logs).
  void reply.type('application/json; charset=utf-8');
  if (err instanceof AppError) {
    if (err.status >= 500) request.log.error({ err }, 'request failed');
    void reply.code(err.status).headers(err.headers).send({ error: err.status === 500 ? 'internal server error' : err.message });
    return;
  }
  if (err.validation) {
    void reply.code(400).send({ error: validationMessage(err) });
    return;
  }
  if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    void reply.code(413).send({ error: `request body too large (max ${BODY_LIMIT_BYTES / (1024 * 1024)} MB)` });
    return;
  }
  const status = err.statusCode ?? 500;
  if (status >= 400 && status < 500) {
    void reply.code(status).send({ error: err.message });
    return;
  }
  request.log.error({ err }, 'unexpected error');
  void reply.code(500).send({ error: 'internal server error' });
}
