"""Load generator for an OpenAI-compatible POST /v1/embeddings (standard library only).

For each concurrency in --clients, that many threads (one keep-alive HTTP
connection each) send requests back to back, each with --inputs-per-request
texts drawn (seeded, so every server gets the same sequence) from a fixed set
of 64 English sentences of 5 to 60 words. Either --requests per client or
--seconds per concurrency. A few warm-up requests go first (not counted).
Every reply is checked: status 200, one embedding per input, same length.

Prints one line per concurrency: clients, requests, errors, embeddings/s,
p50 and p99 request latency in ms; --json prints a JSON array of objects
with the same fields instead.

Usage: python3 bench/embeddings_load.py --url http://127.0.0.1:8080/v1 \\
           [--key KEY] [--model all-MiniLM-L6-v2] [--clients 1,16] \\
           [--seconds 10 | --requests 200] [--inputs-per-request 1] [--json]
"""

import argparse
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse

SENTENCES = [
    "The cat slept all day.",
    "Please send me the report by Friday.",
    "Rain is expected across the region tonight.",
    "How many people live in Tokyo?",
    "She plays the violin every single morning.",
    "Our flight was delayed by three hours.",
    "Fresh bread smells wonderful in the morning.",
    "The server returned an unexpected error code.",
    "Turn left at the second traffic light.",
    "Water boils at one hundred degrees Celsius.",
    "My phone battery dies far too quickly these days.",
    "The museum is closed on Mondays and public holidays.",
    "Can you recommend a good book about ancient Rome?",
    "The new library opened downtown last week.",
    "He fixed the leaking kitchen tap himself.",
    "Stock markets fell sharply after the announcement.",
    "The committee postponed its decision until more data from the pilot study becomes available.",
    "Machine learning models can learn useful patterns from large amounts of labelled examples.",
    "I forgot my umbrella at the office, so I got completely soaked on the way home.",
    "The recipe calls for two cups of flour, a pinch of salt and three eggs.",
    "Our team shipped the new search feature after two months of careful testing.",
    "Electric cars are becoming cheaper as battery production scales up around the world.",
    "The hikers reached the summit just before sunrise and watched the clouds below them.",
    "Could you explain the difference between a process and a thread in simple terms?",
    "The doctor advised him to drink more water and to walk for thirty minutes daily.",
    "Volcanic eruptions can affect the global climate for several years afterwards.",
    "The children built an enormous sandcastle while their parents read on the beach.",
    "Many cities are planting trees along streets to reduce summer temperatures.",
    "The orchestra rehearsed the symphony for weeks before the opening night of the season.",
    "A good password manager makes it easy to use a different password for every site.",
    "The river flooded its banks after a week of heavy rain in the mountains.",
    "Researchers found that regular sleep improves memory and concentration in students.",
    "The bakery on the corner sells out of croissants before nine o'clock most days.",
    "Database indexes speed up reads but make every insert and update a little slower.",
    "The old lighthouse has guided ships safely into the harbour for over a century.",
    "Our quarterly revenue grew by twelve percent, driven mostly by subscriptions in Europe.",
    "She learned to speak Spanish fluently after living in Madrid for two years.",
    "The software update fixes several security vulnerabilities and improves battery life.",
    "Bees play a vital role in pollinating many of the crops that people eat.",
    "The train to the airport leaves every fifteen minutes from platform four.",
    "When the power went out during the storm, the whole neighbourhood gathered by candlelight to share food, tell stories and wait for the lines to be repaired.",
    "The engineers replaced the bridge's worn cables one at a time, so that traffic could keep flowing across the river while the work went on for most of the year.",
    "Learning a musical instrument as an adult takes patience, but small daily practice sessions add up and most people notice real progress within a few months.",
    "The city council voted to turn the abandoned rail yard into a public park with playgrounds, community gardens and a path for cyclists and walkers.",
    "Customer support received hundreds of messages after the outage, and the team answered each of them with an apology and an explanation of what had gone wrong.",
    "Astronomers detected a faint signal from a distant galaxy whose light left it more than twelve billion years ago, long before the Sun formed.",
    "If the test suite fails on the main branch, nobody merges anything else until the cause is found and fixed, which keeps the build healthy for everyone.",
    "The farmers rotated their crops each season to keep the soil fertile and to reduce the pests that build up when the same plant grows year after year.",
    "Good documentation explains not only how to use a function but also why it exists, what it assumes, and what can go wrong when those assumptions fail.",
    "The marathon route passes through six districts of the city, along the waterfront and over two bridges before finishing in front of the old town hall.",
    "Our grandmother kept every letter she ever received in a wooden box under her bed, and reading them now tells us a great deal about her life.",
    "The airline introduced a new boarding process that lets passengers with window seats board first, which it says shortens the time planes spend at the gate.",
    "Scientists are studying how octopuses solve puzzles, because their nervous system is organised very differently from ours yet produces surprisingly clever behaviour.",
    "The startup spent its first year talking to potential customers before writing any code, and that research shaped almost every decision about the product.",
    "Public transport ridership has recovered in most large cities, although commuting patterns have changed and trains are now busiest in the middle of the week.",
    "The translation of the novel took four years, as the translator tried to preserve the author's humour, rhythm and many references to local history.",
    "In the early days of computing, programs were written on punched cards, and a single misplaced hole could mean waiting until the next day to run the job again, so programmers checked their work by hand with great care before submitting it to the operators, who fed the decks into the machine and returned the results hours later.",
    "The national park service asks visitors to stay on marked trails, carry out all of their rubbish, keep a safe distance from wildlife and never feed the animals, because even small changes in behaviour, repeated by the thousands of people who come every summer, can harm fragile ecosystems and the animals that depend on them over many years.",
    "Although the quarterly results beat expectations, the board warned shareholders that rising energy prices, supply chain delays and a slowing housing market could all weigh on profits during the second half of the year.",
    "A well designed API makes the common case simple and the rare case possible: sensible defaults, clear error messages, consistent naming and documentation with runnable examples save users far more time than any clever feature, and make it easier to change the internals later without breaking programs.",
    "The festival brought together musicians from more than thirty countries, and for three days the streets of the old town were filled with concerts, dancing, food stalls and workshops where children could try unusual instruments.",
    "After years of decline, the coral reef began to recover once fishing was restricted and the nearby river was cleaned up, showing that ecosystems can bounce back when the pressure on them is reduced in time.",
    "The history teacher asked each student to interview an older relative about an important event they had lived through, and the stories collected that term later became a small book shared with the whole town.",
    "Running a distributed database across several regions improves availability, but every write must now be agreed upon by replicas far apart, so engineers have to choose carefully between consistency, latency and cost.",
]

