#!/usr/bin/env python3
"""The benchmarks' result files: bench/results/AREA.json, one per area.

bench/charts.py reads them and draws bench/charts/*.svg and the results
table at the top of BENCHMARKS.md. The bench scripts write them through
this module (write(); bench/gateway.sh through `python3 bench/results.py
gateway DIR`, and `python3 bench/results.py command SCRIPT ARGS...` gives
the command line they record); the first files were transcribed from
BENCHMARKS.md, and their "source" says so. Python's standard library only.

Every file is one JSON object:

  area       the file's name without .json ("gateway")
  title      what was measured: the heading of its section in BENCHMARKS.md
  external   true when the reference is another program (llama-server,
             LiteLLM, ...), false when it is svc itself (a floor, a setting
             off, the code before a fix); charts.py's summary chart shows
             the first kind
  script     the bench script ("bench/gateway.sh")
  command    the whole command, its settings included
  reference  what svc is measured against
  date       the run's date, UTC (YYYY-MM-DD); "time": its time or span, UTC
  commit     the svc commit measured (a short hash; "+ changes" when the
             working tree differed from it in crates/)
  machine    the CPU model and how many the machine has
  source     how the file was made: written by its script, or transcribed
  summary    the rows of BENCHMARKS.md's first table, each a comparison:
             {key, label, unit, better: "higher" | "lower", svc, reference,
             reference_name}, and "ratio" (svc ÷ reference) where the run
             printed one from its unrounded numbers
  rows       the area's own table, as its script prints it:
               gateway     {run, path, rps, p50_ms, p99_ms, non_2xx}; the
                           run "health" is the reference
               overhead    {target, offered_rps, ok, errors, p50_ms, p99_ms,
                           overhead_p50_ms, overhead_p99_ms, peak_rps}
               fairness    {condition, label, ttft_p50_ms, ttft_max_ms,
                           a_ended, foreign, review_ms}
               embeddings  {clients, svc_emb_s, svc_p50_ms, svc_p99_ms,
                           svc_errors, peer_emb_s, peer_p50_ms, peer_p99_ms,
                           peer_errors}
               the others  comparisons, as in summary, with a "key" and,
                           where the script has them, "target" and
                           "foreign" (the share of the CPUs other
                           processes used: svc's run, the reference's)
  notes      optional: what else the run printed (settings, lengths)

A run that measured only part of its area (BENCH_ONLY, BENCH_QUICK, some
conditions) is written to AREA.partial.json instead, which git ignores and
charts.py skips, so that it never replaces a full run by accident.
BENCH_RESULTS=FILE writes elsewhere, BENCH_RESULTS=none not at all.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def git_commit() -> str:
    """The checkout's commit, "+ changes" when crates/ differs from it; when
    the script was handed an svc binary (BENCH_SVC_BIN, SVC_BIN), says so:
    the binary may not have been built from the checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        clean = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "crates"], cwd=ROOT).returncode == 0
    except (OSError, subprocess.CalledProcessError):
        head, clean = "unknown", True
    commit = head if clean else f"{head} + changes"
    binary = os.environ.get("BENCH_SVC_BIN") or os.environ.get("SVC_BIN")
    return f"{commit} (the checkout; svc from {binary})" if binary else commit


def machine() -> str:
    """The CPU model and count, as /proc/cpuinfo names it."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    model = re.sub(r"\((R|TM)\)", "", model)
    gpus = ""
    try:  # an NVIDIA GPU, when the machine has one
        names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=20, check=True).stdout.split("\n")
        gpus = ", ".join(n.strip() for n in names if n.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return f"{gpus + ' and ' if gpus else ''}{model}, {os.cpu_count()} CPUs"


def command(script: str, args: list[str], env_prefixes=("BENCH_",)) -> str:
    """The command as run: the settings it was given, the script, its arguments."""
    settings = [f"{k}={shlex.quote(v)}" for k, v in sorted(os.environ.items())
                if k.startswith(tuple(env_prefixes)) and k not in ("BENCH_RESULTS", "BENCH_KEEP_JSON", "BENCH_KEEP")]
    return " ".join(settings + [shlex.quote(w) for w in [script, *args]])


def compare(key: str, label: str, unit: str, better: str, svc, reference, **extra) -> dict:
    """One comparison row: svc's number against the reference's."""
    assert better in ("higher", "lower"), better
    return {"key": key, "label": label, "unit": unit, "better": better, "svc": svc, "reference": reference,
            **extra}


def document(area: str, *, title: str, external: bool, script: str, command: str, reference: str,
             summary: list, rows: list, started: float | None = None, notes: str | None = None,
             source: str | None = None, commit: str | None = None) -> dict:
    """A result file's object; the date, time, commit and machine are this run's."""
    at = time.gmtime(started if started is not None else time.time())
    end = time.gmtime()
    span = time.strftime("%H:%M", at) + ("" if time.strftime("%H:%M", end) == time.strftime("%H:%M", at)
                                         else time.strftime("-%H:%M", end)) + " UTC"
    doc = {
        "area": area, "title": title, "external": external, "script": script, "command": command, "reference": reference,
        "date": time.strftime("%Y-%m-%d", at), "time": span, "commit": commit or git_commit(),
        "machine": machine(), "source": source or f"written by {script}",
        "summary": summary, "rows": rows,
    }
    if notes:
        doc["notes"] = notes
    return doc


def write(doc: dict, partial: bool = False) -> Path | None:
    """Writes doc to bench/results/AREA.json (AREA.partial.json for a partial
    run), or where BENCH_RESULTS says; returns the path."""
    target = os.environ.get("BENCH_RESULTS", "")
    if target == "none":
        return None
    path = Path(target) if target else RESULTS / (doc["area"] + (".partial.json" if partial else ".json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"results: {path}{' (a partial run)' if partial else ''}; `python3 bench/charts.py` draws them",
          file=sys.stderr)
    return path


# ---- bench/gateway.sh: wrk's reports ----

def wrk_ms(text: str) -> float:
    """wrk's latency ("844.00us", "1.60ms", "1.02s", "2.00m") in milliseconds."""
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not m:
        raise ValueError(f"not a wrk latency: {text!r}")
    return round(float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[m.group(2)], 4)


