/*
 * The plugin's handles. ah_context: the chosen ISA path and thread count,
 * from the host's CPU facts and the [plugin.cpu_amx] keys. ah_state: one
 * layer spec, per-thread scratch, and the last planned batch (host copies
 * of its arrays and the work items derived from them).
 */
#ifndef AH_CPU_STATE_H
#define AH_CPU_STATE_H

#include <attnhost/plugin_util.h>

#include "cpu_amx.h"

struct ah_context {
    const ah_host_services *host;
    cpu_amx_path path;
    const cpu_amx_kernels *k;
    int threads;
    uint32_t split_min;      /* fewest keys a split-KV chunk gets */
    uint32_t tile_min_rows;  /* rows from which the bf16 tile kernel is used */
    uint32_t amx_decode;     /* amx path: decode on AMX tiles (1) or vdpbf16ps (0) */
    uint32_t prefetch;       /* pieces of 16 keys the kernels prefetch ahead; 0: none */
    uint32_t amx_interleave; /* amx prefill: tile products in stages between softmax rows */
    uint32_t tile_prefetch;  /* tile kernel: prefetch the pre-packed K/V chunk after next */
    ah_errbuf err;
};

struct ah_state {
    ah_context *ctx;
    ah_layer_spec spec;
    cpu_amx_layer L;
    ah_limits lim;
    ah_errbuf err;
    void *ws_mem;
    cpu_amx_scratch *ws; /* one per thread */
    /* Last plan. */
    uint32_t num_reqs, num_tokens, bt_stride;
    uint32_t num_k_tokens; /* ragged layers: rows of key/value */
    uint32_t num_blocks;   /* the batch's: every block id and slot is inside it */
    int32_t *qsl, *seq_lens, *bt;
    int64_t *slots;
    size_t cap_qsl, cap_seq, cap_bt, cap_slots;
    /* Tree mask of the last plan (decoder layers): the engine's bytes (valid
     * until the step's last forward, see ah_batch) and a copy of mask_indptr. */
    const uint8_t *mask;
    int64_t *mask_ip;
    size_t cap_mask_ip;
    cpu_amx_item *items, *merges;
    uint32_t n_items, n_merges;
    size_t cap_items, cap_merges;
    float *part_o, *part_lse;
    size_t cap_part_o, cap_part_lse;
    /* Pre-packed K/V of prefill requests (cpu_amx.h), filled per forward. */
    uint16_t *pp; /* run.pp is this rounded up to 64 bytes */
    uint64_t *pp_off;
    uint32_t *pp_np;
    cpu_amx_pptask *pp_tasks;
    uint32_t n_pp_tasks;
    size_t cap_pp, cap_pp_off, cap_pp_np, cap_pp_tasks;
};

/* exec.c */
ah_status cpu_amx_plan(ah_state *st, const ah_batch *b);
void cpu_amx_execute(ah_state *st, const cpu_amx_run *run);
ah_status cpu_amx_scratch_create(ah_state *st);
/* Grow *p (elements of size sz) to hold n, keeping its entries. */
int cpu_amx_reserve(const ah_host_services *h, void **p, size_t *cap, size_t n, size_t sz);

#endif
