"""A reference /v1/embeddings server for bench/embeddings.sh: sentence-transformers on CPU.

Serves POST /v1/embeddings in OpenAI's shape (input: a string or a list of
strings; encoding_format "float" or "base64") with the model folder given by
--model-dir (all-MiniLM-L6-v2 for svc's bench), plus GET /v1/models and
GET /health. No key check: any Authorization header is ignored.

It is meant as a fair peer for svc, so concurrent requests are batched: each
request's texts go on a queue, and one worker thread takes everything that
arrives within --batch-wait-ms of the first waiting request (up to
--max-batch texts) into a single `model.encode` call, which sorts the texts by
length and runs them in batches of --encode-batch. torch uses --threads
threads (torch.set_num_threads).

Usage: python bench/embeddings_peer.py --model-dir DIR [--port 18090] [--threads 2]
Prints "listening on http://HOST:PORT/v1" once ready.
"""

import argparse
import base64
import json
import os
import queue
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Job:
    __slots__ = ("texts", "done", "vectors", "tokens", "error")

    def __init__(self, texts):
        self.texts = texts
        self.done = threading.Event()
        self.vectors = None
        self.tokens = None
        self.error = None


class Batcher:
    def __init__(self, model, wait_s, max_batch, encode_batch):
        self.model = model
        self.tok = model.tokenizer
        self.max_len = model.max_seq_length
        self.wait_s = wait_s
        self.max_batch = max_batch
        self.encode_batch = encode_batch
        self.q = queue.Queue()
        self.batches = 0
        self.texts = 0
        threading.Thread(target=self._run, daemon=True).start()

    def submit(self, texts):
        job = Job(texts)
        self.q.put(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.vectors, job.tokens

    def _run(self):
        while True:
            jobs = [self.q.get()]
            n = len(jobs[0].texts)
            deadline = time.monotonic() + self.wait_s
            while n < self.max_batch:
                left = deadline - time.monotonic()
                try:
                    job = self.q.get(timeout=left) if left > 0 else self.q.get_nowait()
                except queue.Empty:
                    break
                jobs.append(job)
                n += len(job.texts)
            texts = [t for j in jobs for t in j.texts]
            try:
                vecs = self.model.encode(
                    texts, batch_size=self.encode_batch, convert_to_numpy=True, show_progress_bar=False
                )
                ids = self.tok(texts, truncation=True, max_length=self.max_len)["input_ids"]
                at = 0
                for j in jobs:
                    k = len(j.texts)
                    j.vectors = vecs[at : at + k]
                    j.tokens = sum(len(x) for x in ids[at : at + k])
                    at += k
            except Exception as e:  # hand the failure to every waiting request
                for j in jobs:
                    j.error = e
            self.batches += 1
            self.texts += len(texts)
            for j in jobs:
                j.done.set()


def make_handler(batcher, model_name):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as svc offers
        # Headers and body go out in separate writes: without TCP_NODELAY,
        # Nagle plus the client's delayed ACK adds ~40 ms to every reply.
        disable_nagle_algorithm = True

        def log_message(self, fmt, *args):
            pass

        def _send(self, code, obj):
            body = json.dumps(obj, separators=(",", ":")).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, code, msg):
            self._send(code, {"error": {"message": msg, "type": "invalid_request_error", "param": None, "code": None}})

        def do_GET(self):
            if self.path == "/health":
                self._send(200, {"status": "ok", "batches": batcher.batches, "texts": batcher.texts})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "peer"}]})
            else:
                self._error(404, "not found")

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n)
            if self.path != "/v1/embeddings":
                return self._error(404, "not found")
            try:
                req = json.loads(raw)
            except ValueError:
                return self._error(400, "body is not JSON")
            inp = req.get("input")
            if isinstance(inp, str):
                texts = [inp]
            elif isinstance(inp, list) and inp and all(isinstance(t, str) for t in inp):
                texts = inp
            else:
                return self._error(400, "input must be a string or a non-empty list of strings")
            if any(t == "" for t in texts):
                return self._error(400, "input must not contain empty strings")
            fmt = req.get("encoding_format") or "float"
            if fmt not in ("float", "base64"):
                return self._error(400, "encoding_format must be float or base64")
            dims = req.get("dimensions")
            if dims is not None and dims != 384:
                return self._error(400, "dimensions is not supported by this model")
            try:
                vecs, tokens = batcher.submit(texts)
            except Exception as e:
                return self._error(500, f"encode failed: {e}")
            data = []
            for i, v in enumerate(vecs):
                emb = base64.b64encode(v.astype("<f4").tobytes()).decode() if fmt == "base64" else v.tolist()
                data.append({"object": "embedding", "index": i, "embedding": emb})
            self._send(200, {
                "object": "list",
                "data": data,
                "model": req.get("model") or model_name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            })

    return Handler


def main():
    ap = argparse.ArgumentParser(description="sentence-transformers /v1/embeddings peer for bench/embeddings.sh")
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--model-name", default="all-MiniLM-L6-v2")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=18090)
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--batch-wait-ms", type=float, default=2.0, help="how long to gather requests into one encode")
    ap.add_argument("--max-batch", type=int, default=256, help="most texts in one encode call")
    ap.add_argument("--encode-batch", type=int, default=32, help="model.encode batch_size")
    args = ap.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    model = SentenceTransformer(args.model_dir, device="cpu")
    model.encode(["warm up the model"] * 4, show_progress_bar=False)
    batcher = Batcher(model, args.batch_wait_ms / 1000.0, args.max_batch, args.encode_batch)
    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 256  # the default backlog of 5 drops bursts of connections

    server = Server((args.host, args.port), make_handler(batcher, args.model_name))
    print(f"listening on http://{args.host}:{server.server_address[1]}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    print(f"batches {batcher.batches} texts {batcher.texts}", file=sys.stderr)


if __name__ == "__main__":
    main()
