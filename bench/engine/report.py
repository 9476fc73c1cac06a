#!/usr/bin/env python3
"""Markdown tables from single.py's and http_load.py's JSON.

usage: report.py SINGLE.json HTTP.json
"""

import json
import sys

MIB = 1024 * 1024


def single_table(d: dict) -> str:
    s = d["summary"]
    pt = d["prompt_tokens"]
    lines = [
        f"Single stream, {d['threads']} threads, prompt {pt['svc']} tokens, decode {d['gen']} tokens "
        f"(EOS ignored), flash attention {d['flash_attn']}; median of {d['rounds']} rounds x "
        f"{d['runs']} runs after a warm-up:",
        "",
        "| metric | svc engine | llama.cpp | svc / llama.cpp | per-round ratios |",
        "|---|---:|---:|---:|---|",
    ]
    for key, label in (("prompt_tps", "prompt tokens/s"), ("decode_tps", "decode tokens/s"),
                       ("ttft_ms", "time to first token, ms")):
        v = s[key]
        rr = ", ".join(f"{x:.2f}" for x in v["round_ratios"])
        lines.append(f"| {label} | {v['svc']:.1f} | {v['llama']:.1f} | **{v['ratio']:.2f}** | {rr} |")
    lines.append("")
    lines.append(
        f"Target: prompt and decode ratio >= 0.95. Other processes used at most "
        f"{100 * d['max_foreign']:.0f}% of the CPUs during a measurement."
    )
    if pt["svc"] != pt["llama"]:
        lines.append(f"WARNING: prompt lengths differ (svc {pt['svc']}, llama.cpp {pt['llama']}).")
    return "\n".join(lines)


def http_table(d: dict, meta: dict) -> str:
    lv = d["levels"]
    base = lv[0]["tokens_per_s"]
    lines = [
        f"HTTP API, `svc serve --parallel {meta.get('parallel', '?')} --threads "
        f"{meta.get('threads', '?')}` (context {meta.get('context', 'default')}), streamed "
        f"chat completions, max_tokens {meta.get('max_tokens', '?')}, temperature 0; "
        f"median of {meta.get('rounds', '?')} rounds after a warm-up round per level:",
        "",
        "| streams | aggregate tokens/s | vs 1 stream | TTFT p50, ms | TTFT max, ms "
        "| tokens/stream (median) | hit max_tokens | peak RSS, MiB | server CPU | client CPU | others' CPU |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for x in lv:
        lines.append(
            f"| {x['concurrency']} | {x['tokens_per_s']:.1f} | {x['tokens_per_s'] / base:.2f}x "
            f"| {x['ttft_p50_ms']:.0f} | {x['ttft_max_ms']:.0f} | {x['tokens_per_stream']:.0f} "
            f"| {x['finish_length']}/{x['streams']} | {x['peak_rss'] / MIB:.0f} "
            f"| {x.get('server_cpu', 0):.2f} | {x.get('client_cpu', 0):.2f} "
            f"| {100 * x.get('foreign', 0):.0f}% |"
        )
    top = lv[-1]
    lines += [
        "",
        f"{top['concurrency']} streams vs 1: **{top['tokens_per_s'] / base:.2f}x** (target >= 3x).",
        "",
        "| server memory | VmRSS, MiB | VmHWM, MiB |",
        "|---|---:|---:|",
        f"| idle, model loaded | {d['idle']['VmRSS'] / MIB:.0f} | {d['idle']['VmHWM'] / MIB:.0f} |",
        f"| after the load test | {d['after']['VmRSS'] / MIB:.0f} | {d['after']['VmHWM'] / MIB:.0f} |",
    ]
    return "\n".join(lines)


def main() -> None:
    single = json.load(open(sys.argv[1]))
    http = json.load(open(sys.argv[2]))
    meta = http.get("meta", {})
    print(single_table(single))
    print()
    print(http_table(http, meta))


if __name__ == "__main__":
    main()
