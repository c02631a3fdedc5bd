// The Redis readiness probe against small loopback servers that answer as Redis would, and as
// docker-proxy does before the database listens (accept, then hang up).
import assert from 'node:assert/strict';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { describe, test } from 'node:test';
import { probeRedis } from '../src/databases/probes.js';

async function server(onConnection: (s: Socket) => void): Promise<{ port: number; close: () => void }> {
  const srv = createServer(onConnection);
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return { port: (srv.address() as AddressInfo).port, close: () => srv.close() };
}

const target = (port: number) => ({ host: '127.0.0.1', port, username: 'default', password: 'pw', database: null });

describe('redis probe', () => {
  test('AUTH then PING answered +OK +PONG: ready', async () => {
    const s = await server((c) => c.on('data', (d) => (d.toString().includes('PING') ? c.write('+OK\r\n+PONG\r\n') : undefined)));
    try {
      await probeRedis(target(s.port));
    } finally {
      s.close();
    }
  });

  test('a wrong password is not ready', async () => {
    const s = await server((c) => c.on('data', () => c.write('-WRONGPASS invalid username-password pair\r\n-NOAUTH Authentication required.\r\n')));
    try {
      await assert.rejects(probeRedis(target(s.port)), /AUTH: -WRONGPASS/);
    } finally {
      s.close();
    }
  });

  test('accepted and closed without an answer: fails at once instead of hanging', async () => {
    const s = await server((c) => c.end());
    try {
      const t0 = Date.now();
      await assert.rejects(probeRedis(target(s.port), 10_000), /closed without an answer/);
      assert.ok(Date.now() - t0 < 2_000);
    } finally {
      s.close();
    }
  });
});
