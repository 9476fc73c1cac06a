// The dashboard in a real browser: API keys (create, show once, rotate,
// revoke), usage, the request log, the audit log, projects, isolation between accounts,
// keyboard use and labels.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  ADMIN,
  ALICE,
  BOB,
  PASSWORD,
  hintOf,
  launchBrowser,
  modelsStatus,
  screenshot,
  signIn,
  signInAt,
  startServer,
} from './helpers.mjs';

let server;
let browser;

before(async () => {
  [server, browser] = await Promise.all([startServer(), launchBrowser()]);
});

after(async () => {
  await Promise.allSettled([browser?.close(), server?.stop()]);
});

/** A fresh context (no cookies) and a page in it; closed by the caller. */
async function freshPage() {
  const context = await browser.newContext({ baseURL: server.url });
  return { context, page: await context.newPage() };
}

/** Creates a key through the form; resolves to the secret from `#new-key`. */
async function createKey(page, name, expiresLabel) {
  await page.goto('/dashboard/keys');
  await page.getByLabel('Name').fill(name);
  await page.getByLabel('Expires').selectOption({ label: expiresLabel });
  await Promise.all([
    page.waitForURL('**/dashboard/keys/new'),
    page.getByRole('button', { name: 'Create key' }).click(),
  ]);
  return page.locator('#new-key').inputValue();
}

/** The list's row of the key named `name` (exactly one). */
function rowOf(page, name) {
  return page.locator('tbody tr').filter({
    has: page.getByRole('cell', { name, exact: true }),
  });
}

