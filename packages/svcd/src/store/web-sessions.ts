import type { Kysely } from 'kysely';
import type { Database, WebSessionRow } from './schema.js';

/** A session with what decides whether it still holds: its key's state and its tenant's. */
export type WebSessionForAuth = WebSessionRow & {
  key_revoked_at: number | null;
  key_expires_at: number | null;
  tenant_status: 'active' | 'suspended';
};

export class WebSessionStore {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(row: WebSessionRow): Promise<void> {
    await this.db.insertInto('web_sessions').values(row).execute();
  }

  /**
   * One read per cookie-authenticated request. A key deleted by retention leaves no row to join:
   * the session is then not found, as a revoked key's would be refused.
   */
  async findForAuth(id: string): Promise<WebSessionForAuth | undefined> {
    return this.db
      .selectFrom('web_sessions')
      .innerJoin('api_keys', 'api_keys.id', 'web_sessions.key_id')
      .innerJoin('tenants', 'tenants.id', 'web_sessions.tenant_id')
      .selectAll('web_sessions')
      .select(['api_keys.revoked_at as key_revoked_at', 'api_keys.expires_at as key_expires_at', 'tenants.status as tenant_status'])
      .where('web_sessions.id', '=', id)
      .executeTakeFirst();
  }

  async revoke(id: string, now: number): Promise<boolean> {
    const r = await this.db.updateTable('web_sessions').set({ revoked_at: now }).where('id', '=', id).where('revoked_at', 'is', null).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /**
   * Every live session of the tenant (its suspension): they stay refused once it is reactivated,
   * as its sessions' keys do not (a reactivated tenant signs in again).
   */
  async revokeTenant(tenantId: string, now: number): Promise<number> {
    const r = await this.db.updateTable('web_sessions').set({ revoked_at: now }).where('tenant_id', '=', tenantId).where('revoked_at', 'is', null).executeTakeFirst();
    return Number(r.numUpdatedRows);
  }

  /** Retention: up to `limit` sessions that expired before `cutoff` (a revoked one expires too). */
  async deleteExpiredBefore(cutoff: number, limit: number): Promise<number> {
    const batch = this.db.selectFrom('web_sessions').select('id').where('expires_at', '<', cutoff).orderBy('expires_at').limit(limit);
    const r = await this.db.deleteFrom('web_sessions').where('id', 'in', batch).executeTakeFirst();
    return Number(r.numDeletedRows);
  }
}
