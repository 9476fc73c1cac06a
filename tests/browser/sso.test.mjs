// Single sign-on end to end: svc's dashboard signs in through a real
// OpenID Connect provider (the certified `oidc-provider` package, started
// here on a free port), in Chromium: the authorization code flow with PKCE,
// state and nonce, the ID token checked against the provider's RS256 keys,
// the email from its userinfo endpoint. Then what must be refused: a
// callback whose state is not the browser's, an ID token with another
// nonce, an unverified email, an unknown email (unless accounts are made
// on first sign-in), and the password form when password sign-in is off.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { after, before, describe, test } from 'node:test';

import Provider from 'oidc-provider';

import {
  ALICE,
  launchBrowser,
  modelsStatus,
  pollUntilDecided,
  requestDeviceCode,
  screenshot,
  startServer,
} from './helpers.mjs';

const CLIENT_ID = 'svc-dashboard';
const CLIENT_SECRET = randomBytes(24).toString('hex');
const BUTTON = 'Sign in with single sign-on';

/**
 * An OpenID Connect provider on 127.0.0.1 with one confidential client:
 * any login name signs in as the account of that name, whose email is the
 * name; names starting with `unverified` have unverified emails. Consent
 * is given without asking (a first-party client).
 */
async function startProvider() {
  const http = createServer();
  await new Promise((resolve) => http.listen(0, '127.0.0.1', resolve));
  const issuer = `http://127.0.0.1:${http.address().port}`;
  let handler = (_req, res) => {
    res.statusCode = 503;
    res.end();
  };
  // `tamper.nonce` replaces the nonce of the next authorization request
  // (so the ID token carries another one); `tamper.state` the state of
  // the next redirect back to svc. Each serves once.
  const tamper = {};
  http.on('request', (req, res) => {
    const url = new URL(req.url, issuer);
    if (tamper.nonce && url.pathname === '/auth' && url.searchParams.has('nonce')) {
      url.searchParams.set('nonce', tamper.nonce);
      req.url = url.pathname + url.search;
      delete tamper.nonce;
    }
    if (tamper.state) {
      const setHeader = res.setHeader.bind(res);
      res.setHeader = (name, value) => {
        if (tamper.state && name.toLowerCase() === 'location' && String(value).includes('/dashboard/login/sso/callback')) {
          const back = new URL(value);
          back.searchParams.set('state', tamper.state);
          value = back.href;
          delete tamper.state;
        }
        return setHeader(name, value);
      };
    }
    handler(req, res);
  });
  return {
    issuer,
    tamper,
    /** Registers the client, whose callback is known once svc started. */
    register(redirectUri) {
      const provider = new Provider(issuer, {
        clients: [
          {
            client_id: CLIENT_ID,
            client_secret: CLIENT_SECRET,
            redirect_uris: [redirectUri],
            grant_types: ['authorization_code'],
            response_types: ['code'],
            token_endpoint_auth_method: 'client_secret_basic',
          },
        ],
        cookies: { keys: [randomBytes(16).toString('hex')] },
        claims: { openid: ['sub'], email: ['email', 'email_verified'] },
        pkce: { required: () => true },
        findAccount: async (_ctx, id) => ({
          accountId: id,
          claims: async () => ({ sub: id, email: id, email_verified: !id.startsWith('unverified') }),
        }),
        async loadExistingGrant(ctx) {
          const grant = new ctx.oidc.provider.Grant({
            clientId: ctx.oidc.client.clientId,
            accountId: ctx.oidc.session.accountId,
          });
          grant.addOIDCScope('openid email profile');
          await grant.save();
          return grant;
        },
      });
      const callback = provider.callback();
      handler = (req, res) => callback(req, res);
    },
    close: () => new Promise((resolve) => http.close(resolve)),
  };
}

/** A provider and an svc server signing in through it (`extraArgs` added). */
async function startPair(extraArgs = []) {
  const idp = await startProvider();
  const server = await startServer([
    '--admin-key',
    '--oidc-issuer', idp.issuer,
    '--oidc-client-id', CLIENT_ID,
    '--oidc-client-secret', CLIENT_SECRET,
    ...extraArgs,
  ]);
  idp.register(`${server.url}/dashboard/login/sso/callback`);
  return {
    idp,
    server,
    stop: () => Promise.allSettled([server.stop(), idp.close()]),
  };
}

