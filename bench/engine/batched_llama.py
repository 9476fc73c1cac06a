#!/usr/bin/env python3
"""The ceiling of batched decoding in llama.cpp itself (like llama.cpp's
llama-batched-bench): B sequences, each prefilled with the same short
prompt, then --gen steps that decode one token of every sequence in one
llama_decode. Reports aggregate decode tokens/s per B and the speed-up
over B=1. Investigation tool for the engine's concurrency numbers; not part
of bench/engine.sh.

usage: batched_llama.py MODEL.gguf [--batches 1,4,16] [--threads 2] [--gen 64]
       [--prompt 32] [--kv-unified] [--flash-attn auto|on|off] [--ctx-per-seq N]
"""

import argparse
import ctypes
import json
import os
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--ctx-per-seq", type=int, default=0, help="default: prompt + gen + 64")
    ap.add_argument("--kv-unified", action="store_true")
    ap.add_argument("--flash-attn", choices=["on", "off", "auto"], default="auto")
    ap.add_argument("--type-k", default="f16", choices=["f16", "q8_0"])
    args = ap.parse_args()

    import llama_cpp as ll

    ll.llama_backend_init()
    global _cb
    _cb = ll.llama_log_callback(lambda level, text, data: None)
    ll.llama_log_set(_cb, None)
    model = ll.llama_model_load_from_file(args.model.encode(), ll.llama_model_default_params())
    vocab = ll.llama_model_get_vocab(model)
    n_vocab = ll.llama_vocab_n_tokens(vocab)

    results = []
    base = None
    for b in [int(x) for x in args.batches.split(",")]:
        cp = ll.llama_context_default_params()
        per_seq = args.ctx_per_seq or (args.prompt + args.gen + 64)
        cp.n_ctx = per_seq * b
        cp.n_batch = max(512, b)
        cp.n_ubatch = max(512, b)
        cp.n_seq_max = b
        cp.n_threads = cp.n_threads_batch = args.threads
        cp.kv_unified = args.kv_unified
        cp.no_perf = True
        cp.flash_attn_type = {"on": 1, "off": 0, "auto": -1}[args.flash_attn]
        if args.type_k == "q8_0":
            cp.type_k = cp.type_v = ll.GGML_TYPE_Q8_0
        ctx = ll.llama_init_from_model(model, cp)
        if not ctx:
            sys.exit("cannot create the context")
        batch = ll.llama_batch_init(max(512, b * args.prompt), 0, b)

        def add(i, tok, pos, seq, logits):
            batch.token[i] = tok
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = logits

        # Prefill: every sequence gets the same prompt (token ids 100..),
        # in one batch.
        n = 0
        for s in range(b):
            for p in range(args.prompt):
                add(n, 100 + p, p, s, p == args.prompt - 1)
                n += 1
        batch.n_tokens = n
        t0 = time.perf_counter()
        if ll.llama_decode(ctx, batch) != 0:
            sys.exit("prefill failed")
        t_prefill = time.perf_counter() - t0
        # Decode: one token per sequence per step (token choice does not
        # matter for speed; keep it cheap and deterministic).
        t0 = time.perf_counter()
        for step in range(args.gen):
            for s in range(b):
                add(s, 200 + (step + s) % 1000, args.prompt + step, s, True)
            batch.n_tokens = b
            if ll.llama_decode(ctx, batch) != 0:
                sys.exit("decode failed")
            ll.llama_synchronize(ctx)
        t_gen = time.perf_counter() - t0
        rate = b * args.gen / t_gen
        base = base or rate
        results.append({"batch": b, "decode_tps": rate, "speedup": rate / base,
                        "prefill_tps": b * args.prompt / t_prefill})
        print(f"B={b:>2}: decode {rate:7.1f} tokens/s ({rate / base:.2f}x B=1), "
              f"prefill {b * args.prompt / t_prefill:7.1f} tokens/s", file=sys.stderr)
        ll.llama_batch_free(batch)
        ll.llama_free(ctx)
    print(json.dumps({"args": vars(args), "results": results}))


if __name__ == "__main__":
    main()
