import type { Kysely } from 'kysely';

/**
 * Sign-in sessions of the dashboard (auth/web-sessions.ts). A row holds only the hash of the
 * cookie's secret. The key it came from is referenced, so that revoking or expiring that key,
 * or suspending the tenant, ends the session on the next request (one join, on every svcd).
 */
export const webSessions = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('web_sessions')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('secret_hash', 'text', (c) => c.notNull())
      .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id'))
      .addColumn('key_id', 'text', (c) => c.notNull())
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .addColumn('expires_at', 'bigint', (c) => c.notNull())
      .addColumn('revoked_at', 'bigint')
      .execute();
    await db.schema.createIndex('web_sessions_expires').on('web_sessions').columns(['expires_at']).execute();
  },
};