def wrk_report(text: str) -> dict:
    """Requests/s, p50, p99 and non-2xx answers of one `wrk --latency` report."""
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    p50 = re.search(r"^\s+50%\s+(\S+)", text, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", text, re.M)
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    if not (rps and p50 and p99):
        raise ValueError("not a wrk --latency report")
    return {"rps": round(float(rps.group(1))), "p50_ms": wrk_ms(p50.group(1)), "p99_ms": wrk_ms(p99.group(1)),
            "non_2xx": int(errors.group(1)) if errors else 0}


GATEWAY_RUNS = (("health", "/health"), ("auth", "/v1/models"), ("chat", "/v1/chat/completions"),
                ("stream", "/v1/chat/completions"), ("resp", "/v1/responses"), ("resp-sse", "/v1/responses"),
                ("msgs", "/v1/messages"), ("msgs-sse", "/v1/messages"))


def gateway(folder: Path, secs: str, conns: str, started: float | None) -> dict:
    rows = []
    for run, path in GATEWAY_RUNS:
        report = folder / f"{run}.txt"
        if report.exists():
            rows.append({"run": run, "path": path, **wrk_report(report.read_text())})
    by = {r["run"]: r for r in rows}
    health, chat = by.get("health"), by.get("chat")
    summary = []
    if health and chat:
        summary = [
            compare("chat.rps", "a chat completion, whole: throughput", "req/s", "higher", chat["rps"],
                    health["rps"], reference_name="GET /health"),
            compare("chat.p50", "a chat completion, whole: p50", "ms", "lower", chat["p50_ms"], health["p50_ms"],
                    reference_name="GET /health"),
            compare("chat.p99", "a chat completion, whole: p99", "ms", "lower", chat["p99_ms"], health["p99_ms"],
                    reference_name="GET /health"),
        ]
    return document(
        "gateway", title="HTTP layer against /health", external=False, script="bench/gateway.sh",
        command=command("bench/gateway.sh", [secs, conns]),
        reference="GET /health: the same server and stack, no key check, no engine",
        summary=summary, rows=rows, started=started,
        notes=f"svc-fake-server (release, zero-latency scripted engine, SQLite), wrk -t2 -c{conns}, "
              f"{secs} s a path, over loopback on the same CPUs")


def main() -> int:
    import argparse
    ap = argparse.ArgumentParser(description="Writes a result file from a bench script's raw output.")
    sub = ap.add_subparsers(dest="area", required=True)  # an area, or "command"
    g = sub.add_parser("gateway", help="bench/gateway.sh: a folder of wrk --latency reports, RUN.txt")
    g.add_argument("folder", type=Path)
    g.add_argument("--secs", required=True)
    g.add_argument("--conns", required=True)
    g.add_argument("--started", type=float, help="the run's start, seconds since the epoch")
    c = sub.add_parser("command", help="print a script's command line as a result file records it")
    c.add_argument("--env", action="append", default=[],
                   help="the prefix of the settings (environment variables) to show; default BENCH_")
    c.add_argument("script")
    c.add_argument("args", nargs="*")
    a = ap.parse_args()
    if a.area == "gateway":
        write(gateway(a.folder, a.secs, a.conns, a.started))
    elif a.area == "command":
        print(command(a.script, a.args, tuple(a.env) or ("BENCH_",)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
