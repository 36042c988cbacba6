/*
 * Parameter structs passed by value to the kernels, and the launcher
 * declarations the host side (plugin.cu) calls. Kernel files include this;
 * so does the host code. Plain data only: the kernels receive one struct
 * each so adding a feature never changes a launch site's argument list.
 */
#ifndef FI_PARAMS_H
#define FI_PARAMS_H

#include <stdint.h>

#include <cuda_runtime.h>

#include "decode_heads.h"
#include "scheduler.h"

namespace fi {

enum attn_kind {
    FI_ATTN_CAUSAL = 0, /* decoder self-attention */
    FI_ATTN_BIDIR = 1,  /* encoder / encoder-only */
    FI_ATTN_CROSS = 2   /* encoder-decoder: every key visible */
};

/* Where a key row lives: element strides of one cache tensor. */
struct kv_geom {
    int page_shift;      /* log2(block_size) */
    int64_t stride_page; /* elements per block */
    int64_t stride_slot; /* between tokens of a block */
    int64_t stride_head; /* between kv heads */
};

/* The attention variant: what the hooks in fi_common.cuh apply. */
struct variant {
    int attn;       /* attn_kind */
    int window;     /* 0: none */
    float qk_scale; /* softmax scale * k dequant scale (host floats) */
    float v_scale;  /* value dequant scale (1 unless FP8 with host floats) */
    float softcap;  /* 0: none */
    float inv_softcap;
    int alibi;           /* slopes != NULL */
    const float *slopes; /* [Hq] */
    const float *sinks;  /* [Hq] or NULL */
    /* FP8 scales in device float32 tensors (kv_scales TENSOR, PER_HEAD),
     * read when a kernel runs, so a replayed graph sees the values of the
     * replay; KV head hk's are k_scales[hk * scale_hs] and v_scales[...]
     * (scale_hs 1 per head, 0 one for all; MLA: v_scales = k_scales).
     * NULL: qk_scale and v_scale hold the host floats. Only FP8
     * instantiations read them (tensor_scales). Last, so the fields above
     * keep the offsets the 16-bit kernels' parameter loads had. */
    const float *k_scales, *v_scales;
    int scale_hs;
};

/* Rows (tokens x heads of one KV group) of one tensor-core plan tile. A
 * kernel whose CTA covers fewer rows runs FI_TILE_ROWS / rows CTAs per tile;
 * prefill_cta_rows (scheduler.h) gives a family's. */
#define FI_TILE_ROWS 128

/* Pages the plan sorts together when it lists them in address order. */
#define FI_SORT_RUN 1024

/* Planned batch metadata, all device buffers owned by the state. */
struct plan_bufs {
    int32_t *qo_indptr;        /* [reqs+1] */
    int32_t *kv_indptr;        /* [reqs+1] pages */
    int32_t *kv_indices;       /* [sum pages] */
    int32_t *kv_last_page_len; /* [reqs] */
    int32_t *seq_lens;         /* [reqs] */
    int32_t *token_req;        /* [tokens] request of each query token */
    int32_t *token_pos;        /* [tokens] position of each query token */
    int32_t *tile_indptr;      /* [reqs+1] tensor-core q tiles per request */
    int32_t *tile_req;         /* [tiles] */
    int32_t *tile_row0;        /* [tiles] first packed row of the tile */
    int32_t *num_tiles;        /* [1] */
};

/* Output side shared by decode and prefill: either the final result (out in
 * the query dtype, optional lse) or a partial state (fp32 values normalised by
 * their own denominator, base-2 lse) in a workspace slot for a later merge. */
struct out_desc {
    void *out; /* final: [T, Hq, DV] in q dtype */
    int64_t out_stride_t, out_stride_h;
    float *lse; /* final: [T, Hq] natural log, or NULL */
    int64_t lse_stride_t;
    float *part_o;   /* partial: [S][T][Hq][DV] */
    float *part_lse; /* partial: [S][T][Hq], base 2 */
    int part_slot;   /* slot of split 0 in this pass */
};

struct attn_params {
    const void *q;
    int64_t q_stride_t, q_stride_h;
    const void *k_cache;
    const void *v_cache; /* == k_cache for MLA */
    kv_geom kg, vg;
    plan_bufs plan;
    variant var;
    out_desc o;
    int num_tokens, num_qo_heads, num_kv_heads, group; /* group = Hq / Hk */
    int kv_begin;      /* keys below this are left out (cascade suffix) */
    int num_splits;    /* decode: KV partitions per query row */
    int shared_prefix; /* prefill: rows = every token, keys = request 0's [0, prefix_len) */
    int prefix_len;
    int partial;        /* write out_desc partial state instead of the result */
    int kv_splits;      /* tensor-core kernel, partial only: grid z cuts keys into */
    int kv_chunk;       /* kv_splits ranges of kv_chunk positions, slot part_slot + z */
    int head_fastest;   /* decode_stream grid: x = head block, y = token (set by its launcher) */
    int one_token_reqs; /* every request has one query token (the plan's decode steps) */
};

struct merge_params {
    const float *part_o, *part_lse;
    int num_parts, num_tokens, num_heads, dv;
    const float *sinks;
    float v_scale_unused;
    void *out;
    int64_t out_stride_t, out_stride_h;
    float *lse;
    int64_t lse_stride_t;
};

/* Launchers (one per kernel family), returning the launch error. launch_plan:
 * max_pages bounds any request's pages (the state's max_blocks_per_req, so a
 * captured plan covers every replay); sort_pages lets the fill list each
 * decode request's full pages in address order, for plans whose attention
 * cannot depend on key order otherwise (plan_kernels.cu). */
cudaError_t launch_plan(const int32_t *query_start_loc, const int32_t *seq_lens,
                        const int32_t *block_table, int64_t bt_stride, int num_reqs, int num_tokens,
                        int page_shift, int group, int max_pages, int sort_pages,
                        const plan_bufs &pb, cudaStream_t st);
/* Absorbed MLA on Hopper, 64 heads per CTA (decode_mla_sm90.cu; gb 64):
 * occupancy != NULL reports resident CTAs per SM instead of launching. */
cudaError_t launch_decode_mla_sm90(int q_dtype, int kv_dtype, const attn_params &p, cudaStream_t st,
                                   int *occupancy);
/* Absorbed MLA on Hopper on an FP8 cache, 16 heads or fewer, one token a
 * CTA, keys as the GEMMs' M side (decode_mla_fp8_sm90.cu): what
 * launch_decode_mla_sm90 launches for such a layer's decode steps. */
cudaError_t launch_decode_mla_fp8_sm90(int q_dtype, int kv_dtype, const attn_params &p,
                                       cudaStream_t st, int *occupancy);
/* stream: the streaming kernel in place of the register loads (decode_choice). */
cudaError_t launch_decode(int q_dtype, int kv_dtype, int d, int dv, int gb, int heads_per_cta,
                          bool stream, const attn_params &p, cudaStream_t st);
/* Largest resident CTAs per SM of the decode kernel for this config at its
 * pipeline depth (FI_DECODE_STAGES), or with stream of the streaming kernel
 * that is its alternative (0 on error or where there is none). */
int decode_occupancy(int q_dtype, int kv_dtype, int d, int dv, int gb, bool stream);
/* family as the scheduler chose it; grid_tiles 0 prepares the family's
 * kernels (shared-memory limits) and launches nothing. */
cudaError_t launch_prefill(int q_dtype, int kv_dtype, int d, prefill_family family,
                           const attn_params &p, int grid_tiles, cudaStream_t st);
/* Launches the Hopper kernel (grid_tiles 0: raise its shared-memory limit only). */
cudaError_t launch_prefill_sm90(int q_dtype, const attn_params &p, int grid_tiles, cudaStream_t st);
/* Does the tensor-core kernel exist for this head size? */
bool prefill_supported(int d, int dv);
/* What the scheduler needs of CUDA device `device` (sms 0: unreadable). */
sched_device device_facts(int device);
/* pdl: launch as a programmatic dependent of the kernel before it. */
cudaError_t launch_merge_partials(int q_dtype, const merge_params &m, bool pdl, cudaStream_t st);
/* FP8 caches store value / scale: head h's scale is scales[h * scale_hs]
 * (a device tensor, read when the kernel runs), or `scale` when scales is
 * NULL. */
cudaError_t launch_write_kv(int q_dtype, int kv_dtype, const void *src, int64_t src_stride_t,
                            int64_t src_stride_h, void *cache, const kv_geom &g, int d,
                            const int64_t *slot_mapping, int num_tokens, int num_kv_heads,
                            float scale, const float *scales, int scale_hs, cudaStream_t st);

} // namespace fi

#endif
