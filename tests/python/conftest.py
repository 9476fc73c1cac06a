"""Fixtures of the conformance suite: the svc fake server and SDK clients.

The server is `target/debug/svc-fake-server` (or `$SVC_FAKE_SERVER`): the
real HTTP layer of svc with scripted fake models. Nothing is built here;
`run.sh` builds it. The server prints `url http://127.0.0.1:PORT` and
`key sk-svc-...` on stdout, then serves until it is stopped.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60


def _built(name: str, variable: str) -> Path:
    """`$variable`, else target/debug/`name` where cargo builds it."""
    explicit = os.environ.get(variable)
    if explicit:
        return Path(explicit)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    if not target.is_absolute():
        target = ROOT / target
    return target / "debug" / name


def server_binary() -> Path:
    return _built("svc-fake-server", "SVC_FAKE_SERVER")


def svc_binary() -> Path:
    """`svc` as run.sh builds it (or `$SVC_BIN`)."""
    return _built("svc", "SVC_BIN")


def fake_upstream_binary() -> Path:
    """The scripted upstream as a process (or `$SVC_FAKE_UPSTREAM`)."""
    return _built("svc-fake-upstream", "SVC_FAKE_UPSTREAM")


def svc_serve(args: list[str], env: dict[str, str], timeout: float = 120, started: list | None = None):
    """Runs `svc serve ARGS`, yields the URL it says it serves on, and
    stops it (a generator for fixtures). The process is appended to
    `started` when given (for its pid)."""
    svc = svc_binary()
    assert svc.is_file(), f"{svc} does not exist: build it with `cargo build -p svc-cli --bin svc` or set SVC_BIN"
    process = subprocess.Popen(
        [str(svc), "serve", *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )
    if started is not None:
        started.append(process)
    url: list[str] = []
    seen: list[str] = []

    def read() -> None:
        for line in process.stderr:
            seen.append(line)
            match = re.match(r"^svc is serving on (\S+)", line)
            if match and not url:
                url.append(match.group(1))
        # Keeps draining until the server ends, so it never blocks.

    threading.Thread(target=read, daemon=True).start()
    try:
        for _ in range(int(timeout * 10)):
            if url or process.poll() is not None:
                break
            threading.Event().wait(0.1)
        assert url, f"svc serve did not start (exit {process.poll()}):\n{''.join(seen)}"
        yield url[0]
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def real_model_data(data: Path) -> str:
    """Prepares the data directory `data` for `svc serve` on the real
    default model (`$SVC_TEST_MODEL`, which `scripts/test.sh` fetches; the
    test is skipped without it), as on a newcomer's first start minus the
    download, and returns an API key made in it."""
    model = os.environ.get("SVC_TEST_MODEL")
    if not model:
        pytest.skip("SVC_TEST_MODEL is not set (scripts/test.sh sets it)")
    models = data / "models"
    models.mkdir(parents=True)
    (models / "SmolLM2-135M-Instruct.Q4_1.gguf").symlink_to(Path(model).resolve())
    # svc-embed's model, pulled once by scripts/test.sh (else svc fetches it).
    embed_model = os.environ.get("SVC_TEST_EMBED_MODEL")
    if embed_model:
        (models / "all-MiniLM-L6-v2.F32.gguf").symlink_to(Path(embed_model).resolve())
    created = subprocess.run(
        [str(svc_binary()), "keys", "create", "--name", "real", "--data-dir", str(data)],
        capture_output=True, text=True, check=True,
    )
    return created.stdout.strip()


def real_model_serve(prefix: str):
    """`svc serve` on the real default model in a fresh data directory
    (see `real_model_data`), 2 slots of 2048 tokens; yields its `Server`
    and stops it (a generator for fixtures)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as data:
        key = real_model_data(Path(data))
        env = {**os.environ, "SVC_LOG": "warn"}
        args = ["--bind", "127.0.0.1:0", "--data-dir", data, "--parallel", "2", "--context", "2048"]
        for url in svc_serve(args, env, 120):
            yield Server(url=url, key=key)


@dataclass(frozen=True)
class Server:
    url: str
    """`http://127.0.0.1:PORT`, without `/v1`."""
    key: str
    """A valid API key."""

    @property
    def base_url(self) -> str:
        """What the SDK takes as base_url."""
        return f"{self.url}/v1"


def _read_lines(stream, count: int, timeout: float) -> list[str]:
    lines: list[str] = []

    def read() -> None:
        while len(lines) < count:
            line = stream.readline()
            if not line:
                return
            lines.append(line.strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    return lines


@dataclass(frozen=True)
class AdminServer(Server):
    admin_key: str
    """The operator's admin key (the admin API)."""


@pytest.fixture(scope="session")
def server() -> Server:
    for started in _start_server([]):
        yield Server(url=started["url"], key=started["key"])


@pytest.fixture(scope="session")
def admin_server() -> AdminServer:
    """A server of its own that also prints an admin key."""
    for started in _start_server(["--admin-key"]):
        yield AdminServer(url=started["url"], key=started["key"], admin_key=started["admin-key"])


def _start_server(extra: list[str]):
    """Starts the fake server with `extra` arguments, yields the fields of
    its first lines (`url`, `key`, and `admin-key` with `--admin-key`), and
    stops it."""
    binary = server_binary()
    if not binary.is_file():
        pytest.fail(
            f"{binary} does not exist: build it with "
            "`cargo build -p svc-test-support --bin svc-fake-server` or set SVC_FAKE_SERVER"
        )
    # Requests to the local server never go through a proxy.
    no_proxy = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1", "localhost"]))
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = no_proxy

    log = tempfile.TemporaryFile(mode="w+b")
    process = subprocess.Popen(
        [str(binary), "--bind", "127.0.0.1:0", *extra],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        lines = _read_lines(process.stdout, 3 if "--admin-key" in extra else 2, START_TIMEOUT_S)
        fields = dict(line.split(" ", 1) for line in lines if " " in line)
        if "url" not in fields or "key" not in fields or ("--admin-key" in extra and "admin-key" not in fields):
            process.kill()
            process.wait()
            log.seek(0)
            stderr = log.read().decode(errors="replace")
            pytest.fail(f"svc-fake-server did not start (stdout {lines!r}, exit {process.returncode}):\n{stderr}")
        # Keep draining stdout so the server can never block on a full pipe.
        threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()
        yield fields
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()


@pytest.fixture(scope="session")
def client(server: Server) -> openai.OpenAI:
    """An SDK client for the server; retries off so errors show at once."""
    with openai.OpenAI(base_url=server.base_url, api_key=server.key, max_retries=0, timeout=30) as c:
        yield c


@pytest.fixture(scope="session")
def bad_client(server: Server) -> openai.OpenAI:
    """An SDK client with a well-formed key the server never issued."""
    key = "sk-svc-" + "0" * 40
    with openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0, timeout=30) as c:
        yield c
