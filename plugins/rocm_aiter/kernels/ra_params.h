/*
 * Kernel parameter blocks, passed by value to the kernels in kernels/attn.hip
 * (one argument each) and filled by src/launch.c. Plain C with fixed-width
 * members in an order that needs no padding, so host and device agree.
 * Strides are in elements.
 */
#ifndef RA_PARAMS_H
#define RA_PARAMS_H

typedef struct ra_attn_params {
    const void *q;       /* [T, Hq, D] (stride_q_t, stride_q_h) */
    const void *k_cache; /* NHD or HND (kv_hnd), dense; 16-bit or FP8 */
    const void *v_cache;
    void *out;                  /* [T, Hq, D] (stride_o_t, stride_o_h) */
    float *lse;                 /* [T, Hq] dense, or NULL */
    const int *query_start_loc; /* [R + 1] */
    const int *seq_lens;        /* [R] */
    const int *block_table;     /* [R, table_stride] */
    const float *sinks;         /* [Hq] or NULL */
    const float *alibi;         /* [Hq] slopes or NULL */
    float *part_o;              /* decode: [R, Hq, max_parts, v head] */
    float *part_ml;             /* decode: [R, Hq, max_parts, 2] (max, sum) */
    long long stride_q_t, stride_q_h, stride_o_t, stride_o_h;
    int table_stride, num_reqs, num_q_heads, num_kv_heads;
    int head_size, block_size, window, max_parts;
    float scale;   /* the softmax scale times the FP8 cache's k_scale */
    float softcap; /* 0: none */
    float v_scale; /* the FP8 cache's v_scale, 1 for a 16-bit cache */
    int use_sinks;
    int causal, kv_hnd; /* 0/1: causal mask; HND cache layout */
    int token_rows;     /* decode kernel: 1, a wave per query token over all its
                           keys, writing out and lse itself (MLA prefill) */
    int pad_;
} ra_attn_params;

typedef struct ra_kv_params {
    const void *key, *value;       /* [T, Hk, D] (stride_t, stride_h) each */
    void *k_cache, *v_cache;       /* NHD or HND (kv_hnd), dense */
    const long long *slot_mapping; /* [T]; negative: padding */
    long long stride_k_t, stride_k_h, stride_v_t, stride_v_h;
    int num_tokens, num_kv_heads, head_size, block_size, kv_hnd;
    float k_scale, v_scale; /* FP8 caches: stored = real / scale */
    int pad_;
} ra_kv_params;

typedef struct ra_merge_params {
    const void *v_a, *v_b;      /* [T, H, D] dense */
    const float *lse_a, *lse_b; /* [T, H] */
    void *out;
    float *lse_out;      /* or NULL */
    int rows, head_size; /* rows = T * H */
} ra_merge_params;

#endif