describe('dashboard', () => {
  test('create a key, see it once, use it, revoke it', async () => {
    const { context, page } = await freshPage();
    try {
      await page.goto('/dashboard/login');
      await screenshot(page, 'login');
      await signIn(page, ALICE);
      assert.equal(new URL(page.url()).pathname, '/dashboard/keys');
      await assert.doesNotReject(page.getByRole('heading', { name: 'API keys', level: 1 }).waitFor());
      await screenshot(page, 'keys');

      const secret = await createKey(page, 'browser test', '30 days');
      assert.match(secret, /^sk-svc-[A-Za-z0-9_-]{20,}$/);
      assert.equal(await page.locator('#new-key').getAttribute('readonly'), '');
      assert.equal(
        await page.getByRole('heading', { level: 1 }).textContent(),
        'Your new key “browser test”',
      );
      assert.equal(await page.getByLabel('API key').inputValue(), secret);
      await screenshot(page, 'new-key');

      // The Copy button puts the key on the clipboard.
      await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url });
      await page.getByRole('button', { name: 'Copy' }).click();
      await page.locator('#copy-status', { hasText: 'Copied' }).waitFor();
      assert.equal(await page.evaluate(() => navigator.clipboard.readText()), secret);

      assert.equal(await modelsStatus(server, secret), 200);

      // Shown once: reloading finds nothing and lands on the list.
      const reloaded = await page.reload();
      assert.equal(new URL(page.url()).pathname, '/dashboard/keys');
      assert.ok(!(await reloaded.text()).includes(secret), 'the reloaded HTML holds the key');
      assert.ok(!(await page.content()).includes(secret), 'the reloaded page holds the key');
      const again = await page.goto('/dashboard/keys/new');
      assert.equal(new URL(page.url()).pathname, '/dashboard/keys');
      assert.ok(!(await again.text()).includes(secret));

      const row = rowOf(page, 'browser test');
      assert.equal(await row.count(), 1);
      await screenshot(page, 'keys-with-key');
      const id = await row.getAttribute('id');
      assert.ok(id, 'the row has the key id as its id');
      const cells = await row.locator('td').allTextContents();
      assert.ok(cells.includes(hintOf(secret)), `hint ${hintOf(secret)} not in ${cells}`);
      assert.ok(cells.includes('active'), `state not active: ${cells}`);
      assert.ok(cells.includes('Dashboard'), `created by not Dashboard: ${cells}`);
      // Columns: Name, Key, Created, Last used, Expires, State, Created by.
      const [, , created, , expires] = cells;
      const at = (text) => Date.parse(text.replace(' ', 'T').replace(' UTC', ':00Z'));
      const days = (at(expires) - at(created)) / 86_400_000;
      assert.ok(Math.abs(days - 30) < 0.01, `created ${created}, expires ${expires}`);

      // Usage: one chat completion with the key shows up on the usage page.
      const chat = await fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${secret}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: 'svc', messages: [{ role: 'user', content: 'hello there' }] }),
      });
      assert.equal(chat.status, 200, await chat.text());
      const usageRow = page.locator('tbody tr', { hasText: `browser test (${hintOf(secret)})` });
      for (let attempt = 0; attempt < 20; attempt++) {
        await page.goto('/dashboard/usage');
        if ((await usageRow.count()) > 0) break;
        await page.waitForTimeout(250);
      }
      assert.equal(await usageRow.count(), 1, 'the usage table has a row for the key');
      assert.ok(await page.locator('svg.chart').isVisible());
      assert.ok((await page.locator('svg.chart rect.bar').count()) >= 30);
      await screenshot(page, 'usage');

      // Revoke through the confirmation page.
      await page.goto('/dashboard/keys');
      await Promise.all([
        page.waitForURL(`**/dashboard/keys/${id}/revoke`),
        row.getByRole('link', { name: 'Revoke browser test' }).click(),
      ]);
      await page.getByRole('heading', { name: 'Revoke “browser test”?' }).waitFor();
      await screenshot(page, 'revoke-confirm');
      await Promise.all([
        page.waitForURL('**/dashboard/keys?revoked=*'),
        page.getByRole('button', { name: 'Revoke key' }).click(),
      ]);
      await page.getByRole('status').filter({ hasText: 'Key “browser test” was revoked.' }).waitFor();
      await screenshot(page, 'keys-after-revoke');
      const revokedCells = await rowOf(page, 'browser test').locator('td').allTextContents();
      assert.ok(revokedCells.includes('revoked'), `state not revoked: ${revokedCells}`);
      assert.equal(await rowOf(page, 'browser test').getByRole('link', { name: /Revoke/ }).count(), 0);

      assert.equal(await modelsStatus(server, secret), 401);

      // Sign out from the header: the dashboard asks for sign-in again.
      await Promise.all([
        page.waitForURL('**/dashboard/login'),
        page.getByRole('button', { name: 'Sign out' }).click(),
      ]);
      await page.goto('/dashboard/keys');
      const back = new URL(page.url());
      assert.equal(back.pathname, '/dashboard/login');
      assert.equal(back.searchParams.get('next'), '/dashboard/keys');
    } finally {
      await context.close();
    }
  });

  test("bob sees none of alice's keys and cannot revoke them", async () => {
    const alice = await freshPage();
    const bob = await freshPage();
    const admin = await freshPage();
    try {
      await signInAt(alice.page, server, ALICE);
      const secret = await createKey(alice.page, 'alice private', 'Never');
      await alice.page.goto('/dashboard/keys');
      const id = await rowOf(alice.page, 'alice private').getAttribute('id');
      assert.ok(id);

      await signInAt(bob.page, server, BOB);
      await bob.page.goto('/dashboard/keys');
      assert.equal(await bob.page.locator(`tr[id="${id}"]`).count(), 0);
      const html = await bob.page.content();
      assert.ok(!html.includes('alice private'), "bob's list names alice's key");
      assert.ok(!html.includes(hintOf(secret)), "bob's list shows alice's key hint");
      assert.ok(!html.includes(ALICE), "bob's list shows alice's email");

      const page = await bob.page.goto(`/dashboard/keys/${id}/revoke`);
      assert.equal(page.status(), 404);
      assert.ok(!(await page.text()).includes('alice private'));
      // Nor by posting the form directly, with bob's own CSRF token.
      await bob.page.goto('/dashboard/keys');
      const csrf = await bob.page.locator('form.signout input[name="csrf"]').inputValue();
      const post = await bob.context.request.post(`/dashboard/keys/${id}/revoke`, {
        form: { csrf },
        maxRedirects: 0,
      });
      assert.equal(post.status(), 404);
      assert.equal(await modelsStatus(server, secret), 200);

      // The admin sees it, with its owner.
      await signInAt(admin.page, server, ADMIN);
      await admin.page.goto('/dashboard/keys');
      const cells = await admin.page.locator(`tr[id="${id}"] td`).allTextContents();
      assert.ok(cells.includes('alice private') && cells.includes(ALICE), `${cells}`);
    } finally {
      await Promise.all([alice.context.close(), bob.context.close(), admin.context.close()]);
    }
  });

  test('keyboard: Tab order and Enter on the sign-in page', async () => {
    const { context, page } = await freshPage();
    try {
      await page.goto('/dashboard/login');
      const describeFocus = () =>
        page.evaluate(() => {
          const e = document.activeElement;
          if (!e || e === document.body) return 'body';
          return e.id ? `#${e.id}` : `${e.tagName.toLowerCase()}:${e.textContent.trim()}`;
        });
      // From the top of the page, as a keyboard user starts.
      await page.evaluate(() => document.activeElement?.blur());
      const order = [];
      for (let i = 0; i < 12; i++) {
        await page.keyboard.press('Tab');
        order.push(await describeFocus());
      }
      const email = order.indexOf('#email');
      assert.ok(email >= 0, `Tab never reaches the email field: ${order}`);
      assert.deepEqual(
        order.slice(email, email + 3),
        ['#email', '#password', 'button:Sign in'],
        `focus order ${order}`,
      );

      // Typing and Enter alone sign in.
      await page.getByLabel('Email').focus();
      await page.keyboard.type(ALICE);
      await page.keyboard.press('Tab');
      await page.keyboard.type(PASSWORD);
      await Promise.all([page.waitForURL('**/dashboard/keys'), page.keyboard.press('Enter')]);
      await page.getByRole('heading', { name: 'API keys', level: 1 }).waitFor();
    } finally {
      await context.close();
    }
  });

  test('every input and select of the keys page has a label', async () => {
    const { context, page } = await freshPage();
    try {
      await signInAt(page, server, ALICE);
      await page.goto('/dashboard/keys');
      await assertEveryControlLabelled(page);
      assert.equal(await page.getByLabel('Name', { exact: true }).getAttribute('id'), 'key-name');
      assert.equal(await page.getByLabel('Expires', { exact: true }).getAttribute('id'), 'key-expires');
    } finally {
      await context.close();
    }
  });

  test('rotate a key and find it in the audit log, with JavaScript off', async () => {
    const context = await browser.newContext({ baseURL: server.url, javaScriptEnabled: false });
    const page = await context.newPage();
    try {
      await signInAt(page, server, ADMIN);
      const old = await createKey(page, 'rotating', 'Never');
      await page.goto('/dashboard/keys');
      await rowOf(page, 'rotating').getByRole('link', { name: 'Rotate rotating' }).click();
      await screenshot(page, 'rotate-confirm');
      await page.getByLabel('The old key keeps working for').selectOption({ label: '1 hour' });
      await Promise.all([
        page.waitForURL('**/dashboard/keys/new'),
        page.getByRole('button', { name: 'Rotate key' }).click(),
      ]);
      const fresh = await page.locator('#new-key').inputValue();
      assert.notEqual(fresh, old);
      assert.equal(await modelsStatus(server, fresh), 200);
      assert.equal(await modelsStatus(server, old), 200, 'the old key works during the grace');
      await page.goto('/dashboard/keys');
      await screenshot(page, 'keys-rotated');
      assert.match(await page.locator('tbody').textContent(), /rotated: works until/);

      await page.getByRole('link', { name: 'Audit log' }).click();
      await page.getByLabel('Event').selectOption('api_key.rotated');
      await page.getByRole('button', { name: 'Show' }).click();
      await screenshot(page, 'audit-log');
      const rows = page.locator('tbody tr');
      assert.equal(await rows.count(), 1);
      assert.match(await rows.first().textContent(), /api_key\.rotated.*admin@example\.com/s);
      const html = await page.content();
      assert.ok(!html.includes(fresh) && !html.includes(old), 'no key in the audit log');
      for (const label of ['Event', 'Actor (email, account or key id)', 'Project', 'From (UTC)', 'To (UTC)']) {
        assert.ok(await page.getByLabel(label, { exact: true }).isVisible(), label);
      }
    } finally {
      await context.close();
    }
  });

  test("requests: alice finds her requests, filters the failed one; bob does not see them", async () => {
    const { context, page } = await freshPage();
    const other = await freshPage();
    try {
      await signInAt(page, server, ALICE);
      const secret = await createKey(page, 'request log', '30 days');
      await page.goto('/dashboard/keys');
      const keyId = await rowOf(page, 'request log').getAttribute('id');
      const chat = (body) =>
        fetch(`${server.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { Authorization: `Bearer ${secret}`, 'Content-Type': 'application/json' },
          body: JSON.stringify(body),
        });
      const ok = await chat({ model: 'svc', messages: [{ role: 'user', content: 'the private prompt' }] });
      assert.equal(ok.status, 200, await ok.text());
      const bad = await chat({ model: 'svc' });
      assert.equal(bad.status, 400);

      await Promise.all([
        page.waitForURL('**/dashboard/requests'),
        page.getByRole('link', { name: 'Requests' }).click(),
      ]);
      // Rows are written within a second or so. (Alice's other tests'
      // requests are there too: only this key's are counted.)
      const rows = page.locator('tbody tr');
      for (let attempt = 0; attempt < 20; attempt++) {
        await page.goto(`/dashboard/requests?key=${keyId}`);
        if ((await rows.count()) >= 2) break;
        await new Promise((r) => setTimeout(r, 250));
      }
      assert.equal(await page.getByLabel('Key id').inputValue(), keyId);
      await screenshot(page, 'requests');
      assert.equal(await rows.count(), 2);
      const text = await page.locator('tbody').textContent();
      assert.match(text, /POST \/v1\/chat\/completions/);
      assert.ok(!(await page.content()).includes('the private prompt'), 'no prompt on the page');
      assert.ok(!(await page.content()).includes(secret), 'no key on the page');

      await page.getByLabel('Status (429 or 4xx)').fill('4xx');
      await Promise.all([
        page.waitForURL((u) => u.searchParams.get('status') === '4xx'),
        page.getByRole('button', { name: 'Show' }).click(),
      ]);
      await screenshot(page, 'requests-failed');
      assert.equal(await page.locator('tbody tr').count(), 1);
      assert.match(await page.locator('tbody tr').first().textContent(), /400\s+invalid_request_error/);
      await assertEveryControlLabelled(page, 5);

      await signInAt(other.page, server, BOB);
      await other.page.goto(`/dashboard/requests?key=${keyId}`);
      assert.equal(await other.page.locator('tbody tr').count(), 0, "bob sees none of alice's requests");
    } finally {
      await Promise.allSettled([context.close(), other.context.close()]);
    }
  });

  test('projects: create one, add a member, see its budget bar, with JavaScript off; every field labelled', async () => {
    const context = await browser.newContext({ baseURL: server.url, javaScriptEnabled: false });
    const page = await context.newPage();
    try {
      await signInAt(page, server, ADMIN);
      await page.goto('/dashboard/keys');
      await page.getByRole('link', { name: 'Projects' }).click();
      await page.getByRole('heading', { name: 'Projects', level: 1 }).waitFor();
      await assertEveryControlLabelled(page);
      await page.getByLabel('Name', { exact: true }).fill('Browser team');
      await page.getByLabel(/^Allowed models/).fill('svc*, other');
      await page.getByLabel(/^Budget \(/).fill('1000');
      await page.getByLabel('Budget renews every').selectOption('week');
      await Promise.all([
        page.waitForURL('**/dashboard/projects/proj_*'),
        page.getByRole('button', { name: 'Create project' }).click(),
      ]);
      await page.getByRole('heading', { name: 'Browser team', level: 1 }).waitFor();
      assert.match(await page.getByRole('status').textContent(), /The project was created/);
      assert.match(await page.locator('.facts').textContent(), /svc\*, other/);
      assert.match(await page.locator('.facts').textContent(), /0 \/ 1000 tokens this week/);
      assert.equal(await page.locator('meter').getAttribute('max'), '1000');
      assert.equal(await page.locator('meter').getAttribute('high'), '800', 'the alert threshold');
      await assertEveryControlLabelled(page);

      // A spend budget instead: US dollars at the models' prices.
      await page.getByLabel(/^Budget \(/).fill('2.50');
      await page.getByLabel('Counted in').selectOption('usd');
      await Promise.all([
        page.waitForURL('**/dashboard/projects/proj_*?done=settings'),
        page.getByRole('button', { name: 'Save models, MCP servers and budget' }).click(),
      ]);
      assert.match(await page.locator('.facts').textContent(), /\$0 \/ \$2\.5 this week/);
      assert.equal(await page.getByLabel('Counted in').inputValue(), 'usd');

      await page.getByLabel('Email', { exact: true }).fill(ALICE);
      await page.getByLabel('Role', { exact: true }).selectOption('owner');
      await Promise.all([
        page.waitForURL('**/dashboard/projects/proj_*?done=member'),
        page.getByRole('button', { name: 'Save member' }).click(),
      ]);
      await screenshot(page, 'project');
      const members = page.getByRole('table', { name: 'Members of Browser team' });
      assert.match(await members.textContent(), /alice@example\.com\s*owner/);
    } finally {
      await context.close();
    }
  });

  test('keys: a restricted key for some models, then its models changed, with JavaScript off; every field labelled', async () => {
    const context = await browser.newContext({ baseURL: server.url, javaScriptEnabled: false });
    const page = await context.newPage();
    try {
      await signInAt(page, server, BOB);
      await page.goto('/dashboard/keys');
      await assertEveryControlLabelled(page);
      await page.getByLabel('Name', { exact: true }).fill('scoped');
      await page.getByLabel(/^Allowed models/).fill('svc*');
      await page.getByLabel('Kind', { exact: true }).selectOption('restricted');
      await page.getByLabel(/^api\.model\.read/).check();
      await Promise.all([
        page.waitForURL('**/dashboard/keys/new'),
        page.getByRole('button', { name: 'Create key' }).click(),
      ]);
      const key = await page.locator('#new-key').inputValue();
      assert.deepEqual(await modelIds(server, key), ['svc', 'svc-thinking']);
      const chat = await fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: 'svc', messages: [{ role: 'user', content: 'hi' }] }),
      });
      assert.equal(chat.status, 403);
      assert.equal((await chat.json()).error.code, 'insufficient_permissions');

      await page.goto('/dashboard/keys');
      assert.match(await rowOf(page, 'scoped').textContent(), /restricted\s*\(api\.model\.read\)/);
      await rowOf(page, 'scoped').getByRole('link', { name: 'Change the models and MCP servers of scoped' }).click();
      await page.getByRole('heading', { name: 'Models and MCP servers of “scoped”', level: 1 }).waitFor();
      await assertEveryControlLabelled(page, 1);
      await page.getByLabel(/^Allowed models/).fill('svc');
      await Promise.all([
        page.waitForURL((u) => u.pathname.endsWith('/dashboard/keys')),
        page.getByRole('button', { name: 'Save', exact: true }).click(),
      ]);
      await screenshot(page, 'keys-models');
      assert.deepEqual(await modelIds(server, key), ['svc']);
    } finally {
      await context.close();
    }
  });

  test('batches: alice runs a batch and downloads its output from the Batches page', async () => {
    const { context, page } = await freshPage();
    try {
      await signInAt(page, server, ALICE);
      const secret = await createKey(page, 'batches', '30 days');
      const auth = { Authorization: `Bearer ${secret}` };
      const lines = [0, 1, 2]
        .map((i) => JSON.stringify({ custom_id: `b${i}`, method: 'POST', url: '/v1/chat/completions',
          body: { model: 'svc', messages: [{ role: 'user', content: `batch line ${i}` }] } }))
        .join('\n');
      const form = new FormData();
      form.append('purpose', 'batch');
      form.append('file', new Blob([lines]), 'lines.jsonl');
      const file = await (await fetch(`${server.url}/v1/files`, { method: 'POST', headers: auth, body: form })).json();
      assert.equal(file.object, 'file', JSON.stringify(file));
      const created = await fetch(`${server.url}/v1/batches`, {
        method: 'POST',
        headers: { ...auth, 'Content-Type': 'application/json' },
        body: JSON.stringify({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' }),
      });
      const batch = await created.json();
      assert.equal(created.status, 200, JSON.stringify(batch));
      for (let attempt = 0; attempt < 100; attempt++) {
        const now = await (await fetch(`${server.url}/v1/batches/${batch.id}`, { headers: auth })).json();
        if (now.status === 'completed') break;
        await new Promise((r) => setTimeout(r, 100));
      }

      await Promise.all([
        page.waitForURL('**/dashboard/batches'),
        page.getByRole('link', { name: 'Batches' }).click(),
      ]);
      await screenshot(page, 'batches');
      const row = page.locator(`tr[id="${batch.id}"]`);
      assert.match(await row.textContent(), /completed/);
      assert.match(await row.textContent(), /3, 0, 3/);
      const [download] = await Promise.all([
        page.waitForEvent('download'),
        row.getByRole('link', { name: 'output' }).click(),
      ]);
      const text = await (await import('node:fs/promises')).readFile(await download.path(), 'utf8');
      const answers = text.trim().split('\n').map((l) => JSON.parse(l));
      assert.deepEqual(answers.map((a) => a.custom_id), ['b0', 'b1', 'b2']);
      assert.equal(answers[2].response.body.choices[0].message.content, 'You said: batch line 2');
      assert.ok(!(await page.content()).includes(secret), 'no key on the page');
    } finally {
      await context.close();
    }
  });
});

/** The model ids `GET /v1/models` lists to `key`, sorted. */
async function modelIds(server, key) {
  const response = await fetch(`${server.url}/v1/models`, {
    headers: { Authorization: `Bearer ${key}` },
  });
  assert.equal(response.status, 200);
  return (await response.json()).data.map((m) => m.id).sort();
}

/** Asserts that every visible form control of `page` has its own label. */
async function assertEveryControlLabelled(page, atLeast = 2) {
  const controls = await page
    .locator('input:not([type="hidden"]), select, textarea')
    .evaluateAll((elements) =>
      elements.map((e) => ({
        id: e.id,
        label: e.id ? document.querySelector(`label[for="${e.id}"]`)?.textContent.trim() : undefined,
      })),
    );
  assert.ok(controls.length >= atLeast, `controls: ${JSON.stringify(controls)}`);
  for (const { id, label } of controls) {
    assert.ok(id && label, `control without a label: ${JSON.stringify({ id, label })}`);
    assert.equal(
      await page.getByLabel(label, { exact: true }).evaluate((e) => e.id),
      id,
      `getByLabel(${label})`,
    );
  }
}
