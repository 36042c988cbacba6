/*
 * A workload: a bound model, its KV caches and one step's batch, with
 * random data on the plugins' devices and host mirrors for the oracle.
 * Serves `attnhost run` (an engine's passes, layer by layer, each layer
 * checked against the oracle) and `attnhost bench` (timed steps).
 *
 * Layers take three roles, as ABI 2.1 defines them:
 *   cacheless (ENCODER, ENCODER_ONLY): attend over the step's own packed
 *     K/V (query_start_loc as cu_seqlens); no cache;
 *   self (DECODER): paged, K/V stored at slot_mapping, causal by default;
 *   cross (ENCODER_DECODER): read enc_lens[r] encoder tokens that
 *     wl_write_cross stored once in the layer's cache on an encoder pass.
 * Non-attention layers (layer kinds) have dev NULL and are never touched.
 *
 * KV-cache groups (ABI 2.1): each group of the model has its own paging
 * (wl_group), and a model of several groups gets batches with one
 * ah_kv_group per group, as vLLM's hybrid KV-cache manager passes them.
 *
 * Activations (q, k, v, out, lse) are one set of buffers per device shared
 * by every layer: a layer's data is made, run and checked before the next
 * layer's, so memory holds the KV caches and one layer's activations.
 *
 * Ragged prefill (ABI 2.3): a workload made with ragged set runs, on a
 * step planned with ragged_step, each layer whose ragged prefill form is
 * bound as vLLM's MLA prefill does: the new tokens' latent (or K/V) into
 * the paged cache with write_kv, the form over the new tokens' own packed
 * K/V (bottom-right), then over each chunk of the cached context (a context
 * step, ragged_keys = context), merged by LSE with merge_states. The
 * oracle checks the merged output against one causal pass over context and
 * new tokens together. The form's K/V are random, as every input here: an
 * engine would decompress them from the latent.
 */
#ifndef AH_CLI_WORKLOAD_H
#define AH_CLI_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include <attnhost/attnhost.h>

#include "mirror.h"

enum { WL_NONE = 0, WL_CACHELESS = 1, WL_SELF = 2, WL_CROSS = 3 };

typedef struct wl_layer {
    ah_device *dev; /* NULL: not attention, nothing to run */
    int role;       /* WL_* */
    ah_layer_spec spec;
    ah_mirror kcache, vcache;    /* self and cross layers, as the binding's kv_cache_desc
                                    lays them out (an interleaved layout's vcache a view
                                    into kcache's memory); vcache unused for MLA */
    ah_mirror q, k, v, out, lse; /* views of the device's shared buffers */
    ah_mirror sinks, alibi;
    float k_scale, v_scale;  /* FP8 per-tensor scales; under kv_scales = per_head,
                                head h's are 1 + h / 4 times these */
    float q_scale;           /* the query scale of a layer with one, else 0 */
    ah_mirror ksc, vsc, qsc; /* the scale tensors of kv_scales tensor / per_head */
    /* ragged prefill (ABI 2.3): the form's spec and its views */
    int ragged; /* the form is bound and the workload runs it */
    ah_layer_spec rspec;
    ah_mirror rq, rk, rv;       /* q; one pass's packed keys and values */
    ah_mirror rout[3], rlse[3]; /* the running, partial and merged results */
    uint32_t rfinal;            /* which of rout holds the step's output */
    uint64_t rstaged;           /* rk / rv hold the new tokens' pass of ragged
                                   data generation rstaged (0: nothing staged) */
    ah_mirror nosinks;          /* [Hq] of -inf: the context passes' sinks */
} wl_layer;

/* One KV-cache group's paging (vLLM's per-group block table): its own
 * block size, cache size and blocks per request; each step's table and
 * slot mapping. A sliding-window group whose layers' plugins all claim
 * released_blocks releases, at each step, the blocks its window hides from
 * every query of a request (vLLM's SlidingWindowManager): their table
 * entries become -1 from then on. The blocks stay the request's, so the
 * cache is sized as for a group that releases nothing. */
