// The task board in a real browser: Debian's chromium driven by playwright-core opens the url
// svcd gives, signs in with the revealed admin token, creates a board and a card, moves the card,
// and leaves a screenshot in test-output/.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { after, before, test } from 'node:test';
import { chromium, type Browser } from 'playwright-core';
import { newTenant, startServer, type TestServer } from './harness.js';
import { removeTenantWorkloads } from './images.js';
import { boardApi, runningBoard, type BoardWithColumns } from './kanban-fixtures.js';
import { ensureNodeImage } from './operator-images.js';

const CHROMIUM = process.env.SVC_TEST_CHROMIUM ?? '/usr/bin/chromium';
const OUTPUT_DIR = resolve(import.meta.dirname, '../../../test-output');

let t: TestServer;
let browser: Browser;
const tenants: string[] = [];

before(async () => {
  await ensureNodeImage();
  t = await startServer({ realTime: true });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
});
after(async () => {
  // Either is still unset when before() failed part-way.
  await (browser as Browser | undefined)?.close();
  await (t as TestServer | undefined)?.close();
  await removeTenantWorkloads(tenants);
});

test('in chromium: sign in with the admin token, create a board and a card, move the card', async (ctx) => {
  const a = await newTenant(t);
  tenants.push(a.id);
  await a.client.createKanban();
  const b = await runningBoard(a.client);
  const { admin_token: token } = await a.client.kanbanAdminToken();

  const page = await browser.newPage({ viewport: { width: 1200, height: 700 } });
  const problems: string[] = [];
  page.on('pageerror', (err) => problems.push(err.message));
  await page.goto(b.url);
  await page.getByLabel('Admin token').fill('a-wrong-token');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByText('That admin token is not valid.').waitFor();
  assert.equal(await page.getByRole('button', { name: 'Sign out' }).isVisible(), false);

  await page.getByLabel('Admin token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByText('No boards yet: create one.').waitFor();
  assert.equal(await page.getByRole('button', { name: 'Sign in' }).isVisible(), false, 'the sign-in form is gone');
  await page.getByLabel('New board').fill('Launch plan');
  await page.getByRole('button', { name: 'Create board' }).click();
  await page.getByRole('heading', { name: 'Launch plan' }).waitFor();

  await page.getByLabel('Card title for To do').fill('Write the release notes');
  await page.getByRole('button', { name: 'Add card' }).first().click();
  const todo = page.getByRole('region', { name: 'To do' });
  const doing = page.getByRole('region', { name: 'Doing' });
  await todo.getByRole('listitem', { name: 'Write the release notes' }).waitFor();
  await todo.getByRole('button', { name: 'Move to Doing' }).click();
  await doing.getByRole('listitem', { name: 'Write the release notes' }).waitFor();
  assert.equal(await todo.getByRole('listitem').count(), 0);

  // What the page shows is what the board stored.
  const boards = (await boardApi<Array<{ id: number; name: string }>>(b.url, token, 'GET', '/api/boards')).body;
  assert.deepEqual(boards.map((x) => x.name), ['Launch plan']);
  const stored = (await boardApi<BoardWithColumns>(b.url, token, 'GET', `/api/boards/${boards[0]!.id}`)).body;
  assert.deepEqual(stored.columns.map((c) => [c.name, c.cards.map((k) => k.title)]), [['To do', []], ['Doing', ['Write the release notes']], ['Done', []]]);

  // Still signed in after a reload (the token is kept for the tab), and the card is where it was.
  await page.reload();
  await page.getByRole('region', { name: 'Doing' }).getByRole('listitem', { name: 'Write the release notes' }).waitFor();
  assert.deepEqual(problems, [], 'no script errors on the page');

  mkdirSync(OUTPUT_DIR, { recursive: true });
  const shot = join(OUTPUT_DIR, 'kanban-board.png');
  await page.screenshot({ path: shot, fullPage: true });
  ctx.diagnostic(`screenshot: ${shot}`);
});
