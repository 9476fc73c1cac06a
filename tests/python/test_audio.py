"""Speech through an upstream (issue 47) with the official `openai` SDK:
`svc serve` routes `whisper` and `tts` to the scripted upstream
(`svc-fake-upstream`, another process), which says what it received.
`audio.transcriptions.create`, `audio.translations.create` and
`audio.speech.create` work with only the base URL and key changed; the
upload reaches the upstream byte for byte under the endpoint's model name;
speech streams back. A 200 MB upload does not grow svc's memory by more
than a few MB: it is written to disk as it arrives and sent from there.
"""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import tempfile
import threading
import urllib.request
from pathlib import Path

import openai
import pytest
import requests

from conftest import fake_upstream_binary, svc_binary, svc_serve


def wav(seconds: int) -> bytes:
    """PCM WAV at 16 kHz, 16-bit mono, its samples a ramp."""
    data = bytes(i % 251 for i in range(32_000 * seconds))
    header = b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt "
    header += struct.pack("<IHHIIHH", 16, 1, 1, 16_000, 32_000, 2, 16)
    return header + b"data" + struct.pack("<I", len(data)) + data


@pytest.fixture(scope="module")
def upstream():
    binary = fake_upstream_binary()
    assert binary.is_file(), f"{binary} does not exist: build it with `cargo build -p svc-test-support --bin svc-fake-upstream`"
    process = subprocess.Popen([str(binary)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline().strip()
        assert line.startswith("url "), line
        threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()
        yield line.split(" ", 1)[1]
    finally:
        process.kill()
        process.wait()


def received(upstream: str) -> dict:
    with urllib.request.urlopen(f"{upstream}/fake/received", timeout=10) as answer:
        return json.load(answer)


@pytest.fixture(scope="module")
def front(upstream: str):
    """`svc serve` with `whisper` and `tts` on the scripted upstream, and
    its process (for its memory)."""
    with tempfile.TemporaryDirectory(prefix="svc-audio-") as tmp:
        config = Path(tmp) / "svc.toml"
        config.write_text(
            "[models.whisper]\n"
            f'upstreams = [{{ base_url = "{upstream}", model = "whisper-up" }}]\n'
            "[models.tts]\n"
            f'upstreams = [{{ base_url = "{upstream}", model = "tts-up" }}]\n'
            "[prices.whisper]\naudio_minute = 0.006\n"
            # The embedded models' ids, served by the upstream too: nothing
            # to load.
            + "".join(
                f'[models.{id}]\nupstreams = [{{ base_url = "{upstream}", model = "{id}" }}]\n'
                for id in ("svc", "svc-thinking")
            )
        )
        data = Path(tmp) / "data"
        env = {**os.environ, "SVC_LOG": "error"}
        created = subprocess.run(
            [str(svc_binary()), "keys", "create", "--name", "audio", "--data-dir", str(data)],
            capture_output=True, text=True, check=True, env=env,
        )
        args = ["--config", str(config), "--data-dir", str(data), "--bind", "127.0.0.1:0"]
        started: list = []
        for url in svc_serve(args, env, timeout=60, started=started):
            yield url, created.stdout.strip(), started[0]


def client(front) -> openai.OpenAI:
    url, key, _ = front
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)


def test_the_sdk_transcribes_and_translates_through_the_upstream(front, upstream: str) -> None:
    audio = wav(3)
    with client(front) as c:
        transcript = c.audio.transcriptions.create(
            model="whisper", file=("meeting.wav", io.BytesIO(audio), "audio/wav"), language="en"
        )
        assert transcript.text == f"{len(audio)} bytes of meeting.wav"
        seen = received(upstream)["audio"]
        assert seen["path"] == "/v1/audio/transcriptions"
        assert seen["fields"]["model"] == "whisper-up"
        assert seen["fields"]["language"] == "en"
        assert seen["file"] == {
            "filename": "meeting.wav", "content_type": "audio/wav", "bytes": len(audio), "sum": sum(audio) % 2**64,
        }
        text = c.audio.translations.create(
            model="whisper", file=("a.wav", io.BytesIO(audio)), response_format="text"
        )
        assert text.strip() == f"translated: {len(audio)} bytes of a.wav"
        assert received(upstream)["audio"]["path"] == "/v1/audio/translations"
        with pytest.raises(openai.BadRequestError) as refused:
            c.audio.transcriptions.create(model="whisper", file=("a.wav", io.BytesIO(audio)), temperature=3)
        assert refused.value.body["param"] == "temperature"
        with pytest.raises(openai.NotFoundError):
            c.audio.transcriptions.create(model="nope", file=("a.wav", io.BytesIO(audio)))


def test_the_sdk_gets_speech_streamed(front, upstream: str) -> None:
    with client(front) as c:
        spoken = c.audio.speech.create(model="tts", voice="alloy", input="Hello there", response_format="wav")
        assert spoken.content == b"fmtw" + b"Hello there" * 3
        assert spoken.response.headers["content-type"] == "audio/wav"
        assert received(upstream)["request"] == {
            "model": "tts-up", "input": "Hello there", "voice": "alloy", "response_format": "wav",
        }
        with c.audio.speech.with_streaming_response.create(model="tts", voice="nova", input="Hi") as streamed:
            pieces = list(streamed.iter_bytes(chunk_size=None))
        assert b"".join(pieces) == b"fmtm" + b"Hi" * 3
        with pytest.raises(openai.BadRequestError) as refused:
            c.audio.speech.create(model="tts", voice="alloy", input="x" * 4097)
        assert refused.value.body["param"] == "input"


def _peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


class _Form:
    """A `multipart/form-data` body of a `size`-byte file generated as it
    is sent (never whole here either), with its length known, so that
    `requests` sends it with a Content-Length."""

    BOUNDARY = "big-upload-boundary"

    def __init__(self, size: int) -> None:
        self.size = size
        self.head = (
            f"--{self.BOUNDARY}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper\r\n"
            f"--{self.BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.mp3\"\r\n"
            "Content-Type: audio/mpeg\r\n\r\n"
        ).encode()
        self.tail = f"\r\n--{self.BOUNDARY}--\r\n".encode()

    def __len__(self) -> int:
        return len(self.head) + self.size + len(self.tail)

    def __iter__(self):
        piece = bytes(range(256)) * 4096  # 1 MiB
        yield self.head
        for _ in range(self.size // len(piece)):
            yield piece
        yield self.tail


def _upload(url: str, key: str, size: int) -> requests.Response:
    return requests.post(
        f"{url}/v1/audio/transcriptions",
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": f"multipart/form-data; boundary={_Form.BOUNDARY}",
        },
        data=_Form(size),
        timeout=600,
    )


def test_a_200_mb_upload_is_never_held_in_memory(front, upstream: str) -> None:
    url, key, process = front
    # A first upload starts what any upload uses (blocking threads, their
    # allocator arenas, the upstream's connection).
    warm = _upload(url, key, 20 * 1024 * 1024)
    assert warm.status_code == 200, warm.text
    before = _peak_kib(process.pid)
    size = 200 * 1024 * 1024
    answer = _upload(url, key, size)
    assert answer.status_code == 200, answer.text
    assert answer.json()["text"] == f"{size} bytes of big.mp3"
    assert received(upstream)["audio"]["file"]["bytes"] == size
    grown = _peak_kib(process.pid) - before
    print(f"svc's peak RSS {before} KiB before a 200 MiB upload, +{grown} KiB after it")
    assert grown < 48 * 1024, f"svc's peak memory grew by {grown} KiB for a {size}-byte upload"
