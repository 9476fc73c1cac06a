// svc's batch-invariant attention for ggml's CPU backend (GGML_OP_FLASH_ATTN_EXT).
//
// ggml's own CPU kernels sum a query's attention in an order that depends on
// the batch: one query over 512 cells or more is split across threads, 64
// queries or more take a tiled kernel, the rest a vector kernel that visits
// cells one by one. A CPU backend that svc's engine adopts
// (svc_attention_adopt, for contexts with batch-invariant numerics) runs this
// kernel for every flash-attention node instead: just before the backend
// computes a graph, each such node becomes a custom operation (ggml's
// GGML_OP_CUSTOM, which the CPU backend runs on all its threads) calling
// this kernel with the node's own sources and settings (and each matrix
// product product.cpp takes, MUL_MAT or MUL_MAT_ID, runs its kernel, the
// same way).
// llama.cpp's sources are not changed; what this file relies on (the
// backend's table of entry points, the custom operation's parameters,
// simd_gemm) comes from the headers of the llama.cpp it is compiled
// against, so a llama.cpp that moves them fails this file's build rather
// than running it wrongly.
//
// The numerics, which are the same for every query however it is batched:
// a query's visible cells (those its mask row does not hide) are taken in
// pool order, which the engine keeps in position order, and cut into tiles
// of TILE cells counted from the first visible cell, so that the tiles do
// not depend on where the sequence's cells lie in the pool or on what else
// the pool holds. Within a tile, each score is a sum over the head dimension
// in order (one fused multiply-add after another), the running maximum
// moves once per tile, and each element of the output row gets the tile's
// weighted values one cell after another. This is the arithmetic of ggml's
// own tiled kernel (which it takes from 64 queries up, with tiles cut at
// fixed places in the pool): for a sequence whose cells start at the pool's
// first cell the two give the same bits. A query decoded alone, one of 16
// streams, or one token of a 512-token prompt chunk gets the same bits here.
//
// The speed comes from sharing work between the queries of a block: the
// queries of consecutive tokens of one sequence (their visible cells are
// prefixes of one list) and the query heads that share a KV head read each
// tile's K and V rows once, converted to f32 once (K transposed eight rows
// at a time in registers), and go through ggml's register-blocked matrix
// product (simd_gemm), whose sums per element run over the inner dimension
// in order whatever the number of rows. A block of a few rows (a stream
// decoding) reads the values straight from an F16 cache with the same
// fused multiply-adds. Which queries share a block changes only the speed,
// never a bit of the result.

#include "svc-kernels.h"

#include "ggml-backend-impl.h"
#include "ggml-cpu-impl.h"
#include "ggml-cpu.h"
#include "ggml-impl.h"
#include "simd-mappings.h"
#include "simd-gemm.h"
#include "vec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <atomic>

#if defined(GGML_SIMD) && !defined(__ARM_FEATURE_SVE) && !defined(__riscv_v_intrinsic)
#define SVC_ATTENTION 1
#else
#define SVC_ATTENTION 0
#endif

namespace {

#if SVC_ATTENTION

// Cells per tile. Part of the numerics: changing it changes every reply's
// bits (and so must change ATTENTION_KERNEL in the engine's numerics.rs).
constexpr int64_t TILE = 64;
// Most query rows (tokens x heads) computed together: speed only.
constexpr int64_t ROWS = 48;
// Blocks of at most this many rows read V straight from an F16 cache;
// larger ones convert each tile's rows to f32 once. Speed only.
constexpr int64_t FEW = 4;

// ggml's half-precision minus infinity: a cell the mask hides.
constexpr ggml_fp16_t HIDDEN = 0xFC00;

struct Scratch {
    std::vector<float> q, kq, vkq, kt, row, vbuf, s, m, zeros;
    std::vector<int32_t> list, next;
    std::vector<int64_t> len;
    std::vector<uint8_t> skip;
    std::vector<const void *> vrows;
};

thread_local Scratch scratch;

// A block of few rows reads its weighted values straight from an F16 cache:
// each output element gets one fused multiply-add per cell, in cell order,
// as ggml's simd_gemm computes it for larger blocks (the same bits).
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SVC_AVX2 1

// out[0..dv) += sum over the tile's cells of p[c] * rows[c], in cell order
// (dv a multiple of 8).
void weighted_f16(const float * p, const void * const * rows, int64_t dv, float * out) {
    for (int64_t d0 = 0; d0 < dv; d0 += 64) {
        const int64_t n = std::min<int64_t>(64, dv - d0) / 8;
        __m256 acc[8];
        for (int64_t j = 0; j < n; ++j) {
            acc[j] = _mm256_loadu_ps(out + d0 + j * 8);
        }
        for (int64_t c = 0; c < TILE; ++c) {
            const __m256 w = _mm256_set1_ps(p[c]);
            const ggml_fp16_t * row = (const ggml_fp16_t *) rows[c] + d0;
            for (int64_t j = 0; j < n; ++j) {
                const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (row + j * 8)));
                acc[j] = _mm256_fmadd_ps(x, w, acc[j]);
            }
        }
        for (int64_t j = 0; j < n; ++j) {
            _mm256_storeu_ps(out + d0 + j * 8, acc[j]);
        }
    }
}

