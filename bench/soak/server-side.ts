// svcd's own view of a slice, from its Prometheus endpoint: how long it took to answer the API
// routes (its request-duration histogram, exec and log streams left out) and how late its event
// loop ran. Set beside the bench's latencies, it tells time spent in svcd from time spent before
// svcd saw the request or after it answered (the kernel, the bench's own event loop).

export interface ServerSideFigures {
  /** API answers in the slice, by svcd's histogram. */
  count: number;
  /** The histogram bucket bound that 99 percent of them fell under (ms; coarse, by design of the buckets; Infinity past the last). */
  p99BoundMs: number | null;
  /** Event-loop delay over the slice, as prom-client's monitor saw it (ms). */
  loopLagP99Ms: number | null;
  loopLagMaxMs: number | null;
  /** At the slice's end (MB): V8's heap in use and as committed, and memory held outside it (Buffers and the like), to tell where svcd's RSS goes. */
  heapUsedMb: number | null;
  heapTotalMb: number | null;
  externalMb: number | null;
}

type Buckets = Map<number, number>;

const BUCKET = /^svc_http_request_duration_seconds_bucket\{(.*)\} (\S+)$/;

/** The API routes' cumulative buckets (le -> count), summed over routes and statuses. */
function apiBuckets(text: string): Buckets {
  const sums: Buckets = new Map();
  for (const line of text.split('\n')) {
    const m = BUCKET.exec(line);
    if (!m) continue;
    const labels = m[1] ?? '';
    if (/route="[^"]*(\/exec|\/logs)"/.test(labels)) continue;
    const le = /(?:^|,)le="([^"]+)"/.exec(labels)?.[1];
    if (le === undefined) continue;
    const bound = le === '+Inf' ? Infinity : Number(le);
    sums.set(bound, (sums.get(bound) ?? 0) + Number(m[2]));
  }
  return sums;
}

/** A gauge without labels, in its own unit. */
function gauge(text: string, name: string): number | null {
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : null;
}
const ms = (seconds: number | null) => (seconds === null ? null : seconds * 1000);
const mb = (bytes: number | null) => (bytes === null ? null : bytes / 1024 ** 2);

export class ServerSide {
  /** The buckets at the slice's start; null when that scrape failed. */
  private atStart: Buckets | null = null;

  constructor(private readonly metricsUrl: string) {}

  /** The metrics text; '' when svcd did not answer (the slice then has no figures of its own, and the run goes on). */
  private async scrape(): Promise<string> {
    try {
      const res = await fetch(this.metricsUrl, { signal: AbortSignal.timeout(10_000) });
      return res.ok ? await res.text() : '';
    } catch {
      return '';
    }
  }

  /** Marks the slice's start; also resets the event-loop figures, which prom-client resets on every scrape. */
  async begin(): Promise<void> {
    const text = await this.scrape();
    this.atStart = text ? apiBuckets(text) : null;
  }

  async end(): Promise<ServerSideFigures> {
    const text = await this.scrape();
    const atStart = this.atStart;
    if (!text || !atStart) return { count: 0, p99BoundMs: null, loopLagP99Ms: null, loopLagMaxMs: null, heapUsedMb: null, heapTotalMb: null, externalMb: null };
    const now = apiBuckets(text);
    const bounds = [...now.keys()].sort((a, b) => a - b);
    const delta = (bound: number) => (now.get(bound) ?? 0) - (atStart.get(bound) ?? 0);
    const count = delta(Infinity);
    const p99 = bounds.find((bound) => delta(bound) >= 0.99 * count);
    return {
      count,
      p99BoundMs: count === 0 || p99 === undefined ? null : p99 * 1000,
      loopLagP99Ms: ms(gauge(text, 'svc_process_nodejs_eventloop_lag_p99_seconds')),
      loopLagMaxMs: ms(gauge(text, 'svc_process_nodejs_eventloop_lag_max_seconds')),
      heapUsedMb: mb(gauge(text, 'svc_process_nodejs_heap_size_used_bytes')),
      heapTotalMb: mb(gauge(text, 'svc_process_nodejs_heap_size_total_bytes')),
      externalMb: mb(gauge(text, 'svc_process_nodejs_external_memory_bytes')),
    };
  }
}
