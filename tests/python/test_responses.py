"""The Responses API (`POST /v1/responses`) with the official openai SDK
against the svc fake server: whole and streamed responses, stored responses
read, continued and deleted, a function call and its output sent back as the
SDK returns them, text formats, reasoning items on `svc-thinking`, and the
SDK's error classes.

The fake models echo: `svc` replies `You said: <last user message>`,
`svc-thinking` reasons first, `fake-tools` calls the first function tool
with `{"city":"Paris"}`.
"""

from __future__ import annotations

import openai
import pytest

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather of a city",
    "strict": True,
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def test_create(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="svc",
        instructions="Be brief.",
        input="hello there",
        temperature=0.2,
        top_p=0.9,
        max_output_tokens=50,
        metadata={"suite": "conformance"},
        user="conformance",
        store=False,
    )
    assert response.id.startswith("resp_")
    assert response.object == "response"
    assert response.status == "completed"
    assert response.output_text == "You said: hello there"
    assert response.instructions == "Be brief."
    assert response.metadata == {"suite": "conformance"}
    message = response.output[0]
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "output_text"
    assert response.usage is not None
    assert response.usage.output_tokens == 4
    assert response.usage.total_tokens == response.usage.input_tokens + 4
    assert response.usage.input_tokens_details.cached_tokens == 0
    assert response.usage.output_tokens_details.reasoning_tokens == 0


def test_input_items_with_parts(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="svc",
        input=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "input_text", "text": "one "}, {"type": "input_text", "text": "two"}]},
        ],
        store=False,
    )
    assert response.output_text == "You said: one two"


def test_stream(client: openai.OpenAI) -> None:
    with client.responses.stream(model="svc", input="a b c", store=False) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "You said: a b c"
    assert final.output_text == "You said: a b c"
    assert final.status == "completed"
    assert final.usage is not None and final.usage.output_tokens == 5


def test_create_stream_true(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model="svc", input="x", stream=True, store=False))
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "You said: x"


def test_retrieve_continue_and_delete(client: openai.OpenAI) -> None:
    first = client.responses.create(model="svc", input="first")
    assert first.store is True
    again = client.responses.retrieve(first.id)
    assert again.id == first.id
    assert again.output_text == "You said: first"
    assert again.usage == first.usage

    second = client.responses.create(model="svc", input="second", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    assert second.output_text == "You said: second"
    # The earlier turn is part of the prompt: "first" (2) and the reply (4).
    assert second.usage.input_tokens == 2 + 4 + 2

    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.retrieve(first.id)
    assert caught.value.body["code"] == "not_found"
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="svc", input="third", previous_response_id=first.id)
    assert caught.value.body["param"] == "previous_response_id"


def test_store_false_is_not_kept(client: openai.OpenAI) -> None:
    response = client.responses.create(model="svc", input="x", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


def test_function_call_round_trip(client: openai.OpenAI) -> None:
    tools = [WEATHER, {"type": "web_search"}]
    response = client.responses.create(
        model="fake-tools",
        input="What is the weather in Paris?",
        tools=tools,
        tool_choice={"type": "function", "name": "get_weather"},
    )
    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather"
    assert call.arguments == '{"city":"Paris"}'
    assert call.call_id

    # The output as the SDK returns it, then the call's output.
    follow_up = client.responses.create(
        model="svc",
        tools=tools,
        input=[
            {"role": "user", "content": "What is the weather in Paris?"},
            *response.output,
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"},
        ],
    )
    assert follow_up.status == "completed"
    assert follow_up.output_text == "You said: What is the weather in Paris?"

    # The same, continuing the stored response.
    continued = client.responses.create(
        model="svc",
        previous_response_id=response.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}],
    )
    assert continued.usage.input_tokens == follow_up.usage.input_tokens


def test_function_call_streamed(client: openai.OpenAI) -> None:
    with client.responses.stream(model="fake-tools", input="w", tools=[WEATHER], store=False) as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert deltas == '{"city":"Paris"}'
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done[0].arguments == deltas and done[0].name == "get_weather"
    assert final.output[0].type == "function_call"


def test_text_formats_are_accepted_and_returned(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
        "additionalProperties": False,
    }
    response = client.responses.create(
        model="svc",
        input="x",
        store=False,
        text={"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}},
    )
    assert response.text.format.type == "json_schema"
    assert response.text.format.name == "person"
    response = client.responses.create(
        model="svc", input="x", store=False, text={"format": {"type": "json_object"}}
    )
    assert response.text.format.type == "json_object"


def test_reasoning_items_on_svc_thinking(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="svc-thinking", input="think", reasoning={"effort": "high"}, store=False
    )
    reasoning, message = response.output
    assert reasoning.type == "reasoning"
    assert reasoning.content[0].type == "reasoning_text"
    assert reasoning.content[0].text == "Thinking it over. Done thinking."
    assert message.type == "message"
    assert response.output_text == "You said: think"
    assert response.reasoning.effort == "high"

    # Sent back, the reasoning item is accepted (and left out of the prompt).
    follow_up = client.responses.create(
        model="svc",
        input=[{"role": "user", "content": "think"}, *response.output, {"role": "user", "content": "more"}],
        store=False,
    )
    assert follow_up.output_text == "You said: more"

    with client.responses.stream(model="svc-thinking", input="t", store=False) as stream:
        types = [e.type for e in stream]
    assert "response.reasoning_text.delta" in types
    assert "response.reasoning_text.done" in types


def test_errors(client: openai.OpenAI, bad_client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="svc", input="x", temperature=5)
    assert caught.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="svc",
            input=[{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}],
        )
    # The model has no vision: the image part is named.
    assert caught.value.body["param"] == "input[0].content[0]"
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="nope", input="x")
    assert caught.value.body["code"] == "model_not_found"
    with pytest.raises(openai.AuthenticationError):
        bad_client.responses.create(model="svc", input="x")
