// Starting and stopping svc-fake-server for the Node test suites
// (tests/browser, tests/sdk-node). Node's built-ins only, so each suite
// imports it without installing anything for it.
//
// The server prints `url ...`, `key ...` (and with `--admin-key`,
// `admin-key ...`) on stdout once it serves. Each server started leaves a
// file named after its pid in `pidDir` (when given), so the suite's run.sh
// can kill what a crashed test left; whatever is still running when this
// process exits is killed.

import { spawn } from 'node:child_process';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';

const START_TIMEOUT_MS = 30_000;
const started = new Set();

// Last resort: never leave a server behind, whatever way this process ends.
process.on('exit', () => {
  for (const child of started) {
    try {
      child.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
});

/**
 * Starts `$SVC_FAKE_SERVER --bind 127.0.0.1:0 ...args`; resolves to
 * `{ url, key, adminKey, stop(), log() }` once it printed its url and key
 * (and its admin key, with `--admin-key`). `runner` names the run.sh that
 * sets SVC_FAKE_SERVER, for the error when it is not set.
 */
export async function startFakeServer(args, { pidDir, runner }) {
  const binary = process.env.SVC_FAKE_SERVER;
  if (!binary || !existsSync(binary)) {
    throw new Error(
      `SVC_FAKE_SERVER (${binary ?? 'unset'}) does not name the svc-fake-server binary: run ${runner}`,
    );
  }
  const all = ['--bind', '127.0.0.1:0', ...args];
  const child = spawn(binary, all, { stdio: ['ignore', 'pipe', 'pipe'] });
  started.add(child);
  const pidFile = pidDir && child.pid ? join(pidDir, String(child.pid)) : null;
  if (pidFile) writeFileSync(pidFile, `${child.pid}\n`);

  let log = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk) => {
    log = (log + chunk).slice(-20_000);
  });
  const exited = new Promise((resolveExit) => child.once('exit', resolveExit));

  const fields = {};
  const wantsAdminKey = args.includes('--admin-key');
  const lines = createInterface({ input: child.stdout });
  const ready = new Promise((resolveReady) => {
    lines.on('line', (line) => {
      const space = line.indexOf(' ');
      if (space > 0) fields[line.slice(0, space)] = line.slice(space + 1).trim();
      if (fields.url && fields.key && (!wantsAdminKey || fields['admin-key'])) resolveReady(true);
    });
  });
  const outcome = await Promise.race([
    ready,
    exited.then((code) => `exited with ${code}`),
    sleep(START_TIMEOUT_MS, undefined, { ref: false }).then(() => `did not print url and key in ${START_TIMEOUT_MS} ms`),
  ]);

  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const gone = await Promise.race([exited.then(() => true), sleep(5_000, undefined, { ref: false }).then(() => false)]);
      if (!gone) {
        child.kill('SIGKILL');
        await exited;
      }
    }
    started.delete(child);
    if (pidFile) rmSync(pidFile, { force: true });
  };

  if (outcome !== true) {
    await stop();
    throw new Error(`svc-fake-server ${all.join(' ')} ${outcome}; stderr:\n${log}`);
  }
  return { url: fields.url, key: fields.key, adminKey: fields['admin-key'], stop, log: () => log };
}
