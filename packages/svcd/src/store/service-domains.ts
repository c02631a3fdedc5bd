import type { Kysely, Updateable } from 'kysely';
import type { Database, NewServiceDomainRow, ServiceDomainRow, ServiceDomainsTable } from './schema.js';

/** The fields a check writes. */
export type DomainUpdate = Pick<
  Updateable<ServiceDomainsTable>,
  'status' | 'last_error' | 'verified_at' | 'certificate_expires_at' | 'checked_at' | 'next_check_at' | 'failures' | 'missed_at' | 'lookup_failing_since'
>;

/** Custom domains of services, scoped by tenant for every request-driven read and write. */
export class ServiceDomainStore {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(row: NewServiceDomainRow): Promise<void> {
    await this.db.insertInto('service_domains').values(row).execute();
  }

  async find(tenantId: string, serviceId: string, id: string): Promise<ServiceDomainRow | undefined> {
    return this.db
      .selectFrom('service_domains')
      .selectAll()
      .where('id', '=', id)
      .where('service_id', '=', serviceId)
      .where('tenant_id', '=', tenantId)
      .executeTakeFirst();
  }

  async listForService(tenantId: string, serviceId: string): Promise<ServiceDomainRow[]> {
    return this.db
      .selectFrom('service_domains')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('service_id', '=', serviceId)
      .orderBy('created_at')
      .orderBy('id')
      .execute();
  }

  async countForService(serviceId: string): Promise<number> {
    const r = await this.db
      .selectFrom('service_domains')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('service_id', '=', serviceId)
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  async delete(tenantId: string, id: string): Promise<boolean> {
    const r = await this.db.deleteFrom('service_domains').where('id', '=', id).where('tenant_id', '=', tenantId).executeTakeFirst();
    return Number(r.numDeletedRows) === 1;
  }

  /**
   * The domains whose check is due (the checker's work), in turns: every tenant's most overdue
   * claim, then every tenant's second, and so on, so that no tenant's many claims fill the batch.
   */
  async due(now: number, limit: number): Promise<ServiceDomainRow[]> {
    const turns = this.db
      .selectFrom('service_domains')
      .select('id')
      .select((eb) => eb.fn.agg<number>('row_number').over((ob) => ob.partitionBy('tenant_id').orderBy('next_check_at').orderBy('id')).as('turn'))
      .where('next_check_at', '<=', now)
      .as('t');
    return this.db
      .selectFrom('service_domains')
      .innerJoin(turns, 't.id', 'service_domains.id')
      .selectAll('service_domains')
      .orderBy('t.turn')
      .orderBy('service_domains.next_check_at')
      .orderBy('service_domains.id')
      .limit(limit)
      .execute();
  }

  /**
   * Takes the right to check the claim now: false when it was checked less than `cooldownS` ago
   * (by a concurrent request too, since the update is the test).
   */
  async reserveCheck(id: string, now: number, cooldownS: number): Promise<boolean> {
    const r = await this.db
      .updateTable('service_domains')
      .set({ checked_at: now })
      .where('id', '=', id)
      .where((eb) => eb.or([eb('checked_at', 'is', null), eb('checked_at', '<=', now - cooldownS)]))
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** By id alone: the checker's re-read before it writes. */
  async byId(id: string): Promise<ServiceDomainRow | undefined> {
    return this.db.selectFrom('service_domains').selectAll().where('id', '=', id).executeTakeFirst();
  }

  /**
   * Writes a check's outcome unless the claim changed since it was read (removed, or written by
   * another check): compare-and-set on what every write moves. False: nothing was written.
   */
  async update(seen: Pick<ServiceDomainRow, 'id' | 'status' | 'next_check_at' | 'failures' | 'verified_at'>, patch: DomainUpdate): Promise<boolean> {
    const q = this.db
      .updateTable('service_domains')
      .set(patch)
      .where('id', '=', seen.id)
      .where('status', '=', seen.status)
      .where('next_check_at', '=', seen.next_check_at)
      .where('failures', '=', seen.failures);
    const r = await (seen.verified_at === null ? q.where('verified_at', 'is', null) : q.where('verified_at', '=', seen.verified_at)).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** The proven names, their services and certificates' ends: what the proxy routes (with the services' own hosts). */
  async routed(): Promise<Array<Pick<ServiceDomainRow, 'service_id' | 'hostname' | 'certificate_expires_at'>>> {
    return this.db.selectFrom('service_domains').select(['service_id', 'hostname', 'certificate_expires_at']).where('verified_at', 'is not', null).orderBy('hostname').execute();
  }

  /** Certified domains whose certificate ends before `at` (operator metrics). */
  async countExpiringBefore(at: number): Promise<number> {
    const r = await this.db
      .selectFrom('service_domains')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('verified_at', 'is not', null)
      .where('certificate_expires_at', '<', at)
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  /** Counts by status, for the operator's metrics. */
  async countByStatus(): Promise<Array<{ status: ServiceDomainRow['status']; n: number }>> {
    const rows = await this.db
      .selectFrom('service_domains')
      .select((eb) => ['status', eb.fn.countAll<number | string>().as('n')])
      .groupBy('status')
      .execute();
    return rows.map((r) => ({ status: r.status, n: Number(r.n) }));
  }
}
