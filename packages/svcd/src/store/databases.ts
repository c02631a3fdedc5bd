import { sql, type Kysely } from 'kysely';
import type { DatabaseRow, DatabasesTable, Database, NewDatabaseRow } from './schema.js';

export type DatabasePatch = Partial<Omit<DatabasesTable, 'id' | 'tenant_id' | 'created_at'>>;

/** Managed databases, scoped by tenant where a tenant asks. */
export class DatabaseStore {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(row: NewDatabaseRow): Promise<void> {
    await this.db.insertInto('databases').values(row).execute();
  }

  async find(tenantId: string, id: string): Promise<DatabaseRow | undefined> {
    return this.db.selectFrom('databases').selectAll().where('id', '=', id).where('tenant_id', '=', tenantId).executeTakeFirst();
  }

  async findAny(id: string): Promise<DatabaseRow | undefined> {
    return this.db.selectFrom('databases').selectAll().where('id', '=', id).executeTakeFirst();
  }

  /** Oldest first. */
  async list(tenantId: string, limit: number, offset: number): Promise<DatabaseRow[]> {
    return this.db.selectFrom('databases').selectAll().where('tenant_id', '=', tenantId).orderBy('created_at').orderBy('id').limit(limit).offset(offset).execute();
  }

  async listForTenant(tenantId: string): Promise<DatabaseRow[]> {
    return this.db.selectFrom('databases').selectAll().where('tenant_id', '=', tenantId).execute();
  }

  async count(tenantId: string): Promise<number> {
    const r = await this.db.selectFrom('databases').select((eb) => eb.fn.countAll<number | string>().as('n')).where('tenant_id', '=', tenantId).executeTakeFirstOrThrow();
    return Number(r.n);
  }

  /** Host ports in use, for picking a free one (the unique constraint settles races). */
  async hostPorts(): Promise<number[]> {
    return (await this.db.selectFrom('databases').select('host_port').execute()).map((r) => r.host_port);
  }

  /** Running for the first time also records when it first answered (ready_at). */
  async update(id: string, patch: DatabasePatch): Promise<void> {
    await this.db
      .updateTable('databases')
      .set(patch.status === 'running' ? { ...patch, ready_at: sql<number>`COALESCE(ready_at, ${patch.updated_at ?? null})` } : patch)
      .where('id', '=', id)
      .execute();
  }

  async delete(tenantId: string, id: string): Promise<boolean> {
    const r = await this.db.deleteFrom('databases').where('id', '=', id).where('tenant_id', '=', tenantId).executeTakeFirst();
    return Number(r.numDeletedRows) === 1;
  }
}
