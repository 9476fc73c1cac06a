#!/usr/bin/env python3
"""Single-stream comparison, svc's engine vs llama.cpp, in one run.

Runs --rounds rounds; each round runs svc's example bench
(crates/svc-engine-llama/examples/bench.rs, `--runs R --streams 1`) and
llamacpp_bench.py (`--runs R`) one after the other, alternating which goes
first, each after a wait for a quiet machine, each with the share of the
machine used by other processes recorded. Each program loads the model,
does one warm-up generation and R timed ones, and reports medians; the
result here is the median over rounds, and the ratio of the medians.

Prints one JSON object on stdout.
"""

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from cpuload import ForeignLoad, wait_quiet  # noqa: E402

SVC_LINE = re.compile(
    r"single stream: prompt (\d+) tokens: ([\d.]+) tokens/s \(time to first token ([\d.]+) ms\); "
    r"decode (\d+) tokens: ([\d.]+) tokens/s"
)


def run(cmd: list[str]) -> tuple[str, float, float]:
    with ForeignLoad() as load:
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout, wall, load.share


def svc_once(args) -> dict:
    cmd = [args.svc_bench, args.model, "--threads", str(args.threads), "--prompt", str(args.prompt),
           "--gen", str(args.gen), "--runs", str(args.runs), "--streams", "1",
           "--flash-attn", args.flash_attn]
    out, wall, foreign = run(cmd)
    m = SVC_LINE.search(out)
    if not m:
        sys.exit(f"unexpected output of {cmd[0]}:\n{out}")
    return {"prompt_tokens": int(m[1]), "prompt_tps": float(m[2]), "ttft_ms": float(m[3]),
            "gen_tokens": int(m[4]), "decode_tps": float(m[5]), "wall_s": wall, "foreign": foreign,
            "header": out.splitlines()[0]}


def llama_once(args) -> dict:
    cmd = [args.python, str(Path(__file__).parent / "llamacpp_bench.py"), args.model,
           "--threads", str(args.threads), "--prompt", str(args.prompt), "--gen", str(args.gen),
           "--runs", str(args.runs), "--flash-attn", args.flash_attn]
    out, wall, foreign = run(cmd)
    d = json.loads(out)
    d.update(wall_s=wall, foreign=foreign)
    return d


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--svc-bench", required=True, help="the example bench binary")
    ap.add_argument("--python", default=sys.executable, help="the venv's python, with llama_cpp")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--flash-attn", choices=["on", "off", "auto"], default="auto")
    ap.add_argument("--quiet-wait", type=float, default=60.0,
                    help="seconds to wait at most for an idle machine before each program")
    ap.add_argument("--max-foreign", type=float, default=0.10,
                    help="redo a measurement when others used more than this share of the CPUs")
    ap.add_argument("--retries", type=int, default=2)
    args = ap.parse_args()

    rounds = []
    for r in range(args.rounds):
        order = ["svc", "llama"] if r % 2 == 0 else ["llama", "svc"]
        result = {}
        for name in order:
            # On a shared machine, a run during which other processes took a
            # real share of the CPUs is not comparable: redo it (a few times).
            for attempt in range(args.retries + 1):
                before = wait_quiet(args.quiet_wait)
                res = svc_once(args) if name == "svc" else llama_once(args)
                res["busy_before"] = before
                res["attempts"] = attempt + 1
                if name not in result or res["foreign"] < result[name]["foreign"]:
                    result[name] = res
                if res["foreign"] <= args.max_foreign:
                    break
                print(f"  round {r + 1} {name}: others used {100 * res['foreign']:.0f}% of the CPUs, "
                      "measuring again", file=sys.stderr)
            print(f"  round {r + 1}/{args.rounds} {name:5}: prompt {result[name]['prompt_tps']:.1f} t/s, "
                  f"decode {result[name]['decode_tps']:.1f} t/s, others used "
                  f"{100 * result[name]['foreign']:.0f}% of the CPUs", file=sys.stderr)
        rounds.append(result)

    def med(side: str, key: str) -> float:
        return statistics.median(r[side][key] for r in rounds)

    summary = {}
    for key in ("prompt_tps", "decode_tps", "ttft_ms"):
        summary[key] = {"svc": med("svc", key), "llama": med("llama", key)}
        summary[key]["ratio"] = summary[key]["svc"] / summary[key]["llama"]
        summary[key]["round_ratios"] = [r["svc"][key] / r["llama"][key] for r in rounds]
    print(json.dumps({
        "threads": args.threads, "runs": args.runs, "rounds": args.rounds,
        "flash_attn": args.flash_attn, "gen": args.gen,
        "prompt_tokens": {"svc": rounds[0]["svc"]["prompt_tokens"],
                          "llama": rounds[0]["llama"]["prompt_tokens"]},
        "svc_header": rounds[0]["svc"]["header"],
        "llama_engine": rounds[0]["llama"]["engine"],
        "llama_system_info": rounds[0]["llama"]["system_info"],
        "max_foreign": max(max(r["svc"]["foreign"], r["llama"]["foreign"]) for r in rounds),
        "summary": summary,
        "per_round": rounds,
    }))


if __name__ == "__main__":
    main()
