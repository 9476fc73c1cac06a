// The official `openai` Node SDK against svc-fake-server: chat completions
// (whole and streamed), embeddings (the SDK's default base64 and float),
// the legacy completions API, and the SDK's error classes.
//
// The fake server's `svc` model answers `You said: <last user message>`
// word by word (a word keeps its trailing space), counting a prompt as its
// words plus one per message; `fake-embed` makes unit-length vectors of 4
// dimensions.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import OpenAI, { AuthenticationError, BadRequestError, NotFoundError } from 'openai';

import { norm, recordingFetch, startServer } from './helpers.mjs';

let server;
let client;
let requests;

before(async () => {
  server = await startServer();
  const recorder = recordingFetch();
  requests = recorder.requests;
  client = new OpenAI({
    baseURL: `${server.url}/v1`,
    apiKey: server.key,
    maxRetries: 0,
    fetch: recorder.fetch,
  });
});

after(async () => {
  await server?.stop();
});

/** The body of the last request the client sent to `path`. */
function lastBody(path) {
  const sent = requests.filter((r) => r.path === path);
  assert.ok(sent.length > 0, `no request to ${path}`);
  return sent.at(-1).body;
}

describe('chat completions', () => {
  const messages = [{ role: 'user', content: 'hello there' }];

  test('whole', async () => {
    const completion = await client.chat.completions.create({ model: 'svc', messages });
    assert.equal(completion.object, 'chat.completion');
    assert.equal(completion.model, 'svc');
    assert.equal(completion.choices.length, 1);
    const [choice] = completion.choices;
    assert.equal(choice.index, 0);
    assert.equal(choice.message.role, 'assistant');
    assert.equal(choice.message.content, 'You said: hello there');
    assert.equal(choice.finish_reason, 'stop');
    // Two words plus one for the message; four words in the answer.
    assert.deepEqual(
      {
        prompt_tokens: completion.usage.prompt_tokens,
        completion_tokens: completion.usage.completion_tokens,
        total_tokens: completion.usage.total_tokens,
      },
      { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
    );
  });

  test('streamed with usage', async () => {
    const stream = await client.chat.completions.create({
      model: 'svc',
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let finish = null;
    const usages = [];
    let chunks = 0;
    let id = null;
    for await (const chunk of stream) {
      chunks += 1;
      assert.equal(chunk.object, 'chat.completion.chunk');
      id ??= chunk.id;
      assert.equal(chunk.id, id, 'every chunk has the same id');
      for (const choice of chunk.choices) {
        text += choice.delta?.content ?? '';
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      if (chunk.usage) {
        assert.deepEqual(chunk.choices, [], 'the usage chunk has no choices');
        usages.push(chunk.usage);
      }
    }
    assert.ok(chunks > 2, `only ${chunks} chunks`);
    assert.equal(text, 'You said: hello there');
    assert.equal(finish, 'stop');
    assert.equal(usages.length, 1, 'one usage chunk');
    assert.equal(usages[0].prompt_tokens, 3);
    assert.equal(usages[0].completion_tokens, 4);
    assert.equal(usages[0].total_tokens, 7);
  });
});

describe('embeddings', () => {
  const input = ['a banana', 'the cat'];

  function check(response) {
    assert.equal(response.object, 'list');
    assert.equal(response.model, 'fake-embed');
    assert.deepEqual(
      response.data.map((d) => d.index),
      [0, 1],
    );
    for (const d of response.data) {
      assert.equal(d.object, 'embedding');
      assert.ok(Array.isArray(d.embedding), `embedding ${d.index} is ${typeof d.embedding}, not an array`);
      assert.equal(d.embedding.length, 4);
      assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5, `embedding ${d.index} has length ${norm(d.embedding)}`);
    }
    assert.ok(response.usage.prompt_tokens > 0);
  }

  test('base64 (the SDK default) and float give the same vectors', async () => {
    const defaulted = await client.embeddings.create({ model: 'fake-embed', input });
    // The Node SDK asks for base64 and decodes it into numbers.
    assert.equal(lastBody('/v1/embeddings').encoding_format, 'base64');
    check(defaulted);

    const floats = await client.embeddings.create({ model: 'fake-embed', input, encoding_format: 'float' });
    assert.equal(lastBody('/v1/embeddings').encoding_format, 'float');
    check(floats);

    assert.notDeepEqual(floats.data[0].embedding, floats.data[1].embedding, 'different inputs, different vectors');
    for (const [i, d] of floats.data.entries()) {
      const decoded = defaulted.data[i].embedding;
      d.embedding.forEach((x, j) => {
        assert.ok(Math.abs(x - decoded[j]) < 1e-6, `embedding ${i}[${j}]: float ${x}, base64 ${decoded[j]}`);
      });
    }
  });
});

describe('legacy completions', () => {
  test('whole, with echo', async () => {
    const completion = await client.completions.create({ model: 'svc', prompt: 'hi there', echo: true });
    assert.equal(completion.object, 'text_completion');
    assert.equal(completion.model, 'svc');
    assert.equal(completion.choices.length, 1);
    assert.equal(completion.choices[0].index, 0);
    assert.equal(completion.choices[0].text, 'hi thereYou said: hi there');
    assert.equal(completion.choices[0].finish_reason, 'stop');
    assert.equal(completion.usage.prompt_tokens, 3);
    assert.equal(completion.usage.completion_tokens, 4);
    assert.equal(completion.usage.total_tokens, 7);
  });

  test('with logprobs', async () => {
    const completion = await client.completions.create({ model: 'svc', prompt: 'hi there', logprobs: 2 });
    const [choice] = completion.choices;
    assert.equal(choice.text, 'You said: hi there');
    const { tokens, token_logprobs: tokenLogprobs, top_logprobs: topLogprobs, text_offset: textOffset } =
      choice.logprobs;
    assert.equal(tokens.join(''), choice.text);
    assert.equal(tokenLogprobs.length, tokens.length);
    assert.equal(topLogprobs.length, tokens.length);
    assert.equal(textOffset.length, tokens.length);
    for (const logprob of tokenLogprobs) assert.equal(logprob, -0.5);
    assert.equal(textOffset[0], 0);
    for (let i = 1; i < textOffset.length; i += 1) {
      assert.ok(textOffset[i] > textOffset[i - 1], `text_offset ${JSON.stringify(textOffset)} does not increase`);
      assert.equal(textOffset[i], textOffset[i - 1] + tokens[i - 1].length);
    }
    for (const [i, top] of topLogprobs.entries()) {
      assert.equal(typeof top, 'object');
      assert.ok(top !== null && !Array.isArray(top), `top_logprobs[${i}] is ${JSON.stringify(top)}`);
      assert.equal(top[tokens[i]], -0.5, `top_logprobs[${i}] lacks its token`);
      assert.ok(Object.keys(top).length >= 2, `top_logprobs[${i}] is ${JSON.stringify(top)}`);
    }
  });

  test('streamed, with echo and usage', async () => {
    const whole = await client.completions.create({ model: 'svc', prompt: 'hi there', echo: true });
    const stream = await client.completions.create({
      model: 'svc',
      prompt: 'hi there',
      echo: true,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.ok(chunks.length > 2, `only ${chunks.length} chunks`);
    let text = '';
    let finish = null;
    for (const chunk of chunks) {
      assert.equal(chunk.object, 'text_completion');
      for (const choice of chunk.choices) {
        assert.equal(choice.index, 0);
        text += choice.text;
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    }
    assert.equal(text, whole.choices[0].text);
    assert.equal(text, 'hi thereYou said: hi there');
    assert.equal(finish, 'stop');
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assert.deepEqual(
      {
        prompt_tokens: last.usage?.prompt_tokens,
        completion_tokens: last.usage?.completion_tokens,
        total_tokens: last.usage?.total_tokens,
      },
      { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
    );
    assert.ok(chunks.slice(0, -1).every((c) => !c.usage), 'only the last chunk carries usage');
  });

  test('array prompt with n', async () => {
    const completion = await client.completions.create({ model: 'svc', prompt: ['one', 'two'], n: 2 });
    assert.equal(completion.choices.length, 4);
    const byIndex = [...completion.choices].sort((a, b) => a.index - b.index);
    assert.deepEqual(
      byIndex.map((c) => c.index),
      [0, 1, 2, 3],
    );
    // Choice i of prompt p has index p * n + i.
    assert.deepEqual(
      byIndex.map((c) => c.text),
      ['You said: one', 'You said: one', 'You said: two', 'You said: two'],
    );
  });

  test('suffix is refused with a BadRequestError naming it', async () => {
    await assert.rejects(
      client.completions.create({ model: 'svc', prompt: 'hi there', suffix: 'x' }),
      (err) => {
        assert.ok(err instanceof BadRequestError, `${err?.constructor?.name}: ${err?.message}`);
        assert.equal(err.status, 400);
        assert.equal(err.param ?? err.error?.param, 'suffix');
        return true;
      },
    );
  });
});

describe('errors', () => {
  test('an unknown key is an AuthenticationError', async () => {
    const stranger = new OpenAI({
      baseURL: `${server.url}/v1`,
      apiKey: `sk-svc-${'0'.repeat(40)}`,
      maxRetries: 0,
    });
    await assert.rejects(
      stranger.chat.completions.create({ model: 'svc', messages: [{ role: 'user', content: 'hello' }] }),
      (err) => {
        assert.ok(err instanceof AuthenticationError, `${err?.constructor?.name}: ${err?.message}`);
        assert.equal(err.status, 401);
        return true;
      },
    );
  });

  test('an unknown model is a NotFoundError', async () => {
    await assert.rejects(
      client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hello' }] }),
      (err) => {
        assert.ok(err instanceof NotFoundError, `${err?.constructor?.name}: ${err?.message}`);
        assert.equal(err.status, 404);
        assert.equal(err.param ?? err.error?.param, 'model');
        return true;
      },
    );
  });
});
