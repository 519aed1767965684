/* bf16 <-> fp32, shared by the kernels: a bf16 is an fp32's upper 16 bits. */

#ifndef B3OS_BF16_H
#define B3OS_BF16_H

#include <stdint.h>

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

#endif
