// The CLI's requests go out through node:http(s), not fetch: fetch's first use in a process loads
// undici, 40-80 ms of a command's start (measured on `svc deploy`: the service lookup took 66-88 ms
// as the first request, 6 ms as the second), and every CLI command is a new process. What the
// client reads of an answer (status, two header lookups, the body as text or as a stream) is
// small enough to give over node:http.
import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import type { Answer, Outgoing, Transport } from '@svc/client';

// Not `import ... from 'node:http'`: an ES module namespace of node:http reads every export,
// undici's WebSocket and MessageEvent among them, so that import alone loads undici (57-71 ms
// here). The module's own exports object leaves them unread. node:https (TLS, crypto) only for
// an https URL.
const sender = (protocol: string) => {
  if (protocol === 'http:') return process.getBuiltinModule('node:http').request;
  if (protocol === 'https:') return process.getBuiltinModule('node:https').request;
  return null;
};

/** One request; the answer once its headers are in, its body still to be read. */
export const nodeHttpTransport: Transport = (url: URL, req: Outgoing): Promise<Answer> =>
  new Promise<Answer>((resolve, reject) => {
    const send = sender(url.protocol);
    if (send === null) {
      reject(new Error(`svcd's URL must begin with http:// or https:// (${url.href})`));
      return;
    }
    // Node's global agents keep connections alive (a command's several requests share one) and
    // let the process exit with idle ones open, as fetch does.
    const outgoing = send(url, { method: req.method, headers: req.headers, signal: req.signal }, (res) => {
      const status = res.statusCode ?? 0;
      // fetch would follow it; a CLI pointed at an address that redirects (http to https, a
      // moved host) is better told where to point.
      if (status >= 300 && status < 400 && res.headers.location !== undefined) {
        res.resume();
        reject(new Error(`${url.origin} answered ${String(status)}, a redirect to ${res.headers.location}: set SVC_URL (or svc login --url) to where it points`));
        return;
      }
      resolve(answerOf(res, status));
    });
    outgoing.once('error', reject);
    outgoing.end(req.body);
  });

function answerOf(res: IncomingMessage, status: number): Answer {
  // One web stream over the response, made when first asked for: the client looks at `body`
  // before it hands it on, and a second stream over the same response would take every chunk
  // too, into a queue nobody reads (a followed log would grow it for as long as it runs).
  let body: ReadableStream<Uint8Array> | null = null;
  return {
    status,
    headers: {
      get: (name) => {
        const value = res.headers[name.toLowerCase()];
        if (value === undefined) return null;
        return Array.isArray(value) ? value.join(', ') : value;
      },
      getSetCookie: () => res.headers['set-cookie'] ?? [],
    },
    get body() {
      body ??= Readable.toWeb(res) as ReadableStream<Uint8Array>;
      return body;
    },
    text: async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of res) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString('utf8');
    },
  };
}
