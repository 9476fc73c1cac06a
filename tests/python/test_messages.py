"""The official `anthropic` SDK, unchanged but for base_url and api_key,
against svc's Anthropic Messages API on the fake models (see
crates/svc-test-support/src/fake_engine.rs):

- `svc`: replies "You said: <last user message>", word by word;
- `svc-thinking`: the same, after some reasoning (thinking blocks);
- `fake-tools`: calls the first tool with {"city":"Paris"};
- `fake-tiny`: refuses every prompt as longer than its context.
"""

from __future__ import annotations

import anthropic
import pytest

from conftest import Server

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture(scope="module")
def claude(server: Server) -> anthropic.Anthropic:
    """The SDK on svc: base_url without /v1 (the SDK adds it), retries off."""
    with anthropic.Anthropic(base_url=server.url, api_key=server.key, max_retries=0, timeout=30) as c:
        yield c


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_messages_create(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(model="svc", max_tokens=64, messages=user("hello there"))
    assert message.id.startswith("msg_")
    assert message.type == "message"
    assert message.role == "assistant"
    assert message.model == "svc"
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "You said: hello there"
    assert message.stop_reason == "end_turn"
    assert message.stop_sequence is None
    assert message.usage.input_tokens > 0
    assert message.usage.output_tokens == 4


def test_messages_create_with_a_system_prompt_and_sampling(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="svc",
        max_tokens=64,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        metadata={"user_id": "tester"},
        # The SDK no longer has these parameters; the API still takes them.
        extra_body={"temperature": 0.2, "top_p": 0.9, "top_k": 40},
        messages=user("hi"),
    )
    assert message.content[0].text == "You said: hi"


def test_messages_stream(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(model="svc", max_tokens=64, messages=user("stream me please")) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(texts) >= 2, texts
    assert "".join(texts) == "You said: stream me please"
    assert final.content[0].text == "You said: stream me please"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 5
    assert final.usage.input_tokens > 0


def test_raw_stream_events_are_in_anthropics_order(claude: anthropic.Anthropic) -> None:
    events = list(claude.messages.create(model="svc", max_tokens=64, messages=user("hi"), stream=True))
    kinds = [e.type for e in events]
    # The SDK reads `ping` and does not pass it on (the Rust tests see it).
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert events[-2].delta.stop_reason == "end_turn"


def test_thinking_blocks_on_svc_thinking(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="svc-thinking",
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=user("think"),
    )
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking
    assert message.content[0].signature
    with claude.messages.stream(
        model="svc-thinking",
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=user("think"),
    ) as stream:
        final = stream.get_final_message()
    assert final.content[0].thinking == message.content[0].thinking


def test_forced_tool_use_and_its_result(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="fake-tools",
        max_tokens=64,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=user("What is the weather in Paris?"),
    )
    assert message.stop_reason == "tool_use"
    call = message.content[0]
    assert call.type == "tool_use"
    assert call.id.startswith("toolu_")
    assert call.name == "get_weather"
    assert call.input == {"city": "Paris"}

    with claude.messages.stream(
        model="fake-tools",
        max_tokens=64,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "any"},
        messages=user("What is the weather in Paris?"),
    ) as stream:
        streamed = stream.get_final_message()
    assert streamed.content[0].input == {"city": "Paris"}

    answer = claude.messages.create(
        model="svc",
        max_tokens=64,
        tools=[WEATHER_TOOL],
        messages=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": message.content},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 C"},
                    {"type": "text", "text": "Thanks"},
                ],
            },
        ],
    )
    assert answer.content[0].text == "You said: Thanks"


def test_stop_sequences(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="svc", max_tokens=64, stop_sequences=["END"], messages=user("one END two")
    )
    assert message.stop_reason == "stop_sequence"
    assert message.stop_sequence == "END"
    assert message.content[0].text == "You said: one "


def test_count_tokens(claude: anthropic.Anthropic) -> None:
    short = claude.messages.count_tokens(model="svc", messages=user("hi"))
    longer = claude.messages.count_tokens(
        model="svc", system="Be brief.", tools=[WEATHER_TOOL], messages=user("hi " * 40)
    )
    assert short.input_tokens > 0
    assert longer.input_tokens > short.input_tokens


def test_a_wrong_key_is_an_authentication_error(server: Server) -> None:
    bad = anthropic.Anthropic(base_url=server.url, api_key="sk-svc-" + "0" * 40, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        bad.messages.create(model="svc", max_tokens=16, messages=user("hi"))
    assert caught.value.status_code == 401
    assert caught.value.body["error"]["type"] == "authentication_error"


def test_a_bearer_token_works_too(server: Server) -> None:
    with anthropic.Anthropic(base_url=server.url, auth_token=server.key, max_retries=0) as c:
        message = c.messages.create(model="svc", max_tokens=16, messages=user("hi"))
    assert message.content[0].text == "You said: hi"


def test_an_unknown_model_is_not_found(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as caught:
        claude.messages.create(model="claude-opus-4-1", max_tokens=16, messages=user("hi"))
    assert caught.value.body["error"]["type"] == "not_found_error"
    assert "claude-opus-4-1" in caught.value.message


def test_bad_requests_are_bad_request_errors(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(
            model="svc", max_tokens=16, messages=user("hi"), extra_body={"temperature": 1.5}
        )
    assert "temperature" in caught.value.message
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(
            model="svc", max_tokens=16, messages=[{"role": "user", "content": [image]}]
        )
    # The model has no vision: the image block is named.
    assert "messages[0].content[0]" in caught.value.message
    assert "images" in caught.value.message
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model="fake-tiny", max_tokens=16, messages=user("hi"))
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert "context length" in caught.value.message
