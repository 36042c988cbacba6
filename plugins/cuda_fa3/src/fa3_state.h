/*
 * Internal shapes of the cuda_fa3 plugin's handles, shared by its host-side
 * translation units (plugin entry, planning, forward). The host never sees
 * inside them.
 */
#ifndef FA3_STATE_H
#define FA3_STATE_H

#include <attnhost/cuda_services.h>
#include <cuda_runtime.h>
#include <pthread.h>

#include "../kernels/fa3_launch.h"

/* Defaults of the shared V^T's config keys (measured: DECISIONS.md). */
#define FA3_VT_SCRATCH_MIB 64
#define FA3_VT_MIN_READS 4
/* fp8_compute's values: indices into its choices "auto|off". */
#define FA3_FP8_COMPUTE_AUTO 0
#define FA3_FP8_COMPUTE_OFF 1
#define FA3_STR(x) FA3_STR_(x)
#define FA3_STR_(x) #x

struct ah_context {
    ah_cuda_svc svc;
    const ah_host_services *host;
    int sms;           /* multiprocessors: the persistent grid */
    size_t smem_optin; /* shared memory a block may opt into */
    size_t l2_bytes;   /* the device's L2 cache */
    /* The shared V^T scratch (FP8 compute), made by the first state
     * that needs it; NULL when fp8_vt_scratch_mib is 0 or the allocation
     * failed. The context is shared by bindings on other threads, so the
     * scratch belongs to one stream, the first whose forward uses it:
     * forwards there run one after another. Forwards on other streams, and
     * forwards being captured into a graph, transpose V in the kernel.
     * vt_lock guards these fields. */
    pthread_mutex_t vt_lock;
    uint8_t *vt_scratch;
    size_t vt_bytes;
    /* Shared V^T: a flag per slab, and the epoch of the last forward that
     * used them (a flag equal to a forward's epoch was raised in it). */
    uint64_t *vt_flags;
    uint32_t vt_epoch;
    int vt_tried;
    int vt_owned;
    cudaStream_t vt_stream;
};

struct ah_state {
    ah_context *ctx;
    ah_layer_spec spec;
    ah_limits lim;
    ah_errbuf err;
    int group, tpt; /* GQA packing: heads per KV head, tokens per tile */
    int ragged;     /* K/V packed by cu_seqlens_k (ah_spec_ragged), no cache */
    int grid;
    int fp8_compute;    /* e4m3 GEMMs: the layer's fp8_attention, fp8_compute not off */
    int vt_min_reads;   /* share V^T of requests whose KV tiles are read this often */
    int64_t l2_section; /* bytes of K and V per L2 section of the work order (fa3_order.h) */
    /* capacities fixed at creation (CUDA graphs never see a reallocation) */
    int cap_work, cap_combine;
    int64_t cap_part_rows;
    /* device metadata and its pinned host staging */
    fa3_work *d_work, *h_work;
    fa3_combine_job *d_combine, *h_combine;
    fa3_counts *d_counts, *h_counts;
    float *d_part_o, *d_part_lse;
    int32_t *d_kstart, *h_kstart; /* ragged: the planned cu_seqlens_k, [max_num_reqs + 1] */
    int cap_vt_tiles;   /* 128-key tiles the V^T scratch holds for this layer; 0: no sharing */
    cudaEvent_t staged; /* the last plan's copies have left the staging */
    int staged_pending;
    /* scratch for sorting work by cost, and the sort's and the CTA
     * assignment's buckets (fa3_order.h), kept from plan to plan */
    int32_t *h_cost;
    fa3_work *h_tmp;
    void *h_order;
    size_t order_bytes;
    /* the last plan */
    int planned;
    int n_work, n_combine, max_splits;
    int vt_tiles;  /* tiles the last (eager) plan shares V^T of; 0: none */
    int stage_out; /* the last plan's query tiles hold 64 rows or more (see fa3_fwd_launch) */
    int eager;     /* the last plan was AH_PLAN_EAGER: its counts hold for the next forward */
    uint32_t num_tokens;
    uint32_t num_k_tokens;      /* ragged: rows of forward's key and value */
    const int32_t *block_table; /* device; NULL on ragged layers */
    int32_t bt_stride;
    const int64_t *slot_mapping; /* device, for write_kv */
};

/* Bytes of the V^T flags for a scratch of scratch_bytes: one per slab (a
 * 128-key tile of one KV head at head size 128). */
static inline size_t fa3_vt_flag_bytes(size_t scratch_bytes)
{
    return scratch_bytes / (128 * FA3_VT_KEYS) * sizeof(uint64_t);
}

/* The context's device made current on the calling thread: every entry
 * point that touches device memory or launches starts here, since the host
 * may call on any thread and other contexts may sit on other devices. */
static inline cudaError_t fa3_use_device(const ah_context *ctx)
{
    return cudaSetDevice(ctx->svc.device);
}

/* fa3_plugin.cpp: the capability table; state_create checks a spec
 * against it. */
extern const ah_caps fa3_caps;

/* fa3_plan.cpp */
ah_status fa3_state_create(ah_context *ctx, const ah_layer_spec *spec, const ah_limits *lim,
                           ah_state **out);
void fa3_state_destroy(ah_state *st);
ah_status fa3_plan(ah_state *st, const ah_batch *batch, ah_plan_mode mode, void *stream);
ah_status fa3_workspace_size(const ah_layer_spec *spec, const ah_limits *lim, uint64_t *bytes);

/* fa3_plugin.cpp: whether a forward on stream, outside a capture, may use
 * the V^T scratch (see ah_context). */
int fa3_vt_usable(ah_context *ctx, void *stream);
/* Whether work on stream is being captured into a graph (or cannot be told). */
int fa3_capturing(void *stream);

/* fa3_forward.cpp */
ah_status fa3_forward(ah_state *st, const ah_forward_args *args);
ah_status fa3_write_kv(ah_state *st, const ah_kv_write_args *args);

/* fa3_merge.cu */
ah_status fa3_merge_states(ah_context *ctx, const ah_merge_args *args);

#endif
