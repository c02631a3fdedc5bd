import { sql, type Kysely } from 'kysely';
import type { Database, KanbanBoardRow, KanbanBoardsTable } from './schema.js';

export type KanbanPatch = Partial<Omit<KanbanBoardsTable, 'id' | 'tenant_id' | 'created_at'>>;

/** Task boards: at most one per tenant. */
export class KanbanStore {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(row: KanbanBoardRow): Promise<void> {
    await this.db.insertInto('kanban_boards').values(row).execute();
  }

  async findForTenant(tenantId: string): Promise<KanbanBoardRow | undefined> {
    return this.db.selectFrom('kanban_boards').selectAll().where('tenant_id', '=', tenantId).executeTakeFirst();
  }

  /** At most one; a list for what handles every per-tenant resource alike (suspension). */
  async listForTenant(tenantId: string): Promise<KanbanBoardRow[]> {
    return this.db.selectFrom('kanban_boards').selectAll().where('tenant_id', '=', tenantId).execute();
  }

  async findAny(id: string): Promise<KanbanBoardRow | undefined> {
    return this.db.selectFrom('kanban_boards').selectAll().where('id', '=', id).executeTakeFirst();
  }

  async listAll(): Promise<KanbanBoardRow[]> {
    return this.db.selectFrom('kanban_boards').selectAll().execute();
  }

  /** Host ports in use, for picking a free one (the unique constraint settles races). */
  async hostPorts(): Promise<number[]> {
    return (await this.db.selectFrom('kanban_boards').select('host_port').execute()).map((r) => r.host_port);
  }

  /** Running for the first time also records when it first answered (ready_at). */
  async update(id: string, patch: KanbanPatch): Promise<void> {
    await this.db
      .updateTable('kanban_boards')
      .set(patch.status === 'running' ? { ...patch, ready_at: sql<number>`COALESCE(ready_at, ${patch.updated_at ?? null})` } : patch)
      .where('id', '=', id)
      .execute();
  }

  async delete(tenantId: string, id: string): Promise<boolean> {
    const r = await this.db.deleteFrom('kanban_boards').where('id', '=', id).where('tenant_id', '=', tenantId).executeTakeFirst();
    return Number(r.numDeletedRows) === 1;
  }
}
