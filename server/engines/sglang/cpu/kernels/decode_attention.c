/* One decode step's attention over SGLang's paged KV cache, on the CPU.
 *
 * For each request b, its one new query [heads, dim] attends to the keys and values at the cache
 * slots req_to_token[rows[b], 0 .. lengths[b]) of SGLang's token-major pool ([slots, kv_heads,
 * dim]), read where they lie: no gather, no padding, no mask. A request's context is split into
 * chunks of CHUNK tokens, spread over the threads; a chunk reads each token's keys and values
 * once for all heads (grouped-query attention: head h reads key head h / group) and keeps each
 * head's softmax online (running maximum, sum and weighted values); the chunks are then joined
 * by their maxima and sums.
 *
 * Compiled on the machine that runs it, for its own vector units (native.py). A bf16 cache on a
 * CPU with AVX-512 BF16 takes `bf16_block`: the dot products in the CPU's bf16 pair instruction,
 * sixteen tokens' sums at once. Other caches and CPUs take `plain_block`, loops the compiler
 * vectorizes. Threads: the OpenMP runtime torch itself runs on (the same libgomp, already
 * loaded). This file includes itself to define the steps for bf16 and fp32 caches. */

#ifndef ELEMENT

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__) && defined(__AVX512BF16__)
#include <immintrin.h>
#define BF16_PAIRS 1
#endif

#define CHUNK 256 /* tokens of one work item */
#define BLOCK 16  /* tokens whose scores are computed before their softmax update */
#define MAX_GROUP 16
#define MAX_HEADS 128
#define MAX_DIM 256
#define LOWEST (-1e30f) /* finite: compiled with -ffast-math */

#include "bf16.h"

static inline float same(float x) { return x; }

/* A chunk's state: per head, its maximum score, the sum of exponentials and the weighted values,
 * [heads][2 + dim], and the block's scores, [heads][BLOCK]. */
typedef struct {
    float *state;
    float scores[MAX_HEADS][BLOCK];
} Chunk;

/* The block's scores, scaled, folded into each head's online softmax; the scores become the
 * weights of the block's values. */
static void fold_scores(Chunk *c, int heads, int dim, int n) {
    for (int h = 0; h < heads; h++) {
        float *state = c->state + (int64_t)h * (dim + 2), *s = c->scores[h];
        float top = state[0], sum = 0.0f;
        for (int j = 0; j < n; j++) top = s[j] > top ? s[j] : top;
        float keep = expf(state[0] - top);
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < n; j++) {
            s[j] = expf(s[j] - top);
            sum += s[j];
        }
        state[0] = top;
        state[1] = state[1] * keep + sum;
        if (keep != 1.0f) {
#pragma omp simd
            for (int d = 0; d < dim; d++) state[2 + d] *= keep;
        }
    }
}

#ifdef BF16_PAIRS

