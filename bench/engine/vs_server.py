#!/usr/bin/env python3
"""svc serve against llama.cpp's llama-server, side by side (issue 19).

Both servers are already running (bench/vs-llama-server.sh starts them) on
the same GGUF with the same threads, slots and context per slot. Every
request is a streamed OpenAI chat completion (/v1/chat/completions,
temperature 0, stream_options.include_usage) and every measurement runs
once per server per round, alternating svc / llama-server, after waiting for
a quiet machine; a measurement is redone (up to --retries times) when other
processes used more than --max-foreign of the CPUs, and the attempt with the
least foreign load is kept. Results are medians over rounds.

Each round uses text of its own (the round number and a counter are in every
prompt), so neither server finds a previous round's prompt in a cache: the
only reuse possible is within a round, e.g. a conversation's earlier turns,
and the chat template's system prompt shared by every request.

Neither server is asked to ignore EOS (svc's API has no such field); decode
rates come from each stream's usage.completion_tokens, and the median tokens
per stream of each server is printed so unequal lengths show.

Measurements:
  single   one stream, 128 tokens: decode tokens/s (tokens after the first
           over the time from the first to the last content chunk); then
           --short-prompts short prompts one after another, TTFT median.
  c4, c16  4 and 16 streams started together, 128 tokens each: aggregate
           tokens/s (sum of completion tokens over the wall time), TTFT
           p50 and p99 of the round's streams.
  conv1    one conversation of 7 turns, ~200 tokens of user text per turn
           plus the server's own replies (--reply-tokens), each request the
           whole history as a REPL sends it: TTFT of turn 7.
  conv8    8 conversations interleaved turn by turn (c1 t1, c2 t1, ... c8 t1,
           c1 t2, ...), one request at a time: median TTFT of the 8 turn-7s.
  stall    8 streams decoding; a ~1,400-token prompt arrives: the longest
           gap between two chunks of any of the 8 streams from its arrival
           until 0.5 s after its first token, and its own TTFT.
  memory   VmRSS idle after start (before any request), VmRSS and VmHWM
           after all runs.

Prints the Markdown report on stdout; --json FILE keeps every number;
--results writes the medians as bench/results/vs-llama-server.json
(bench/results.py; "auto": there, or .partial.json for a run of some rows).
"""

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
import zlib
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
import results  # noqa: E402  (bench/results.py)
from cpuload import ForeignLoad  # noqa: E402
from cpuload import wait_quiet as _wait_quiet  # noqa: E402

QUIET = {"budget": 600.0, "waited": 0.0}


def wait_quiet(max_wait: float) -> None:
    """cpuload.wait_quiet within what is left of --quiet-budget: on a
    machine that never gets quiet the run still ends in reasonable time
    (and the others' CPU column says so)."""
    t0 = time.monotonic()
    _wait_quiet(max(0.0, min(max_wait, QUIET["budget"] - QUIET["waited"])))
    QUIET["waited"] += time.monotonic() - t0

MIB = 1024 * 1024

TOPICS = [
    "lighthouses", "volcanoes", "bees", "bridges", "clocks", "rivers",
    "deserts", "trains", "glaciers", "owls", "libraries", "forests",
    "comets", "harbours", "windmills", "caves",
]
NOUNS = [
    "garden", "engine", "letter", "market", "village", "signal", "ladder",
    "harvest", "journey", "winter", "kitchen", "budget", "painting", "island",
    "factory", "meeting", "bicycle", "museum", "storm", "recipe", "battery",
    "orchard", "festival", "compass", "tunnel", "blanket", "canal", "piano",
]
VERBS = [
    "repaired", "visited", "described", "measured", "painted", "counted",
    "moved", "cleaned", "planned", "tested", "borrowed", "checked", "sold",
    "watched", "carried", "opened", "ordered", "finished",
]
PEOPLE = [
    "Anna", "Ben", "Carla", "David", "Elena", "Farid", "Grace", "Hugo",
    "Ines", "Jonas", "Kira", "Luis", "Maya", "Nils", "Olga", "Pavel",
]


def proc_mem(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value, _unit = line.split()
                out[key[:-1]] = int(value) * 1024
    return out


def pct(xs: list, p: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))
    return s[k]


