// svc's matrix products of Q4_0, Q4_1, Q5_0, IQ4_NL, IQ4_XS and Q2_K to Q6_K
// weights for ggml's CPU backend (GGML_OP_MUL_MAT of such a matrix, not repacked, by F32
// activations), and ggml's dot product for the other types its faster
// kernels sum otherwise.
//
// ggml multiplies Q4_1 rows one dot product at a time (there is no batched
// Q4_1 kernel on x86, in llamafile's tiles or in the CPU repack): for each
// row and each token it unpacks the row's 4-bit values again and sums the
// blocks in order. That is batch-invariant, and for one token it is as fast
// as the memory allows, but a prompt chunk or many streams unpack every row
// once per token. For the other types here (not repacked: an invariant
// engine keeps them as stored) ggml has faster kernels for
// several tokens (llamafile's tiles, its CPU repack, its tiled K-quant
// product), but they sum in another order than one token's dot product
// (see numerics.rs). This file computes each output element with exactly
// the arithmetic of ggml's dot product (`ggml_vec_dot_q4_1_q8_1`,
// `ggml_vec_dot_q4_0_q8_0`, `ggml_vec_dot_q5_0_q8_0`,
// `ggml_vec_dot_iq4_nl_q8_0`, `ggml_vec_dot_iq4_xs_q8_K` and
// `ggml_vec_dot_q2_K_q8_K` to `ggml_vec_dot_q6_K_q8_K` for AVX2, the activations quantized by ggml's
// own `quantize_row_q8_1`, `quantize_row_q8_0` and `quantize_row_q8_K`),
// so the result is the same
// bits as ggml's for any batch, but a strip of tokens shares the work: each
// row's values are unpacked once per block for eight tokens (for the last
// few tokens of 32-value blocks, each token's block is loaded once for two
// rows instead).
//
// A mixture of experts' product (GGML_OP_MUL_MAT_ID: each token by the few
// experts' matrices its router picks) is the same thing expert by expert:
// each expert's matrix by the tokens routed to it. ggml sums each of those
// elements with its dot product too, except that its tiled K-quant kernel
// takes an expert's tokens from eight on; here every type summed otherwise
// takes this file's kernels, in a mixture as in a plain matrix.
//
// The backend svc adopts (attention.cpp) turns each such node into a custom
// operation running `svc_product` just before the graph is computed.

#include "svc-kernels.h"

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-cpu-impl.h"
#include "ggml-impl.h"
#include "quants.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define SVC_PRODUCT 1
#else
#define SVC_PRODUCT 0
#endif

#if SVC_PRODUCT

namespace {

// ggml's block layouts (ggml-common.h), checked against ggml's sizes.
struct Q4_0 {
    uint16_t d;  // scale, f16
    uint8_t qs[16];
};
struct Q4_1 {
    uint16_t d;  // scale, f16
    uint16_t m;  // offset, f16
    uint8_t qs[16];
};
struct Q5_0 {
    uint16_t d;  // scale, f16
    uint8_t qh[4];  // the fifth bits
    uint8_t qs[16];
};
struct IQ4_NL {
    uint16_t d;  // scale, f16
    uint8_t qs[16];  // indices into ggml's 16 non-linear values
};
struct Q8_0 {
    uint16_t d;  // scale, f16
    int8_t qs[32];
};
struct Q8_1 {
    uint16_t d;  // scale, f16
    uint16_t s;  // d * sum(qs), f16
    int8_t qs[32];
};
static_assert(sizeof(Q4_0) == 18, "Q4_0 block");
static_assert(sizeof(Q4_1) == 20, "Q4_1 block");
static_assert(sizeof(Q5_0) == 22, "Q5_0 block");
static_assert(sizeof(IQ4_NL) == 18, "IQ4_NL block");
static_assert(sizeof(Q8_0) == 34, "Q8_0 block");
static_assert(sizeof(Q8_1) == 36, "Q8_1 block");

constexpr int64_t QK = 32;
// Tokens quantized and multiplied together by one thread: speed only.
constexpr int64_t CHUNK = 64;

inline float half(uint16_t h) {
    return _cvtsh_ss(h);
}

// ggml's bytes_from_nibbles_32: 16 bytes of 4-bit values, low halves first.
inline __m256i nibbles(const uint8_t * qs) {
    const __m128i tmp = _mm_loadu_si128((const __m128i *) qs);
    const __m256i bytes = _mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp);
    return _mm256_and_si256(_mm256_set1_epi8(0xF), bytes);
}

// ggml's bytes_from_bits_32: byte i is all ones where bit i of the four
// bytes at `x` is set, zero where it is not.
inline __m256i bits(const uint8_t * x) {
    uint32_t x32;
    std::memcpy(&x32, x, sizeof(x32));
    const __m256i shuffle = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int) x32), shuffle);
    const __m256i mask = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
    return _mm256_cmpeq_epi8(_mm256_or_si256(bytes, mask), _mm256_set1_epi64x(-1));
}

// ggml's mul_sum_us8_pairs_float: eight sums of four products each, as
// floats. (Every variant ggml has gives the same integers: the 4- and
// 5-bit values times 8-bit ones cannot saturate 16 bits.)
inline __m256 products(const __m256i x, const __m256i y) {
    const __m256i dot = _mm256_maddubs_epi16(x, y);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), dot));
}

// ggml's hsum_float_8.
inline float hsum(const __m256 x) {
    __m128 res = _mm256_extractf128_ps(x, 1);
    res = _mm_add_ps(res, _mm256_castps256_ps128(x));
    res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    res = _mm_add_ss(res, _mm_movehdup_ps(res));
    return _mm_cvtss_f32(res);
}

// A matrix of weights: rows of `k` values of `type`, row r at
// data + r * stride (a plain 2-D matrix, or one expert of a mixture's 3-D one).
struct Matrix {
    const char * data;
    size_t stride;
    int64_t k;
    ggml_type type;
};

// Blocks of 32 values with an f16 scale, multiplied by tokens quantized to
// 8 bits in blocks of 32 (ggml's `ggml_vec_dot_q4_1_q8_1`,
// `ggml_vec_dot_q4_0_q8_0` and `ggml_vec_dot_q5_0_q8_0` for AVX2): per
// block, eight lanes of four products each (exact integers), converted to
// floats and added to eight float lanes with one fused multiply-add of the
// two scales' product (rounded once, as ggml's scalar product is); at the
// end, the eight lanes as ggml's hsum_float_8 adds them. Q4_1 blocks also
// have an offset: ggml adds the offset times the token block's scaled sum
// to a sum of its own, by fused multiply-add, and that sum to the lanes'.
// IQ4_NL (`ggml_vec_dot_iq4_nl_q8_0`) keeps two sets of eight lanes, the
// even blocks' and the odd blocks', and adds them before hsum_float_8 (an
// odd last block it adds in scalar code: svc's product leaves rows of an
// odd number of blocks to ggml's dot product).
//
// Each row type says its blocks, its tokens' blocks, how ggml quantizes
// the tokens, how it unpacks a block's values (as unsigned bytes when
// the row has an offset, as signed bytes when not) and whether it sums
// the blocks in two alternating sets of lanes.

