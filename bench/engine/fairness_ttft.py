"""Can one key's prompt work hold another key's first token? (issue 61)

Against one running svc on the embedded model, key B sends short streamed
chat requests one after another ("Say hello", max_tokens 8) and records
each one's time to first token (TTFT), while key A keeps the engine busy
with one kind of work at a time:

  idle        nothing else runs: the engine's own TTFT;
  generating  --hogs streamed chat requests of A generating long replies
              (the reference: a plain generation's load);
  prompts     --hogs plain completions of A with --prompt-tokens-token
              prompts (max_tokens 1), sent again as each ends (finding 6);
  scored      --hogs scored prompts of A (`echo`, `logprobs` 1, max_tokens
              0: lm-evaluation-harness's loglikelihood requests), again as
              each ends (finding 1);
  scored-n    one scored request of A with `n` = --hogs, again as it ends
              (finding 1).

A's requests are started, then B's asks begin after a second (A's prompts
are then under way). Each condition lasts --asks requests; the report gives
B's TTFT p50 and max per condition (median over rounds), how many of A's
requests ended meanwhile, the prompt tokens svc charged A for one scored
request of `n` choices against one of 1, and the share of the CPUs other
processes used (worst round).

With --results, the table also goes to bench/results/fairness.json
(bench/results.py's shape; a run of some conditions to fairness.partial.json),
beside issue 61's review's numbers when the settings are the review's.

Usage: python bench/engine/fairness_ttft.py --url http://127.0.0.1:PORT/v1
         --key sk-svc-...,sk-svc-... --pid PID [--rounds 3] [--asks 10] [--json FILE]
         [--results auto|FILE --command CMD --threads N --parallel N]
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
import results as result_files  # noqa: E402  (bench/results.py)
from cpuload import ForeignLoad, wait_quiet  # noqa: E402

CONDITIONS = ("idle", "generating", "prompts", "scored", "scored-n")
NAMES = {
    "idle": "nothing else runs",
    "generating": "A's long generations (reference)",
    "prompts": "A's long prompts",
    "scored": "A's scored prompts",
    "scored-n": "one scored request of A's with n choices",
}


def long_text(tokens: int, i: int) -> str:
    # About a token a word for SmolLM2's tokenizer; each request its own text.
    words = ["river", "stone", "light", "paper", "green", "table", "cloud", "music"]
    return f"{i} " + " ".join(words[(i + j) % len(words)] for j in range(tokens - 1))


async def ttft(client: httpx.AsyncClient, i: int) -> float:
    body = {"model": "svc", "max_tokens": 8, "stream": True,
            "messages": [{"role": "user", "content": f"Say hello to person {i}."}]}
    started = time.monotonic()
    first = None
    async with client.stream("POST", "/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if first is None and line.startswith("data: {") and '"content":"' in line:
                if json.loads(line[6:])["choices"][0]["delta"].get("content"):
                    first = time.monotonic() - started
    if first is None:
        raise RuntimeError("no content came")
    return first


def hog_body(condition: str, args, i: int) -> tuple[str, dict]:
    if condition == "generating":
        return "/chat/completions", {
            "model": "svc", "max_tokens": 2000, "temperature": 0.8, "seed": i,
            "messages": [{"role": "user", "content": f"Tell me a very long story about the number {i}."}]}
    text = long_text(args.prompt_tokens, i)
    if condition == "prompts":
        return "/completions", {"model": "svc", "prompt": text, "max_tokens": 1}
    n = args.hogs if condition == "scored-n" else 1
    return "/completions", {"model": "svc", "prompt": text, "max_tokens": 0, "echo": True,
                            "logprobs": 1, "n": n}


async def hog(client: httpx.AsyncClient, condition: str, args, first: int, stop: asyncio.Event,
              done: list[int]) -> None:
    i = first
    while not stop.is_set():
        path, body = hog_body(condition, args, i)
        try:
            r = await client.post(path, json=body, timeout=900)
            r.raise_for_status()
            done[0] += 1
        except asyncio.CancelledError:
            raise
        i += 1000


async def charged(client: httpx.AsyncClient, args, n: int) -> int:
    """Prompt tokens svc reports for one scored request of `n` choices."""
    body = {"model": "svc", "prompt": long_text(args.prompt_tokens, 7), "max_tokens": 0,
            "echo": True, "logprobs": 1, "n": n}
    r = await client.post("/completions", json=body, timeout=900)
    r.raise_for_status()
    return r.json()["usage"]["prompt_tokens"]


async def measure(args, condition: str) -> dict:
    b_key, a_key = args.key.split(",")
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=args.url, headers={"Authorization": f"Bearer {b_key}"},
                                 timeout=900, limits=limits) as client, \
            httpx.AsyncClient(base_url=args.url, headers={"Authorization": f"Bearer {a_key}"},
                              timeout=900, limits=limits) as hogger:
        wait_quiet(args.quiet_wait)
        with ForeignLoad((args.pid,)) as load:
            stop = asyncio.Event()
            done = [0]
            hogs = []
            if condition != "idle":
                count = 1 if condition == "scored-n" else args.hogs
                hogs = [asyncio.create_task(hog(hogger, condition, args, i, stop, done))
                        for i in range(count)]
                await asyncio.sleep(1)
            times = []
            for i in range(args.asks):
                times.append(await ttft(client, i))
                await asyncio.sleep(0.2)
            stop.set()
            for h in hogs:
                h.cancel()
            await asyncio.gather(*hogs, return_exceptions=True)
    return {"condition": condition, "p50": statistics.median(times), "max": max(times),
            "ended": done[0], "foreign": load.share}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", required=True, help="B's key (the asks), A's key (the load)")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--asks", type=int, default=10)
    ap.add_argument("--hogs", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=500)
    ap.add_argument("--conditions", default=",".join(CONDITIONS))
    ap.add_argument("--quiet-wait", type=float, default=30)
    ap.add_argument("--json")
    ap.add_argument("--results", metavar="auto|FILE",
                    help="write the table in bench/results' shape: auto (bench/results/fairness.json) or FILE")
    ap.add_argument("--command", default="bench/fairness.sh", help="the command, for --results")
    ap.add_argument("--threads", type=int, help="svc's --threads, for --results")
    ap.add_argument("--parallel", type=int, help="svc's --parallel, for --results")
    args = ap.parse_args()
    started = time.time()
    conditions = args.conditions.split(",")
    results = []
    for r in range(args.rounds):
        for condition in conditions:
            m = await measure(args, condition)
            m["round"] = r
            results.append(m)
            print(f"round {r} {condition}: TTFT p50 {1000 * m['p50']:.0f} ms, max {1000 * m['max']:.0f} ms, "
                  f"{m['ended']} of A's requests ended meanwhile, others' CPU {100 * m['foreign']:.0f}%",
                  file=sys.stderr)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1))
    a_key = args.key.split(",")[1]
    async with httpx.AsyncClient(base_url=args.url, headers={"Authorization": f"Bearer {a_key}"},
                                 timeout=900) as hogger:
        one, many = await charged(hogger, args, 1), await charged(hogger, args, args.hogs)
    print(f"| B's request, while | TTFT p50 | TTFT max | A's requests ended | others' CPU (worst) |")
    print("|---|---:|---:|---:|---:|")
    for condition in conditions:
        ms = [m for m in results if m["condition"] == condition]
        p50 = statistics.median(m["p50"] for m in ms)
        worst = statistics.median(m["max"] for m in ms)
        ended = statistics.median(m["ended"] for m in ms)
        print(f"| {NAMES[condition]} | {1000 * p50:.0f} ms | {1000 * worst:.0f} ms | {ended:.0f} | "
              f"{100 * max(m['foreign'] for m in ms):.0f}% |")
    print(f"\nPrompt tokens reported for one scored request of {args.prompt_tokens} words: "
          f"n = 1: {one}, n = {args.hogs}: {many}.")
    if args.results:
        write_results(args, conditions, results, one, many, started)


# Issue 61's security review: B's TTFT p50 beside the same work before the
# fix, with svc serve --threads 1 --parallel 8, 8 of A's requests of 500
# words (milliseconds).
REVIEW_MS = {"idle": 86, "generating": 200, "prompts": 12100, "scored": 32500, "scored-n": 31400}


def label(condition: str, args) -> str:
    return {
        "idle": "nothing else runs",
        "generating": f"A's {args.hogs} long generations (reference)",
        "prompts": f"A's {args.hogs} plain {args.prompt_tokens}-token prompts",
        "scored": f"A's {args.hogs} scored {args.prompt_tokens}-token prompts",
        "scored-n": f"one scored request of A's with n = {args.hogs}",
    }[condition]


def write_results(args, conditions: list, measured: list, one: int, many: int, started: float) -> None:
    """The table as bench/results/fairness.json (bench/results.py's shape)."""
    review = (args.threads, args.parallel, args.hogs, args.prompt_tokens) == (1, 8, 8, 500)
    rows = []
    for condition in conditions:
        ms = [m for m in measured if m["condition"] == condition]
        rows.append({"condition": condition, "label": label(condition, args),
                     "ttft_p50_ms": round(1000 * statistics.median(m["p50"] for m in ms)),
                     "ttft_max_ms": round(1000 * statistics.median(m["max"] for m in ms)),
                     "a_ended": round(statistics.median(m["ended"] for m in ms)),
                     "foreign": round(max(m["foreign"] for m in ms), 3),
                     "review_ms": REVIEW_MS[condition] if review else None})
    by = {r["condition"]: r for r in rows}
    summary = []
    for condition in ("scored", "scored-n", "prompts", "generating"):
        r = by.get(condition)
        base = REVIEW_MS[condition] if review else (by["generating"]["ttft_p50_ms"] if "generating" in by else None)
        if r and base and (review or condition != "generating"):
            name = ("issue 61's review, before the fix, same settings" if review
                    else "B's TTFT beside A's long generations")
            summary.append(result_files.compare(
                condition, f"key B's TTFT p50 beside {r['label'].replace(' (reference)', '')}", "ms", "lower",
                r["ttft_p50_ms"], base, reference_name=name))
    doc = result_files.document(
        "fairness", title="One key's prompt work beside another key's first token", external=False,
        script="bench/fairness.sh", command=args.command,
        reference="key B's TTFT beside key A's long generations (the same run)"
                  + (", and issue 61's review before the fix (same settings)" if review else ""),
        summary=summary, rows=rows, started=started,
        notes=f"svc serve --threads {args.threads} --parallel {args.parallel}; B sends {args.asks} short streamed "
              f"requests a condition; medians over {args.rounds} rounds. One scored request of "
              f"{args.prompt_tokens} words reports {one} prompt tokens with n = 1 and {many} with n = {args.hogs}.")
    if args.results != "auto":
        os.environ["BENCH_RESULTS"] = args.results
    result_files.write(doc, partial=set(conditions) != set(CONDITIONS))


if __name__ == "__main__":
    asyncio.run(main())
