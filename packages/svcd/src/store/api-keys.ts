import type { Kysely } from 'kysely';
import type { ApiKeyRow, Database, NewApiKeyRow, TenantRow } from './schema.js';
import { compiledOnce } from './compiled-once.js';

export type KeyWithTenantStatus = ApiKeyRow & { tenant_status: TenantRow['status'] };

export class ApiKeyStore {
  // Read on every authenticated request whose key is not cached: compiled once (see compiled-once.ts).
  private readonly forAuth: (id: string) => Promise<KeyWithTenantStatus[]>;

  constructor(private readonly db: Kysely<Database>) {
    this.forAuth = compiledOnce<Database, KeyWithTenantStatus>(db, () =>
      db
        .selectFrom('api_keys')
        .innerJoin('tenants', 'tenants.id', 'api_keys.tenant_id')
        .selectAll('api_keys')
        .select('tenants.status as tenant_status')
        .where('api_keys.id', '=', ''),
    );
  }

  async insert(row: NewApiKeyRow): Promise<void> {
    await this.db.insertInto('api_keys').values(row).execute();
  }

  /** What authentication needs in one read: the key and its tenant's status. */
  async findForAuth(id: string): Promise<KeyWithTenantStatus | undefined> {
    return (await this.forAuth(id))[0];
  }

  /** Non-revoked keys of a tenant, oldest first. */
  async listActive(tenantId: string): Promise<ApiKeyRow[]> {
    return this.db
      .selectFrom('api_keys')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('revoked_at', 'is', null)
      .orderBy('created_at')
      .orderBy('id')
      .execute();
  }

  async countActive(tenantId: string): Promise<number> {
    const r = await this.db
      .selectFrom('api_keys')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('tenant_id', '=', tenantId)
      .where('revoked_at', 'is', null)
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  /** Scoped by tenant: a foreign key id revokes nothing and reads as missing. */
  async revoke(tenantId: string, id: string, now: number): Promise<boolean> {
    const r = await this.db
      .updateTable('api_keys')
      .set({ revoked_at: now })
      .where('id', '=', id)
      .where('tenant_id', '=', tenantId)
      .where('revoked_at', 'is', null)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  async touch(id: string, now: number): Promise<void> {
    await this.db.updateTable('api_keys').set({ last_used_at: now }).where('id', '=', id).execute();
  }

  // Retention (retention/retention.ts): each call is one bounded statement. Nothing references
  // a key row (activity names key ids as text), so a deleted key only stops being found, which
  // for a revoked or expired key is what authentication answers anyway.

  /** Deletes up to `limit` keys revoked before `cutoff`. */
  async deleteRevokedBefore(cutoff: number, limit: number): Promise<number> {
    const batch = this.db.selectFrom('api_keys').select('id').where('revoked_at', '<', cutoff).orderBy('revoked_at').limit(limit);
    const r = await this.db.deleteFrom('api_keys').where('id', 'in', batch).executeTakeFirst();
    return Number(r.numDeletedRows);
  }

  /** Deletes up to `limit` keys that were never revoked and expired before `cutoff`. */
  async deleteExpiredBefore(cutoff: number, limit: number): Promise<number> {
    const batch = this.db.selectFrom('api_keys').select('id').where('revoked_at', 'is', null).where('expires_at', '<', cutoff).orderBy('expires_at').limit(limit);
    const r = await this.db.deleteFrom('api_keys').where('id', 'in', batch).executeTakeFirst();
    return Number(r.numDeletedRows);
  }

  /** The next tenant after `tenantId` (in id order) that has revoked keys: one index seek. */
  async nextTenantWithRevokedAfter(tenantId: string): Promise<string | undefined> {
    const r = await this.db
      .selectFrom('api_keys')
      .select((eb) => eb.fn.min<string | null>('tenant_id').as('tenant_id'))
      .where('tenant_id', '>', tenantId)
      .where('revoked_at', 'is not', null)
      .executeTakeFirst();
    return r?.tenant_id ?? undefined;
  }

  /** The tenant's revoked key at `offset`, most recently revoked first; undefined when it has fewer. */
  async revokedAt(tenantId: string, offset: number): Promise<{ revoked_at: number; id: string } | undefined> {
    const r = await this.db
      .selectFrom('api_keys')
      .select(['revoked_at', 'id'])
      .where('tenant_id', '=', tenantId)
      .where('revoked_at', 'is not', null)
      .orderBy('revoked_at', 'desc')
      .orderBy('id', 'desc')
      .limit(1)
      .offset(offset)
      .executeTakeFirst();
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-conversion -- a database value: Number() stays for a driver that gives int8 as text
    return r && r.revoked_at !== null ? { revoked_at: Number(r.revoked_at), id: r.id } : undefined;
  }

  /** Deletes up to `limit` of the tenant's revoked keys at `last` (from revokedAt) or revoked before it, oldest first. */
  async deleteRevokedUpTo(tenantId: string, last: { revoked_at: number; id: string }, limit: number): Promise<number> {
    const batch = this.db
      .selectFrom('api_keys')
      .select('id')
      .where('tenant_id', '=', tenantId)
      .where('revoked_at', 'is not', null)
      .where((eb) => eb(eb.refTuple('revoked_at', 'id'), '<=', eb.tuple(last.revoked_at, last.id)))
      .orderBy('revoked_at')
      .limit(limit);
    const r = await this.db.deleteFrom('api_keys').where('id', 'in', batch).executeTakeFirst();
    return Number(r.numDeletedRows);
  }
}
