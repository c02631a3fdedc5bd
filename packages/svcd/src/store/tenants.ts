import type { Kysely } from 'kysely';
import type { Database, NewTenantRow, TenantRow } from './schema.js';
import { compiledOnce } from './compiled-once.js';

export type QuotaColumns = Pick<
  TenantRow,
  'max_services' | 'max_databases' | 'max_builds_concurrent' | 'max_env_vars_per_service'
>;

export class TenantStore {
  // Read on every GET /v1/tenant: compiled once (see compiled-once.ts).
  private readonly byId: (id: string) => Promise<TenantRow[]>;

  constructor(private readonly db: Kysely<Database>) {
    this.byId = compiledOnce<Database, TenantRow, [string]>(db, () =>
      db.selectFrom('tenants').selectAll().where('id', '=', ''),
    );
  }

  async insert(row: NewTenantRow): Promise<void> {
    await this.db.insertInto('tenants').values(row).execute();
  }

  async findById(id: string): Promise<TenantRow | undefined> {
    return (await this.byId(id))[0];
  }

  async findByEmailKey(emailKey: string): Promise<TenantRow | undefined> {
    return this.db.selectFrom('tenants').selectAll().where('email_key', '=', emailKey).executeTakeFirst();
  }

  async countActive(): Promise<number> {
    const r = await this.db
      .selectFrom('tenants')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('status', '=', 'active')
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  async rename(id: string, name: string, nameKey: string, now: number): Promise<boolean> {
    const r = await this.db
      .updateTable('tenants')
      .set({ name, name_key: nameKey, updated_at: now })
      .where('id', '=', id)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Moves the tenant to `to` only from `from`; false when it was not in `from` (or is missing). */
  async transitionStatus(id: string, from: TenantRow['status'], to: TenantRow['status'], now: number): Promise<boolean> {
    const r = await this.db
      .updateTable('tenants')
      .set({ status: to, updated_at: now })
      .where('id', '=', id)
      .where('status', '=', from)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  async updateQuotas(id: string, patch: Partial<QuotaColumns>, now: number): Promise<boolean> {
    const r = await this.db
      .updateTable('tenants')
      .set({ ...patch, updated_at: now })
      .where('id', '=', id)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }
}
