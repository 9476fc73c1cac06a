"""The official `openai` SDK, unchanged but for base_url and api_key,
against svc's fake models (see crates/svc-test-support/src/fake_engine.rs):

- `svc`: replies "You said: <last user message>", word by word;
- `svc-thinking`: the same, after some reasoning_content;
- `fake-fail`: fails after two words;
- `fake-tools`: calls the first tool with {"city":"Paris"};
- `fake-tiny`: refuses every prompt with context_length_exceeded.
"""

from __future__ import annotations

import json

import openai
import pytest

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# ---------------------------------------------------------------- models


def test_models_list_shows_the_served_models(client: openai.OpenAI) -> None:
    models = client.models.list()
    ids = [m.id for m in models]
    assert "svc" in ids and "svc-thinking" in ids
    for m in models:
        assert m.object == "model"
        assert isinstance(m.created, int)
        assert isinstance(m.owned_by, str)


def test_models_retrieve(client: openai.OpenAI) -> None:
    model = client.models.retrieve("svc")
    assert model.id == "svc"
    assert model.object == "model"
    assert model.owned_by == "svc"


def test_models_retrieve_unknown_is_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("no-such-model")
    assert caught.value.status_code == 404
    assert caught.value.code == "model_not_found"


# ---------------------------------------------------------- whole replies


def test_whole_completion(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="svc",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello there"},
        ],
    )
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "svc"
    assert isinstance(completion.created, int)
    assert len(completion.choices) == 1
    choice = completion.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert choice.message.content == "You said: hello there"
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    usage = completion.usage
    assert usage is not None
    assert usage.completion_tokens == 4
    assert usage.prompt_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_every_parameter_is_accepted(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="svc",
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "one "}, {"type": "text", "text": "two"}]},
        ],
        temperature=0.2,
        top_p=0.9,
        max_completion_tokens=50,
        stop=["\n\n", "END"],
        seed=7,
        n=1,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        response_format={"type": "json_object"},
        user="conformance",
    )
    assert completion.choices[0].message.content == "You said: one two"


def test_conversation_with_tool_history(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="svc",
        messages=[
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny."},
            {"role": "user", "content": "thanks"},
        ],
        tools=[WEATHER_TOOL],
        tool_choice="none",
    )
    assert completion.choices[0].message.content == "You said: thanks"


def test_max_tokens_cuts_the_reply(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="svc", messages=user("a b c d"), max_tokens=2)
    choice = completion.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.content == "You said: "
    assert completion.usage is not None and completion.usage.completion_tokens == 2


def test_reasoning_content(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="svc-thinking", messages=user("think"))
    message = completion.choices[0].message
    assert message.content == "You said: think"
    assert message.model_extra is not None
    reasoning = message.model_extra.get("reasoning_content")
    assert isinstance(reasoning, str) and reasoning


# -------------------------------------------------------------- streaming


def test_stream_with_usage(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model="svc", messages=user("stream me please"))
    stream = client.chat.completions.create(
        model="svc",
        messages=user("stream me please"),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert len(chunks) >= 4
    ids = {c.id for c in chunks}
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")
    assert all(c.object == "chat.completion.chunk" and c.model == "svc" for c in chunks)

    *body, last = chunks
    assert last.choices == []
    assert last.usage is not None
    assert whole.usage is not None
    assert last.usage.completion_tokens == whole.usage.completion_tokens == 5
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    for chunk in body:
        assert chunk.usage is None
        assert len(chunk.choices) == 1

    first = body[0].choices[0]
    assert first.delta.role == "assistant"
    assert first.delta.content == ""
    assert first.finish_reason is None
    finish = body[-1].choices[0]
    assert finish.finish_reason == "stop"
    assert finish.delta.content is None and finish.delta.role is None
    assert all(c.choices[0].finish_reason is None for c in body[:-1])

    text = "".join(c.choices[0].delta.content or "" for c in body)
    assert text == whole.choices[0].message.content == "You said: stream me please"


def test_stream_without_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="svc", messages=user("no usage"), stream=True)
    chunks = list(stream)
    assert chunks, "no chunks"
    for chunk in chunks:
        assert chunk.usage is None
        assert "usage" not in (chunk.model_extra or {})
        assert len(chunk.choices) == 1
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "You said: no usage"


def test_stream_without_usage_sends_no_usage_field(client: openai.OpenAI) -> None:
    response = client.chat.completions.with_raw_response.create(model="svc", messages=user("raw"), stream=True)
    assert response.headers["content-type"].startswith("text/event-stream")
    raw = response.http_response.read().decode()
    assert raw.endswith("\n\n")
    frames = [frame for frame in raw.split("\n\n") if frame]
    assert frames[-1] == "data: [DONE]"
    for frame in frames[:-1]:
        assert frame.startswith("data: ")
        assert "usage" not in json.loads(frame.removeprefix("data: "))


def test_stream_reasoning_content(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(model="svc-thinking", messages=user("deep"), stream=True))
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks)
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    whole = client.chat.completions.create(model="svc-thinking", messages=user("deep"))
    assert reasoning and reasoning == whole.choices[0].message.model_extra["reasoning_content"]
    assert content == "You said: deep"


