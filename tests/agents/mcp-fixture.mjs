// What the MCP tests here share: a registered MCP server
// (`@modelcontextprotocol/server-everything` from npm, serving Streamable
// HTTP), `svc serve` configured with it as `[mcp.servers.everything]`, keys,
// and a scripted chat-completions upstream that makes the model call the
// `everything__echo` tool when it is offered, then answers with what the
// tool returned. Not a test file itself (run.sh runs `*.test.mjs`).

import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { createServer } from "node:http";
import { writeFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

export const HERE = dirname(fileURLToPath(import.meta.url));
export const BIN = join(HERE, "node_modules", ".bin");
export const SVC = process.env.SVC_BIN;
/** What the scripted model asks the echo tool to echo. */
export const ECHOED = "svc-mcp-ok";
const START_TIMEOUT_MS = 60_000;

/** Starts `command args`; resolves with the process and the first match of
 *  `pattern` in its `stream`, then keeps draining both pipes. */
export function startAndWait(command, args, stream, pattern, env = {}) {
  const child = spawn(command, args, {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let seen = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${command} did not start: ${seen}`));
    }, START_TIMEOUT_MS);
    const onExit = (code) => {
      clearTimeout(timer);
      reject(new Error(`${command} exited ${code} before it started: ${seen}`));
    };
    child.on("exit", onExit);
    child[stream].setEncoding("utf8");
    const onData = (chunk) => {
      seen += chunk;
      const match = seen.match(pattern);
      if (match) {
        clearTimeout(timer);
        child.off("exit", onExit);
        child[stream].off("data", onData);
        child.stdout.resume();
        child.stderr.resume();
        resolve({ child, match });
      }
    };
    child[stream].on("data", onData);
  });
}

/** Runs `command args` to its end without blocking the event loop (the
 *  scripted upstream answers from this process); resolves with its exit
 *  code, signal, stdout and stderr. Killed after `timeout` ms. */
export function run(command, args, { env, cwd, timeout }) {
  const child = spawn(command, args, { env, cwd, stdio: ["ignore", "pipe", "pipe"], timeout });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8");
  child.stderr.setEncoding("utf8");
  child.stdout.on("data", (chunk) => (stdout += chunk));
  child.stderr.on("data", (chunk) => (stderr += chunk));
  return new Promise((resolve) =>
    child.on("close", (status, signal) => resolve({ status, signal, stdout, stderr })),
  );
}

/** Stops a child started here, by its own handle (never by name). */
export async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await exited;
  clearTimeout(timer);
}

/** A port free right now on loopback: server-everything takes its port
 *  from `PORT` and prints the number it was given, so port 0 would leave
 *  the test not knowing where it listens. */
async function freePort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** server-everything over Streamable HTTP; resolves with its process and
 *  its `/mcp` URL. */
export async function startEverything() {
  const port = await freePort();
  const { child } = await startAndWait(
    join(BIN, "mcp-server-everything"),
    ["streamableHttp"],
    "stderr",
    /listening on port/,
    { PORT: String(port) },
  );
  return { child, url: `http://127.0.0.1:${port}/mcp` };
}

/** A new key of `svc serve --data-dir data`. */
export function createKey(data, name) {
  const created = spawnSync(SVC, ["keys", "create", "--name", name, "--data-dir", data], {
    encoding: "utf8",
  });
  assert.equal(created.status, 0, created.stderr);
  const key = created.stdout.trim();
  assert.match(key, /^sk-svc-/);
  return key;
}

/** `svc serve` on port 0 with `data`, its models (`models`, `svc` and
 *  `svc-thinking`, so that no embedded model is fetched) routed to
 *  `upstreamUrl`, and `mcpUrl` registered as `[mcp.servers.everything]`;
 *  resolves with its process and base URL. */
export async function startSvc(dir, data, { upstreamUrl, mcpUrl, models = [] }) {
  const config = join(dir, "svc.toml");
  const table = (id) => `[models.${id}]\nupstreams = [{ base_url = "${upstreamUrl}", model = "up" }]\n`;
  writeFileSync(
    config,
    [...models, "svc", "svc-thinking"].map(table).join("") +
      `[mcp.servers.everything]\nurl = "${mcpUrl}"\n`,
  );
  const { child, match } = await startAndWait(
    SVC,
    ["serve", "--config", config, "--data-dir", data, "--bind", "127.0.0.1:0"],
    "stderr",
    /svc is serving on (\S+)\n/,
    { SVC_LOG: "warn" },
  );
  return { child, base: match[1] };
}

/** The text of a chat message's `content`, a string or a list of parts. */
function text(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((part) => part.text ?? "").join("");
  return "";
}

/**
 * A scripted OpenAI chat-completions upstream (`/v1/chat/completions`,
 * `/v1/models`), streamed or not. While the conversation since the last
 * user message has no tool result and a tool whose name ends in
 * `everything__echo` is offered, it calls that tool (whatever prefix the
 * client gave it) with `{"message": ECHOED}`; after a tool result it
 * answers `Tool said: <result>`; otherwise `Echo: <last user message>`.
 * `toolResults` holds every tool result it was sent.
 */
export async function startScriptedUpstream() {
  const toolResults = [];
  let calls = 0;
  const server = createServer((request, response) => {
    let body = "";
    request.setEncoding("utf8");
    request.on("data", (chunk) => (body += chunk));
    request.on("end", () => {
      if (request.method === "GET" && request.url.endsWith("/models")) {
        response.writeHead(200, { "content-type": "application/json" });
        response.end(JSON.stringify({ object: "list", data: [{ id: "up", object: "model" }] }));
        return;
      }
      if (request.method !== "POST" || !request.url.endsWith("/chat/completions")) {
        response.writeHead(404).end();
        return;
      }
      const chat = JSON.parse(body);
      const messages = chat.messages ?? [];
      const lastUser = messages.findLastIndex((m) => m.role === "user");
      const results = messages.slice(lastUser + 1).filter((m) => m.role === "tool").map((m) => text(m.content));
      toolResults.push(...results);
      const echo = (chat.tools ?? [])
        .map((tool) => tool.function?.name ?? "")
        .find((name) => name.endsWith("everything__echo"));
      let content = null;
      let toolCall = null;
      if (results.length > 0) {
        content = `Tool said: ${results.join(" ")}`;
      } else if (echo) {
        calls += 1;
        toolCall = {
          id: `call_${calls}`,
          type: "function",
          function: { name: echo, arguments: JSON.stringify({ message: ECHOED }) },
        };
      } else {
        content = `Echo: ${lastUser >= 0 ? text(messages[lastUser].content) : ""}`;
      }
      const finish = toolCall ? "tool_calls" : "stop";
      const usage = { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 };
      const base = { id: `chatcmpl-${calls}`, created: 0, model: chat.model ?? "up" };
      if (!chat.stream) {
        const message = { role: "assistant", content };
        if (toolCall) message.tool_calls = [toolCall];
        response.writeHead(200, { "content-type": "application/json" });
        response.end(
          JSON.stringify({
            ...base,
            object: "chat.completion",
            choices: [{ index: 0, message, finish_reason: finish }],
            usage,
          }),
        );
        return;
      }
      response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      const chunk = (delta, finishReason = null, extra = {}) =>
        response.write(
          `data: ${JSON.stringify({
            ...base,
            object: "chat.completion.chunk",
            choices: [{ index: 0, delta, finish_reason: finishReason }],
            ...extra,
          })}\n\n`,
        );
      chunk({ role: "assistant", content: "" });
      if (toolCall) {
        chunk({ tool_calls: [{ index: 0, ...toolCall }] });
      } else {
        chunk({ content });
      }
      chunk({}, finish);
      if (chat.stream_options?.include_usage) {
        response.write(`data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [], usage })}\n\n`);
      }
      response.end("data: [DONE]\n\n");
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}/v1`,
    toolResults,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}
