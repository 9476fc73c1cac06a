"""The official SDKs against `svc serve` on the real default model
(SmolLM2-135M-Instruct, `$SVC_TEST_MODEL`, which `scripts/test.sh` fetches):
real answers through the Responses API (`openai`), the Messages API
(`anthropic`), chat completions' log probabilities, legacy text
completions (and LangChain's `OpenAI` LLM on them), and embeddings.

The server is `$SVC_BIN serve` (run.sh builds `svc`) with the model in a
data directory of its own, as on a newcomer's first start minus the
download. Without `$SVC_TEST_MODEL` these tests are skipped (the test
command always sets it).
"""

from __future__ import annotations

import concurrent.futures
import math
import re

import anthropic
import openai
import pytest

from conftest import Server, real_model_serve

QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def real_server():
    yield from real_model_serve("svc-real-")


@pytest.fixture(scope="module")
def real_openai(real_server: Server) -> openai.OpenAI:
    with openai.OpenAI(base_url=real_server.base_url, api_key=real_server.key, max_retries=0, timeout=300) as c:
        yield c


def test_responses_api_answers_for_real(real_openai: openai.OpenAI) -> None:
    response = real_openai.responses.create(model="svc", input=QUESTION, temperature=0, store=False)
    assert response.status == "completed"
    assert "Paris" in response.output_text
    assert response.usage.input_tokens > 5 and response.usage.output_tokens > 0

    with real_openai.responses.stream(model="svc", input=QUESTION, temperature=0, store=False) as stream:
        deltas = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert deltas == final.output_text
    assert "Paris" in deltas


def test_messages_api_answers_for_real(real_server: Server) -> None:
    with anthropic.Anthropic(base_url=real_server.url, api_key=real_server.key, max_retries=0, timeout=300) as client:
        message = client.messages.create(
            model="svc", max_tokens=64, messages=[{"role": "user", "content": QUESTION}], extra_body={"temperature": 0}
        )
        assert message.type == "message"
        assert message.stop_reason in ("end_turn", "max_tokens")
        assert "Paris" in message.content[0].text
        counted = client.messages.count_tokens(model="svc", messages=[{"role": "user", "content": QUESTION}])
        # As Anthropic counts: the prompt is its computed and its cached tokens.
        usage = message.usage
        assert counted.input_tokens == usage.input_tokens + usage.cache_read_input_tokens


