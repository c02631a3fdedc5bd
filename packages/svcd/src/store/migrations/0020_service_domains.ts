import type { Kysely } from 'kysely';

/**
 * Custom domains of services (issue 22). A row is a tenant's claim of a host name for one of its
 * services; many tenants may claim one name, and the first to prove ownership (the TXT record)
 * takes it in host_names (kind 'domain', the full name), the one namespace of every host svc
 * routes. `max_domains_per_service` is the tenant's quota of them.
 */
export const serviceDomains = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('service_domains')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull().references('tenants.id'))
      .addColumn('service_id', 'text', (c) => c.notNull().references('services.id').onDelete('cascade'))
      .addColumn('hostname', 'text', (c) => c.notNull())
      .addColumn('token', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('last_error', 'text')
      .addColumn('verified_at', 'bigint')
      .addColumn('certificate_expires_at', 'bigint')
      .addColumn('checked_at', 'bigint')
      // When the checker looks at it next; misses of the record in a row (a record that vanished).
      .addColumn('next_check_at', 'bigint', (c) => c.notNull())
      .addColumn('failures', 'integer', (c) => c.notNull().defaultTo(0))
      // When the last miss was counted (at most one per 6 hours), and since when lookups fail.
      .addColumn('missed_at', 'bigint')
      .addColumn('lookup_failing_since', 'bigint')
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .execute();
    // One claim of a name per tenant; other tenants may claim it too until one proves it.
    await db.schema.createIndex('service_domains_tenant_hostname').on('service_domains').columns(['tenant_id', 'hostname']).unique().execute();
    await db.schema.createIndex('service_domains_service').on('service_domains').columns(['service_id', 'created_at']).execute();
    await db.schema.createIndex('service_domains_due').on('service_domains').columns(['next_check_at']).execute();
    await db.schema.alterTable('tenants').addColumn('max_domains_per_service', 'integer', (c) => c.notNull().defaultTo(5)).execute();
  },
};
