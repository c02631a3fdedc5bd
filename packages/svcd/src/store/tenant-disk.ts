import type { Kysely } from 'kysely';
import type { Database } from './schema.js';

/** The disk each tenant's workloads took at the last measurement. */
export class TenantDiskStore {
  constructor(private readonly db: Kysely<Database>) {}

  async record(tenantId: string, usedBytes: number, measuredAt: number): Promise<void> {
    await this.db
      .insertInto('tenant_disk')
      .values({ tenant_id: tenantId, used_bytes: usedBytes, measured_at: measuredAt })
      .onConflict((oc) => oc.column('tenant_id').doUpdateSet({ used_bytes: usedBytes, measured_at: measuredAt }))
      .execute();
  }

  async tenantIds(): Promise<string[]> {
    return (await this.db.selectFrom('tenant_disk').select('tenant_id').execute()).map((r) => r.tenant_id);
  }

  async find(tenantId: string): Promise<{ used_bytes: number; measured_at: number } | undefined> {
    return this.db.selectFrom('tenant_disk').select(['used_bytes', 'measured_at']).where('tenant_id', '=', tenantId).executeTakeFirst();
  }
}
