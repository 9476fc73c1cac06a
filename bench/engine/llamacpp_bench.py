#!/usr/bin/env python3
"""Single-stream prompt and decode tokens/s of llama.cpp itself, through
llama-cpp-python's low-level C API (no Python sampling or detokenising in
the loop: greedy sampling is llama.cpp's own sampler).

It mirrors crates/svc-engine-llama/examples/bench.rs so the two are
comparable number for number:
  * the same prompt text (the same sentence repeated until the tokenizer
    gives >= --prompt tokens; BOS added when the model asks for it),
  * the same context (prompt + gen + 64 tokens, one sequence), n_batch 512,
    n_ubatch 512, the same thread count for prompt and decode,
  * flash attention left to llama.cpp (auto) unless --flash-attn on|off,
  * a warm-up generation of 8 tokens, then --runs timed runs, the KV cache
    cleared before each,
  * prompt tokens/s = prompt tokens / time to the first sampled token;
    decode tokens/s = (generated - 1) / time from the first to the last
    token; EOS is ignored (always --gen tokens).

Prints one JSON object on stdout.
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

SENTENCE = (
    "The quick brown fox jumps over the lazy dog while the farmer watches "
    "from the porch. "
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--ctx", type=int, default=0, help="default: prompt + gen + 64")
    ap.add_argument("--flash-attn", choices=["on", "off", "auto"], default="auto")
    args = ap.parse_args()

    import llama_cpp as ll

    ll.llama_backend_init()
    # Quiet llama.cpp's logging (the Rust side does the same through tracing).
    global _log_cb  # keep the callback alive as long as llama.cpp may call it
    _log_cb = ll.llama_log_callback(lambda level, text, data: None)
    ll.llama_log_set(_log_cb, None)

    mparams = ll.llama_model_default_params()
    model = ll.llama_model_load_from_file(args.model.encode(), mparams)
    if not model:
        sys.exit(f"cannot load {args.model}")
    vocab = ll.llama_model_get_vocab(model)

    def tokenize(text: str) -> list[int]:
        data = text.encode()
        buf = (ll.llama_token * (len(data) + 8))()
        n = ll.llama_tokenize(vocab, data, len(data), buf, len(buf), False, True)
        if n < 0:
            sys.exit("tokenize failed")
        toks = list(buf[:n])
        bos = ll.llama_vocab_bos(vocab)
        if ll.llama_vocab_get_add_bos(vocab) and (not toks or toks[0] != bos):
            toks.insert(0, bos)
        return toks

    text = ""
    while len(tokenize(text)) < args.prompt:
        text += SENTENCE
    prompt = tokenize(text)

    cparams = ll.llama_context_default_params()
    cparams.n_ctx = args.ctx or (args.prompt + args.gen + 64)
    cparams.n_batch = args.batch
    cparams.n_ubatch = min(args.batch, 512)
    cparams.n_seq_max = 1
    cparams.n_threads = args.threads
    cparams.n_threads_batch = args.threads
    cparams.no_perf = True
    cparams.flash_attn_type = {
        "on": ll.LLAMA_FLASH_ATTN_TYPE_ENABLED,
        "off": ll.LLAMA_FLASH_ATTN_TYPE_DISABLED,
        "auto": ll.LLAMA_FLASH_ATTN_TYPE_AUTO,
    }[args.flash_attn]
    ctx = ll.llama_init_from_model(model, cparams)
    if not ctx:
        sys.exit("cannot create the context")
    mem = ll.llama_get_memory(ctx)

    sparams = ll.llama_sampler_chain_default_params()
    sparams.no_perf = True
    smpl = ll.llama_sampler_chain_init(sparams)
    ll.llama_sampler_chain_add(smpl, ll.llama_sampler_init_greedy())

    def decode(tokens: list[int]) -> None:
        arr = (ll.llama_token * len(tokens))(*tokens)
        rc = ll.llama_decode(ctx, ll.llama_batch_get_one(arr, len(tokens)))
        if rc != 0:
            sys.exit(f"llama_decode failed: {rc}")

    def generate(n_gen: int) -> tuple[float, float]:
        """Returns (seconds to the first token, seconds for the rest)."""
        ll.llama_memory_clear(mem, True)
        ll.llama_sampler_reset(smpl)
        start = time.perf_counter()
        for i in range(0, len(prompt), args.batch):
            decode(prompt[i : i + args.batch])
        tok = ll.llama_sampler_sample(smpl, ctx, -1)
        first = time.perf_counter()
        for _ in range(n_gen - 1):
            decode([tok])
            tok = ll.llama_sampler_sample(smpl, ctx, -1)
        end = time.perf_counter()
        return first - start, end - first

    generate(8)  # warm-up
    pp, tg, ttft = [], [], []
    for _ in range(args.runs):
        t_first, t_rest = generate(args.gen)
        pp.append(len(prompt) / t_first)
        tg.append((args.gen - 1) / t_rest)
        ttft.append(t_first * 1000.0)

    json.dump(
        {
            "engine": "llama.cpp (llama-cpp-python %s)" % ll.__version__,
            "system_info": ll.llama_print_system_info().decode().strip(),
            "threads": args.threads,
            "n_ctx": cparams.n_ctx,
            "flash_attn": args.flash_attn,
            "prompt_tokens": len(prompt),
            "gen_tokens": args.gen,
            "prompt_tps": statistics.median(pp),
            "decode_tps": statistics.median(tg),
            "ttft_ms": statistics.median(ttft),
            "prompt_tps_runs": pp,
            "decode_tps_runs": tg,
        },
        sys.stdout,
    )
    print()
    ll.llama_sampler_free(smpl)
    ll.llama_free(ctx)
    ll.llama_model_free(model)


if __name__ == "__main__":
    main()
