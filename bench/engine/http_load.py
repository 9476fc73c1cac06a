#!/usr/bin/env python3
"""Streams chat completions from a running `svc serve` at several
concurrencies and reports, per concurrency C:

  * aggregate completion tokens/s: the sum of `usage.completion_tokens` of
    the C streams (stream_options.include_usage) over the wall time from
    sending the first request to the end of the last stream;
  * time to first token: request sent -> first non-empty content delta,
    p50 over every stream of every round;
  * the server's resident memory (VmRSS sampled every 20 ms, VmHWM) while
    the level ran.

Each level runs --rounds times after one warm-up round; tokens/s is the
median of the rounds. The C streams of a round start together and each has
a prompt of its own (the same C prompts every round), temperature 0 and a
fixed seed, so rounds are repeatable.

Prints one JSON object on stdout.
"""

import argparse
import asyncio
import json
import os
import statistics
import time

import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from cpuload import HZ, ForeignLoad, proc_cpu_jiffies, wait_quiet  # noqa: E402

TOPICS = [
    "lighthouses", "volcanoes", "bees", "bridges", "clocks", "rivers",
    "deserts", "trains", "glaciers", "owls", "libraries", "forests",
    "comets", "harbours", "windmills", "caves",
]


def proc_mem(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value, _unit = line.split()
                out[key[:-1]] = int(value) * 1024
    return out


async def sample_rss(pid: int, peak: list, stop: asyncio.Event) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], proc_mem(pid)["VmRSS"])
        try:
            await asyncio.wait_for(stop.wait(), 0.02)
        except asyncio.TimeoutError:
            pass


async def one_stream(client, args, i: int, t0: float) -> dict:
    body = {
        "model": args.model,
        "messages": [
            {
                "role": "user",
                "content": f"Write a long, detailed essay about {TOPICS[i % len(TOPICS)]}.",
            }
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": args.max_tokens,
        "temperature": 0,
        "seed": 1234 + i,
    }
    sent = time.perf_counter()
    first = None
    usage = None
    finish = None
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            text = await resp.aread()
            raise RuntimeError(f"HTTP {resp.status_code}: {text[:300]!r}")
        async for line in resp.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            for choice in chunk.get("choices") or []:
                if first is None and (choice.get("delta") or {}).get("content"):
                    first = time.perf_counter()
                finish = choice.get("finish_reason") or finish
            if chunk.get("usage"):
                usage = chunk["usage"]
    end = time.perf_counter()
    if usage is None:
        raise RuntimeError("the stream carried no usage (stream_options.include_usage)")
    return {
        "ttft": (first or end) - sent,
        "end": end - t0,
        "tokens": usage["completion_tokens"],
        "finish": finish,
    }


async def run_round(client, args, c: int) -> tuple[float, list]:
    t0 = time.perf_counter()
    results = await asyncio.gather(*(one_stream(client, args, i, t0) for i in range(c)))
    wall = max(r["end"] for r in results)
    return sum(r["tokens"] for r in results) / wall, results


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--key", required=True)
    ap.add_argument("--pid", type=int, required=True, help="svc serve's pid, for /proc")
    ap.add_argument("--model", default="svc")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quiet-wait", type=float, default=60.0,
                    help="seconds to wait at most for an idle machine before each level")
    ap.add_argument("--max-foreign", type=float, default=0.10,
                    help="redo a level when others used more than this share of the CPUs")
    ap.add_argument("--retries", type=int, default=2)
    ap.add_argument("--meta", default="{}", help="JSON copied into the output (server settings)")
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]

    meta = json.loads(args.meta)
    meta.update(max_tokens=args.max_tokens, rounds=args.rounds)
    out = {"meta": meta, "idle": proc_mem(args.pid), "levels": []}
    limits = httpx.Limits(max_connections=max(levels) + 4)
    timeout = httpx.Timeout(600.0)
    headers = {"Authorization": f"Bearer {args.key}"}
    async with httpx.AsyncClient(
        base_url=args.url, headers=headers, limits=limits, timeout=timeout
    ) as client:
        for c in levels:
            await run_round(client, args, c)  # warm-up: connections, slots, caches
            best = None
            for attempt in range(args.retries + 1):
                wait_quiet(args.quiet_wait)
                peak = [0]
                stop = asyncio.Event()
                sampler = asyncio.create_task(sample_rss(args.pid, peak, stop))
                rates, streams = [], []
                t_client0 = os.times()
                t_server0 = proc_cpu_jiffies(args.pid)
                w0 = time.perf_counter()
                with ForeignLoad((args.pid,)) as load:
                    for _ in range(args.rounds):
                        rate, results = await run_round(client, args, c)
                        rates.append(rate)
                        streams.extend(results)
                wall = time.perf_counter() - w0
                t_client1 = os.times()
                client_cpu = (t_client1.user + t_client1.system - t_client0.user - t_client0.system) / wall
                server_cpu = (proc_cpu_jiffies(args.pid) - t_server0) / HZ / wall
                stop.set()
                await sampler
                print(f"  {c:>2} streams: {statistics.median(rates):.1f} tokens/s, others used "
                      f"{100 * load.share:.0f}% of the CPUs", file=sys.stderr)
                if best is None or load.share < best[3]:
                    best = (rates, streams, peak[0], load.share, attempt + 1, client_cpu, server_cpu)
                if load.share <= args.max_foreign:
                    break
            rates, streams, peak_rss, foreign, attempts, client_cpu, server_cpu = best
            ttfts = sorted(r["ttft"] * 1000 for r in streams)
            out["levels"].append(
                {
                    "concurrency": c,
                    "tokens_per_s": statistics.median(rates),
                    "tokens_per_s_rounds": rates,
                    "ttft_p50_ms": statistics.median(ttfts),
                    "ttft_max_ms": ttfts[-1],
                    "tokens_per_stream": statistics.median(r["tokens"] for r in streams),
                    "finish_length": sum(r["finish"] == "length" for r in streams),
                    "streams": len(streams),
                    "peak_rss": peak_rss,
                    "foreign": foreign,
                    "attempts": attempts,
                    "client_cpu": client_cpu,
                    "server_cpu": server_cpu,
                }
            )
    out["after"] = proc_mem(args.pid)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
