// The misbehaving tenant of phase B, doing at once what the issue lists:
// - a log flood: a service on CHATTER_IMAGE (1 KB lines to stdout without pause);
// - never-read streams: followed logs of it opened on raw sockets that send the request, take the
//   status line and never read again (as many as svc lets it: its cap is 10, then 409), and
//   10,000-line tails of it likewise never read, one a second, each dropped after 10 s;
// - a disk filler: an environment writing 256 MB files with dd through exec, one after another,
//   with the tenant's disk quota patched down to 1 GB, until svc stops its workloads (past the
//   quota's 10 percent hard margin, on the next metering pass). The tenant then does what such a
//   tenant does: after a few seconds it starts them again, removes the files and carries on, so
//   phase B is one fill -> stop -> restart cycle after another. svc stops the flood too when it
//   stops the tenant's workloads (the hard limit stops all of its services and environments).
// Its 409s are expected and not errors; its 5xx count with everyone's.
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Environment, RawResponse, Service, SvcClient, TenantUsage } from '../../packages/client/src/index.js';
import { CHATTER_IMAGE } from '../../packages/svcd/test/images.js';
import type { Observations } from './observations.js';
import { serviceRunning } from './well-behaved.js';

const MIB = 1024 ** 2;
const GIB = 1024 ** 3;
/** The quota it is given and the hard limit that follows from it (svcd's DISK_HARD_MARGIN of 10 percent). */
const DISK_QUOTA_GB = 1;
const HARD_LIMIT_BYTES = DISK_QUOTA_GB * GIB * 1.1;
const FILL_FILE_MB = 256;
/** At most this many files per cycle (2 GB on the host's disk), should svc never stop it. */
const FILL_FILES_MAX = 8;
const FOLLOW_ATTEMPT_EVERY_MS = 2_000;
const TAIL_ATTEMPT_EVERY_MS = 1_000;
const TAIL_HELD_MS = 10_000;
/** Sockets held at once, whatever svc answers: a svcd that stopped refusing would otherwise be handed sockets without end. */
const HELD_SOCKETS_MAX = 50;
const STATUS_LINE_TIMEOUT_MS = 10_000;
/** How long svc gets to stop the workloads once the hard limit is passed: a metering pass is 5 s, the disk measurement a few more. */
const HALT_WAIT_MS = 45_000;
/** The tenant "notices" its workloads stopped and starts them again after this. */
const RESTART_AFTER_MS = 5_000;

export interface Halt {
  cycle: number;
  atS: number;
  writtenMb: number;
  /** From the write that crossed the hard limit to the environment seen stopped (null: not stopped). */
  secondsAfterCrossing: number | null;
  environment: Pick<Environment, 'status' | 'last_error'> | null;
  service: Pick<Service, 'status' | 'last_error'> | null;
}

export class MisbehavingTenant {
  private serviceId: string | null = null;
  private environmentId = '';
  private readonly follows = new Set<net.Socket>();
  private readonly tails = new Set<net.Socket>();
  private loops: Array<Promise<void>> = [];
  private stopLoops: AbortController | null = null;
  readonly halts: Halt[] = [];
  /** Things it saw that are worth a line in the report (a cycle svc did not stop, a restart refused). */
  readonly notes: string[] = [];
  cycles = 0;
  /**
   * The most followed-log sockets answered 200 that it held at once. Not the same as svc's count
   * of its streams: one whose container svc stopped has ended on svc's side, unseen (never read).
   */
  followsHeldMax = 0;

  constructor(
    private readonly client: SvcClient,
    private readonly apiKey: string,
    readonly tenantId: string,
    private readonly apiPort: number,
    private readonly obs: Observations,
  ) {}

  /** The quota patched down through the operator route, and the environment it will fill. */
  async setUp(admin: SvcClient): Promise<void> {
    await admin.patchQuotas(this.tenantId, { max_disk_gb: DISK_QUOTA_GB });
    const env = await this.client.createEnvironment({ name: 'filler', template_id: 'default', lease_duration_seconds: 6 * 3600 });
    this.environmentId = env.id;
  }

  /** Phase B starts: its workloads run again (the files of a past cycle removed), the streams open, the filler writes. */
  async begin(): Promise<void> {
    await this.restartWorkloads();
    this.stopLoops = new AbortController();
    const signal = this.stopLoops.signal;
    this.loops = [this.followLoop(signal), this.tailLoop(signal), this.fillLoop(signal)];
  }

  /** Phase B ends: it goes quiet (its sockets closed, its service and environment stopped) so phase A has none of it. */
  async end(): Promise<void> {
    this.stopLoops?.abort();
    await Promise.allSettled(this.loops);
    this.loops = [];
    this.stopLoops = null;
    this.dropSockets();
    if (this.serviceId) await this.call('POST /v1/services/{id}/stop', 'POST', `/v1/services/${this.serviceId}/stop`);
    await this.call('POST /v1/environments/{id}/stop', 'POST', `/v1/environments/${this.environmentId}/stop`);
  }

  dropSockets(): void {
    for (const s of [...this.follows, ...this.tails]) s.destroy();
    this.follows.clear();
    this.tails.clear();
  }

