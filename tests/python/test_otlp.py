"""OpenTelemetry traces (issue 33) through two svc: `front`, whose models
are served by `back` as its upstream, and `back`, whose models are the fake
server's. Both export to an OTLP/HTTP receiver started here, which decodes
what it gets with the OpenTelemetry project's own protobuf types
(`opentelemetry-proto`). A whole and a streamed chat completion, each sent
with the caller's `traceparent`, make one trace each: front's request span
under the caller's span, with authentication, the engine and the upstream
attempt under it, and back's request span under front's upstream attempt
(the `traceparent` front sent on).

On the real model, the embedded engine adds what happens inside it: the
request's wait for a slot and its prompt's prefill, and the key's lookup in
the store shows as a span of its own.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import openai
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from conftest import Server, real_model_data, svc_binary, svc_serve


class Receiver:
    """An OTLP/HTTP receiver: POST /v1/traces, protobuf."""

    def __init__(self) -> None:
        self.spans: list[tuple[dict, Span]] = []
        self.content_types: list[str] = []
        lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                with lock:
                    receiver.content_types.append(self.headers["Content-Type"])
                    for resource_spans in request.resource_spans:
                        resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                        for scope_spans in resource_spans.scope_spans:
                            for span in scope_spans.spans:
                                receiver.spans.append((resource, span))
                answer = ExportTraceServiceResponse().SerializeToString()
                status = 200 if self.path == "/v1/traces" else 404
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"

    def trace(self, trace_id: bytes, count: int, timeout: float = 15) -> list[Span]:
        """The spans of `trace_id`, once at least `count` have come."""
        deadline = time.monotonic() + timeout
        while True:
            spans = [s for _, s in self.spans if s.trace_id == trace_id]
            if len(spans) >= count or time.monotonic() > deadline:
                return spans
            time.sleep(0.1)


@dataclass
class Chain:
    front: Server
    back_url: str
    receiver: Receiver


def _start(stack: ExitStack, tmp: Path, name: str, upstream: Server, receiver: Receiver) -> Server:
    """`svc serve` named `name`, exporting to `receiver`, whose two default
    model ids are served by `upstream` (nothing is fetched or loaded); stopped
    with `stack`."""
    config = tmp / f"{name}.toml"
    config.write_text(
        "".join(
            f"[models.{id}]\n"
            f'upstreams = [{{ base_url = "{upstream.base_url}", model = "{id}", api_key_env = "UPSTREAM_KEY" }}]\n'
            for id in ("svc", "svc-thinking")
        )
    )
    data = tmp / name
    env = {**os.environ, "SVC_LOG": "warn", "UPSTREAM_KEY": upstream.key}
    created = subprocess.run(
        [str(svc_binary()), "keys", "create", "--name", "otlp", "--data-dir", str(data)],
        capture_output=True, text=True, check=True, env=env,
    )
    serving = svc_serve(
        ["--config", str(config), "--data-dir", str(data), "--bind", "127.0.0.1:0", "--otlp-endpoint", receiver.url],
        env, timeout=60,
    )
    url = next(serving)
    stack.callback(serving.close)
    return Server(url=url, key=created.stdout.strip())


@pytest.fixture(scope="module")
def chain(server: Server):
    receiver = Receiver()
    with tempfile.TemporaryDirectory(prefix="svc-otlp-") as tmp, ExitStack() as stack:
        back = _start(stack, Path(tmp), "back", server, receiver)
        front = _start(stack, Path(tmp), "front", back, receiver)
        yield Chain(front=front, back_url=back.url, receiver=receiver)
    receiver.http.shutdown()


def _attributes(span: Span) -> dict:
    out = {}
    for a in span.attributes:
        kind = a.value.WhichOneof("value")
        out[a.key] = getattr(a.value, kind)
    return out


def _one(spans: list[Span], **where) -> Span:
    found = [s for s in spans if all(getattr(s, k) == v for k, v in where.items())]
    assert len(found) == 1, f"{where}: {len(found)} of {[s.name for s in spans]}"
    return found[0]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_request_through_two_svc_is_one_trace(chain: Chain, stream: bool) -> None:
    trace_id, caller_span = os.urandom(16), os.urandom(8)
    traceparent = f"00-{trace_id.hex()}-{caller_span.hex()}-01"
    with openai.OpenAI(base_url=chain.front.base_url, api_key=chain.front.key, max_retries=0) as client:
        messages = [{"role": "user", "content": "hello there"}]
        extra = {"extra_headers": {"traceparent": traceparent}}
        if stream:
            chunks = client.chat.completions.create(model="svc", messages=messages, stream=True, **extra)
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            reply = client.chat.completions.create(model="svc", messages=messages, **extra)
            assert reply.choices[0].message.content

    # front: request, authenticate, upstream attempt, engine (2); back: the
    # same again.
    spans = chain.receiver.trace(trace_id, 10)
    time.sleep(1.5)  # The store's spans, if any, may come in the next export.
    spans = chain.receiver.trace(trace_id, 10)
    assert all(ct == "application/x-protobuf" for ct in chain.receiver.content_types)
    front = _one(spans, parent_span_id=caller_span)
    assert front.name == "POST /v1/chat/completions"
    assert front.kind == Span.SPAN_KIND_SERVER
    assert front.status.code == Status.STATUS_CODE_OK
    assert front.end_time_unix_nano > front.start_time_unix_nano
    attributes = _attributes(front)
    assert attributes["http.response.status_code"] == 200
    assert attributes["gen_ai.request.model"] == "svc"
    assert attributes["svc.key_id"].startswith("key_")
    assert attributes["svc.upstream"] == f"{chain.back_url}/v1"
    assert attributes["gen_ai.usage.output_tokens"] > 0
    assert attributes["svc.request_id"].startswith("req_")
    if stream:
        assert attributes["svc.time_to_first_token_ms"] >= 0
    text = str(spans)
    assert chain.front.key not in text, "no key in a span"

    under_front = [s for s in spans if s.parent_span_id == front.span_id]
    # The store's spans (the key looked up, its use noted) come only when
    # its cached record is old.
    names = sorted(s.name for s in under_front if not s.name.startswith("store: "))
    assert names == ["authenticate", "engine: decode", "engine: until the first token", "upstream attempt"], names
    attempt = _one(under_front, name="upstream attempt")
    assert attempt.kind == Span.SPAN_KIND_CLIENT
    assert _attributes(attempt)["url.full"] == f"{chain.back_url}/v1"

    # back continued the trace under front's attempt: front sent it on.
    back = _one(spans, parent_span_id=attempt.span_id)
    assert back.name == "POST /v1/chat/completions"
    assert back.kind == Span.SPAN_KIND_SERVER
    under_back = sorted(s.name for s in spans if s.parent_span_id == back.span_id)
    assert "upstream attempt" in under_back and "authenticate" in under_back, under_back
    for resource, span in chain.receiver.spans:
        if span.trace_id == trace_id:
            assert resource["service.name"] == "svc"


def test_a_request_without_traceparent_begins_a_trace(chain: Chain) -> None:
    before = len(chain.receiver.spans)
    with openai.OpenAI(base_url=chain.front.base_url, api_key=chain.front.key, max_retries=0) as client:
        request_id = client.models.with_raw_response.list().headers["x-request-id"]
    # Found by its request id: front's health checks of back (GET /models
    # every 5 s, no caller's trace) begin traces of their own at back.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        roots = [
            s for _, s in chain.receiver.spans[before:]
            if s.name == "GET /v1/models" and _attributes(s).get("svc.request_id") == request_id
        ]
        if roots:
            break
        time.sleep(0.1)
    assert len(roots) == 1
    assert roots[0].parent_span_id == b""
    assert roots[0].trace_id != bytes(16)


def test_the_embedded_engine_shows_its_queue_and_prefill() -> None:
    receiver = Receiver()
    with tempfile.TemporaryDirectory(prefix="svc-otlp-real-") as data:
        key = real_model_data(Path(data))
        env = {**os.environ, "SVC_LOG": "warn"}
        args = ["--bind", "127.0.0.1:0", "--data-dir", data, "--parallel", "1", "--context", "2048",
                "--otlp-endpoint", receiver.url]
        for url in svc_serve(args, env, 120):
            trace_id, caller_span = os.urandom(16), os.urandom(8)
            traceparent = f"00-{trace_id.hex()}-{caller_span.hex()}-01"
            with openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120) as client:
                reply = client.chat.completions.create(
                    model="svc", messages=[{"role": "user", "content": "What is the capital of France?"}],
                    temperature=0, max_tokens=8, extra_headers={"traceparent": traceparent},
                )
            assert reply.choices[0].message.content
            wanted = {"authenticate", "store: find the key", "engine: until the first token",
                      "engine: queue", "engine: prefill", "engine: decode"}
            deadline = time.monotonic() + 15
            while True:
                spans = receiver.trace(trace_id, 1)
                request = [s for s in spans if s.parent_span_id == caller_span]
                under = {s.name: s for s in spans if request and s.parent_span_id == request[0].span_id}
                if wanted <= set(under) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
    receiver.http.shutdown()
    assert wanted <= set(under), sorted(under)
    queue, prefill = under["engine: queue"], under["engine: prefill"]
    until_first = under["engine: until the first token"]
    # Inside the time to the first token: the wait, then the prefill.
    assert until_first.start_time_unix_nano <= queue.start_time_unix_nano
    assert queue.end_time_unix_nano <= prefill.start_time_unix_nano <= prefill.end_time_unix_nano
    assert prefill.end_time_unix_nano <= until_first.end_time_unix_nano
    attributes = _attributes(prefill)
    assert attributes["gen_ai.usage.input_tokens"] == reply.usage.prompt_tokens
    assert attributes["gen_ai.usage.cached_input_tokens"] >= 0
