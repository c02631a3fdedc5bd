import { type Clock, unixSeconds } from '../clock.js';
import { UnauthorizedError } from '../errors.js';
import type { Store } from '../store/index.js';
import { digestsEqual, hashSecret, parseKey } from './key-format.js';
import type { KeyCache } from './key-cache.js';

/** last_used_at is written at most this often per key (spec 5.4). */
export const LAST_USED_WRITE_INTERVAL_S = 300;

export interface Principal {
  tenantId: string;
  keyId: string;
}

/** The token of an `Authorization: Bearer <token>` header, or null when it is not one. */
function bearerToken(authorization: string | undefined): string | null {
  const m = authorization === undefined ? null : /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  return m?.[1] ?? null;
}

/** Turns an `Authorization: Bearer <keyID>.<secret>` header into a principal, or 401. */
export class Authenticator {
  constructor(
    private readonly store: Store,
    private readonly cache: KeyCache,
    private readonly clock: Clock,
  ) {}

  /**
   * Whether the header names a key this process has in its cache: checking it then costs no
   * store query. (Unknown key ids are never cached, so a flood of made-up keys always misses.)
   */
  isCached(authorization: string | undefined): boolean {
    const token = bearerToken(authorization);
    const parsed = token === null ? null : parseKey(token);
    return parsed !== null && this.cache.get(parsed.id) !== undefined;
  }

  async authenticate(authorization: string | undefined): Promise<Principal> {
    const token = bearerToken(authorization);
    if (token === null) throw new UnauthorizedError('missing or malformed Authorization header (want: Bearer <api key>)');
    const parsed = parseKey(token);
    if (!parsed) throw new UnauthorizedError('invalid API key');

    let key = this.cache.get(parsed.id);
    if (!key) {
      key = await this.store.apiKeys.findForAuth(parsed.id);
      if (!key) throw new UnauthorizedError('invalid API key');
      this.cache.set(key);
    }
    const now = unixSeconds(this.clock);
    // One message for every failure, so the answer does not tell which part was wrong.
    const valid =
      digestsEqual(hashSecret(parsed.secret), key.secret_hash) &&
      key.revoked_at === null &&
      (key.expires_at === null || key.expires_at > now) &&
      key.tenant_status === 'active';
    if (!valid) throw new UnauthorizedError('invalid API key');

    if (key.last_used_at === null || now - key.last_used_at >= LAST_USED_WRITE_INTERVAL_S) {
      // The cached record is shared, so the next request sees the new value and does not write.
      key.last_used_at = now;
      await this.store.apiKeys.touch(key.id, now);
    }
    return { tenantId: key.tenant_id, keyId: key.id };
  }
}
