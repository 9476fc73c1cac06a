// The OAuth 2.0 device flow end to end: a polling client written here
// against /v1/auth/device/*, and a person approving or denying the code in
// a real browser.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  ALICE,
  hintOf,
  launchBrowser,
  modelsStatus,
  pollOnce,
  pollUntilDecided,
  requestDeviceCode,
  screenshot,
  signIn,
  signInAt,
  sloppy,
  startServer,
} from './helpers.mjs';

const CLIENT_ID = 'svc-browser-test';

let server;
let shortServer;
let browser;

before(async () => {
  [server, shortServer, browser] = await Promise.all([
    startServer(['--device-interval', '1', '--device-code-lifetime', '600']),
    startServer(['--device-interval', '1', '--device-code-lifetime', '2']),
    launchBrowser(),
  ]);
});

after(async () => {
  await Promise.allSettled([browser?.close(), server?.stop(), shortServer?.stop()]);
});

/**
 * Opens `verification_uri_complete`, which only fills the code in, and
 * presses Continue; returns the response to that form's POST.
 */
async function continueWithCode(page, code) {
  await page.goto(code.verification_uri_complete);
  assert.equal(await page.getByLabel('Code').inputValue(), code.user_code);
  const [response] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname === '/dashboard/device'),
    page.getByRole('button', { name: 'Continue' }).click(),
  ]);
  return response;
}

/** The `<dd>` after the `<dt>` named `term` on the confirmation page. */
async function fact(page, term) {
  return page.locator('dl.facts dt', { hasText: term }).locator('xpath=following-sibling::dd[1]').textContent();
}

describe('device flow', () => {
  test('a device signs in: sign-in detour, lowercase code, approve', async () => {
    const code = await requestDeviceCode(server, CLIENT_ID);
    assert.match(code.user_code, /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/);
    assert.equal(code.verification_uri, `${server.url}/dashboard/device`);
    assert.equal(code.verification_uri_complete, `${code.verification_uri}?user_code=${code.user_code}`);
    assert.equal(code.expires_in, 600);
    assert.equal(code.interval, 1);
    assert.ok(code.device_code.length >= 32);

    // The device polls in the background while the person acts.
    const polling = pollUntilDecided(server, code);

    const context = await browser.newContext();
    const page = await context.newPage();
    try {
      await page.goto(code.verification_uri);
      const login = new URL(page.url());
      assert.equal(login.pathname, '/dashboard/login');
      assert.equal(login.searchParams.get('next'), '/dashboard/device');
      await signIn(page, ALICE);
      assert.equal(new URL(page.url()).pathname, '/dashboard/device');
      await page.getByRole('heading', { name: 'Connect a device' }).waitFor();
      await screenshot(page, 'device-entry');

      await page.getByLabel('Code').fill(sloppy(code.user_code));
      await page.getByRole('button', { name: 'Continue' }).click();
      await page.getByRole('heading', { name: 'Approve this device?' }).waitFor();
      assert.equal((await page.locator('.code-display').textContent()).trim(), code.user_code);
      assert.match(await fact(page, 'Requested'), /^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$/);
      assert.equal(await fact(page, 'From address'), '127.0.0.1');
      assert.equal(await fact(page, 'Client'), CLIENT_ID);
      await screenshot(page, 'device-confirm');

      await page.getByRole('button', { name: 'Approve' }).click();
      await page.getByRole('heading', { name: 'Device approved' }).waitFor();
      await screenshot(page, 'device-approved');

      const { final, slowDowns } = await polling;
      assert.equal(final.status, 200, JSON.stringify(final.body));
      assert.equal(final.body.status, 'approved');
      assert.match(final.body.access_token, /^sk-svc-/);
      assert.equal(final.body.token_type, 'bearer');
      assert.equal(final.body.expires_in, 2_592_000);
      assert.equal(slowDowns, 0, 'polling every interval seconds never hears slow_down');
      const key = final.body.access_token;

      assert.equal(await modelsStatus(server, key), 200);

      const again = await pollOnce(server, code.device_code);
      assert.equal(again.status, 400, JSON.stringify(again.body));
      assert.equal(again.body.error.code, 'invalid_grant');

      // The code cannot be approved twice.
      const reused = await continueWithCode(page, code);
      assert.equal(reused.status(), 410);
      await page.getByRole('heading', { name: 'Code already used' }).waitFor();

      await page.goto(`${server.url}/dashboard/keys`);
      const row = page.locator('tbody tr', { hasText: hintOf(key) });
      assert.equal(await row.count(), 1, 'the device key is in the list');
      const cells = await row.locator('td').allTextContents();
      assert.ok(cells.includes('Device login'), `created by: ${cells}`);
      assert.ok(cells.includes('active'), `state: ${cells}`);
      assert.ok(cells[0].includes(CLIENT_ID), `name: ${cells[0]}`);
      await screenshot(page, 'keys-device-key');
    } finally {
      await context.close();
    }
  });

  test('polling too fast gets slow_down', async () => {
    const code = await requestDeviceCode(server);
    const first = await pollOnce(server, code.device_code);
    assert.equal(first.status, 200);
    assert.deepEqual(first.body, { status: 'pending' });
    const second = await pollOnce(server, code.device_code);
    assert.equal(second.status, 400, JSON.stringify(second.body));
    assert.equal(second.body.error.code, 'slow_down');
  });

  test('the person denies the request', async () => {
    const code = await requestDeviceCode(server);
    const context = await browser.newContext();
    const page = await context.newPage();
    try {
      await signInAt(page, server, ALICE);
      await continueWithCode(page, code);
      await page.getByRole('heading', { name: 'Approve this device?' }).waitFor();
      assert.equal((await page.locator('.code-display').textContent()).trim(), code.user_code);
      // No client_id: the client is named by its User-Agent.
      assert.equal(await fact(page, 'Client'), 'node');
      await page.getByRole('button', { name: 'Deny' }).click();
      await page.getByRole('heading', { name: 'Request denied' }).waitFor();
      await screenshot(page, 'device-denied');

      const answer = await pollOnce(server, code.device_code);
      assert.equal(answer.status, 400, JSON.stringify(answer.body));
      assert.equal(answer.body.error.code, 'access_denied');

      const again = await continueWithCode(page, code);
      assert.equal(again.status(), 410);
      await page.getByRole('heading', { name: 'Code denied' }).waitFor();
    } finally {
      await context.close();
    }
  });

  test('an expired code cannot be approved', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    try {
      await signInAt(page, shortServer, ALICE);
      const code = await requestDeviceCode(shortServer);
      assert.equal(code.expires_in, 2);
      await sleep(3_000);
      const response = await continueWithCode(page, code);
      await page.getByRole('heading', { name: 'Code expired' }).waitFor();
      assert.equal(response.status(), 410);
      assert.equal(await page.getByRole('button', { name: 'Approve' }).count(), 0);
      await screenshot(page, 'device-expired');

      const answer = await pollOnce(shortServer, code.device_code);
      assert.equal(answer.status, 400, JSON.stringify(answer.body));
      assert.equal(answer.body.error.code, 'expired_token');
    } finally {
      await context.close();
    }
  });
});