#else
#define SVC_AVX2 0
#endif

// Reads rows of a K or V tensor as f32.
struct RowReader {
    ggml_type type;
    ggml_to_float_t to_float;

    explicit RowReader(ggml_type t) : type(t), to_float(ggml_get_type_traits(t)->to_float) {}

    bool ok() const { return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || to_float != nullptr; }

    void read(const char * src, float * dst, int64_t n) const {
        if (type == GGML_TYPE_F32) {
            std::memcpy(dst, src, n * sizeof(float));
        } else if (type == GGML_TYPE_F16) {
            ggml_cpu_fp16_to_fp32((const ggml_fp16_t *) src, dst, n);
        } else {
            to_float(src, dst, n);
        }
    }
};

struct Op {
    const ggml_tensor * q;
    const ggml_tensor * k;
    const ggml_tensor * v;
    const ggml_tensor * mask;
    const ggml_tensor * sinks;
    ggml_tensor * dst;
    RowReader kr, vr;
    int64_t DK, DV, N, n_kv;
    int64_t rk2, rk3, rv2, rv3;
    float scale, max_bias, softcap, m0, m1;
    uint32_t n_head_log2;
    int64_t heads_per_group;  // query heads computed together (sharing a KV head and a mask)
    bool v_direct;  // value rows that small blocks read straight from the cache

    // `settings`: the node's scale, max_bias and logit_softcap.
    Op(ggml_tensor * d, const float * settings)
        : q(d->src[0]), k(d->src[1]), v(d->src[2]), mask(d->src[3]), sinks(d->src[4]), dst(d),
          kr(d->src[1]->type), vr(d->src[2]->type) {
        DK = k->ne[0];
        DV = v->ne[0];
        N = q->ne[1];
        n_kv = k->ne[1];
        rk2 = q->ne[2] / k->ne[2];
        rk3 = q->ne[3] / k->ne[3];
        rv2 = q->ne[2] / v->ne[2];
        rv3 = q->ne[3] / v->ne[3];
        scale = settings[0];
        max_bias = settings[1];
        softcap = settings[2];
        if (softcap != 0.0f) {
            scale /= softcap;
        }
        const uint32_t n_head = (uint32_t) q->ne[2];
        n_head_log2 = 1u << (uint32_t) std::floor(std::log2(n_head));
        m0 = std::pow(2.0f, -(max_bias) / n_head_log2);
        m1 = std::pow(2.0f, -(max_bias / 2.0f) / n_head_log2);
        // Heads share a block (and each tile's K and V rows) when they read
        // the same K and V rows and the same mask row.
        const bool shared_mask = mask == nullptr || mask->ne[2] == 1;
        heads_per_group = (shared_mask && rk2 == rv2) ? rk2 : 1;
        v_direct = SVC_AVX2 && v->type == GGML_TYPE_F16 && DV % 8 == 0;
    }

    float slope(int64_t h) const {
        if (max_bias <= 0.0f) {
            return 1.0f;
        }
        return h < n_head_log2 ? std::pow(m0, (float) (h + 1)) : std::pow(m1, (float) (2 * (h - n_head_log2) + 1));
    }