typedef struct wl_group {
    uint32_t block_size;    /* 0: the group has no cache layer */
    uint32_t row;           /* table entries per request */
    uint32_t num_blocks;    /* blocks in each cache of the group's layers */
    uint32_t window;        /* the smallest sliding window of its layers; 0: a
                               layer without one (or a cross layer) */
    int release;            /* releases the blocks its window hides */
    int32_t *blocks;        /* [num_reqs * row]: each request's blocks */
    ah_mirror table, slots; /* the step's: blocks, released entries -1; slots */
    uint64_t released;      /* table entries released so far */
} wl_group;

#define WL_MAX_DEVS 8
/* A device's shared buffers: the paged form's activations, then the
 * ragged form's (q, keys, values, three outputs, three LSEs). */
enum {
    WL_Q,
    WL_K,
    WL_V,
    WL_OUT,
    WL_LSE,
    WL_RQ,
    WL_RK,
    WL_RV,
    WL_ROUT,
    WL_RLSE = WL_ROUT + 3,
    WL_BUFS = WL_RLSE + 3
};
typedef struct wl_arena {
    ah_device *dev;
    ah_mirror m[WL_BUFS];
} wl_arena;

#define WL_NO_PASS INT64_MIN

typedef struct workload {
    ah_binding *b;
    const ah_model *m;
    uint32_t num_layers;
    wl_layer *layers;
    ah_device *meta_dev; /* where the batch metadata lives */
    void *stream;        /* the step's one stream (meta_dev's): plan, writes, forwards and
                            merges of every layer, whichever plugin runs it (plugin.h) */
    ah_limits limits;
    int has_cache;     /* a self or cross layer: batches carry paging */
    int has_cross;     /* a cross layer: batches carry encoder_seq_lens */
    uint32_t n_groups; /* KV-cache groups: 1 + the largest kv_group */
    wl_group *groups;  /* [n_groups] */
    ah_kv_group *kvg;  /* [n_groups]: the batch's entries when n_groups > 1 */
    /* per-request state */
    uint32_t num_reqs;
    uint32_t *context;  /* tokens already in the cache */
    uint32_t *enc_lens; /* encoder tokens per request (cross layers) */
    uint32_t *req_cap;  /* tokens request r's blocks hold */
    /* the current batch */
    ah_batch batch;
    int enc_pass; /* the planned batch is an encoder pass */
    ah_mirror qsl, seqlens, encl;
    wl_arena arenas[WL_MAX_DEVS];
    uint32_t n_arenas;
    /* ragged prefill (ABI 2.3) */
    int ragged_step;    /* wl_plan makes ragged steps (layers with a form run it) */
    uint32_t ctx_chunk; /* context keys per context step; 0: the whole context */
    uint32_t n_ctx;     /* the planned step's context steps */
    uint32_t max_keys;  /* key rows a step may have (the requests' capacities) */
    uint32_t *krow0;    /* request r's first row in rkf / rvf */
    void *rkf, *rvf;    /* host: each request's context then new K/V, the form's */
    ah_mirror cuk;      /* cu_seqlens_k of the pass planned last */
    uint64_t rgen;      /* the ragged data's generation: a new step or fill moves it on */
    int64_t rplanned;   /* the ragged pass the binding is planned for (WL_NO_PASS: none) */
    double *ref;        /* the oracle's output for one layer */
    size_t ref_cap;
    int timing;       /* WL_TIMING: caches on the devices alone, no oracle */
    uint32_t threads; /* oracle threads */
    uint64_t rng;
    char err[1024];
} workload;

/* Bind sel into a workload sized for num_reqs requests of up to max_seq_len
 * tokens (encoder tokens included), max_tokens query tokens per step. */
int wl_create(workload *w, ah_host *h, const ah_model *m, const ah_selection *sel,
              uint32_t num_reqs, uint32_t max_seq_len, uint32_t max_tokens, uint64_t seed);
