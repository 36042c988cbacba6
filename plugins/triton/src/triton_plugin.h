/*
 * Internal contracts of the triton plugin: the context (one device, the
 * loaded kernel modules, timer events), the per-layer state (metadata
 * buffers sized from ah_limits, split-KV workspace, the planned launch
 * shape), and the functions the plugin's source files share.
 */
#ifndef AH_TRITON_PLUGIN_H
#define AH_TRITON_PLUGIN_H

#include <attnhost/plugin.h>
#include <attnhost/plugin_util.h>

#include "cuda_driver.h"
#include "kernel_table.h"

#define TK_MAX_SPLITS 64     /* decode_split_reduce's MAX_SPLITS */
#define TK_AUTO_SPLIT_CAP 32 /* workspace splits when num_kv_splits = auto */
#define TK_DECODE_BLOCK_H 16 /* query heads per stage-1 program */

typedef struct tk_config {
    int num_kv_splits; /* 0: auto (16 when deterministic) */
    int split_tile;    /* minimum keys per split */
    int deterministic; /* fixed splits, independent of the batch */
} tk_config;

struct ah_context {
    const ah_host_services *host;
    const ah_cu_api *cu;
    int device; /* ah_context_options.device_index */
    CUdevice dev;
    CUcontext cuctx;
    int cc; /* compute capability major*10+minor */
    int sms;
    int smem_optin;
    const char *arch; /* "sm80" / "sm90": which table entries run here */
    tk_config cfg;
    CUmodule *modules; /* per table entry, loaded on first use */
    CUfunction *funcs;
    CUevent timer_begin, timer_end;
    int timer_running;
    ah_errbuf err;
};

/* A paged layer's kernels (unified, split-KV stages, kv_write, and for a
 * decoder layer the unified kernel with the tree mask), or a ragged
 * layer's one (ragged; the others NULL). */
typedef struct tk_kernels {
    const tk_entry *unified, *stage1, *reduce, *kv_write, *masked, *ragged;
    CUfunction f_unified, f_stage1, f_reduce, f_kv_write, f_masked, f_ragged;
} tk_kernels;

/* What plan stages in pinned memory for the device: the request and token
 * counts (d_counts) and the tree mask's address (d_mask[0]). */
typedef struct tk_staging {
    int32_t counts[2];
    uint64_t mask_addr;
} tk_staging;

struct ah_state {
    ah_context *ctx;
    ah_layer_spec spec;
    ah_limits lim;
    ah_errbuf err;
    tk_kernels k;
    int heads;         /* query heads per unified program (divides the group) */
    int heads_masked;  /* the same for k.masked */
    int plain;         /* k.unified is the PLAIN specialization */
    int ragged;        /* a ragged layer (ah_spec_ragged): keys packed by cu_seqlens_k */
    int scale_tensors; /* FP8 scales in float32 tensors (kv_scales tensor, per_head) */
    int scale_stride;  /* their stride over KV heads: 1 per head, 0 per tensor */
    int split_cap;     /* workspace splits per (request, head) */
    /* Device metadata, sized from lim: what every kernel reads. */
    CUdeviceptr d_counts;                                  /* int32 [num_reqs, num_tokens] */
    CUdeviceptr d_qsl, d_seq_lens, d_block_table, d_slots; /* paged layers */
    CUdeviceptr d_cuk;  /* ragged layers: cu_seqlens_k [num_reqs + 1] */
    CUdeviceptr d_mask; /* decoder layers: int64 [2 + num_reqs], the tree
                           mask's address (0: none), then mask_indptr */
    CUdeviceptr d_mid_o, d_mid_lse;
    tk_staging *h_stage; /* pinned */
    CUevent staged;      /* the last upload from h_stage; guards its reuse */
    /* The last plan. */
    ah_plan_mode mode;
    uint32_t num_reqs, num_tokens;
    uint32_t num_blocks;   /* the batch's: caches hold at least these */
    uint32_t num_k_tokens; /* ragged: rows of forward's key and value */
    int context_keys;      /* ragged: queries after every key (AH_RAGGED_KEYS_CONTEXT) */
    int decode;            /* pure decode: the split-KV path */
    int masked;            /* the unified kernel with the tree mask (k.masked) */
    int num_splits;
    uint32_t grid_reqs, grid_tokens; /* launch extents (maxima when captured) */
    int captured_decode;             /* path fixed at CAPTURE; -1: nothing captured */
    int captured_masked;             /* the captured launch is k.masked */
};

/* The capability table (plugin.c); state_create checks a spec against it. */
extern const ah_caps tk_caps;

/* Device errors into an errbuf: "what: driver text". */
ah_status tk_cu_fail(const ah_cu_api *cu, ah_errbuf *e, CUresult r, const char *what);
#define TK_CU(CTXP, ERRP, CALL) \
    do { \
        CUresult tk_r_ = (CALL); \
        if (tk_r_ != CUDA_SUCCESS) return tk_cu_fail((CTXP)->cu, (ERRP), tk_r_, #CALL); \
    } while (0)

/* Make ctx's primary context current on this thread. */
ah_status tk_ctx_bind(ah_context *ctx, ah_errbuf *e);

/* The table entry for a kernel and specialization on ctx's arch, or NULL. */
const tk_entry *tk_find(const ah_context *ctx, const char *kernel, ah_dtype q, ah_dtype kv,
                        uint32_t head_size);
/* A ragged kernel ("ragged_attention", "ragged_plain") for q dtype q and
 * head sizes qk / v on ctx's arch: the entry with the smallest pads that
 * hold both, or NULL. */
const tk_entry *tk_find_ragged(const ah_context *ctx, const char *kernel, ah_dtype q, uint32_t qk,
                               uint32_t v);
/* Load (once) the module of an entry; check its signature against want. */
ah_status tk_function(ah_context *ctx, const tk_entry *e, const char *want, CUfunction *out,
                      ah_errbuf *err);
/* Launch with the entry's warps and shared memory. */
ah_status tk_launch(ah_context *ctx, const tk_entry *e, CUfunction f, unsigned gx, unsigned gy,
                    unsigned gz, void **params, CUstream stream, ah_errbuf *err);

/* Parameter signatures the launcher packs (must equal the table's). */
extern const char tk_sig_unified[], tk_sig_unified_mask[], tk_sig_stage1[], tk_sig_reduce[],
    tk_sig_merge[], tk_sig_kv_write[], tk_sig_ragged[];
/* The same with FP8 scales in tensors (generate.py's P_SCALES appended). */
extern const char tk_sig_unified_scales[], tk_sig_unified_mask_scales[], tk_sig_stage1_scales[],
    tk_sig_kv_write_scales[];
/* The table-name suffix of those kernels. */
#define TK_SCALES_SUFFIX "_scale_tensors"

/* ops implemented in state.c and launch.c */
ah_status tk_state_create(ah_context *ctx, const ah_layer_spec *spec, const ah_limits *lim,
                          ah_state **out);
void tk_state_destroy(ah_state *st);
ah_status tk_plan(ah_state *st, const ah_batch *b, ah_plan_mode mode, void *stream);
ah_status tk_forward(ah_state *st, const ah_forward_args *a);
ah_status tk_write_kv(ah_state *st, const ah_kv_write_args *a);
ah_status tk_merge_states(ah_context *ctx, const ah_merge_args *a);
ah_status tk_workspace_size(const ah_layer_spec *spec, const ah_limits *lim, uint64_t *bytes);

/* The effective [plugin.triton] values, typed and range-checked by the host
 * against the declared keys (plugin.c, tk_keys). */
void tk_config_read(const ah_host_services *host, tk_config *cfg);

#endif
