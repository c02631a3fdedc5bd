// The DNS TXT lookups that prove ownership of custom domains. node:dns's Resolver (c-ares) asks
// the system's servers, or those of --dns-server (tests point it at their own DNS). A lookup ends
// within LOOKUP_DEADLINE_MS whatever the servers do (c-ares alone, trying each server twice with
// a doubling timeout, could take half a minute), since the name's authoritative servers are the
// tenant's to choose.
import { Resolver } from 'node:dns/promises';

/** The TXT values at a name ([] when it has none), or why the lookup failed. */
export type TxtAnswer = { values: string[] } | { error: string };

export interface TxtLookup {
  lookup(name: string): Promise<TxtAnswer>;
}

/** The most one lookup takes. */
export const LOOKUP_DEADLINE_MS = 8_000;

/** "No such name" and "no TXT record there" are answers, not failures. */
const NO_RECORD = new Set(['ENODATA', 'ENOTFOUND']);

export class DnsTxtLookup implements TxtLookup {
  constructor(private readonly servers: readonly string[] | null) {}

  async lookup(name: string): Promise<TxtAnswer> {
    const resolver = new Resolver({ timeout: 2_000, tries: 2 });
    if (this.servers) resolver.setServers([...this.servers]);
    // A network deadline, not a schedule: the injected timers are for svc's own pacing.
    const deadline = setTimeout(() => resolver.cancel(), LOOKUP_DEADLINE_MS);
    try {
      // A record's value may come in several strings of up to 255 bytes: they are one value.
      return { values: (await resolver.resolveTxt(name)).map((chunks) => chunks.join('')) };
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? 'unknown error';
      if (code === 'ECANCELLED') return { error: `no answer in ${LOOKUP_DEADLINE_MS / 1000} s` };
      return NO_RECORD.has(code) ? { values: [] } : { error: code };
    } finally {
      clearTimeout(deadline);
    }
  }
}
