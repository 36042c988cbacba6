/*
 * A workload: a bound model, its KV caches and one step's batch, with
 * random data on the plugins' devices and host mirrors for the oracle.
 * Serves `attnhost run` (prefill then decode steps, checked against the
 * oracle) and `attnhost bench` (timed steps).
 */
#ifndef AH_CLI_WORKLOAD_H
#define AH_CLI_WORKLOAD_H

#include <stdint.h>

#include <attnhost/attnhost.h>

#include "mirror.h"


typedef struct wl_layer {
    ah_device *dev;
    ah_layer_spec spec;
    ah_mirror kcache, vcache; /* vcache unused for MLA */
    ah_mirror q, k, v, out, lse;
    ah_mirror sinks, alibi;
    float k_scale, v_scale;
} wl_layer;

typedef struct workload {
    ah_binding *b;
    const ah_model *m;
    uint32_t num_layers;
    wl_layer *layers;
    ah_device *meta_dev;     /* where the batch metadata lives */
    ah_limits limits;
    /* per-request state */
    uint32_t num_reqs;
    uint32_t *context;       /* tokens already in the cache */
    int32_t *blocks;         /* [num_reqs * max_blocks_per_req] */
    /* the current batch */
    ah_batch batch;
    ah_mirror qsl, seqlens, table, slots;
    uint64_t rng;
    char err[1024];
} workload;

/* Bind sel into a workload sized for num_reqs requests of up to max_seq_len
 * tokens, max_tokens query tokens per step. */
int wl_create(workload *w, ah_host *h, const ah_model *m, const ah_selection *sel,
              uint32_t num_reqs, uint32_t max_seq_len, uint32_t max_tokens, uint64_t seed);
void wl_destroy(workload *w);

/* Prepare a step where request r gets query_lens[r] new tokens (0: idle),
 * with fresh random q/k/v; plan it. */
int wl_step(workload *w, const uint32_t *query_lens);
/* Run every layer, storing the new tokens' K/V first when store_kv, and
 * wait for the devices. */
int wl_forward_all(workload *w, int store_kv);
/* The same without the wait, so calls can queue back to back; wl_sync waits. */
int wl_enqueue_all(workload *w, int store_kv);
int wl_sync(workload *w);
/* Compare every layer's output with the oracle; *max_err gets the largest
 * relative L2 error, *ok whether every layer is inside its dtype's
 * tolerance. Also mirrors the K/V write on the host. */
int wl_check(workload *w, double *max_err, int *ok);
/* Relative L2 tolerance for a layer's dtypes. */
double wl_tolerance(const ah_layer_spec *s);
/* Advance contexts after a step (wl_forward_all does it). */
void wl_advance(workload *w);

#endif