def test_stream_max_tokens(client: openai.OpenAI) -> None:
    chunks = list(client.chat.completions.create(model="svc", messages=user("x y z"), stream=True, max_tokens=2))
    assert chunks[-1].choices[0].finish_reason == "length"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "You said: "


# ------------------------------------------------------------------ tools


def test_tool_call(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="fake-tools", messages=user("weather in Paris?"), tools=[WEATHER_TOOL], tool_choice="auto"
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 1
    call = calls[0]
    assert call.type == "function"
    assert call.id
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


def test_tool_call_streamed(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="fake-tools",
        messages=user("weather in Paris?"),
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        stream=True,
    )
    calls: dict[int, dict] = {}
    finish = None
    for chunk in stream:
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        for piece in choice.delta.tool_calls or []:
            call = calls.setdefault(piece.index, {"id": None, "name": "", "arguments": ""})
            if piece.id:
                call["id"] = piece.id
            if piece.function is not None:
                call["name"] += piece.function.name or ""
                call["arguments"] += piece.function.arguments or ""
    assert finish == "tool_calls"
    assert list(calls) == [0]
    assert calls[0]["id"]
    assert calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}


# ------------------------------------------------------ logprobs and n
# The fake `svc` model's tokens are the words of its reply, each of log
# probability -0.5, its alternatives the word itself then alt1, alt2, ...


def test_logprobs(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="svc", messages=user("hi"), logprobs=True, top_logprobs=2
    )
    logprobs = completion.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    assert [t.token for t in logprobs.content] == ["You ", "said: ", "hi"]
    first = logprobs.content[0]
    assert first.logprob == -0.5
    assert first.bytes == list(b"You ")
    assert [(a.token, a.logprob) for a in first.top_logprobs] == [("You ", -0.5), ("alt1", -1.0)]
    plain = client.chat.completions.create(model="svc", messages=user("hi"))
    assert plain.choices[0].logprobs is None


def test_logprobs_streamed(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="svc", messages=user("hi there"), logprobs=True, top_logprobs=1, stream=True
    )
    text, tokens = "", []
    for chunk in stream:
        choice = chunk.choices[0]
        if choice.delta.content:
            text += choice.delta.content
            assert choice.logprobs is not None and choice.logprobs.content is not None
            tokens += [t.token for t in choice.logprobs.content]
            assert all(len(t.top_logprobs) == 1 for t in choice.logprobs.content)
    assert text == "You said: hi there"
    assert "".join(tokens) == text


def test_n_choices(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="svc", messages=user("hi"), n=3)
    assert [c.index for c in completion.choices] == [0, 1, 2]
    for choice in completion.choices:
        assert choice.message.content == "You said: hi"
        assert choice.finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 9


def test_n_choices_streamed(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="svc",
        messages=user("hi"),
        n=2,
        stream=True,
        stream_options={"include_usage": True},
    )
    texts: dict[int, str] = {}
    finishes: dict[int, str] = {}
    usage = None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    assert texts == {0: "You said: hi", 1: "You said: hi"}
    assert finishes == {0: "stop", 1: "stop"}
    assert usage is not None and usage.completion_tokens == 6


# ----------------------------------------------------------------- errors


def test_bad_key_is_authentication_error(bad_client: openai.OpenAI) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        bad_client.chat.completions.create(model="svc", messages=user("hi"))
    assert caught.value.status_code == 401
    assert caught.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        bad_client.models.list()


def test_unknown_model_is_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="no-such-model", messages=user("hi"))
    assert caught.value.code == "model_not_found"
    assert caught.value.param == "model"


def test_out_of_range_temperature_is_bad_request(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="svc", messages=user("hi"), temperature=3)
    error = caught.value
    assert error.status_code == 400
    assert isinstance(error.body, dict)
    assert error.body["param"] == "temperature"
    assert error.param == "temperature"
    assert error.code == "invalid_value"
    assert error.type == "invalid_request_error"
    body = error.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"top_p": 1.5}, "top_p"),
        ({"n": 0}, "n"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"presence_penalty": -2.5}, "presence_penalty"),
    ],
)
def test_other_bad_values_name_their_param(client: openai.OpenAI, extra: dict, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="svc", messages=user("hi"), **extra)
    assert caught.value.param == param


def test_context_length_exceeded(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="fake-tiny", messages=user("hi"))
    assert caught.value.code == "context_length_exceeded"


def test_mid_stream_error_raises(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="fake-fail", messages=user("a b c d"), stream=True)
    received = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")
    assert "".join(received) == "You said: "
    error = caught.value
    assert not isinstance(error, openai.APIStatusError), "the status was 200; the error came in the stream"
    assert isinstance(error.body, dict)
    assert error.body["type"] == "server_error"
    assert error.code == "internal_error"
    assert "req_" in error.message, "5xx messages quote the request id"


def test_failure_without_stream_is_server_error(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="fake-fail", messages=user("a b c d"))
    assert caught.value.status_code == 500
    assert caught.value.code == "internal_error"