    const ggml_fp16_t * mask_row(int64_t iq1, int64_t iq2, int64_t iq3) const {
        if (mask == nullptr) {
            return nullptr;
        }
        return (const ggml_fp16_t *) ((const char *) mask->data + iq1 * mask->nb[1] +
                                      (iq2 % mask->ne[2]) * mask->nb[2] + (iq3 % mask->ne[3]) * mask->nb[3]);
    }

    // The cells a query sees, in pool order.
    // Also says whether every visible cell's mask value is zero (either
    // sign), as llama.cpp's causal and sliding-window masks are (ALiBi's
    // are not): then adding it changes no score.
    bool visible(const ggml_fp16_t * mp, std::vector<int32_t> & out) const {
        out.clear();
        int64_t i = 0;
        if (mp == nullptr) {
            for (; i < n_kv; ++i) {
                out.push_back((int32_t) i);
            }
            return true;
        }
        bool zero = true;
        const auto is_zero = [](ggml_fp16_t m) { return (m & 0x7FFF) == 0; };
#if defined(__AVX2__)
        // 16 cells at a time, skipping runs of hidden ones (other sequences').
        const __m256i hidden = _mm256_set1_epi16((short) HIDDEN);
        for (; i + 16 <= n_kv; i += 16) {
            const __m256i m = _mm256_loadu_si256((const __m256i *) (mp + i));
            if ((uint32_t) _mm256_movemask_epi8(_mm256_cmpeq_epi16(m, hidden)) == 0xFFFFFFFFu) {
                continue;
            }
            for (int64_t j = i; j < i + 16; ++j) {
                if (mp[j] != HIDDEN) {
                    out.push_back((int32_t) j);
                    zero = zero && is_zero(mp[j]);
                }
            }
        }
#endif
        for (; i < n_kv; ++i) {
            if (mp[i] != HIDDEN) {
                out.push_back((int32_t) i);
                zero = zero && is_zero(mp[i]);
            }
        }
        return zero;
    }

    // kt[d][c] = K[cells[c]][d] for the tile's `cnt` cells, zero beyond.
    void k_tile(const int32_t * cells, int64_t cnt, int64_t ik2, int64_t ik3, float * kt, float * row) const {
        int64_t c = 0;
#if defined(__AVX2__) && defined(__F16C__)
        if (k->type == GGML_TYPE_F16 && DK % 8 == 0) {
            // Eight cells at a time: convert eight rows of eight values and
            // transpose them in registers.
            for (; c + 8 <= cnt; c += 8) {
                const ggml_fp16_t * src[8];
                for (int r = 0; r < 8; ++r) {
                    src[r] = (const ggml_fp16_t *) cell_row(k, cells[c + r], ik2, ik3);
                }
                for (int64_t d = 0; d < DK; d += 8) {
                    __m256 x[8];
                    for (int r = 0; r < 8; ++r) {
                        x[r] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (src[r] + d)));
                    }
                    const __m256 t0 = _mm256_unpacklo_ps(x[0], x[1]);
                    const __m256 t1 = _mm256_unpackhi_ps(x[0], x[1]);
                    const __m256 t2 = _mm256_unpacklo_ps(x[2], x[3]);
                    const __m256 t3 = _mm256_unpackhi_ps(x[2], x[3]);
                    const __m256 t4 = _mm256_unpacklo_ps(x[4], x[5]);
                    const __m256 t5 = _mm256_unpackhi_ps(x[4], x[5]);
                    const __m256 t6 = _mm256_unpacklo_ps(x[6], x[7]);
                    const __m256 t7 = _mm256_unpackhi_ps(x[6], x[7]);
                    const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
                    const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
                    const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
                    const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
                    const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
                    const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
                    const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
                    const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
                    _mm256_storeu_ps(kt + (d + 0) * TILE + c, _mm256_permute2f128_ps(u0, u4, 0x20));
                    _mm256_storeu_ps(kt + (d + 1) * TILE + c, _mm256_permute2f128_ps(u1, u5, 0x20));
                    _mm256_storeu_ps(kt + (d + 2) * TILE + c, _mm256_permute2f128_ps(u2, u6, 0x20));
                    _mm256_storeu_ps(kt + (d + 3) * TILE + c, _mm256_permute2f128_ps(u3, u7, 0x20));
                    _mm256_storeu_ps(kt + (d + 4) * TILE + c, _mm256_permute2f128_ps(u0, u4, 0x31));
                    _mm256_storeu_ps(kt + (d + 5) * TILE + c, _mm256_permute2f128_ps(u1, u5, 0x31));
                    _mm256_storeu_ps(kt + (d + 6) * TILE + c, _mm256_permute2f128_ps(u2, u6, 0x31));
                    _mm256_storeu_ps(kt + (d + 7) * TILE + c, _mm256_permute2f128_ps(u3, u7, 0x31));
                }
            }
        }
