"""MCP through svc, against the official MCP Python SDK's own server
(`MCPServer`, tools `add` and `shout`, answering as event streams),
registered in `svc serve`'s configuration as `[mcp.servers.py]`:

- svc's own MCP server (`/mcp`): the SDK's `Client` lists and calls the
  registered server's tools through svc with a key, at the 2025-11-25
  handshake and at 2026-07-28 (the SDK's default probe);
- `mcp` tools in the Responses API, through the official `openai` SDK: the
  model (`agent`, the scripted agent behind an upstream, so the loop runs
  on the upstream engine) asks for approval, an approved call runs and the
  model answers with its result, a denied one never runs, `allowed_tools`
  hides the others, and streamed the MCP events arrive in order;
- `mcp` tools in Chat Completions (svc's extension): the reply uses the
  tool's result and lists the calls in `mcp_calls`, whole and streamed.
- `mcp_servers` in the Messages API, through the official `anthropic` SDK
  (beta `mcp-client-2025-11-20`): the server named by its URL or its name,
  an `mcp_toolset` offering only `shout`, the reply's `mcp_tool_use` and
  `mcp_tool_result` blocks and the model's answer using the result, whole
  and streamed (the SDK's own accumulator reading the stream).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anthropic
import openai
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import Server, svc_binary, svc_serve

UPSTREAM = """
import sys
from mcp.server.mcpserver import MCPServer

app = MCPServer("py")


@app.tool()
def add(a: int, b: int) -> int:
    \"\"\"Add two numbers.\"\"\"
    return a + b


@app.tool()
def shout(text: str) -> str:
    \"\"\"Says the text back in capitals.\"\"\"
    return text.upper()


app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def upstream():
    """The SDK's own server, on loopback: its URL."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-c", UPSTREAM, str(port)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stderr.read().decode(errors="replace")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the SDK's server did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def gateway(server: Server, upstream: str):
    """`svc serve` with the SDK's server registered as `py` (its header's
    value from the environment) and its model through the fake server."""
    config = (
        "[models.svc]\n"
        f'upstreams = [{{ base_url = "{server.base_url}", model = "svc", api_key_env = "UPSTREAM_KEY" }}]\n'
        "[models.agent]\n"
        f'upstreams = [{{ base_url = "{server.base_url}", model = "fake-agent", api_key_env = "UPSTREAM_KEY" }}]\n'
        "[mcp.servers.py]\n"
        f'url = "{upstream}"\n'
        'headers = { authorization = { env = "PY_MCP_TOKEN" } }\n'
        'description = "The SDK\'s server"\n'
    )
    with tempfile.TemporaryDirectory(prefix="svc-mcp-") as tmp:
        path = Path(tmp) / "svc.toml"
        path.write_text(config)
        data = Path(tmp) / "data"
        env = {**os.environ, "SVC_LOG": "error", "UPSTREAM_KEY": server.key, "PY_MCP_TOKEN": "Bearer py-secret"}
        created = subprocess.run(
            [str(svc_binary()), "keys", "create", "--name", "mcp", "--data-dir", str(data)],
            capture_output=True, text=True, check=True, env=env,
        )
        args = ["--config", str(path), "--data-dir", str(data), "--bind", "127.0.0.1:0"]
        for url in svc_serve(args, env, timeout=60):
            yield Server(url=url, key=created.stdout.strip())


async def _list_and_call(gateway: Server, mode: str) -> tuple[list[str], object]:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {gateway.key}"})
    transport = streamable_http_client(f"{gateway.url}/mcp", http_client=http)
    async with http, Client(transport, mode=mode) as client:
        tools = await client.list_tools()
        result = await client.call_tool("py__add", {"a": 2, "b": 3})
        return [t.name for t in tools.tools], result


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_sdks_client_lists_and_calls_the_registered_servers_tool(gateway: Server, mode: str) -> None:
    names, result = asyncio.run(_list_and_call(gateway, mode))
    assert names == ["py__add", "py__shout"]
    assert not result.is_error, result
    assert result.content[0].text == "5"
    assert result.structured_content == {"result": 5}


def test_a_tool_the_server_lacks_is_its_own_error_and_another_label_svcs(gateway: Server) -> None:
    async def call(name: str) -> object:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {gateway.key}"})
        transport = streamable_http_client(f"{gateway.url}/mcp", http_client=http)
        async with http, Client(transport, mode="legacy") as client:
            try:
                return await client.call_tool(name, {"a": 2, "b": 3})
            except MCPError as error:
                return error

    # `py` allows every tool: the call is the server's, and so is its error.
    lacking = asyncio.run(call("py__subtract"))
    assert lacking.is_error, lacking
    assert "subtract" in lacking.content[0].text
    # No server is labelled `other`: svc's JSON-RPC error, as the SDK raises it.
    unknown = asyncio.run(call("other__add"))
    assert isinstance(unknown, MCPError), unknown
    assert unknown.code == -32602
    assert str(unknown) == "Unknown tool: other__add"


@pytest.fixture
def sdk(gateway: Server) -> openai.OpenAI:
    with openai.OpenAI(base_url=gateway.base_url, api_key=gateway.key, max_retries=0, timeout=60) as c:
        yield c


def _tools(approval: str) -> list[dict]:
    return [{"type": "mcp", "server_label": "py", "require_approval": approval, "allowed_tools": ["shout"]}]


def test_responses_ask_for_approval_and_an_approved_call_runs(sdk: openai.OpenAI) -> None:
    asked = sdk.responses.create(model="agent", input="hello there", tools=_tools("always"))
    assert [o.type for o in asked.output] == ["mcp_list_tools", "mcp_approval_request"]
    listed, request = asked.output
    assert [t.name for t in listed.tools] == ["shout"], "allowed_tools hides `add`"
    assert request.server_label == "py" and request.name == "shout"
    assert request.arguments == '{"text":"hello there"}'

    answered = sdk.responses.create(
        model="agent",
        previous_response_id=asked.id,
        input=[{"type": "mcp_approval_response", "approve": True, "approval_request_id": request.id}],
        tools=_tools("always"),
    )
    assert [o.type for o in answered.output] == ["mcp_call", "message"]
    call = answered.output[0]
    assert call.approval_request_id == request.id
    assert call.output == "HELLO THERE" and call.error is None
    assert answered.output_text == "The tool said: HELLO THERE"


def test_responses_a_denied_call_never_runs(sdk: openai.OpenAI) -> None:
    asked = sdk.responses.create(model="agent", input="quiet please", tools=_tools("always"))
    request = asked.output[-1]
    denied = sdk.responses.create(
        model="agent",
        previous_response_id=asked.id,
        input=[{"type": "mcp_approval_response", "approve": False, "approval_request_id": request.id}],
        tools=_tools("always"),
    )
    assert "mcp_call" not in [o.type for o in denied.output]
    assert "QUIET PLEASE" not in denied.model_dump_json()


def test_responses_stream_the_mcp_events_in_order(sdk: openai.OpenAI) -> None:
    stream = sdk.responses.create(model="agent", input="loud", tools=_tools("never"), stream=True)
    events = list(stream)
    types = [e.type for e in events]
    mcp = [t for t in types if "mcp" in t]
    assert mcp == [
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_call.in_progress",
        *["response.mcp_call_arguments.delta"] * types.count("response.mcp_call_arguments.delta"),
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
    ]
    assert types[-1] == "response.completed"
    final = events[-1].response
    assert [o.type for o in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert final.output[1].output == "LOUD"
    assert final.output_text == "The tool said: LOUD"


def test_chat_completions_run_mcp_tools_and_list_the_calls(sdk: openai.OpenAI) -> None:
    tools = [{"type": "mcp", "server_label": "py", "allowed_tools": ["shout"]}]
    completion = sdk.chat.completions.create(
        model="agent", messages=[{"role": "user", "content": "chat"}], tools=tools
    )
    assert completion.choices[0].message.content == "The tool said: CHAT"
    calls = completion.model_extra["mcp_calls"]
    assert [(c["server_label"], c["name"], c["output"]) for c in calls] == [("py", "shout", "CHAT")]

    stream = sdk.chat.completions.create(
        model="agent", messages=[{"role": "user", "content": "stream"}], tools=tools, stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "The tool said: STREAM"
    assert chunks[-1].model_extra["mcp_calls"][0]["output"] == "STREAM"


@pytest.fixture
def claude(gateway: Server) -> anthropic.Anthropic:
    with anthropic.Anthropic(base_url=gateway.url, api_key=gateway.key, max_retries=0, timeout=30) as c:
        yield c


def _toolset() -> list[dict]:
    """`py`'s tools, `shout` alone enabled."""
    return [{"type": "mcp_toolset", "mcp_server_name": "py",
             "default_config": {"enabled": False}, "configs": {"shout": {"enabled": True}}}]


