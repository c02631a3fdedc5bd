import type { Kysely } from 'kysely';
import type { Database } from './schema.js';

// Builds and deployments are both a service's list, newest first by (created_at, id); retention
// walks them the same way (retention/retention.ts).

/** The tables of such lists. */
export type ServiceListTable = 'builds' | 'deployments';

/** Where a row stands in a list ordered by (created_at, id). */
export interface ListPosition {
  created_at: number;
  id: string;
}

/** The next service after `serviceId` (in id order) with rows in `table`: one index seek. */
export async function nextServiceAfter(db: Kysely<Database>, table: ServiceListTable, serviceId: string): Promise<string | undefined> {
  const r = await db
    .selectFrom(table)
    .select((eb) => eb.fn.min<string | null>('service_id').as('service_id'))
    .where('service_id', '>', serviceId)
    .executeTakeFirst();
  return r?.service_id ?? undefined;
}

/** The service's row at `offset` in its list (newest first); undefined when it has fewer. */
export async function positionAt(db: Kysely<Database>, table: ServiceListTable, serviceId: string, offset: number): Promise<ListPosition | undefined> {
  return db
    .selectFrom(table)
    .select(['created_at', 'id'])
    .where('service_id', '=', serviceId)
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(1)
    .offset(offset)
    .executeTakeFirst();
}
