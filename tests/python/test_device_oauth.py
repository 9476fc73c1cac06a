"""The device authorization grant (RFC 8628) with a standard OAuth 2.0
client library: oauthlib's `DeviceClient` builds the token requests and
parses the answers; `requests` plays the person approving the code on the
dashboard, over plain HTTP (the dashboard's forms need no JavaScript).
The client knows only the server's address: it finds the device
authorization and token endpoints in the RFC 8414 metadata, as standard
OAuth clients do.

The session fixture in conftest.py starts svc-fake-server without accounts,
so this module starts its own, with a user to sign in as.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest
import requests
from oauthlib.oauth2 import DeviceClient, OAuth2Error
from oauthlib.oauth2.rfc6749.errors import AccessDeniedError, InvalidGrantError

from conftest import server_binary

START_TIMEOUT_S = 60
EMAIL = "alice@example.com"
PASSWORD = "password123"
CLIENT_ID = "svc-oauthlib-test"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@dataclass(frozen=True)
class AccountServer:
    url: str

    def metadata(self) -> dict:
        """RFC 8414 section 3: the authorization server metadata."""
        response = requests.get(f"{self.url}/.well-known/oauth-authorization-server", timeout=30)
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"] == "application/json"
        assert "no-store" not in response.headers.get("Cache-Control", "")
        return response.json()

    @property
    def device_authorization_endpoint(self) -> str:
        return self.metadata()["device_authorization_endpoint"]

    @property
    def token_endpoint(self) -> str:
        return self.metadata()["token_endpoint"]


@pytest.fixture(scope="module")
def accounts_server() -> AccountServer:
    binary = server_binary()
    if not binary.is_file():
        pytest.fail(f"{binary} does not exist: build it with `cargo build -p svc-test-support --bin svc-fake-server`")
    no_proxy = ",".join(filter(None, [os.environ.get("NO_PROXY"), "127.0.0.1", "localhost"]))
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = no_proxy
    log = tempfile.TemporaryFile(mode="w+b")
    process = subprocess.Popen(
        [
            str(binary),
            "--bind", "127.0.0.1:0",
            "--user", f"{EMAIL}:{PASSWORD}",
            "--device-interval", "1",
            "--device-code-lifetime", "600",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        lines: list[str] = []

        def read() -> None:
            while len(lines) < 2:
                line = process.stdout.readline()
                if not line:
                    return
                lines.append(line.strip())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        fields = dict(line.split(" ", 1) for line in list(lines) if " " in line)
        if "url" not in fields:
            process.kill()
            process.wait()
            log.seek(0)
            pytest.fail(f"svc-fake-server did not start ({lines!r}):\n{log.read().decode(errors='replace')}")
        threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()
        yield AccountServer(url=fields["url"])
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()


class Forms(HTMLParser):
    """The forms of a page: `action` and the named inputs of each."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append((a.get("action", ""), {}))
        elif tag == "input" and self.forms and a.get("name"):
            self.forms[-1][1][a["name"]] = a.get("value", "")

    def inputs(self, action: str) -> dict[str, str]:
        found = [fields for act, fields in self.forms if act == action]
        assert len(found) == 1, f"{len(found)} forms with action {action}: {self.forms}"
        return found[0]


def forms_of(html: str) -> Forms:
    parser = Forms()
    parser.feed(html)
    return parser


def dashboard_session(server: AccountServer) -> requests.Session:
    """A `requests` session signed in to the dashboard as EMAIL."""
    http = requests.Session()
    page = http.get(f"{server.url}/dashboard/login", timeout=30)
    assert page.status_code == 200
    assert http.cookies.get("svc_csrf"), "the sign-in page sets the svc_csrf cookie"
    csrf = forms_of(page.text).inputs("/dashboard/login")["csrf"]
    assert csrf == http.cookies.get("svc_csrf")
    signed_in = http.post(
        f"{server.url}/dashboard/login",
        data={"email": EMAIL, "password": PASSWORD, "csrf": csrf, "next": "/dashboard/keys"},
        timeout=30,
    )
    assert signed_in.status_code == 200, signed_in.text
    assert urlsplit(signed_in.url).path == "/dashboard/keys"
    assert http.cookies.get("svc_session")
    return http


def decide(server: AccountServer, user_code: str, decision: str) -> requests.Response:
    """Signs in, opens the confirmation page of `user_code`, answers it."""
    http = dashboard_session(server)
    # The link only fills the form in; submitting it looks the code up.
    form = http.get(f"{server.url}/dashboard/device", params={"user_code": user_code}, timeout=30)
    assert form.status_code == 200, form.text
    entry = forms_of(form.text).inputs("/dashboard/device")
    assert entry["user_code"] == user_code
    page = http.post(
        f"{server.url}/dashboard/device",
        data={"csrf": entry["csrf"], "user_code": user_code},
        timeout=30,
    )
    assert page.status_code == 200, page.text
    assert user_code in page.text
    fields = forms_of(page.text).inputs("/dashboard/device/decide")
    assert fields["id"].startswith("dev_") and fields["csrf"]
    return http.post(
        f"{server.url}/dashboard/device/decide",
        data={"csrf": fields["csrf"], "id": fields["id"], "decision": decision},
        timeout=30,
    )