def test_a_repeated_prompt_reports_its_cached_tokens_in_every_sdk(real_server: Server, real_openai: openai.OpenAI) -> None:
    """Issue 32: the second of two identical requests evaluates only the
    prompt's last token (the rest is the reused prefix) and says so."""
    system = "You answer questions about the sea, briefly and kindly. " * 4
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "How deep is it?"}]
    real_openai.chat.completions.create(model="svc", messages=messages, max_tokens=4, temperature=0)
    again = real_openai.chat.completions.create(model="svc", messages=messages, max_tokens=4, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1

    response = real_openai.responses.create(
        model="svc", instructions=system, input="How deep is it?", max_output_tokens=16, temperature=0, store=False
    )
    assert response.usage.input_tokens_details.cached_tokens == response.usage.input_tokens - 1

    with anthropic.Anthropic(base_url=real_server.url, api_key=real_server.key, max_retries=0, timeout=300) as client:
        message = client.messages.create(
            model="svc", max_tokens=4, system=system, messages=[{"role": "user", "content": "How deep is it?"}],
            extra_body={"temperature": 0},
        )
    assert message.usage.input_tokens == 1
    assert message.usage.cache_read_input_tokens == again.usage.prompt_tokens - 1


def test_a_seeded_request_says_the_same_under_load_with_one_fingerprint(real_openai: openai.OpenAI) -> None:
    """Issue 32: the same seeded request, cold, streamed, and beside two other
    streams, gives the same text, and every reply and chunk names the same
    `system_fingerprint` (the weights, engine build and numerics)."""
    ask = {
        "model": "svc",
        "messages": [{"role": "user", "content": "Write one sentence about the sea."}],
        "temperature": 0.9,
        "seed": 42,
        "max_tokens": 30,
    }
    cold = real_openai.chat.completions.create(**ask)
    assert re.fullmatch(r"fp_[0-9a-f]{12}", cold.system_fingerprint or ""), cold
    text = cold.choices[0].message.content

    chunks = list(real_openai.chat.completions.create(**ask, stream=True))
    assert {c.system_fingerprint for c in chunks} == {cold.system_fingerprint}
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        others = [
            pool.submit(real_openai.chat.completions.create, model="svc", max_tokens=60,
                        messages=[{"role": "user", "content": q}])
            for q in ("Count to twenty.", "Name ten rivers.")
        ]
        beside = pool.submit(real_openai.chat.completions.create, **ask).result()
        for other in others:
            other.result()
    assert beside.choices[0].message.content == text
    assert beside.system_fingerprint == cold.system_fingerprint


def test_chat_logprobs_are_the_real_distribution(real_openai: openai.OpenAI) -> None:
    completion = real_openai.chat.completions.create(
        model="svc",
        messages=[{"role": "user", "content": QUESTION}],
        temperature=0,
        max_tokens=8,
        logprobs=True,
        top_logprobs=3,
    )
    choice = completion.choices[0]
    content = choice.logprobs.content
    assert content, completion
    # The tokens spell the reply (a stop sequence or the end of turn is not listed).
    assert "".join(t.token for t in content) == choice.message.content
    for token in content:
        assert token.logprob <= 0
        assert len(token.top_logprobs) == 3
        alternatives = [t.logprob for t in token.top_logprobs]
        assert alternatives == sorted(alternatives, reverse=True)
        # Greedy decoding picks the most likely token: it leads the list.
        assert token.top_logprobs[0].token == token.token
        assert math.isclose(token.top_logprobs[0].logprob, token.logprob, abs_tol=1e-4)
        if token.token.isascii():
            assert bytes(token.bytes) == token.token.encode()


PROMPT = "The capital of France is"


def test_legacy_completions_continue_the_prompt_for_real(real_openai: openai.OpenAI) -> None:
    whole = real_openai.completions.create(
        model="svc", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=2,
    )
    assert whole.object == "text_completion" and whole.id.startswith("cmpl-")
    choice = whole.choices[0]
    assert choice.text.strip(), whole
    assert choice.finish_reason in ("stop", "length")
    # The prompt as it is: a handful of tokens, no chat template around it.
    assert 3 <= whole.usage.prompt_tokens <= 10, whole.usage
    logprobs = choice.logprobs
    assert "".join(logprobs.tokens) == choice.text
    assert logprobs.text_offset[0] == 0
    assert logprobs.text_offset == sorted(logprobs.text_offset)
    for token, logprob, top in zip(logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs):
        assert logprob <= 0
        # Greedy: the chosen token is the likeliest of those listed.
        assert top[token] == pytest.approx(logprob, abs=1e-4)
        assert max(top.values()) == pytest.approx(logprob, abs=1e-4)
        assert 1 <= len(top) <= 3

    # Streamed, greedy: the same text, in text_completion chunks.
    streamed = real_openai.completions.create(
        model="svc", prompt=PROMPT, max_tokens=6, temperature=0, stream=True, echo=True,
        stream_options={"include_usage": True},
    )
    pieces, usage = [], None
    for chunk in streamed:
        assert chunk.object == "text_completion"
        pieces.extend(c.text for c in chunk.choices)
        usage = chunk.usage or usage
    assert "".join(pieces) == PROMPT + choice.text
    assert usage.completion_tokens == whole.usage.completion_tokens

    # SmolLM2 has no fill-in-the-middle tokens: a suffix is refused, naming it.
    with pytest.raises(openai.BadRequestError) as refused:
        real_openai.completions.create(model="svc", prompt="def add(a, b):", suffix="    return c")
    assert refused.value.body["param"] == "suffix"


def test_a_prompt_is_scored_as_evaluation_tools_ask(real_openai: openai.OpenAI) -> None:
    """lm-evaluation-harness's loglikelihood request: `echo`, `logprobs: 1`,
    `max_tokens: 0`; the continuation's score is the sum of its tokens'."""

    def score(text: str):
        reply = real_openai.completions.create(
            model="svc", prompt=text, echo=True, logprobs=1, max_tokens=0, temperature=0,
        )
        choice = reply.choices[0]
        assert choice.text == text
        assert choice.finish_reason == "length"
        assert reply.usage.completion_tokens == 0
        return choice.logprobs

    paris = score(PROMPT + " Paris")
    # Every token of the prompt, in order; the first has no score.
    assert "".join(paris.tokens) == PROMPT + " Paris"
    assert paris.token_logprobs[0] is None and paris.top_logprobs[0] is None
    assert paris.text_offset[0] == 0 and paris.text_offset == sorted(paris.text_offset)
    for token, logprob, top in zip(paris.tokens[1:], paris.token_logprobs[1:], paris.top_logprobs[1:]):
        assert logprob <= 0
        assert top[token] == pytest.approx(logprob, abs=1e-4)
        assert 1 <= len(top) <= 2
    banana = score(PROMPT + " banana")
    prompt_tokens = len(score(PROMPT).tokens)
    # The same prompt tokens score the same, whatever follows them.
    assert paris.token_logprobs[:prompt_tokens] == banana.token_logprobs[:prompt_tokens]
    # And the model knows its capitals.
    assert sum(paris.token_logprobs[prompt_tokens:]) > sum(banana.token_logprobs[prompt_tokens:])

    # SmolLM2's BOS token is <|im_start|>, which it does not add: written in
    # the prompt, it is the prompt's first token, and listed.
    chat = "<|im_start|>user\nHi<|im_end|>"
    assert "".join(score(chat).tokens) == chat

    # Streamed, the echoed prompt's chunk carries the scores.
    chunks = list(real_openai.completions.create(
        model="svc", prompt=PROMPT, echo=True, logprobs=1, max_tokens=0, stream=True,
    ))
    first = chunks[0].choices[0]
    assert first.text == PROMPT
    assert first.logprobs.tokens == score(PROMPT).tokens


def test_langchain_llm_completes_through_the_legacy_api(real_server: Server) -> None:
    from langchain_openai import OpenAI

    llm = OpenAI(
        model="svc", base_url=real_server.base_url, api_key=real_server.key,
        temperature=0, max_tokens=6, max_retries=0,
    )
    direct = openai.OpenAI(base_url=real_server.base_url, api_key=real_server.key, max_retries=0)
    expected = direct.completions.create(model="svc", prompt=PROMPT, temperature=0, max_tokens=6)
    assert llm.invoke(PROMPT) == expected.choices[0].text
    # Several prompts in one request, as LangChain batches them.
    results = llm.generate([PROMPT, "One, two, three,"])
    assert len(results.generations) == 2
    assert results.generations[0][0].text == expected.choices[0].text


DOCUMENTS = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris, France.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
    "The stock market fell sharply on Monday after the interest rate decision.",
    "A recipe for pancakes needs flour, eggs, milk and a pinch of salt.",
    "Jupiter is the largest planet in the solar system, a gas giant.",
]


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_embeddings_float_and_base64_agree_for_a_list(real_openai: openai.OpenAI) -> None:
    listed = {m.id for m in real_openai.models.list()}
    assert "svc-embed" in listed
    floats = real_openai.embeddings.create(model="svc-embed", input=DOCUMENTS, encoding_format="float")
    # The SDK asks for base64 when no format is given, and decodes it.
    decoded = real_openai.embeddings.create(model="svc-embed", input=DOCUMENTS)
    assert [e.index for e in floats.data] == list(range(len(DOCUMENTS)))
    for a, b in zip(floats.data, decoded.data):
        assert len(a.embedding) == 384
        assert abs(_cosine(a.embedding, a.embedding) - 1) < 1e-6
        assert max(abs(x - y) for x, y in zip(a.embedding, b.embedding)) < 1e-6
        assert abs(math.sqrt(sum(x * x for x in a.embedding)) - 1) < 1e-4
    assert floats.usage.prompt_tokens == floats.usage.total_tokens > len(DOCUMENTS) * 5
    with pytest.raises(openai.BadRequestError) as refused:
        real_openai.embeddings.create(model="svc-embed", input="hi", dimensions=128)
    assert refused.value.body["param"] == "dimensions"
    with pytest.raises(openai.BadRequestError) as long_input:
        real_openai.embeddings.create(model="svc-embed", input="word " * 600)
    assert long_input.value.body["param"] == "input"


