import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startServer, type TestServer } from './harness.js';
import { OpenApiMismatch, responseValidator, type OpenApiDocument } from './openapi-validator.js';

interface OpenApiDoc {
  openapi: string;
  paths: Record<string, Record<string, { security?: unknown[]; responses?: Record<string, unknown>; requestBody?: unknown }>>;
}

describe('OpenAPI document', () => {
  let t: TestServer;
  let doc: OpenApiDoc;
  before(async () => {
    t = await startServer();
    const r = await t.client.raw<OpenApiDoc>('GET', '/v1/openapi.json');
    assert.equal(r.status, 200);
    doc = r.body;
  });
  after(() => t.close());

  test('is OpenAPI 3.1 and public', () => {
    assert.equal(doc.openapi, '3.1.0');
  });

  test('every operation has its own operationId (the method names of generated clients), and the document names its server', () => {
    const ids = Object.values(doc.paths).flatMap((ops) => Object.values(ops).map((op) => (op as { operationId?: string }).operationId));
    assert.ok(ids.every((id) => typeof id === 'string' && /^[a-z][A-Za-z]+$/.test(id)), JSON.stringify(ids));
    assert.equal(new Set(ids).size, ids.length, 'unique');
    assert.deepEqual((doc as unknown as { servers: Array<{ url: string }> }).servers.map((s) => s.url), ['/']);
  });

  test('documents exactly the routes svcd serves', () => {
    const served = new Set(
      t.server.svcRoutes
        // The document itself, and the dashboard's page and assets (not API routes).
        .filter((r) => r.url !== '/v1/openapi.json' && r.url.startsWith('/v1/'))
        .map((r) => `${r.method} ${r.url.replace(/:([A-Za-z]+)/g, '{$1}')}`),
    );
    const documented = new Set(
      Object.entries(doc.paths).flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`)),
    );
    assert.deepEqual([...served].filter((r) => !documented.has(r)), [], 'served but not documented');
    assert.deepEqual([...documented].filter((r) => !served.has(r)), [], 'documented but not served');
    assert.ok(served.size >= 15);
  });

  test('every operation has a success response, error responses and its security', () => {
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        const codes = Object.keys(op.responses ?? {});
        // A WebSocket's success is its upgrade (the environment's terminal).
        assert.ok(codes.some((c) => c.startsWith('2') || c === '101'), `${method} ${path}: no success response`);
        // The liveness probe is the one route with no error answer.
        if (path !== '/v1/system/health') assert.ok(codes.some((c) => c.startsWith('4')), `${method} ${path}: no error response`);
        assert.ok(Array.isArray(op.security), `${method} ${path}: no security`);
      }
    }
    assert.deepEqual(doc.paths['/v1/tenant']?.get?.security, [{ apiKey: [] }, { sessionCookie: [] }]);
    assert.deepEqual(doc.paths['/v1/system/health/detailed']?.get?.security, [{ apiKey: [] }, { sessionCookie: [] }, { adminToken: [] }, { bootstrapToken: [] }]);
    assert.deepEqual(doc.paths['/v1/system/health']?.get?.security, []);
    assert.ok(doc.paths['/v1/tenants/register']?.post?.requestBody, 'request bodies come from the same schemas');
  });

  test("the pipeline's errors are documented on every operation they can reach", () => {
    const codes = (path: string, method: string) => Object.keys(doc.paths[path]?.[method]?.responses ?? {}).sort();
    assert.deepEqual(codes('/v1/auth/keys', 'post').filter((c) => ['400', '401', '403', '409', '413', '429', '503'].includes(c)), ['400', '401', '403', '409', '413', '429', '503']);
    assert.ok(!codes('/v1/system/health', 'get').includes('429'), 'the liveness probe is exempt from the global limit');
    assert.ok(!codes('/v1/tenant', 'get').includes('413') && !codes('/v1/tenant', 'get').includes('409'), 'reads take no body and are never replayed');
  });

  test('the response check that the HTTP tests run fails on an undocumented status or a body off its schema', async () => {
    const check = responseValidator(doc as unknown as OpenApiDocument);
    const tenant = { id: 'ab', name: 'n', email: 'e@x.io', status: 'active', created_at: 1, updated_at: 1 };
    check({ method: 'GET', path: '/v1/tenant', status: 200, contentType: 'application/json', body: tenant });
    assert.throws(() => check({ method: 'GET', path: '/v1/tenant', status: 418, contentType: 'application/json', body: { error: 'x' } }), OpenApiMismatch);
    assert.throws(() => check({ method: 'GET', path: '/v1/tenant', status: 200, contentType: 'application/json', body: { ...tenant, created_at: 'yesterday' } }), /created_at/);
    assert.throws(() => check({ method: 'GET', path: '/v1/tenant', status: 401, contentType: 'application/json', body: { message: 'no' } }), /error/);
    // a static segment wins over a parameter
    check({ method: 'GET', path: '/v1/environments/templates', status: 200, contentType: 'application/json', body: [] });
    // unknown paths are not the document's business
    check({ method: 'GET', path: '/nowhere', status: 404, contentType: 'application/json', body: { error: 'x' } });
  });
});