  /**
   * One API call of this tenant, recorded; anything but a 5xx is expected from it. While phase B
   * runs, the end of the phase abandons it (a dd or a wait for a deploy must not hold up phase A).
   */
  private async call<T = unknown>(route: string, method: string, path: string, body?: unknown, timeoutMs = 30_000): Promise<RawResponse<T> | null> {
    const phase = this.stopLoops?.signal;
    if (phase?.aborted) return null;
    try {
      const signal = phase ? AbortSignal.any([phase, AbortSignal.timeout(timeoutMs)]) : AbortSignal.timeout(timeoutMs);
      const r = await this.client.raw<T>(method, path, { body, signal });
      this.obs.answer('misbehaving', route, r.status, r.text, null, null);
      return r;
    } catch (err) {
      if (!phase?.aborted) this.obs.answer('misbehaving', route, 0, (err as Error).message, null, null, false);
      return null;
    }
  }

  /** A note, unless phase B is ending: what an abandoned call answered says nothing about svc. */
  private note(text: string): void {
    if (!this.stopLoops?.signal.aborted) this.notes.push(text);
  }

  private async environment(): Promise<Environment | null> {
    const r = await this.call<Environment>('GET /v1/environments/{id}', 'GET', `/v1/environments/${this.environmentId}`);
    return r?.status === 200 ? r.body : null;
  }

  private async service(): Promise<Service | null> {
    if (!this.serviceId) return null;
    const r = await this.call<Service>('GET /v1/services/{id}', 'GET', `/v1/services/${this.serviceId}`);
    return r?.status === 200 ? r.body : null;
  }

  /**
   * The environment started, the files of a past cycle removed and that measured (else the next
   * metering pass would stop what is started now), then the flood started.
   */
  private async restartWorkloads(): Promise<void> {
    const env = await this.environment();
    if (env?.status !== 'running') {
      const started = await this.call('POST /v1/environments/{id}/start', 'POST', `/v1/environments/${this.environmentId}/start`);
      if (started?.status !== 200) this.note(`environment start answered ${started?.status ?? 'nothing'}: ${started?.text.slice(0, 200) ?? ''}`);
    }
    const removedAtS = Math.floor(Date.now() / 1000);
    const removed = await this.call('POST /v1/environments/{id}/exec (rm)', 'POST', `/v1/environments/${this.environmentId}/exec`, {
      command: ['sh', '-c', 'rm -f /workspace/fill-*'],
      timeout: 60,
    }, 90_000);
    if (removed?.status !== 200) this.note(`removing the files answered ${removed?.status ?? 'nothing'}: ${removed?.text.slice(0, 200) ?? ''}`);
    const deadline = Date.now() + 60_000;
    for (;;) {
      const u = await this.call<TenantUsage>('GET /v1/tenant/usage', 'GET', '/v1/tenant/usage');
      const usage = u?.status === 200 ? u.body : null;
      if (usage && (usage.disk_measured_at ?? 0) > removedAtS && usage.disk_used_bytes < DISK_QUOTA_GB * GIB) break;
      if (Date.now() > deadline) {
        this.note(`the removed files were not measured within 60 s (usage: ${JSON.stringify(usage && { used: usage.disk_used_bytes, at: usage.disk_measured_at })})`);
        break;
      }
      await sleep(1_000, undefined, { signal: this.stopLoops?.signal });
    }
    if (!this.serviceId) {
      const created = await this.client.createService({ name: 'flood', image: CHATTER_IMAGE, port: 8000 });
      this.serviceId = created.id;
    } else if ((await this.service())?.status !== 'running') {
      const started = await this.call('POST /v1/services/{id}/start', 'POST', `/v1/services/${this.serviceId}/start`);
      if (started?.status !== 202 && started?.status !== 200) this.note(`service start answered ${started?.status ?? 'nothing'}: ${started?.text.slice(0, 200) ?? ''}`);
    }
    await serviceRunning(this.client, this.serviceId, 120_000, this.stopLoops?.signal);
  }