class Server:
    def __init__(self, name: str, url: str, pid: int, key: str | None, model: str):
        self.name, self.url, self.pid, self.model = name, url, pid, model
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = httpx.AsyncClient(
            base_url=url, headers=headers, timeout=httpx.Timeout(600.0),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
        )

    async def stream(self, messages: list, max_tokens: int, on_chunk=None) -> dict:
        """One streamed chat completion; times are perf_counter values."""
        body = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": max_tokens,
            "temperature": 0,
            "seed": 1234,
        }
        sent = time.perf_counter()
        chunks = []  # arrival time of every chunk with content
        text = []
        usage = finish = timings = None
        async with self.client.stream("POST", "/v1/chat/completions", json=body) as resp:
            if resp.status_code != 200:
                raise RuntimeError(f"{self.name}: HTTP {resp.status_code}: {(await resp.aread())[:300]!r}")
            async for line in resp.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                for choice in chunk.get("choices") or []:
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        now = time.perf_counter()
                        chunks.append(now)
                        text.append(content)
                        if on_chunk:
                            on_chunk(now)
                    finish = choice.get("finish_reason") or finish
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if chunk.get("timings"):
                    timings = chunk["timings"]
        end = time.perf_counter()
        if usage is None:
            raise RuntimeError(f"{self.name}: the stream carried no usage")
        return {
            "sent": sent,
            "ttft": (chunks[0] if chunks else end) - sent,
            "first": chunks[0] if chunks else end,
            "last": chunks[-1] if chunks else end,
            "end": end,
            "chunks": chunks,
            "text": "".join(text),
            "tokens": usage.get("completion_tokens", 0),
            "prompt_tokens": usage.get("prompt_tokens", 0),
            "finish": finish,
            "timings": timings,
        }

    async def close(self):
        await self.client.aclose()


class Text:
    """Deterministic filler text, sized in tokens with llama-server's
    /tokenize (the same GGUF's tokenizer; it evaluates nothing)."""

    def __init__(self, tokenizer_url: str):
        self.client = httpx.AsyncClient(base_url=tokenizer_url, timeout=60.0)

    async def count(self, text: str) -> int:
        r = await self.client.post("/tokenize", json={"content": text})
        r.raise_for_status()
        return len(r.json()["tokens"])

    async def make(self, seed: str, tokens: int) -> str:
        rng = random.Random(seed)
        sentences = []
        while True:
            p, n, v, m = rng.choice(PEOPLE), rng.choice(NOUNS), rng.choice(VERBS), rng.choice(NOUNS)
            sentences.append(
                f"On day {rng.randint(1, 400)}, {p} {v} the {n} near the {m} "
                f"and wrote down {rng.randint(2, 99)} notes about it."
            )
            if len(sentences) % 4 == 0 and await self.count(" ".join(sentences)) >= tokens:
                # trim to the last sentence that keeps it at or under the target
                while len(sentences) > 1 and await self.count(" ".join(sentences[:-1])) >= tokens:
                    sentences.pop()
                return " ".join(sentences)

    async def close(self):
        await self.client.aclose()


# ---- measurements: each takes (server, args, tag) and returns a dict ----

async def m_single(srv: Server, a, tag: str) -> dict:
    r = await srv.stream(
        [{"role": "user", "content": f"Write a long, detailed essay about {TOPICS[zlib.crc32(tag.encode()) % 16]} ({tag})."}],
        a.max_tokens,
    )
    decode = (r["tokens"] - 1) / max(r["last"] - r["first"], 1e-9)
    ttfts = []
    for i in range(a.short_prompts):
        s = await srv.stream([{"role": "user", "content": f"Say hello to {PEOPLE[i % 16]} ({tag}-{i})."}], 4)
        ttfts.append(s["ttft"])
    return {"decode_tps": decode, "decode_tokens": r["tokens"], "short_ttft": statistics.median(ttfts),
            "short_prompt_tokens": s["prompt_tokens"], "tokens_per_stream": r["tokens"],
            "short_timings": s["timings"], "decode_timings": r["timings"]}


