import type { Kysely } from 'kysely';
import type { Database } from './schema.js';

export class ServiceEnvStore {
  constructor(private readonly db: Kysely<Database>) {}

  /** key -> sealed value. */
  async get(serviceId: string): Promise<Map<string, string>> {
    const rows = await this.db.selectFrom('service_env').select(['key', 'sealed_value']).where('service_id', '=', serviceId).orderBy('key').execute();
    return new Map(rows.map((r) => [r.key, r.sealed_value]));
  }

  async count(serviceId: string): Promise<number> {
    const r = await this.db
      .selectFrom('service_env')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('service_id', '=', serviceId)
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  async set(serviceId: string, key: string, sealedValue: string, now: number): Promise<void> {
    await this.db
      .insertInto('service_env')
      .values({ service_id: serviceId, key, sealed_value: sealedValue, updated_at: now })
      .onConflict((oc) => oc.columns(['service_id', 'key']).doUpdateSet({ sealed_value: sealedValue, updated_at: now }))
      .execute();
  }

  async delete(serviceId: string, key: string): Promise<boolean> {
    const r = await this.db.deleteFrom('service_env').where('service_id', '=', serviceId).where('key', '=', key).executeTakeFirst();
    return Number(r.numDeletedRows) === 1;
  }
}
