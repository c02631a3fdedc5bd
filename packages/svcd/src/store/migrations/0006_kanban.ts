import type { Kysely } from 'kysely';

export const kanban = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('kanban_boards')
      .addColumn('id', 'text', (c) => c.primaryKey())
      // One board per tenant: the constraint settles two creates at once.
      .addColumn('tenant_id', 'text', (c) => c.notNull().unique().references('tenants.id'))
      .addColumn('status', 'text', (c) => c.notNull())
      // What the tenant asked for: a suspension stops it, and it stays stopped until used.
      .addColumn('desired_state', 'text', (c) => c.notNull())
      .addColumn('sealed_admin_token', 'text', (c) => c.notNull())
      // The host port from --kanban-ports; kept for the board's life, freed with its row.
      .addColumn('host_port', 'integer', (c) => c.notNull().unique())
      .addColumn('container_id', 'text')
      .addColumn('last_error', 'text')
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .addColumn('updated_at', 'bigint', (c) => c.notNull())
      .execute();
  },
};