struct Q41Rows {
    using Block = Q4_1;
    using Act = Q8_1;
    static constexpr bool offset = true;
    static constexpr bool pairs = false;
    static void quantize(const float * x, Act * q, int64_t k) { quantize_row_q8_1(x, q, k); }
    static __m256i values(const Block & x) { return nibbles(x.qs); }
};
struct Q40Rows {
    using Block = Q4_0;
    using Act = Q8_0;
    static constexpr bool offset = false;
    static constexpr bool pairs = false;
    static void quantize(const float * x, Act * q, int64_t k) { quantize_row_q8_0(x, q, k); }
    // ggml: the 4-bit values less 8.
    static __m256i values(const Block & x) { return _mm256_sub_epi8(nibbles(x.qs), _mm256_set1_epi8(8)); }
};
struct Q50Rows {
    using Block = Q5_0;
    using Act = Q8_0;
    static constexpr bool offset = false;
    static constexpr bool pairs = false;
    static void quantize(const float * x, Act * q, int64_t k) { quantize_row_q8_0(x, q, k); }
    // ggml: the 4-bit values, less 16 where the fifth bit is clear.
    static __m256i values(const Block & x) {
        const __m256i high = _mm256_andnot_si256(bits(x.qh), _mm256_set1_epi8((char) 0xF0));
        return _mm256_or_si256(nibbles(x.qs), high);
    }
};
struct IQ4NLRows {
    using Block = IQ4_NL;
    using Act = Q8_0;
    static constexpr bool offset = false;
    static constexpr bool pairs = true;
    static void quantize(const float * x, Act * q, int64_t k) { quantize_row_q8_0(x, q, k); }
    // IQ4_NL's 16 values (ggml-common.h's kvalues_iq4nl).
    static constexpr int8_t levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};
    // ggml: each 4-bit index's value, low halves first.
    static __m256i values(const Block & x) {
        const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *) levels));
        return _mm256_shuffle_epi8(table, nibbles(x.qs));
    }
};

// The tokens of a chunk, quantized: their blocks, token after token, and
// each block's scale (and, for Q8_1, its scaled sum) as floats, block after
// block (the scales of block ib of tokens c..c+7 side by side), padded so
// that eight can always be loaded.
template <class Act>
struct Tokens {
    const Act * q;       // token j's blocks at q + j * blocks
    const float * d;     // block ib of token j: d[ib * CHUNK + j]
    const float * s;     // likewise, d * sum(qs) (Q8_1 only)
    int64_t blocks;
};

// A Q4_1 block's scale and offset as floats (lanes 0 and 1), converted
// together.
inline __m128 scale_and_offset(const Q4_1 & x) {
    int32_t dm;
    std::memcpy(&dm, &x.d, sizeof(dm));
    return _mm_cvtph_ps(_mm_cvtsi32_si128(dm));
}

// R rows times C tokens (from c0), every element summed as ggml's dot
// product sums it (see above); the C tokens' scale products (and offset
// sums) are lanes of one vector. Signed values are multiplied as ggml's
// mul_sum_i8_pairs_float does, by their magnitudes (taken once per row
// block) and the token's values with their signs.
template <class Rows, int R, int C>
void tile(const typename Rows::Block * const * rows, const Tokens<typename Rows::Act> & t, int64_t c0,
          float * const * out) {
    static_assert(C >= 1 && C <= 8, "at most eight tokens");
    using Act = typename Rows::Act;
    using Lanes = __m256[R][C];
    Lanes acc;
    Lanes odd;  // the odd blocks' lanes, for rows that sum in pairs
    __m256 summs[R];
    for (int r = 0; r < R; ++r) {
        summs[r] = _mm256_setzero_ps();
        for (int c = 0; c < C; ++c) {
            acc[r][c] = _mm256_setzero_ps();
            odd[r][c] = _mm256_setzero_ps();
        }
    }
    const Act * cols[C];
    for (int c = 0; c < C; ++c) {
        cols[c] = t.q + (c0 + c) * t.blocks;
    }
    const auto block = [&](int64_t ib, Lanes & lanes) {
        const __m256 yd = _mm256_loadu_ps(t.d + ib * CHUNK + c0);
        __m256i qx[R];
        __m256i ax[R];
        __m256 d[R];
        for (int r = 0; r < R; ++r) {
            const auto & x = rows[r][ib];
            qx[r] = Rows::values(x);
            if constexpr (Rows::offset) {
                const __m128 dm = scale_and_offset(x);
                const __m256 ys = _mm256_loadu_ps(t.s + ib * CHUNK + c0);
                summs[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dm)), ys, summs[r]);
                d[r] = _mm256_mul_ps(_mm256_broadcastss_ps(dm), yd);
                ax[r] = qx[r];
            } else {
                d[r] = _mm256_mul_ps(_mm256_set1_ps(half(x.d)), yd);
                ax[r] = _mm256_sign_epi8(qx[r], qx[r]);
            }
        }
        for (int c = 0; c < C; ++c) {
            const __m256i qy = _mm256_loadu_si256((const __m256i *) cols[c][ib].qs);
            const __m256i index = _mm256_set1_epi32(c);
            for (int r = 0; r < R; ++r) {
                const __m256 dc = _mm256_permutevar8x32_ps(d[r], index);
                const __m256i y = Rows::offset ? qy : _mm256_sign_epi8(qy, qx[r]);
                lanes[r][c] = _mm256_fmadd_ps(dc, products(ax[r], y), lanes[r][c]);
            }
        }
    };
    if constexpr (Rows::pairs) {
        // An even number of blocks (see multiply).
        for (int64_t ib = 0; ib + 1 < t.blocks; ib += 2) {
            block(ib, acc);
            block(ib + 1, odd);
        }
        for (int r = 0; r < R; ++r) {
            for (int c = 0; c < C; ++c) {
                acc[r][c] = _mm256_add_ps(acc[r][c], odd[r][c]);
            }
        }
    } else {
        for (int64_t ib = 0; ib < t.blocks; ++ib) {
            block(ib, acc);
        }
    }
    for (int r = 0; r < R; ++r) {
        if constexpr (Rows::offset) {
            float offsets[8];
            _mm256_storeu_ps(offsets, summs[r]);
            for (int c = 0; c < C; ++c) {
                out[c][r] = hsum(acc[r][c]) + offsets[c];
            }
        } else {
            for (int c = 0; c < C; ++c) {
                out[c][r] = hsum(acc[r][c]);
            }
        }
    }
}

// Rows [r0, r1) of `w` times tokens c0 to c0 + C of `t`, into the tokens'
// output rows `out` (element i of token c at out[c][i]): tiles of R rows,
// then the rows left one at a time.
template <class Rows, int R, int C>
void strip(const Matrix & w, int64_t r0, int64_t r1, const Tokens<typename Rows::Act> & t, int64_t c0,
           float * const * out) {
    using Block = typename Rows::Block;
    const char * base = w.data;
    const Block * rows[R];
    float * outs[C];
    int64_t r = r0;
    for (; r + R <= r1; r += R) {
        for (int i = 0; i < R; ++i) {
            rows[i] = (const Block *) (base + (r + i) * w.stride);
        }
        for (int c = 0; c < C; ++c) {
            outs[c] = out[c0 + c] + r;
        }
        tile<Rows, R, C>(rows, t, c0, outs);
    }
    for (; r < r1; ++r) {
        rows[0] = (const Block *) (base + r * w.stride);
        for (int c = 0; c < C; ++c) {
            outs[c] = out[c0 + c] + r;
        }
        tile<Rows, 1, C>(rows, t, c0, outs);
    }
}

// Rows [r0, r1) of `w` times the `n` quantized tokens `t`: strips of eight
// tokens by one row (each row block unpacked once for eight tokens), and
// the last few tokens by two rows (each token block loaded once for two).
template <class Rows>
void rows_by_tokens(const Matrix & w, int64_t r0, int64_t r1, const Tokens<typename Rows::Act> & t, int64_t n,
                    float * const * out) {
    int64_t c0 = 0;
    for (; c0 + 8 <= n; c0 += 8) {
        strip<Rows, 1, 8>(w, r0, r1, t, c0, out);
    }
    switch (n - c0) {
        case 7: strip<Rows, 1, 7>(w, r0, r1, t, c0, out); break;
        case 6: strip<Rows, 1, 6>(w, r0, r1, t, c0, out); break;
        case 5: strip<Rows, 1, 5>(w, r0, r1, t, c0, out); break;
        case 4: strip<Rows, 2, 4>(w, r0, r1, t, c0, out); break;
        case 3: strip<Rows, 2, 3>(w, r0, r1, t, c0, out); break;
        case 2: strip<Rows, 2, 2>(w, r0, r1, t, c0, out); break;
        case 1: strip<Rows, 2, 1>(w, r0, r1, t, c0, out); break;
        default: break;
    }
}

// Each of ggml's threads keeps its quantized tokens here between nodes
// (one buffer per activation block type).
template <class Act>
thread_local std::vector<Act> quantized;
thread_local std::vector<float> scales;