let browser;
const pairs = [];

before(async () => {
  browser = await launchBrowser();
});

after(async () => {
  await Promise.allSettled([browser?.close(), ...pairs.map((pair) => pair.stop())]);
});

async function pair(extraArgs) {
  const started = await startPair(extraArgs);
  pairs.push(started);
  return started;
}

/** A fresh browser context that reaches nothing but loopback (the provider's pages import a web font). */
async function newPage() {
  const context = await browser.newContext();
  await context.route('**/*', (route) =>
    new URL(route.request().url()).hostname === '127.0.0.1' ? route.continue() : route.abort(),
  );
  return { context, page: await context.newPage() };
}

/**
 * From svc's sign-in page (where `page` is), through the provider's
 * sign-in form as `login`, back to svc; resolves to the response of the
 * callback.
 */
async function throughProvider(page, { idp, server }, login) {
  await Promise.all([
    page.waitForURL((u) => u.origin === idp.issuer),
    page.getByRole('link', { name: BUTTON }).click(),
  ]);
  await page.locator('input[name=login]').fill(login);
  await page.locator('input[name=password]').fill('any password');
  const [callback] = await Promise.all([
    page.waitForResponse((r) => r.url().startsWith(`${server.url}/dashboard/login/sso/callback`)),
    page.getByRole('button', { name: 'Sign-in' }).click(),
  ]);
  await page.waitForLoadState();
  return callback;
}

/** The svc session cookie the browser holds, if any. */
async function sessionCookie(context) {
  return (await context.cookies()).find((c) => c.name === 'svc_session');
}

/** The audit log's entries of `type`, read with the admin key. */
async function auditEntries({ server }, type) {
  const response = await fetch(`${server.url}/v1/organization/audit_logs?event_types[]=${type}&limit=100`, {
    headers: { Authorization: `Bearer ${server.adminKey}` },
  });
  assert.equal(response.status, 200);
  return (await response.json()).data;
}

