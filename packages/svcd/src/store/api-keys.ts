import type { Kysely } from 'kysely';
import type { ApiKeyRow, Database, NewApiKeyRow, TenantRow } from './schema.js';
import { compiledOnce } from './compiled-once.js';

export type KeyWithTenantStatus = ApiKeyRow & { tenant_status: TenantRow['status'] };

export class ApiKeyStore {
  // Read on every authenticated request whose key is not cached: compiled once (see compiled-once.ts).
  private readonly forAuth: (id: string) => Promise<KeyWithTenantStatus[]>;

  constructor(private readonly db: Kysely<Database>) {
    this.forAuth = compiledOnce<Database, KeyWithTenantStatus, [string]>(db, () =>
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
}