// Quantizes the `tokens` activations `in` (as ggml does for its dot
// product) and multiplies rows [r0, r1) of `w` by them, CHUNK tokens at a
// time, token j's products going to out[j] (element r at out[j][r]).
template <class Rows>
void run(const Matrix & w, int64_t r0, int64_t r1, int64_t tokens, const float * const * in, float * const * out) {
    using Act = typename Rows::Act;
    const int64_t k = w.k;
    const int64_t blocks = k / QK;
    const int64_t chunk = std::min<int64_t>(CHUNK, tokens);
    std::vector<Act> & q8 = quantized<Act>;
    if ((int64_t) q8.size() < chunk * blocks) {
        q8.resize(chunk * blocks);
    }
    // d (and s) of every block, CHUNK tokens wide, and eight floats to spare.
    if ((int64_t) scales.size() < 2 * blocks * CHUNK + 8) {
        scales.resize(2 * blocks * CHUNK + 8);
    }
    const Tokens<Act> t = {q8.data(), scales.data(), scales.data() + blocks * CHUNK, blocks};
    for (int64_t j0 = 0; j0 < tokens; j0 += CHUNK) {
        const int64_t n = std::min<int64_t>(CHUNK, tokens - j0);
        for (int64_t j = 0; j < n; ++j) {
            Act * q = q8.data() + j * blocks;
            Rows::quantize(in[j0 + j], q, k);
            for (int64_t ib = 0; ib < blocks; ++ib) {
                scales[ib * CHUNK + j] = half(q[ib].d);
                if constexpr (Rows::offset) {
                    scales[(blocks + ib) * CHUNK + j] = half(q[ib].s);
                }
            }
        }
        rows_by_tokens<Rows>(w, r0, r1, t, n, out + j0);
    }
}

// Q4_K: super-blocks of 256 values in eight sub-blocks of 32, each with a
// 6-bit scale and a 6-bit min, and the super-block's f16 scale of each.
// ggml's dot product (`ggml_vec_dot_q4_K_q8_K` for AVX2) takes activations
// quantized to Q8_K by `quantize_row_q8_K` and, per super-block, sums the
// scaled products in eight int32 lanes (exact: any order of the integer
// additions gives the same lanes), adds them with one 8-lane fused
// multiply-add of the two scales' product, and the mins' products (the
// token's pair sums of 16 against the row's mins, four int32 lanes) with
// one 4-lane fused multiply-add of minus the token's scale times the row's
// min scale; at the end, the 8-lane sum ggml's hsum_float_8 gives plus the
// 4 lanes summed as (0 + 2) + (1 + 3). This computes the same, a row's
// super-block unpacked once for a strip of tokens.

struct Q4_K {
    uint16_t d;     // scale of the scales, f16
    uint16_t dmin;  // scale of the mins, f16
    uint8_t scales[12];
    uint8_t qs[128];
};
struct Q8_K {
    float d;
    int8_t qs[256];
    int16_t bsums[16];  // sums of 16 values each
};
static_assert(sizeof(Q4_K) == 144, "Q4_K block");
static_assert(sizeof(Q8_K) == 292, "Q8_K block");

static_assert(QK_K == 256, "ggml's super-block");

// The tokens of a chunk, quantized: their Q8_K blocks, token after token;
// each block's scale (block ib of tokens c..c+7 side by side, padded so
// that eight can always be loaded), and its eight pair sums of 16 values.
struct TokensK {
    const Q8_K * q;         // token j's blocks at q + j * blocks
    const float * d;        // block ib of token j: d[ib * CHUNK + j]
    const int16_t * sums;   // likewise, 8 each: ggml's hadd of the block's bsums
    int64_t blocks;
};

// Tokens c0 to c0 + C of `t`: their blocks, and their float lanes, zero.
template <int C>
inline void start_tokens(const TokensK & t, int64_t c0, __m256 (&acc)[C], const Q8_K * (&cols)[C]) {
    for (int c = 0; c < C; ++c) {
        acc[c] = _mm256_setzero_ps();
        cols[c] = t.q + (c0 + c) * t.blocks;
    }
}

// Each of C tokens' int32 lanes of a super-block added to its float lanes
// as ggml adds them: acc = fma(d, float(sumi), acc), d the token's lane of
// `d` (the two scales' product).
template <int C>
inline void add_lanes(__m256 (&acc)[C], const __m256 d, const __m256i (&sumi)[C]) {
    for (int c = 0; c < C; ++c) {
        const __m256 dc = _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(c));
        acc[c] = _mm256_fmadd_ps(dc, _mm256_cvtepi32_ps(sumi[c]), acc[c]);
    }
}

// Each of C tokens' float lanes summed as ggml's hsum_float_8 sums them,
// into its output.
template <int C>
inline void store_sums(float * const * out, const __m256 (&acc)[C]) {
    for (int c = 0; c < C; ++c) {
        out[c][0] = hsum(acc[c]);
    }
}

// A Q4_K block's eight scales (bytes 0-7) and eight mins (bytes 8-15), as
// ggml unpacks their 6-bit fields.
inline void scales_and_mins(const uint8_t * packed, uint8_t out[16]) {
    constexpr uint32_t kmask1 = 0x3f3f3f3f;
    constexpr uint32_t kmask2 = 0x0f0f0f0f;
    constexpr uint32_t kmask3 = 0x03030303;
    uint32_t utmp[4];
    std::memcpy(utmp, packed, 12);
    utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = utmp[1] & kmask1;
    utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
    utmp[2] = uaux;
    utmp[0] &= kmask1;
    std::memcpy(out, utmp, 16);
}

// What Q4_K's and Q5_K's dot products take of a super-block for tokens c0
// to c0 + 7 of `t`: its eight scales (bytes 0-7 of `sm`) and mins (bytes
// 8-15, and widened in `mins`), and the tokens' scale times its two f16
// scales (ggml: d = y.d * x.d and dmin = -y.d * x.dmin, one rounding each).
struct SuperBlock {
    alignas(16) uint8_t sm[16];
    __m128i mins;
    __m256 d;
    __m256 dmin;

    template <class Block>
    SuperBlock(const Block & b, const TokensK & t, int64_t ib, int64_t c0) {
        scales_and_mins(b.scales, sm);
        mins = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *) (sm + 8)));
        const __m256 yd = _mm256_loadu_ps(t.d + ib * CHUNK + c0);
        d = _mm256_mul_ps(yd, _mm256_set1_ps(half(b.d)));
        dmin = _mm256_mul_ps(_mm256_xor_ps(yd, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(half(b.dmin)));
    }
};

// ggml's Q4_K and Q5_K sums of 64 values, two sub-blocks of 32 unsigned
// values (`low`, `high`) by a token's 64 at `q8`: each sub-block's products
// in pairs, times its scale, as eight int32 lanes (exact).
inline __m256i scaled_products(__m256i scale_l, __m256i low, __m256i scale_h, __m256i high, const int8_t * q8) {
    const __m256i q8l = _mm256_loadu_si256((const __m256i *) q8);
    const __m256i q8h = _mm256_loadu_si256((const __m256i *) (q8 + 32));
    const __m256i p16l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(low, q8l));
    const __m256i p16h = _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(high, q8h));
    return _mm256_add_epi32(p16l, p16h);
}