async def m_concurrent(srv: Server, a, tag: str, c: int) -> dict:
    t0 = time.perf_counter()
    rs = await asyncio.gather(*(
        srv.stream([{"role": "user", "content":
                     f"Write a long, detailed essay about {TOPICS[i % 16]} ({tag}-{i})."}], a.max_tokens)
        for i in range(c)
    ))
    wall = max(r["end"] for r in rs) - t0
    ttfts = [r["ttft"] for r in rs]
    return {"tps": sum(r["tokens"] for r in rs) / wall, "ttft_p50": statistics.median(ttfts),
            "ttft_p99": pct(ttfts, 99), "tokens_per_stream": statistics.median(r["tokens"] for r in rs)}


async def m_prompt(srv: Server, a, text: Text, tag: str) -> dict:
    """One request of a fresh ~2,000-token prompt and a 1-token reply:
    prompt tokens per second of its TTFT (nothing of it cached)."""
    # sized first, so that sizing it does not run during the measurement
    body = await text.make(f"pp-{tag}", a.pp_tokens)
    wait_quiet(a.quiet_wait)
    with ForeignLoad((srv.pid,)) as load:
        r = await srv.stream([{"role": "user", "content": f"({tag}) Summarize this log: {body}"}], 1)
    return {"pp_tps": r["prompt_tokens"] / max(r["ttft"], 1e-9), "pp_ttft": r["ttft"],
            "pp_prompt_tokens": r["prompt_tokens"], "foreign": load.share}


async def conversations(srv: Server, a, text: Text, tag: str, n: int) -> dict:
    # user texts first, so that sizing them does not run during the measurement
    users = [[await text.make(f"{tag}-c{c}-t{t}", a.turn_tokens) for t in range(a.turns)] for c in range(n)]
    wait_quiet(a.quiet_wait)
    hist = [[] for _ in range(n)]
    last = []
    with ForeignLoad((srv.pid,)) as load:
        for t in range(a.turns):
            for c in range(n):
                hist[c].append({"role": "user", "content":
                                f"Part {t + 1} of my notes:\n{users[c][t]}\nReply with a short summary."})
                final = t == a.turns - 1
                r = await srv.stream(hist[c], 8 if final else a.reply_tokens)
                hist[c].append({"role": "assistant", "content": r["text"]})
                if final:
                    last.append(r)
    return {"ttft": statistics.median(r["ttft"] for r in last),
            "prompt_tokens": statistics.median(r["prompt_tokens"] for r in last),
            "cached": [((r["timings"] or {}).get("cache_n")) for r in last],
            "timings": [r["timings"] for r in last],
            "foreign": load.share}


async def m_stall(srv: Server, a, text: Text, tag: str) -> dict:
    long_text = await text.make(f"{tag}-long", a.long_tokens)
    wait_quiet(a.quiet_wait)
    n = 8
    counts = [0] * n
    arrivals = [[] for _ in range(n)]

    def recorder(i):
        def f(now):
            counts[i] += 1
            arrivals[i].append(now)
        return f

    with ForeignLoad((srv.pid,)) as load:
        streams = [asyncio.create_task(srv.stream(
            [{"role": "user", "content": f"Write a long, detailed essay about {TOPICS[i]} ({tag}-{i})."}],
            a.stall_stream_tokens, on_chunk=recorder(i))) for i in range(n)]
        while min(counts) < 8:
            if any(s.done() for s in streams):
                for s in streams:
                    if s.done() and s.exception():
                        raise s.exception()
                raise RuntimeError(f"{srv.name}: a stream ended before the long prompt was sent")
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        before = time.perf_counter()
        big = await srv.stream([{"role": "user", "content": f"{long_text}\nSummarize the notes above."}], 4)
        window_end = big["first"] + 0.5
        while time.perf_counter() < window_end:
            await asyncio.sleep(0.02)
        ended = [s.done() for s in streams]
        for s in streams:
            s.cancel()
        await asyncio.gather(*streams, return_exceptions=True)
    # a gap counts when it overlaps [the long prompt sent, window_end]; a
    # stream still running at window_end has its open gap counted up to there
    worst = 0.0
    for i, times in enumerate(arrivals):
        ts = [t for t in times if t <= window_end]
        if not ended[i]:
            ts.append(window_end)
        for t1, t2 in zip(ts, ts[1:]):
            if t2 > big["sent"]:
                worst = max(worst, t2 - t1)
    base = [t2 - t1 for times in arrivals for t1, t2 in zip(times, times[1:]) if t2 < before]
    return {"worst_gap": worst, "long_ttft": big["ttft"], "long_prompt_tokens": big["prompt_tokens"],
            "baseline_gap_p99": pct(base, 99) if base else None, "ended_early": sum(ended), "long_timings": big["timings"],
            "foreign": load.share}


