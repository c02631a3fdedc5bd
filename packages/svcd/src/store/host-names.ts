import type { Kysely } from 'kysely';
import type { Database, HostNameKind, HostNameRow } from './schema.js';

/**
 * Reservations of hosts under the base domain (services' DNS labels and previews' hosts). The
 * primary key on `hostname` is the rule: a claim is an insert, and a taken host fails it with a
 * unique violation however many claims race, in one svcd or several.
 */
export class HostNameStore {
  constructor(private readonly db: Kysely<Database>) {}

  /** Throws a unique violation (isUniqueViolation) when the host is held already. */
  async claim(row: HostNameRow): Promise<void> {
    await this.db.insertInto('host_names').values(row).execute();
  }

  async find(hostname: string): Promise<HostNameRow | undefined> {
    return this.db.selectFrom('host_names').selectAll().where('hostname', '=', hostname).executeTakeFirst();
  }

  async release(kind: HostNameKind, resourceId: string): Promise<void> {
    await this.db.deleteFrom('host_names').where('resource_id', '=', resourceId).where('kind', '=', kind).execute();
  }

  /** The names custom domains held (when they are deleted). */
  async releaseDomains(domainIds: string[]): Promise<void> {
    if (domainIds.length === 0) return;
    await this.db.deleteFrom('host_names').where('kind', '=', 'domain').where('resource_id', 'in', domainIds).execute();
  }

  /** The hosts of every preview of an environment (before the previews themselves go). */
  async releasePreviewsOf(environmentId: string): Promise<void> {
    await this.db
      .deleteFrom('host_names')
      .where('kind', '=', 'preview')
      .where('resource_id', 'in', (eb) => eb.selectFrom('previews').select('id').where('environment_id', '=', environmentId))
      .execute();
  }
}
