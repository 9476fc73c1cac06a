// The Vercel AI SDK (`ai` with `@ai-sdk/openai`) against `svc serve` on
// svc's default model, SmolLM2-135M-Instruct (the GGUF that
// $SVC_TEST_MODEL names, which scripts/test.sh fetches; skipped without
// it): a call forced with `toolChoice: { type: 'tool' }` and the SDK's
// defaults otherwise (no temperature, so svc samples) must give arguments
// the SDK accepts, valid JSON matching the tool's schema, every time the
// reply did not run out of tokens (issue 61: one run came back as
// `{"city": "Oslo}}`, a brace inside the string read as the call's end).
//
// Needs SVC_BIN too (run.sh builds `svc` when SVC_TEST_MODEL is set).
// SVC_SDK_FORCED_RUNS sets how many calls are made (20 by default).

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';

import { createOpenAI } from '@ai-sdk/openai';
import { generateText, jsonSchema, tool } from 'ai';

const SVC_BIN = process.env.SVC_BIN;
const MODEL = process.env.SVC_TEST_MODEL;
const RUNS = Number(process.env.SVC_SDK_FORCED_RUNS ?? 20);
const START_TIMEOUT_MS = 120_000;

let dir;
let serve;
let openai;

/** `svc serve` on the default model in a data folder of its own; resolves
 *  with the process and its base URL once it serves. */
function startSvc(data) {
  const child = spawn(SVC_BIN, ['serve', '--bind', '127.0.0.1:0', '--data-dir', data, '--parallel', '1', '--context', '2048'], {
    env: { ...process.env, SVC_LOG: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  if (process.env.SVC_SDK_PIDS && child.pid) {
    writeFileSync(join(process.env.SVC_SDK_PIDS, String(child.pid)), `${child.pid}\n`);
  }
  let output = '';
  return new Promise((resolveStart, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`svc did not start in time:\n${output}`));
    }, START_TIMEOUT_MS);
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`svc exited (${code}) before it served:\n${output}`));
    });
    child.stdout.resume();
    createInterface({ input: child.stderr }).on('line', (line) => {
      output += `${line}\n`;
      const match = line.match(/^svc is serving on (\S+)/);
      if (match) {
        clearTimeout(timer);
        child.removeAllListeners('exit');
        resolveStart({ child, url: match[1] });
      }
    });
  });
}

/** Stops the server started here (by its own handle). */
async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolveExit) => child.once('exit', resolveExit));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

describe('the default model', { skip: MODEL ? false : 'SVC_TEST_MODEL is not set' }, () => {
  before(async () => {
    assert.ok(SVC_BIN, 'SVC_BIN must name the svc binary (run.sh builds it)');
    dir = mkdtempSync(join(tmpdir(), 'svc-sdk-real-'));
    const data = join(dir, 'data');
    mkdirSync(join(data, 'models'), { recursive: true });
    symlinkSync(resolve(MODEL), join(data, 'models', 'SmolLM2-135M-Instruct.Q4_1.gguf'));
    const created = spawnSync(SVC_BIN, ['keys', 'create', '--name', 'sdk', '--data-dir', data], { encoding: 'utf8' });
    assert.equal(created.status, 0, created.stderr);
    const key = created.stdout.trim();
    serve = await startSvc(data);
    openai = createOpenAI({ baseURL: `${serve.url}/v1`, apiKey: key });
  });

  after(async () => {
    if (serve) await stop(serve.child);
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test(`a forced tool call gives valid arguments ${RUNS} times out of ${RUNS}`, { timeout: 600_000 }, async (t) => {
    const weather = tool({
      description: 'The current weather in a city',
      inputSchema: jsonSchema({
        type: 'object',
        properties: { city: { type: 'string', description: 'The city' } },
        required: ['city'],
        additionalProperties: false,
      }),
    });
    let cut = 0;
    for (let run = 0; run < RUNS; run++) {
      const result = await generateText({
        model: openai.chat('svc'),
        prompt: 'What is the weather in Oslo?',
        tools: { get_weather: weather },
        toolChoice: { type: 'tool', toolName: 'get_weather' },
        maxOutputTokens: 60,
        maxRetries: 0,
      });
      const said = JSON.stringify(result.response?.body ?? result.toolCalls);
      if (result.finishReason === 'length') {
        // Cut off by maxOutputTokens: the arguments may be unfinished.
        cut += 1;
        continue;
      }
      assert.equal(result.toolCalls.length, 1, `run ${run}: ${said}`);
      const [call] = result.toolCalls;
      assert.equal(call.toolName, 'get_weather', `run ${run}: ${said}`);
      assert.ok(!call.invalid, `run ${run}: the SDK refused the arguments (${call.error}): ${said}`);
      assert.deepEqual(Object.keys(call.input), ['city'], `run ${run}: ${said}`);
      assert.equal(typeof call.input.city, 'string', `run ${run}: ${said}`);
      assert.equal(result.finishReason, 'tool-calls', `run ${run}: ${said}`);
    }
    t.diagnostic(`${RUNS - cut} valid calls, ${cut} cut off by maxOutputTokens`);
  });
});
