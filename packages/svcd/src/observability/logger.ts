// svcd's pino logger. Logs are JSON lines on stdout that operators ship elsewhere, so no secret
// may reach them: a request is logged from an allow-list of fields (never its headers, which
// carry API keys and operator tokens, nor its body, which carries env values), and field names
// that hold secrets in svc's own objects are censored wherever a log call passes them by mistake.
import pino, { type DestinationStream, type Logger, type LoggerOptions } from 'pino';

/** What Fastify hands the `req` serializer (its request object); only these fields are read. */
interface LoggedRequest {
  method?: string;
  url?: string;
  host?: string;
  ip?: string;
  socket?: { remotePort?: number };
}

/**
 * The request as logged. The URL keeps its query string: no svc route takes a secret there
 * (`?reveal=true` is the request to reveal, not the secret), and operators need it to read the
 * log. Replaces Fastify's serializer, which is also an allow-list today, so that a change there
 * cannot start logging headers.
 */
function requestForLog(req: LoggedRequest): Record<string, unknown> {
  return { method: req.method, url: req.url, host: req.host, remoteAddress: req.ip, remotePort: req.socket?.remotePort };
}

/** Fields censored at the top level of a log line and one level down (pino's redact has no deeper wildcard). */
const SECRET_FIELDS = ['authorization', 'x-admin-token', 'x-bootstrap-token', 'cookie', 'password', 'api_key', 'admin_token', 'token', 'secret', 'env', 'body'];

export const REDACTED = '[redacted]';

export function svcdLoggerOptions(level: string): LoggerOptions {
  const quoted = SECRET_FIELDS.map((f) => `["${f}"]`);
  return {
    level,
    base: { svc: 'svcd' },
    serializers: { req: requestForLog },
    redact: { paths: [...quoted, ...quoted.map((q) => `*${q}`)], censor: REDACTED },
  };
}

/** The logger of a svcd process (stdout), or of a test that reads its lines from `destination`. */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  return destination ? pino(svcdLoggerOptions(level), destination) : pino(svcdLoggerOptions(level));
}