assert len(SENTENCES) == 64


def percentile(sorted_xs, p):
    if not sorted_xs:
        return float("nan")
    k = min(len(sorted_xs) - 1, max(0, int(round(p / 100.0 * (len(sorted_xs) - 1)))))
    return sorted_xs[k]


class Target:
    def __init__(self, url, key, model, inputs):
        u = urllib.parse.urlsplit(url.rstrip("/"))
        if u.scheme not in ("http", "https"):
            raise SystemExit(f"--url must be http(s)://HOST[:PORT]/.../v1, not {url}")
        self.https = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.https else 80)
        self.path = u.path + "/embeddings"
        self.headers = {"Content-Type": "application/json"}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"
        self.model = model
        self.inputs = inputs

    def connect(self):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=120)

    def body(self, rng):
        texts = [rng.choice(SENTENCES) for _ in range(self.inputs)]
        inp = texts[0] if self.inputs == 1 else texts
        return json.dumps({"model": self.model, "input": inp}).encode()

    def send(self, conn, body):
        """One request; returns (conn, ok, error text). Reconnects once if the connection dropped."""
        for attempt in (0, 1):
            try:
                conn.request("POST", self.path, body=body, headers=self.headers)
                resp = conn.getresponse()
                data = resp.read()
                break
            except (http.client.HTTPException, OSError) as e:
                conn.close()
                conn = self.connect()
                if attempt:
                    return conn, False, f"{type(e).__name__}: {e}"
        if resp.status != 200:
            return conn, False, f"HTTP {resp.status}: {data[:200]!r}"
        try:
            obj = json.loads(data)
            embs = [d["embedding"] for d in obj["data"]]
        except (ValueError, KeyError, TypeError) as e:
            return conn, False, f"bad reply: {e}: {data[:200]!r}"
        if len(embs) != self.inputs or len({len(e) for e in embs}) != 1 or not embs[0]:
            return conn, False, f"bad reply: {len(embs)} embeddings for {self.inputs} inputs"
        return conn, True, None


