// The board's HTTP side: the web page (public/, served as-is) and the JSON API under /api. The
// admin token is the one credential of both: the page asks for it and sends it as a bearer token
// on every API call, so there is no cookie and no session to steal across sites.
//
// node:http rather than a framework: the board runs on the operator's Node base image with only
// the files svcd copies into it, and its dozen routes need nothing a framework adds.
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { BoardStore, NotFound } from './store.js';

export const BODY_LIMIT_BYTES = 64 * 1024;
export const LIMITS = { name: 100, title: 200, description: 10_000 } as const;

export class HttpError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

type Json = Record<string, unknown>;
type Handler = (store: BoardStore, params: number[], body: Json) => { status: number; body?: unknown };

interface Route {
  method: string;
  pattern: RegExp;
  /** Fields the body may have; anything else is a 400. */
  fields?: string[];
  handler: Handler;
}

const ok = (body: unknown, status = 200) => ({ status, body });
const noContent = () => ({ status: 204 });

const ROUTES: Route[] = [
  { method: 'GET', pattern: /^\/api\/boards$/, handler: (s) => ok(s.listBoards()) },
  { method: 'POST', pattern: /^\/api\/boards$/, fields: ['name'], handler: (s, _, b) => ok(s.createBoard(text(b, 'name', LIMITS.name)), 201) },
  { method: 'GET', pattern: /^\/api\/boards\/(\d+)$/, handler: (s, p) => ok(s.board(id(p))) },
  { method: 'PATCH', pattern: /^\/api\/boards\/(\d+)$/, fields: ['name'], handler: (s, p, b) => ok(s.renameBoard(id(p), text(b, 'name', LIMITS.name))) },
  { method: 'DELETE', pattern: /^\/api\/boards\/(\d+)$/, handler: (s, p) => (s.deleteBoard(id(p)), noContent()) },
  { method: 'POST', pattern: /^\/api\/boards\/(\d+)\/columns$/, fields: ['name'], handler: (s, p, b) => ok(s.addColumn(id(p), text(b, 'name', LIMITS.name)), 201) },
  {
    method: 'PATCH',
    pattern: /^\/api\/columns\/(\d+)$/,
    fields: ['name', 'position'],
    handler: (s, p, b) => ok(s.updateColumn(id(p), { name: optionalText(b, 'name', LIMITS.name), position: optionalIndex(b, 'position') })),
  },
  { method: 'DELETE', pattern: /^\/api\/columns\/(\d+)$/, handler: (s, p) => (s.deleteColumn(id(p)), noContent()) },
  {
    method: 'POST',
    pattern: /^\/api\/columns\/(\d+)\/cards$/,
    fields: ['title', 'description'],
    handler: (s, p, b) => ok(s.addCard(id(p), text(b, 'title', LIMITS.title), optionalText(b, 'description', LIMITS.description, true) ?? ''), 201),
  },
  {
    method: 'PATCH',
    pattern: /^\/api\/cards\/(\d+)$/,
    fields: ['title', 'description', 'column_id', 'position'],
    handler: (s, p, b) =>
      ok(
        s.updateCard(id(p), {
          title: optionalText(b, 'title', LIMITS.title),
          description: optionalText(b, 'description', LIMITS.description, true),
          column_id: optionalIndex(b, 'column_id'),
          position: optionalIndex(b, 'position'),
        }),
      ),
  },
  { method: 'DELETE', pattern: /^\/api\/cards\/(\d+)$/, handler: (s, p) => (s.deleteCard(id(p)), noContent()) },
];

/** The number a route's pattern captures: every route that reads it has one group. */
function id(params: number[]): number {
  const value = params[0];
  if (value === undefined) throw new Error('the route has no number in its pattern');
  return value;
}

function text(body: Json, field: string, max: number): string {
  const value = optionalText(body, field, max);
  if (value === undefined) throw new HttpError(400, `${field} is required`);
  return value;
}

function optionalText(body: Json, field: string, max: number, emptyAllowed = false): string | undefined {
  const value = body[field];
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw new HttpError(400, `${field} must be a string`);
  const trimmed = value.trim();
  if (!emptyAllowed && trimmed === '') throw new HttpError(400, `${field} must not be empty`);
  if (trimmed.length > max) throw new HttpError(400, `${field} must be at most ${max} characters`);
  return trimmed;
}

