// Why Caddy has no certificate for a name, as its own log says: a domain's status shows the cause
// the tenant can act on (DNS not pointing here, CAA, a rate limit). Caddy logs an error at each
// failed attempt and backs off between attempts, so a probe may end before any new attempt: the
// error it shows then is dated, and a cause since mended never reads as today's.
import type { Clock } from '../clock.js';

/** Why no certificate was served. */
export interface CertificateFailure {
  /** Caddy's error for this attempt (`fromIssuer`: the CA's or its validation's), or what the probe saw. */
  error: string;
  fromIssuer: boolean;
  /** The last earlier attempt's error, dated, when none was logged during the probe. */
  earlier?: string;
}

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
   * logged since then; or what the probe saw, with the last earlier error and its time as a note
   * apart (a cause is told from `error` alone, never from an earlier attempt's).
   */
  explain(name: string, since: number, probeSaw: string): CertificateFailure {
    const last = this.byName.get(name);
    if (!last) return { error: probeSaw, fromIssuer: false };
    if (last.at >= since) return { error: last.error, fromIssuer: true };
    return { error: probeSaw, fromIssuer: false, earlier: `the proxy's last attempt for the name, at ${new Date(last.at).toISOString()}, failed: ${cut(last.error)}` };
  }
}

/** An earlier error is a note: its start says enough. */
function cut(error: string): string {
  return error.length > 300 ? `${error.slice(0, 300)}...` : error;
}
