// The Vercel AI SDK (`ai` with the `@ai-sdk/openai` provider) against
// svc-fake-server: chat models (generateText, streamText), the legacy
// completion model, and embeddings (embedMany).
//
// The fake server's `svc` model answers `You said: <last user message or
// text prompt>` word by word, counting a prompt as its words plus one per
// message; `fake-embed` makes unit-length vectors of 4 dimensions.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { createOpenAI } from '@ai-sdk/openai';
import { embedMany, generateText, streamText } from 'ai';

import { norm, recordingFetch, startServer } from './helpers.mjs';

let server;
let openai;
let requests;

before(async () => {
  server = await startServer();
  const recorder = recordingFetch();
  requests = recorder.requests;
  openai = createOpenAI({ baseURL: `${server.url}/v1`, apiKey: server.key, fetch: recorder.fetch });
});

after(async () => {
  await server?.stop();
});

/** The body of the last request the provider sent to `path`. */
function lastBody(path) {
  const sent = requests.filter((r) => r.path === path);
  assert.ok(sent.length > 0, `no request to ${path}`);
  return sent.at(-1).body;
}

describe('chat model', () => {
  test('generateText', async () => {
    const result = await generateText({ model: openai.chat('svc'), prompt: 'hello', maxRetries: 0 });
    assert.deepEqual(lastBody('/v1/chat/completions').messages, [{ role: 'user', content: 'hello' }]);
    assert.equal(result.text, 'You said: hello');
    assert.equal(result.finishReason, 'stop');
    // One word plus one for the message; three words in the answer.
    assert.equal(result.usage.inputTokens, 2);
    assert.equal(result.usage.outputTokens, 3);
    assert.equal(result.usage.totalTokens, 5);
  });

  test('streamText', async () => {
    const result = streamText({ model: openai.chat('svc'), prompt: 'hello', maxRetries: 0 });
    const deltas = [];
    for await (const delta of result.textStream) deltas.push(delta);
    const body = lastBody('/v1/chat/completions');
    assert.equal(body.stream, true);
    assert.ok(deltas.length > 1, `the text came in ${deltas.length} delta(s)`);
    assert.equal(deltas.join(''), 'You said: hello');
    assert.equal(await result.text, 'You said: hello');
    assert.equal(await result.finishReason, 'stop');
    // The provider asks for the usage chunk (stream_options.include_usage).
    const usage = await result.usage;
    assert.equal(usage.inputTokens, 2);
    assert.equal(usage.outputTokens, 3);
  });
});

describe('completion model', () => {
  test('generateText', async () => {
    const result = await generateText({ model: openai.completion('svc'), prompt: 'hello', maxRetries: 0 });
    // The provider turns the prompt into a `user:`/`assistant:` transcript
    // for the legacy API (with `\nuser:` as a stop sequence), and svc's
    // fake model answers `You said: ` and that whole text prompt, which does
    // not contain the stop sequence.
    const body = lastBody('/v1/completions');
    assert.equal(body.prompt, 'user:\nhello\n\nassistant:\n');
    assert.deepEqual(body.stop, ['\nuser:']);
    assert.equal(result.text, 'You said: user:\nhello\n\nassistant:\n');
    assert.equal(result.finishReason, 'stop');
    assert.ok(result.usage.inputTokens > 0);
    assert.ok(result.usage.outputTokens > 0);
  });
});

describe('embedding model', () => {
  test('embedMany', async () => {
    const result = await embedMany({
      model: openai.embedding('fake-embed'),
      values: ['a', 'b'],
      maxRetries: 0,
    });
    assert.deepEqual(lastBody('/v1/embeddings').input, ['a', 'b']);
    assert.equal(result.embeddings.length, 2);
    for (const [i, embedding] of result.embeddings.entries()) {
      assert.equal(embedding.length, 4);
      assert.ok(Math.abs(norm(embedding) - 1) < 1e-5, `embedding ${i} has length ${norm(embedding)}`);
    }
    assert.notDeepEqual(result.embeddings[0], result.embeddings[1]);
    assert.deepEqual(result.values, ['a', 'b']);
    assert.ok(result.usage.tokens > 0);
  });
});
