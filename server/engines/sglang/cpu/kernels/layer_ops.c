/* The elementwise steps of a decode layer (cpu/decode.py), each one call where torch dispatches
 * several ops: the residual sum and RMSNorm, the rotation of queries and keys with the new keys
 * and values written to their cache slots, and SiLU-and-multiply. Each rounds where the torch
 * ops it stands for round (every op's result to the model's dtype), so that the step's results
 * are theirs: tests/unit/test_cpu_native.py compares.
 *
 * Compiled on the machine that runs it (native.py); this file includes itself to define each
 * step for bf16 and fp32 models. */

#ifndef ELEMENT

#include <math.h>
#include <stdint.h>

#include "bf16.h"

static inline float same(float x) { return x; }
static inline float bf16_rounded(float x) { return from_bf16(to_bf16(x)); }

#define ELEMENT uint16_t
#define LOAD from_bf16
#define STORE to_bf16
#define ROUND bf16_rounded
#define NAMED(name) name##_bf16
#include __FILE__
#undef ELEMENT
#undef LOAD
#undef STORE
#undef ROUND
#undef NAMED

#define ELEMENT float
#define LOAD same
#define STORE same
#define ROUND same
#define NAMED(name) name##_f32
#include __FILE__

#else

/* residual [rows, width] += hidden (where given; each sum rounded), then out = the residual's
 * RMSNorm times weight: x * (1 / sqrt(mean(x^2) + eps)) * weight, in fp32, rounded once. */
void NAMED(add_rms_norm)(ELEMENT *residual, const ELEMENT *hidden, const ELEMENT *weight,
                         float eps, int rows, int width, ELEMENT *out) {
    for (int r = 0; r < rows; r++) {
        ELEMENT *x = residual + (int64_t)r * width;
        if (hidden) {
            const ELEMENT *h = hidden + (int64_t)r * width;
#pragma omp simd
            for (int i = 0; i < width; i++) x[i] = STORE(LOAD(h[i]) + LOAD(x[i]));
        }
        float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
        for (int i = 0; i < width; i++) squares += LOAD(x[i]) * LOAD(x[i]);
        float scale = 1.0f / sqrtf(squares / (float)width + eps);
        ELEMENT *o = out + (int64_t)r * width;
#pragma omp simd
        for (int i = 0; i < width; i++) o[i] = STORE(LOAD(x[i]) * scale * LOAD(weight[i]));
    }
}

/* qkv [rows, (heads + 2 * kv_heads) * dim]: its q and k heads rotated (neox: halves x1, x2 ->
 * x1 cos - x2 sin, x2 cos + x1 sin, each product and sum rounded) by the angles of the row's
 * position (cos_sin [positions, dim]: cos halves then sin halves); the q heads into q
 * [rows, heads, dim], the k heads and the v heads into the caches' slot loc[row]. */
void NAMED(rotate_store)(const ELEMENT *qkv, int rows, int heads, int kv_heads, int dim,
                         const ELEMENT *cos_sin, const int64_t *positions, ELEMENT *k_cache,
                         ELEMENT *v_cache, const int64_t *loc, ELEMENT *q) {
    int half = dim / 2, width = (heads + 2 * kv_heads) * dim;
    for (int r = 0; r < rows; r++) {
        const ELEMENT *row = qkv + (int64_t)r * width;
        const ELEMENT *angles = cos_sin + positions[r] * dim;
        for (int h = 0; h < heads + kv_heads; h++) {
            const ELEMENT *x = row + h * dim;
            ELEMENT *to = h < heads ? q + ((int64_t)r * heads + h) * dim
                                    : k_cache + (loc[r] * kv_heads + (h - heads)) * dim;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                float c = LOAD(angles[i]), s = LOAD(angles[half + i]);
                float a = LOAD(x[i]), b = LOAD(x[half + i]);
                to[i] = STORE(ROUND(a * c) - ROUND(b * s));
                to[half + i] = STORE(ROUND(b * c) + ROUND(a * s));
            }
        }
        const ELEMENT *v = row + (heads + kv_heads) * dim;
        ELEMENT *slot = v_cache + loc[r] * kv_heads * dim;
        for (int i = 0; i < kv_heads * dim; i++) slot[i] = v[i];
    }
}

/* gate_up [rows, 2 * width] -> out [rows, width]: silu(gate) * up, silu rounded first */
void NAMED(silu_mul)(const ELEMENT *gate_up, int rows, int width, ELEMENT *out) {
    for (int r = 0; r < rows; r++) {
        const ELEMENT *gate = gate_up + (int64_t)r * 2 * width, *up = gate + width;
        ELEMENT *o = out + (int64_t)r * width;
#pragma omp simd
        for (int i = 0; i < width; i++) {
            float g = LOAD(gate[i]);
            o[i] = STORE(ROUND(g / (1.0f + expf(-g))) * LOAD(up[i]));
        }
    }
}

#endif
