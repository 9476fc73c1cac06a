#!/usr/bin/env python3
"""Draws the benchmarks' charts and BENCHMARKS.md's results table from the
result files.

Reads bench/results/*.json (their shape: bench/results.py; *.partial.json
are skipped), writes bench/charts/*.svg and the table between the
`<!-- results table -->` markers at the top of BENCHMARKS.md. The SVGs are
plain (no script, no external font or style, a white background, a
viewBox) so that GitHub shows them as images; the same files give the same
bytes, so a chart changes only when its numbers do. Python's standard
library only.

Usage: python3 bench/charts.py          # write the charts and the table
       python3 bench/charts.py --check  # exit 1 when they differ from what
                                        # the result files give (scripts/docs.sh)
"""

import argparse
import html
import json
import math
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CHARTS = ROOT / "bench" / "charts"
PAGE = ROOT / "BENCHMARKS.md"
BEGIN, END = "<!-- results table: bench/charts.py writes it -->", "<!-- end of the results table -->"

# The table's order; an area not named here comes after these, by name.
ORDER = ["vs-llama-server", "vs-llama-server-h100", "engine", "gateway", "overhead", "embeddings", "models",
         "mcp", "fairness", "batch", "prefix-routing", "observability", "cache"]

WIDTH = 820
SVC, REF, GOOD, BAD, INK, GREY, GRID = "#2b6cb0", "#a0aec0", "#2f855a", "#c05621", "#1a202c", "#4a5568", "#e2e8f0"


# ---- loading ----

def load() -> dict:
    docs = {}
    for path in sorted(RESULTS.glob("*.json")):
        if path.name.endswith(".partial.json"):
            continue
        doc = json.loads(path.read_text(encoding="utf-8"))
        docs[path.stem] = doc
    return docs


def ordered(docs: dict) -> list:
    known = [a for a in ORDER if a in docs]
    return [docs[a] for a in known + sorted(set(docs) - set(known))]


# ---- numbers ----

def svc_ratio(row: dict):
    """svc ÷ reference: the run's own "ratio" where it printed one (from
    unrounded numbers), else from the numbers shown; None without a reference."""
    if row.get("ratio"):
        return row["ratio"]
    s, r = row["svc"], row["reference"]
    return s / r if s and r else None


def advantage(row: dict) -> float:
    """How many times better svc is: svc ÷ reference where higher is better,
    reference ÷ svc where lower is."""
    x = svc_ratio(row)
    if not x:
        return 1.0
    return x if row["better"] == "higher" else 1 / x


def num(v) -> str:
    """A number as the runs print it: thousands separated, its own decimals."""
    if isinstance(v, float) and v.is_integer() and abs(v) >= 100:
        v = int(v)
    return format(v, ",")


def ratio(row: dict) -> str:
    x = svc_ratio(row)
    if not x:
        return "–"
    return f"{x:.0f}×" if x >= 10 else f"{x:.2f}×" if x >= 0.1 else f"{x:.3f}×"


def anchor(heading: str) -> str:
    """GitHub's and mdBook's anchor of a heading (as scripts/check-links.py)."""
    text = "".join(ch for ch in heading.lower() if ch.isalnum() or ch in "-_ ")
    return text.strip().replace(" ", "-")


def provenance(doc: dict) -> str:
    when = doc["date"] + (f" {doc['time']}" if doc.get("time") else "")
    return f"{doc['machine']} · {doc['script']} · {when} · commit {doc['commit']}"


# ---- SVG ----

def esc(s) -> str:
    return html.escape(str(s), quote=True)


def text_width(s: str, size: float = 12) -> float:
    """A generous estimate of the width of s in a sans-serif font."""
    narrow = sum(s.count(c) for c in "il.,:;|!' ()[]ft")
    return size * (0.58 * (len(s) - narrow) + 0.3 * narrow)


class Svg:
    def __init__(self, title: str):
        self.title, self.parts, self.height = title, [], 0.0

    def text(self, x, y, s, anchor="start", size=12, weight="normal", fill=INK):
        w = "" if weight == "normal" else f' font-weight="{weight}"'
        self.parts.append(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}"{w} '
                          f'fill="{fill}">{esc(s)}</text>')

    def rect(self, x, y, w, h, fill):
        self.parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0.5):.1f}" height="{h:.1f}" '
                          f'fill="{fill}"/>')

    def line(self, x1, y1, x2, y2, stroke=GRID, dash=None, width=1):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}" '
                          f'stroke-width="{width}"{d}/>')

    def header(self, title: str, subtitle: str) -> float:
        self.text(12, 22, title, size=15, weight="bold")
        self.text(12, 40, subtitle, size=11, fill=GREY)
        return 56

    def render(self) -> str:
        h = math.ceil(self.height)
        return "\n".join([
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{h}" viewBox="0 0 {WIDTH} {h}" '
            f'font-family="sans-serif" font-size="12">',
            f"<title>{esc(self.title)}</title>",
            f'<rect x="0" y="0" width="{WIDTH}" height="{h}" fill="#ffffff"/>',
            *self.parts, "</svg>", ""])