def test_messages_mcp_servers_run_the_registered_servers_tool(claude: anthropic.Anthropic, upstream: str) -> None:
    # Named by its URL: the registered server, with the operator's header.
    message = claude.beta.messages.create(
        model="agent", max_tokens=256,
        messages=[{"role": "user", "content": "hello there"}],
        mcp_servers=[{"type": "url", "url": upstream, "name": "py"}],
        tools=_toolset(), betas=["mcp-client-2025-11-20"],
    )
    assert [b.type for b in message.content] == ["mcp_tool_use", "mcp_tool_result", "text"]
    use, result, text = message.content
    assert use.id.startswith("mcptoolu_")
    assert (use.name, use.server_name, use.input) == ("shout", "py", {"text": "hello there"})
    assert result.tool_use_id == use.id and result.is_error is False
    assert [c.text for c in result.content] == ["HELLO THERE"]
    assert text.text == "The tool said: HELLO THERE"
    assert message.stop_reason == "end_turn"
    assert "py-secret" not in message.model_dump_json()


def test_messages_mcp_servers_stream_as_anthropic_streams_them(claude: anthropic.Anthropic) -> None:
    # Named by its name (its label in svc's configuration).
    with claude.beta.messages.stream(
        model="agent", max_tokens=256,
        messages=[{"role": "user", "content": "loud"}],
        mcp_servers=[{"type": "url", "url": "py", "name": "py"}],
        tools=_toolset(), betas=["mcp-client-2025-11-20"],
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    started = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert started == ["mcp_tool_use", "mcp_tool_result", "text"]
    assert events[-1].type == "message_stop"
    # The SDK's accumulator built the blocks from the stream.
    assert [b.type for b in final.content] == ["mcp_tool_use", "mcp_tool_result", "text"]
    assert final.content[0].input == {"text": "loud"}
    assert final.content[1].content[0].text == "LOUD"
    assert final.content[2].text == "The tool said: LOUD"


def test_messages_an_unregistered_loopback_url_is_refused(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.beta.messages.create(
            model="agent", max_tokens=64,
            messages=[{"role": "user", "content": "hi"}],
            mcp_servers=[{"type": "url", "url": "http://127.0.0.1:9/mcp", "name": "elsewhere"}],
            tools=[{"type": "mcp_toolset", "mcp_server_name": "elsewhere"}],
            betas=["mcp-client-2025-11-20"],
        )
    assert refused.value.body["error"]["message"].startswith("mcp_servers[0].url: ")
