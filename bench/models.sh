#!/usr/bin/env bash
# Models on demand (issue 45): svc serve loading [models.<id>] tables when
# first asked (`preload = false`, `keep_alive = "10m"`, `models_memory` room
# for two of the three) against llama.cpp's llama-server in router mode
# (`--models-preset` naming the same three GGUF files, `--models-max 2`, each
# model a child process), side by side, printed as Markdown:
#  1. cold TTFT per model: right after the server started, the first streamed
#     chat request to each of the three models in turn (time to the first
#     content chunk; each one is a load: the third evicts the first);
#  2. swap loop a,b,c,a,b,c,... (BENCH_SWAPS=9 requests, max_tokens 16), each
#     a cold load since only two fit: TTFT p50 and max, the loop's wall time,
#     and the loads each server's log counts during it;
#  3. RSS of the server's whole process tree (llama-server's router and its
#     children, summed; VmRSS, so the weights' mapped file pages count),
#     sampled every 100 ms: idle after start, peak and mean during the loop;
#  4. the share of the CPUs other processes used during the cold requests
#     and during the loop (/proc/stat less the server tree and this script).
# Each round starts each server afresh, one server at a time (the other is
# stopped), alternating which goes first; results are medians over rounds.
#
# The budget: a calibration start of svc without models_memory loads each
# model once and reads what svc counts for it (the `model loaded ... bytes`
# log line: weights plus the KV cells it reserves, the same number that
# GET /v1/models/<id> reports as residency.memory_bytes where that exists);
# models_memory is then the largest two together plus half the smallest
# margin by which a third would not fit. Before its first load svc reserves
# what the GGUF's header says the model will take (the log line's
# `estimate`; an svc before 1f410e4 counted the file's size, and has no
# `estimate`), so that margin is taken against that.
# The calibration run also warms the page cache for both servers' loads.
#
# Same files for both: svc's Q4_1 repack (a Q8_0 copy made beside the file)
# is off (`repack = false`). svc serves only the three files: `svc` and
# `svc-thinking` are tables on the first one (the same engine as it), so the
# default model and svc-embed are not loaded. llama-server router mode exists
# in the server sources the build uses (llama-cpp-python's sdist): the script
# stops with an error if the binary's --help lacks --models-max.
#
# Usage: bench/models.sh [A.gguf B.gguf C.gguf]
#   Default models, fetched with `svc pull --data-dir ${SVC_BENCH_DATA_DIR:-$HOME/.cache/svc-bench}`:
#   SmolLM2-135M-Instruct (svc's default), Gemma 3 270M (`svc pull gemma3`),
#   and a copy of SmolLM2 under another file name (besides these two,
#   `svc pull` fetches chat models only as `hf:` files from a Hugging Face
#   hub).
# Settings (environment):
#   BENCH_ROUNDS=3  BENCH_SWAPS=9  BENCH_MAX_TOKENS=16  BENCH_THREADS=2
#   BENCH_PARALLEL=4  BENCH_CONTEXT=4096 (tokens per slot; llama-server gets
#   -np PARALLEL -c PARALLEL*CONTEXT)  BENCH_MODELS_MEMORY (bytes: skip the
#   calibration and use this budget)  BENCH_QUIET_WAIT=30 (seconds to wait for
#   an idle machine before each server's round)
#   BENCH_SVC_ARGS: more `svc serve` flags; BENCH_LLAMA_SERVER_ARGS: more
#   llama-server flags (the router passes them to its children)
#   BENCH_SVC_BIN / BENCH_LLAMA_SERVER_BIN: use these binaries instead of
#   building them (llama-server: bench/llama-server-build.sh, cached)
#   BENCH_KEEP=DIR: keep the logs, configs and JSON there
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
source bench/llama-server-build.sh

log() { echo "$*" >&2; }
die() { log "bench/models.sh: $*"; exit 1; }

