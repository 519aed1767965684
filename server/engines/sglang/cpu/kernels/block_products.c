/* Products of a few rows (a decode step's) with a weight kept in the checkpoint's own GGUF
 * blocks of 32 values along a row, on the CPU, in integers.
 *
 * The weight [outputs, columns] is Q8_0 (a small model's LM head: 32 signed bytes q a block, each
 * value q * scale) or Q4_1 (the linear layers: 4-bit values q, each value q * scale + low; a
 * row's bytes hold two blocks' values, `pairs`: the low nibbles one block's, the high nibbles the
 * next one's); scales and lows fp32, [outputs, blocks]. The rows x [m, columns] (bf16 or fp32)
 * are first put in 16-bit integers per block with the block's own scale (its largest magnitude
 * over 32767: a step of 2^-15 of it, finer than bf16's own 2^-8, where llama.cpp's 8-bit Q8_1
 * would round each value by up to 2^-8 of the block's largest), and each output is the sum over
 * blocks of scale * x_scale * (q . x_q), the dot products exact in 32-bit integers, plus
 * low * sum(x) for Q4_1 (the sum of the block's own values), in fp32, rounded once to x's dtype.
 * Eight blocks' integer sums are reduced together, so that their scales apply in one vector.
 *
 * The products run in AVX2's 16-bit multiply-add pairs where the CPU has them, else in plain
 * loops. Compiled on the machine that runs it (native.py); threads share the outputs, each block
 * read once for all rows. */

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

#include "bf16.h"

/* x's rows in integers per block: q [m][columns] int16, and per block its scale and the sum of
 * its own values, [m][blocks] */
static void quantize(const void *x, int bf16, int64_t x_stride, int m, int64_t columns,
                     int16_t *q, float *scale, float *sum) {
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
            float inverse = top > 0.0f ? 32767.0f / top : 0.0f;
            for (int i = 0; i < BLOCK; i++)
                q[r * columns + b * BLOCK + i] = (int16_t)lrintf(v[i] * inverse);
            scale[r * blocks + b] = top / 32767.0f;
            sum[r * blocks + b] = total;
        }
}

#ifdef VECTORS
/* 8 int32 lanes: the products of a block's 32 values (w, two halves of 16) with x's */
static inline __m256i dot_block(const __m256i w[2], const int16_t *x) {
    __m256i first = _mm256_madd_epi16(w[0], _mm256_loadu_si256((const __m256i *)x));
    __m256i last = _mm256_madd_epi16(w[1], _mm256_loadu_si256((const __m256i *)(x + 16)));
    return _mm256_add_epi32(first, last);
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

static inline int32_t lanes_sum_int(__m256i v) {
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4e));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xb1));
    return _mm_cvtsi128_si32(x);
}

static inline float lanes_sum(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* Block b's values as 16-bit integers, two halves of 16 (Q4_1: b even, and the next block's
 * too, which shares its bytes) */
static inline void load_block(const uint8_t *row, int64_t b, const int KIND, __m256i w[2],
                              __m256i next[2]) {
    if (KIND == Q8_0) {
        const int8_t *q = (const int8_t *)row + b * BLOCK;
        w[0] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)q));
        w[1] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q + 16)));
        return;
    }
    const __m256i low4 = _mm256_set1_epi16(15);
    const uint8_t *pair = row + b * (BLOCK / 2);
    for (int half = 0; half < 2; half++) {
        __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(pair + 16 * half)));
        w[half] = _mm256_and_si256(bytes, low4);
        next[half] = _mm256_srli_epi16(bytes, 4);
    }
}

/* One output's sums for the M rows of xq, KIND and M constants where inlined: eight blocks at a
 * time, then the last few one by one. */
static inline __attribute__((always_inline)) void one_output(
    const int16_t *xq, const float *xs, const float *xsum, int64_t blocks, const uint8_t *row,
    const float *scales, const float *lows, float *out, const int KIND, const int M) {
    __m256 acc[ROWS];
    float tail[ROWS];
    for (int r = 0; r < M; r++) {
        acc[r] = _mm256_setzero_ps();
        tail[r] = 0.0f;
    }
    int64_t b = 0;
    for (; b + 8 <= blocks; b += 8) {
        __m256i w[8][2];
        for (int j = 0; j < 8; j += KIND == Q4_1 ? 2 : 1)
            load_block(row, b + j, KIND, w[j], w[j + (KIND == Q4_1)]);
        __m256 scale = _mm256_loadu_ps(scales + b);
        for (int r = 0; r < M; r++) {
            const int16_t *x = xq + (r * blocks + b) * BLOCK;
            __m256i d[8];
            for (int j = 0; j < 8; j++) d[j] = dot_block(w[j], x + j * BLOCK);
            __m256 both = _mm256_mul_ps(scale, _mm256_loadu_ps(xs + r * blocks + b));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums8(d)), both, acc[r]);
            if (KIND == Q4_1)
                acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(lows + b),
                                         _mm256_loadu_ps(xsum + r * blocks + b), acc[r]);
        }
    }
    for (; b < blocks; b++) {
        __m256i w[2][2];
        load_block(row, KIND == Q4_1 ? b & ~1 : b, KIND, w[0], w[1]);
        const __m256i *wb = w[KIND == Q4_1 ? b & 1 : 0];
        for (int r = 0; r < M; r++) {
            __m256i d = dot_block(wb, xq + (r * blocks + b) * BLOCK);
            float dot = (float)lanes_sum_int(d);
            tail[r] += dot * scales[b] * xs[r * blocks + b];
            if (KIND == Q4_1) tail[r] += lows[b] * xsum[r * blocks + b];
        }
    }
    for (int r = 0; r < M; r++) out[r] = lanes_sum(acc[r]) + tail[r];
}

static void outputs_of(int kind, const int16_t *xq, const float *xs, const float *xsum,
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
static void outputs_of(int kind, const int16_t *xq, const float *xs, const float *xsum,
                       int64_t blocks, int rows, const uint8_t *row, const float *scales,
                       const float *lows, float *out) {
    for (int r = 0; r < rows; r++) {
        float total = 0.0f;
        for (int64_t b = 0; b < blocks; b++) {
            const int16_t *x = xq + (r * blocks + b) * BLOCK;
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
    int16_t *xq = malloc(sizeof(int16_t) * m * columns);
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
