// svc's own MCP server (`/mcp`) used by an MCP client nobody here wrote:
// the MCP Inspector's command line (npm @modelcontextprotocol/inspector-cli,
// pinned in package.json), listing and calling, with a key as the bearer
// token, the tools of a server registered in svc's configuration
// (@modelcontextprotocol/server-everything, also from npm). A key of
// another svc (another data directory) gets a 401 and no tools.
//
// Run by tests/agents/run.sh, which exports SVC_BIN.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { HERE, SVC, createKey, startEverything, startSvc, stop } from "./mcp-fixture.mjs";

const INSPECTOR = join(HERE, "node_modules", "@modelcontextprotocol", "inspector-cli", "build");

/** `mcp-inspector-cli --cli URL --transport http --header AUTH ARGS`;
 *  resolves with its exit code, stdout and stderr. */
function inspect(url, key, args) {
  // Its working directory is its own `build/`: 1.0.3 looks for
  // `../package.json` from the working directory but imports it relative to
  // its module, so from anywhere else it fails before connecting.
  const child = spawn(
    process.execPath,
    [join(INSPECTOR, "cli.js"), "--cli", url, "--transport", "http", "--header", `Authorization: Bearer ${key}`, ...args],
    { cwd: INSPECTOR, stdio: ["ignore", "pipe", "pipe"], timeout: 60_000 },
  );
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk) => (stdout += chunk));
  child.stderr.on("data", (chunk) => (stderr += chunk));
  return new Promise((resolve) =>
    child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr })),
  );
}

test("the MCP Inspector lists and calls a registered server's tools through svc's /mcp", { timeout: 180_000 }, async (t) => {
  assert.ok(SVC, "run through tests/agents/run.sh (SVC_BIN)");
  const dir = mkdtempSync(join(tmpdir(), "svc-mcp-inspector-"));
  const children = [];
  t.after(async () => {
    for (const child of children) await stop(child);
    rmSync(dir, { recursive: true, force: true });
  });

  const everything = await startEverything();
  children.push(everything.child);
  const data = join(dir, "data");
  const key = createKey(data, "inspector");
  // No model is asked for: the upstream's address only keeps svc from
  // fetching its default model.
  const svc = await startSvc(dir, data, { upstreamUrl: "http://127.0.0.1:9/v1", mcpUrl: everything.url });
  children.push(svc.child);
  const mcp = `${svc.base}/mcp`;

  const listed = await inspect(mcp, key, ["--method", "tools/list"]);
  const said = (run) => `exit ${run.code} ${run.signal ?? ""}\nstdout: ${run.stdout}\nstderr: ${run.stderr}`;
  assert.equal(listed.code, 0, said(listed));
  const names = JSON.parse(listed.stdout).tools.map((tool) => tool.name);
  t.diagnostic(`tools: ${names.join(", ")}`);
  // Every tool is the registered server's, named `<label>__<tool>`.
  assert.ok(names.includes("everything__echo"), said(listed));
  assert.ok(names.includes("everything__get-sum"), said(listed));
  for (const name of names) assert.match(name, /^everything__/);

  const called = await inspect(mcp, key, [
    "--method", "tools/call",
    "--tool-name", "everything__echo",
    "--tool-arg", "message=through svc",
  ]);
  assert.equal(called.code, 0, said(called));
  const result = JSON.parse(called.stdout);
  assert.deepEqual(result.content, [{ type: "text", text: "Echo: through svc" }], said(called));
  assert.notEqual(result.isError, true, said(called));

  // A tool of no registered server is the gateway's own JSON-RPC error.
  const unknown = await inspect(mcp, key, ["--method", "tools/call", "--tool-name", "nowhere__echo"]);
  assert.notEqual(unknown.code, 0, said(unknown));
  assert.match(unknown.stderr, /Unknown tool/, said(unknown));

  // A well-formed key that this svc never issued: a 401, no tools.
  const stranger = createKey(join(dir, "other-data"), "stranger");
  const refused = await inspect(mcp, stranger, ["--method", "tools/list"]);
  assert.notEqual(refused.code, 0, said(refused));
  assert.doesNotMatch(refused.stdout, /everything__/, said(refused));
  assert.match(refused.stderr, /invalid_api_key|401/, said(refused));
  // The same request by hand, to see the status and the challenge the
  // Inspector acted on.
  const response = await fetch(mcp, {
    method: "POST",
    headers: {
      authorization: `Bearer ${stranger}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list", params: {} }),
  });
  assert.equal(response.status, 401);
  assert.match(response.headers.get("www-authenticate") ?? "", /^Bearer .*resource_metadata="/);
  assert.doesNotMatch(await response.text(), /everything__/);
});
