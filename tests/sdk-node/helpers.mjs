// Shared helpers of the SDK tests: the svc fake server, and a fetch that
// records what the SDKs send. run.sh sets the environment this file reads:
//
// - SVC_FAKE_SERVER: the svc-fake-server binary (required);
// - SVC_SDK_PIDS: a folder where each started server leaves a file named
//   after its pid, so run.sh can kill what a crashed test left.

import { startFakeServer } from '../shared/fake-server.mjs';

/**
 * Starts svc-fake-server with `extraArgs`; resolves to
 * `{ url, key, stop(), log() }` once it printed its url and key.
 */
export function startServer(extraArgs = []) {
  return startFakeServer(extraArgs, { pidDir: process.env.SVC_SDK_PIDS, runner: 'tests/sdk-node/run.sh' });
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
