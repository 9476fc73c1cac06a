"""The Batch API (issue 34) with the official openai SDK: `files.create`,
`batches.create`, polling `batches.retrieve`, `files.content` of the output,
for chat completions and embeddings, on the fake server and through `svc
serve` routing to an upstream; `batches.cancel`; a malformed JSONL refused
naming its line. (The real model's batch is in test_real_model.py.)
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import openai
import pytest

from conftest import Server, svc_binary, svc_serve


def _jsonl(lines: list[dict]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def _chat_lines(n: int, model: str = "svc") -> list[dict]:
    return [
        {"custom_id": f"chat-{i}", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": model, "messages": [{"role": "user", "content": f"item {i}"}]}}
        for i in range(n)
    ]


def _run(client: openai.OpenAI, lines: list[dict], endpoint: str, timeout: float = 60):
    """Uploads `lines`, runs them as a batch to its end; the batch and its
    output lines by custom_id."""
    uploaded = client.files.create(file=("input.jsonl", io.BytesIO(_jsonl(lines))), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes == len(_jsonl(lines))
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint=endpoint, completion_window="24h",
        metadata={"suite": "python"},
    )
    assert batch.status in ("validating", "in_progress")
    assert batch.request_counts.total == len(lines)
    deadline = time.monotonic() + timeout
    while batch.status not in ("completed", "failed", "expired", "cancelled"):
        assert time.monotonic() < deadline, f"the batch never ended: {batch}"
        time.sleep(0.2)
        batch = client.batches.retrieve(batch.id)
    assert batch.status == "completed", batch
    assert batch.metadata == {"suite": "python"}
    output = client.files.content(batch.output_file_id).text
    answers = {}
    for line in output.splitlines():
        answer = json.loads(line)
        assert answer["custom_id"] not in answers, "each line once"
        answers[answer["custom_id"]] = answer
    return batch, answers


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=server.key, max_retries=0)


def test_a_chat_batch_answers_every_line(client: openai.OpenAI) -> None:
    batch, answers = _run(client, _chat_lines(12), "/v1/chat/completions")
    assert batch.request_counts.completed == 12 and batch.request_counts.failed == 0
    assert batch.error_file_id is None
    for i in range(12):
        body = answers[f"chat-{i}"]["response"]["body"]
        assert answers[f"chat-{i}"]["response"]["status_code"] == 200
        assert body["choices"][0]["message"]["content"] == f"You said: item {i}"
    assert batch.id in [b.id for b in client.batches.list(limit=100)]
    assert client.files.retrieve(batch.output_file_id).purpose == "batch_output"


def test_an_embeddings_batch_returns_one_vector_a_line(client: openai.OpenAI) -> None:
    lines = [
        {"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings",
         "body": {"model": "fake-embed", "input": f"text {i}"}}
        for i in range(4)
    ]
    batch, answers = _run(client, lines, "/v1/embeddings")
    assert batch.request_counts.completed == 4
    for answer in answers.values():
        assert len(answer["response"]["body"]["data"][0]["embedding"]) > 0


def test_a_malformed_jsonl_is_refused_naming_its_line(client: openai.OpenAI) -> None:
    text = _jsonl(_chat_lines(2)) + b'{"custom_id": "x", "method": "POST"\n'
    with pytest.raises(openai.BadRequestError) as refused:
        client.files.create(file=("bad.jsonl", io.BytesIO(text)), purpose="batch")
    error = refused.value.body
    assert error["param"] == "file"
    assert error["message"].startswith("line 3:"), error


def test_a_batch_is_cancelled_with_its_lines_accounted_for(client: openai.OpenAI) -> None:
    lines = _chat_lines(30, model="fake-slow")
    uploaded = client.files.create(file=("slow.jsonl", io.BytesIO(_jsonl(lines))), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    time.sleep(0.3)
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status == "cancelling"
    deadline = time.monotonic() + 30
    while batch.status != "cancelled":
        assert time.monotonic() < deadline, batch
        time.sleep(0.2)
        batch = client.batches.retrieve(batch.id)
    done = batch.request_counts.completed
    assert done < 30
    errors = client.files.content(batch.error_file_id).text.splitlines()
    assert len(errors) == 30 - done
    assert all(json.loads(e)["error"]["code"] == "batch_cancelled" for e in errors)


@pytest.fixture(scope="module")
def routed(server: Server):
    """`svc serve` with `svc` and `fake-embed` served by the fake server as
    an upstream."""
    config = "".join(
        f"[models.{id}]\n"
        f'upstreams = [{{ base_url = "{server.base_url}", model = "{id}", api_key_env = "UPSTREAM_KEY" }}]\n'
        for id in ("svc", "svc-thinking", "fake-embed")
    )
    with tempfile.TemporaryDirectory(prefix="svc-batches-") as tmp:
        path = Path(tmp) / "svc.toml"
        path.write_text(config)
        data = Path(tmp) / "data"
        env = {**os.environ, "SVC_LOG": "error", "UPSTREAM_KEY": server.key}
        created = subprocess.run(
            [str(svc_binary()), "keys", "create", "--name", "batches", "--data-dir", str(data)],
            capture_output=True, text=True, check=True, env=env,
        )
        args = ["--config", str(path), "--data-dir", str(data), "--bind", "127.0.0.1:0"]
        for url in svc_serve(args, env, timeout=60):
            yield Server(url=url, key=created.stdout.strip()), data


def test_a_batch_runs_through_an_upstream(routed) -> None:
    front, data = routed
    client = openai.OpenAI(base_url=front.base_url, api_key=front.key, max_retries=0)
    batch, answers = _run(client, _chat_lines(5), "/v1/chat/completions")
    assert answers["chat-3"]["response"]["body"]["choices"][0]["message"]["content"] == "You said: item 3"
    lines = [{"custom_id": "v", "method": "POST", "url": "/v1/embeddings",
              "body": {"model": "fake-embed", "input": ["a", "b"]}}]
    _, vectors = _run(client, lines, "/v1/embeddings")
    assert len(vectors["v"]["response"]["body"]["data"]) == 2
    # The files are in the data directory.
    assert (data / "files" / f"{batch.output_file_id}.jsonl").is_file()