#endif
        for (; c < cnt; ++c) {
            const char * kd = cell_row(k, cells[c], ik2, ik3);
            kr.read(kd, row, DK);
            for (int64_t d = 0; d < DK; ++d) {
                kt[d * TILE + c] = row[d];
            }
        }
        if (cnt < TILE) {
            for (int64_t d = 0; d < DK; ++d) {
                std::fill(kt + d * TILE + cnt, kt + (d + 1) * TILE, 0.0f);
            }
        }
    }

    // A cell's row of head (i2, i3) in a K or V tensor.
    static const char * cell_row(const ggml_tensor * t, int32_t cell, int64_t i2, int64_t i3) {
        return (const char *) t->data + cell * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
    }

    static bool is_prefix(const std::vector<int32_t> & a, const std::vector<int32_t> & b) {
        return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
    }

    // Attention of tokens [t0, t1) for the query heads of one group.
    void run(int64_t iq3, int64_t group, int64_t t0, int64_t t1) const {
        Scratch & sc = scratch;
        const int64_t hg = heads_per_group;
        const int64_t max_tokens = std::max<int64_t>(1, ROWS / hg);
        const int64_t h0 = group * hg;
        // Whether sc.list already holds token t's cells (the token that
        // ended the previous block).
        bool carried = false;
        // Whether the carried token's mask values are all zero.
        bool carried_zero = true;
        int64_t t = t0;
        while (t < t1) {
            // A block: consecutive tokens whose visible cells are prefixes
            // of one list (the tokens of one sequence, in order).
            bool zero = carried ? carried_zero : visible(mask_row(t, h0, iq3), sc.list);
            carried = false;
            sc.len.assign(1, (int64_t) sc.list.size());
            int64_t tb = t + 1;
            bool ended = false;
            while (tb < t1 && tb - t < max_tokens) {
                const bool next_zero = visible(mask_row(tb, h0, iq3), sc.next);
                const int64_t n = (int64_t) sc.next.size();
                if (is_prefix(sc.next, sc.list)) {
                    // within the block's list
                } else if (is_prefix(sc.list, sc.next)) {
                    std::swap(sc.list, sc.next);
                } else {
                    ended = true;
                    carried_zero = next_zero;
                    break;
                }
                zero = zero && next_zero;
                sc.len.push_back(n);
                ++tb;
            }
            block(iq3, h0, t, tb, zero);
            if (ended) {
                // Token tb starts the next block with the cells just read.
                std::swap(sc.list, sc.next);
                carried = true;
            }
            t = tb;
        }
    }

    // `zero_mask`: every mask value the block's queries see is zero.
    void block(int64_t iq3, int64_t h0, int64_t t, int64_t tb, bool zero_mask) const {
        Scratch & sc = scratch;
        // Scores that are only scaled: the scalar loop's products, the same
        // bits (a zero mask value adds nothing), eight at a time.
        const bool plain = zero_mask && softcap == 0.0f && max_bias <= 0.0f;
        const int64_t hg = heads_per_group;
        const int64_t nq = (tb - t) * hg;
        const std::vector<int32_t> & cells = sc.list;
        const int64_t n_cells = (int64_t) cells.size();
        const bool v_raw = nq <= FEW && v_direct;

        sc.q.resize(nq * DK);
        sc.kq.resize(nq * TILE);
        sc.vkq.assign(nq * DV, 0.0f);
        sc.kt.resize(DK * TILE);
        sc.row.resize(DK);
        sc.s.assign(nq, 0.0f);
        sc.m.assign(nq, -INFINITY);
        sc.skip.resize(nq);
        if (v_raw) {
            sc.vrows.resize(TILE);
            if ((int64_t) sc.zeros.size() < DV) {
                sc.zeros.assign(DV, 0.0f);
            }
        } else {
            sc.vbuf.resize(TILE * DV);
        }

        for (int64_t i = 0; i < tb - t; ++i) {
            for (int64_t j = 0; j < hg; ++j) {
                const float * pq = (const float *) ((const char *) q->data + (t + i) * q->nb[1] + (h0 + j) * q->nb[2] + iq3 * q->nb[3]);
                std::memcpy(sc.q.data() + (i * hg + j) * DK, pq, DK * sizeof(float));
            }
        }

        const int64_t ik2 = h0 / rk2;
        const int64_t ik3 = iq3 / rk3;
        const int64_t iv2 = h0 / rv2;
        const int64_t iv3 = iq3 / rv3;
        const void * zero = sc.zeros.data();  // a row of zeros, as f16 or f32

        for (int64_t s0 = 0; s0 < n_cells; s0 += TILE) {
            const int64_t cnt = std::min(TILE, n_cells - s0);

            // K tile, transposed: kt[dk][cell]; the scores by ggml's
            // matrix product (each a sum over the head dimension in order).
            k_tile(cells.data() + s0, cnt, ik2, ik3, sc.kt.data(), sc.row.data());
            std::fill(sc.kq.begin(), sc.kq.end(), 0.0f);
            simd_gemm(sc.kq.data(), sc.q.data(), sc.kt.data(), (int) nq, (int) DK, (int) TILE);

            for (int64_t i = 0; i < tb - t; ++i) {
                const int64_t seen = std::clamp<int64_t>(sc.len[i] - s0, 0, TILE);
                for (int64_t j = 0; j < hg; ++j) {
                    const int64_t r = i * hg + j;
                    float * kq = sc.kq.data() + r * TILE;
                    if (seen == 0) {
                        sc.skip[r] = 1;
                        std::fill(kq, kq + TILE, 0.0f);
                        continue;
                    }
                    if (plain) {
                        ggml_vec_scale_f32((int) seen, kq, scale);
                    } else {
                        const float sl = slope(h0 + j);
                        const ggml_fp16_t * mp = mask_row(t + i, h0 + j, iq3);
                        for (int64_t c = 0; c < seen; ++c) {
                            float x = kq[c] * scale;
                            if (softcap != 0.0f) {
                                x = softcap * tanhf(x);
                            }
                            if (mp != nullptr) {
                                x += sl * GGML_CPU_FP16_TO_FP32(mp[cells[s0 + c]]);
                            }
                            kq[c] = x;
                        }
                    }
                    std::fill(kq + seen, kq + TILE, -INFINITY);

                    float tile_max;
                    ggml_vec_max_f32((int) TILE, &tile_max, kq);
                    if (tile_max == -INFINITY) {
                        sc.skip[r] = 1;
                        std::fill(kq, kq + TILE, 0.0f);
                        continue;
                    }
                    sc.skip[r] = 0;
                    const float m_old = sc.m[r];
                    const float m_new = std::max(m_old, tile_max);
                    if (m_new > m_old) {
                        const float ms = expf(m_old - m_new);
                        ggml_vec_scale_f32((int) DV, sc.vkq.data() + r * DV, ms);
                        sc.s[r] *= ms;
                    }
                    sc.m[r] = m_new;
                    sc.s[r] = (float) ((ggml_float) sc.s[r] + ggml_vec_soft_max_f32((int) TILE, kq, kq, m_new));
                }
            }

            // The weighted values, added in cell order (zero weights and
            // zero rows past the tile's cells).
#if SVC_AVX2
            if (v_raw) {
                for (int64_t c = 0; c < TILE; ++c) {
                    sc.vrows[c] = c < cnt ? (const void *) cell_row(v, cells[s0 + c], iv2, iv3) : zero;
                }
                for (int64_t r = 0; r < nq; ++r) {
                    weighted_f16(sc.kq.data() + r * TILE, sc.vrows.data(), DV, sc.vkq.data() + r * DV);
                }
                continue;
            }
#endif
            for (int64_t c = 0; c < cnt; ++c) {
                const char * vd = cell_row(v, cells[s0 + c], iv2, iv3);
                vr.read(vd, sc.vbuf.data() + c * DV, DV);
            }
            if (cnt < TILE) {
                std::fill(sc.vbuf.begin() + cnt * DV, sc.vbuf.end(), 0.0f);
            }
            simd_gemm(sc.vkq.data(), sc.kq.data(), sc.vbuf.data(), (int) nq, (int) TILE, (int) DV);
        }

        for (int64_t i = 0; i < tb - t; ++i) {
            for (int64_t j = 0; j < hg; ++j) {
                const int64_t r = i * hg + j;
                const int64_t h = h0 + j;
                float * out = sc.vkq.data() + r * DV;
                if (sinks != nullptr) {
                    const float s = ((const float *) sinks->data)[h];
                    float ms = 1.0f;
                    float vs = 1.0f;
                    if (s > sc.m[r]) {
                        ms = expf(sc.m[r] - s);
                        ggml_vec_scale_f32((int) DV, out, ms);
                    } else {
                        vs = expf(s - sc.m[r]);
                    }
                    sc.s[r] = sc.s[r] * ms + vs;
                }
                const float s_inv = sc.s[r] == 0.0f ? 0.0f : 1.0f / sc.s[r];
                ggml_vec_scale_f32((int) DV, out, s_inv);
                // dst is permuted (0, 2, 1, 3): [DV, heads, tokens, ...]
                const int64_t i1 = t + i;
                const int64_t ne1 = dst->ne[1];
                const int64_t ne2 = dst->ne[2];
                std::memcpy((char *) dst->data + (iq3 * ne2 * ne1 + h + i1 * ne1) * dst->nb[1], out, dst->nb[1]);
            }
        }
    }
};

