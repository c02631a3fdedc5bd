import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startServer, type TestServer } from './harness.js';

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

  test('documents exactly the routes svcd serves', () => {
    const served = new Set(
      t.server.svcRoutes
        .filter((r) => r.url !== '/v1/openapi.json')
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
        assert.ok(codes.some((c) => c.startsWith('2')), `${method} ${path}: no success response`);
        // The liveness probe is the one route with no error answer.
        if (path !== '/v1/system/health') assert.ok(codes.some((c) => c.startsWith('4')), `${method} ${path}: no error response`);
        assert.ok(Array.isArray(op.security), `${method} ${path}: no security`);
      }
    }
    assert.deepEqual(doc.paths['/v1/tenant']?.get?.security, [{ apiKey: [] }]);
    assert.deepEqual(doc.paths['/v1/system/health']?.get?.security, []);
    assert.ok(doc.paths['/v1/tenants/register']?.post?.requestBody, 'request bodies come from the same schemas');
  });
});