describe('single sign-on', () => {
  test('an account signs in through the provider and lands on its keys', async () => {
    const sso = await pair();
    const { context, page } = await newPage();
    try {
      await page.goto(`${sso.server.url}/dashboard/keys`);
      assert.equal(new URL(page.url()).pathname, '/dashboard/login');
      await page.getByRole('link', { name: BUTTON }).waitFor();
      await screenshot(page, 'sso-login');
      const callback = await throughProvider(page, sso, ALICE);
      assert.equal(callback.status(), 303);
      assert.equal(new URL(page.url()).pathname, '/dashboard/keys');
      await page.getByText(ALICE).first().waitFor();
      await screenshot(page, 'sso-signed-in');
      assert.ok(await sessionCookie(context), 'a session cookie');
      assert.ok(!(await context.cookies()).some((c) => c.name === 'svc_sso'), 'the one-time values are gone');

      const entries = await auditEntries(sso, 'login.succeeded');
      const entry = entries.find((e) => JSON.stringify(e).includes(ALICE));
      assert.ok(entry, JSON.stringify(entries));
      assert.ok(JSON.stringify(entry).includes('"sso"'), JSON.stringify(entry));
      assert.ok(!JSON.stringify(entries).includes(CLIENT_SECRET), 'no secret in the log');
    } finally {
      await context.close();
    }
  });

  test('a callback whose state is not the browser\'s signs nobody in', async () => {
    const sso = await pair();
    const { context, page } = await newPage();
    try {
      await page.goto(`${sso.server.url}/dashboard/login`);
      sso.idp.tamper.state = 'forged-state';
      const callback = await throughProvider(page, sso, ALICE);
      assert.equal(callback.status(), 400);
      await page.getByRole('alert').filter({ hasText: 'does not belong to a sign-in started in this browser' }).waitFor();
      await screenshot(page, 'sso-wrong-state');
      assert.equal(await sessionCookie(context), undefined);
      const failed = await auditEntries(sso, 'login.failed');
      assert.ok(JSON.stringify(failed).includes('sso_state_mismatch'), JSON.stringify(failed));
    } finally {
      await context.close();
    }
  });

  test('an ID token carrying another nonce signs nobody in', async () => {
    const sso = await pair();
    const { context, page } = await newPage();
    try {
      await page.goto(`${sso.server.url}/dashboard/login`);
      // The provider hears another nonce, so its ID token carries that one.
      sso.idp.tamper.nonce = 'not-the-browsers-nonce';
      const callback = await throughProvider(page, sso, ALICE);
      assert.equal(callback.status(), 401);
      await page.getByRole('alert').filter({ hasText: 'nonce' }).waitFor();
      assert.equal(await sessionCookie(context), undefined);
      const failed = await auditEntries(sso, 'login.failed');
      assert.ok(JSON.stringify(failed).includes('sso_nonce_mismatch'), JSON.stringify(failed));
    } finally {
      await context.close();
    }
  });

  test('an email the provider has not verified signs nobody in, even with an account', async () => {
    const unverified = 'unverified-carol@example.com';
    const sso = await pair(['--user', `${unverified}:password123`]);
    const { context, page } = await newPage();
    try {
      await page.goto(`${sso.server.url}/dashboard/login`);
      const callback = await throughProvider(page, sso, unverified);
      assert.equal(callback.status(), 403);
      await page.getByRole('alert').filter({ hasText: 'has not verified this email' }).waitFor();
      await screenshot(page, 'sso-unverified');
      assert.equal(await sessionCookie(context), undefined);
    } finally {
      await context.close();
    }
  });

  test('an unknown email is refused, or gets an account where the operator allows it', async () => {
    const dave = 'dave@example.com';
    for (const [args, allowed] of [[[], false], [['--oidc-create-accounts'], true]]) {
      const sso = await pair(args);
      const { context, page } = await newPage();
      try {
        await page.goto(`${sso.server.url}/dashboard/login`);
        const callback = await throughProvider(page, sso, dave);
        if (allowed) {
          assert.equal(callback.status(), 303);
          assert.equal(new URL(page.url()).pathname, '/dashboard/keys');
          await page.getByText(dave).first().waitFor();
          const added = await auditEntries(sso, 'user.added');
          assert.ok(JSON.stringify(added).includes(dave), JSON.stringify(added));
        } else {
          assert.equal(callback.status(), 403);
          await page.getByRole('alert').filter({ hasText: 'No account here has this email' }).waitFor();
          assert.equal(await sessionCookie(context), undefined);
        }
      } finally {
        await context.close();
      }
    }
  });

  test('with password sign-in off, only the provider signs in, on the device page too', async () => {
    const sso = await pair(['--no-password-sign-in', '--device-interval', '1']);
    const { server } = sso;
    const { context, page } = await newPage();
    try {
      await page.goto(`${server.url}/dashboard/login`);
      await page.getByRole('link', { name: BUTTON }).waitFor();
      assert.equal(await page.getByLabel('Password').count(), 0, 'no password form');
      await screenshot(page, 'sso-only-login');
      const posted = await fetch(`${server.url}/dashboard/login`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/x-www-form-urlencoded', Cookie: 'svc_csrf=' + 'a'.repeat(64) },
        body: new URLSearchParams({ email: ALICE, password: 'password123', csrf: 'a'.repeat(64) }).toString(),
        redirect: 'manual',
      });
      assert.equal(posted.status, 404, 'the password form is not served');
      assert.ok(!posted.headers.getSetCookie().some((c) => c.startsWith('svc_session=')));

      // A device asks for a key; the person approves it after signing in through the provider.
      const code = await requestDeviceCode(server, 'svc-sso-test');
      const polling = pollUntilDecided(server, code);
      await page.goto(code.verification_uri_complete);
      assert.equal(new URL(page.url()).pathname, '/dashboard/login');
      await throughProvider(page, sso, ALICE);
      assert.equal(new URL(page.url()).pathname, '/dashboard/device');
      assert.equal(await page.getByLabel('Code').inputValue(), code.user_code);
      await page.getByRole('button', { name: 'Continue' }).click();
      await page.getByRole('button', { name: 'Approve' }).click();
      await page.getByRole('heading', { name: 'Device approved' }).waitFor();
      await screenshot(page, 'sso-device-approved');
      const { final } = await polling;
      assert.equal(final.status, 200, JSON.stringify(final.body));
      assert.equal(await modelsStatus(server, final.body.access_token), 200);
    } finally {
      await context.close();
    }
  });
});
