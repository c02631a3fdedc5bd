import type { Kysely } from 'kysely';
import type { SealedText } from '../secrets/sealer.js';
import type { Database, IdempotencyRow } from './schema.js';
import { isUniqueViolation } from './dialect.js';

export interface IdempotencyClaim {
  tenantId: string;
  key: string;
  method: string;
  path: string;
  bodyHash: string;
  now: number;
  expiresAt: number;
}

export class IdempotencyStore {
  constructor(private readonly db: Kysely<Database>) {}

  /**
   * Claims the key for a first request (state pending). Returns undefined when claimed, or the
   * row that already holds the key. An expired row is replaced, so a key can be reused after
   * its window.
   */
  async claim(c: IdempotencyClaim): Promise<IdempotencyRow | undefined> {
    await this.db
      .deleteFrom('idempotency_keys')
      .where('tenant_id', '=', c.tenantId)
      .where('key', '=', c.key)
      .where('expires_at', '<=', c.now)
      .execute();
    try {
      await this.db
        .insertInto('idempotency_keys')
        .values({
          tenant_id: c.tenantId,
          key: c.key,
          method: c.method,
          path: c.path,
          body_hash: c.bodyHash,
          state: 'pending',
          status_code: null,
          content_type: null,
          response_body: null,
          created_at: c.now,
          expires_at: c.expiresAt,
        })
        .execute();
      return undefined;
    } catch (err) {
      if (!isUniqueViolation(err)) throw err;
    }
    return this.db
      .selectFrom('idempotency_keys')
      .selectAll()
      .where('tenant_id', '=', c.tenantId)
      .where('key', '=', c.key)
      .executeTakeFirst();
  }

  /**
   * Keeps the answer for replay. The body arrives sealed (the type says so): some answers carry
   * secrets (a new API key), and the store never holds them in plain text.
   */
  async complete(tenantId: string, key: string, status: number, contentType: string | null, sealedBody: SealedText): Promise<void> {
    await this.db
      .updateTable('idempotency_keys')
      .set({ state: 'done', status_code: status, content_type: contentType, response_body: sealedBody })
      .where('tenant_id', '=', tenantId)
      .where('key', '=', key)
      .execute();
  }

  /** Releases a claim whose response is not kept (server errors, oversize bodies). */
  async release(tenantId: string, key: string): Promise<void> {
    await this.db.deleteFrom('idempotency_keys').where('tenant_id', '=', tenantId).where('key', '=', key).execute();
  }

  /**
   * Deletes up to `limit` rows whose window ended, oldest first: one bounded delete, so a
   * backlog never holds SQLite's write lock for long (retention/retention.ts repeats it).
   */
  async pruneExpired(now: number, limit = 500): Promise<number> {
    const due = await this.db
      .selectFrom('idempotency_keys')
      .select(['tenant_id', 'key'])
      .where('expires_at', '<=', now)
      .orderBy('expires_at')
      .limit(limit)
      .execute();
    if (due.length === 0) return 0;
    const r = await this.db
      .deleteFrom('idempotency_keys')
      .where((eb) => eb(eb.refTuple('tenant_id', 'key'), 'in', due.map((d) => eb.tuple(d.tenant_id, d.key))))
      // Checked again on the row itself: a key reused meanwhile holds a new, unexpired claim.
      .where('expires_at', '<=', now)
      .executeTakeFirst();
    return Number(r.numDeletedRows);
  }
}
