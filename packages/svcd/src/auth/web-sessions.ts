// Dashboard sign-in (beyond the spec): an API key, presented once, becomes a session held in an
// HttpOnly cookie, so the page never keeps a key where script could read it.
//
// The cookie is `<id>.<secret>`, like a key: the id finds the row, the secret (256 bits) proves
// possession and is stored only as its SHA-256. A session ends at its expiry (12 hours, never
// past its key's), at sign-out, and as soon as its key is revoked or expires or its tenant is
// suspended: every request re-reads the row joined to the key and the tenant, so this holds on
// every svcd at once (an API key's cached check allows 30 s; a session's allows none).
//
// CSRF: the cookie is SameSite=Strict, and a request that changes something must also carry
// the session's CSRF token in a header. The token is an HMAC of the secret, so nothing more is
// stored; only the page's own origin can read it (GET /v1/auth/session; svcd sends no CORS
// headers), and a cross-site form cannot set a header.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { SESSION_TTL_SECONDS, type WebSession } from '@svc/contract';
import { ExpiringLru } from '../cache/expiring-lru.js';
import { unixSeconds } from '../clock.js';
import { UnauthorizedError } from '../errors.js';
import type { Platform } from '../platform.js';
import type { Authenticator, Principal } from './authenticator.js';
import { digestsEqual, hashSecret, parseKey } from './key-format.js';

/** A cookie-authenticated request's session. */
export interface SessionPrincipal extends Principal {
  sessionId: string;
  csrfToken: string;
  expiresAt: number;
}

export interface WebSessionsDeps extends Pick<Platform, 'store' | 'audit' | 'clock'> {
  authenticator: Authenticator;
}

const SIGNED_OUT = 'session expired or signed out: sign in again';

function csrfTokenOf(secret: string): string {
  return createHmac('sha256', secret).update('svc csrf token').digest('base64url');
}

/** How long a session that held is remembered for the client-address gate (guards.ts). */
const RECENT_TTL_MS = 60_000;
const RECENT_MAX = 10_000;

export class WebSessions {
  /**
   * Ids of sessions that held lately. Never an authentication decision (every request still
   * reads the store); only whether an address that spent its allowance may still try one.
   */
  private readonly recent: ExpiringLru<string, true>;

  constructor(private readonly deps: WebSessionsDeps) {
    this.recent = new ExpiringLru(deps.clock, RECENT_TTL_MS, RECENT_MAX);
  }

  /** Whether this cookie names a session that held in this process within the last minute. */
  recentlyValid(cookie: string): boolean {
    const parsed = parseKey(cookie);
    return parsed !== null && this.recent.get(parsed.id) !== undefined;
  }

  /** Exchanges a valid API key for a session; the cookie's value is returned once, here. */
  async signIn(apiKey: string): Promise<{ cookie: string; session: WebSession }> {
    const principal = await this.deps.authenticator.authenticate(`Bearer ${apiKey}`);
    const key = await this.deps.store.apiKeys.findForAuth(principal.keyId);
    if (!key) throw new UnauthorizedError('invalid API key');
    const now = unixSeconds(this.deps.clock);
    const expiresAt = Math.min(now + SESSION_TTL_SECONDS, key.expires_at ?? Number.MAX_SAFE_INTEGER);
    const id = randomBytes(16).toString('hex');
    const secret = randomBytes(32).toString('base64url');
    await this.deps.store.webSessions.insert({
      id,
      secret_hash: hashSecret(secret),
      tenant_id: principal.tenantId,
      key_id: principal.keyId,
      created_at: now,
      expires_at: expiresAt,
      revoked_at: null,
    });
    this.deps.audit.info({ audit: true, event: 'session.created', tenant_id: principal.tenantId, key_id: principal.keyId, session_id: id }, 'dashboard sign-in');
    return {
      cookie: `${id}.${secret}`,
      session: { tenant_id: principal.tenantId, key_id: principal.keyId, expires_at: expiresAt, csrf_token: csrfTokenOf(secret) },
    };
  }

  /** The session a cookie names, or 401 when it does not hold (any reason: one message). */
  async authenticate(cookie: string): Promise<SessionPrincipal> {
    const parsed = parseKey(cookie);
    if (!parsed) throw new UnauthorizedError(SIGNED_OUT);
    const row = await this.deps.store.webSessions.findForAuth(parsed.id);
    const now = unixSeconds(this.deps.clock);
    const valid =
      row !== undefined &&
      digestsEqual(hashSecret(parsed.secret), row.secret_hash) &&
      row.revoked_at === null &&
      row.expires_at > now &&
      row.key_revoked_at === null &&
      (row.key_expires_at === null || row.key_expires_at > now) &&
      row.tenant_status === 'active';
    if (!valid) {
      this.recent.delete(parsed.id);
      throw new UnauthorizedError(SIGNED_OUT);
    }
    this.recent.set(parsed.id, true);
    return { tenantId: row.tenant_id, keyId: row.key_id, sessionId: row.id, csrfToken: csrfTokenOf(parsed.secret), expiresAt: row.expires_at };
  }

  /** Whether a presented CSRF header is the session's token (constant time). */
  csrfMatches(session: SessionPrincipal, presented: string | undefined): boolean {
    if (presented === undefined) return false;
    const a = Buffer.from(presented);
    const b = Buffer.from(session.csrfToken);
    return a.length === b.length && timingSafeEqual(a, b);
  }

  view(session: SessionPrincipal): WebSession {
    return { tenant_id: session.tenantId, key_id: session.keyId, expires_at: session.expiresAt, csrf_token: session.csrfToken };
  }

  async signOut(session: SessionPrincipal): Promise<void> {
    this.recent.delete(session.sessionId);
    await this.deps.store.webSessions.revoke(session.sessionId, unixSeconds(this.deps.clock));
    this.deps.audit.info({ audit: true, event: 'session.ended', tenant_id: session.tenantId, session_id: session.sessionId }, 'dashboard sign-out');
  }
}
