// Shared helpers of the SDK tests: the svc fake server, and a fetch that
// records what the SDKs send. run.sh sets the environment this file reads:
//
// - SVC_FAKE_SERVER: the svc-fake-server binary (required);
// - SVC_SDK_PIDS: a folder where each started server leaves a file named
//   after its pid, so run.sh can kill what a crashed test left.

import { spawn } from 'node:child_process';
import { rmSync, writeFileSync, existsSync } from 'node:fs';
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
 * Starts svc-fake-server with `extraArgs`; resolves to
 * `{ url, key, stop(), log() }` once it printed its url and key.
 */
export async function startServer(extraArgs = []) {
  const binary = process.env.SVC_FAKE_SERVER;
  if (!binary || !existsSync(binary)) {
    throw new Error(
      `SVC_FAKE_SERVER (${binary ?? 'unset'}) does not name the svc-fake-server binary: run tests/sdk-node/run.sh`,
    );
  }
  const args = ['--bind', '127.0.0.1:0', ...extraArgs];
  const child = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  started.add(child);
  const pidDir = process.env.SVC_SDK_PIDS;
  const pidFile = pidDir && child.pid ? join(pidDir, String(child.pid)) : null;
  if (pidFile) writeFileSync(pidFile, `${child.pid}\n`);

  let log = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk) => {
    log = (log + chunk).slice(-20_000);
  });
  const exited = new Promise((resolveExit) => child.once('exit', resolveExit));

  const fields = {};
  const lines = createInterface({ input: child.stdout });
  const ready = new Promise((resolveReady) => {
    lines.on('line', (line) => {
      const space = line.indexOf(' ');
      if (space > 0) fields[line.slice(0, space)] = line.slice(space + 1).trim();
      if (fields.url && fields.key) resolveReady(true);
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
    throw new Error(`svc-fake-server ${args.join(' ')} ${outcome}; stderr:\n${log}`);
  }
  return { url: fields.url, key: fields.key, stop, log: () => log };
}

/**
 * A `fetch` that keeps each request's path and JSON body in `requests`
 * (`{ path, body }`), for the `fetch` option of both SDKs.
 */
export function recordingFetch() {
  const requests = [];
  const record = async (input, init = {}) => {
    const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
    let body = null;
    if (typeof init.body === 'string') {
      try {
        body = JSON.parse(init.body);
      } catch {
        body = init.body;
      }
    }
    requests.push({ path: url.pathname, body });
    return fetch(input, init);
  };
  return { fetch: record, requests };
}

/** The Euclidean length of `vector`. */
export function norm(vector) {
  return Math.sqrt(vector.reduce((sum, x) => sum + x * x, 0));
}
