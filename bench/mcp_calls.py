#!/usr/bin/env python3
"""What svc's /mcp adds to a tool call: the same tool (the official MCP
Python SDK's MCPServer, `add`) called with the SDK's own Client directly
and through svc's /mcp (svc-fake-server with the server registered), one
call at a time, rounds alternating between the two. Run by bench/mcp.sh,
which builds svc and starts both servers; prints a Markdown table and
writes bench/results/mcp.json through bench/results.py.

Usage: mcp_calls.py SVC_URL KEY UPSTREAM_URL [calls per round] [rounds]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results  # noqa: E402


async def timed(url: str, headers: dict[str, str], name: str, calls: int) -> list[float]:
    """Each call's time in milliseconds, after a first untimed one (the
    client's own start: the version probe, the first connection)."""
    http = create_mcp_http_client(headers=headers)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        await client.call_tool(name, {"a": 1, "b": 2})
        times = []
        for i in range(calls):
            started = time.perf_counter()
            result = await client.call_tool(name, {"a": i, "b": 1})
            times.append((time.perf_counter() - started) * 1000)
            assert not result.is_error and result.structured_content == {"result": i + 1}, result
        return times


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def main() -> int:
    svc_url, key, upstream = sys.argv[1:4]
    calls = int(sys.argv[4]) if len(sys.argv) > 4 else 300
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    started = time.time()
    direct: list[float] = []
    through: list[float] = []
    per_round = []
    for r in range(rounds):
        # Alternating which goes first, so a trend in the machine's load
        # falls on both alike.
        order = [("direct", upstream, {}, "add"),
                 ("svc", f"{svc_url}/mcp", {"Authorization": f"Bearer {key}"}, "py__add")]
        if r % 2:
            order.reverse()
        for run, url, headers, name in order:
            times = asyncio.run(timed(url, headers, name, calls))
            (direct if run == "direct" else through).extend(times)
            per_round.append({"round": r + 1, "run": run, "p50_ms": round(statistics.median(times), 3),
                              "p99_ms": round(percentile(times, 99), 3)})
    rows = []
    print(f"MCP tool call, the Python SDK's Client, one at a time: {rounds} rounds of {calls} calls")
    print()
    print("| run | p50 ms | p90 ms | p99 ms |")
    print("|---|---|---|---|")
    for run, times in (("direct to the server", direct), ("through svc /mcp", through)):
        row = {"run": run, "p50_ms": round(statistics.median(times), 3), "p90_ms": round(percentile(times, 90), 3),
               "p99_ms": round(percentile(times, 99), 3), "calls": len(times)}
        rows.append(row)
        print(f"| {run} | {row['p50_ms']} | {row['p90_ms']} | {row['p99_ms']} |")
    added = round(rows[1]["p50_ms"] - rows[0]["p50_ms"], 3)
    added99 = round(rows[1]["p99_ms"] - rows[0]["p99_ms"], 3)
    print()
    print(f"svc adds {added} ms to the p50 ({added99} ms to the p99); per round: {per_round}")
    summary = [results.compare("mcp_p50", "MCP tool call p50, through svc /mcp vs direct", "ms", "lower",
                               rows[1]["p50_ms"], rows[0]["p50_ms"], reference_name="direct (Python SDK)")]
    doc = results.document(
        "mcp", title="MCP: what svc's /mcp adds to a tool call", external=False, script="bench/mcp.sh",
        command=results.command("bench/mcp.sh", [str(calls), str(rounds)]),
        reference="the same tool called directly with the MCP Python SDK's Client",
        summary=summary, rows=rows + per_round, started=started,
        notes=f"added p50 {added} ms, added p99 {added99} ms")
    results.write(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