// Where a rewritten node keeps its own settings (scale, max_bias,
// logit_softcap), past the custom operation's parameters.
constexpr size_t SETTINGS = 8;
static_assert(sizeof(ggml_custom_op_params) <= SETTINGS * sizeof(int32_t), "ggml's custom operation parameters grew");
static_assert((SETTINGS + 3) * sizeof(int32_t) <= GGML_MAX_OP_PARAMS, "no room for the node's settings");

void attention(ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) userdata;
    const Op op(dst, (const float *) dst->op_params + SETTINGS);
    const ggml_tensor * q = dst->src[0];
    // Work items: (sequence dim, head group, a range of tokens), handed out
    // to the threads round-robin. How they are cut changes only the speed.
    const int64_t groups = q->ne[2] / op.heads_per_group;
    const int64_t outer = q->ne[3] * groups;
    const int64_t wanted = std::max<int64_t>(1, (4 * (int64_t) nth + outer - 1) / outer);
    int64_t span = std::max<int64_t>(1, (op.N + wanted - 1) / wanted);
    span = std::min<int64_t>(span, std::max<int64_t>(1, ROWS / op.heads_per_group) * 4);
    const int64_t ranges = (op.N + span - 1) / span;
    const int64_t items = outer * ranges;
    for (int64_t it = ith; it < items; it += nth) {
        const int64_t range = it % ranges;
        const int64_t og = it / ranges;
        const int64_t group = og % groups;
        const int64_t iq3 = og / groups;
        const int64_t t0 = range * span;
        const int64_t t1 = std::min(op.N, t0 + span);
        op.run(iq3, group, t0, t1);
    }
}

