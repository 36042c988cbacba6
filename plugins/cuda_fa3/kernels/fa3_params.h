/*
 * What the host side of cuda_fa3 hands its kernels, in plain C so that the
 * C11 plugin code and the CUDA translation units share one definition.
 *
 * The plan step turns the engine's batch into FA3-style metadata: a list of
 * work items (one per query tile, KV head and KV split), each carrying the
 * key range it covers, plus split-combine jobs. The kernels read the counts
 * from device memory, so a CUDA graph captured once replays any batch that
 * fits the limits given at state creation: plan(REPLAY) rewrites these
 * buffers in place and launches nothing.
 */
#ifndef FA3_PARAMS_H
#define FA3_PARAMS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Rows of one query tile at head size D: a consumer warpgroup per 64 rows.
 * A row is a (token, head-in-group) pair: GQA packing puts the G query heads
 * that share a KV head into one tile, so K/V are read once for all of them.
 * Head size 64 takes three warpgroups: its GEMMs per key tile are half
 * D = 128's while the softmax's exponentials are as many, so two
 * warpgroups' softmax cannot hide behind each other's GEMMs. */
#define FA3_BLOCK_M(D) ((D) == 64 ? 192 : 128)
/* Keys per KV tile of the forward kernels at head size D (fa3_fwd_launch.cuh
 * instantiates them with it; the plan splits KV and estimates cost in these
 * tiles): the K and V rings of two 128-key stages fit shared memory up to
 * D = 128, at D = 256 only with 64-key tiles. */
#define FA3_BLOCK_N(D) ((D) == 256 ? 64 : 128)
#define FA3_MAX_SPLITS 64
/* Keys per tile of the V^T scratch: the FP8-compute kernel's key tile, the
 * head-size-128 tile the plan splits by. */
#define FA3_VT_KEYS FA3_BLOCK_N(128)

/* One unit of work for a persistent CTA. */
typedef struct fa3_work {
    int32_t req;    /* request index */
    int32_t q_tok0; /* first query token (global row of q) of the tile */
    int32_t q_ntok; /* query tokens in the tile */
    int32_t kvh;    /* KV head */
    int32_t kv_lo;  /* key positions [kv_lo, kv_hi) this item covers */
    int32_t kv_hi;
    int32_t part_row; /* -1: write out/lse directly; else first partial row */
    int32_t pos0;     /* position of the tile's first query token */
    /* FP8 compute: V^T of the request's KV tiles vt_lo.. is shared through
     * the V^T scratch, tile n at slab (vt_base + n - vt_lo) * Hk + kvh; -1:
     * not shared. One item per request and KV head, vt_pub, transposes
     * every tile and publishes the images; the others copy the images that
     * are out when the item starts and transpose the rest. */
    int32_t vt_base;
    int32_t vt_lo;
    int32_t vt_pub;
    /* The item's L2 section, a key of the work list's order that only the
     * host reads (fa3_order.h). */
    int32_t section;
} fa3_work;

/* One split-KV combine: nsplit partial blocks of rows rows each. */
typedef struct fa3_combine_job {
    int32_t part_row; /* partial rows of split s: part_row + s * rows + r */
    int32_t rows;     /* valid rows (token-major, then head in group) */
    int32_t nsplit;
    int32_t q_tok0;
    int32_t kvh;
    int32_t pad[3];
} fa3_combine_job;

/* CTAs of the persistent grid (one per SM) at most. */
#define FA3_MAX_GRID 256

/* Device-side counts written by plan. */
typedef struct fa3_counts {
    int32_t n_work;
    int32_t n_combine;
    /* CTA c runs work[cta_work[c] .. cta_work[c + 1]), in order */
    int32_t cta_work[FA3_MAX_GRID + 1];
} fa3_counts;

typedef struct fa3_params {
    /* outputs */
    void *out;                               /* [T, Hq, DV] q dtype */
    float *lse;                              /* [T, Hq] or NULL */
    int64_t out_tok_stride, out_head_stride; /* elements */
    /* split partials: rows of DV floats, and their lse */
    float *part_o;
    float *part_lse;
    /* metadata */
    const fa3_work *work;
    const fa3_combine_job *combine;
    const fa3_counts *counts;
    const int32_t *block_table;
    int32_t bt_stride;
    /* shape */
    int32_t num_q_heads, num_kv_heads, group; /* group = Hq / Hk */
    int32_t tpt;                              /* query tokens per tile: FA3_BLOCK_M(D) / group */
    int32_t block_size;                       /* KV tokens per cache block */
    int32_t box_rows;   /* KV rows per TMA box: divides block_size and BLOCK_N */
    int32_t kv_hnd;     /* 1: cache is [blocks, Hk, bs, D]; 0: [blocks, bs, Hk, D] */
    int32_t num_blocks; /* TMA coordinate past the cache: zero-filled box */
    /* semantics */
    int32_t causal;     /* decoder */
    int32_t window;     /* 0: none */
    int32_t cross;      /* encoder-decoder: no position masks */
    float scale_log2;   /* softmax scale * log2(e), k_scale folded in */
    float softcap;      /* 0: none; applied to scale * q.k (k_scale folded) */
    float scale;        /* softmax scale with k_scale folded, for softcap */
    float v_scale;      /* multiplies the output (FP8 V) */
    const float *sinks; /* [Hq] or NULL */
    const float *alibi; /* [Hq] ALiBi slopes, or NULL */
    /* FP8 compute, shared V^T (fa3_fwd_fp8c.cuh), or NULL: the scratch of
     * stage images (D rows of 128 bytes per tile and KV head, exactly a V^T
     * ring stage), and a flag per (request, KV head): vt_epoch << 32 | the
     * lowest tile whose image its publisher has written, every tile above
     * it too. */
    uint8_t *vt;
    uint64_t *vt_flags;
    uint32_t vt_epoch;
    /* FP8 scale tensors (the layer's kv_scales TENSOR or PER_HEAD), read
     * when the kernels run, so a graph replays with the values they hold
     * then: KV head h's scales at k_scales[h * scale_head_stride] and
     * v_scales[...] (stride 0: one per tensor). NULL: the host's floats,
     * already folded into scale, scale_log2 and v_scale. */
    const float *k_scales, *v_scales;
    int32_t scale_head_stride;
    /* FP8 compute with the engine's query scale (use_q_scale): Q is
     * quantised as q / q_scale with q_scale from the float32 [1] tensor
     * q_scale_t (read when the kernel runs) or, without it, q_scale; both
     * absent (0, NULL): a scale per query row from its largest value. */
    const float *q_scale_t;
    float q_scale;
    /* ragged K/V: request r's keys and values start at row k_start[r] of
     * the packed key and value tensors, which the TMA maps see as one page
     * of block_size = all the step's keys; NULL: the paged cache */
    const int32_t *k_start;
} fa3_params;

#ifdef __cplusplus
}
#endif

#endif