def log_ticks(lo: float, hi: float, base_ticks=(1, 2, 5)) -> list:
    """Round values (1, 2, 5 × 10^k) between lo and hi."""
    ticks = []
    k = math.floor(math.log10(lo))
    while 10 ** k <= hi * 1.0001:
        ticks += [b * 10 ** k for b in base_ticks if lo <= b * 10 ** k <= hi * 1.0001]
        k += 1
    return ticks


def fit_ticks(lo: float, hi: float, pos, gap: float = 40) -> list:
    """The densest round log ticks whose labels stay gap pixels apart."""
    for base in ((1, 2, 5), (1, 3), (1,)):
        ticks = log_ticks(lo, hi, base)
        xs = [pos(t) for t in ticks]
        if all(b - a >= gap for a, b in zip(xs, xs[1:])):
            return ticks
    return ticks


def tick_label(v: float, unit: str = "") -> str:
    s = f"{v:g}" if v < 1000 else f"{v:,.0f}"
    return s + unit


def target_advantage(row: dict):
    """The row's target as an advantage (a "≤ 0.8×" time is 1.25), or None."""
    t = row.get("target", "")
    digits = "".join(ch for ch in t if ch.isdigit() or ch == ".")
    if not digits:
        return None
    x = float(digits)
    return x if row["better"] == "higher" else 1 / x


def advantage_chart(title: str, subtitle: str, groups: list) -> str:
    """Horizontal bars of svc's advantage over the reference, on a log scale
    centred on 1×: right of it svc is ahead. groups: [(heading or None,
    rows)]; rows are comparisons (bench/results.py)."""
    svg = Svg(title)
    y = svg.header(title, subtitle)
    rows = [r for _, rs in groups for r in rs]
    labels = [r["label"] for r in rows]
    notes = [note(r) for r in rows]
    label_w = min(max(text_width(s) for s in labels) + 8, 390)
    note_w = min(max(text_width(s, 11) for s in notes) + 10, 260)
    x0, x1 = 12 + label_w, WIDTH - 12 - note_w
    advs = [advantage(r) for r in rows] + [t for t in map(target_advantage, rows) if t]
    lo, hi = min(min(advs), 0.8) / 1.15, max(max(advs), 1.25) * 1.15
    pos = lambda v: x0 + (x1 - x0) * (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo))  # noqa: E731
    ticks = fit_ticks(lo, hi, pos)
    y += 6
    svg.text(pos(1) - 6, y, "← svc behind", anchor="end", size=11, fill=BAD)
    svg.text(pos(1) + 6, y, "svc ahead →", size=11, fill=GOOD)
    y += 8
    top = y
    grid_at = len(svg.parts)
    body = []
    for heading, rs in groups:
        if heading:
            body.append(("heading", heading))
        body += [("row", r) for r in rs]
    y += 4
    for kind, item in body:
        if kind == "heading":
            svg.text(12, y + 15, item, size=12, weight="bold", fill=GREY)
            y += 22
            continue
        r = item
        a = advantage(r)
        svg.text(12 + label_w - 8, y + 14, r["label"], anchor="end")
        left, right = sorted((pos(1), pos(a)))
        svg.rect(left, y + 4, right - left, 14, GOOD if a >= 1 else BAD)
        t = target_advantage(r)
        if t:
            svg.line(pos(t), y + 1, pos(t), y + 21, stroke=INK, width=2)
        svg.text(x1 + 10, y + 14, note(r), size=11)
        y += 22
    bottom = y + 2
    # The grid goes under the bars: into the parts before the first bar.
    svg.parts[grid_at:grid_at] = [
        f'<line x1="{pos(t):.1f}" y1="{top:.1f}" x2="{pos(t):.1f}" y2="{bottom:.1f}" '
        f'stroke="{INK if t == 1 else GRID}" stroke-width="1"/>' for t in ticks]
    for t in ticks:
        svg.text(pos(t), bottom + 14, tick_label(t, "×"), anchor="middle", size=11, fill=GREY)
    y = bottom + 32
    legend = ("bar: svc's advantage, how many times better svc is (rates: svc ÷ reference; times and memory: "
              "reference ÷ svc)")
    svg.text(12, y, legend, size=11, fill=GREY)
    if any(target_advantage(r) for r in rows):
        svg.text(12, y + 15, "black tick: the row's target", size=11, fill=GREY)
        y += 15
    svg.height = y + 12
    return svg.render()