def start(server: AccountServer) -> dict:
    """RFC 8628 section 3.1: the device authorization request, form-encoded."""
    response = requests.post(
        server.device_authorization_endpoint,
        data={"client_id": CLIENT_ID},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    assert response.headers["Cache-Control"] == "no-store"
    body = response.json()
    assert set(body) >= {"device_code", "user_code", "verification_uri", "expires_in", "interval"}
    assert body["verification_uri"] == f"{server.url}/dashboard/device"
    assert body["verification_uri_complete"] == f"{body['verification_uri']}?user_code={body['user_code']}"
    assert body["interval"] == 1 and body["expires_in"] == 600
    return body


def token_request(server: AccountServer, client: DeviceClient, device_code: str) -> requests.Response:
    """RFC 8628 section 3.4: the body oauthlib prepares, posted form-encoded."""
    body = client.prepare_request_body(device_code=device_code, include_client_id=True)
    response = requests.post(server.token_endpoint, data=body, headers=FORM, timeout=30)
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.headers["Cache-Control"] == "no-store"
    return response


def oauth_error(client: DeviceClient, response: requests.Response) -> OAuth2Error:
    """The error oauthlib raises when parsing `response`."""
    with pytest.raises(OAuth2Error) as raised:
        client.parse_request_body_response(response.text)
    return raised.value


def test_metadata_describes_the_device_flow(accounts_server: AccountServer) -> None:
    """RFC 8414 section 2 fields, true of svc: the device grant only,
    public clients, no authorization endpoint; the issuer is the URL the
    metadata was fetched under (section 3.3)."""
    server = accounts_server
    metadata = server.metadata()
    assert metadata["issuer"] == server.url
    assert not metadata["issuer"].endswith("/")
    assert metadata["grant_types_supported"] == [DeviceClient.grant_type]
    assert metadata["response_types_supported"] == []
    assert metadata["token_endpoint_auth_methods_supported"] == ["none"]
    for endpoint in ("device_authorization_endpoint", "token_endpoint"):
        assert metadata[endpoint].startswith(f"{metadata['issuer']}/"), metadata
    assert "authorization_endpoint" not in metadata


def test_device_flow_with_oauthlib(accounts_server: AccountServer) -> None:
    server = accounts_server
    client = DeviceClient(CLIENT_ID)
    code = start(server)
    body = client.prepare_request_body(device_code=code["device_code"], include_client_id=True)
    assert "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code" in body

    # Before approval: authorization_pending, an OAuth error to oauthlib.
    pending = token_request(server, client, code["device_code"])
    assert pending.status_code == 400, pending.text
    assert pending.json()["error"] == "authorization_pending"
    error = oauth_error(client, pending)
    assert error.error == "authorization_pending"
    assert error.description

    # Polling again at once: slow_down, with the interval to use from now on.
    fast = token_request(server, client, code["device_code"])
    assert fast.status_code == 400, fast.text
    assert fast.json()["error"] == "slow_down"
    assert fast.json()["interval"] == 1 + 5
    assert oauth_error(client, fast).error == "slow_down"

    approved = decide(server, code["user_code"], "approve")
    assert approved.status_code == 200, approved.text
    assert "Device approved" in approved.text

    # An approved code is redeemed on the next poll, however soon.
    answer = token_request(server, client, code["device_code"])
    assert answer.status_code == 200, answer.text
    token = client.parse_request_body_response(answer.text)
    assert token["access_token"].startswith("sk-svc-")
    assert token["token_type"] == "bearer"
    assert token["expires_in"] == 2_592_000
    assert client.access_token == token["access_token"]
    assert set(json.loads(answer.text)) == {"access_token", "token_type", "expires_in"}

    # The token is an API key of the user's.
    models = requests.get(
        f"{server.url}/v1/models",
        headers={"Authorization": f"Bearer {token['access_token']}"},
        timeout=30,
    )
    assert models.status_code == 200, models.text

    # A device code is used once.
    reused = token_request(server, client, code["device_code"])
    assert reused.status_code == 400, reused.text
    assert isinstance(oauth_error(client, reused), InvalidGrantError)


def test_denied_device_flow_with_oauthlib(accounts_server: AccountServer) -> None:
    server = accounts_server
    client = DeviceClient(CLIENT_ID)
    code = start(server)
    denied = decide(server, code["user_code"], "deny")
    assert denied.status_code == 200, denied.text
    assert "Request denied" in denied.text
    answer = token_request(server, client, code["device_code"])
    assert answer.status_code == 400, answer.text
    assert isinstance(oauth_error(client, answer), AccessDeniedError)


def test_token_endpoint_rejects_other_grants(accounts_server: AccountServer) -> None:
    """RFC 6749 section 5.2 errors for malformed token requests."""
    server = accounts_server
    url = server.token_endpoint
    wrong = requests.post(url, data={"grant_type": "password", "device_code": "x"}, timeout=30)
    assert wrong.status_code == 400 and wrong.json()["error"] == "unsupported_grant_type"
    missing = requests.post(
        url, data={"grant_type": DeviceClient.grant_type, "client_id": CLIENT_ID}, timeout=30
    )
    assert missing.status_code == 400 and missing.json()["error"] == "invalid_request"
    unknown = requests.post(
        url, data={"grant_type": DeviceClient.grant_type, "device_code": "nope"}, timeout=30
    )
    assert unknown.status_code == 400 and unknown.json()["error"] == "invalid_grant"
