// A WebSocket through svc's proxy, by hand (RFC 6455): the upgrade, then a frame each way with the
// WEBSOCKET_IMAGE server (images.ts). Over plain HTTP, or over TLS trusting `ca` (tls.test.ts).
import { createHash, randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';

/** A WebSocket opened through the proxy, its server's first frame received; `reply` finishes the exchange. */
export interface OpenWebSocket {
  accept: string;
  expected: string;
  /** Whether the connection ended (the proxy closed it, or the server did). */
  ended(): boolean;
  /** Sends one masked client frame and resolves with every frame received once the server replied to it. */
  reply(): Promise<string>;
}

/**
 * By hand, since Node's WebSocket client sends the Host of the URL it dials, and the proxy routes
 * by a Host (<id>.localhost, <label>.<base-domain>) this machine need not resolve. Resolves once
 * the upgrade is answered and the server's first frame arrived.
 */
export function openWebSocketThroughProxy(port: number, host: string, tls?: { ca: string }): Promise<OpenWebSocket> {
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
      // No timeout once upgraded: the socket may wait for as long as its test takes.
      socket.setTimeout(0);
      let frames = head.toString('latin1');
      let ended = false;
      let replied: ((frames: string) => void) | null = null;
      let failed: ((err: Error) => void) | null = null;
      const opened: OpenWebSocket = {
        accept: String(res.headers['sec-websocket-accept']),
        expected,
        ended: () => ended,
        reply: () =>
          new Promise((ok, fail) => {
            if (ended) {
              fail(new Error(`the connection had ended; frames: ${JSON.stringify(frames)}`));
              return;
            }
            replied = ok;
            failed = fail;
            const mask = randomBytes(4);
            const payload = Buffer.from('howdy').map((b, i) => b ^ mask[i % 4]!);
            socket.write(Buffer.concat([Buffer.from([0x81, 0x80 | 5]), mask, payload]));
          }),
      };
      let greeted = false;
      const onData = (d: Buffer) => {
        frames += d.toString('latin1');
        if (!greeted && frames.includes('hello')) {
          greeted = true;
          resolve(opened);
        }
        if (frames.includes('bytes') && replied) {
          socket.destroy();
          replied(frames);
        }
      };
      socket.on('data', onData);
      socket.on('close', () => {
        ended = true;
        failed?.(new Error(`the connection ended before the reply; frames: ${JSON.stringify(frames)}`));
      });
      socket.on('error', reject);
      if (head.length) onData(Buffer.alloc(0));
    });
    req.end();
  });
}

/** The upgrade, then a frame each way: the 101's accept header, what it should be, and the frames. */
export async function webSocketThroughProxy(port: number, host: string, tls?: { ca: string }): Promise<{ accept: string; expected: string; frames: string }> {
  const ws = await openWebSocketThroughProxy(port, host, tls);
  return { accept: ws.accept, expected: ws.expected, frames: await ws.reply() };
}
