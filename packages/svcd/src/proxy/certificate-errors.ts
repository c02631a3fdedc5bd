// Why Caddy has no certificate for a name, as its own log says: a domain's status shows the cause
// the tenant can act on (DNS not pointing here, CAA, a rate limit). Caddy logs an error at each
// failed attempt and backs off between attempts, so a probe may end before any new attempt: the
// error it shows then is dated, and a cause since mended never reads as today's.
import type { Clock } from '../clock.js';

/** Names whose last error is kept (the oldest go first): one Caddy serves every tenant's names. */
const KEPT = 1_000;
/** Caddy's message is the CA's or the network's, and may be long. */
const MESSAGE_MAX = 2_000;

export class CertificateErrors {
  private readonly byName = new Map<string, { error: string; at: number }>();

  constructor(private readonly clock: Clock) {}

  /** Keeps the error of a Caddy log line about obtaining a name's certificate (other lines are ignored). */
  note(line: string): void {
    if (!line.includes('"error"') || !line.includes('"identifier"')) return;
    let entry: unknown;
    try {
      entry = JSON.parse(line);
    } catch {
      return;
    }
    if (typeof entry !== 'object' || entry === null) return;
    const { identifier, error } = entry as { identifier?: unknown; error?: unknown };
    if (typeof identifier !== 'string' || typeof error !== 'string') return;
    // Deleted first, so that the map's order stays the order of the last error of each name.
    this.byName.delete(identifier);
    this.byName.set(identifier, { error: error.slice(0, MESSAGE_MAX), at: this.clock.now() });
    if (this.byName.size > KEPT) {
      const oldest = this.byName.keys().next();
      if (!oldest.done) this.byName.delete(oldest.value);
    }
  }

  /** A certificate for the name was served: its errors are history. */
  forget(name: string): void {
    this.byName.delete(name);
  }

  /**
   * Why a probe of `name` begun at `since` (the clock's ms) got no certificate: Caddy's error
   * logged since then; or what the probe saw, with the last earlier error and its time.
   */
  explain(name: string, since: number, probeSaw: string): string {
    const last = this.byName.get(name);
    if (!last) return probeSaw;
    if (last.at >= since) return last.error;
    return `${probeSaw}; the proxy's last attempt for the name, at ${new Date(last.at).toISOString()}, failed: ${last.error}`;
  }
}
