/*
 * The C interface between the plugin's host code and its CUDA translation
 * units: one call per kernel family. Each returns 0 on success or a CUDA
 * runtime error code, with a message in err.
 */
#ifndef FA3_LAUNCH_H
#define FA3_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#include "fa3_params.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { FA3_T_BF16 = 0, FA3_T_FP16 = 1, FA3_T_FP8_E4M3 = 2, FA3_T_FP8_E5M2 = 3 };

typedef struct fa3_fwd_launch {
    int head_dim;    /* qk: 64, 128, 256; 192 on ragged layers */
    int v_head_dim;  /* head_dim, or 128 on ragged layers (qk 192 / v 128) */
    int ragged;      /* K/V packed (p.k_start), not a paged cache */
    int dtype;       /* FA3_T_BF16 / FA3_T_FP16: q and out */
    int kv_dtype;    /* dtype, or FA3_T_FP8_E4M3 (scales folded into p) */
    int fp8_compute; /* FP8 KV, head size 128: e4m3 GEMMs instead of widening */
    const void *q;
    int64_t q_tok_stride, q_head_stride; /* elements */
    int64_t num_tokens;                  /* rows of q */
    const void *k_cache, *v_cache;
    /* element strides of (block, slot, head) in each cache; channel stride 1 */
    int64_t k_strides[3], v_strides[3];
    int grid; /* persistent CTAs */
    void *stream;
    /* FP8 compute: some query tile holds 64 rows or more (prefill), so the
     * kernel gives up a pipeline stage to stage its output (out_stage);
     * decode's nearly empty tiles keep the stage, which streaming needs. */
    int stage_out;
    fa3_params p;
} fa3_fwd_launch;

/* Largest dynamic shared memory any instance of this (qk) head size needs
 * (192: the ragged qk 192 / v 128 instance). */
size_t fa3_fwd_smem_bytes(int head_dim);

int fa3_launch_forward(const fa3_fwd_launch *L, char *err, size_t errlen);

/* Combine split-KV partials into out/lse (jobs listed in p->combine). */
int fa3_launch_combine(const fa3_params *p, int head_dim, int dtype, int grid, void *stream);

/* Store new K/V rows at slot_mapping, converting to the cache dtype. */
typedef struct fa3_kv_write {
    const void *key, *value; /* [T, Hk, D] src dtype */
    int64_t k_tok_stride, k_head_stride, v_tok_stride, v_head_stride;
    void *k_cache, *v_cache;
    int64_t k_strides[3], v_strides[3];
    const int64_t *slot_mapping; /* device */
    int num_tokens, num_kv_heads, head_dim, block_size;
    int src_dtype, cache_dtype;
    float k_scale, v_scale; /* FP8 caches: stored = fp8(real / scale) */
    /* FP8 scale tensors (read when the kernel runs): KV head h's at
     * [h * scale_head_stride]; NULL: k_scale, v_scale */
    const float *k_scales, *v_scales;
    int scale_head_stride;
    void *stream;
} fa3_kv_write;
int fa3_launch_write_kv(const fa3_kv_write *w);

#ifdef __cplusplus
}
#endif

#endif