rounds=${BENCH_ROUNDS:-3}
swaps=${BENCH_SWAPS:-9}
max_tokens=${BENCH_MAX_TOKENS:-16}
threads=${BENCH_THREADS:-2}
parallel=${BENCH_PARALLEL:-4}
context=${BENCH_CONTEXT:-4096}
quiet=${BENCH_QUIET_WAIT:-30}
keep=${BENCH_KEEP:-}
data_cache=${SVC_BENCH_DATA_DIR:-$HOME/.cache/svc-bench}
command -v python3 >/dev/null || die "python3 is missing"
command -v curl >/dev/null || die "curl is missing"

ls_dir=${SVC_BENCH_LLAMA_SERVER:-$HOME/.cache/svc-bench/llama-server}
if [ -n "${BENCH_LLAMA_SERVER_BIN:-}" ]; then
  ls_bin=$BENCH_LLAMA_SERVER_BIN
  ls_from=$(head -n1 "$ls_bin.sources" 2>/dev/null || echo "$ls_bin")
else
  ls_bin=$(build_llama_server "$ls_dir") || die "llama-server build failed"
  ls_from=$(head -n1 "$ls_dir/bin/llama-server.sources")
fi
[ -x "$ls_bin" ] || die "no llama-server at $ls_bin"
"$ls_bin" --help 2>/dev/null | grep -q -- '--models-max' ||
  die "$ls_bin has no router mode (no --models-max in its --help): build one from llama.cpp sources that have tools/server/server-models.cpp"

