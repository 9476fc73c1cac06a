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
// And on svc's own engine, a model of a family other than Hermes': a tiny
// GGUF of Devstral's family (Devstral's template as its GGUFs ship it,
// Mistral's control tokens; written by the engine's `tiny-gguf` example)
// that calls Codex's `exec_command` after the user's turn and answers after
// the tool's result. Codex must get the call from svc's Mistral parser, run
// the command, send its output back through the template, and print the
// answer.
//
// Needs SVC_BIN, SVC_FAKE_UPSTREAM and SVC_TINY_GGUF (run.sh builds and
// sets them).

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
const SVC_TINY_GGUF = process.env.SVC_TINY_GGUF;
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

/** A key for `svc serve --data-dir data`. */
function createKey(data, env) {
  const created = spawnSync(SVC_BIN, ["keys", "create", "--name", "codex", "--data-dir", data], { env, encoding: "utf8" });
  assert.equal(created.status, 0, created.stderr);
  const key = created.stdout.trim();
  assert.match(key, /^sk-svc-/);
  return key;
}

/** `svc serve ARGS` on port 0; resolves with the process and its base URL. */
function startSvc(args, env) {
  return startAndWaitFor(SVC_BIN, ["serve", "--bind", "127.0.0.1:0", ...args], { env }, "stderr", /^svc is serving on (\S+)/);
}

/** Runs `codex exec ARGS PROMPT` in a Codex home of its own under `dir`
 *  whose provider is svc at `base`, speaking the Responses API; resolves
 *  with its exit code, stdout and stderr. */
async function codexExec(dir, children, base, key, args, prompt) {
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
      `base_url = "${base}/v1"`,
      'wire_api = "responses"',
      'env_key = "SVC_API_KEY"',
      "request_max_retries = 0",
      "stream_max_retries = 0",
      "",
    ].join("\n"),
  );
  const work = join(dir, "work");
  mkdirSync(work);
  // Codex's temporary files (its sandbox's mount targets, say) go with the
  // test's directory, as Claude Code's do.
  const temporary = join(dir, "tmp");
  mkdirSync(temporary);
  const codex = spawn(
    CODEX,
    ["exec", "--skip-git-repo-check", "--sandbox", "read-only", "--cd", work, ...args, prompt],
    {
      env: {
        ...process.env,
        CODEX_HOME: home,
        TMPDIR: temporary,
        SVC_API_KEY: key,
        NO_PROXY: "127.0.0.1,localhost",
        no_proxy: "127.0.0.1,localhost",
      },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  children.push(codex);
  let stdout = "";
  let stderr = "";
  codex.stdout.on("data", (chunk) => (stdout += chunk));
  codex.stderr.on("data", (chunk) => (stderr += chunk));
  const code = await new Promise((resolve) => codex.on("exit", resolve));
  return { code, stdout, stderr };
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
  const key = createKey(data, env);
  const serve = await startSvc(["--config", config, "--data-dir", data], env);
  children.push(serve.child);

  const { code, stdout, stderr } = await codexExec(dir, children, serve.value, key, [], "Say hi");
  t.diagnostic(`codex stdout: ${JSON.stringify(stdout)}`);
  assert.equal(code, 0, `codex exec failed (${code}):\nstdout:\n${stdout}\nstderr:\n${stderr}`);
  assert.match(stdout, /Echo: Say hi/, `stdout:\n${stdout}\nstderr:\n${stderr}`);
});

test("codex exec runs the command a Devstral-family model on svc's engine calls", { timeout: 600_000 }, async (t) => {
  assert.ok(SVC_BIN && SVC_TINY_GGUF, "SVC_BIN and SVC_TINY_GGUF must be set (run tests/agents/run.sh)");
  const dir = mkdtempSync(join(tmpdir(), "svc-codex-"));
  const children = [];
  t.after(async () => {
    for (const child of children) await stop(child);
    rmSync(dir, { recursive: true, force: true });
  });

  const model = join(dir, "devstral-tiny.gguf");
  const written = spawnSync(SVC_TINY_GGUF, [model, "devstral"], { encoding: "utf8" });
  assert.equal(written.status, 0, written.stderr);
  const data = join(dir, "data");
  const env = { ...process.env, SVC_LOG: "warn" };
  const key = createKey(data, env);
  // Codex's instructions and tools are about 27k tokens in this vocabulary.
  const serve = await startSvc(
    ["--data-dir", data, "--model", model, "--context", "65536", "--parallel", "1"],
    env,
  );
  children.push(serve.child);

  const started = Date.now();
  const { code, stdout, stderr } = await codexExec(dir, children, serve.value, key, ["--json"], "Run the echo");
  t.diagnostic(`codex took ${((Date.now() - started) / 1000).toFixed(1)} s`);
  const all = `stdout:\n${stdout}\nstderr:\n${stderr}`;
  assert.equal(code, 0, `codex exec failed (${code}):\n${all}`);
  const items = stdout
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line))
    .filter((event) => event.type === "item.completed")
    .map((event) => event.item);
  // The call svc parsed from the model's [TOOL_CALLS]exec_command[ARGS]...
  const command = items.find((item) => item.type === "command_execution");
  assert.ok(command, `no command ran:\n${all}`);
  assert.match(command.command, /echo svc-codex-ok/, all);
  assert.equal(command.exit_code, 0, all);
  assert.match(command.aggregated_output, /svc-codex-ok/, all);
  // ...and the answer the model gave after [/TOOL_RESULTS].
  const messages = items.filter((item) => item.type === "agent_message").map((item) => item.text);
  assert.deepEqual(messages, ["Ran it: svc-codex-ok."], all);
});