  /**
   * A GET on a raw socket that takes the status line and then never reads again: the kernel's
   * buffers fill and svcd's writes to it stop draining. A 200 keeps the socket; anything else is
   * read to its end (for the message), recorded and closed.
   */
  private neverRead(route: string, path: string): Promise<net.Socket | null> {
    const sock = net.connect(this.apiPort, '127.0.0.1');
    // Errors after the answer (svcd closing the connection) are expected and need no handling.
    sock.on('error', () => {});
    sock.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1:${this.apiPort}\r\nAuthorization: Bearer ${this.apiKey}\r\n\r\n`);
    return new Promise((resolve) => {
      let settled = false;
      const settle = (status: number, body: string, keep: boolean) => {
        if (settled) return;
        settled = true;
        clearTimeout(late);
        const expected = status === 200 || (status === 409 && body.includes('quota exceeded'));
        this.obs.answer('misbehaving', route, status, body, null, null, expected);
        if (keep) resolve(sock);
        else {
          sock.destroy();
          resolve(null);
        }
      };
      const late = setTimeout(() => settle(0, `no status line in ${STATUS_LINE_TIMEOUT_MS / 1000} s`, false), STATUS_LINE_TIMEOUT_MS);
      sock.once('error', (err) => settle(0, err.message, false));
      let received = '';
      const onData = (chunk: Buffer) => {
        received += chunk.toString('latin1');
        const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(received)?.[1] ?? 0);
        if (status === 200) {
          sock.off('data', onData);
          sock.pause();
          settle(200, '', true);
          return;
        }
        // A refusal: its short JSON body, once it is all there (headers and body may come apart).
        const [head = '', body = ''] = received.split('\r\n\r\n');
        const length = Number(/content-length:\s*(\d+)/i.exec(head)?.[1] ?? NaN);
        if (received.includes('\r\n\r\n') && (!(length >= 0) || Buffer.byteLength(body, 'latin1') >= length)) settle(status, body, false);
      };
      sock.on('data', onData);
    });
  }

  private async followLoop(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      if (this.serviceId && this.follows.size + this.tails.size < HELD_SOCKETS_MAX) {
        const s = await this.neverRead('GET /v1/services/{id}/logs?follow=true (never read)', `/v1/services/${this.serviceId}/logs?follow=true`);
        if (s) {
          this.follows.add(s);
          this.followsHeldMax = Math.max(this.followsHeldMax, this.follows.size);
        }
      }
      await sleep(FOLLOW_ATTEMPT_EVERY_MS, undefined, { signal }).catch(() => {});
    }
  }

  private async tailLoop(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      if (this.serviceId && this.follows.size + this.tails.size < HELD_SOCKETS_MAX) {
        void this.neverRead('GET /v1/services/{id}/logs?tail=10000 (never read)', `/v1/services/${this.serviceId}/logs?tail=10000`).then((s) => {
          if (!s) return;
          this.tails.add(s);
          setTimeout(() => {
            s.destroy();
            this.tails.delete(s);
          }, TAIL_HELD_MS).unref();
        });
      }
      await sleep(TAIL_ATTEMPT_EVERY_MS, undefined, { signal }).catch(() => {});
    }
  }

  /** Fill until svc stops the environment, record what it did, start again; until phase B ends. */
  private async fillLoop(signal: AbortSignal): Promise<void> {
    // Read anew at each use: the signal fires during the awaits, which TypeScript's narrowing of
    // `signal.aborted` (false after the first check) does not see.
    const aborted = () => signal.aborted;
    while (!aborted()) {
      const cycle = ++this.cycles;
      let writtenMb = 0;
      let crossedAt: number | null = null;
      for (let i = 0; i < FILL_FILES_MAX && !aborted(); i++) {
        const r = await this.call<{ exit_code: number }>('POST /v1/environments/{id}/exec (dd)', 'POST', `/v1/environments/${this.environmentId}/exec`, {
          command: ['dd', 'if=/dev/zero', `of=/workspace/fill-${i}`, 'bs=1M', `count=${FILL_FILE_MB}`],
          timeout: 120,
        }, 150_000);
        // 409: the environment no longer runs (svc stopped it); another failure: dd killed under it.
        if (r?.status !== 200 || r.body.exit_code !== 0) break;
        writtenMb += FILL_FILE_MB;
        if (crossedAt === null && writtenMb * MIB > HARD_LIMIT_BYTES) crossedAt = performance.now();
        await sleep(1_000, undefined, { signal }).catch(() => {});
      }
      if (aborted()) return;
      // What svc does about it, within a metering pass or a few.
      const deadline = Date.now() + HALT_WAIT_MS;
      let env = await this.environment();
      while (env?.status === 'running' && Date.now() < deadline && !aborted()) {
        await sleep(500, undefined, { signal }).catch(() => {});
        env = await this.environment();
      }
      if (aborted()) return;
      const stopped = env !== null && env.status !== 'running';
      const svc = await this.service();
      this.halts.push({
        cycle,
        atS: Math.round(this.obs.nowS()),
        writtenMb,
        secondsAfterCrossing: stopped && crossedAt !== null ? Math.round((performance.now() - crossedAt) / 100) / 10 : null,
        environment: env && { status: env.status, last_error: env.last_error },
        service: svc && { status: svc.status, last_error: svc.last_error },
      });
      if (!stopped) this.notes.push(`cycle ${cycle}: ${writtenMb} MB written, the environment still ${env?.status ?? 'unknown'} ${HALT_WAIT_MS / 1000} s later`);
      await sleep(RESTART_AFTER_MS, undefined, { signal }).catch(() => {});
      if (aborted()) return;
      // Its follows were on the stopped container; it opens new ones on the next.
      for (const s of this.follows) s.destroy();
      this.follows.clear();
      try {
        await this.restartWorkloads();
      } catch (err) {
        if (aborted()) return;
        // Recorded, and tried again next cycle: the flood not coming back is worth knowing, not the end of the run.
        this.notes.push(`cycle ${cycle}: starting again failed: ${(err as Error).message}`);
        await sleep(RESTART_AFTER_MS, undefined, { signal }).catch(() => {});
      }
    }
  }
}
