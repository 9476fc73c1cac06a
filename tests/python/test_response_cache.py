"""The response cache (issue 34) with the official SDKs: a greedy request
asked twice of a server with `response_cache_ttl` set is answered the
second time from the cache with the same bytes, whole and streamed, in the
OpenAI and Anthropic dialects; `Cache-Control: no-cache` goes to the engine.
"""

from __future__ import annotations

import os
import time

import anthropic
import openai
import pytest

from conftest import Server, _start_server

MESSAGE = "cache me please"


@pytest.fixture(scope="module")
def cached() -> Server:
    for started in _start_server(["--response-cache-ttl", "3600"]):
        yield Server(url=started["url"], key=started["key"])


def _until_kept(ask):
    """`ask(headers)` with `only-if-cached` until the cache has the reply
    (it is written about a second after it was sent); its raw response."""
    deadline = time.monotonic() + 15
    while True:
        try:
            return ask({"Cache-Control": "only-if-cached"})
        except (openai.APIStatusError, anthropic.APIStatusError) as e:
            assert e.status_code == 504, e
            assert time.monotonic() < deadline, "never kept"
            time.sleep(0.2)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_openai_gets_the_same_bytes_from_the_cache(cached: Server, stream: bool) -> None:
    content = f"{MESSAGE} {os.urandom(6).hex()}"
    with openai.OpenAI(base_url=cached.base_url, api_key=cached.key, max_retries=0) as client:
        def ask(headers: dict[str, str]):
            with client.chat.completions.with_streaming_response.create(
                model="svc", temperature=0, stream=stream, extra_headers=headers,
                messages=[{"role": "user", "content": content}],
            ) as response:
                return response.headers.get("x-svc-cache"), response.read()

        first_cache, first = ask({})
        assert first_cache == "miss"
        again_cache, again = _until_kept(ask)
        assert again_cache == "hit"
        assert again == first
        assert content.split()[-1].encode() in first
        fresh_cache, fresh = ask({"Cache-Control": "no-cache"})
        assert fresh_cache == "miss"
        assert fresh != first, "a new reply (its own id)"


def test_anthropic_gets_the_same_message_from_the_cache(cached: Server) -> None:
    content = f"{MESSAGE} {os.urandom(6).hex()}"
    with anthropic.Anthropic(base_url=cached.url, api_key=cached.key, max_retries=0) as client:
        def ask(headers: dict[str, str]):
            return client.messages.with_raw_response.create(
                model="svc", max_tokens=50, extra_body={"temperature": 0}, extra_headers=headers,
                messages=[{"role": "user", "content": content}],
            )

        first = ask({})
        assert first.headers["x-svc-cache"] == "miss"
        again = _until_kept(ask)
        assert again.headers["x-svc-cache"] == "hit"
        assert again.parse().id == first.parse().id
        assert again.http_response.content == first.http_response.content
