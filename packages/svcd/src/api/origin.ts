// Where a browser's request came from, for the requests a session cookie authenticates (and the
// sign-in that sets one). Browsers send Origin on every cross-origin request but plain GETs,
// on every POST, PUT, PATCH and DELETE, and on WebSocket upgrades; Sec-Fetch-Site on all of them.
import type { FastifyRequest } from 'fastify';

function header(request: FastifyRequest, name: string): string | undefined {
  const v = request.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** Whether an Origin header names the host the request was sent to (any scheme: the proxy terminates TLS). */
function sameOrigin(origin: string, host: string | undefined): boolean {
  try {
    return host !== undefined && new URL(origin).host === host.toLowerCase();
  } catch {
    return false; // "null" (a sandboxed frame, a file) and anything else unparsable
  }
}

/**
 * Why a browser request must be refused as coming from another origin, or null. A request
 * without these headers (curl, the CLI) is not a browser's and passes: what it presents is
 * judged on its own.
 */
export function crossOriginRefusal(request: FastifyRequest): string | null {
  const origin = header(request, 'origin');
  if (origin !== undefined && !sameOrigin(origin, header(request, 'host'))) return 'cross-origin request refused';
  // same-site is not enough: tenants' services are sibling hosts of the API on one base domain.
  const site = header(request, 'sec-fetch-site');
  if (site !== undefined && site !== 'same-origin' && site !== 'none') return 'cross-origin request refused';
  return null;
}
