// A fixed-rate (open-loop) load generator for latency at a given request rate.
// Why not autocannon: its timer-driven rate limiting has multi-millisecond jitter on these
// machines (p99 of 13 ms against a route that does nothing, at 1,000 req/s), and no open-loop
// tool (wrk2, vegeta) is packaged in Debian here. This one runs on its own core, dispatches on a
// tight setImmediate loop, and measures each latency from the moment the request was due, so a
// stall of the server shows up in the figures instead of silently lowering the rate.
import http from 'node:http';

export interface OpenLoopResult {
  sent: number;
  rps: number;
  p50: number;
  p99: number;
  max: number;
  non2xx: number;
}

export async function openLoop(url: string, rate: number, seconds: number, headers: Record<string, string> = {}): Promise<OpenLoopResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  const target = new URL(url);
  const total = Math.round(rate * seconds);
  const intervalNs = 1e9 / rate;
  const latenciesMs: number[] = [];
  let non2xx = 0;
  let done = 0;
  const start = process.hrtime.bigint();

  await new Promise<void>((resolve) => {
    let next = 0;
    const fire = (dueNs: bigint) => {
      const req = http.request(
        { agent, host: target.hostname, port: target.port, path: target.pathname + target.search, method: 'GET', headers },
        (res) => {
          if ((res.statusCode ?? 0) >= 300) non2xx += 1;
          res.resume();
          res.on('end', () => {
            latenciesMs.push(Number(process.hrtime.bigint() - dueNs) / 1e6);
            if (++done === total) resolve();
          });
        },
      );
      req.on('error', () => {
        non2xx += 1;
        if (++done === total) resolve();
      });
      req.end();
    };
    const loop = () => {
      const now = process.hrtime.bigint();
      while (next < total && start + BigInt(Math.round(next * intervalNs)) <= now) {
        fire(start + BigInt(Math.round(next * intervalNs)));
        next += 1;
      }
      if (next < total) setImmediate(loop);
    };
    loop();
  });
  agent.destroy();
  const elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  latenciesMs.sort((a, b) => a - b);
  const pct = (p: number) => Math.round((latenciesMs[Math.min(latenciesMs.length - 1, Math.floor(latenciesMs.length * p))] ?? NaN) * 100) / 100;
  return { sent: total, rps: Math.round(total / elapsed), p50: pct(0.5), p99: pct(0.99), max: pct(1), non2xx };
}
