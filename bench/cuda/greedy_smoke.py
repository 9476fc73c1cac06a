"""Greedy and seeded replies of one svc: cold, streamed, after a long prompt
and beside 4 concurrent streams; prints JSON {label: text} and whether each
kind was the same every time. Usage: greedy_smoke.py URL KEY (bench/cuda/)."""
import json, sys, threading
import httpx

url, key = sys.argv[1], sys.argv[2]
c = httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}, timeout=120)
SEA = [{"role": "user", "content": "Write one sentence about the sea."}]

def chat(body, stream=False):
    body = {"model": "svc", **body}
    if not stream:
        r = c.post("/v1/chat/completions", json=body)
        r.raise_for_status()
        return r.json()["choices"][0]["message"]["content"]
    text = ""
    with c.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for ch in json.loads(line[6:])["choices"]:
                    text += ch["delta"].get("content") or ""
    return text

greedy = {"messages": SEA, "temperature": 0, "max_tokens": 40}
seeded = {"messages": SEA, "temperature": 0.9, "seed": 42, "max_tokens": 30}
out = {}
out["greedy cold"] = chat(greedy)
out["seeded cold"] = chat(seeded)
out["greedy streamed"] = chat(greedy, stream=True)
chat({"messages": [{"role": "user", "content": "Tell me a long story about a dragon. " * 40}], "max_tokens": 50})
out["greedy after a long prompt"] = chat(greedy)
out["seeded after a long prompt"] = chat(seeded)
others = [threading.Thread(target=chat, args=({"messages": [{"role": "user", "content": f"Count to {20 + i}."}], "max_tokens": 120},)) for i in range(4)]
for t in others:
    t.start()
out["greedy beside 4 streams"] = chat(greedy)
out["seeded beside 4 streams"] = chat(seeded, stream=True)
for t in others:
    t.join()
same = lambda kind: len({v for k, v in out.items() if k.startswith(kind)}) == 1
out["greedy all identical"] = same("greedy")
out["seeded all identical"] = same("seeded")
print(json.dumps(out, indent=1))
