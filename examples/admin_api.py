"""svc's admin API driven with httpx alone, as OpenAI's Administration API
documentation does it: create a project (with a token budget), create a key
in it, use the key once, then read the usage by day and the audit log.

    SVC_ADMIN_KEY=sk-svc-... python examples/admin_api.py [BASE_URL]

BASE_URL defaults to $SVC_BASE_URL, else http://127.0.0.1:8080. The admin
key comes from the operator: `svc keys create --kind admin NAME`. A script
written for OpenAI's API needs only this base URL and key. Prints what it
did, one line a step, and exits non-zero on any error answer.
"""

from __future__ import annotations

import os
import sys
import time

import httpx


def main() -> int:
    base = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SVC_BASE_URL", "http://127.0.0.1:8080")
    admin_key = os.environ.get("SVC_ADMIN_KEY")
    if not admin_key:
        print("set SVC_ADMIN_KEY to an admin key (svc keys create --kind admin NAME)", file=sys.stderr)
        return 2
    api = base.rstrip("/") + "/v1"
    admin = httpx.Client(base_url=api, headers={"Authorization": f"Bearer {admin_key}"}, timeout=30)

    def call(method: str, path: str, **kwargs) -> dict:
        response = admin.request(method, path, **kwargs)
        if response.is_error:
            raise SystemExit(f"{method} {path}: {response.status_code} {response.text}")
        return response.json()

    started = int(time.time())
    project = call(
        "POST",
        "/organization/projects",
        json={"name": "Example project", "budget": {"tokens": 100000, "period": "month"}},
    )
    print(f"project {project['id']} {project['name']!r} budget {project['budget']['tokens']} a {project['budget']['period']}")

    key = call("POST", f"/organization/projects/{project['id']}/api_keys", json={"name": "example key"})
    print(f"key {key['id']} {key['redacted_value']} (its secret is shown only in this answer)")

    # The new key, as an application would use it.
    with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {key['value']}"}, timeout=60) as app:
        model = app.get("/models").raise_for_status().json()["data"][0]["id"]
        reply = app.post(
            "/chat/completions",
            json={"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "Say hello."}]},
        ).raise_for_status()
        print(f"chat with {model}: {reply.json()['usage']['total_tokens']} tokens, budget left {reply.headers.get('x-budget-remaining-tokens')}")

    # Usage is written about once a second: ask until the request shows.
    params = {"start_time": started, "group_by[]": ["project_id", "model"], "project_ids[]": [project["id"]]}
    for _ in range(30):
        buckets = call("GET", "/organization/usage/completions", params=params)["data"]
        results = [r for bucket in buckets for r in bucket["results"]]
        if results:
            break
        time.sleep(0.5)
    else:
        raise SystemExit("the request never showed in the usage")
    for r in results:
        print(f"usage {r['project_id']} {r['model']}: {r['num_model_requests']} requests, {r['input_tokens']} in, {r['output_tokens']} out")

    log = call("GET", "/organization/audit_logs", params={"project_ids[]": [project["id"]], "limit": 20})
    for entry in reversed(log["data"]):
        print(f"audit {entry['type']} by {entry['actor']['type']} at {entry['effective_at']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
