"""`svc serve --tls-cert … --tls-key …` (issue 33) with a certificate from
a CA made here (trustme): the official openai SDK, whole and streamed, and
curl, which negotiates HTTP/2. svc's models are routed to the fake server
(`server`), so no model file is needed.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import tempfile
from pathlib import Path

import httpx
import openai
import pytest
import trustme

from conftest import Server, svc_binary, svc_serve


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def tls_server(server: Server, ca: trustme.CA):
    with tempfile.TemporaryDirectory(prefix="svc-tls-") as tmp:
        tmp = Path(tmp)
        issued = ca.issue_cert("localhost", "127.0.0.1")
        cert, key = tmp / "cert.pem", tmp / "key.pem"
        issued.cert_chain_pems[0].write_to_path(str(cert))
        for more in issued.cert_chain_pems[1:]:
            more.write_to_path(str(cert), append=True)
        issued.private_key_pem.write_to_path(str(key))
        config = tmp / "svc.toml"
        # Both default ids on the upstream: nothing is fetched or loaded.
        config.write_text(
            "".join(
                f"[models.{id}]\n"
                f'upstreams = [{{ base_url = "{server.base_url}", model = "{id}", api_key_env = "FAKE_SERVER_KEY" }}]\n'
                for id in ("svc", "svc-thinking")
            )
        )
        data = tmp / "data"
        env = {**os.environ, "SVC_LOG": "warn", "FAKE_SERVER_KEY": server.key}
        created = subprocess.run(
            [str(svc_binary()), "keys", "create", "--name", "tls", "--data-dir", str(data)],
            capture_output=True, text=True, check=True, env=env,
        )
        args = [
            "--config", str(config), "--data-dir", str(data), "--bind", "127.0.0.1:0",
            "--tls-cert", str(cert), "--tls-key", str(key),
        ]
        for url in svc_serve(args, env, timeout=60):
            assert url.startswith("https://127.0.0.1:"), url
            port = url.rsplit(":", 1)[1]
            yield Server(url=f"https://localhost:{port}", key=created.stdout.strip())


def test_the_openai_sdk_speaks_to_svc_over_https(tls_server: Server, ca: trustme.CA) -> None:
    with tempfile.NamedTemporaryFile(suffix=".pem") as bundle:
        ca.cert_pem.write_to_path(bundle.name)
        http = httpx.Client(verify=ssl.create_default_context(cafile=bundle.name))
        with openai.OpenAI(base_url=tls_server.base_url, api_key=tls_server.key, http_client=http, max_retries=0) as client:
            reply = client.chat.completions.create(model="svc", messages=[{"role": "user", "content": "hello there"}])
            assert reply.choices[0].message.content
            assert sorted(m.id for m in client.models.list()) == ["svc", "svc-thinking"]
            stream = client.chat.completions.create(
                model="svc", messages=[{"role": "user", "content": "hello there"}], stream=True
            )
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            assert text == reply.choices[0].message.content

    # A client that does not trust the CA refuses the server.
    with openai.OpenAI(base_url=tls_server.base_url, api_key=tls_server.key, max_retries=0) as untrusting:
        with pytest.raises(openai.APIConnectionError):
            untrusting.models.list()


def test_curl_negotiates_http2(tls_server: Server, ca: trustme.CA) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    with tempfile.NamedTemporaryFile(suffix=".pem") as bundle:
        ca.cert_pem.write_to_path(bundle.name)
        done = subprocess.run(
            [
                curl, "--silent", "--show-error", "--http2", "--cacert", bundle.name,
                "--header", f"Authorization: Bearer {tls_server.key}",
                "--write-out", "\n%{http_version} %{http_code}",
                f"{tls_server.base_url}/models",
            ],
            capture_output=True, text=True, timeout=30,
        )
    assert done.returncode == 0, done.stderr
    body, status = done.stdout.rsplit("\n", 1)
    assert status == "2 200", done.stdout
    assert '"object":"list"' in body.replace(" ", "")
