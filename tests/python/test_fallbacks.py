"""Fallbacks across models (issue 34) through `svc serve` and real
upstream engines, with the official SDKs: `primary` is served by an
endpoint that refuses connections and falls back to `svc` (the fake
server, as an upstream), which answers in every dialect, whole and
streamed, and the reply says so. A loop of fallbacks is refused at start.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
from pathlib import Path

import anthropic
import openai
import pytest

from conftest import Server, svc_binary, svc_serve


def _closed_port() -> int:
    """A port nothing listens on (bound a moment ago, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(upstream: Server, extra: str) -> str:
    served = "".join(
        f"[models.{id}]\n"
        f'upstreams = [{{ base_url = "{upstream.base_url}", model = "{id}", api_key_env = "UPSTREAM_KEY" }}]\n'
        for id in ("svc", "svc-thinking")
    )
    return served + extra


@pytest.fixture(scope="module")
def front(server: Server):
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    extra = (
        "[models.primary]\n"
        f'upstreams = [{{ base_url = "{dead}", model = "primary" }}]\n'
        'fallbacks = ["svc"]\n'
    )
    with tempfile.TemporaryDirectory(prefix="svc-fallbacks-") as tmp:
        config = Path(tmp) / "svc.toml"
        config.write_text(_config(server, extra))
        data = Path(tmp) / "data"
        env = {**os.environ, "SVC_LOG": "error", "UPSTREAM_KEY": server.key}
        created = subprocess.run(
            [str(svc_binary()), "keys", "create", "--name", "fallbacks", "--data-dir", str(data)],
            capture_output=True, text=True, check=True, env=env,
        )
        args = ["--config", str(config), "--data-dir", str(data), "--bind", "127.0.0.1:0"]
        for url in svc_serve(args, env, timeout=60):
            yield Server(url=url, key=created.stdout.strip())


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_chat_falls_back_before_the_first_byte(front: Server, stream: bool) -> None:
    with openai.OpenAI(base_url=front.base_url, api_key=front.key, max_retries=0) as client:
        messages = [{"role": "user", "content": "hello there"}]
        raw = client.chat.completions.with_raw_response.create(model="primary", messages=messages, stream=stream)
        assert raw.headers["x-svc-served-model"] == "svc"
        if stream:
            chunks = list(raw.parse())
            assert {c.model for c in chunks} == {"svc"}
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            reply = raw.parse()
            assert reply.model == "svc"
            text = reply.choices[0].message.content
        assert "hello there" in text


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_responses_fall_back_before_the_first_byte(front: Server, stream: bool) -> None:
    with openai.OpenAI(base_url=front.base_url, api_key=front.key, max_retries=0) as client:
        if stream:
            with client.responses.stream(model="primary", input="hello there", store=False) as events:
                final = events.get_final_response()
        else:
            final = client.responses.create(model="primary", input="hello there", store=False)
        assert final.model == "svc"
        assert "hello there" in final.output_text


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_messages_fall_back_before_the_first_byte(front: Server, stream: bool) -> None:
    with anthropic.Anthropic(base_url=front.url, api_key=front.key, max_retries=0) as client:
        messages = [{"role": "user", "content": "hello there"}]
        if stream:
            with client.messages.stream(model="primary", max_tokens=50, messages=messages) as events:
                message = events.get_final_message()
        else:
            message = client.messages.create(model="primary", max_tokens=50, messages=messages)
        assert message.model == "svc"
        assert "hello there" in message.content[0].text


def test_a_loop_of_fallbacks_is_refused_at_start(server: Server) -> None:
    extra = (
        f'[models.a]\nupstreams = [{{ base_url = "{server.base_url}", model = "a" }}]\nfallbacks = ["b"]\n'
        f'[models.b]\nupstreams = [{{ base_url = "{server.base_url}", model = "b" }}]\nfallbacks = ["a"]\n'
    )
    with tempfile.TemporaryDirectory(prefix="svc-fallbacks-") as tmp:
        config = Path(tmp) / "svc.toml"
        config.write_text(_config(server, extra))
        env = {**os.environ, "SVC_LOG": "error", "UPSTREAM_KEY": server.key}
        started = subprocess.run(
            [str(svc_binary()), "serve", "--config", str(config), "--data-dir", str(Path(tmp) / "data"),
             "--bind", "127.0.0.1:0"],
            capture_output=True, text=True, env=env, timeout=60,
        )
    assert started.returncode != 0
    assert "models.a.fallbacks: a loop: a → b → a" in started.stderr, started.stderr