# --- work dir: binaries copied so that a concurrent rebuild cannot swap them mid-run ---
work=$(mktemp -d)
cleanup() {
  local rc=$?
  # the Python driver writes every server pid it starts here
  if [ -f "$work/pids" ]; then
    while read -r p; do kill "$p" 2>/dev/null || true; done <"$work/pids"
    sleep 0.5
    while read -r p; do kill -9 "$p" 2>/dev/null || true; done <"$work/pids"
  fi
  if [ -n "$keep" ]; then
    mkdir -p "$keep"
    cp -r "$work"/*.log "$work"/*.json "$work"/*.toml "$work"/*.ini "$keep"/ 2>/dev/null || true
  fi
  rm -rf "$work"
  [ "$rc" = 0 ] || log "bench/models.sh failed (exit $rc)${keep:+; logs in $keep}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${BENCH_SVC_BIN:-}" ]; then
  cp "$BENCH_SVC_BIN" "$work/svc"
  svc_from=$BENCH_SVC_BIN
else
  log "building svc (release)"
  cargo build --release -q -p svc-cli --bin svc || die "svc build failed"
  cp "${CARGO_TARGET_DIR:-target}/release/svc" "$work/svc"
  svc_from="commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates 2>/dev/null || echo ' + uncommitted changes in crates/')"
fi
cp "$ls_bin" "$work/llama-server"

# --- the three models ---
if [ $# -eq 3 ]; then
  models=("$1" "$2" "$3")
elif [ $# -eq 0 ]; then
  mkdir -p "$data_cache"
  smol=$("$work/svc" pull --data-dir "$data_cache") || die "svc pull failed"
  gemma=$("$work/svc" pull gemma3 --data-dir "$data_cache") || die "svc pull gemma3 failed"
  copy=$data_cache/bench-models/smollm2-copy.gguf
  if ! cmp -s "$smol" "$copy"; then
    mkdir -p "${copy%/*}"
    cp "$smol" "$copy.tmp" && mv "$copy.tmp" "$copy"
  fi
  models=("$smol" "$gemma" "$copy")
else
  die "give three GGUF files or none"
fi
ids=()
for m in "${models[@]}"; do
  [ -f "$m" ] || die "no such model: $m"
  id=$(basename "$m" .gguf | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n-' '-')
  for seen in "${ids[@]}"; do [ "$seen" != "$id" ] || id=$id-2; done
  ids+=("$id")
done

# --- svc: a store with a key, and the config (models_memory added below) ---
data=$work/data
mkdir -p "$data"
key=$("$work/svc" keys create --data-dir "$data" --name bench) || die "svc keys create failed"
svc_tables() {
  local i
  echo "repack = false"
  echo "context = $context"
  echo "parallel = $parallel"
  echo "threads = $threads"
  for i in 0 1 2; do
    printf '\n[models.%s]\npath = "%s"\npreload = false\nkeep_alive = "10m"\n' "${ids[$i]}" "${models[$i]}"
  done
  # svc and svc-thinking on the first file: the same engine as its table
  printf '\n[models.svc]\npath = "%s"\npreload = false\nkeep_alive = "10m"\n' "${models[0]}"
  printf '\n[models.svc-thinking]\npath = "%s"\npreload = false\nkeep_alive = "10m"\nreasoning = true\n' "${models[0]}"
}
svc_tables >"$work/svc-calibrate.toml"

# --- llama-server: router presets naming the same files ---
{
  echo "version = 1"
  for i in 0 1 2; do printf '\n[%s]\nmodel = %s\n' "${ids[$i]}" "${models[$i]}"; done
} >"$work/llama-server.ini"
mkdir -p "$work/llama-cache" # LLAMA_CACHE: no cached models beside the presets
ls_args=(--models-preset "$work/llama-server.ini" --models-max 2 -np "$parallel"
  -c $((parallel * context)) -t "$threads" -tb "$threads" --no-webui)
# shellcheck disable=SC2206
ls_args+=(${BENCH_LLAMA_SERVER_ARGS:-})
svc_args=(--data-dir "$data" --bind 127.0.0.1:0 --threads "$threads")
# shellcheck disable=SC2206
svc_args+=(${BENCH_SVC_ARGS:-})

cpu=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)
model_list=$(for i in 0 1 2; do printf -- '- `%s`: %s (%s bytes)\n' "${ids[$i]}" "$(basename "${models[$i]}")" "$(stat -L -c %s "${models[$i]}")"; done)
header=$(cat <<EOF
$(date -u '+%Y-%m-%d %H:%M UTC'), $cpu, nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg) at start.
$model_list

- svc: $svc_from; \`svc serve --config svc.toml ${svc_args[*]:2}\`: each model a \`[models.<id>]\` table with \`preload = false\`, \`keep_alive = "10m"\`; \`repack = false\`, \`context = $context\`, \`parallel = $parallel\`, \`models_memory\` below
- llama-server: built from ${ls_from%%;*}; router mode, \`llama-server ${ls_args[*]:2}\` with a preset per model (its other settings at their defaults: \`--cache-ram\` 8192 MiB, \`--models-autoload\`)
EOF
)

log "measuring: ${ids[*]}; $rounds rounds, $swaps swaps"
PYTHONPATH=$root/bench/engine${PYTHONPATH:+:$PYTHONPATH} python3 - \
  --work "$work" --svc "$work/svc" --key "$key" --ls "$work/llama-server" \
  --ids "${ids[*]}" --files "$(printf '%s\n' "${models[@]}")" \
  --svc-args "${svc_args[*]}" --ls-args "${ls_args[*]}" \
  --rounds "$rounds" --swaps "$swaps" --max-tokens "$max_tokens" --quiet-wait "$quiet" \
  --budget "${BENCH_MODELS_MEMORY:-}" --header "$header" <<'PY'
import argparse, http.client, json, os, re, signal, socket, statistics, subprocess, sys, threading, time
from cpuload import HZ, busy_jiffies, self_and_children_jiffies, wait_quiet

ap = argparse.ArgumentParser()
for name in ("work", "svc", "key", "ls", "ids", "files", "svc-args", "ls-args", "header", "budget"):
    ap.add_argument("--" + name, default="")
for name in ("rounds", "swaps", "max-tokens", "quiet-wait"):
    ap.add_argument("--" + name, type=int)
a = ap.parse_args()
IDS = a.ids.split()
FILES = a.files.splitlines()
MIB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
PIDS = open(os.path.join(a.work, "pids"), "a")


def say(*args):
    print(*args, file=sys.stderr, flush=True)


# --- a server's process tree: RSS and CPU ---
def children_map() -> dict:
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def tree(root: int) -> list:
    kids, out, todo = children_map(), [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def tree_rss(root: int) -> int:
    total = 0
    for p in tree(root):
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, ValueError, IndexError):
            pass
    return total


def tree_jiffies(root: int) -> int:
    """utime+stime of the live tree, plus what the root's reaped children used."""
    total = 0
    for p in tree(root):
        try:
            with open(f"/proc/{p}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            total += int(rest[11]) + int(rest[12])
            if p == root:
                total += int(rest[13]) + int(rest[14])
        except (OSError, ValueError, IndexError):
            pass
    return total


class Window:
    """Foreign CPU share while the block runs: all CPUs' busy time less the
    server tree's and this script's."""

    def __init__(self, root):
        self.root = root

    def __enter__(self):
        self.b0, self.t0 = busy_jiffies()
        self.o0 = self_and_children_jiffies() + tree_jiffies(self.root)
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.end = time.perf_counter()
        b1, t1 = busy_jiffies()
        o1 = self_and_children_jiffies() + tree_jiffies(self.root)
        self.foreign = max(0.0, ((b1 - self.b0) - (o1 - self.o0)) / max(t1 - self.t0, 1))
        return False


class Sampler(threading.Thread):
    def __init__(self, root):
        super().__init__(daemon=True)
        self.root, self.samples, self.stop = root, [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.samples.append((time.perf_counter(), tree_rss(self.root)))
            self.stop.wait(0.1)

    def between(self, t0, t1):
        return [r for t, r in self.samples if t0 <= t <= t1]


# --- the servers ---
def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, kind: str, tag: str, config: str | None = None):
        self.kind, self.tag = kind, tag
        self.log_path = os.path.join(a.work, f"{kind}-{tag}.log")
        self.log = open(self.log_path, "wb")
        env = dict(os.environ)
        if kind == "svc":
            cmd = [a.svc, "serve", "--config", config] + a.svc_args.split()
            self.key = a.key
        else:
            port = free_port()
            cmd = [a.ls] + a.ls_args.split() + ["--host", "127.0.0.1", "--port", str(port)]
            env["LLAMA_CACHE"] = os.path.join(a.work, "llama-cache")
            self.key = None
            self.host, self.port = "127.0.0.1", port
        self.cmd = cmd
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        PIDS.write(f"{self.proc.pid}\n")
        PIDS.flush()
        self.pid = self.proc.pid
        deadline = time.monotonic() + 300
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"{kind} exited at start ({self.proc.returncode}):\n{self.tail()}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{kind} did not start in 300 s:\n{self.tail()}")
            if self.ready():
                break
            time.sleep(0.02)
        self.ready_s = time.perf_counter() - self.t0

    def tail(self, n=30) -> str:
        with open(self.log_path, "rb") as f:
            return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")

    def text(self) -> str:
        """The log without terminal colours."""
        with open(self.log_path, "rb") as f:
            return re.sub(r"\x1b\[[0-9;]*m", "", f.read().decode(errors="replace"))

    def ready(self) -> bool:
        if self.kind == "svc":
            m = re.search(r"svc is serving on http://([0-9.]+):(\d+)", self.text())
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
            return bool(m)
        try:
            c = http.client.HTTPConnection(self.host, self.port, timeout=2)
            c.request("GET", "/health")
            ok = c.getresponse().status == 200
            c.close()
            return ok
        except OSError:
            return False

    def loads(self) -> int:
        """Loads so far, from the log."""
        if self.kind == "svc":
            return len(re.findall(r"model loaded", self.text()))
        return len(re.findall(r"spawning server instance with name=", self.text()))

    def chat(self, model: str, prompt: str, max_tokens: int) -> dict:
        body = json.dumps({
            "model": model, "messages": [{"role": "user", "content": prompt}],
            "stream": True, "max_tokens": max_tokens, "temperature": 0, "seed": 1234,
            "stream_options": {"include_usage": True},
        })
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        c = http.client.HTTPConnection(self.host, self.port, timeout=600)
        sent = time.perf_counter()
        c.request("POST", "/v1/chat/completions", body, headers)
        resp = c.getresponse()
        if resp.status != 200:
            raise SystemExit(f"{self.kind} {model}: HTTP {resp.status}: {resp.read()[:400]!r}\n{self.tail()}")
        first, text, tokens = None, [], 0
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            for choice in chunk.get("choices") or []:
                content = (choice.get("delta") or {}).get("content")
                if content:
                    if first is None:
                        first = time.perf_counter()
                    text.append(content)
            if chunk.get("usage"):
                tokens = chunk["usage"].get("completion_tokens", 0)
        end = time.perf_counter()
        c.close()
        return {"ttft": (first or end) - sent, "total": end - sent, "tokens": tokens,
                "text": "".join(text), "content": first is not None}

    def get_json(self, path: str):
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        try:
            c = http.client.HTTPConnection(self.host, self.port, timeout=10)
            c.request("GET", path, headers=headers)
            r = c.getresponse()
            body = r.read()
            c.close()
            return json.loads(body) if r.status == 200 else None
        except (OSError, ValueError):
            return None

    def stop(self):
        procs = tree(self.pid)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for p in procs[1:]:  # children the router left behind, if any
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        self.log.close()


# --- calibration: what svc counts for each model once loaded ---
def calibrate() -> dict:
    say("calibration: svc without models_memory, each model once")
    srv = Server("svc", "calibrate", os.path.join(a.work, "svc-calibrate.toml"))
    out = {"loaded": {}, "estimate": {}, "rss_delta": {}, "residency": {}}
    try:
        rss = tree_rss(srv.pid)
        for mid, path in zip(IDS, FILES):
            srv.chat(mid, "Say hello.", 1)
            time.sleep(0.3)
            now = tree_rss(srv.pid)
            out["rss_delta"][mid] = now - rss
            rss = now
            m = [int(b) for f, b in re.findall(r"model loaded.*?file=(\S+).*?bytes=(\d+)", srv.text())
                 if f.strip('"') == path]
            if not m:
                m = [int(b) for b in re.findall(rf"model loaded.*?{re.escape(path)}.*?bytes=(\d+)", srv.text())]
            if not m:
                raise SystemExit(f"no `model loaded ... bytes` line for {path} in svc's log:\n{srv.tail()}")
            out["loaded"][mid] = m[-1]
            e = [int(b) for b in re.findall(rf"model loaded.*?{re.escape(path)}.*?estimate=(\d+)", srv.text())]
            out["estimate"][mid] = e[-1] if e else sizes[mid]
            info = srv.get_json(f"/v1/models/{mid}") or {}
            res = info.get("residency") or {}
            if "memory_bytes" in res:
                out["residency"][mid] = res["memory_bytes"]
    finally:
        srv.stop()
    return out


sizes = {mid: os.stat(path).st_size for mid, path in zip(IDS, FILES)}
calib = None
note = ""
if a.budget:
    budget = int(a.budget)
    note = f"`models_memory = {budget}` (BENCH_MODELS_MEMORY)."
else:
    calib = calibrate()
    L = calib["loaded"]
    pairs = [L[x] + L[y] for i, x in enumerate(IDS) for y in IDS[i + 1:]]
    maxpair = max(pairs)
    # a third model's first load reserves its estimate
    E = calib["estimate"]
    margin = min(sum(L[o] for o in IDS if o != z) + E[z] - maxpair for z in IDS)
    budget = maxpair + max(0, margin // 2)
    if margin <= 0:
        note = ("**Warning:** with these sizes a third model's first load fits beside two loaded ones "
                "(svc counts an unloaded model as its estimate): the cold phase may hold three. ")
    note += (f"`models_memory = {budget}` ({budget / MIB:.0f} MiB): the largest two loaded models "
             f"({maxpair / MIB:.0f} MiB) plus half of the {margin / MIB:.0f} MiB by which a third would not fit.")
say(f"models_memory = {budget}")
with open(os.path.join(a.work, "svc-calibrate.toml")) as f:
    config = f"models_memory = {budget}\n" + f.read()
svc_config = os.path.join(a.work, "svc.toml")
with open(svc_config, "w") as f:
    f.write(config)


# --- the rounds ---
def prompt(rnd, what, i, mid):
    topics = ["lighthouses", "volcanoes", "bees", "bridges", "clocks", "rivers", "owls", "comets", "trains"]
    return f"Round {rnd}, {what} {i}: write one short sentence about {topics[i % len(topics)]}."


def run_server(kind: str, rnd: int) -> dict:
    wait_quiet(a.quiet_wait)
    srv = Server(kind, f"round{rnd}", svc_config if kind == "svc" else None)
    sampler = Sampler(srv.pid)
    sampler.start()
    r = {"ready_s": srv.ready_s}
    try:
        time.sleep(0.5)
        r["rss_idle"] = tree_rss(srv.pid)
        cold = {}
        with Window(srv.pid) as w:
            for i, mid in enumerate(IDS):
                cold[mid] = srv.chat(mid, prompt(rnd, "cold", i, mid), a.max_tokens)
        r["cold"] = {m: c["ttft"] for m, c in cold.items()}
        r["cold_content"] = {m: c["content"] for m, c in cold.items()}
        r["cold_foreign"] = w.foreign
        r["loads_cold"] = srv.loads()
        time.sleep(0.3)
        r["rss_after_cold"] = tree_rss(srv.pid)
        loads0 = srv.loads()
        swap = []
        with Window(srv.pid) as w:
            for i in range(a.swaps):
                mid = IDS[i % len(IDS)]
                c = srv.chat(mid, prompt(rnd, "swap", i, mid), a.max_tokens)
                swap.append({"model": mid, "ttft": c["ttft"], "total": c["total"], "tokens": c["tokens"]})
        r["swap"] = swap
        r["swap_wall"] = w.end - w.start
        r["swap_foreign"] = w.foreign
        r["loads_swap"] = srv.loads() - loads0
        rss = sampler.between(w.start, w.end)
        r["rss_peak"] = max(rss) if rss else None
        r["rss_mean"] = statistics.fmean(rss) if rss else None
        r["rss_samples"] = len(rss)
        r["rss_timeline"] = [(round(t - w.start, 2), r_ // MIB) for t, r_ in sampler.samples if w.start <= t <= w.end]
        if kind == "svc":
            r["residency"] = {m: ((srv.get_json(f"/v1/models/{m}") or {}).get("residency")) for m in IDS}
    finally:
        sampler.stop.set()
        srv.stop()
    ttfts = [s["ttft"] for s in r["swap"]]
    say(f"  {kind} round {rnd}: ready {r['ready_s']:.2f} s, cold "
        + ", ".join(f"{m} {1000 * t:.0f} ms" for m, t in r["cold"].items())
        + f"; loop p50 {1000 * statistics.median(ttfts):.0f} ms, {r['swap_wall']:.1f} s, {r['loads_swap']} loads, "
        f"RSS peak {r['rss_peak'] / MIB:.0f} MiB; others {100 * r['swap_foreign']:.0f}%")
    return r


results = {"svc": [], "llama-server": []}
for rnd in range(1, a.rounds + 1):
    order = ["svc", "llama-server"] if rnd % 2 else ["llama-server", "svc"]
    for kind in order:
        results[kind].append(run_server(kind, rnd))
    with open(os.path.join(a.work, "models.json"), "w") as f:
        json.dump({"budget": budget, "calibration": calib, "sizes": sizes, "results": results}, f, indent=1)


# --- the report ---
def med(kind, f):
    xs = [f(r) for r in results[kind]]
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def worst(kind, f):
    return max(f(r) for r in results[kind])


rows = [("start to ready (ms)", lambda r: 1000 * r["ready_s"], "{:.0f}", True)]
for mid in IDS:
    rows.append((f"cold TTFT `{mid}` (ms)", lambda r, m=mid: 1000 * r["cold"][m], "{:.0f}", True))
rows += [
    (f"swap loop: TTFT p50 (ms)", lambda r: 1000 * statistics.median(s["ttft"] for s in r["swap"]), "{:.0f}", True),
    (f"swap loop: TTFT max (ms)", lambda r: 1000 * max(s["ttft"] for s in r["swap"]), "{:.0f}", True),
    (f"swap loop: {a.swaps} requests, total (s)", lambda r: r["swap_wall"], "{:.2f}", True),
    ("swap loop: loads counted in the log", lambda r: r["loads_swap"], "{:.0f}", False),
    ("RSS idle after start (MiB)", lambda r: r["rss_idle"] / MIB, "{:.0f}", True),
    ("RSS after the cold requests (MiB)", lambda r: r["rss_after_cold"] / MIB, "{:.0f}", True),
    ("RSS peak in the swap loop (MiB)", lambda r: r["rss_peak"] / MIB, "{:.0f}", True),
    ("RSS mean in the swap loop (MiB)", lambda r: r["rss_mean"] / MIB, "{:.0f}", True),
]
lines = ["| | svc | llama-server (router) | svc / llama-server |", "|---|---:|---:|---:|"]
for label, f, fmt, ratio in rows:
    s, l = med("svc", f), med("llama-server", f)
    q = f"{s / l:.2f}" if ratio and s is not None and l else ""
    lines.append(f"| {label} | {fmt.format(s)} | {fmt.format(l)} | {q} |")
for label, key in (("others' CPU, cold requests (worst round)", "cold_foreign"),
                   ("others' CPU, swap loop (worst round)", "swap_foreign")):
    lines.append(f"| {label} | {100 * worst('svc', lambda r: r[key]):.0f}% | "
                 f"{100 * worst('llama-server', lambda r: r[key]):.0f}% | |")

cal = ""
if calib:
    cal = "\nWhat svc counts per model once loaded (its `model loaded` log line), and the VmRSS it added when loaded first in the calibration run:\n\n"
    cal += "| model | file | svc counts | VmRSS delta |\n|---|---:|---:|---:|\n"
    for mid in IDS:
        cal += (f"| `{mid}` | {sizes[mid] / MIB:.0f} MiB | {calib['loaded'][mid] / MIB:.0f} MiB | "
                f"{calib['rss_delta'][mid] / MIB:.0f} MiB |\n")
    if calib["residency"]:
        cal += "\nGET /v1/models/<id> residency.memory_bytes: " + ", ".join(
            f"`{m}` {b / MIB:.0f} MiB" for m, b in calib["residency"].items()) + "\n"
    else:
        cal += "\n(GET /v1/models/<id> reported no residency.memory_bytes in this build.)\n"

empty = [f"{k} `{m}` round {i + 1}" for k in results for i, r in enumerate(results[k])
         for m, ok in r["cold_content"].items() if not ok]
tokens = {k: statistics.median(s["tokens"] for r in results[k] for s in r["swap"]) for k in results}
print(f"""## Models on demand: svc against llama-server's router

{a.header}

{note}
{cal}
{chr(10).join(lines)}

Medians over {a.rounds} rounds (each server started afresh per round, one at a time, alternating which goes first);
max_tokens {a.max_tokens}, median completion tokens in the loop: svc {tokens['svc']:.0f}, llama-server {tokens['llama-server']:.0f}.
RSS: the server's process tree (llama-server: router plus model children), VmRSS summed, sampled every 100 ms.""")
per_round = []
for i in range(a.rounds):
    s, l = results["svc"][i], results["llama-server"][i]
    p50 = lambda r: 1000 * statistics.median(x["ttft"] for x in r["swap"])
    per_round.append(f"round {i + 1}: loop {s['swap_wall']:.1f} / {l['swap_wall']:.1f} s, TTFT p50 "
                     f"{p50(s):.0f} / {p50(l):.0f} ms, others' CPU {100 * s['swap_foreign']:.0f}% / "
                     f"{100 * l['swap_foreign']:.0f}%")
print("\nEach round's swap loop, svc / llama-server: " + "; ".join(per_round) + ".")
if empty:
    print(f"\nNo content token (TTFT is the whole reply): {', '.join(empty)}.")
PY
echo
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