async def timed(srv: Server, a, fn) -> dict:
    """Runs fn after a quiet-machine wait, with foreign-load accounting;
    retries while the foreign share is above --max-foreign."""
    best = None
    for attempt in range(a.retries + 1):
        if getattr(fn, "self_timed", False):
            r = await fn(attempt)
        else:
            wait_quiet(a.quiet_wait)
            with ForeignLoad((srv.pid,)) as load:
                r = await fn(attempt)
            r["foreign"] = load.share
        r["attempts"] = attempt + 1
        if best is None or r["foreign"] < best["foreign"]:
            best = r
        if r["foreign"] <= a.max_foreign or QUIET["waited"] >= QUIET["budget"] or attempt == a.retries:
            break
        print(f"    {srv.name}: others used {100 * r['foreign']:.0f}% of the CPUs, again", file=sys.stderr)
    return best


def self_timed(f):
    f.self_timed = True
    return f


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--svc-url")
    ap.add_argument("--svc-key")
    ap.add_argument("--svc-pid", type=int)
    ap.add_argument("--ls-url")
    ap.add_argument("--ls-pid", type=int)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conv8-rounds", type=int, default=1)
    ap.add_argument("--conv-count", type=int, default=8, help="conversations of the conv8 row")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--short-prompts", type=int, default=5)
    ap.add_argument("--turns", type=int, default=7)
    ap.add_argument("--turn-tokens", type=int, default=200)
    ap.add_argument("--reply-tokens", type=int, default=48)
    ap.add_argument("--long-tokens", type=int, default=1400)
    ap.add_argument("--stall-stream-tokens", type=int, default=1024)
    ap.add_argument("--pp-tokens", type=int, default=2000)
    ap.add_argument("--only", default="single,pp,c4,c16,conv1,conv8,stall")
    ap.add_argument("--quiet-wait", type=float, default=60.0)
    ap.add_argument("--max-foreign", type=float, default=0.10)
    ap.add_argument("--retries", type=int, default=1)
    ap.add_argument("--quiet-budget", type=float, default=600.0,
                    help="seconds of quiet-machine waiting in all; then measure without waiting or retrying")
    ap.add_argument("--json")
    ap.add_argument("--header", default="", help="Markdown printed above the table")
    ap.add_argument("--report", metavar="JSON", help="only print the report of a (partial) --json file")
    ap.add_argument("--results", metavar="auto|FILE",
                    help="write the medians in bench/results' shape: auto (bench/results/vs-llama-server.json, "
                         "or .partial.json for a run of some rows) or FILE")
    ap.add_argument("--command", default="bench/vs-llama-server.sh", help="the command, for --results")
    a = ap.parse_args()
    if a.report:
        out = json.loads(Path(a.report).read_text())
        out.setdefault("after", {s: {"VmRSS": 0, "VmHWM": 0} for s in ("svc", "llama-server")})
        print(report(out, out.get("header", "")))
        if a.results:
            write_results(out, a.results, a.command)
        return
    if not all((a.svc_url, a.svc_key, a.svc_pid, a.ls_url, a.ls_pid)):
        ap.error("--svc-url, --svc-key, --svc-pid, --ls-url and --ls-pid are required")
    only = set(a.only.split(","))
    QUIET["budget"] = a.quiet_budget

    servers = [
        Server("svc", a.svc_url, a.svc_pid, a.svc_key, "svc"),
        Server("llama-server", a.ls_url, a.ls_pid, None, "model"),
    ]
    text = Text(a.ls_url)
    out = {"args": vars(a), "header": a.header, "idle": {s.name: proc_mem(s.pid) for s in servers}, "runs": {},
           "started": time.time()}

    def record(key, name, r):
        out["runs"].setdefault(key, {}).setdefault(name, []).append(r)
        if a.json:  # after every measurement, so that a cut-short run keeps its results
            out["quiet_waited"] = QUIET["waited"]
            Path(a.json).write_text(json.dumps(out, indent=1))

    # warm-up: first requests of each server (threads, caches, the template)
    for s in servers:
        await s.stream([{"role": "user", "content": "Hello!"}], 8)
        await m_concurrent(s, a, "warm-up", 4)

    for rnd in range(a.rounds):
        for s in servers:
            tag = f"r{rnd}"
            print(f"round {rnd + 1}/{a.rounds}: {s.name}", file=sys.stderr)
            if "single" in only:
                r = await timed(s, a, lambda at: m_single(s, a, f"{tag}-a{at}"))
                record("single", s.name, r)
                print(f"  single: {r['decode_tps']:.1f} tokens/s, short TTFT {1000 * r['short_ttft']:.0f} ms",
                      file=sys.stderr)
            if "pp" in only:
                r = await timed(s, a, self_timed(lambda at: m_prompt(s, a, text, f"{tag}-pp-a{at}")))
                record("pp", s.name, r)
                print(f"  prompt processing: {r['pp_tps']:.0f} tokens/s ({r['pp_prompt_tokens']} tokens)",
                      file=sys.stderr)
            for c in (4, 16):
                if f"c{c}" in only:
                    r = await timed(s, a, lambda at: m_concurrent(s, a, f"{tag}-c{c}-a{at}", c))
                    record(f"c{c}", s.name, r)
                    print(f"  {c} streams: {r['tps']:.1f} tokens/s, TTFT p50 {1000 * r['ttft_p50']:.0f} ms",
                          file=sys.stderr)
            if "conv1" in only:
                r = await timed(s, a, self_timed(lambda at: conversations(s, a, text, f"{tag}-conv1-a{at}", 1)))
                record("conv1", s.name, r)
                print(f"  turn 7 of 1 conversation: {1000 * r['ttft']:.0f} ms ({r['prompt_tokens']:.0f} "
                      f"prompt tokens)", file=sys.stderr)
            if "conv8" in only and rnd < a.conv8_rounds:
                r = await timed(s, a, self_timed(lambda at: conversations(s, a, text, f"{tag}-conv8-a{at}", a.conv_count)))
                record("conv8", s.name, r)
                print(f"  turn 7 of {a.conv_count} conversations: {1000 * r['ttft']:.0f} ms", file=sys.stderr)
            if "stall" in only:
                r = await timed(s, a, self_timed(lambda at: m_stall(s, a, text, f"{tag}-stall-a{at}")))
                record("stall", s.name, r)
                print(f"  stall: worst gap {1000 * r['worst_gap']:.0f} ms, long prompt TTFT "
                      f"{1000 * r['long_ttft']:.0f} ms", file=sys.stderr)

    out["after"] = {s.name: proc_mem(s.pid) for s in servers}
    out["quiet_waited"] = QUIET["waited"]
    for s in servers:
        await s.close()
    await text.close()
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    print(report(out, a.header))
    if a.results:
        write_results(out, a.results, a.command)


