import { sql, type Kysely } from 'kysely';

// A copy, not an import: a migration must stay what it was when the code around it changes.
const DNS_LABEL_MAX = 63;

/**
 * One namespace for every host svc's proxy answers under the base domain: a service's DNS label
 * (`<label>.<base>`) and a preview's `<name>-<environmentID>` (`<name>-<environmentID>.<base>`).
 * The hostname is stored relative to the base domain, so reservations hold whether or not
 * --base-domain is set (and across a change of it); the primary key is what makes two claims of
 * one host impossible, whichever tenants and kinds make them, even at the same moment.
 *
 * Backfill, oldest first: services, then previews. Services created without a base domain were
 * never checked against each other, so two may share a label: the older one keeps it and the
 * newer gets `<label>-<first 8 of its id>` (without a base domain the label is in no address; with
 * one, only the older service ever answered at the shared host). A preview whose host a service
 * already holds is left without a reservation: the service's route came first in the proxy, so
 * that host never reached the preview, and its name cannot be changed here.
 */
export const hostNames = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema
      .createTable('host_names')
      .addColumn('hostname', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('kind', 'text', (c) => c.notNull())
      .addColumn('resource_id', 'text', (c) => c.notNull())
      .addColumn('created_at', 'bigint', (c) => c.notNull())
      .execute();
    // Releases go by resource (a service, a preview) when it is deleted.
    await db.schema.createIndex('host_names_resource').on('host_names').columns(['resource_id', 'kind']).execute();

    const taken = new Set<string>();
    const reserve = async (hostname: string, tenantId: string, kind: 'service' | 'preview', resourceId: string, createdAt: number | string) => {
      taken.add(hostname);
      await sql`insert into host_names (hostname, tenant_id, kind, resource_id, created_at)
                values (${hostname}, ${tenantId}, ${kind}, ${resourceId}, ${createdAt})`.execute(db);
    };

    const services = await sql<{ id: string; tenant_id: string; dns_label: string; created_at: number | string }>`
      select id, tenant_id, dns_label, created_at from services order by created_at, id`.execute(db);
    for (const s of services.rows) {
      let label = s.dns_label;
      if (taken.has(label)) {
        const stem = label.slice(0, DNS_LABEL_MAX - 9).replace(/-+$/g, '');
        label = `${stem}-${s.id.slice(0, 8)}`;
        for (let n = 2; taken.has(label); n++) label = `${stem}-${s.id.slice(0, 8 - String(n).length)}${n}`;
        await sql`update services set dns_label = ${label} where id = ${s.id}`.execute(db);
      }
      await reserve(label, s.tenant_id, 'service', s.id, s.created_at);
    }

    const previews = await sql<{ id: string; tenant_id: string; name: string; environment_id: string; created_at: number | string }>`
      select id, tenant_id, name, environment_id, created_at from previews order by created_at, id`.execute(db);
    for (const p of previews.rows) {
      const hostname = `${p.name.toLowerCase()}-${p.environment_id}`;
      if (!taken.has(hostname)) await reserve(hostname, p.tenant_id, 'preview', p.id, p.created_at);
    }
  },
};
