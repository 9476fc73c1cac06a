"""Do embeddings stall chat streams? The bound is what a long chat prompt
does to them: issue 31 asks that an embedding request never stalls chat
streams beyond the same bounds as a prompt.

Against one running svc (the embedded `svc` and `svc-embed`, 8 slots), each
round starts 8 chat streams (greedy, up to --stream-tokens tokens); once each has
sent 8 chunks it waits 0.5 s, then sends one of:

  prompt      a chat request whose prompt is the long text (~1,400 tokens)
              and max_tokens 4: the bound;
  embed       one embeddings request of the same text, one input a
              sentence (the same tokens, give or take the markers);
  embed-load  4 clients sending such requests back to back for 3 s.

and records the longest gap between two chunks of any of the 8 streams that
overlaps [the extra work sent, its end + 0.5 s] (a stream still running at
the end counts its open gap up to there), and the 99th percentile of the
gaps before it (the streams' own pace). The conditions alternate within a
round, rounds repeat; the report gives the median and the worst over
rounds, with the share of the CPUs other processes used (worst round).

Usage: python bench/engine/embed_stall.py --url http://127.0.0.1:PORT/v1
         --key sk-svc-...,sk-svc-... --pid PID [--rounds 5] [--json FILE]
(one key's requests hold at most half of the slots by default: start svc
with --slots-per-client 8, or give two keys)
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

TOPICS = ["lighthouses", "volcanoes", "bees", "bridges", "clocks", "rivers", "deserts", "trains"]
WORDS = ("garden engine letter market village signal ladder harvest journey winter kitchen "
         "budget painting island factory meeting bicycle museum storm recipe battery").split()


def long_text(sentences: int) -> list[str]:
    """Deterministic sentences of 11-16 words (about 14-20 tokens each)."""
    out = []
    for i in range(sentences):
        words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(10 + i % 6)]
        out.append(f"Note {i}: the " + " ".join(words) + ".")
    return out


def pct(xs: list, p: float) -> float:
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))
    return s[k]


class Svc:
    """The server, under one or more keys: a key's requests hold at most
    its share of the engine's slots (half by default), so 8 streams need
    two keys."""

    def __init__(self, url: str, keys: list[str]):
        self.clients = [httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=httpx.Timeout(600.0),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
        ) for key in keys]
        self.client = self.clients[0]

    async def stream(self, content: str, max_tokens: int, on_chunk=None, client: int = 0) -> dict:
        body = {"model": "svc", "messages": [{"role": "user", "content": content}], "stream": True,
                "stream_options": {"include_usage": True}, "max_tokens": max_tokens, "temperature": 0}
        sent = time.perf_counter()
        first = None
        usage = None
        http = self.clients[client % len(self.clients)]
        async with http.stream("POST", "/chat/completions", json=body) as resp:
            if resp.status_code != 200:
                raise RuntimeError(f"HTTP {resp.status_code}: {(await resp.aread())[:300]!r}")
            async for line in resp.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices") or []:
                    if (choice.get("delta") or {}).get("content"):
                        now = time.perf_counter()
                        first = first or now
                        if on_chunk:
                            on_chunk(now)
                usage = chunk.get("usage") or usage
        end = time.perf_counter()
        return {"sent": sent, "first": first or end, "end": end, "usage": usage}

    async def embed(self, inputs: list[str]) -> dict:
        resp = await self.client.post("/embeddings", json={"model": "svc-embed", "input": inputs})
        if resp.status_code != 200:
            raise RuntimeError(f"embeddings: HTTP {resp.status_code}: {resp.text[:300]}")
        return resp.json()["usage"]


async def measure(svc: Svc, condition: str, sentences: list[str], a) -> dict:
    wait_quiet(a.quiet_wait)
    n = 8
    arrivals: list[list[float]] = [[] for _ in range(n)]

    def recorder(i):
        return lambda now: arrivals[i].append(now)

    extra_tokens = 0
    with ForeignLoad((a.pid,)) as load:
        streams = [asyncio.create_task(svc.stream(
            f"Count from 1 to 400, writing each number as words on its own line ({TOPICS[i]}).", a.stream_tokens, recorder(i)))
            for i in range(n)]
        while min(len(x) for x in arrivals) < 8:
            for i, s in enumerate(streams):
                if s.done():
                    r = s.result()
                    raise RuntimeError(f"stream {i} ended before the extra work was sent "
                                       f"({len(arrivals[i])} chunks, usage {r['usage']})")
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        sent = time.perf_counter()
        if condition == "prompt":
            big = await svc.stream("\n".join(sentences) + "\nSummarize the notes above.", 4)
            done = big["first"]
            extra_tokens = big["usage"]["prompt_tokens"]
        elif condition == "embed":
            extra_tokens = (await svc.embed(sentences))["prompt_tokens"]
            done = time.perf_counter()
        else:
            stop = sent + 3.0
            counted = []

            async def client():
                while time.perf_counter() < stop:
                    counted.append((await svc.embed(sentences))["prompt_tokens"])
            await asyncio.gather(*(client() for _ in range(4)))
            extra_tokens = sum(counted)
            done = time.perf_counter()
        window_end = done + 0.5
        while time.perf_counter() < window_end:
            await asyncio.sleep(0.02)
        ended = [s.done() for s in streams]
        for s in streams:
            s.cancel()
        await asyncio.gather(*streams, return_exceptions=True)
    worst = 0.0
    for i, times in enumerate(arrivals):
        ts = [t for t in times if t <= window_end]
        if not ended[i]:
            ts.append(window_end)
        for t1, t2 in zip(ts, ts[1:]):
            if t2 > sent:
                worst = max(worst, t2 - t1)
    base = [t2 - t1 for times in arrivals for t1, t2 in zip(times, times[1:]) if t2 < sent]
    return {"worst_gap": worst, "base_p99": pct(base, 99), "extra_s": done - sent,
            "extra_tokens": extra_tokens, "foreign": load.share}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", required=True, help="one key, or several separated by commas")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sentences", type=int, default=80)
    ap.add_argument("--stream-tokens", type=int, default=1024)
    ap.add_argument("--quiet-wait", type=float, default=30.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    svc = Svc(a.url, a.key.split(","))
    sentences = long_text(a.sentences)
    conditions = ["prompt", "embed", "embed-load"]
    results: dict[str, list[dict]] = {c: [] for c in conditions}
    for r in range(a.rounds):
        order = conditions if r % 2 == 0 else conditions[::-1]
        for c in order:
            m = await measure(svc, c, sentences, a)
            results[c].append(m)
            print(f"round {r + 1} {c}: worst gap {1000 * m['worst_gap']:.0f} ms (pace p99 "
                  f"{1000 * m['base_p99']:.0f} ms), extra work {m['extra_s']:.2f} s, "
                  f"{m['extra_tokens']} tokens, others' CPU {100 * m['foreign']:.0f}%", file=sys.stderr)
    for client in svc.clients:
        await client.aclose()
    print("| extra work beside 8 chat streams | worst gap, median | worst gap, worst round | "
          "streams' own p99 gap | tokens of extra work | others' CPU (worst) |")
    print("|---|---|---|---|---|---|")
    labels = {"prompt": "a ~1,400-token chat prompt (the bound)",
              "embed": "one embeddings request of the same text",
              "embed-load": "4 embedding clients back to back, 3 s"}
    for c in conditions:
        ms = results[c]
        print(f"| {labels[c]} | {1000 * statistics.median(m['worst_gap'] for m in ms):.0f} ms | "
              f"{1000 * max(m['worst_gap'] for m in ms):.0f} ms | "
              f"{1000 * statistics.median(m['base_p99'] for m in ms):.0f} ms | "
              f"{statistics.median(m['extra_tokens'] for m in ms):.0f} | "
              f"{100 * max(m['foreign'] for m in ms):.0f}% |")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