// One Q4_K row times C tokens (from c0), every element summed as ggml's
// dot product sums it (see above). The C tokens' scale products are lanes
// of one vector, each token's picked by one permute.
template <int C>
void tile_k(const Q4_K * x, const TokensK & t, int64_t c0, float * const * out) {
    static_assert(C >= 1 && C <= 8, "at most eight tokens");
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc[C];
    __m128 acc_m[C];
    const Q8_K * cols[C];
    for (int c = 0; c < C; ++c) {
        acc[c] = _mm256_setzero_ps();
        acc_m[c] = _mm_setzero_ps();
        cols[c] = t.q + (c0 + c) * t.blocks;
    }
    for (int64_t ib = 0; ib < t.blocks; ++ib) {
        const Q4_K & b = x[ib];
        const SuperBlock k(b, t, ib, c0);
        const uint8_t * sm = k.sm;
        __m256i sumi[C];
        for (int c = 0; c < C; ++c) {
            sumi[c] = _mm256_setzero_si256();
        }
        for (int j = 0; j < 4; ++j) {
            const __m256i scale_l = _mm256_set1_epi16(sm[2 * j]);
            const __m256i scale_h = _mm256_set1_epi16(sm[2 * j + 1]);
            const __m256i q4bits = _mm256_loadu_si256((const __m256i *) (b.qs + 32 * j));
            const __m256i q4l = _mm256_and_si256(q4bits, m4);
            const __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
            for (int c = 0; c < C; ++c) {
                const __m256i p = scaled_products(scale_l, q4l, scale_h, q4h, cols[c][ib].qs + 64 * j);
                sumi[c] = _mm256_add_epi32(sumi[c], p);
            }
        }
        for (int c = 0; c < C; ++c) {
            const __m256i index = _mm256_set1_epi32(c);
            const __m256 dc = _mm256_permutevar8x32_ps(k.d, index);
            acc[c] = _mm256_fmadd_ps(dc, _mm256_cvtepi32_ps(sumi[c]), acc[c]);
            const __m128i sums = _mm_loadu_si128((const __m128i *) (t.sums + 8 * (ib * CHUNK + c0 + c)));
            const __m128i prod = _mm_madd_epi16(k.mins, sums);
            const __m128 dminc = _mm256_castps256_ps128(_mm256_permutevar8x32_ps(k.dmin, index));
            acc_m[c] = _mm_fmadd_ps(dminc, _mm_cvtepi32_ps(prod), acc_m[c]);
        }
    }
    for (int c = 0; c < C; ++c) {
        __m128 m = acc_m[c];
        m = _mm_add_ps(m, _mm_movehl_ps(m, m));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        out[c][0] = hsum(acc[c]) + _mm_cvtss_f32(m);
    }
}

// Q5_K: Q4_K's super-blocks with a fifth bit for every value (bit j of
// qh's byte i for value i of the j-th 32 values). ggml's dot product
// (`ggml_vec_dot_q5_K_q8_K` for AVX2) sums the scaled products as for Q4_K
// (exact int32 lanes, one 8-lane fused multiply-add of the two scales'
// product a super-block), but the mins' products as one integer a
// super-block, added to a scalar sum by one fused multiply-add of minus
// the token's scale times the row's min scale (ggml's C compiles
// `summs += dmin * sum` so, checked by this file's tests); at the end,
// hsum_float_8 of the lanes plus that sum.

struct Q5_K {
    uint16_t d;     // scale of the scales, f16
    uint16_t dmin;  // scale of the mins, f16
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
};
static_assert(sizeof(Q5_K) == 176, "Q5_K block");

// One Q5_K row times C tokens (from c0), every element summed as ggml's
// dot product sums it (see above).
template <int C>
void tile_k(const Q5_K * x, const TokensK & t, int64_t c0, float * const * out) {
    static_assert(C >= 1 && C <= 8, "at most eight tokens");
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc[C];
    __m256 summs = _mm256_setzero_ps();
    const Q8_K * cols[C];
    for (int c = 0; c < C; ++c) {
        acc[c] = _mm256_setzero_ps();
        cols[c] = t.q + (c0 + c) * t.blocks;
    }
    for (int64_t ib = 0; ib < t.blocks; ++ib) {
        const Q5_K & b = x[ib];
        const SuperBlock k(b, t, ib, c0);
        const uint8_t * sm = k.sm;
        // Each token's mins product, one integer (exact), in its lane.
        alignas(32) int32_t min_sums[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int c = 0; c < C; ++c) {
            const __m128i sums = _mm_loadu_si128((const __m128i *) (t.sums + 8 * (ib * CHUNK + c0 + c)));
            const __m128i prod = _mm_madd_epi16(k.mins, sums);
            const __m128i h = _mm_hadd_epi32(_mm_hadd_epi32(prod, _mm_setzero_si128()), _mm_setzero_si128());
            min_sums[c] = _mm_cvtsi128_si32(h);
        }
        summs = _mm256_fmadd_ps(k.dmin, _mm256_cvtepi32_ps(_mm256_load_si256((const __m256i *) min_sums)), summs);
        const __m256i hbits = _mm256_loadu_si256((const __m256i *) b.qh);
        __m256i sumi[C];
        for (int c = 0; c < C; ++c) {
            sumi[c] = _mm256_setzero_si256();
        }
        for (int j = 0; j < 4; ++j) {
            const __m256i scale_l = _mm256_set1_epi16(sm[2 * j]);
            const __m256i scale_h = _mm256_set1_epi16(sm[2 * j + 1]);
            const __m256i q5bits = _mm256_loadu_si256((const __m256i *) (b.qs + 32 * j));
            // ggml: the fifth bits 2j and 2j + 1 of each byte, times 16.
            const __m256i mask_l = _mm256_set1_epi8((char) (1 << (2 * j)));
            const __m256i mask_h = _mm256_set1_epi8((char) (1 << (2 * j + 1)));
            const __m256i q5l = _mm256_add_epi8(
                _mm256_and_si256(q5bits, m4),
                _mm256_slli_epi16(_mm256_srli_epi16(_mm256_and_si256(hbits, mask_l), 2 * j), 4));
            const __m256i q5h = _mm256_add_epi8(
                _mm256_and_si256(_mm256_srli_epi16(q5bits, 4), m4),
                _mm256_slli_epi16(_mm256_srli_epi16(_mm256_and_si256(hbits, mask_h), 2 * j + 1), 4));
            for (int c = 0; c < C; ++c) {
                const __m256i p = scaled_products(scale_l, q5l, scale_h, q5h, cols[c][ib].qs + 64 * j);
                sumi[c] = _mm256_add_epi32(sumi[c], p);
            }
        }
        for (int c = 0; c < C; ++c) {
            const __m256 dc = _mm256_permutevar8x32_ps(k.d, _mm256_set1_epi32(c));
            acc[c] = _mm256_fmadd_ps(dc, _mm256_cvtepi32_ps(sumi[c]), acc[c]);
        }
    }
    alignas(32) float offsets[8];
    _mm256_store_ps(offsets, summs);
    for (int c = 0; c < C; ++c) {
        out[c][0] = hsum(acc[c]) + offsets[c];
    }
}

// Q6_K: super-blocks of 256 values in sixteen sub-blocks of 16, each with
// an 8-bit signed scale, and the super-block's f16 scale; a value is 6 bits
// (4 in `ql`, 2 in `qh`) less 32. ggml's dot product
// (`ggml_vec_dot_q6_K_q8_K` for AVX2) sums the scaled products of the
// unsigned 6-bit values in eight int32 lanes, takes off 32 times the
// token's sums of 16 against the scales (lane by lane, exact), and adds the
// lanes with one 8-lane fused multiply-add of the two scales' product; at
// the end, ggml's hsum_float_8.

struct Q6_K {
    uint8_t ql[128];  // low 4 bits
    uint8_t qh[64];   // high 2 bits
    int8_t scales[16];
    uint16_t d;  // f16
};
static_assert(sizeof(Q6_K) == 210, "Q6_K block");

// The 16 int16 lanes of ggml's scale vector for the 32 values at `i`
// (ggml's get_scale_shuffle(i), widened): sub-block 2i's scale for the
// first 16, 2i + 1's for the next.
inline __m256i scale_pair(const int8_t * scales, int i) {
    return _mm256_set_m128i(_mm_set1_epi16(scales[2 * i + 1]), _mm_set1_epi16(scales[2 * i]));
}

