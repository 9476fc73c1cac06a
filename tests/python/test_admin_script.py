"""examples/admin_api.py (httpx only) against the fake server's admin key:
it creates a project and a key, uses the key, and reads the usage and the
audit log, as OpenAI's Administration API documentation does."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT, AdminServer


def test_the_httpx_admin_script_runs_against_svc(admin_server: AdminServer) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "admin_api.py"), admin_server.url],
        env={**os.environ, "SVC_ADMIN_KEY": admin_server.admin_key},
        capture_output=True,
        text=True,
        timeout=120,
    )
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("project proj_") and "budget 100000 a month" in lines[0]
    assert lines[1].startswith("key key_") and "sk-svc-" in lines[1]
    assert lines[2].startswith("chat with svc: ") and "budget left 99" in lines[2]
    assert any(line.startswith("usage proj_") and " svc: 1 requests" in line for line in lines)
    audits = [line.split()[1] for line in lines if line.startswith("audit ")]
    assert audits[:2] == ["project.created", "api_key.created"], audits
    # The key's secret is never printed, only its redacted form.
    assert not any("sk-svc-" in line and "…" not in line for line in lines), lines