# ---- report ----

# Each row of the report: (measurement, field, the report's label, the
# result file's label, unit, better, target, scale to the unit, format).
# Targets: issue 46's (every TTFT row ≤ 0.8×).
ROWS = (
    ("single", "decode_tps", "single stream: decode tokens/s", "single stream: decode", "tokens/s", "higher",
     "≥ 1.0×", 1, "tps"),
    ("single", "short_ttft", "single stream: TTFT, short prompt (median of 5)",
     "single stream: TTFT, short prompt (median of 5)", "ms", "lower", "≤ 0.8×", 1000, "ms"),
    ("pp", "pp_tps", "prompt processing tokens/s, {pp_tokens:,}-token prompt",
     "prompt processing, {pp_tokens:,}-token prompt", "tokens/s", "higher", "≥ 1.0×", 1, "int"),
    ("c4", "tps", "4 streams: aggregate tokens/s", "4 streams: aggregate", "tokens/s", "higher", "", 1, "tps"),
    ("c4", "ttft_p50", "4 streams: TTFT p50", "4 streams: TTFT p50", "ms", "lower", "", 1000, "ms"),
    ("c4", "ttft_p99", "4 streams: TTFT p99", "4 streams: TTFT p99", "ms", "lower", "", 1000, "ms"),
    ("c16", "tps", "16 streams: aggregate tokens/s", "16 streams: aggregate", "tokens/s", "higher", "≥ 1.05×", 1,
     "tps"),
    ("c16", "ttft_p50", "16 streams: TTFT p50", "16 streams: TTFT p50", "ms", "lower", "≤ 0.8×", 1000, "ms"),
    ("c16", "ttft_p99", "16 streams: TTFT p99", "16 streams: TTFT p99", "ms", "lower", "", 1000, "ms"),
    ("conv1", "ttft", "1 conversation: turn-7 TTFT", "1 conversation: turn-7 TTFT", "ms", "lower", "≤ 0.8×",
     1000, "ms"),
    ("conv8", "ttft", "{conv_count} interleaved conversations: turn-7 TTFT median",
     "{conv_count} interleaved conversations: turn-7 TTFT median", "ms", "lower", "≤ 0.8×", 1000, "ms"),
    ("stall", "worst_gap", "8 streams + a 1,400-token prompt: worst gap between chunks",
     "8 streams + a 1,400-token prompt: worst gap between chunks", "ms", "lower", "≤ 0.5×", 1000, "ms"),
    ("stall", "long_ttft", "8 streams + a 1,400-token prompt: its TTFT", "8 streams + a 1,400-token prompt: its TTFT",
     "ms", "lower", "≤ 0.8×", 1000, "ms"),
)
# The memory rows: (when, field, label, target).
MEMORY_ROWS = (("idle", "VmRSS", "RSS idle after start", ""),
               ("after", "VmRSS", "RSS after all runs", "≤ 1.0×"),
               ("after", "VmHWM", "peak RSS (VmHWM) after all runs", ""))