// One Q6_K row times C tokens (from c0), every element summed as ggml's dot
// product sums it (see above).
template <int C>
void tile_k(const Q6_K * x, const TokensK & t, int64_t c0, float * const * out) {
    static_assert(C >= 1 && C <= 8, "at most eight tokens");
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i m15 = _mm256_set1_epi8(15);
    __m256 acc[C];
    const Q8_K * cols[C];
    start_tokens<C>(t, c0, acc, cols);
    for (int64_t ib = 0; ib < t.blocks; ++ib) {
        const Q6_K & b = x[ib];
        // ggml: d = y.d * x.d, one rounding.
        const __m256 d = _mm256_mul_ps(_mm256_loadu_ps(t.d + ib * CHUNK + c0), _mm256_set1_ps(half(b.d)));
        const __m256i scales_16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) b.scales));
        __m256i sumi[C];
        for (int c = 0; c < C; ++c) {
            sumi[c] = _mm256_setzero_si256();
        }
        for (int j = 0; j < 2; ++j) {
            const __m256i q4bits1 = _mm256_loadu_si256((const __m256i *) (b.ql + 64 * j));
            const __m256i q4bits2 = _mm256_loadu_si256((const __m256i *) (b.ql + 64 * j + 32));
            const __m256i q4bitsH = _mm256_loadu_si256((const __m256i *) (b.qh + 32 * j));
            // ggml's four vectors of 6-bit values of this half.
            const __m256i q6[4] = {
                _mm256_or_si256(_mm256_and_si256(q4bits1, m15), _mm256_slli_epi16(_mm256_and_si256(q4bitsH, m3), 4)),
                _mm256_or_si256(_mm256_and_si256(q4bits2, m15),
                                _mm256_slli_epi16(_mm256_and_si256(q4bitsH, _mm256_set1_epi8(12)), 2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits1, 4), m15),
                                _mm256_and_si256(q4bitsH, _mm256_set1_epi8(48))),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits2, 4), m15),
                                _mm256_srli_epi16(_mm256_and_si256(q4bitsH, _mm256_set1_epi8(-64)), 2)),
            };
            for (int q = 0; q < 4; ++q) {
                const __m256i scale = scale_pair(b.scales, 4 * j + q);
                for (int c = 0; c < C; ++c) {
                    const __m256i q8 = _mm256_loadu_si256((const __m256i *) (cols[c][ib].qs + 128 * j + 32 * q));
                    const __m256i p16 = _mm256_madd_epi16(scale, _mm256_maddubs_epi16(q6[q], q8));
                    sumi[c] = _mm256_add_epi32(sumi[c], p16);
                }
            }
        }
        for (int c = 0; c < C; ++c) {
            const __m256i q8sums = _mm256_loadu_si256((const __m256i *) cols[c][ib].bsums);
            const __m256i q8sclsub = _mm256_slli_epi32(_mm256_madd_epi16(q8sums, scales_16), 5);
            const __m256i s = _mm256_sub_epi32(sumi[c], q8sclsub);
            const __m256 dc = _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(c));
            acc[c] = _mm256_fmadd_ps(dc, _mm256_cvtepi32_ps(s), acc[c]);
        }
    }
    for (int c = 0; c < C; ++c) {
        out[c][0] = hsum(acc[c]);
    }
}

// Q2_K and Q3_K: super-blocks of 256 values in sixteen sub-blocks of 16,
// 2 bits a value (Q3_K: a third in `hmask`), each sub-block with a 4-bit
// scale and a 4-bit min (Q2_K) or a 6-bit signed scale (Q3_K). ggml's dot
// products (`ggml_vec_dot_q2_K_q8_K`, `ggml_vec_dot_q3_K_q8_K` for AVX2)
// sum the scaled products in eight int32 lanes (exact) and add them with
// one 8-lane fused multiply-add of the two scales' product a super-block;
// Q2_K first adds its mins' products (the token's sums of 16 against the
// mins, eight int32 lanes) with one of minus the token's scale times the
// row's min scale. At the end, ggml's hsum_float_8.

struct Q2_K {
    uint8_t scales[16];  // scale (low 4 bits) and min (high 4 bits) of each sub-block
    uint8_t qs[64];
    uint16_t d;     // scale of the scales, f16
    uint16_t dmin;  // scale of the mins, f16
};
struct Q3_K {
    uint8_t hmask[32];  // the third bits
    uint8_t qs[64];     // the low two bits
    uint8_t scales[12];  // sixteen 6-bit scales
    uint16_t d;  // f16
};
static_assert(sizeof(Q2_K) == 84, "Q2_K block");
static_assert(sizeof(Q3_K) == 110, "Q3_K block");

// What ggml's Q2_K and Q3_K dot products take of 32 values of a row for a
// token: the 32 unsigned 2-bit values, what ggml subtracts from their
// products (Q3_K: 4 where the third bit is clear), and the scales of
// their two sub-blocks as 16 int16 lanes each (ggml's
// get_scale_shuffle_q3k).
struct LowBits {
    __m256i values;
    __m256i minus;
    __m256i scales;
};

// A token's 32 values at `q8` by such 32 of a row: pair products, less the
// subtracted part's (Q3_K), times the scales, as eight int32 lanes.
template <bool Minus>
inline __m256i scaled_low_bits(const LowBits & x, const int8_t * q8) {
    const __m256i y = _mm256_loadu_si256((const __m256i *) q8);
    __m256i p16 = _mm256_maddubs_epi16(x.values, y);
    if constexpr (Minus) {
        p16 = _mm256_sub_epi16(p16, _mm256_maddubs_epi16(x.minus, y));
    }
    return _mm256_madd_epi16(x.scales, p16);
}

// A Q2_K or Q3_K super-block by C tokens, as ggml's dot product sums it
// into int32 lanes: its values and scales unpacked once (`unpack`, 128
// values at a time), then multiplied by each token's.
template <int C, bool Minus, class Unpack>
inline void low_bits_super_block(const Q8_K * const * cols, int64_t ib, Unpack unpack, __m256i (&sumi)[C]) {
    for (int c = 0; c < C; ++c) {
        sumi[c] = _mm256_setzero_si256();
    }
    for (int j = 0; j < 2; ++j) {
        LowBits x[4];
        unpack(j, x);
        for (int q = 0; q < 4; ++q) {
            for (int c = 0; c < C; ++c) {
                const __m256i p = scaled_low_bits<Minus>(x[q], cols[c][ib].qs + 128 * j + 32 * q);
                sumi[c] = _mm256_add_epi32(sumi[c], p);
            }
        }
    }
}

