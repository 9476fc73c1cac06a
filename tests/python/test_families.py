"""Model families beyond Hermes' syntax, end to end: `svc serve` on a tiny
GGUF of gpt-oss's family (its harmony template and control tokens, written
by the engine's `tiny-gguf` example, which run.sh builds), asked by the
official `openai` SDK with tools, whole and streamed, and by an agent of
the `openai-agents` SDK that runs the tool. The tiny model
reasons in harmony's analysis channel, then calls `get_weather` for Paris
on the commentary channel; svc must hand the SDK a reasoning text and a
tool call, never the channel markup.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import openai
import pytest

from conftest import ROOT, Server, svc_binary, svc_serve

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
MARKUP = ("<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|constrain|>")


def tiny_gguf_binary() -> Path:
    explicit = os.environ.get("SVC_TINY_GGUF")
    if explicit:
        return Path(explicit)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    if not target.is_absolute():
        target = ROOT / target
    return target / "debug" / "examples" / "tiny-gguf"


@pytest.fixture(scope="module")
def harmony_server():
    tool = tiny_gguf_binary()
    assert tool.is_file(), f"{tool} does not exist: cargo build -p svc-engine-llama --example tiny-gguf"
    with tempfile.TemporaryDirectory(prefix="svc-family-") as data:
        model = Path(data) / "gpt-oss-tiny.gguf"
        subprocess.run([str(tool), str(model), "harmony"], check=True)
        key = subprocess.run(
            [str(svc_binary()), "keys", "create", "--name", "family", "--data-dir", data],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        env = {**os.environ, "SVC_LOG": "warn"}
        args = ["--bind", "127.0.0.1:0", "--data-dir", data, "--model", str(model), "--parallel", "2", "--context", "2048"]
        for url in svc_serve(args, env):
            yield Server(url=url, key=key)


@pytest.fixture(scope="module")
def harmony_openai(harmony_server: Server) -> openai.OpenAI:
    with openai.OpenAI(base_url=harmony_server.base_url, api_key=harmony_server.key, max_retries=0, timeout=120) as c:
        yield c


def test_a_harmony_call_reaches_the_sdk_whole(harmony_openai: openai.OpenAI) -> None:
    reply = harmony_openai.chat.completions.create(
        model="svc-thinking", messages=QUESTION, tools=TOOLS, temperature=0, reasoning_effort="high"
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    # The analysis channel, as the reasoning (a field the SDK keeps as extra).
    assert choice.message.model_extra.get("reasoning_content") == "Need the weather."


def test_a_harmony_call_streams_to_the_sdk(harmony_openai: openai.OpenAI) -> None:
    stream = harmony_openai.chat.completions.create(
        model="svc", messages=QUESTION, tools=TOOLS, temperature=0, stream=True
    )
    name, arguments, pieces, text, finish = None, "", 0, "", None
    for chunk in stream:
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for call in delta.tool_calls or []:
            assert call.index == 0
            name = name or call.function.name
            if call.function.arguments:
                arguments += call.function.arguments
                pieces += 1
        finish = chunk.choices[0].finish_reason or finish
    assert name == "get_weather"
    assert json.loads(arguments) == {"city": "Paris"}
    # Its arguments arrive as they decode, not in one piece at the end.
    assert pieces >= 2
    assert finish == "tool_calls"
    assert text == "" and not any(m in text for m in MARKUP)


def test_the_tool_result_goes_back_in_the_familys_template(harmony_openai: openai.OpenAI) -> None:
    """A second turn with the call and its result renders through the
    model's harmony template; the tiny model then calls again (its script),
    which is all it can do: the point is that the history is accepted."""
    first = harmony_openai.chat.completions.create(model="svc", messages=QUESTION, tools=TOOLS, temperature=0)
    call = first.choices[0].message.tool_calls[0]
    messages = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "18°C and sunny"},
    ]
    again = harmony_openai.chat.completions.create(model="svc", messages=messages, tools=TOOLS, temperature=0)
    assert again.choices[0].finish_reason == "tool_calls"
    assert again.usage.prompt_tokens > first.usage.prompt_tokens


def test_an_openai_agents_agent_runs_the_tool_a_harmony_model_calls(harmony_server: Server) -> None:
    """The `openai-agents` SDK (its chat-completions model) sees the call,
    runs the function with the model's arguments and sends the result back;
    the tiny model then calls again (its script), so the run ends at its
    turn limit, after the tool ran."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from agents.exceptions import MaxTurnsExceeded

    set_tracing_disabled(True)
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return "18°C and sunny"

    client = openai.AsyncOpenAI(base_url=harmony_server.base_url, api_key=harmony_server.key, max_retries=0)
    agent = Agent(
        name="weather",
        instructions="Answer with the weather.",
        model=OpenAIChatCompletionsModel(model="svc", openai_client=client),
        tools=[get_weather],
    )
    with pytest.raises(MaxTurnsExceeded):
        Runner.run_sync(agent, "What is the weather in Paris?", max_turns=2)
    # Each of its two turns called the tool, with the model's arguments.
    assert asked == ["Paris", "Paris"]
