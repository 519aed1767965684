/* Products of a few rows (a decode step's) with a weight kept in the checkpoint's own GGUF
 * blocks of 32 values along a row, on the CPU, computed as llama.cpp computes them.
 *
 * The weight [outputs, columns] is Q8_0 (a small model's LM head: 32 signed bytes q a block, each
 * value q * scale) or Q4_1 (the linear layers: 4-bit values q, each value q * scale + low; a
 * row's bytes hold two blocks' values, `pairs`: the low nibbles one block's, the high nibbles the
 * next one's); scales and lows fp32, [outputs, blocks]. The rows x [m, columns] (bf16 or fp32)
 * are first quantized per block to signed bytes with the block's own scale (its largest
 * magnitude over 127: llama.cpp's Q8_0/Q8_1), and each output is the sum over blocks of
 * scale * x_scale * (q . x_q), the byte dot products in integers, plus low * sum(x) for Q4_1 (the
 * sum of the block's own values), in fp32, rounded once to x's dtype. Eight blocks' integer sums
 * are reduced together, so that their scales apply in one vector.
 *
 * The byte products run in AVX-512 VNNI where the CPU has it, else in AVX2's multiply-add pairs,
 * else in plain loops. Compiled on the machine that runs it (native.py); threads share the
 * outputs, each block read once for all rows. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VECTORS 1
#endif

#define BLOCK 32
#define MAX_ROWS 16
#define ROWS 4              /* rows computed side by side */
#define OUTPUTS_PER_ITEM 64 /* a thread's share of the outputs at a time */

enum { Q8_0 = 0, Q4_1 = 1 };

static inline float from_bf16(uint16_t x) {
    union { uint32_t u; float f; } c;
    c.u = (uint32_t)x << 16;
    return c.f;
}