// One Q2_K row times C tokens (from c0), every element summed as ggml's
// dot product sums it (see above).
template <int C>
void tile_k(const Q2_K * x, const TokensK & t, int64_t c0, float * const * out) {
    static_assert(C >= 1 && C <= 8, "at most eight tokens");
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m256 acc[C];
    const Q8_K * cols[C];
    start_tokens<C>(t, c0, acc, cols);
    for (int64_t ib = 0; ib < t.blocks; ++ib) {
        const Q2_K & b = x[ib];
        // ggml: d = y.d * x.d and dmin = -y.d * x.dmin, one rounding each.
        const __m256 yd = _mm256_loadu_ps(t.d + ib * CHUNK + c0);
        const __m256 d = _mm256_mul_ps(yd, _mm256_set1_ps(half(b.d)));
        const __m256 dmin = _mm256_mul_ps(_mm256_xor_ps(yd, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(half(b.dmin)));
        const __m128i packed = _mm_loadu_si128((const __m128i *) b.scales);
        const __m256i mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
        alignas(32) int16_t scales[16];
        _mm256_store_si256((__m256i *) scales, _mm256_cvtepi8_epi16(_mm_and_si128(packed, m4)));
        for (int c = 0; c < C; ++c) {
            const __m256i bsums = _mm256_loadu_si256((const __m256i *) cols[c][ib].bsums);
            const __m256i prod = _mm256_madd_epi16(mins, bsums);
            const __m256 dminc = _mm256_permutevar8x32_ps(dmin, _mm256_set1_epi32(c));
            acc[c] = _mm256_fmadd_ps(dminc, _mm256_cvtepi32_ps(prod), acc[c]);
        }
        __m256i sumi[C];
        low_bits_super_block<C, false>(
            cols, ib,
            [&](int j, LowBits (&v)[4]) {
                const __m256i q2bits = _mm256_loadu_si256((const __m256i *) (b.qs + 32 * j));
                for (int q = 0; q < 4; ++q) {
                    v[q].values = _mm256_and_si256(_mm256_srli_epi16(q2bits, 2 * q), m3);
                    v[q].scales = _mm256_set_m128i(_mm_set1_epi16(scales[8 * j + 2 * q + 1]),
                                                   _mm_set1_epi16(scales[8 * j + 2 * q]));
                }
            },
            sumi);
        add_lanes<C>(acc, d, sumi);
    }
    store_sums<C>(out, acc);
}

// A Q3_K block's sixteen scales as ggml unpacks their 6-bit fields, less 32.
inline void q3_k_scales(const uint8_t * packed, int16_t out[16]) {
    constexpr uint32_t kmask1 = 0x03030303;
    constexpr uint32_t kmask2 = 0x0f0f0f0f;
    uint32_t aux[3];
    std::memcpy(aux, packed, 12);
    const __m128i scales = _mm_sub_epi8(_mm_set_epi32(((aux[1] >> 4) & kmask2) | (((aux[2] >> 6) & kmask1) << 4),
                                                      ((aux[0] >> 4) & kmask2) | (((aux[2] >> 4) & kmask1) << 4),
                                                      (aux[1] & kmask2) | (((aux[2] >> 2) & kmask1) << 4),
                                                      (aux[0] & kmask2) | (((aux[2] >> 0) & kmask1) << 4)),
                                       _mm_set1_epi8(32));
    _mm256_storeu_si256((__m256i *) out, _mm256_cvtepi8_epi16(scales));
}

// One Q3_K row times C tokens (from c0), every element summed as ggml's
// dot product sums it (see above).
template <int C>
void tile_k(const Q3_K * x, const TokensK & t, int64_t c0, float * const * out) {
    static_assert(C >= 1 && C <= 8, "at most eight tokens");
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i mone = _mm256_set1_epi8(1);
    __m256 acc[C];
    const Q8_K * cols[C];
    start_tokens<C>(t, c0, acc, cols);
    for (int64_t ib = 0; ib < t.blocks; ++ib) {
        const Q3_K & b = x[ib];
        // ggml: d = y.d * x.d, one rounding.
        const __m256 d = _mm256_mul_ps(_mm256_loadu_ps(t.d + ib * CHUNK + c0), _mm256_set1_ps(half(b.d)));
        alignas(32) int16_t scales[16];
        q3_k_scales(b.scales, scales);
        const __m256i hbits = _mm256_loadu_si256((const __m256i *) b.hmask);
        __m256i sumi[C];
        low_bits_super_block<C, true>(
            cols, ib,
            [&](int j, LowBits (&v)[4]) {
                const __m256i q3bits = _mm256_loadu_si256((const __m256i *) (b.qs + 32 * j));
                for (int q = 0; q < 4; ++q) {
                    const int bit = 4 * j + q;
                    v[q].values = _mm256_and_si256(_mm256_srli_epi16(q3bits, 2 * q), m3);
                    // ggml: 4 where bit `bit` of hmask's byte is clear.
                    v[q].minus = _mm256_slli_epi16(
                        _mm256_srli_epi16(_mm256_andnot_si256(hbits, _mm256_slli_epi16(mone, bit)), bit), 2);
                    v[q].scales = _mm256_set_m128i(_mm_set1_epi16(scales[8 * j + 2 * q + 1]),
                                                   _mm_set1_epi16(scales[8 * j + 2 * q]));
                }
            },
            sumi);
        add_lanes<C>(acc, d, sumi);
    }
    store_sums<C>(out, acc);
}

// IQ4_XS: super-blocks of 256 values in eight sub-blocks of 32, each value
// an index into IQ4_NL's 16 values, each sub-block with a 6-bit scale (4
// bits in `scales_l`, 2 in `scales_h`) less 32, and the super-block's f16
// scale. ggml's dot product (`ggml_vec_dot_iq4_xs_q8_K` for AVX2) sums the
// scaled products in eight int32 lanes (exact) and adds them with one
// 8-lane fused multiply-add of the two scales' product a super-block; at
// the end, ggml's hsum_float_8.

struct IQ4_XS {
    uint16_t d;  // f16
    uint16_t scales_h;
    uint8_t scales_l[4];
    uint8_t qs[128];
};
static_assert(sizeof(IQ4_XS) == 136, "IQ4_XS block");

// One IQ4_XS row times C tokens (from c0), every element summed as ggml's
// dot product sums it (see above).
template <int C>
void tile_k(const IQ4_XS * x, const TokensK & t, int64_t c0, float * const * out) {
    static_assert(C >= 1 && C <= 8, "at most eight tokens");
    __m256 acc[C];
    const Q8_K * cols[C];
    start_tokens<C>(t, c0, acc, cols);
    for (int64_t ib = 0; ib < t.blocks; ++ib) {
        const IQ4_XS & b = x[ib];
        // ggml: d = x.d * y.d, one rounding.
        const __m256 d = _mm256_mul_ps(_mm256_set1_ps(half(b.d)), _mm256_loadu_ps(t.d + ib * CHUNK + c0));
        __m256i sumi[C];
        for (int c = 0; c < C; ++c) {
            sumi[c] = _mm256_setzero_si256();
        }
        for (int s = 0; s < 8; ++s) {
            // Sub-block s: 16 bytes of indices, low halves first; its scale.
            const __m256i qx = _mm256_shuffle_epi8(
                _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *) IQ4NLRows::levels)),
                nibbles(b.qs + 16 * s));
            const __m256i ax = _mm256_sign_epi8(qx, qx);
            const int low = (b.scales_l[s / 2] >> (4 * (s % 2))) & 0xf;
            const int high = (b.scales_h >> (2 * s)) & 3;
            const __m256i scale = _mm256_set1_epi16((int16_t) ((low | (high << 4)) - 32));
            for (int c = 0; c < C; ++c) {
                const __m256i q8 = _mm256_loadu_si256((const __m256i *) (cols[c][ib].qs + 32 * s));
                const __m256i p16 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(q8, qx));
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(p16, scale));
            }
        }
        add_lanes<C>(acc, d, sumi);
    }
    store_sums<C>(out, acc);
}

// Rows [r0, r1) of `w` (of Block's type) times tokens c0 to c0 + C of `t`,
// one row at a time, by Block's tile_k.
template <class Block, int C>
void strip_k(const Matrix & w, int64_t r0, int64_t r1, const TokensK & t, int64_t c0, float * const * out) {
    const char * base = w.data;
    float * outs[C];
    for (int64_t r = r0; r < r1; ++r) {
        for (int c = 0; c < C; ++c) {
            outs[c] = out[c0 + c] + r;
        }
        tile_k<C>((const Block *) (base + r * w.stride), t, c0, outs);
    }
}

// Rows [r0, r1) of `w` times the `n` quantized tokens `t`: strips of eight
// tokens, then the few left.
template <class Block>
void rows_by_tokens_k(const Matrix & w, int64_t r0, int64_t r1, const TokensK & t, int64_t n, float * const * out) {
    int64_t c0 = 0;
    for (; c0 + 8 <= n; c0 += 8) {
        strip_k<Block, 8>(w, r0, r1, t, c0, out);
    }
    switch (n - c0) {
        case 7: strip_k<Block, 7>(w, r0, r1, t, c0, out); break;
        case 6: strip_k<Block, 6>(w, r0, r1, t, c0, out); break;
        case 5: strip_k<Block, 5>(w, r0, r1, t, c0, out); break;
        case 4: strip_k<Block, 4>(w, r0, r1, t, c0, out); break;
        case 3: strip_k<Block, 3>(w, r0, r1, t, c0, out); break;
        case 2: strip_k<Block, 2>(w, r0, r1, t, c0, out); break;
        case 1: strip_k<Block, 1>(w, r0, r1, t, c0, out); break;
        default: break;
    }
}

thread_local std::vector<Q8_K> quantized_k;
thread_local std::vector<int16_t> sums_k;