/* wl_create_sized's flags. WL_RAGGED: set up the layers whose ragged
 * prefill form is bound to run it (the buffers of its steps). WL_TIMING: a
 * workload to time, never checked: the KV caches live on the devices alone,
 * filled there (wl_fill_device), so a bench step of gigabytes of cache costs
 * no host memory and no upload; wl_check_layer refuses it. */
enum { WL_RAGGED = 1, WL_TIMING = 2 };
/* The same where request r's sequences (encoder tokens included) never pass
 * req_max[r] tokens: the cache holds each request's own blocks. flags: WL_*
 * above. mixed: the binding's mixed steps (ah_binding_options.mixed_steps). */
int wl_create_sized(workload *w, ah_host *h, const ah_model *m, const ah_selection *sel,
                    uint32_t num_reqs, uint32_t max_seq_len, uint32_t max_tokens,
                    const uint32_t *req_max, unsigned flags, ah_mixed_steps mixed, uint64_t seed);
/* Ragged prefill in a selection: the number of self layers keep[] marks
 * (NULL: all) with a ragged prefill form, and (when one of them is unbound)
 * *unbound its layer and why[] the reason; -1 in *unbound when every form
 * is bound. */
uint32_t wl_ragged_forms(const ah_selection *sel, const uint8_t *keep, int64_t *unbound, char *why,
                         size_t cap);
void wl_destroy(workload *w);

/* What a workload of these sizes will allocate, in bytes of host memory
 * (device memory too where the plugin's device is the CPU), before any of
 * it is: KV caches with their host mirrors, the shared activations with
 * theirs, the oracle's buffers and the batch. req_max as wl_create_sized
 * (NULL: every request up to max_seq_len). */
typedef struct wl_mem {
    uint64_t kv, act, oracle, other;
} wl_mem;
void wl_estimate(ah_host *h, const ah_selection *sel, uint32_t num_reqs, uint32_t max_seq_len,
                 uint32_t max_tokens, const uint32_t *req_max, int ragged, wl_mem *out);

/* Plan a step where request r gets query_lens[r] new tokens after its
 * context (cacheless layers: its whole sequence); with ragged_step set, a
 * ragged step whose ragged forms run as the top of this file says. With
 * encoder_pass the
 * batch is the encoder pass: request r's query_lens[r] = enc_lens[r]
 * encoder tokens at positions 0.., whose K/V wl_write_cross stores into the
 * cross layers' caches. */
int wl_plan(workload *w, const uint32_t *query_lens, int encoder_pass);
/* Fresh random q/k/v for layer l's tokens of the planned batch. */
int wl_fill(workload *w, uint32_t l);
/* One layer of the planned batch: cacheless layers get their K/V, cross
 * layers none, self layers their new tokens' K/V when store_kv. No wait. */
int wl_forward(workload *w, uint32_t l, int store_kv);
/* Store layer l's (a cross layer's) encoder K/V on the encoder pass, and
 * the same on the host mirror. */
int wl_write_cross(workload *w, uint32_t l);
/* Compare layer l's output with the oracle (after wl_sync): *rel gets the
 * relative L2 error. Mirrors a self layer's K/V write on the host first
 * when store_kv. */
int wl_check_layer(workload *w, uint32_t l, int store_kv, double *rel);

/* Plan a step and fill every layer (as wl_plan + wl_fill). */
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
/* n random values of type t at host: random signs and mantissas,
 * magnitudes in [0.5, 1), never zero; written as bit patterns. Past 16M
 * values the first 16M repeat (copied, so gigabytes of KV cache fill in a
 * second): a kernel reads every address, whatever the values' period. */
void wl_fill_random(uint64_t *rng, void *host, size_t n, ah_dtype t);
/* bytes of random values of type t at p on dev: 8 MiB made on the host,
 * then doubled by copies on the device. On failure writes why into err and
 * returns -1. */
int wl_fill_device(ah_device *dev, void *p, size_t bytes, ah_dtype t, uint64_t *rng, char *err,
                   size_t cap);
/* The role of a selection's layer (WL_NONE for a non-attention layer). */
int wl_role(const ah_selection *sel, uint32_t l);

#endif
