// Claude Code (npm @anthropic-ai/claude-code, pinned) as a client of svc's
// own MCP server: `claude mcp add --transport http svc <svc>/mcp --header
// "Authorization: Bearer <key>"`, `claude mcp get svc` reporting it
// connected, and `claude -p` whose model (a scripted upstream behind svc's
// Messages API) calls `mcp__svc__everything__echo`: Claude Code calls the
// tool through svc's /mcp, svc forwards it to the registered
// @modelcontextprotocol/server-everything, and the result goes back to the
// model, whose answer quotes it.
//
// Run by tests/agents/run.sh, which exports SVC_BIN.

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  BIN,
  ECHOED,
  SVC,
  createKey,
  run,
  startEverything,
  startScriptedUpstream,
  startSvc,
  stop,
} from "./mcp-fixture.mjs";

const CLAUDE = join(BIN, "claude");
const MODEL = "claude-svc";

test("Claude Code adds svc's /mcp, connects, and its model calls a registered tool through it", { timeout: 300_000 }, async (t) => {
  assert.ok(SVC, "run through tests/agents/run.sh (SVC_BIN)");
  const dir = mkdtempSync(join(tmpdir(), "svc-mcp-claude-"));
  const children = [];
  const upstream = await startScriptedUpstream();
  t.after(async () => {
    for (const child of children) await stop(child);
    await upstream.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const everything = await startEverything();
  children.push(everything.child);
  const data = join(dir, "data");
  const key = createKey(data, "claude");
  const svc = await startSvc(dir, data, { upstreamUrl: upstream.url, mcpUrl: everything.url, models: [MODEL] });
  children.push(svc.child);

  const home = join(dir, "home");
  mkdirSync(home);
  const temporary = join(dir, "tmp");
  mkdirSync(temporary);
  const work = join(dir, "work");
  mkdirSync(work);
  // As claude.test.mjs: a home of its own, and none of the Anthropic or
  // Claude settings of the person running the test.
  const inherited = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !/^(ANTHROPIC_|CLAUDE_)/.test(name)),
  );
  const env = {
    ...inherited,
    HOME: home,
    TMPDIR: temporary,
    CLAUDE_CONFIG_DIR: join(home, ".claude"),
    ANTHROPIC_BASE_URL: svc.base,
    ANTHROPIC_API_KEY: key,
    ANTHROPIC_MODEL: MODEL,
    ANTHROPIC_SMALL_FAST_MODEL: MODEL,
    ANTHROPIC_DEFAULT_HAIKU_MODEL: MODEL,
    ANTHROPIC_DEFAULT_SONNET_MODEL: MODEL,
    ANTHROPIC_DEFAULT_OPUS_MODEL: MODEL,
    // The MCP tools are offered to the model as they are, not behind a
    // tool search the scripted model would not use.
    ENABLE_TOOL_SEARCH: "false",
    DISABLE_TELEMETRY: "1",
    DISABLE_ERROR_REPORTING: "1",
    DISABLE_AUTOUPDATER: "1",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    NO_PROXY: "127.0.0.1,localhost",
  };
  // The key is left out of what is shown (`claude mcp get` prints the
  // headers).
  const hidden = (text) => text.replaceAll(key, "sk-svc-…");
  const claude = async (args, timeout = 60_000) => {
    const done = await run(CLAUDE, args, { env, cwd: work, timeout });
    const said = `claude ${args[0]} ${args[1] ?? ""}: exit ${done.status} ${done.signal ?? ""}\nstdout: ${done.stdout}\nstderr: ${done.stderr}`;
    return { ...done, said: hidden(said) };
  };

  const added = await claude([
    "mcp", "add", "--scope", "user", "--transport", "http", "svc", `${svc.base}/mcp`,
    "--header", `Authorization: Bearer ${key}`,
  ]);
  assert.equal(added.status, 0, added.said);

  const got = await claude(["mcp", "get", "svc"]);
  t.diagnostic(hidden(got.stdout));
  assert.equal(got.status, 0, got.said);
  assert.match(got.stdout, /Connected/, got.said);
  assert.match(got.stdout, new RegExp(`${svc.base}/mcp`), got.said);

  const answered = await claude(
    ["-p", "Use the echo tool", "--model", MODEL, "--allowedTools", "mcp__svc__everything__echo"],
    240_000,
  );
  t.diagnostic(answered.stdout);
  assert.equal(answered.status, 0, answered.said);
  // The tool's result, as server-everything wrote it, reached the model
  // (the upstream) in Claude Code's next request, and the model's answer
  // made of it is what Claude Code printed.
  assert.deepEqual(upstream.toolResults, [`Echo: ${ECHOED}`], answered.said);
  assert.match(answered.stdout, new RegExp(`Tool said: Echo: ${ECHOED}`), answered.said);
});