def run_level(target, clients, requests, seconds, seed):
    lat = [[] for _ in range(clients)]
    errors = [0] * clients
    first_error = []
    start_gate = threading.Barrier(clients + 1)
    stop_at = [None]

    def worker(i):
        rng = random.Random(seed * 1000 + i)
        conn = target.connect()
        start_gate.wait()
        n = 0
        while True:
            if requests is not None and n >= requests:
                break
            if seconds is not None and time.monotonic() >= stop_at[0]:
                break
            body = target.body(rng)
            t0 = time.perf_counter()
            conn, ok, err = target.send(conn, body)
            dt = time.perf_counter() - t0
            n += 1
            if ok:
                lat[i].append(dt)
            else:
                errors[i] += 1
                if not first_error:
                    first_error.append(err)
        conn.close()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    if seconds is not None:
        stop_at[0] = time.monotonic() + seconds
    start_gate.wait()
    t0 = time.monotonic()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    all_lat = sorted(x for l in lat for x in l)
    ok = len(all_lat)
    return {
        "clients": clients,
        "requests": ok + sum(errors),
        "errors": sum(errors),
        "inputs_per_request": target.inputs,
        "seconds": round(wall, 3),
        "embeddings_per_s": round(ok * target.inputs / wall, 2) if wall > 0 else 0.0,
        "requests_per_s": round(ok / wall, 2) if wall > 0 else 0.0,
        "p50_ms": round(percentile(all_lat, 50) * 1000, 2),
        "p99_ms": round(percentile(all_lat, 99) * 1000, 2),
        "first_error": first_error[0] if first_error else None,
    }


def main():
    ap = argparse.ArgumentParser(description="load generator for POST /v1/embeddings")
    ap.add_argument("--url", required=True, help="base URL ending in /v1")
    ap.add_argument("--key", default="", help="bearer key (optional)")
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--clients", default="1,16", help="comma-separated concurrencies")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--requests", type=int, help="requests per client at each concurrency")
    g.add_argument("--seconds", type=float, help="seconds at each concurrency (default 10)")
    ap.add_argument("--inputs-per-request", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=5, help="warm-up requests before each concurrency")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print a JSON array instead of the table")
    args = ap.parse_args()
    if args.requests is None and args.seconds is None:
        args.seconds = 10.0
    if args.inputs_per_request < 1:
        raise SystemExit("--inputs-per-request must be at least 1")
    levels = [int(c) for c in args.clients.split(",") if c.strip()]

    target = Target(args.url, args.key, args.model, args.inputs_per_request)
    results = []
    if not args.json:
        print(f"{'clients':>7} {'requests':>8} {'errors':>6} {'emb/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for c in levels:
        rng = random.Random(args.seed - 1)
        conn = target.connect()
        for _ in range(args.warmup):
            conn, ok, err = target.send(conn, target.body(rng))
            if not ok:
                raise SystemExit(f"warm-up request failed: {err}")
        conn.close()
        r = run_level(target, c, args.requests, args.seconds, args.seed)
        results.append(r)
        if not args.json:
            print(f"{r['clients']:>7} {r['requests']:>8} {r['errors']:>6} {r['embeddings_per_s']:>9.1f} "
                  f"{r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f}", flush=True)
            if r["first_error"]:
                print(f"        first error: {r['first_error']}", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