// Whether this kernel computes `node` (a flash-attention node) as ggml would.
bool supported(const ggml_tensor * node) {
    const ggml_tensor * q = node->src[0];
    const ggml_tensor * k = node->src[1];
    const ggml_tensor * v = node->src[2];
    const ggml_tensor * sinks = node->src[4];
    const int32_t prec = node->op_params[3];
    return q->type == GGML_TYPE_F32 && (prec == GGML_PREC_DEFAULT || prec == GGML_PREC_F32) &&
           node->type == GGML_TYPE_F32 && q->nb[0] == sizeof(float) && q->ne[0] == k->ne[0] &&
           k->nb[0] == ggml_type_size(k->type) && v->nb[0] == ggml_type_size(v->type) &&
           node->nb[0] == sizeof(float) && node->nb[1] == (size_t) v->ne[0] * sizeof(float) &&
           RowReader(k->type).ok() && RowReader(v->type).ok() &&
           (sinks == nullptr || sinks->type == GGML_TYPE_F32);
}

// Turns `node` into a custom operation that runs `fun` on all the
// backend's threads, with the node's own sources.
void make_custom(ggml_tensor * node, ggml_custom_op_t fun) {
    ggml_custom_op_params custom = {};
    custom.fun = fun;
    custom.n_tasks = GGML_N_TASKS_MAX;
    custom.userdata = nullptr;
    std::memcpy(node->op_params, &custom, sizeof(custom));
    node->op = GGML_OP_CUSTOM;
}

