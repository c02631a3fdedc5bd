// Idempotent replay (spec 8): on authenticated mutating routes, a retried request with the same
// Idempotency-Key, tenant, method, path and body within 10 minutes gets the stored response
// instead of running again; the same key with another request gets 409.
//
// Stored answers are sealed whole (AES-256-GCM under the master key), whatever the route: some
// carry secrets (POST /v1/auth/keys answers the new key, error messages may echo request input),
// and sealing every one cannot miss a route added later. The seal is bound to the row's tenant
// and key, so a stored answer copied into another tenant's row does not open there. Rows written
// in plain text before sealing were deleted by migration 0011 (see there why).
import { createHash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Deps } from '../app.js';
import { unixSeconds } from '../clock.js';
import { ConflictError, InternalError, ValidationError } from '../errors.js';
import { UnsealError, type Sealer } from '../secrets/sealer.js';
import type { SvcRouteConfig } from './route-config.js';

export const IDEMPOTENCY_WINDOW_S = 600;
/** Responses larger than this are not stored; a retry of such a request runs again. */
export const IDEMPOTENCY_MAX_STORED_BYTES = 8 * 1024;
const MUTATING = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);
export const REPLAY_HEADER = 'idempotent-replayed';

/** Authenticated mutating routes, except those that opt out (exec). */
export function isIdempotencyCandidate(route: SvcRouteConfig, methods: readonly string[]): boolean {
  return route.auth === 'key' && !route.noIdempotency && methods.some((m) => MUTATING.has(m));
}

/** Route-level preHandler of the candidate routes. */
export function idempotencyPreHandler(deps: Deps) {
  return async function claim(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const raw = request.headers['idempotency-key'];
    if (raw === undefined || !MUTATING.has(request.method)) return;
    const key = Array.isArray(raw) ? raw[0] : raw;
    if (!key || key.length > 255) throw new ValidationError('Idempotency-Key must be 1 to 255 characters');
    const tenantId = request.principal?.tenantId;
    if (!tenantId) return;

    const now = unixSeconds(deps.clock);
    const bodyHash = createHash('sha256').update(request.rawBody ?? '').digest('hex');
    const held = await deps.store.idempotency.claim({
      tenantId,
      key,
      method: request.method,
      path: request.url,
      bodyHash,
      now,
      expiresAt: now + IDEMPOTENCY_WINDOW_S,
    });
    if (!held) {
      request.idempotencyClaim = { tenantId, key };
      return;
    }
    if (held.method !== request.method || held.path !== request.url || held.body_hash !== bodyHash) {
      throw new ConflictError('Idempotency-Key was already used with a different request');
    }
    if (held.state !== 'done' || held.status_code === null) {
      throw new ConflictError('a request with this Idempotency-Key is still in progress');
    }
    // Opened before any header is set, so that a row that does not open is a plain 500.
    const body = held.response_body === null ? '' : openStoredResponse(deps.sealer, tenantId, key, held.response_body);
    void reply.code(held.status_code).header(REPLAY_HEADER, 'true');
    if (held.content_type) void reply.header('content-type', held.content_type);
    return reply.send(body);
  };
}

/** GCM additional data of a stored answer: the row it belongs to (JSON, so no separator is ambiguous). */
function sealContext(tenantId: string, key: string): string {
  return JSON.stringify(['idempotency', tenantId, key]);
}

/**
 * A stored answer that does not open (another master key, or a row altered or copied in the
 * store) fails the replay with a 500 rather than running the request again: running it again
 * could, say, create a second API key, which is what the client's Idempotency-Key forbids. A
 * retry with a new key works; the row expires with its window.
 */
function openStoredResponse(sealer: Sealer, tenantId: string, key: string, sealed: string): string {
  try {
    return sealer.open(sealed, sealContext(tenantId, key));
  } catch (err) {
    if (err instanceof UnsealError) throw new InternalError(`stored idempotent response of tenant ${tenantId} does not open: ${err.message}`);
    throw err;
  }
}

/**
 * Which answers are kept for replay: not server errors or 429s (a retry should run again), not
 * oversize ones. The size is that of the answer itself; its sealed form is about a third larger
 * (base64url) and is not what the cap is about.
 */
export function isReplayable(status: number, bodyBytes: number): boolean {
  return status < 500 && status !== 429 && bodyBytes <= IDEMPOTENCY_MAX_STORED_BYTES;
}

export function idempotencyOnSend(deps: Deps) {
  return async function store(request: FastifyRequest, reply: FastifyReply, payload: unknown): Promise<unknown> {
    const claim = request.idempotencyClaim;
    if (!claim) return payload;
    request.idempotencyClaim = undefined;
    const status = reply.statusCode;
    const body = typeof payload === 'string' ? payload : Buffer.isBuffer(payload) ? payload.toString('utf8') : null;
    if (body !== null && isReplayable(status, Buffer.byteLength(body))) {
      const ct = reply.getHeader('content-type');
      const sealed = deps.sealer.seal(body, sealContext(claim.tenantId, claim.key));
      await deps.store.idempotency.complete(claim.tenantId, claim.key, status, typeof ct === 'string' ? ct : null, sealed);
    } else {
      await deps.store.idempotency.release(claim.tenantId, claim.key);
    }
    return payload;
  };
}
