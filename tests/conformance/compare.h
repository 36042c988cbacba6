/*
 * Result checks of the conformance suite: poisoning output buffers with a
 * recognizable NaN pattern, and comparing a plugin's output with the
 * oracle's by relative L2 and max-abs error, counting NaNs and elements the
 * plugin never wrote (still the poison pattern). Private to the suite.
 */
#ifndef AH_CONFORMANCE_COMPARE_H
#define AH_CONFORMANCE_COMPARE_H

#include <stddef.h>
#include <stdint.h>

#include <attnhost/plugin.h>

typedef struct ah__conf_diff {
    double rel_l2;      /* ||out - ref|| / max(||ref||, tiny) */
    double max_abs;     /* max |out - ref| over finite pairs */
    size_t n_nan;       /* non-finite outputs where the oracle is finite */
    size_t n_unwritten; /* elements still holding the poison pattern */
    size_t first_bad;   /* index of the first NaN/unwritten element, or SIZE_MAX */
} ah__conf_diff;

/* Fill n elements of type t with the poison pattern (a quiet NaN with a
 * payload no arithmetic produces). */
void ah__conf_poison(void *buf, size_t n, ah_dtype t);
/* Fill n float32 values with the poison pattern (for LSE buffers). */
void ah__conf_poison_f32(float *buf, size_t n);

/* Compare n elements of out (type t) with ref. */
void ah__conf_compare(const void *out, ah_dtype t, const double *ref, size_t n, ah__conf_diff *d);
/* The same for float32 LSE values: -inf in ref must be -inf in out, and is
 * left out of the norms. */
void ah__conf_compare_lse(const float *out, const double *ref, size_t n, ah__conf_diff *d);

/* Tolerances for a query dtype, KV dtype and the layer's fp8_attention:
 * on rel_l2, on max_abs (relative to the largest |ref|) and on the LSE's
 * largest absolute error. */
typedef struct ah__conf_tol {
    double rel_l2, max_abs_rel, lse_abs;
} ah__conf_tol;
ah__conf_tol ah__conf_tolerance(ah_dtype q, ah_dtype kv, int fp8_attention);

#endif
