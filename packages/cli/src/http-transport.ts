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

/** How long an answer's headers may take, as fetch's (undici's) default: a dead connection ends. */
export const HEADERS_TIMEOUT_MS = 300_000;

/** The CLI's transport. */
export const nodeHttpTransport: Transport = httpTransport(HEADERS_TIMEOUT_MS);

/** Requests whose answers' headers may take up to `headersTimeoutMs`; the body may take its time (followed logs). */
export function httpTransport(headersTimeoutMs: number): Transport {
  return (url, req) => send(url, req, headersTimeoutMs);
}

/** One request; the answer once its headers are in, its body still to be read. */
function send(url: URL, req: Outgoing, headersTimeoutMs: number): Promise<Answer> {
  return new Promise<Answer>((resolve, reject) => {
    const request = sender(url.protocol);
    if (request === null) {
      reject(new Error(`svcd's URL must begin with http:// or https:// (${url.href})`));
      return;
    }
    // Counted once the request is sent, not while an archive uploads (and not at all when the
    // answer or an error came first: svcd may refuse an upload before it has all of it).
    let headersTimer: NodeJS.Timeout | undefined;
    let settled = false;
    // Node's global agents keep connections alive (a command's several requests share one) and
    // let the process exit with idle ones open, as fetch does.
    const outgoing = request(url, { method: req.method, headers: req.headers, signal: req.signal }, (res) => {
      settled = true;
      clearTimeout(headersTimer);
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
    // `on`, not `once`: a second error event (a socket failing twice) must not go unhandled.
    outgoing.on('error', (err) => {
      settled = true;
      clearTimeout(headersTimer);
      reject(plainError(err, url));
    });
    outgoing.end(req.body, () => {
      if (settled) return;
      headersTimer = setTimeout(() => outgoing.destroy(new Error(`${url.origin} sent no answer in ${String(headersTimeoutMs / 1000)} s`)), headersTimeoutMs);
    });
  });
}

/**
 * A connection error as the CLI can print it: a name with two addresses (localhost: ::1 and
 * 127.0.0.1) fails with an AggregateError whose own message is empty.
 */
export function plainError(err: Error, url: URL): Error {
  if (err instanceof AggregateError && err.message === '') {
    const reasons = (err.errors as unknown[]).map((e) => (e instanceof Error ? e.message : String(e)));
    return new Error(`${url.origin}: ${reasons.join('; ')}`, { cause: err });
  }
  return err;
}

function answerOf(res: IncomingMessage, status: number): Answer {
  // One web stream over the response, made when first asked for: the client looks at `body`
  // before it hands it on, and a second stream over the same response would take every chunk
  // too, into a queue nobody reads (a followed log would grow it for as long as it runs).
  let body: ReadableStream<Uint8Array> | null = null;
  let textRead = false;
  // As fetch's Response: the body is read one way, once.
  const alreadyRead = () => new TypeError('the answer\'s body was read already');
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
      if (textRead) throw alreadyRead();
      body ??= Readable.toWeb(res) as ReadableStream<Uint8Array>;
      return body;
    },
    text: async () => {
      if (textRead || body !== null) throw alreadyRead();
      textRead = true;
      const chunks: Buffer[] = [];
      for await (const chunk of res) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString('utf8');
    },
  };
}