NAMES = ("svc", "llama-server")


def medians(runs: dict, key: str, field: str):
    """({server: median over rounds}, {server: worst foreign share}); a server
    without results (a cut-short run) is left out; None when neither has any."""
    v, foreign = {}, {}
    for n in NAMES:
        rs = [r for r in runs.get(key, {}).get(n, []) if r.get(field) is not None]
        if rs:
            v[n] = statistics.median(r[field] for r in rs)
            foreign[n] = max(r["foreign"] for r in rs)
    return (v, foreign) if v else None


def label_args(out: dict) -> dict:
    return {"pp_tokens": 2000, **out["args"]}

def report(out: dict, header: str) -> str:
    runs = out["runs"]
    names = NAMES
    rows = []

    def med(key, field):
        return medians(runs, key, field)

    def row(label, key, field, fmt, target, scale=1.0):
        m = med(key, field)
        if m is None:
            return
        v, foreign = m
        cell = lambda n: fmt(v[n] * scale) if n in v else "–"  # noqa: E731
        share = lambda n: f"{100 * foreign[n]:.0f}%" if n in foreign else "–"  # noqa: E731
        ratio = f"**{v['svc'] / v['llama-server']:.2f}×**" if len(v) == 2 and v["llama-server"] else "–"
        rows.append(f"| {label} | {cell('svc')} | {cell('llama-server')} | {ratio} | {target} | "
                    f"{share('svc')} / {share('llama-server')} |")

    ms = lambda x: f"{x:.0f} ms" if x < 10000 else f"{x / 1000:.1f} s"  # noqa: E731
    tps = lambda x: f"{x:.1f}"  # noqa: E731
    tok = lambda x: f"{x:.0f}"  # noqa: E731
    mib = lambda x: f"{x / MIB:.0f} MiB"  # noqa: E731

    formats = {"tps": tps, "ms": ms, "int": lambda x: f"{x:.0f}"}
    for key, field, label, _, _, _, target, scale, fmt in ROWS:
        row(label.format(**label_args(out)), key, field, formats[fmt], target, scale)
    for when, field, label, target in MEMORY_ROWS:
        a, b = out[when]["svc"][field], out[when]["llama-server"][field]
        if not (a and b):
            continue
        rows.append(f"| {label} | {mib(a)} | {mib(b)} | **{a / b:.2f}×** | {target} | |")

    sanity = []
    for key, field, label in (("single", "tokens_per_stream", "completion tokens, single stream"),
                              ("c16", "tokens_per_stream", "completion tokens per stream at 16"),
                              ("single", "short_prompt_tokens", "prompt tokens, short prompt"),
                              ("pp", "pp_prompt_tokens", "prompt tokens, prompt-processing row"),
                              ("conv1", "prompt_tokens", "prompt tokens at turn 7"),
                              ("stall", "long_prompt_tokens", "prompt tokens, long prompt")):
        m = med(key, field)
        if m:
            sanity.append(f"{label}: {' / '.join(tok(m[0][n]) if n in m[0] else '–' for n in names)}")
    cached = [c for r in runs.get("conv1", {}).get("llama-server", []) for c in r["cached"] if c is not None]
    a = out["args"]
    lines = [header] if header else []
    lines += [
        f"Medians over {a['rounds']} rounds ({a['conv_count']} conversations: {min(a['conv8_rounds'], a['rounds'])}), "
        f"alternating svc / llama-server; last column: share of the CPUs other processes used during the "
        f"measurement (worst round, svc / llama-server).",
        "",
        "| metric | svc | llama-server | svc / llama-server | target | others' CPU |",
        "|---|---:|---:|---:|---|---:|",
        *rows,
        "",
        "svc / llama-server: " + "; ".join(sanity) + ".",
        f"Waited {out['quiet_waited']:.0f} s in all for a quiet machine (budget {a['quiet_budget']:.0f} s).",
    ]
    if cached:
        lines.append(f"llama-server reused {statistics.median(cached):.0f} cached prompt tokens at turn 7 "
                     f"(median, its `timings.cache_n`).")
    return "\n".join(lines)


