// A WebSocket through svc's proxy, by hand (RFC 6455): the upgrade, then a frame each way with the
// WEBSOCKET_IMAGE server (images.ts). Over plain HTTP, or over TLS trusting `ca` (tls.test.ts).
import { createHash, randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';

/**
 * By hand, since Node's WebSocket client sends the Host of the URL it dials, and the proxy routes
 * by a Host (<id>.localhost, <label>.<base-domain>) this machine need not resolve. Answers the 101's
 * accept header, what it should be, and the frames: the server's first, then its reply to one
 * masked client frame.
 */
export function webSocketThroughProxy(port: number, host: string, tls?: { ca: string }): Promise<{ accept: string; expected: string; frames: string }> {
  const key = randomBytes(16).toString('base64');
  const expected = createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
  return new Promise((resolve, reject) => {
    const req = (tls ? httpsRequest : request)({
      host: '127.0.0.1',
      port,
      ...(tls ? { ca: tls.ca, servername: host.replace(/:\d+$/, '') } : {}),
      path: '/socket',
      agent: false,
      timeout: 10_000,
      headers: { host, connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-key': key, 'sec-websocket-version': '13' },
    });
    req.on('response', (res) => reject(new Error(`no upgrade: ${res.statusCode}`)));
    req.on('timeout', () => req.destroy(new Error('upgrade timed out')));
    req.on('error', reject);
    req.on('upgrade', (res, socket: Socket, head: Buffer) => {
      let frames = head.toString('latin1');
      let sent = false;
      const onData = (d: Buffer) => {
        frames += d.toString('latin1');
        if (!sent && frames.includes('hello')) {
          sent = true;
          const mask = randomBytes(4);
          const payload = Buffer.from('howdy').map((b, i) => b ^ mask[i % 4]!);
          socket.write(Buffer.concat([Buffer.from([0x81, 0x80 | 5]), mask, payload]));
        }
        if (frames.includes('bytes')) {
          socket.destroy();
          resolve({ accept: String(res.headers['sec-websocket-accept']), expected, frames });
        }
      };
      socket.on('data', onData);
      socket.on('error', reject);
      if (head.length) onData(Buffer.alloc(0));
    });
    req.end();
  });
}
