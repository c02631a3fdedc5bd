import type { Kysely } from 'kysely';
import type { Database, SessionKind } from './schema.js';

/**
 * Sessions in progress (log streams, execs, syncs), one row each, counted per tenant for the
 * concurrency caps. Rows of a holder that died expire with its lease.
 */
export class SessionSlotStore {
  constructor(private readonly db: Kysely<Database>) {}

  async countLive(tenantId: string, kind: SessionKind, nowMs: number): Promise<number> {
    const r = await this.db
      .selectFrom('session_slots')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('tenant_id', '=', tenantId)
      .where('kind', '=', kind)
      .where('expires_at_ms', '>', nowMs)
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  async insert(row: { id: string; tenant_id: string; kind: SessionKind; holder: string; expires_at_ms: number }): Promise<void> {
    await this.db.insertInto('session_slots').values(row).execute();
  }

  async delete(id: string): Promise<void> {
    await this.db.deleteFrom('session_slots').where('id', '=', id).execute();
  }

  /** Extends every slot the holder has; answers how many it still has. */
  async renew(holder: string, expiresAtMs: number): Promise<number> {
    const r = await this.db.updateTable('session_slots').set({ expires_at_ms: expiresAtMs }).where('holder', '=', holder).executeTakeFirst();
    return Number(r.numUpdatedRows);
  }

  /** Rows of holders that died (expired leases) and of earlier boots of this instance. */
  async prune(nowMs: number, earlierBootsOf?: { instance: string; currentHolder: string }): Promise<number> {
    const r = await this.db.deleteFrom('session_slots').where((eb) => {
      const expired = eb('expires_at_ms', '<=', nowMs);
      if (!earlierBootsOf) return expired;
      return eb.or([expired, eb.and([eb('holder', 'like', `${earlierBootsOf.instance}/%`), eb('holder', '!=', earlierBootsOf.currentHolder)])]);
    }).executeTakeFirst();
    return Number(r.numDeletedRows);
  }
}