# ---- bench/results/vs-llama-server.json ----

# The result file's area (BENCH_RESULTS_AREA; bench/cuda/run-there.sh names
# the GPU's), its title (its section's heading in BENCHMARKS.md) and the rows
# of BENCHMARKS.md's table.
AREAS = {
    "vs-llama-server": ("Embedded engine against llama-server",
                        {"single.decode_tps", "single.short_ttft", "pp.pp_tps", "c4.tps", "c16.tps", "c16.ttft_p50",
                         "conv8.ttft", "stall.worst_gap", "after.VmRSS"}),
    "vs-llama-server-h100": ("Embedded engine against llama-server on an NVIDIA H100",
                             {"single.decode_tps", "c16.tps"}),
}


def write_results(out: dict, where: str, command: str) -> None:
    """The report's medians as a result file (bench/results.py's shape)."""
    rows = []
    for key, field, _, label, unit, better, target, scale, _ in ROWS:
        m = medians(out["runs"], key, field)
        if not m or len(m[0]) < 2:
            continue
        v, foreign = m
        s, r = v["svc"] * scale, v["llama-server"] * scale
        rows.append(results.compare(
            f"{key}.{field}", label.format(**label_args(out)), unit, better, round(s, 1), round(r, 1),
            reference_name="llama-server", target=target, ratio=round(s / r, 4) if r else None,
            foreign=[round(foreign["svc"], 3), round(foreign["llama-server"], 3)]))
    for when, field, label, target in MEMORY_ROWS:
        s, r = out[when]["svc"][field], out[when]["llama-server"][field]
        if s and r:
            rows.append(results.compare(f"{when}.{field}", label, "MiB", "lower", round(s / MIB), round(r / MIB),
                                        reference_name="llama-server", target=target, ratio=round(s / r, 4)))
    for row in rows:
        if not row["target"]:
            del row["target"]
    a = out["args"]
    full = set(a["only"].split(",")) >= {"single", "pp", "c4", "c16", "conv1", "conv8", "stall"} \
        and a["conv_count"] == 8
    area = os.environ.get("BENCH_RESULTS_AREA", "vs-llama-server")
    title, headline = AREAS.get(area, (f"Embedded engine against llama-server ({area})", AREAS["vs-llama-server"][1]))
    doc = results.document(
        area, title=title, external=True,
        script="bench/vs-llama-server.sh", command=command,
        reference="llama.cpp's llama-server built from the same llama.cpp, on the same GGUF with the same "
                  "threads, slots and context per slot",
        summary=[r for r in rows if r["key"] in headline], rows=rows, started=out.get("started"),
        notes=(out.get("header") or "").replace("## svc serve against llama-server", "").strip() or None)
    if where != "auto":
        os.environ["BENCH_RESULTS"] = where
    results.write(doc, partial=not full)


if __name__ == "__main__":
    asyncio.run(main())