// Turns a flash-attention node into a custom operation that runs `attention`.
void rewrite(ggml_tensor * node) {
    float settings[3];
    std::memcpy(settings, node->op_params, sizeof(settings));
    std::memcpy(node->op_params + SETTINGS, settings, sizeof(settings));
    make_custom(node, attention);
}

#endif  // SVC_ATTENTION

using GraphCompute = ggml_status (*)(ggml_backend_t, ggml_cgraph *);
// The CPU backend's own graph_compute entry (the same for every CPU backend).
std::atomic<GraphCompute> original{nullptr};
// Flash-attention nodes given to this kernel so far, for tests.
std::atomic<uint64_t> rewritten{0};
// Matrix products given to product.cpp's kernel so far, and how many of
// them a mixture of experts' (MUL_MAT_ID), for tests.
std::atomic<uint64_t> products{0};
std::atomic<uint64_t> mixtures{0};

ggml_status compute(ggml_backend_t backend, ggml_cgraph * graph) {
#if SVC_ATTENTION
    // Nodes already rewritten (llama.cpp reuses a graph from one step to the
    // next) are custom operations now and are left as they are.
    for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) {
        ggml_tensor * node = ggml_graph_node(graph, i);
        if (node->op == GGML_OP_FLASH_ATTN_EXT && supported(node)) {
            rewrite(node);
            rewritten.fetch_add(1, std::memory_order_relaxed);
        } else if ((node->op == GGML_OP_MUL_MAT || node->op == GGML_OP_MUL_MAT_ID) && svc_product_supported(node)) {
            (node->op == GGML_OP_MUL_MAT_ID ? mixtures : products).fetch_add(1, std::memory_order_relaxed);
            make_custom(node, svc_product);
        }
    }
#endif
    return original.load()(backend, graph);
}

}  // namespace

extern "C" {

// Makes `backend` (a CPU backend) run svc's attention kernel for each
// flash-attention node of the graphs it computes. Returns false, changing
// nothing, where this build has no kernel (no SIMD) or `backend` is not a
// CPU backend made as this file expects. Adopting a backend twice is the
// same as once.
bool svc_attention_adopt(ggml_backend_t backend) {
#if SVC_ATTENTION
    if (backend == nullptr || !ggml_backend_is_cpu(backend)) {
        return false;
    }
    if (backend->iface.graph_compute == compute) {
        return true;
    }
    GraphCompute own = backend->iface.graph_compute;
    GraphCompute expected = nullptr;
    if (own == nullptr || (!original.compare_exchange_strong(expected, own) && expected != own)) {
        return false;
    }
    backend->iface.graph_compute = compute;
    return true;
#else
    (void) backend;
    return false;
#endif
}

// How many matrix products product.cpp's kernel has been given to compute
// (MUL_MAT nodes, and a mixture's MUL_MAT_ID ones).
uint64_t svc_product_nodes(void) {
    return products.load(std::memory_order_relaxed) + mixtures.load(std::memory_order_relaxed);
}

// How many of them were a mixture of experts' (MUL_MAT_ID).
uint64_t svc_mixture_nodes(void) {
    return mixtures.load(std::memory_order_relaxed);
}

// How many flash-attention nodes this kernel has been given to compute.
uint64_t svc_attention_nodes(void) {
    return rewritten.load(std::memory_order_relaxed);
}

}
