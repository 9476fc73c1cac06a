"""Does a batch slow interactive requests? (issue 34)

Against one running svc on the embedded model, an interactive client sends
short streamed chat requests one after another (max_tokens 8) and records
each one's time to first token (TTFT), in three conditions, in turns:

  idle    nothing else runs: the engine's own TTFT;
  batch   a batch of --lines chat lines (max_tokens --line-tokens) runs:
          svc's batch lines are background work, started only in slots
          interactive requests leave, in at most half of them;
  flood   the same lines sent as ordinary requests by as many clients as
          the batch runs lines at once (4): what the batch's load costs
          without that priority (the reference).

Each condition lasts --asks requests; the report gives TTFT p50 and p99 per
condition (median over rounds), how many lines ran meanwhile, and the share
of the CPUs other processes used (worst round).

The interactive client and the batch (or the flood) use keys of their own
(`--key INTERACTIVE,BATCH`), as a person and a nightly job would.

Usage: python bench/engine/batch_ttft.py --url http://127.0.0.1:PORT/v1
         --key sk-svc-...,sk-svc-... --pid PID [--rounds 3] [--asks 30] [--json FILE]
"""

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from cpuload import ForeignLoad, wait_quiet  # noqa: E402


def line_body(i: int, tokens: int) -> dict:
    return {"model": "svc", "max_tokens": tokens, "temperature": 0.7, "seed": i,
            "messages": [{"role": "user", "content": f"Tell me a long story about the number {i}."}]}


async def ttft(client: httpx.AsyncClient, i: int) -> float:
    body = {"model": "svc", "max_tokens": 8, "stream": True,
            "messages": [{"role": "user", "content": f"Say hello to person {i}."}]}
    started = time.monotonic()
    first = None
    async with client.stream("POST", "/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if first is None and line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0]["delta"] if '"choices":[{' in line else {}
                if delta.get("content"):
                    first = time.monotonic() - started
    if first is None:
        raise RuntimeError("no content came")
    return first


async def asks(client: httpx.AsyncClient, n: int) -> list[float]:
    out = []
    for i in range(n):
        out.append(await ttft(client, i))
        await asyncio.sleep(0.05)
    return out


async def start_batch(client: httpx.AsyncClient, lines: int, tokens: int) -> str:
    text = "".join(json.dumps({"custom_id": f"l{i}", "method": "POST", "url": "/v1/chat/completions",
                               "body": line_body(i, tokens)}) + "\n" for i in range(lines))
    uploaded = await client.post("/files", files={"file": ("lines.jsonl", text.encode())},
                                 data={"purpose": "batch"})
    uploaded.raise_for_status()
    batch = await client.post("/batches", json={"input_file_id": uploaded.json()["id"],
                                                "endpoint": "/v1/chat/completions", "completion_window": "24h"})
    batch.raise_for_status()
    return batch.json()["id"]


async def batch_done(client: httpx.AsyncClient, batch: str) -> int:
    got = (await client.get(f"/batches/{batch}")).json()
    return got["request_counts"]["completed"] + got["request_counts"]["failed"]


async def flood(client: httpx.AsyncClient, lines: int, tokens: int, clients: int, stop: asyncio.Event) -> list[int]:
    done = [0]
    queue = list(range(lines))

    async def worker() -> None:
        while queue and not stop.is_set():
            i = queue.pop()
            r = await client.post("/chat/completions", json=line_body(i, tokens), timeout=600)
            r.raise_for_status()
            done[0] += 1

    workers = [asyncio.create_task(worker()) for _ in range(clients)]
    await stop.wait()
    for w in workers:
        w.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    return done


async def measure(args, condition: str) -> dict:
    interactive_key, batch_key = args.key.split(",")
    limits = httpx.Limits(max_connections=32)
    async with httpx.AsyncClient(base_url=args.url, headers={"Authorization": f"Bearer {interactive_key}"},
                                 timeout=600, limits=limits) as client, \
            httpx.AsyncClient(base_url=args.url, headers={"Authorization": f"Bearer {batch_key}"},
                              timeout=600, limits=limits) as batcher:
        wait_quiet(args.quiet_wait)
        with ForeignLoad((args.pid,)) as load:
            ran = 0
            if condition == "idle":
                times = await asks(client, args.asks)
            elif condition == "batch":
                batch = await start_batch(batcher, args.lines, args.line_tokens)
                await asyncio.sleep(2)  # the lines are running
                before = await batch_done(batcher, batch)
                times = await asks(client, args.asks)
                ran = await batch_done(batcher, batch) - before
                await batcher.post(f"/batches/{batch}/cancel")
                while (await batcher.get(f"/batches/{batch}")).json()["status"] != "cancelled":
                    await asyncio.sleep(0.5)
            else:
                stop = asyncio.Event()
                task = asyncio.create_task(flood(batcher, args.lines, args.line_tokens, 4, stop))
                await asyncio.sleep(2)
                times = await asks(client, args.asks)
                stop.set()
                ran = (await task)[0]
    times.sort()
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    return {"condition": condition, "p50": statistics.median(times), "p99": p99, "ran": ran,
            "foreign": load.share}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--asks", type=int, default=30)
    ap.add_argument("--lines", type=int, default=400)
    ap.add_argument("--line-tokens", type=int, default=64)
    ap.add_argument("--quiet-wait", type=float, default=30)
    ap.add_argument("--json")
    args = ap.parse_args()
    results = []
    for r in range(args.rounds):
        for condition in ("idle", "batch", "flood"):
            m = await measure(args, condition)
            m["round"] = r
            results.append(m)
            print(f"round {r} {condition}: TTFT p50 {1000 * m['p50']:.0f} ms, p99 {1000 * m['p99']:.0f} ms, "
                  f"{m['ran']} lines meanwhile, others' CPU {100 * m['foreign']:.0f}%", file=sys.stderr)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1))
    print("| interactive client, while | TTFT p50 | TTFT p99 | lines run meanwhile | others' CPU (worst) |")
    print("|---|---:|---:|---:|---:|")
    names = {"idle": "nothing else runs", "batch": "a batch runs (svc's background lines)",
             "flood": "the same lines as plain requests, 4 clients (reference)"}
    for condition in ("idle", "batch", "flood"):
        ms = [m for m in results if m["condition"] == condition]
        p50 = statistics.median(m["p50"] for m in ms)
        p99 = statistics.median(m["p99"] for m in ms)
        ran = statistics.median(m["ran"] for m in ms)
        print(f"| {names[condition]} | {1000 * p50:.0f} ms | {1000 * p99:.0f} ms | {ran:.0f} | "
              f"{100 * max(m['foreign'] for m in ms):.0f}% |")


if __name__ == "__main__":
    asyncio.run(main())