/* lane i: the sum of v[i]'s lanes */
static inline __m512 sums16(__m512 v[16]) {
    __m512 a[8], b[4];
    for (int k = 0; k < 8; k++)
        a[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                             _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 4; k++) {
        __m512d x = _mm512_castps_pd(a[2 * k]), y = _mm512_castps_pd(a[2 * k + 1]);
        b[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    __m512 d0 = _mm512_add_ps(_mm512_shuffle_f32x4(b[0], b[1], 0x88),
                              _mm512_shuffle_f32x4(b[0], b[1], 0xDD));
    __m512 d1 = _mm512_add_ps(_mm512_shuffle_f32x4(b[2], b[3], 0x88),
                              _mm512_shuffle_f32x4(b[2], b[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(d0, d1, 0x88), _mm512_shuffle_f32x4(d0, d1, 0xDD));
}

static inline __m512 widened(const uint16_t *x) { /* 16 bf16 -> fp32 */
    __m256i raw = _mm256_loadu_si256((const __m256i *)x);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

/* The values of key head g weighted into its heads' sums, GROUP a constant where inlined. */
static inline __attribute__((always_inline)) void weigh_values(
    Chunk *c, const uint16_t *const *values, int n, int g, int group_, int dim, const int GROUP) {
    int group = GROUP ? GROUP : group_;
    for (int dv = 0; dv < dim; dv += 16) {
        __m512 acc[MAX_GROUP];
        for (int i = 0; i < group; i++)
            acc[i] = _mm512_loadu_ps(c->state + (int64_t)(g * group + i) * (dim + 2) + 2 + dv);
        for (int j = 0; j < n; j++) {
            __m512 v = widened(values[j] + dv);
            for (int i = 0; i < group; i++)
                acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(c->scores[g * group + i][j]), v, acc[i]);
        }
        for (int i = 0; i < group; i++)
            _mm512_storeu_ps(c->state + (int64_t)(g * group + i) * (dim + 2) + 2 + dv, acc[i]);
    }
}

/* The scores of one block of tokens at `slots`, bf16 keys; N a constant where inlined (a whole
 * block) or 0 (n tokens). */
static inline __attribute__((always_inline)) void bf16_scores(
    Chunk *c, const uint16_t *q, const uint16_t *k, const int32_t *slots, int n_, int heads,
    int kv_heads, int dim, float scale, const int N) {
    int n = N ? N : n_, group = heads / kv_heads;
    const int64_t row = (int64_t)kv_heads * dim;
    for (int g = 0; g < kv_heads; g++) {
        const uint16_t *keys[BLOCK];
        for (int j = 0; j < n; j++) keys[j] = k + slots[j] * row + (int64_t)g * dim;
        for (int i = 0; i < group; i++) {
            const uint16_t *qh = q + (int64_t)(g * group + i) * dim;
            __m512 partial[16];
            for (int j = 0; j < 16; j++) partial[j] = _mm512_setzero_ps();
            for (int d = 0; d < dim; d += 32) {
                __m512bh qd = (__m512bh)_mm512_loadu_si512(qh + d);
                for (int j = 0; j < n; j++)
                    partial[j] = _mm512_dpbf16_ps(partial[j], qd,
                                                  (__m512bh)_mm512_loadu_si512(keys[j] + d));
            }
            _mm512_storeu_ps(c->scores[g * group + i],
                             _mm512_mul_ps(sums16(partial), _mm512_set1_ps(scale)));
        }
    }
}

/* One block of n <= 16 tokens at `slots`, bf16 keys and values; q: [heads][dim] bf16. The next
 * block's rows (`ahead` tokens at slots + BLOCK) are fetched meanwhile. */
static void bf16_block(Chunk *c, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                       const int32_t *slots, int n, int ahead, int heads, int kv_heads, int dim,
                       float scale) {
    int group = heads / kv_heads;
    const int64_t row = (int64_t)kv_heads * dim, bytes = row * 2;
    for (int j = 0; j < ahead; j++) {
        const char *kr = (const char *)(k + slots[BLOCK + j] * row);
        const char *vr = (const char *)(v + slots[BLOCK + j] * row);
        for (int64_t line = 0; line < bytes; line += 64) {
            __builtin_prefetch(kr + line);
            __builtin_prefetch(vr + line);
        }
    }
    if (n == BLOCK)
        bf16_scores(c, q, k, slots, n, heads, kv_heads, dim, scale, BLOCK);
    else
        bf16_scores(c, q, k, slots, n, heads, kv_heads, dim, scale, 0);
    fold_scores(c, heads, dim, n);
    for (int g = 0; g < kv_heads; g++) {
        const uint16_t *values[BLOCK];
        for (int j = 0; j < n; j++) values[j] = v + slots[j] * row + (int64_t)g * dim;
        switch (group) { /* the common group sizes with their loops unrolled */
        case 1: weigh_values(c, values, n, g, group, dim, 1); break;
        case 2: weigh_values(c, values, n, g, group, dim, 2); break;
        case 3: weigh_values(c, values, n, g, group, dim, 3); break;
        case 4: weigh_values(c, values, n, g, group, dim, 4); break;
        case 8: weigh_values(c, values, n, g, group, dim, 8); break;
        default: weigh_values(c, values, n, g, group, dim, 0);
        }
    }
}

#endif

#define ELEMENT uint16_t
#define LOAD from_bf16
#define STORE to_bf16
#define NAMED(name) name##_bf16
#include __FILE__
#undef ELEMENT
#undef LOAD
#undef STORE
#undef NAMED

#define ELEMENT float
#define LOAD same
#define STORE same
#define NAMED(name) name##_f32
#include __FILE__

#else

/* One block of n <= BLOCK tokens at `slots`; q: [heads][dim] fp32, scaled. */
static void NAMED(plain_block)(Chunk *c, const float *q, const ELEMENT *k, const ELEMENT *v,
                               const int32_t *slots, int n, int heads, int kv_heads, int dim) {
    int group = heads / kv_heads;
    const int64_t row = (int64_t)kv_heads * dim;
    float x[MAX_DIM];
    for (int j = 0; j < n; j++) {
        for (int g = 0; g < kv_heads; g++) {
            const ELEMENT *key = k + slots[j] * row + (int64_t)g * dim;
#pragma omp simd
            for (int d = 0; d < dim; d++) x[d] = LOAD(key[d]);
            for (int i = 0; i < group; i++) {
                const float *qh = q + (int64_t)(g * group + i) * dim;
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (int d = 0; d < dim; d++) dot += qh[d] * x[d];
                c->scores[g * group + i][j] = dot;
            }
        }
    }
    fold_scores(c, heads, dim, n);
    for (int j = 0; j < n; j++) {
        for (int g = 0; g < kv_heads; g++) {
            const ELEMENT *value = v + slots[j] * row + (int64_t)g * dim;
#pragma omp simd
            for (int d = 0; d < dim; d++) x[d] = LOAD(value[d]);
            for (int i = 0; i < group; i++) {
                float p = c->scores[g * group + i][j];
                float *acc = c->state + (int64_t)(g * group + i) * (dim + 2) + 2;
#pragma omp simd
                for (int d = 0; d < dim; d++) acc[d] += p * x[d];
            }
        }
    }
}

/* The step. query: [requests, heads, dim], rows query_stride elements apart; out: [requests,
 * heads, dim], contiguous. Returns 0, or -1 where a shape is past this kernel's bounds or memory
 * ran out (nothing written then). */
int NAMED(decode_attention)(const ELEMENT *query, int64_t query_stride, const ELEMENT *k,
                            const ELEMENT *v, const int32_t *req_to_token, int64_t token_stride,
                            const int64_t *rows, const int64_t *lengths, int requests, int heads,
                            int kv_heads, int dim, float scale, ELEMENT *out, int threads) {
    if (requests <= 0) return 0;
    int group = kv_heads > 0 ? heads / kv_heads : 0;
    if (kv_heads <= 0 || group * kv_heads != heads || group > MAX_GROUP || heads > MAX_HEADS ||
        dim <= 0 || dim > MAX_DIM)
        return -1;
    int pairs = 0;
#ifdef BF16_PAIRS
    pairs = sizeof(ELEMENT) == 2 && dim % 32 == 0;
#endif
    /* chunks: starts[b] .. starts[b + 1] are request b's */
    int64_t *starts = malloc(sizeof(int64_t) * (requests + 1));
    int64_t width = (int64_t)heads * (dim + 2), per_query = (int64_t)heads * dim;
    float *scaled = malloc(sizeof(float) * requests * per_query);
    float *states = NULL;
    if (starts && scaled) {
        starts[0] = 0;
        for (int b = 0; b < requests; b++) {
            int64_t count = (lengths[b] + CHUNK - 1) / CHUNK;
            starts[b + 1] = starts[b] + (count ? count : 1);
        }
        states = malloc(sizeof(float) * starts[requests] * width);
    }
    if (!states) {
        free(starts);
        free(scaled);
        return -1;
    }
    for (int b = 0; b < requests; b++)
        for (int64_t i = 0; i < per_query; i++)
            scaled[b * per_query + i] = LOAD(query[b * query_stride + i]) * scale;
    int64_t chunks = starts[requests];
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (chunks > 1)
    for (int64_t chunk = 0; chunk < chunks; chunk++) {
        int b = 0;
        while (starts[b + 1] <= chunk) b++;
        int64_t first = (chunk - starts[b]) * CHUNK;
        int64_t last = first + CHUNK < lengths[b] ? first + CHUNK : lengths[b];
        const int32_t *slots = req_to_token + rows[b] * token_stride;
        Chunk c;
        c.state = states + chunk * width;
        for (int h = 0; h < heads; h++) {
            float *state = c.state + (int64_t)h * (dim + 2);
            state[0] = LOWEST;
            memset(state + 1, 0, sizeof(float) * (dim + 1));
        }
        for (int64_t t = first; t < last; t += BLOCK) {
            int n = (int)(last - t < BLOCK ? last - t : BLOCK);
#ifdef BF16_PAIRS
            if (pairs) {
                int64_t after = last - t - n;
                int ahead = (int)(after < BLOCK ? after : BLOCK);
                bf16_block(&c, (const uint16_t *)query + b * query_stride, (const uint16_t *)k,
                           (const uint16_t *)v, slots + t, n, ahead, heads, kv_heads, dim, scale);
                continue;
            }
#endif
            NAMED(plain_block)(&c, scaled + b * per_query, k, v, slots + t, n, heads, kv_heads,
                               dim);
        }
    }
    (void)pairs;
    for (int b = 0; b < requests; b++) {
        for (int h = 0; h < heads; h++) {
            float top = LOWEST, sum = 0.0f, joined[MAX_DIM];
            for (int64_t c = starts[b]; c < starts[b + 1]; c++)
                top = states[c * width + h * (dim + 2)] > top ? states[c * width + h * (dim + 2)]
                                                              : top;
            memset(joined, 0, sizeof(float) * dim);
            for (int64_t c = starts[b]; c < starts[b + 1]; c++) {
                const float *p = states + c * width + h * (dim + 2);
                float w = expf(p[0] - top);
                sum += p[1] * w;
                for (int d = 0; d < dim; d++) joined[d] += p[2 + d] * w;
            }
            ELEMENT *o = out + ((int64_t)b * heads + h) * dim;
            float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
            for (int d = 0; d < dim; d++) o[d] = STORE(joined[d] * inv);
        }
    }
    free(starts);
    free(scaled);
    free(states);
    return 0;
}

#endif
