// Services seen from the host, for tests of what services can reach (services, isolation).
import { get, type ClientRequest } from 'node:http';
import type { Build, Service, SvcClient } from '@svc/client';
import { workloadName } from '../src/services/deployer.js';
import { waitFor } from './harness.js';
import { docker } from './images.js';

/** Waits until the build has finished (succeeded, failed or cancelled); returns it then. */
export async function finishedBuild(c: SvcClient, serviceId: string, buildId: string, ms = 120_000): Promise<Build> {
  return waitFor(`build ${buildId} to finish`, async () => {
    const b = await c.build(serviceId, buildId);
    return b.status === 'queued' || b.status === 'running' ? undefined : b;
  }, ms);
}

/** Waits until the service has left `deploying`; returns it as it is then. */
export async function settled(a: { client: SvcClient }, id: string): Promise<Service> {
  let s!: Service;
  await waitFor(`service ${id} to leave deploying`, async () => (s = await a.client.service(id)).status !== 'deploying');
  return s;
}

/**
 * What the service answers on its tenant network, seen from the host. A new connection each
 * time: a replaced container often gets the same IP, and a kept-alive socket would reach the old one.
 */
export async function fetchFromService(serviceId: string, path: string): Promise<string> {
  // A container that has just started can reset the first connection on a loaded machine
  // (seen under gVisor with the whole suite running): retry network failures a few times.
  for (let attempt = 1; ; attempt++) {
    try {
      return await fetchOnce(serviceId, path);
    } catch (err) {
      if (attempt >= 4) throw err;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

export async function fetchOnce(serviceId: string, path: string): Promise<string> {
  const c = await docker.getContainer(workloadName(serviceId)).inspect();
  const ip = Object.values(c.NetworkSettings.Networks)[0]?.IPAddress;
  return new Promise((resolve, reject) => {
    get({ host: ip, port: 8000, path, agent: false, timeout: 10_000 }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve(body));
      res.on('error', reject);
    })
      .on('timeout', function (this: ClientRequest) {
        this.destroy(new Error(`no answer from ${ip}${path} within 10 s`));
      })
      .on('error', reject);
  });
}