// Quantizes the `tokens` activations `in` (as ggml does for its K-quant
// dot products) and multiplies rows [r0, r1) of `w` by them, CHUNK tokens
// at a time, token j's products going to out[j].
template <class Block>
void run_k(const Matrix & w, int64_t r0, int64_t r1, int64_t tokens, const float * const * in, float * const * out) {
    const int64_t k = w.k;
    const int64_t blocks = k / QK_K;
    const int64_t chunk = std::min<int64_t>(CHUNK, tokens);
    if ((int64_t) quantized_k.size() < chunk * blocks) {
        quantized_k.resize(chunk * blocks);
    }
    if ((int64_t) scales.size() < blocks * CHUNK + 8) {
        scales.resize(blocks * CHUNK + 8);
    }
    if ((int64_t) sums_k.size() < 8 * blocks * CHUNK) {
        sums_k.resize(8 * blocks * CHUNK);
    }
    const TokensK t = {quantized_k.data(), scales.data(), sums_k.data(), blocks};
    for (int64_t j0 = 0; j0 < tokens; j0 += CHUNK) {
        const int64_t n = std::min<int64_t>(CHUNK, tokens - j0);
        for (int64_t j = 0; j < n; ++j) {
            Q8_K * q = quantized_k.data() + j * blocks;
            quantize_row_q8_K(in[j0 + j], q, k);
            for (int64_t ib = 0; ib < blocks; ++ib) {
                scales[ib * CHUNK + j] = q[ib].d;
                const __m256i bsums = _mm256_loadu_si256((const __m256i *) q[ib].bsums);
                _mm_storeu_si128((__m128i *) (sums_k.data() + 8 * (ib * CHUNK + j)),
                                 _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1)));
            }
        }
        rows_by_tokens_k<Block>(w, r0, r1, t, n, out + j0);
    }
}

// Any other type ggml multiplies for several tokens with a kernel that sums
// in another order than its dot product does for one: llamafile's tiles
// (F32, F16, BF16, Q4_0, Q5_0, IQ4_NL, from two tokens) and its tiled
// K-quant product (K-quants and i-quants, from eight). For those that
// svc's kernels above do not take, every element is ggml's own dot product
// (the function and activation type of its CPU type traits), token after
// token: what ggml computes for one token, and for any batch with its
// reference kernels, without giving up the rest of the fast path (operator
// fusion, llamafile's tiles for Q8_0 rows, which sum alike).

bool summed_otherwise(ggml_type type) {
    switch (type) {
        case GGML_TYPE_F32:
        case GGML_TYPE_F16:
        case GGML_TYPE_BF16:
        case GGML_TYPE_Q4_0:
        case GGML_TYPE_Q5_0:
        case GGML_TYPE_IQ4_NL:
        case GGML_TYPE_Q2_K:
        case GGML_TYPE_Q3_K:
        case GGML_TYPE_Q5_K:
        case GGML_TYPE_IQ4_XS:
        case GGML_TYPE_IQ2_XXS:
        case GGML_TYPE_IQ2_XS:
        case GGML_TYPE_IQ2_S:
        case GGML_TYPE_IQ3_XXS:
        case GGML_TYPE_IQ3_S:
        case GGML_TYPE_IQ1_S:
        case GGML_TYPE_IQ1_M:
            return true;
        default:
            return false;
    }
}

thread_local std::vector<uint8_t> converted;
thread_local std::vector<const void *> activations;

// Rows [r0, r1) of `w` times the `tokens` activations `in`, by ggml's dot
// product, into out[j]: the tokens converted to the dot product's
// activation type (or read as they are, when that is F32), CHUNK at a
// time, each row by every token of a chunk while it is in cache.
void run_dot(const Matrix & w, int64_t r0, int64_t r1, int64_t tokens, const float * const * in, float * const * out) {
    const ggml_type_traits_cpu * traits = ggml_get_type_traits_cpu(w.type);
    const ggml_type act = traits->vec_dot_type;
    const ggml_from_float_t from_float = ggml_get_type_traits_cpu(act)->from_float;
    const int64_t k = w.k;
    const size_t act_row = ggml_row_size(act, k);
    const int64_t chunk = std::min<int64_t>(CHUNK, tokens);
    const bool as_is = act == GGML_TYPE_F32;
    if (!as_is && converted.size() < (size_t) chunk * act_row) {
        converted.resize((size_t) chunk * act_row);
    }
    if ((int64_t) activations.size() < chunk) {
        activations.resize(chunk);
    }
    const void ** acts = activations.data();
    for (int64_t j0 = 0; j0 < tokens; j0 += CHUNK) {
        const int64_t n = std::min<int64_t>(CHUNK, tokens - j0);
        for (int64_t j = 0; j < n; ++j) {
            const float * x = in[j0 + j];
            if (as_is) {
                acts[j] = x;
            } else {
                from_float(x, converted.data() + j * act_row, k);
                acts[j] = converted.data() + j * act_row;
            }
        }
        for (int64_t r = r0; r < r1; ++r) {
            const void * wr = w.data + r * w.stride;
            for (int64_t j = 0; j < n; ++j) {
                traits->vec_dot((int) k, out[j0 + j] + r, 0, wr, 0, acts[j], 0, 1);
            }
        }
    }
}

// Whether svc's product takes rows of `type`: Q4_0, Q4_1, Q5_0, IQ4_NL,
// IQ4_XS and Q2_K to Q6_K with this file's kernels (when ggml lays out their blocks as
// this file does), the other types summed otherwise by ggml's dot product.
bool takes(ggml_type type) {
    const auto blocks = [](ggml_type t, size_t size, int64_t qk) {
        return ggml_type_size(t) == size && ggml_blck_size(t) == qk;
    };
    switch (type) {
        case GGML_TYPE_Q4_0: return blocks(type, sizeof(Q4_0), QK) && blocks(GGML_TYPE_Q8_0, sizeof(Q8_0), QK);
        case GGML_TYPE_Q5_0: return blocks(type, sizeof(Q5_0), QK) && blocks(GGML_TYPE_Q8_0, sizeof(Q8_0), QK);
        case GGML_TYPE_Q4_1: return blocks(type, sizeof(Q4_1), QK) && blocks(GGML_TYPE_Q8_1, sizeof(Q8_1), QK);
        case GGML_TYPE_Q4_K: return blocks(type, sizeof(Q4_K), QK_K) && blocks(GGML_TYPE_Q8_K, sizeof(Q8_K), QK_K);
        case GGML_TYPE_Q5_K: return blocks(type, sizeof(Q5_K), QK_K) && blocks(GGML_TYPE_Q8_K, sizeof(Q8_K), QK_K);
        case GGML_TYPE_Q6_K: return blocks(type, sizeof(Q6_K), QK_K) && blocks(GGML_TYPE_Q8_K, sizeof(Q8_K), QK_K);
        case GGML_TYPE_Q2_K: return blocks(type, sizeof(Q2_K), QK_K) && blocks(GGML_TYPE_Q8_K, sizeof(Q8_K), QK_K);
        case GGML_TYPE_Q3_K: return blocks(type, sizeof(Q3_K), QK_K) && blocks(GGML_TYPE_Q8_K, sizeof(Q8_K), QK_K);
        case GGML_TYPE_IQ4_NL: return blocks(type, sizeof(IQ4_NL), QK) && blocks(GGML_TYPE_Q8_0, sizeof(Q8_0), QK);
        case GGML_TYPE_IQ4_XS: return blocks(type, sizeof(IQ4_XS), QK_K) && blocks(GGML_TYPE_Q8_K, sizeof(Q8_K), QK_K);
        default: {
            const ggml_type_traits_cpu * traits = ggml_get_type_traits_cpu(type);
            return summed_otherwise(type) && traits->vec_dot != nullptr && traits->nrows == 1 &&
                   (traits->vec_dot_type == GGML_TYPE_F32 ||
                    ggml_get_type_traits_cpu(traits->vec_dot_type)->from_float != nullptr);
        }
    }
}

// Whether `w`'s rows lie as ggml lays out a matrix of its type (or, with
// `experts`, a mixture's matrices one after another) in host memory, each
// row a whole number of blocks.
bool plain(const ggml_tensor * w, bool experts) {
    return w->ne[0] % ggml_blck_size(w->type) == 0 && (experts || w->ne[2] == 1) && w->ne[3] == 1 &&
           w->nb[0] == ggml_type_size(w->type) && w->nb[1] == ggml_row_size(w->type, w->ne[0]) &&
           w->extra == nullptr && (w->buffer == nullptr || ggml_backend_buffer_is_host(w->buffer));
}

