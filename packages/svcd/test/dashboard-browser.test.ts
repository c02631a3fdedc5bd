// The dashboard in a real browser: Debian's chromium driven by playwright-core, against a real
// svcd on the real engine. One tenant's first hour, as a person would spend it in the page:
// register, sign out and in with the key, deploy a service from a locally built image and watch
// it run, open its URL, stream its logs, set a variable and restart, see a failing deploy's error,
// create a database and reveal its connection string, run a command in an environment's console,
// create and revoke a key, the operator pages with the admin token, a cross-site form refused,
// and sign-out (the old cookie, replayed, no longer works). Then every page at 360 px and on a
// desktop: axe-core finds no serious or critical violation, and a screenshot of each is written
// to test-output/ for a person to look at.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { after, before, test } from 'node:test';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { ADMIN_TOKEN, databaseTestPlan, freePort, startServer, waitFor, type TestServer } from './harness.js';
import { buildImage, docker, ensureTestImages, finished, httpdImageFiles, removeTenantWorkloads, TEST_REGISTRY } from './images.js';
import { ensureDbImages, ensureNodeImage, ensureTemplateImages } from './operator-images.js';
import { boardApi } from './kanban-fixtures.js';

const CHROMIUM = process.env.SVC_TEST_CHROMIUM ?? '/usr/bin/chromium';
const OUTPUT_DIR = resolve(import.meta.dirname, '../../../test-output');
const AXE_SCRIPT = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
/** A service that answers on 8000 and says, every second, what GREETING is. */
const TICKER_IMAGE = `${TEST_REGISTRY}/svc-test/dashboard-ticker:1`;
const MISSING_IMAGE = `${TEST_REGISTRY}/svc-test/no-such-image:1`;

let t: TestServer;
let browser: Browser;
let proxyPort: number;
let crossSite: Server;
const tenants: string[] = [];
/** svcd's log lines: its last warnings and errors are told when a step fails. */
const svcdLog: string[] = [];

before(async () => {
  await ensureTestImages();
  await ensureDbImages();
  await ensureTemplateImages(['default']);
  await ensureNodeImage(); // the task board's base
  await buildImage(TICKER_IMAGE, httpdImageFiles({ index: 'hello from the dashboard test\n', work: 'while :; do echo tick GREETING=$GREETING; sleep 1; done' }));
  await finished(await docker.getImage(TICKER_IMAGE).push({ authconfig: {} }));
  proxyPort = await freePort();
  t = await startServer({ realTime: true, logLines: svcdLog, config: { adminTokens: [ADMIN_TOKEN], proxyListen: `127.0.0.1:${proxyPort}` } });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
  // Another origin (another port: same site, so SameSite does not help; the CSRF header must).
  crossSite = createServer((_req, res) => {
    res.setHeader('content-type', 'text/html');
    res.end(
      `<!doctype html><form id="f" method="POST" action="${t.url}/v1/auth/keys" enctype="text/plain">` +
        `<input name='{"name":"csrf-attack","x":"' value='"}'></form><script>document.getElementById('f').submit()</script>`,
    );
  });
  await new Promise<void>((r) => crossSite.listen(0, '127.0.0.1', r));
});
after(async () => {
  await (browser as Browser | undefined)?.close();
  (crossSite as Server | undefined)?.close();
  await (t as TestServer | undefined)?.close();
  await removeTenantWorkloads(tenants);
});

interface Watched {
  page: Page;
  problems: string[];
  /** What each confirmation dialog asked (accepted), in order. */
  dialogs: string[];
}

/** A page whose script errors and CSP refusals are collected: there must be none. */
async function watchedPage(context: BrowserContext): Promise<Watched> {
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy|Refused to/i.test(m.text())) problems.push(`CSP: ${m.text()}`);
  });
  const dialogs: string[] = [];
  page.on('dialog', (d) => {
    dialogs.push(d.message());
    void d.accept();
  });
  return { page, problems, dialogs };
}