def note(r: dict) -> str:
    """"1.59× better: 54 vs 86 ms"."""
    a = advantage(r)
    times = a if a >= 1 else 1 / a
    how = f"{times:.0f}×" if times >= 10 else f"{times:.2f}×"
    return f"{how} {'better' if a >= 1 else 'worse'}: {num(r['svc'])} vs {num(r['reference'])} {r['unit']}"


def bar_chart(title: str, subtitle: str, categories: list, series: list, unit: str, log: bool = False,
              refs: list = ()) -> str:
    """Horizontal bars, one per series in each category. categories: [label];
    series: [(name, colour, [value or None per category])]; refs: [(label,
    value)] drawn as dashed lines across the chart."""
    svg = Svg(title)
    y = svg.header(title, subtitle)
    values = [v for _, _, vs in series for v in vs if v] + [v for _, v in refs]
    label_w = min(max(text_width(c) for c in categories) + 8, 390)
    x0, x1 = 12 + label_w, WIDTH - 80
    if log:
        lo, hi = min(values) / 1.5, max(values) * 1.3
        pos = lambda v: x0 + (x1 - x0) * (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo))  # noqa: E731
        ticks = fit_ticks(lo, hi, pos)
    else:
        lo, hi = 0.0, max(values) * 1.08
        step = nice_step(hi / 6)
        ticks = [i * step for i in range(int(hi / step) + 1)]
        pos = lambda v: x0 + (x1 - x0) * v / hi  # noqa: E731
    # legend
    lx = x0
    for name, colour, _ in series:
        svg.rect(lx, y - 9, 10, 10, colour)
        svg.text(lx + 14, y, name, size=11)
        lx += text_width(name, 11) + 34
    for label, _ in refs:
        svg.line(lx, y - 4, lx + 18, y - 4, stroke=INK, dash="4 3", width=1.5)
        svg.text(lx + 22, y, label, size=11)
        lx += text_width(label, 11) + 40
    y += 12
    top = y
    bar_h, gap = 13, 12
    grid_at = len(svg.parts)
    for i, cat in enumerate(categories):
        n = sum(1 for _, _, vs in series if vs[i] is not None)
        h = n * (bar_h + 2)
        svg.text(12 + label_w - 8, y + h / 2 + 4, cat, anchor="end")
        by = y
        for name, colour, vs in series:
            v = vs[i]
            if v is None:
                continue
            svg.rect(x0, by, pos(v) - x0, bar_h, colour)
            svg.text(pos(v) + 4, by + bar_h - 2, tick_label_value(v), size=11)
            by += bar_h + 2
        y += h + gap
    bottom = y - gap + 6
    grid = [f'<line x1="{pos(t):.1f}" y1="{top:.1f}" x2="{pos(t):.1f}" y2="{bottom:.1f}" stroke="{GRID}" '
            f'stroke-width="1"/>' for t in ticks if lo <= t <= hi]
    svg.parts[grid_at:grid_at] = grid
    for _, v in refs:
        svg.line(pos(v), top - 4, pos(v), bottom, stroke=INK, dash="4 3", width=1.5)
    for t in ticks:
        if lo <= t <= hi:
            svg.text(pos(t), bottom + 14, tick_label(t), anchor="middle", size=11, fill=GREY)
    svg.text(x1, bottom + 30, unit + (", log scale" if log else ""), anchor="end", size=11, fill=GREY)
    svg.height = bottom + 42
    return svg.render()


def nice_step(x: float) -> float:
    k = 10 ** math.floor(math.log10(x))
    return next(m * k for m in (1, 2, 2.5, 5, 10) if m * k >= x)


def tick_label_value(v: float) -> str:
    if v >= 100 or float(v).is_integer():
        return f"{v:,.0f}"
    return f"{v:.3g}" if v < 10 else f"{v:.1f}"


# ---- the charts ----

def chart_summary(docs: list) -> str:
    groups = [(f"{d['title']} ({d['date']})", d["summary"]) for d in docs if d.get("summary") and d.get("external")]
    return advantage_chart("svc against other programs", "the rows of BENCHMARKS.md's table whose reference is "
                           "another program; each group is one run (its machine, command and commit: the table)",
                           groups)


def chart_comparison(doc: dict) -> str:
    return advantage_chart(doc["title"], provenance(doc), [(None, doc["rows"])])


