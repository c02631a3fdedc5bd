// A second (and third) svcd process on one SQLite file, reduced to what matters here: it opens
// the store and, from a given moment, runs count-then-insert transactions of one tenant under its
// quota lock, each pausing between count and insert as a slower request would. Prints
// {"inserted", "refused", "errors"} as JSON. Used by store.test.ts.
import { openStore } from '../src/store/index.js';

const [dataDir, tenantId, prefix, countArg, limitArg, startAtArg] = process.argv.slice(2) as [string, string, string, string, string, string];
const store = await openStore({ databaseUrl: null, dataDir });
await new Promise((r) => setTimeout(r, Math.max(0, Number(startAtArg) - Date.now())));
let inserted = 0;
let refused = 0;
const errors: string[] = [];
await Promise.all(
  Array.from({ length: Number(countArg) }, async (_, i) => {
    try {
      const added = await store.transaction(async (tx) => {
        await tx.tenants.lockForQuota(tenantId);
        if ((await tx.apiKeys.countActive(tenantId)) >= Number(limitArg)) return false;
        await new Promise((r) => setTimeout(r, 5));
        await tx.apiKeys.insert({ id: `${prefix}${i}`, tenant_id: tenantId, name: 'k', prefix: `svc_${prefix}${i}`, secret_hash: `${prefix}${i}`, created_at: 0, last_used_at: null, expires_at: null, revoked_at: null });
        return true;
      });
      if (added) inserted += 1;
      else refused += 1;
    } catch (err) {
      errors.push(String((err as { code?: string }).code ?? (err as Partial<Error>).message));
    }
  }),
);
await store.close();
process.stdout.write(JSON.stringify({ inserted, refused, errors }));