static inline uint16_t to_bf16(float f) { /* rounded to nearest even, as torch rounds */
    union { uint32_t u; float f; } c;
    c.f = f;
    return (uint16_t)((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16);
}

/* x's rows quantized per block: q [m][columns] int8, and per block its scale and the sum of its
 * own values, [m][blocks] */
static void quantize(const void *x, int bf16, int64_t x_stride, int m, int64_t columns,
                     int8_t *q, float *scale, float *sum) {
    int64_t blocks = columns / BLOCK;
    for (int r = 0; r < m; r++)
        for (int64_t b = 0; b < blocks; b++) {
            float v[BLOCK], top = 0.0f, total = 0.0f;
            for (int i = 0; i < BLOCK; i++) {
                int64_t at = r * x_stride + b * BLOCK + i;
                v[i] = bf16 ? from_bf16(((const uint16_t *)x)[at]) : ((const float *)x)[at];
                top = fabsf(v[i]) > top ? fabsf(v[i]) : top;
                total += v[i];
            }
            float inverse = top > 0.0f ? 127.0f / top : 0.0f;
            for (int i = 0; i < BLOCK; i++)
                q[r * columns + b * BLOCK + i] = (int8_t)lrintf(v[i] * inverse);
            scale[r * blocks + b] = top / 127.0f;
            sum[r * blocks + b] = total;
        }
}

#ifdef VECTORS
/* 8 int32 lanes, each the sum of 4 products of unsigned u and signed s bytes */
static inline __m256i dot_bytes(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* 8 int32 lanes, each the sum of 4 products of signed bytes w and x */
static inline __m256i dot_signed(__m256i w, __m256i x) {
    return dot_bytes(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

/* lane j: the sum of d[j]'s lanes */
static inline __m256i sums8(const __m256i d[8]) {
    __m256i a[4], b[2];
    for (int k = 0; k < 4; k++)
        a[k] = _mm256_add_epi32(_mm256_unpacklo_epi32(d[2 * k], d[2 * k + 1]),
                                _mm256_unpackhi_epi32(d[2 * k], d[2 * k + 1]));
    for (int k = 0; k < 2; k++)
        b[k] = _mm256_add_epi32(_mm256_unpacklo_epi64(a[2 * k], a[2 * k + 1]),
                                _mm256_unpackhi_epi64(a[2 * k], a[2 * k + 1]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(b[0], b[1], 0x20),
                            _mm256_permute2x128_si256(b[0], b[1], 0x31));
}

static inline float lanes_sum(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* Block j of eight from b (Q4_1: j of a pair's two halves) as bytes */
static inline void load8(const uint8_t *row, int64_t b, const int KIND, __m256i w[8]) {
    if (KIND == Q8_0) {
        for (int j = 0; j < 8; j++)
            w[j] = _mm256_loadu_si256((const __m256i *)(row + (b + j) * BLOCK));
        return;
    }
    const __m256i low4 = _mm256_set1_epi8(15);
    for (int j = 0; j < 8; j += 2) {
        __m256i both = _mm256_loadu_si256((const __m256i *)(row + (b + j) * (BLOCK / 2)));
        w[j] = _mm256_and_si256(both, low4);
        w[j + 1] = _mm256_and_si256(_mm256_srli_epi16(both, 4), low4);
    }
}

/* One output's sums for the M rows of xq, KIND and M constants where inlined: eight blocks at a
 * time, then the last few one by one. */
static inline __attribute__((always_inline)) void one_output(
    const int8_t *xq, const float *xs, const float *xsum, int64_t blocks, const uint8_t *row,
    const float *scales, const float *lows, float *out, const int KIND, const int M) {
    __m256 acc[ROWS];
    float tail[ROWS];
    for (int r = 0; r < M; r++) {
        acc[r] = _mm256_setzero_ps();
        tail[r] = 0.0f;
    }
    int64_t b = 0;
    for (; b + 8 <= blocks; b += 8) {
        __m256i w[8];
        load8(row, b, KIND, w);
        __m256 scale = _mm256_loadu_ps(scales + b);
        for (int r = 0; r < M; r++) {
            const int8_t *x = xq + (r * blocks + b) * BLOCK;
            __m256i d[8];
            for (int j = 0; j < 8; j++) {
                __m256i xj = _mm256_loadu_si256((const __m256i *)(x + j * BLOCK));
                d[j] = KIND == Q8_0 ? dot_signed(w[j], xj) : dot_bytes(w[j], xj);
            }
            __m256 both = _mm256_mul_ps(scale, _mm256_loadu_ps(xs + r * blocks + b));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums8(d)), both, acc[r]);
            if (KIND == Q4_1)
                acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(lows + b),
                                         _mm256_loadu_ps(xsum + r * blocks + b), acc[r]);
        }
    }
    for (; b < blocks; b++) {
        __m256i w;
        if (KIND == Q8_0) {
            w = _mm256_loadu_si256((const __m256i *)(row + b * BLOCK));
        } else {
            __m256i both = _mm256_loadu_si256((const __m256i *)(row + (b & ~1) * (BLOCK / 2)));
            w = _mm256_and_si256(b & 1 ? _mm256_srli_epi16(both, 4) : both, _mm256_set1_epi8(15));
        }
        for (int r = 0; r < M; r++) {
            __m256i xj = _mm256_loadu_si256((const __m256i *)(xq + (r * blocks + b) * BLOCK));
            __m256i d = KIND == Q8_0 ? dot_signed(w, xj) : dot_bytes(w, xj);
            float dot = lanes_sum(_mm256_cvtepi32_ps(d)); /* exact: |dot| < 2^24 */
            tail[r] += dot * scales[b] * xs[r * blocks + b];
            if (KIND == Q4_1) tail[r] += lows[b] * xsum[r * blocks + b];
        }
    }
    for (int r = 0; r < M; r++) out[r] = lanes_sum(acc[r]) + tail[r];
}

static void outputs_of(int kind, const int8_t *xq, const float *xs, const float *xsum,
                       int64_t blocks, int rows, const uint8_t *row, const float *scales,
                       const float *lows, float *out) {
#define ONE(KIND, M) one_output(xq, xs, xsum, blocks, row, scales, lows, out, KIND, M)
    if (kind == Q8_0) {
        switch (rows) {
        case 1: ONE(Q8_0, 1); return;
        case 2: ONE(Q8_0, 2); return;
        case 3: ONE(Q8_0, 3); return;
        default: ONE(Q8_0, ROWS); return;
        }
    }
    switch (rows) {
    case 1: ONE(Q4_1, 1); return;
    case 2: ONE(Q4_1, 2); return;
    case 3: ONE(Q4_1, 3); return;
    default: ONE(Q4_1, ROWS); return;
    }
#undef ONE
}
#else
static void outputs_of(int kind, const int8_t *xq, const float *xs, const float *xsum,
                       int64_t blocks, int rows, const uint8_t *row, const float *scales,
                       const float *lows, float *out) {
    for (int r = 0; r < rows; r++) {
        float total = 0.0f;
        for (int64_t b = 0; b < blocks; b++) {
            const int8_t *x = xq + (r * blocks + b) * BLOCK;
            int32_t dot = 0;
            if (kind == Q8_0) {
                const int8_t *w = (const int8_t *)row + b * BLOCK;
                for (int i = 0; i < BLOCK; i++) dot += w[i] * x[i];
            } else {
                const uint8_t *w = row + (b / 2) * BLOCK;
                int shift = b % 2 ? 4 : 0;
                for (int i = 0; i < BLOCK; i++) dot += ((w[i] >> shift) & 15) * x[i];
            }
            total += (float)dot * scales[b] * xs[r * blocks + b];
            if (kind == Q4_1) total += lows[b] * xsum[r * blocks + b];
        }
        out[r] = total;
    }
}
#endif

/* x [m, columns], bf16 where `bf16` else fp32, rows x_stride apart; the weight of `kind`, its
 * rows `weight` [outputs, columns] (Q8_0) or [outputs, columns / 2] (Q4_1), with scales (and,
 * Q4_1, lows) [outputs, columns / 32]; out [m, outputs] in x's dtype, contiguous. Returns 0, or
 * -1 where a shape is past the kernel's bounds (Q4_1: columns a multiple of 64) or memory ran
 * out (nothing written then). */
int block_product(int kind, const void *x, int bf16, int64_t x_stride, int m, int64_t columns,
                  const uint8_t *weight, const float *scales, const float *lows,
                  int64_t outputs, void *out, int threads) {
    if (m <= 0 || outputs <= 0) return 0;
    if (m > MAX_ROWS || columns <= 0 || columns % (kind == Q4_1 ? 2 * BLOCK : BLOCK) ||
        (kind != Q8_0 && kind != Q4_1))
        return -1;
    int64_t blocks = columns / BLOCK, stride = kind == Q4_1 ? columns / 2 : columns;
    int8_t *xq = malloc((size_t)m * columns);
    float *xs = malloc(sizeof(float) * m * blocks), *xsum = malloc(sizeof(float) * m * blocks);
    if (!xq || !xs || !xsum) {
        free(xq);
        free(xs);
        free(xsum);
        return -1;
    }
    quantize(x, bf16, x_stride, m, columns, xq, xs, xsum);
    int64_t items = (outputs + OUTPUTS_PER_ITEM - 1) / OUTPUTS_PER_ITEM;
#pragma omp parallel for schedule(static) num_threads(threads) if (items > 1)
    for (int64_t item = 0; item < items; item++) {
        int64_t end = (item + 1) * OUTPUTS_PER_ITEM < outputs ? (item + 1) * OUTPUTS_PER_ITEM
                                                               : outputs;
        for (int64_t o = item * OUTPUTS_PER_ITEM; o < end; o++) {
            float sums[MAX_ROWS];
            for (int first = 0; first < m; first += ROWS)
                outputs_of(kind, xq + first * columns, xs + first * blocks,
                           xsum + first * blocks, blocks, m - first < ROWS ? m - first : ROWS,
                           weight + o * stride, scales + o * blocks,
                           kind == Q4_1 ? lows + o * blocks : lows, sums + first);
            for (int r = 0; r < m; r++) {
                if (bf16)
                    ((uint16_t *)out)[r * outputs + o] = to_bf16(sums[r]);
                else
                    ((float *)out)[r * outputs + o] = sums[r];
            }
        }
    }
    free(xq);
    free(xs);
    free(xsum);
    return 0;
}