// Rows [r0, r1) of `w` times `tokens` activations, by the kernel of w's type.
void multiply(const Matrix & w, int64_t r0, int64_t r1, int64_t tokens, const float * const * in, float * const * out) {
    switch (w.type) {
        case GGML_TYPE_Q4_K: run_k<Q4_K>(w, r0, r1, tokens, in, out); break;
        case GGML_TYPE_Q5_K: run_k<Q5_K>(w, r0, r1, tokens, in, out); break;
        case GGML_TYPE_Q6_K: run_k<Q6_K>(w, r0, r1, tokens, in, out); break;
        case GGML_TYPE_Q4_1: run<Q41Rows>(w, r0, r1, tokens, in, out); break;
        case GGML_TYPE_Q4_0: run<Q40Rows>(w, r0, r1, tokens, in, out); break;
        case GGML_TYPE_Q5_0: run<Q50Rows>(w, r0, r1, tokens, in, out); break;
        case GGML_TYPE_Q2_K: run_k<Q2_K>(w, r0, r1, tokens, in, out); break;
        case GGML_TYPE_Q3_K: run_k<Q3_K>(w, r0, r1, tokens, in, out); break;
        case GGML_TYPE_IQ4_XS: run_k<IQ4_XS>(w, r0, r1, tokens, in, out); break;
        case GGML_TYPE_IQ4_NL:
            // ggml adds an odd last block in scalar code.
            if (w.k / QK % 2 == 0) {
                run<IQ4NLRows>(w, r0, r1, tokens, in, out);
            } else {
                run_dot(w, r0, r1, tokens, in, out);
            }
            break;
        default: run_dot(w, r0, r1, tokens, in, out); break;
    }
}

// Each thread's list of the tokens a node multiplies: their activations,
// where their products go, and (for a mixture) where each expert's start.
thread_local std::vector<const float *> ins;
thread_local std::vector<float *> outs;
thread_local std::vector<int64_t> firsts;
thread_local std::vector<int64_t> ends;

// Row j of `t` (ggml's src1 or dst) counting over dims 1 to 3: token j's
// activations in src1, its products in dst.
inline char * row(const ggml_tensor * t, int64_t j) {
    const int64_t i1 = j % t->ne[1];
    const int64_t i2 = (j / t->ne[1]) % t->ne[2];
    const int64_t i3 = j / (t->ne[1] * t->ne[2]);
    return (char *) t->data + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}

// GGML_OP_MUL_MAT: rows [r0, r1) of src0 by every token of src1.
void product(ggml_tensor * dst, int64_t r0, int64_t r1) {
    const ggml_tensor * w = dst->src[0];
    const ggml_tensor * b = dst->src[1];
    const int64_t tokens = b->ne[1] * b->ne[2] * b->ne[3];
    ins.resize(tokens);
    outs.resize(tokens);
    for (int64_t j = 0; j < tokens; ++j) {
        ins[j] = (const float *) row(b, j);
        outs[j] = (float *) row(dst, j);
    }
    const Matrix m = {(const char *) w->data, w->nb[1], w->ne[0], w->type};
    multiply(m, r0, r1, tokens, ins.data(), outs.data());
}

// GGML_OP_MUL_MAT_ID: rows [r0, r1) of each expert's matrix in src0 by the
// tokens src2 routes to it, as ggml maps them: token t's e-th expert
// ids[e, t] takes src1's row (e mod ne[1], t), its products going to dst's
// row (e, t). (ggml stops on an expert id out of range; this leaves that
// row as it is.)
void product_id(ggml_tensor * dst, int64_t r0, int64_t r1) {
    const ggml_tensor * w = dst->src[0];
    const ggml_tensor * b = dst->src[1];
    const ggml_tensor * ids = dst->src[2];
    const int64_t experts = w->ne[2];
    const int64_t used = ids->ne[0];
    const int64_t tokens = ids->ne[1];
    const auto expert = [&](int64_t e, int64_t t) {
        int32_t x;
        std::memcpy(&x, (const char *) ids->data + e * ids->nb[0] + t * ids->nb[1], sizeof(x));
        return (int64_t) x;
    };
    // Each expert's tokens together, in token order: counted, then placed.
    firsts.assign(experts + 1, 0);
    for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t e = 0; e < used; ++e) {
            const int64_t x = expert(e, t);
            if (x >= 0 && x < experts) {
                ++firsts[x + 1];
            }
        }
    }
    for (int64_t x = 0; x < experts; ++x) {
        firsts[x + 1] += firsts[x];
    }
    ends.assign(firsts.begin(), firsts.end() - 1);
    ins.resize(firsts[experts]);
    outs.resize(firsts[experts]);
    for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t e = 0; e < used; ++e) {
            const int64_t x = expert(e, t);
            if (x >= 0 && x < experts) {
                const int64_t at = ends[x]++;
                ins[at] = (const float *) ((const char *) b->data + (e % b->ne[1]) * b->nb[1] + t * b->nb[2]);
                outs[at] = (float *) ((char *) dst->data + e * dst->nb[1] + t * dst->nb[2]);
            }
        }
    }
    for (int64_t x = 0; x < experts; ++x) {
        const int64_t n = firsts[x + 1] - firsts[x];
        if (n > 0) {
            const Matrix m = {(const char *) w->data + x * w->nb[2], w->nb[1], w->ne[0], w->type};
            multiply(m, r0, r1, n, ins.data() + firsts[x], outs.data() + firsts[x]);
        }
    }
}

}  // namespace

void svc_product(ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) userdata;
    // Each thread takes its own rows (an even number; of every expert's
    // matrix, for a mixture) for every token, and quantizes every token
    // itself (a row's share of the work is one token's quantization per
    // row multiplied): the rows are read once from memory, by one thread.
    // How the work is cut changes only the speed.
    const int64_t rows = dst->src[0]->ne[1];
    const int64_t per = ((rows + nth - 1) / nth + 1) & ~(int64_t) 1;
    const int64_t r0 = std::min(rows, per * ith);
    const int64_t r1 = std::min(rows, r0 + per);
    if (r0 >= r1) {
        return;
    }
    // Only a MUL_MAT_ID node has the experts' ids.
    if (dst->src[2] != nullptr) {
        product_id(dst, r0, r1);
    } else {
        product(dst, r0, r1);
    }
}

bool svc_product_available(void) {
    return true;
}

bool svc_product_supported(const ggml_tensor * node) {
    const ggml_tensor * w = node->src[0];
    const ggml_tensor * b = node->src[1];
    const bool activations = b->type == GGML_TYPE_F32 && node->type == GGML_TYPE_F32 &&
                             b->nb[0] == sizeof(float) && node->nb[0] == sizeof(float) && b->ne[0] == w->ne[0] &&
                             node->ne[0] == w->ne[1] && takes(w->type);
    if (node->op == GGML_OP_MUL_MAT) {
        return activations && plain(w, false) && node->ne[1] == b->ne[1] && node->ne[2] == b->ne[2] &&
               node->ne[3] == b->ne[3];
    }
    if (node->op == GGML_OP_MUL_MAT_ID) {
        const ggml_tensor * ids = node->src[2];
        return activations && plain(w, true) && ids != nullptr && ids->type == GGML_TYPE_I32 && ids->ne[2] == 1 &&
               ids->ne[3] == 1 && b->ne[1] >= 1 && b->ne[2] == ids->ne[1] && b->ne[3] == 1 &&
               node->ne[1] == ids->ne[0] && node->ne[2] == ids->ne[1] && node->ne[3] == 1;
    }
    return false;
}

#else

void svc_product(ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) dst;
    (void) ith;
    (void) nth;
    (void) userdata;
}

bool svc_product_available(void) {
    return false;
}

bool svc_product_supported(const ggml_tensor * node) {
    (void) node;
    return false;
}

#endif  // SVC_PRODUCT