test('in chromium: a tenant registers, deploys, watches, configures and signs out; the operator pages work', async (ctx) => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const watched = await watchedPage(context);
  const { page } = watched;
  try {
    await tenantsFirstHour(ctx, context, watched);
  } catch (err) {
    // What the page showed when a step failed, for the person reading the failure.
    mkdirSync(OUTPUT_DIR, { recursive: true });
    const shot = join(OUTPUT_DIR, 'dashboard-failure.png');
    await page.screenshot({ path: shot, fullPage: true }).catch(() => undefined);
    ctx.diagnostic(`failure screenshot: ${shot}`);
    ctx.diagnostic(`page text: ${(await page.locator('main').innerText().catch(() => '?')).replaceAll('\n', ' / ')}`);
    for (const line of svcdLog.filter((l) => /"level":(4|5|6)0/.test(l)).slice(-30)) ctx.diagnostic(`svcd: ${line.trim()}`);
    throw err;
  } finally {
    await context.close();
  }
});

/**
 * Opens a page from the navigation and waits until it is the one shown: the route follows the
 * hash a render after the click, and a field filled before that is the last page's (seen: the
 * Databases page's Name took the new environment's name, and the Environments form was sent empty).
 */
async function openFromNavigation(page: Page, name: string): Promise<void> {
  await page.getByRole('link', { name }).click();
  await page.getByRole('heading', { level: 1, name, exact: true }).waitFor();
}

