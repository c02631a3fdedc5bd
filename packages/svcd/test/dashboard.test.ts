// How svcd serves the dashboard's files: from memory, with a strict CSP on the page, hashed
// assets cached for good, gzip when asked, and nothing but the built files (no path reaches the
// filesystem). Then the real build (make build): its page loads only its own files, and the
// JavaScript a first visit loads stays within 150 KB gzipped.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { after, before, describe, test } from 'node:test';
import { DEFAULT_DASHBOARD_DIR } from '../src/config.js';
import { startServer, type TestServer } from './harness.js';

const INITIAL_JS_BUDGET_BYTES = 150 * 1024;

describe('the dashboard files, served by svcd', () => {
  let t: TestServer;
  let dir: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'svc-dashboard-'));
    mkdirSync(join(dir, 'assets'));
    writeFileSync(join(dir, 'index.html'), '<!doctype html><script type="module" src="/assets/index-abc123.js"></script>');
    writeFileSync(join(dir, 'assets/index-abc123.js'), `console.log(${JSON.stringify('x'.repeat(4000))});`);
    writeFileSync(join(dir, 'assets/notes.txt'), 'not a servable type');
    writeFileSync(join(dir, 'secret.json'), '{"not":"under assets"}');
    t = await startServer({ config: { dashboardDir: dir } });
  });
  after(async () => {
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('the page: a strict Content-Security-Policy, never framed, revalidated each time', async () => {
    const r = await fetch(`${t.url}/`);
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('content-type'), 'text/html; charset=utf-8');
    const csp = r.headers.get('content-security-policy') ?? '';
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self'(;|$)/);
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
    assert.match(csp, /frame-ancestors 'none'/);
    assert.equal(r.headers.get('x-frame-options'), 'DENY');
    assert.equal(r.headers.get('cache-control'), 'no-cache');
    assert.match(await r.text(), /index-abc123\.js/);
  });

  test('hashed assets are immutable for a year, gzipped for clients that take it', async () => {
    const r = await fetch(`${t.url}/assets/index-abc123.js`, { headers: { 'accept-encoding': 'gzip' } });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('cache-control'), 'public, max-age=31536000, immutable');
    assert.equal(r.headers.get('content-type'), 'text/javascript; charset=utf-8');
    assert.equal(r.headers.get('x-content-type-options'), 'nosniff');
    // fetch decodes gzip itself; the encoding header says it was sent compressed.
    assert.equal(r.headers.get('content-encoding'), 'gzip');
    assert.match(await r.text(), /^console\.log\("x{4000}"\);$/);
    const plain = await t.client.raw('GET', '/assets/index-abc123.js', { headers: { 'accept-encoding': 'identity' } });
    assert.equal(plain.headers.get('content-encoding'), null);
    assert.equal(plain.text.length, 'console.log("");'.length + 4000);
  });

  test('only built files of known types: no other path, no traversal, no listing', async () => {
    for (const path of ['/assets/notes.txt', '/assets/nope.js', '/assets/..%2findex.html', '/assets/..%2f..%2fpackage.json', '/secret.json', '/assets/', '/index.html', '/assets/%2e%2e/index.html']) {
      const r = await fetch(`${t.url}${path}`);
      assert.equal(r.status, 404, path);
      assert.match(r.headers.get('content-type') ?? '', /json/, path);
    }
    // API routes are unaffected, and unknown API paths still answer the API's 404.
    assert.equal((await fetch(`${t.url}/v1/system/health`)).status, 200);
    assert.equal((await fetch(`${t.url}/v1/nope`)).status, 404);
  });

  test('without a build, / says so with a 404 (the API still works)', async () => {
    const bare = await startServer({ config: { dashboardDir: join(dir, 'missing') } });
    try {
      const r = await bare.client.raw<{ error: string }>('GET', '/');
      assert.equal(r.status, 404);
      assert.match(r.body.error, /dashboard is not built/);
    } finally {
      await bare.close();
    }
  });
});

describe('the built dashboard (make build)', () => {
  const html = readFileSync(join(DEFAULT_DASHBOARD_DIR, 'index.html'), 'utf8');

  test('its page has no inline script or style, and names only its own files', () => {
    assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/, 'every script has a src');
    assert.doesNotMatch(html, /<style|\sstyle=/, 'no inline style');
    for (const [, url] of html.matchAll(/(?:src|href)="([^"]+)"/g)) {
      assert.ok(url === 'data:,' || url?.startsWith('/assets/'), `only own assets: ${url}`);
    }
  });

  test('the JavaScript of a first visit is at most 150 KB gzipped', (ctx) => {
    const scripts = [...html.matchAll(/<(?:script[^>]*src|link[^>]*rel="modulepreload"[^>]*href)="(\/assets\/[^"]+\.js)"/g)].map((m) => m[1] ?? '');
    assert.ok(scripts.length >= 1);
    const gzipped = scripts.reduce((sum, path) => sum + gzipSync(readFileSync(join(DEFAULT_DASHBOARD_DIR, path)), { level: 9 }).length, 0);
    ctx.diagnostic(`initial JavaScript: ${(gzipped / 1024).toFixed(1)} KB gzipped in ${scripts.length} file(s)`);
    assert.ok(gzipped <= INITIAL_JS_BUDGET_BYTES, `${gzipped} bytes`);
  });
});