def chart_gateway(doc: dict) -> str:
    rows = doc["rows"]
    cats = [f"{r['run']}  {r['path']}" for r in rows]
    health = next((r for r in rows if r["run"] == "health"), None)
    refs = [("/health p50", health["p50_ms"]), ("/health p99", health["p99_ms"])] if health else []
    return bar_chart(f"{doc['title']}: latency percentiles at {doc['command'].split()[-1]} connections",
                     provenance(doc), cats,
                     [("p50", SVC, [r["p50_ms"] for r in rows]), ("p99", "#90cdf4", [r["p99_ms"] for r in rows])],
                     "milliseconds", refs=refs)


def chart_overhead(doc: dict) -> str:
    rows = [r for r in doc["rows"] if r.get("overhead_p50_ms") is not None]
    slow = min(r["offered_rps"] for r in rows)
    rows = [r for r in rows if r["offered_rps"] == slow]
    cats = [r["target"] for r in rows]
    return bar_chart(f"What a gateway adds to the upstream's latency at {slow} req/s", provenance(doc), cats,
                     [("added to p50", SVC, [max(r["overhead_p50_ms"], 0.001) for r in rows]),
                      ("added to p99", "#90cdf4", [max(r["overhead_p99_ms"], 0.001) for r in rows])],
                     "milliseconds", log=True)


def chart_fairness(doc: dict) -> str:
    rows = doc["rows"]
    series = [("this run: key B's TTFT p50", SVC, [r["ttft_p50_ms"] for r in rows])]
    if any(r.get("review_ms") for r in rows):
        series.append(("before the fix (issue 61's review)", REF, [r.get("review_ms") for r in rows]))
    return bar_chart("Key B's first token beside key A's work", provenance(doc), [r["label"] for r in rows],
                     series, "milliseconds", log=True)


def chart_embeddings(doc: dict) -> str:
    rows = doc["rows"]
    cats = [f"{r['clients']} client{'s' if r['clients'] != 1 else ''}" for r in rows]
    return bar_chart(doc["title"], provenance(doc), cats,
                     [("svc-embed", SVC, [r["svc_emb_s"] for r in rows]),
                      ("sentence-transformers", REF, [r["peer_emb_s"] for r in rows])],
                     "embeddings per second")


def charts(docs: dict) -> dict:
    out = {"summary.svg": chart_summary(ordered(docs))}
    for area in ("vs-llama-server", "vs-llama-server-h100", "models"):
        if area in docs:
            out[f"{area}.svg"] = chart_comparison(docs[area])
    for area, draw in (("gateway", chart_gateway), ("overhead", chart_overhead), ("fairness", chart_fairness),
                       ("embeddings", chart_embeddings)):
        if area in docs:
            out[f"{area}.svg"] = draw(docs[area])
    return out


# ---- the table ----

def table(docs: list) -> str:
    lines = [BEGIN, "", "| measure | svc | reference | svc ÷ reference |", "|---|---:|---:|---:|"]
    for d in docs:
        if not d.get("summary"):
            continue
        names = Counter(r.get("reference_name", "") for r in d["summary"])
        main = names.most_common(1)[0][0]
        when = d["date"] + (f" {d['time']}" if d.get("time") else "")
        lines.append(f"| **[{d['title']}](#{anchor(d['title'])})**, against {main}: `{d['script']}`, {when}, "
                     f"commit `{d['commit']}`, {d['machine']} | | | |")
        for r in d["summary"]:
            arrow = "↑" if r["better"] == "higher" else "↓"
            ref = num(r["reference"])
            if r.get("reference_name", "") != main:
                ref += f" ({r['reference_name']})"
            lines.append(f"| {r['label']} ({r['unit']} {arrow}) | {num(r['svc'])} | {ref} | "
                         f"{ratio(r)} |")
    lines += ["", END]
    return "\n".join(lines)


def page_with_table(page: str, docs: list) -> str:
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"charts.py: {PAGE.name} has no results table markers ({BEGIN} ... {END})")
    return page[:start] + table(docs) + page[end + len(END):]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only check that the charts and the table are current")
    a = ap.parse_args()
    docs = load()
    files = {CHARTS / name: svg for name, svg in charts(docs).items()}
    page = PAGE.read_text(encoding="utf-8")
    files[PAGE] = page_with_table(page, ordered(docs))
    stale = [p for p, text in files.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    if a.check:
        for p in stale:
            print(f"charts.py: {p.relative_to(ROOT)} is not what bench/results/ gives; run python3 bench/charts.py",
                  file=sys.stderr)
        return 1 if stale else 0
    CHARTS.mkdir(parents=True, exist_ok=True)
    for p in stale:
        p.write_text(files[p], encoding="utf-8")
    print(f"charts.py: {len(docs)} result files; wrote {len(stale)} of {len(files)} files"
          + "".join(f"\n  {p.relative_to(ROOT)}" for p in stale))
    return 0


if __name__ == "__main__":
    sys.exit(main())