def test_langchain_retrieves_the_right_document(real_server: Server) -> None:
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_openai import OpenAIEmbeddings

    # Token arrays are OpenAI's tokenizer's; other servers take the text.
    embeddings = OpenAIEmbeddings(
        model="svc-embed", base_url=real_server.base_url, api_key=real_server.key,
        check_embedding_ctx_length=False, max_retries=0,
    )
    store = InMemoryVectorStore.from_texts(DOCUMENTS, embedding=embeddings)
    for question, expected in [
        ("Which city has the famous iron tower?", 0),
        ("How do plants make their food from sunlight?", 1),
        ("What is the biggest planet?", 4),
        ("What do I need to make breakfast pancakes?", 3),
    ]:
        found = store.similarity_search(question, k=1)
        assert found[0].page_content == DOCUMENTS[expected], (question, found)


def test_a_batch_runs_on_the_real_model_for_chat_and_embeddings(real_openai: openai.OpenAI) -> None:
    """The Batch API with the official SDK on the embedded engine: the lines
    run as background work, and their answers are the model's own (the
    greedy answer to the question, vectors of svc-embed's length)."""
    import io
    import json
    import time

    def run(lines: list[dict], endpoint: str) -> dict:
        text = "".join(json.dumps(line) + "\n" for line in lines).encode()
        uploaded = real_openai.files.create(file=("in.jsonl", io.BytesIO(text)), purpose="batch")
        batch = real_openai.batches.create(input_file_id=uploaded.id, endpoint=endpoint, completion_window="24h")
        deadline = time.monotonic() + 300
        while batch.status not in ("completed", "failed", "expired", "cancelled"):
            assert time.monotonic() < deadline, batch
            time.sleep(0.5)
            batch = real_openai.batches.retrieve(batch.id)
        assert batch.status == "completed" and batch.request_counts.failed == 0, batch
        output = real_openai.files.content(batch.output_file_id).text
        return {json.loads(l)["custom_id"]: json.loads(l)["response"]["body"] for l in output.splitlines()}

    asked = real_openai.chat.completions.create(
        model="svc", temperature=0, max_tokens=16, messages=[{"role": "user", "content": QUESTION}])
    chat = run([{"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
                 "body": {"model": "svc", "temperature": 0, "max_tokens": 16,
                          "messages": [{"role": "user", "content": QUESTION}]}} for i in range(3)],
               "/v1/chat/completions")
    assert len(chat) == 3
    for body in chat.values():
        # Greedy: the batch's answer is the interactive one, word for word.
        assert body["choices"][0]["message"]["content"] == asked.choices[0].message.content
    vectors = run([{"custom_id": "e", "method": "POST", "url": "/v1/embeddings",
                    "body": {"model": "svc-embed", "input": ["Paris is in France.", "The sea is blue."]}}],
                  "/v1/embeddings")
    assert [len(d["embedding"]) for d in vectors["e"]["data"]] == [384, 384]
