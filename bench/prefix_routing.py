#!/usr/bin/env python3
"""Driver of bench/prefix-routing.sh: interleaved multi-turn conversations
through one `svc serve` whose two model ids route to the same two upstreams,
one with prefix affinity and one without, alternating the two by round.

Each conversation is its own task: a short random pause, a streamed turn,
the reply appended, the next turn. Every turn adds a user message of
`--words` random words, so by the last turn the prompt holds the whole
history (about 1,500 tokens at turn 7 with the defaults). Content is unique
per round and mode, so no turn finds another run's prefix in an upstream's
cache. Prints JSON: per round and mode, each conversation's time to first
token per turn, turn-7 prompt tokens, and the upstreams' evaluated prompt
tokens (llama-server's /metrics) over the run.
"""

import argparse
import asyncio
import json
import random
import re
import statistics
import sys
import time

import httpx

WORDS = """time year people way day man thing woman life child world school state
family student group country problem hand part place case week company system
program question work government number night point home water room mother area
money story fact month lot right study book eye job word business issue side kind
head house service friend father power hour game line end member law car city
community name president team minute idea kid body information back parent face
others level office door health person art war history party result change
morning reason research girl guy moment air teacher force education river garden
mountain window paper engine signal harbour market bridge winter summer valley
forest station kitchen letter village island theory method energy pattern""".split()


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


async def conversation(client, args, model, seed):
    rng = random.Random(seed)
    messages = [
        {
            "role": "system",
            "content": f"Session {seed}. You are a concise assistant. Summarise each part of the user's document in one sentence.",
        }
    ]
    ttfts, prompt_tokens = [], None
    for turn in range(1, args.turns + 1):
        messages.append(
            {
                "role": "user",
                "content": f"Part {turn} of the document: {words(rng, args.words)}\nSummarise part {turn}.",
            }
        )
        await asyncio.sleep(rng.uniform(0, args.think))
        body = {
            "model": model,
            "messages": messages,
            "stream": True,
            "max_tokens": args.max_tokens,
            "temperature": 0,
            "stream_options": {"include_usage": True},
        }
        start = time.perf_counter()
        first, reply, usage = None, [], None
        async with client.stream("POST", args.url + "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                raise RuntimeError(f"{r.status_code}: {(await r.aread())[:300]!r}")
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                for choice in chunk.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        if first is None:
                            first = time.perf_counter()
                        reply.append(piece)
                if chunk.get("usage"):
                    usage = chunk["usage"]
        ttfts.append((first or time.perf_counter()) - start)
        messages.append({"role": "assistant", "content": "".join(reply)})
        if usage:
            prompt_tokens = usage.get("prompt_tokens")
    return {"ttft": ttfts, "last_prompt_tokens": prompt_tokens}


async def prompt_tokens_evaluated(client, upstreams):
    """llama-server's llamacpp:prompt_tokens_total summed over upstreams."""
    total = 0
    for base in upstreams:
        text = (await client.get(base + "/metrics")).text
        m = re.search(r"^llamacpp:prompt_tokens_total\s+([0-9.e+]+)", text, re.M)
        if not m:
            return None
        total += float(m.group(1))
    return total


async def routed(client, url, model):
    """svc's svc_upstream_routed_total for `model`, by route."""
    text = (await client.get(url + "/metrics")).text
    out = {}
    for m in re.finditer(
        r'^svc_upstream_routed_total\{model="([^"]*)",endpoint="[^"]*",route="(\w+)"\} (\d+)', text, re.M
    ):
        if m.group(1) == model:
            out[m.group(2)] = out.get(m.group(2), 0) + int(m.group(3))
    return out


async def run(args, model, seed):
    limits = httpx.Limits(max_connections=64)
    timeout = httpx.Timeout(600)
    headers = {"Authorization": f"Bearer {args.key}"}
    async with httpx.AsyncClient(limits=limits, timeout=timeout, headers=headers) as client:
        before = await prompt_tokens_evaluated(client, args.upstreams)
        routes_before = await routed(client, args.url, model)
        started = time.perf_counter()
        convs = await asyncio.gather(
            *(conversation(client, args, model, seed + i) for i in range(args.conversations))
        )
        elapsed = time.perf_counter() - started
        after = await prompt_tokens_evaluated(client, args.upstreams)
        routes_after = await routed(client, args.url, model)
    return {
        "model": model,
        "seconds": elapsed,
        "conversations": convs,
        "upstream_prompt_tokens": None if before is None or after is None else after - before,
        "routed": {k: v - routes_before.get(k, 0) for k, v in routes_after.items()},
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--upstreams", nargs="+", required=True, help="llama-server base URLs (no /v1)")
    p.add_argument("--models", nargs=2, required=True, help="the affinity model id, then the plain one")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--conversations", type=int, default=8)
    p.add_argument("--turns", type=int, default=7)
    p.add_argument("--words", type=int, default=140)
    p.add_argument("--max-tokens", type=int, default=40)
    p.add_argument("--think", type=float, default=0.3, help="most seconds of pause before a turn")
    args = p.parse_args()
    results = []
    for r in range(args.rounds):
        # ABBA...: each mode goes first in every other round.
        order = list(args.models) if r % 2 == 0 else list(reversed(args.models))
        for k, model in enumerate(order):
            seed = 1_000_000 * (r + 1) + 1000 * k
            out = asyncio.run(run(args, model, seed))
            out["round"] = r
            t7 = statistics.median(c["ttft"][-1] for c in out["conversations"])
            print(
                f"round {r + 1} {model}: turn-{args.turns} TTFT median {t7 * 1000:.0f} ms, "
                f"{out['seconds']:.1f} s, upstream prompt tokens {out['upstream_prompt_tokens']}, routed {out['routed']}",
                file=sys.stderr,
            )
            results.append(out)
    json.dump({"args": vars(args) | {"key": "<redacted>"}, "runs": results}, sys.stdout)


if __name__ == "__main__":
    main()