function optionalIndex(body: Json, field: string): number | undefined {
  const value = body[field];
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) throw new HttpError(400, `${field} must be a non-negative integer`);
  return value;
}

/** The page's files, read once: they never change while the board runs. */
const STATIC_FILES: Record<string, { file: string; type: string }> = {
  '/': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/board.js': { file: 'board.js', type: 'text/javascript; charset=utf-8' },
  '/board.css': { file: 'board.css', type: 'text/css; charset=utf-8' },
};

const SECURITY_HEADERS = {
  'content-security-policy': "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

export interface BoardAppOptions {
  store: BoardStore;
  /** SHA-256 (hex) of the admin token: the board never needs the token itself. */
  adminTokenSha256: string;
  /** Where index.html, board.js and board.css are. */
  publicDir: URL;
}

export function boardApp(opts: BoardAppOptions): (req: IncomingMessage, res: ServerResponse) => void {
  const expected = Buffer.from(opts.adminTokenSha256, 'hex');
  if (expected.length !== 32) throw new Error('the admin token hash must be 64 hex characters');
  const pages = new Map(Object.entries(STATIC_FILES).map(([path, f]) => [path, { type: f.type, body: readFileSync(new URL(f.file, opts.publicDir)) }]));

  const authorized = (req: IncomingMessage): boolean => {
    const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
    if (token === undefined) return false;
    // Hashes have one length, so the comparison is constant-time whatever was sent.
    return timingSafeEqual(createHash('sha256').update(token).digest(), expected);
  };

  return (req, res) => {
    handle(req, res).catch((err: unknown) => {
      const status = err instanceof HttpError ? err.status : err instanceof NotFound ? 404 : 500;
      const message = status === 500 ? 'internal error' : (err as Error).message;
      if (status === 500) console.error(err);
      send(res, status, { error: message });
    });
  };

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = new URL(req.url ?? '/', 'http://board').pathname;
    const page = pages.get(path);
    if (page && (req.method === 'GET' || req.method === 'HEAD')) {
      res.writeHead(200, { 'content-type': page.type, 'cache-control': 'no-cache', ...SECURITY_HEADERS });
      res.end(req.method === 'HEAD' ? undefined : page.body);
      return;
    }
    // Unauthenticated, for svcd's readiness probe.
    if (path === '/api/health' && req.method === 'GET') {
      send(res, 200, { ok: true });
      return;
    }
    if (!path.startsWith('/api/')) throw new HttpError(404, 'not found');
    const matching = ROUTES.filter((r) => r.pattern.test(path));
    if (matching.length === 0) throw new HttpError(404, 'not found');
    const route = matching.find((r) => r.method === req.method);
    if (!route) throw new HttpError(405, 'method not allowed');
    if (!authorized(req)) throw new HttpError(401, 'a valid admin token is required (Authorization: Bearer <token>)');
    const body = route.fields ? await readJson(req, route.fields) : {};
    const params = (route.pattern.exec(path) ?? []).slice(1).map(Number);
    const result = route.handler(opts.store, params, body);
    send(res, result.status, result.body);
  }
}

async function readJson(req: IncomingMessage, fields: string[]): Promise<Json> {
  if (!/^application\/json\b/.test(req.headers['content-type'] ?? '')) throw new HttpError(415, 'the body must be JSON (Content-Type: application/json)');
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > BODY_LIMIT_BYTES) throw new HttpError(413, `the body must be at most ${BODY_LIMIT_BYTES} bytes`);
    chunks.push(chunk);
  }
  let body: unknown;
  try {
    body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new HttpError(400, 'the body is not valid JSON');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new HttpError(400, 'the body must be a JSON object');
  const unknown = Object.keys(body).find((k) => !fields.includes(k));
  if (unknown !== undefined) throw new HttpError(400, `unknown field ${JSON.stringify(unknown)}`);
  return body as Json;
}

function send(res: ServerResponse, status: number, body?: unknown): void {
  if (res.headersSent) return void res.destroy();
  if (body === undefined) {
    res.writeHead(status, SECURITY_HEADERS).end();
    return;
  }
  res.writeHead(status, { 'content-type': 'application/json', ...SECURITY_HEADERS }).end(JSON.stringify(body));
}
