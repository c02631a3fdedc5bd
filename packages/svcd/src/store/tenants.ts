import type { Kysely } from 'kysely';
import type { Database, NewTenantRow, TenantRow } from './schema.js';
import { compiledOnce } from './compiled-once.js';

export type QuotaColumns = Pick<
  TenantRow,
  'max_services' | 'max_databases' | 'max_builds_concurrent' | 'max_env_vars_per_service' | 'max_disk_gb' | 'max_domains_per_service'
>;

export class TenantStore {
  // Read on every GET /v1/tenant: compiled once (see compiled-once.ts).
  private readonly byId: (id: string) => Promise<TenantRow[]>;

  constructor(private readonly db: Kysely<Database>) {
    this.byId = compiledOnce<Database, TenantRow>(db, () =>
      db.selectFrom('tenants').selectAll().where('id', '=', ''),
    );
  }

  async insert(row: NewTenantRow): Promise<void> {
    await this.db.insertInto('tenants').values(row).execute();
  }

  async findById(id: string): Promise<TenantRow | undefined> {
    return (await this.byId(id))[0];
  }

  /** The operator's list: oldest first, id breaking ties, so pages do not overlap. */
  async listPage(limit: number, offset: number, status?: TenantRow['status']): Promise<TenantRow[]> {
    let q = this.db.selectFrom('tenants').selectAll();
    if (status !== undefined) q = q.where('status', '=', status);
    return q.orderBy('created_at').orderBy('id').limit(limit).offset(offset).execute();
  }

  async findByEmailKey(emailKey: string): Promise<TenantRow | undefined> {
    return this.db.selectFrom('tenants').selectAll().where('email_key', '=', emailKey).executeTakeFirst();
  }

  /**
   * Takes the tenant's quota lock until the transaction ends, so that counting its resources and
   * inserting one is not interleaved with another create of the same tenant (READ COMMITTED lets
   * two transactions both count N-1 and both insert). Call it first in the transaction; false
   * when the tenant does not exist.
   *
   * One statement serves both engines: a write to the tenant row that changes nothing.
   * PostgreSQL locks the row for the transaction (FOR NO KEY UPDATE strength: other quota locks
   * and tenant updates wait, inserts that merely reference the tenant do not), and the next
   * statement's snapshot sees what the previous holder committed. SQLite has no row locks: a
   * write takes the database's write lock, held until commit. As the first statement it waits
   * (busy_timeout) like BEGIN IMMEDIATE would; after a read, a deferred transaction of a second
   * svcd process on the same file would fail with SQLITE_BUSY_SNAPSHOT instead. `updated_at` is
   * set to itself rather than `id`: updating a key column would make both engines check the
   * foreign keys that point at it.
   */
  async lockForQuota(id: string): Promise<boolean> {
    const r = await this.db
      .updateTable('tenants')
      .set((eb) => ({ updated_at: eb.ref('updated_at') }))
      .where('id', '=', id)
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
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
