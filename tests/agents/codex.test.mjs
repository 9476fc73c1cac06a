// The real Codex CLI (`codex exec`, npm @openai/codex, pinned in
// package.json) against `svc serve`, speaking the OpenAI Responses API
// (`wire_api = "responses"`). Codex's prompt (about 10k tokens: its
// instructions and tool schemas) is longer than the default model's
// context, so svc routes the model to the scripted chat-completions
// upstream (`svc-fake-upstream`), which answers `Echo: <last user message>`:
// Codex's request goes through svc's Responses API, is translated to a chat
// completion for the upstream, and the answer comes back as Responses
// events that Codex prints.
//
// Needs SVC_BIN and SVC_FAKE_UPSTREAM (run.sh builds and sets them).

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const CODEX = join(HERE, "node_modules", ".bin", "codex");
const SVC_BIN = process.env.SVC_BIN;
const SVC_FAKE_UPSTREAM = process.env.SVC_FAKE_UPSTREAM;
const START_TIMEOUT_MS = 60_000;

/** Starts `command args`; resolves with the process and the first line of
 *  `stream` that `pattern` matches (its first group). */
function startAndWaitFor(command, args, options, stream, pattern) {
  const child = spawn(command, args, { ...options, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${command} did not start in time:\n${output}`));
    }, START_TIMEOUT_MS);
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${command} exited (${code}) before it started:\n${output}`));
    });
    const lines = createInterface({ input: child[stream] });
    lines.on("line", (line) => {
      output += line + "\n";
      const match = line.match(pattern);
      if (match) {
        clearTimeout(timer);
        child.removeAllListeners("exit");
        // Keep draining, so the child never blocks on a full pipe.
        child.stdout.resume();
        child.stderr.resume();
        resolve({ child, value: match[1] });
      }
    });
  });
}

/** Stops a child started here (by its own handle, never by name). */
async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await exited;
  clearTimeout(timer);
}

test("codex exec answers through svc's Responses API", { timeout: 180_000 }, async (t) => {
  assert.ok(SVC_BIN && SVC_FAKE_UPSTREAM, "SVC_BIN and SVC_FAKE_UPSTREAM must be set (run tests/agents/run.sh)");
  const dir = mkdtempSync(join(tmpdir(), "svc-codex-"));
  const children = [];
  t.after(async () => {
    for (const child of children) await stop(child);
    rmSync(dir, { recursive: true, force: true });
  });

  const upstream = await startAndWaitFor(SVC_FAKE_UPSTREAM, [], {}, "stdout", /^url (\S+)/);
  children.push(upstream.child);

  const data = join(dir, "data");
  const config = join(dir, "svc.toml");
  const table = (id) =>
    `[models.${id}]\nupstreams = [{ base_url = "${upstream.value}", model = "up" }]\n`;
  writeFileSync(config, table("svc") + table("svc-thinking"));
  const env = { ...process.env, SVC_LOG: "warn" };
  const created = spawnSync(SVC_BIN, ["keys", "create", "--name", "codex", "--data-dir", data], { env, encoding: "utf8" });
  assert.equal(created.status, 0, created.stderr);
  const key = created.stdout.trim();
  assert.match(key, /^sk-svc-/);

  const serve = await startAndWaitFor(
    SVC_BIN,
    ["serve", "--config", config, "--data-dir", data, "--bind", "127.0.0.1:0"],
    { env },
    "stderr",
    /^svc is serving on (\S+)/,
  );
  children.push(serve.child);

  // Codex's own home: a provider that is svc, speaking the Responses API.
  const home = join(dir, "codex-home");
  mkdirSync(home);
  writeFileSync(
    join(home, "config.toml"),
    [
      'model = "svc"',
      'model_provider = "svc"',
      "",
      "[model_providers.svc]",
      'name = "svc"',
      `base_url = "${serve.value}/v1"`,
      'wire_api = "responses"',
      'env_key = "SVC_API_KEY"',
      "request_max_retries = 0",
      "stream_max_retries = 0",
      "",
    ].join("\n"),
  );
  const work = join(dir, "work");
  mkdirSync(work);
  const codex = spawn(
    CODEX,
    ["exec", "--skip-git-repo-check", "--sandbox", "read-only", "--cd", work, "Say hi"],
    {
      env: { ...process.env, CODEX_HOME: home, SVC_API_KEY: key, NO_PROXY: "127.0.0.1,localhost", no_proxy: "127.0.0.1,localhost" },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  children.push(codex);
  let stdout = "";
  let stderr = "";
  codex.stdout.on("data", (chunk) => (stdout += chunk));
  codex.stderr.on("data", (chunk) => (stderr += chunk));
  const code = await new Promise((resolve) => codex.on("exit", resolve));
  t.diagnostic(`codex stdout: ${JSON.stringify(stdout)}`);
  assert.equal(code, 0, `codex exec failed (${code}):\nstdout:\n${stdout}\nstderr:\n${stderr}`);
  assert.match(stdout, /Echo: Say hi/, `stdout:\n${stdout}\nstderr:\n${stderr}`);
});