async function tenantsFirstHour(ctx: { diagnostic: (m: string) => void }, context: BrowserContext, { page, problems, dialogs }: Watched): Promise<void> {
  await page.goto(t.url);

  // Register from the page; the key is shown once, and the page signs in with it.
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  await page.getByText('Register a new tenant').click();
  await page.getByLabel('Name', { exact: true }).fill('Page Tenant');
  await page.getByLabel('Email', { exact: true }).fill('page-tenant@example.com');
  await page.getByRole('button', { name: 'Register' }).click();
  const apiKey = (await page.getByLabel('API key', { exact: true }).and(page.locator('code')).textContent()) ?? '';
  assert.match(apiKey, /^[0-9a-f]{16}\.\S+$/);
  await page.getByRole('button', { name: 'Continue to the dashboard' }).click();
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  const tenantId = (await t.client.withKey(apiKey).tenant()).id;
  tenants.push(tenantId);
  await databaseTestPlan(t, tenantId, 2); // two services and a PostgreSQL database below
  // The key is nowhere script can read it: the session cookie is HttpOnly, and nothing is stored.
  // (Page code as text: the tests are compiled without the DOM's types.)
  const readable = await page.evaluate<unknown>('({ cookie: document.cookie, local: JSON.stringify(localStorage), session: JSON.stringify(sessionStorage) })');
  assert.deepEqual(readable, { cookie: '', local: '{}', session: '{}' });

  // Sign out, then sign in with the key (a wrong one first).
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('API key', { exact: true }).fill(`${apiKey}x`);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByText('invalid API key (HTTP 401)').waitFor();
  await page.getByLabel('API key', { exact: true }).fill(apiKey);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Overview' }).waitFor();

  // A service from a locally built image: it reaches running, its URL answers, its logs stream.
  await openFromNavigation(page, 'Services');
  await page.getByLabel('Name', { exact: true }).fill('ticker');
  await page.getByLabel('Image', { exact: true }).fill(TICKER_IMAGE);
  await page.getByRole('button', { name: 'Create service' }).click();
  await page.getByRole('heading', { name: 'ticker' }).waitFor();
  const status = page.getByRole('region', { name: 'Status' });
  await status.getByText('running', { exact: true }).waitFor({ timeout: 90_000 });
  const serviceUrl = (await status.getByRole('link').getAttribute('href')) ?? '';
  assert.match(serviceUrl, /^http:\/\/[0-9a-f]+\.localhost:\d+$/);
  const site = await context.newPage();
  await waitFor('the service through the proxy', async () => {
    const r = await site.goto(serviceUrl).catch(() => null);
    return r?.status() === 200 ? true : undefined;
  });
  assert.match(await site.locator('body').innerText(), /hello from the dashboard test/);
  await site.close();
  const logs = page.getByRole('log', { name: 'Service logs' });
  await logs.getByText('tick GREETING=', { exact: false }).first().waitFor({ timeout: 30_000 });

  // A variable, masked in the list, applied by a restart: the new container's logs say it.
  await page.getByLabel('Name', { exact: true }).last().fill('GREETING');
  await page.getByLabel('Value', { exact: true }).fill('hi-from-the-page');
  await page.getByRole('button', { name: 'Set variable' }).click();
  const envList = page.getByRole('region', { name: 'Environment variables' });
  await envList.getByText('GREETING').waitFor();
  assert.equal(await envList.getByText('hi-from-the-page').count(), 0, 'masked until revealed');
  await page.getByRole('button', { name: 'Restart' }).click();
  await logs.getByText('tick GREETING=hi-from-the-page').first().waitFor({ timeout: 90_000 });
  await envList.getByRole('button', { name: 'Reveal values' }).click();
  await envList.getByText('hi-from-the-page').waitFor();
  assert.match(dialogs.at(-1) ?? '', /written to the audit log/, 'the reveal was asked about first');
  const serviceId = serviceUrl.replace(/^http:\/\/([0-9a-f]+)\..*$/, '$1');

  // Replicas: one here; more are the API's 400 on one engine, shown as it said it.
  await status.getByLabel('Replicas', { exact: true }).fill('2');
  await status.getByRole('button', { name: 'Scale' }).click();
  await status.getByText('replicas above 1 need a cluster', { exact: false }).waitFor();
  assert.equal((await t.client.withKey(apiKey).service(serviceId)).replicas, 1);

  // Deployments page ten at a time: ten redeploys (each a deployment; a newer one supersedes one
  // under way) put the service's first deployment on the second page.
  for (let i = 0; i < 10; i++) await t.client.withKey(apiKey).serviceAction(serviceId, 'redeploy');
  const deployments = page.getByRole('region', { name: 'Deployments' });
  const deploymentPages = deployments.getByRole('navigation', { name: 'Deployment pages' });
  await deploymentPages.getByText('1–10').waitFor();
  assert.equal(await deployments.getByText('create', { exact: false }).count(), 0, 'the first deployment is not on the first page');
  await deploymentPages.getByRole('button', { name: 'Next' }).click();
  await deploymentPages.getByText(/^11–1\d$/).waitFor();
  await deployments.getByText('create', { exact: false }).waitFor();
  await deploymentPages.getByRole('button', { name: 'Previous' }).click();
  await deploymentPages.getByText('1–10').waitFor();

  // A deploy that fails shows the API's last_error.
  await openFromNavigation(page, 'Services');
  await page.getByLabel('Name', { exact: true }).fill('broken');
  await page.getByLabel('Image', { exact: true }).fill(MISSING_IMAGE);
  await page.getByRole('button', { name: 'Create service' }).click();
  await page.getByRole('heading', { name: 'broken' }).waitFor();
  const failure = page.getByRole('region', { name: 'Status' }).getByRole('alert');
  await failure.waitFor({ timeout: 60_000 });
  const brokenId = decodeURIComponent(new URL(page.url()).hash.split('/')[2] ?? '');
  const lastError = (await t.client.withKey(apiKey).service(brokenId)).last_error;
  assert.ok(lastError, 'the API has a last_error');
  assert.equal(await failure.textContent(), `Last error: ${lastError}`);

  // A database, and its connection string revealed (after the audit warning, accepted).
  await openFromNavigation(page, 'Databases');
  await page.getByLabel('Name', { exact: true }).fill('maindb');
  await page.getByRole('button', { name: 'Create database' }).click();
  const dbs = page.getByRole('region', { name: 'Your databases' });
  await dbs.getByText('running', { exact: true }).waitFor({ timeout: 120_000 });
  await dbs.getByRole('button', { name: 'Reveal connection string' }).click();
  await dbs.getByText(/^postgres(ql)?:\/\/.*@maindb:5432/).waitFor();
  assert.match(dialogs.at(-1) ?? '', /holds the password.*audit log/);

  // An environment, and a command in its console.
  await openFromNavigation(page, 'Environments');
  await page.getByLabel('Name', { exact: true }).fill('work');
  await page.getByRole('button', { name: 'Create environment' }).click();
  await page.getByRole('heading', { name: 'work' }).waitFor({ timeout: 120_000 });
  await page.getByRole('region', { name: 'Status' }).getByText('running', { exact: true }).waitFor({ timeout: 120_000 });
  const environmentId = decodeURIComponent(new URL(page.url()).hash.split('/')[2] ?? '');
  // The lease, extended by an hour from the page.
  const leaseBefore = (await t.client.withKey(apiKey).environment(environmentId)).lease_expires_at;
  await page.getByRole('button', { name: 'Extend by 1 hour' }).click();
  await waitFor('the lease extended', async () => ((await t.client.withKey(apiKey).environment(environmentId)).lease_expires_at >= leaseBefore + 3_500 ? true : undefined));
  await page.getByLabel('Command', { exact: true }).fill('echo hello-from-console; echo oops >&2; exit 3');
  await page.getByRole('button', { name: 'Run' }).click();
  const console_ = page.getByRole('log', { name: 'Command output' });
  await console_.getByText('hello-from-console', { exact: true }).waitFor({ timeout: 30_000 });
  await console_.getByText('oops', { exact: true }).waitFor();
  await console_.getByText(/^exit 3 · \d+ ms/).waitFor();

  // The task board: created from the page, running, opened at its url, its admin token revealed
  // after the audit warning; the token the page shows is the board's (the board's API takes it,
  // and refuses another).
  await openFromNavigation(page, 'Task board');
  await page.getByRole('button', { name: 'Create the task board' }).click();
  const boardFacts = page.getByRole('region', { name: 'Board' });
  await boardFacts.getByText('running', { exact: true }).waitFor({ timeout: 180_000 });
  const boardUrl = (await boardFacts.getByRole('link').getAttribute('href')) ?? '';
  assert.match(boardUrl, /^http:\/\/127\.0\.0\.1:\d+\/$/);
  const boardPage = await context.newPage();
  assert.equal((await boardPage.goto(boardUrl))?.status(), 200, 'the board opens at its url');
  await boardPage.close();
  await boardFacts.getByRole('button', { name: 'Reveal admin token' }).click();
  assert.match(dialogs.at(-1) ?? '', /written to the audit log/);
  const boardToken = (await boardFacts.getByLabel('Board admin token', { exact: true }).textContent()) ?? '';
  assert.equal((await boardApi(boardUrl, boardToken, 'GET', '/api/boards')).status, 200);
  assert.equal((await boardApi(boardUrl, `${boardToken}x`, 'GET', '/api/boards')).status, 401);

  // A key: created and shown once, then revoked.
  await openFromNavigation(page, 'API keys');
  await page.getByLabel('Name', { exact: true }).fill('temporary');
  await page.getByRole('button', { name: 'Create key' }).click();
  const created = (await page.locator('.secret code').textContent()) ?? '';
  assert.equal((await t.client.withKey(created).tenant()).id, tenantId, 'the shown key works');
  await page.getByRole('button', { name: /^Revoke temporary/ }).click();
  await waitFor('the key revoked', async () => ((await t.client.withKey(created).raw('GET', '/v1/tenant')).status === 401 ? true : undefined));
  await waitFor('the revoked key off the list', async () => ((await page.getByRole('cell', { name: 'temporary', exact: true }).count()) === 0 ? true : undefined));

  // A form on another origin posts to the API with the browser's cookie: refused, nothing made.
  const attack = await context.newPage();
  const address = crossSite.address();
  assert.ok(address && typeof address === 'object');
  await attack.goto(`http://127.0.0.1:${address.port}/`);
  await attack.waitForURL(`${t.url}/v1/auth/keys`);
  assert.match(await attack.locator('body').innerText(), /CSRF|cross-origin/);
  await attack.close();
  assert.ok(!(await t.client.withKey(apiKey).listKeys()).some((k) => k.name === 'csrf-attack'));
  // The page's own origin, with the cookie, but without the page's CSRF header: refused too
  // (the same request with it made the key above).
  const noHeader = (await page.evaluate<unknown>(
    `fetch('/v1/auth/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'no-csrf-header' }) }).then(async (r) => ({ status: r.status, body: await r.json() }))`,
  )) as { status: number; body: { error?: string } };
  assert.equal(noHeader.status, 403);
  assert.match(noHeader.body.error ?? '', /CSRF/);
  assert.ok(!(await t.client.withKey(apiKey).listKeys()).some((k) => k.name === 'no-csrf-header'));

  // The overview reads everything in one round of parallel requests, and shows the failure
  // (a new tab: the same cookie, nothing cached).
  const overview = await context.newPage();
  const events: string[] = [];
  const overviewRead = (url: string) => url.includes('/v1/') && !url.includes('/v1/auth/session');
  overview.on('request', (r) => {
    if (overviewRead(r.url())) events.push(`start ${new URL(r.url()).pathname}`);
  });
  overview.on('requestfinished', (r) => {
    if (overviewRead(r.url())) events.push(`end ${new URL(r.url()).pathname}`);
  });
  await overview.goto(`${t.url}/#/`);
  await overview.getByRole('heading', { name: 'Overview' }).waitFor();
  await overview.getByRole('region', { name: 'Needs attention' }).getByRole('link', { name: 'Service broken' }).waitFor();
  await overview.getByRole('region', { name: 'Recent activity' }).getByText('key.revoked').first().waitFor();
  const firstEnd = events.findIndex((e) => e.startsWith('end'));
  const starts = events.filter((e) => e.startsWith('start'));
  assert.ok(starts.length >= 5, events.join(', '));
  assert.ok(events.slice(firstEnd).every((e) => e.startsWith('end')), `no request waits for another: ${events.join(', ')}`);

  // Keyboard: the first Tab reaches the skip link.
  await overview.keyboard.press('Tab');
  assert.equal(await overview.evaluate<unknown>('document.activeElement?.textContent'), 'Skip to content');
  // ...and takes focus to the content without leaving the view (the hash is the route).
  await overview.keyboard.press('Enter');
  assert.equal(await overview.evaluate<unknown>('document.activeElement?.id'), 'main');
  assert.equal(new URL(overview.url()).hash, '#/');
  await overview.close();

  // The operator pages: the admin token, typed once, opens tenants, quotas and health.
  await openFromNavigation(page, 'Operator');
  await page.getByLabel('Admin token', { exact: true }).fill(ADMIN_TOKEN);
  await page.getByRole('button', { name: 'Open operator pages' }).click();
  const row = page.getByRole('row').filter({ hasText: 'Page Tenant' });
  await row.waitFor();
  assert.match(await row.innerText(), /active/);
  await page.getByRole('region', { name: 'System health' }).getByText('available').first().waitFor();
  await row.getByRole('button', { name: 'Quotas of Page Tenant' }).click();
  await page.getByLabel('Services', { exact: true }).fill('7');
  await page.getByRole('button', { name: 'Save quotas' }).click();
  await page.getByText('Saved.').waitFor();
  const op = t.client.withKey('');
  op.adminToken = ADMIN_TOKEN;
  assert.equal((await op.tenantQuotas(tenantId)).max_services, 7);

  // Every page, both widths: no serious accessibility violation, and a screenshot to look at.
  const cookies = await context.cookies();
  await auditEveryPage(ctx, cookies, { serviceId, environmentId });

  // Sign-out: the page is back at sign-in, and the cookie it had, replayed, is refused.
  const sessionCookie = cookies.find((c) => c.name === 'svc_session');
  assert.ok(sessionCookie);
  await page.goto(`${t.url}/#/`);
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  const replay = await t.client.raw('GET', '/v1/tenant', { auth: false, headers: { cookie: `svc_session=${sessionCookie.value}` } });
  assert.equal(replay.status, 401);
  assert.deepEqual(problems, [], 'no script errors and no CSP refusals on the page');
}

