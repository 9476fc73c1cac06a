// Codex CLI (npm @openai/codex, pinned) as a client of svc's own MCP
// server: an `[mcp_servers.svc]` entry in its config (svc's `/mcp`, the key
// in the environment variable `bearer_token_env_var` names). `codex mcp
// list` only reads the config, so what shows that Codex connected and
// listed the tools is its next model request: `codex exec` offers the
// model the tools it got from /mcp, as the Responses tool
// `{"type": "namespace", "name": "mcp__svc", "tools": [...]}`, which a
// recording proxy in front of svc's Responses API reads. With a key of
// another svc, the namespace is absent.
//
// Not shown: the model calling the tool. svc's Responses API offers only
// `function` tools to the model and leaves every other type out, the
// `namespace` ones included, so the scripted model never sees
// `everything__echo` (noted in the report on issue 63).
//
// Run by tests/agents/run.sh, which exports SVC_BIN.

import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BIN, SVC, createKey, run, startEverything, startScriptedUpstream, startSvc, stop } from "./mcp-fixture.mjs";

const CODEX = join(BIN, "codex");

/** A proxy to `base` that keeps the body of every `/v1/responses` request;
 *  resolves with its URL, the bodies, and how to close it. */
async function recordingProxy(base) {
  const bodies = [];
  const server = createServer((request, response) => {
    const chunks = [];
    request.on("data", (chunk) => chunks.push(chunk));
    request.on("end", async () => {
      const body = Buffer.concat(chunks);
      if (request.url.endsWith("/responses")) bodies.push(JSON.parse(body.toString("utf8")));
      const { host: _host, "content-length": _length, ...headers } = request.headers;
      const answer = await fetch(base + request.url, {
        method: request.method,
        headers,
        body: request.method === "GET" ? undefined : body,
      });
      response.writeHead(answer.status, { "content-type": answer.headers.get("content-type") ?? "" });
      for await (const chunk of answer.body) response.write(chunk);
      response.end();
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    bodies,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

test("codex exec connects to svc's /mcp with a key and offers its tools to the model", { timeout: 240_000 }, async (t) => {
  assert.ok(SVC, "run through tests/agents/run.sh (SVC_BIN)");
  const dir = mkdtempSync(join(tmpdir(), "svc-mcp-codex-"));
  const children = [];
  const upstream = await startScriptedUpstream();
  let proxy;
  t.after(async () => {
    for (const child of children) await stop(child);
    await proxy?.close();
    await upstream.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const everything = await startEverything();
  children.push(everything.child);
  const data = join(dir, "data");
  const key = createKey(data, "codex");
  const svc = await startSvc(dir, data, { upstreamUrl: upstream.url, mcpUrl: everything.url });
  children.push(svc.child);
  proxy = await recordingProxy(svc.base);

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
      `base_url = "${proxy.url}/v1"`,
      'wire_api = "responses"',
      'env_key = "SVC_API_KEY"',
      "request_max_retries = 0",
      "stream_max_retries = 0",
      "",
      "[mcp_servers.svc]",
      `url = "${svc.base}/mcp"`,
      'bearer_token_env_var = "SVC_MCP_KEY"',
      "startup_timeout_sec = 30",
      "",
    ].join("\n"),
  );
  const work = join(dir, "work");
  mkdirSync(work);
  const temporary = join(dir, "tmp");
  mkdirSync(temporary);
  const hidden = (text) => text.replaceAll(key, "sk-svc-…");
  /** `codex exec` with `mcpKey` as the key for /mcp; the tools of its
   *  first model request. */
  const codexExec = async (mcpKey) => {
    const before = proxy.bodies.length;
    const done = await run(
      CODEX,
      ["exec", "--skip-git-repo-check", "--sandbox", "read-only", "--cd", work, "--json", "Say hi"],
      {
        cwd: work,
        timeout: 120_000,
        env: {
          ...process.env,
          CODEX_HOME: home,
          TMPDIR: temporary,
          SVC_API_KEY: key,
          SVC_MCP_KEY: mcpKey,
          NO_PROXY: "127.0.0.1,localhost",
          no_proxy: "127.0.0.1,localhost",
        },
      },
    );
    const said = hidden(`codex exec: exit ${done.status} ${done.signal ?? ""}\nstdout: ${done.stdout}\nstderr: ${done.stderr}`);
    assert.equal(done.status, 0, said);
    assert.match(done.stdout, /Echo: Say hi/, said);
    assert.ok(proxy.bodies.length > before, `no Responses request went through the proxy\n${said}`);
    return { tools: proxy.bodies[before].tools ?? [], said };
  };

  const { tools, said } = await codexExec(key);
  const namespace = tools.find((tool) => tool.type === "namespace" && tool.name === "mcp__svc");
  assert.ok(namespace, `no mcp__svc tools offered: ${JSON.stringify(tools.map((tool) => tool.name))}\n${said}`);
  const names = namespace.tools.map((tool) => tool.name);
  t.diagnostic(`mcp__svc: ${names.join(", ")}`);
  // svc's `<label>__<tool>` names, as Codex sanitizes them (`-` to `_`).
  assert.ok(names.includes("everything__echo"), names.join(", "));
  assert.ok(names.includes("everything__get_sum"), names.join(", "));
  for (const name of names) assert.match(name, /^everything__/);
  const echo = namespace.tools.find((tool) => tool.name === "everything__echo");
  assert.match(JSON.stringify(echo), /Echoes back the input string/);

  // A key svc never issued: /mcp answers 401, Codex goes on without it.
  const stranger = createKey(join(dir, "other-data"), "stranger");
  const refused = await codexExec(stranger);
  assert.ok(
    !refused.tools.some((tool) => tool.name === "mcp__svc"),
    `a stranger's key got svc's tools\n${refused.said}`,
  );
});
