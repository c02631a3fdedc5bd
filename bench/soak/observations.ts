// What the soak run saw: the well-behaved tenants' latencies per phase and route class, every
// answer's status by who asked, svcd's resident memory over time and what svc did to the
// misbehaving tenant. The load, the misbehaving tenant and the summary all write and read here.
import { readFileSync } from 'node:fs';

export type Phase = 'A' | 'B';
/** Who asked: the measured tenants or the misbehaving one (setup calls throw on any failure instead). */
export type Asker = 'well-behaved' | 'misbehaving';

export interface Slice {
  index: number;
  phase: Phase;
  /** Seconds since the run started. */
  startS: number;
  endS: number | null;
}

export interface NotedAnswer {
  atS: number;
  who: Asker;
  route: string;
  /** 0: no answer (a timeout or a network error). */
  status: number;
  body: string;
}

export interface RssSample {
  atS: number;
  mb: number;
  /** `A1`, `B2`, ... or `setup`/`between`. */
  during: string;
}

/** Nearest-rank percentile of ascending values. */
export function percentile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

/** Resident memory of a process in MB (VmRSS of /proc/<pid>/status). */
export function residentMb(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  if (!kb) throw new Error(`no VmRSS for process ${pid}`);
  return Number(kb) / 1024;
}

/** Examples kept per kind of answer, so a long run with a systematic failure does not hoard them. */
const EXAMPLES_KEPT = 40;

export class Observations {
  private readonly startedAt = performance.now();
  /** The slice being measured; null during setup and between phases (latencies due then are not counted). */
  current: Slice | null = null;
  readonly slices: Slice[] = [];
  /** Latencies in ms by phase, then route class: measured from when each request was due. */
  readonly latencies: Record<Phase, Map<string, number[]>> = { A: new Map(), B: new Map() };
  /** Answers counted by who asked, route class and status. */
  readonly statuses = new Map<Asker, Map<string, Map<number, number>>>();
  /**
   * Every 5xx (by anyone), and every other answer its asker should not have had (a well-behaved
   * tenant: anything but success; the misbehaving one: anything but success or a 409 refusal, such
   * as no answer at all); examples only up to EXAMPLES_KEPT.
   */
  readonly serverErrors: NotedAnswer[] = [];
  readonly unexpected: NotedAnswer[] = [];
  serverErrorCount = 0;
  readonly unexpectedCount: Record<Asker, number> = { 'well-behaved': 0, misbehaving: 0 };
  readonly rss: RssSample[] = [];
  /** Every well-behaved latency of each slice, whatever the route (to see how alike the slices of a phase were). */
  readonly sliceLatencies = new Map<number, number[]>();

  nowS(): number {
    return (performance.now() - this.startedAt) / 1000;
  }

  beginSlice(phase: Phase): Slice {
    const slice: Slice = { index: this.slices.length + 1, phase, startS: this.nowS(), endS: null };
    this.slices.push(slice);
    this.current = slice;
    return slice;
  }

  endSlice(): void {
    if (this.current) this.current.endS = this.nowS();
    this.current = null;
  }

  /** Where we are, as RSS samples are labelled. */
  during(): string {
    if (this.current) return `${this.current.phase}${this.current.index}`;
    return this.slices.length === 0 ? 'setup' : 'between';
  }

  /**
   * One answer. `slice` is the slice the request was due in (null: not measured); `expected`
   * says whether a well-behaved tenant may get this status (anything else is noted).
   */
  answer(who: Asker, route: string, status: number, body: string, latencyMs: number | null, slice: Slice | null, expected = true): void {
    const byRoute = this.statuses.get(who) ?? new Map<string, Map<number, number>>();
    this.statuses.set(who, byRoute);
    const byStatus = byRoute.get(route) ?? new Map<number, number>();
    byRoute.set(route, byStatus);
    byStatus.set(status, (byStatus.get(status) ?? 0) + 1);
    const noted: NotedAnswer = { atS: Math.round(this.nowS()), who, route, status, body: body.slice(0, 300) };
    if (status >= 500) {
      this.serverErrorCount++;
      if (this.serverErrors.length < EXAMPLES_KEPT) this.serverErrors.push(noted);
    } else if (!expected) {
      this.unexpectedCount[who]++;
      if (this.unexpected.length < EXAMPLES_KEPT) this.unexpected.push(noted);
    }
    if (slice && latencyMs !== null && who === 'well-behaved') {
      const byClass = this.latencies[slice.phase];
      const xs = byClass.get(route) ?? [];
      byClass.set(route, xs);
      xs.push(latencyMs);
      const all = this.sliceLatencies.get(slice.index) ?? [];
      this.sliceLatencies.set(slice.index, all);
      all.push(latencyMs);
    }
  }

  sampleRss(pid: number): void {
    this.rss.push({ atS: Math.round(this.nowS()), mb: residentMb(pid), during: this.during() });
  }

  /** How many answers `who` got on `route` with `status` (any status when omitted). */
  count(who: Asker, route: string, status?: number): number {
    const byStatus = this.statuses.get(who)?.get(route);
    if (!byStatus) return 0;
    if (status !== undefined) return byStatus.get(status) ?? 0;
    return [...byStatus.values()].reduce((a, b) => a + b, 0);
  }
}