/** axe-core on every view at 360 px and 1280 px, and a screenshot of each into test-output/. */
async function auditEveryPage(
  ctx: { diagnostic: (m: string) => void },
  cookies: Awaited<ReturnType<BrowserContext['cookies']>>,
  ids: { serviceId: string; environmentId: string },
): Promise<void> {
  mkdirSync(OUTPUT_DIR, { recursive: true });
  const views: Array<[string, string, string]> = [
    ['overview', '#/', 'Overview'],
    ['services', '#/services', 'Services'],
    ['service', `#/services/${ids.serviceId}`, 'ticker'],
    ['databases', '#/databases', 'Databases'],
    ['environments', '#/environments', 'Environments'],
    ['environment', `#/environments/${ids.environmentId}`, 'work'],
    ['board', '#/board', 'Task board'],
    ['keys', '#/keys', 'API keys'],
    ['activity', '#/activity', 'Activity'],
    ['operator', '#/operator', 'Operator'],
    ['sign-in', '#/', 'Sign in'],
  ];
  const violations: string[] = [];
  for (const width of [360, 1280]) {
    // axe is injected as a script, which the page's CSP refuses: this context only bypasses it.
    const context = await browser.newContext({ viewport: { width, height: 800 }, bypassCSP: true });
    const page = await context.newPage();
    for (const [name, hash, heading] of views) {
      if (name === 'sign-in') await context.clearCookies();
      else await context.addCookies(cookies);
      // A full load of each view (a change of hash alone keeps the page's state).
      await page.goto('about:blank');
      await page.goto(`${t.url}/${hash}`);
      await page.getByRole('heading', { name: heading, exact: true }).first().waitFor();
      if (name === 'operator') {
        // The operator's pages themselves, behind the token (a fresh load forgets it).
        await page.getByLabel('Admin token', { exact: true }).fill(ADMIN_TOKEN);
        await page.getByRole('button', { name: 'Open operator pages' }).click();
        await page.getByRole('row').filter({ hasText: 'Page Tenant' }).waitFor();
      }
      // Data shown, not "Loading…" (followed logs keep a request open: the network never idles).
      await page.waitForFunction('!document.querySelector(".loading")');
      await page.waitForTimeout(300);
      await page.addScriptTag({ path: AXE_SCRIPT });
      const found = await page.evaluate<Array<{ id: string; impact: string | null; count: number }>>(
        "axe.run({ resultTypes: ['violations'] }).then((r) => r.violations.map((v) => ({ id: v.id, impact: v.impact, count: v.nodes.length })))",
      );
      for (const v of found) if (v.impact === 'serious' || v.impact === 'critical') violations.push(`${name} @${width}: ${v.id} (${v.impact}, ${v.count})`);
      const shot = join(OUTPUT_DIR, `dashboard-${name}-${width}.png`);
      await page.screenshot({ path: shot, fullPage: true });
      ctx.diagnostic(`screenshot: ${shot}`);
      // Nothing wider than the viewport at 360 px (tables scroll inside their own box).
      const overflow = await page.evaluate<number>('document.documentElement.scrollWidth - document.documentElement.clientWidth');
      assert.ok(overflow <= 0, `${name} @${width}: the page is ${overflow}px wider than the window`);
    }
    await context.close();
  }
  assert.deepEqual(violations, [], 'no serious or critical accessibility violations');
}

test('in chromium: a session ended elsewhere (its key revoked) sends the open page back to sign-in', async () => {
  const register = await t.client.raw<{ tenant_id: string; api_key: string }>('POST', '/v1/tenants/register', {
    body: { name: 'Ended Elsewhere', email: 'ended-elsewhere@example.com' },
    auth: false,
    headers: { 'x-real-ip': '10.66.0.1' },
  });
  assert.equal(register.status, 201, register.text);
  tenants.push(register.body.tenant_id);
  const owner = t.client.withKey(register.body.api_key);
  const pageKey = await owner.createKey({ name: 'page' });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const { page, problems } = await watchedPage(context);
  try {
    await page.goto(t.url);
    await page.getByLabel('API key', { exact: true }).fill(pageKey.api_key);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await openFromNavigation(page, 'Services');
    await owner.revokeKey(pageKey.id);
    // The list polls every 5 s: its 401 re-reads the session, which is gone.
    await page.getByRole('heading', { name: 'Sign in' }).waitFor({ timeout: 20_000 });
    assert.equal(await page.title(), 'Sign in · svc');
    assert.deepEqual(problems, []);
  } finally {
    await context.close();
  }
});
