// Shared helpers of the browser tests: the svc fake server, Debian's
// chromium through playwright-core, a device-flow polling client and
// screenshots. run.sh sets the environment this file reads:
//
// - SVC_FAKE_SERVER: the svc-fake-server binary (required);
// - SVC_CHROMIUM: the browser (default /usr/bin/chromium);
// - SVC_BROWSER_PIDS: a folder where each started server leaves a file
//   named after its pid, so run.sh can kill what a crashed test left;
// - SVC_SCREENSHOTS: where screenshots go (default
//   <repo>/target/browser-screenshots).

import { mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

import { chromium } from 'playwright-core';

import { startFakeServer } from '../shared/fake-server.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
export const ROOT = resolve(HERE, '..', '..');
export const SCREENSHOTS =
  process.env.SVC_SCREENSHOTS ?? join(ROOT, 'target', 'browser-screenshots');

export const PASSWORD = 'password123';
export const ALICE = 'alice@example.com';
export const BOB = 'bob@example.com';
export const ADMIN = 'admin@example.com';

/** The accounts every server of these tests has. */
const ACCOUNT_ARGS = [
  '--user', `${ALICE}:${PASSWORD}`,
  '--user', `${BOB}:${PASSWORD}`,
  '--admin', `${ADMIN}:${PASSWORD}`,
];

/**
 * Starts svc-fake-server with the test accounts and `extraArgs`; resolves
 * to `{ url, key, adminKey, stop(), log() }` once it printed its url and
 * key (and its admin key, with `--admin-key`).
 */
export function startServer(extraArgs = []) {
  return startFakeServer([...ACCOUNT_ARGS, ...extraArgs], {
    pidDir: process.env.SVC_BROWSER_PIDS,
    runner: 'tests/browser/run.sh',
  });
}

/** Headless Debian chromium (root in CI, hence no sandbox). */
export async function launchBrowser() {
  return chromium.launch({
    executablePath: process.env.SVC_CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--no-proxy-server'],
  });
}

/** A full-page screenshot `<name>.png` under SCREENSHOTS. */
export async function screenshot(page, name) {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
}

/** Fills in and submits the sign-in form the page shows. */
export async function signIn(page, email, password = PASSWORD) {
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(password);
  await Promise.all([
    page.waitForURL((u) => !u.pathname.endsWith('/dashboard/login')),
    page.getByRole('button', { name: 'Sign in' }).click(),
  ]);
}

/** Goes to the sign-in page and signs in; ends on the keys page. */
export async function signInAt(page, server, email, password = PASSWORD) {
  await page.goto(`${server.url}/dashboard/login`);
  await signIn(page, email, password);
}

/** `sk-svc-abcd…wxyz`, the hint the dashboard shows for `key`. */
export function hintOf(key) {
  const body = key.slice('sk-svc-'.length);
  return `sk-svc-${body.slice(0, 4)}…${body.slice(-4)}`;
}

/** `GET /v1/models` with `key`; resolves to the HTTP status. */
export async function modelsStatus(server, key) {
  const response = await fetch(`${server.url}/v1/models`, {
    headers: { Authorization: `Bearer ${key}` },
  });
  await response.arrayBuffer();
  return response.status;
}

/**
 * `POST /v1/auth/device/code`. `clientId` is sent as a form body; without
 * it the request has no body.
 */
export async function requestDeviceCode(server, clientId) {
  const init = { method: 'POST' };
  if (clientId !== undefined) {
    init.headers = { 'Content-Type': 'application/x-www-form-urlencoded' };
    init.body = new URLSearchParams({ client_id: clientId }).toString();
  }
  const response = await fetch(`${server.url}/v1/auth/device/code`, init);
  const body = await response.json();
  if (response.status !== 200) {
    throw new Error(`device code request: ${response.status} ${JSON.stringify(body)}`);
  }
  return body;
}

/**
 * One JSON poll of `POST /v1/auth/device/token`: `{ status, body }` where
 * `status` is the HTTP status.
 */
export async function pollOnce(server, deviceCode) {
  const response = await fetch(`${server.url}/v1/auth/device/token`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ device_code: deviceCode }),
  });
  return { status: response.status, body: await response.json() };
}

/**
 * A device-flow client: polls every `interval` seconds until the answer is
 * not `pending`, adding 5 seconds to the interval on `slow_down` (RFC 8628
 * section 3.5). Resolves to `{ final, polls, slowDowns }` where `final` is
 * the last `{ status, body }`.
 */
export async function pollUntilDecided(server, code, { timeoutMs = 60_000 } = {}) {
  let interval = code.interval;
  let polls = 0;
  let slowDowns = 0;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    await sleep(interval * 1000);
    const answer = await pollOnce(server, code.device_code);
    polls += 1;
    if (answer.status === 200 && answer.body.status === 'pending') {
      // keep waiting
    } else if (answer.status === 400 && answer.body.error?.code === 'slow_down') {
      slowDowns += 1;
      interval += 5;
    } else {
      return { final: answer, polls, slowDowns };
    }
    if (Date.now() > deadline) {
      throw new Error(`device flow still undecided after ${polls} polls`);
    }
  }
}

/** `XXXX-XXXX` as someone might type it: lowercase, without the hyphen. */
export function sloppy(userCode) {
  return userCode.replace('-', '').toLowerCase();
}
