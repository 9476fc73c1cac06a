// Claude Code (`claude -p`, npm @anthropic-ai/claude-code) against svc's
// Anthropic Messages API. Claude Code's prompt (some 22k tokens of system
// prompt and tool definitions) is longer than the default model's context,
// so svc routes the model to a scripted chat-completions upstream
// (svc-fake-upstream, which answers "Echo: <last user message>"): what is
// tested is svc's translation, keys and routing with the real client.
//
// Run by tests/agents/run.sh, which exports SVC_BIN and SVC_FAKE_UPSTREAM.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const CLAUDE = join(HERE, "node_modules", ".bin", "claude");
const SVC = process.env.SVC_BIN;
const UPSTREAM = process.env.SVC_FAKE_UPSTREAM;
const MODEL = "claude-svc";

/** Starts `command`, resolves with the process and the first match of `pattern` in its `stream`. */
function startAndWait(command, args, stream, pattern, env = {}) {
  const child = spawn(command, args, {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let seen = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${command} did not start: ${seen}`));
    }, 60_000);
    child[stream].setEncoding("utf8");
    child[stream].on("data", (chunk) => {
      seen += chunk;
      const match = seen.match(pattern);
      if (match) {
        clearTimeout(timer);
        resolve({ child, match });
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${command} exited ${code} before it started: ${seen}`));
    });
  });
}

test("claude -p answers through svc's Messages API", { timeout: 300_000 }, async (t) => {
  assert.ok(SVC && UPSTREAM, "run through tests/agents/run.sh (SVC_BIN, SVC_FAKE_UPSTREAM)");
  const dir = mkdtempSync(join(tmpdir(), "svc-claude-"));
  const children = [];
  t.after(() => {
    for (const child of children) child.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  });

  const upstream = await startAndWait(UPSTREAM, [], "stdout", /^url (\S+)\n/m);
  children.push(upstream.child);
  upstream.child.stdout.resume();
  const upstreamUrl = upstream.match[1];

  const data = join(dir, "data");
  const config = join(dir, "svc.toml");
  // `svc` and `svc-thinking` go to the upstream too, so that no embedded
  // model is fetched and loaded.
  const table = (id) => `[models.${id}]\nupstreams = [{ base_url = "${upstreamUrl}", model = "up" }]\n`;
  writeFileSync(config, [MODEL, "svc", "svc-thinking"].map(table).join(""));
  const created = spawnSync(SVC, ["keys", "create", "--name", "claude", "--data-dir", data], {
    encoding: "utf8",
  });
  assert.equal(created.status, 0, created.stderr);
  const key = created.stdout.trim();
  assert.match(key, /^sk-svc-/);

  const serve = await startAndWait(
    SVC,
    ["serve", "--config", config, "--data-dir", data, "--bind", "127.0.0.1:0"],
    "stderr",
    /svc is serving on (\S+)\n/,
    { SVC_LOG: "warn" },
  );
  children.push(serve.child);
  serve.child.stderr.resume();
  const base = serve.match[1];

  const home = join(dir, "home");
  mkdirSync(home);
  // Claude Code keeps temporary files (`claude-<uid>/`, `cc-socks/`) in
  // TMPDIR and leaves them: under the test's directory they go with it.
  const temporary = join(dir, "tmp");
  mkdirSync(temporary);
  // The test's environment without any Anthropic or Claude settings of
  // the person running it.
  const inherited = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !/^(ANTHROPIC_|CLAUDE_)/.test(name)),
  );
  const env = {
    ...inherited,
    HOME: home,
    TMPDIR: temporary,
    CLAUDE_CONFIG_DIR: join(home, ".claude"),
    ANTHROPIC_BASE_URL: base,
    ANTHROPIC_API_KEY: key,
    // Every model Claude Code may pick (the main one, its small fast one
    // for titles and summaries) is the one svc serves.
    ANTHROPIC_MODEL: MODEL,
    ANTHROPIC_SMALL_FAST_MODEL: MODEL,
    ANTHROPIC_DEFAULT_HAIKU_MODEL: MODEL,
    ANTHROPIC_DEFAULT_SONNET_MODEL: MODEL,
    ANTHROPIC_DEFAULT_OPUS_MODEL: MODEL,
    DISABLE_TELEMETRY: "1",
    DISABLE_ERROR_REPORTING: "1",
    DISABLE_AUTOUPDATER: "1",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    NO_PROXY: "127.0.0.1,localhost",
  };
  const run = spawnSync(CLAUDE, ["-p", "Say hi", "--model", MODEL], {
    env,
    cwd: dir,
    encoding: "utf8",
    timeout: 240_000,
  });
  const said = `base ${base} exit ${run.status} ${run.signal ?? ""}\nstdout: ${run.stdout}\nstderr: ${run.stderr}`;
  assert.equal(run.status, 0, said);
  // The upstream echoes the last user message: Claude Code's prompt went
  // through svc to it, and its answer came back to Claude Code's output.
  assert.match(run.stdout, /^Echo: /, said);
  assert.match(run.stdout, /Say hi/, said);
});
