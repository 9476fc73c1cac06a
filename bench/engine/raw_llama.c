// llama.cpp alone, through its C API, linked against the very llama.cpp
// build svc uses (llama-cpp-sys-2's static libraries under target/release).
// Same measurement as llamacpp_bench.py; it separates "svc's engine code"
// from "the llama.cpp version" when svc and llama-cpp-python differ.
// Investigation tool, not part of bench/engine.sh; build it with
// bench/engine/raw_llama.sh.
//
// usage: raw_llama MODEL.gguf [threads=2] [prompt=512] [gen=128] [runs=3] [fa=-1|0|1]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"

static const char *SENTENCE =
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch. ";

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void quiet(enum ggml_log_level level, const char *text, void *data) {
    (void)level; (void)text; (void)data;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int n_prompt;
static llama_token *prompt;
static struct llama_context *ctx;
static struct llama_sampler *smpl;
static int n_batch = 512;

static void decode(llama_token *toks, int n) {
    if (llama_decode(ctx, llama_batch_get_one(toks, n)) != 0) {
        fprintf(stderr, "llama_decode failed\n");
        exit(1);
    }
}

static void generate(int n_gen, double *t_first, double *t_rest) {
    llama_memory_clear(llama_get_memory(ctx), true);
    llama_sampler_reset(smpl);
    double start = now();
    for (int i = 0; i < n_prompt; i += n_batch) {
        decode(prompt + i, n_prompt - i < n_batch ? n_prompt - i : n_batch);
    }
    llama_token tok = llama_sampler_sample(smpl, ctx, -1);
    double first = now();
    for (int i = 0; i < n_gen - 1; i++) {
        decode(&tok, 1);
        tok = llama_sampler_sample(smpl, ctx, -1);
    }
    double end = now();
    *t_first = first - start;
    *t_rest = end - first;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [threads] [prompt] [gen] [runs] [fa]\n", argv[0]);
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    int want = argc > 3 ? atoi(argv[3]) : 512;
    int gen = argc > 4 ? atoi(argv[4]) : 128;
    int runs = argc > 5 ? atoi(argv[5]) : 3;
    int fa = argc > 6 ? atoi(argv[6]) : -1;

    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) return 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);

    size_t cap = 1 << 16;
    char *text = calloc(cap, 1);
    prompt = malloc(sizeof(llama_token) * cap);
    for (;;) {
        int n = llama_tokenize(vocab, text, (int)strlen(text), prompt + 1, (int)cap - 1, false, true);
        int off = 0;
        if (llama_vocab_get_add_bos(vocab) && (n == 0 || prompt[1] != llama_vocab_bos(vocab))) {
            prompt[0] = llama_vocab_bos(vocab);
            off = 1;
        } else {
            memmove(prompt, prompt + 1, sizeof(llama_token) * n);
        }
        n_prompt = n + off;
        if (n_prompt >= want) break;
        strcat(text, SENTENCE);
    }

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = want + gen + 64;
    cp.n_batch = n_batch;
    cp.n_ubatch = n_batch;
    cp.n_seq_max = 1;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.no_perf = true;
    cp.flash_attn_type = (enum llama_flash_attn_type)fa;
    ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;
    struct llama_sampler_chain_params sp = llama_sampler_chain_default_params();
    sp.no_perf = true;
    smpl = llama_sampler_chain_init(sp);
    llama_sampler_chain_add(smpl, llama_sampler_init_greedy());

    double a, b, pp[64], tg[64];
    generate(8, &a, &b);
    if (runs > 64) runs = 64;
    for (int r = 0; r < runs; r++) {
        generate(gen, &a, &b);
        pp[r] = n_prompt / a;
        tg[r] = (gen - 1) / b;
    }
    qsort(pp, runs, sizeof(double), cmp);
    qsort(tg, runs, sizeof(double), cmp);
    printf("raw llama.cpp (svc's build): prompt %d tokens: %.1f tokens/s; decode %d tokens: %.1f tokens/s\n",
           n_prompt, pp[runs / 2], gen, tg[runs / 2]);
    llama_sampler_free(smpl);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
