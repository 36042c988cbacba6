/*
 * Runtime values to compile-time constants. Each FI_DISPATCH_* macro runs its
 * body with a constexpr bound to the matching case and, for a value it has
 * no case for, returns cudaErrorInvalidValue after printing which value and
 * which set (an unsupported value is a plugin bug: the plan step checks the
 * spec against the same sets and reports it to the host first).
 *
 * Page size is deliberately NOT a compile-time constant: every kernel reads
 * keys through kv_row() with a runtime shift (block sizes are powers of two),
 * which costs one shift and one mask per row and saves 8x instantiations.
 */
#ifndef FI_DISPATCH_CUH
#define FI_DISPATCH_CUH

#include <stdio.h>

#define FI_UNSUPPORTED(what, value, set) \
    do { \
        fprintf(stderr, "cuda_flashinfer: unsupported %s %d (supported: %s)\n", what, \
                (int)(value), set); \
        return cudaErrorInvalidValue; \
    } while (0)

/* 16-bit query/output type. */
#define FI_DISPATCH_QTYPE(code, QT, ...) \
    switch (code) { \
    case FI_F16: { \
        using QT = half; \
        __VA_ARGS__ \
    } break; \
    case FI_BF16: { \
        using QT = __nv_bfloat16; \
        __VA_ARGS__ \
    } break; \
    default: FI_UNSUPPORTED("query dtype", code, "fp16, bf16"); \
    }

/* KV type: the query's own 16-bit type or an FP8 format. */
#define FI_DISPATCH_KVTYPE(code, QT, KT, ...) \
    switch (code) { \
    case FI_F16: \
    case FI_BF16: { \
        using KT = QT; \
        __VA_ARGS__ \
    } break; \
    case FI_E4M3: { \
        using KT = e4m3; \
        __VA_ARGS__ \
    } break; \
    case FI_E5M2: { \
        using KT = e5m2; \
        __VA_ARGS__ \
    } break; \
    default: FI_UNSUPPORTED("kv dtype", code, "same as query, fp8_e4m3, fp8_e5m2"); \
    }

/* Query heads one decode CTA serves from a single read of its KV rows. */
#define FI_DISPATCH_GROUP_BLOCK(gb, GB, ...) \
    switch (gb) { \
    case 1: { \
        constexpr int GB = 1; \
        __VA_ARGS__ \
    } break; \
    case 2: { \
        constexpr int GB = 2; \
        __VA_ARGS__ \
    } break; \
    case 4: { \
        constexpr int GB = 4; \
        __VA_ARGS__ \
    } break; \
    case 8: { \
        constexpr int GB = 8; \
        __VA_ARGS__ \
    } break; \
    case 16: { \
        constexpr int GB = 16; \
        __VA_ARGS__ \
    } break; \
    default: FI_UNSUPPORTED("decode head-group block", gb, "1, 2, 4, 8, 16"); \
    }

#endif
