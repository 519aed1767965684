/* Products of a few rows (a decode step's) with a weight kept in the checkpoint's own Q8_0
 * blocks, on the CPU: a small model's LM head, which a decode step otherwise reads in bf16, twice
 * the bytes.
 *
 * The weight [outputs, columns] lies as GGUF's Q8_0 blocks of 32 values along a row: 32 signed
 * bytes q, each value q * scale (the scales fp32, [outputs, blocks], GGUF's own f16 widened).
 * Every product is exact in fp32 (q and the scale are, and so is x, bf16 or fp32): each output
 * is the sum over blocks of scale * (q . x), in fp32, rounded once to the output's dtype; the
 * results differ from a bf16 copy's only by that copy's rounding of the weight.
 *
 * Vectorized for AVX2 with FMA where the CPU has them (every x86 CPU this path runs on), else
 * plain loops. Compiled on the machine that runs it (native.py); threads share the outputs,
 * each block converted once for all rows. */

#include <stdint.h>
#include <stdlib.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VECTORS 1
#endif

#define BLOCK 32
#define MAX_ROWS 16
#define OUTPUTS_PER_ITEM 64 /* a thread's share, in whole tiles */
#define TILE 4              /* outputs, and rows, computed side by side: independent sums */

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

#ifdef VECTORS
static inline float lanes_sum(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* dots[k * MAX_ROWS + r] = sum over blocks of scale * (q . x), for the T outputs whose bytes
 * start at `weight` (`columns` apart, scales `blocks` apart) and the M rows of x (fp32, `columns`
 * apart); M and T constants where inlined, so that the sums stay in registers. */
static inline __attribute__((always_inline)) void vector_tile(
    const float *x, int64_t columns, const int8_t *weight, const float *scales, float *dots,
    const int M, const int T) {
    int64_t blocks = columns / BLOCK;
    __m256 acc[TILE][TILE];
    for (int k = 0; k < T; k++)
        for (int r = 0; r < M; r++) acc[k][r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; b++) {
        for (int k = 0; k < T; k++) {
            const int8_t *q = weight + k * columns + b * BLOCK;
            __m256 w[4];
            for (int i = 0; i < 4; i++)
                w[i] = _mm256_cvtepi32_ps(
                    _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8 * i))));
            __m256 scale = _mm256_set1_ps(scales[k * blocks + b]);
            for (int r = 0; r < M; r++) {
                const float *xb = x + r * columns + b * BLOCK;
                __m256 dot = _mm256_mul_ps(w[0], _mm256_loadu_ps(xb));
                for (int i = 1; i < 4; i++)
                    dot = _mm256_fmadd_ps(w[i], _mm256_loadu_ps(xb + 8 * i), dot);
                acc[k][r] = _mm256_fmadd_ps(dot, scale, acc[k][r]);
            }
        }
    }
    for (int k = 0; k < T; k++)
        for (int r = 0; r < M; r++) dots[k * MAX_ROWS + r] = lanes_sum(acc[k][r]);
}

static void tile_of(const float *x, int64_t columns, int rows, int tile, const int8_t *weight,
                    const float *scales, float *dots) {
    int64_t blocks = columns / BLOCK;
    if (tile == TILE) {
        switch (rows) {
        case 1: vector_tile(x, columns, weight, scales, dots, 1, TILE); return;
        case 2: vector_tile(x, columns, weight, scales, dots, 2, TILE); return;
        case 3: vector_tile(x, columns, weight, scales, dots, 3, TILE); return;
        default: vector_tile(x, columns, weight, scales, dots, TILE, TILE); return;
        }
    }
    for (int k = 0; k < tile; k++)
        for (int r = 0; r < rows; r++)
            vector_tile(x + r * columns, columns, weight + k * columns, scales + k * blocks,
                        dots + k * MAX_ROWS + r, 1, 1);
}
#else
static void tile_of(const float *x, int64_t columns, int rows, int tile, const int8_t *weight,
                    const float *scales, float *dots) {
    int64_t blocks = columns / BLOCK;
    for (int k = 0; k < tile; k++)
        for (int r = 0; r < rows; r++) {
            float total = 0.0f;
            for (int64_t b = 0; b < blocks; b++) {
                const int8_t *q = weight + k * columns + b * BLOCK;
                const float *xb = x + r * columns + b * BLOCK;
                float dot = 0.0f;
                for (int i = 0; i < BLOCK; i++) dot += (float)q[i] * xb[i];
                total += dot * scales[k * blocks + b];
            }
            dots[k * MAX_ROWS + r] = total;
        }
}
#endif

/* x [m, columns], bf16 where `bf16` else fp32, rows x_stride apart; weight [outputs, columns]
 * int8 and scales [outputs, columns / 32]; out [m, outputs] in x's dtype, contiguous. Returns 0,
 * or -1 where a shape is past the kernel's bounds or memory ran out (nothing written then). */
int q8_0_product(const void *x, int bf16, int64_t x_stride, int m, int64_t columns,
                 const int8_t *weight, const float *scales, int64_t outputs, void *out,
                 int threads) {
    if (m <= 0 || outputs <= 0) return 0;
    if (m > MAX_ROWS || columns <= 0 || columns % BLOCK) return -1;
    float *wide = malloc(sizeof(float) * m * columns);
    if (!wide) return -1;
    for (int r = 0; r < m; r++)
        for (int64_t i = 0; i < columns; i++)
            wide[r * columns + i] = bf16 ? from_bf16(((const uint16_t *)x)[r * x_stride + i])
                                         : ((const float *)x)[r * x_stride + i];
    int64_t blocks = columns / BLOCK;
    int64_t items = (outputs + OUTPUTS_PER_ITEM - 1) / OUTPUTS_PER_ITEM;
#pragma omp parallel for schedule(static) num_threads(threads) if (items > 1)
    for (int64_t item = 0; item < items; item++) {
        int64_t end = (item + 1) * OUTPUTS_PER_ITEM < outputs ? (item + 1) * OUTPUTS_PER_ITEM
                                                               : outputs;
        for (int64_t o = item * OUTPUTS_PER_ITEM; o < end; o += TILE) {
            int tile = end - o < TILE ? (int)(end - o) : TILE;
            float dots[TILE * MAX_ROWS];
            for (int first = 0; first < m; first += TILE)
                tile_of(wide + first * columns, columns, m - first < TILE ? m - first : TILE,
                        tile, weight + o * columns, scales + o * blocks, dots + first);
            for (int k = 0; k < tile; k++)
                for (int r = 0; r < m; r++) {
                    int64_t at = r * outputs + o + k;
                    if (bf16)
                        ((uint16_t *)out)[at] = to_bf16(dots[k * MAX_ROWS + r]);
                    else
                        ((float *)out)[at] = dots[k * MAX_ROWS + r];
                }
        }
    }
    free(wide);
    return 0;
}
