/*
 * The runner's shared state for one case: the parsed model, forced
 * selection and binding; device tensors with host mirrors; the batch in
 * both forms. run_case.c builds and checks eager and merge cases,
 * run_graph.c the CUDA-graph ones, on the same pieces.
 */
#ifndef AH_CONFORMANCE_RUNNER_H
#define AH_CONFORMANCE_RUNNER_H

#include "compare.h"
#include "mirror.h"
#include "suite.h"


/* A batch: host arrays, their device copies, and the ah_batch over both. */
typedef struct ah__conf_batch {
    int32_t *qsl, *sl, *bt, *el;
    int64_t *slots, *mip;
    uint8_t *mask;
    int32_t *cuk; /* cu_seqlens_k of a ragged step (ABI 2.3), or NULL */
    ah_mirror d_qsl, d_sl, d_bt, d_slots, d_el, d_mask, d_mip, d_cuk;
    ah_batch b;
} ah__conf_batch;

typedef struct ah__conf_run {
    ah_host *host;
    const ah__conf_case *c;
    const ah_caps *caps;
    ah__conf_rng rng;
    ah_model *model;
    ah_selection *sel;
    ah_binding *bind;
    ah_device *dev;
    ah_layer_spec spec; /* resolved by selection */
    ah_limits lim;
    uint32_t T, stride, num_blocks;
    ah__conf_batch batch;
    ah_mirror q, knew, vnew, kc, vc, out, lse, sinks, alibi;
    void *kc0, *vc0; /* the cache as uploaded, before the plugin's write */
    /* An interleaved layout (ABI 2.3): kc holds the whole [nb, 2, ...]
     * cache and its tensor is the key view; vview is the value view into
     * it, vc stays empty. */
    DLTensor vview;
    int64_t view_strides[4];
    void *vhost;            /* the value cache's first element on the host, or NULL (MLA) */
    float k_scale, v_scale; /* FP8: the per-tensor scales, or head 0's */
    float q_scale;          /* the query scale (use_q_scale), else 0 */
    /* ABI 2.3: the scale tensors of kv_scales TENSOR ([1]) and PER_HEAD
     * ([Hk]), and the query's ([1]); refilled by every ah__conf_fill_inputs */
    ah_mirror ksc, vsc, qsc;
    ah__conf_result *res;
} ah__conf_run;

/* Set res to FAIL or SKIP with a message; returns -1 for `return` chains. */
int ah__conf_fail(ah__conf_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ah__conf_skip(ah__conf_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parse the case's model, select the plugin, resolve the spec for phase.
 * A refusal by the plugin (selection reasons) is a SKIP. */
int ah__conf_bind_prepare(ah__conf_run *r, const char *plugin, ah_phase phase);
/* Create the binding with r->lim and take the device of phase. */
int ah__conf_bind_open(ah__conf_run *r, ah_phase phase);

int ah__conf_tensor_alloc(ah__conf_run *r, ah_mirror *t, ah_dtype dt, int ndim,
                          const int64_t *shape);
int ah__conf_tensor_alloc_dl(ah__conf_run *r, ah_mirror *t, DLDataType d, int ndim,
                             const int64_t *shape);
int ah__conf_upload(ah__conf_run *r, ah_mirror *t);
int ah__conf_download(ah__conf_run *r, ah_mirror *t);

/* Fill a batch for the lengths: a fresh random block assignment, slots for
 * the new tokens (or -1 when with_slots is 0). Arrays sized by r->stride
 * and r->T; device tensors allocated on first use and rewritten in place. */
int ah__conf_batch_fill(ah__conf_run *r, ah__conf_batch *b, const uint32_t *qlen,
                        const uint32_t *slen, int with_slots);
int ah__conf_batch_upload(ah__conf_run *r, ah__conf_batch *b);

/* Random caches (every slot finite), the context K/V written through the
 * oracle's write_kv, new K/V, q, sinks and slopes, for the current batch.
 * context_all: also the new tokens' positions (no plugin write follows). */
int ah__conf_fill_inputs(ah__conf_run *r, int context_all);

/* The per-head scales the oracle takes from scale mirror m: its host
 * values under kv_scales = PER_HEAD, else NULL (the floats serve). */
const float *ah__conf_head_scales(const ah__conf_run *r, const ah_mirror *m);
/* The oracle's K/V write of batch's slots with r's scales, whatever their
 * form. */
ah_status ah__conf_ref_write_kv(const ah__conf_run *r, const ah_batch *batch, const void *key,
                                const void *value, void *key_cache, void *value_cache,
                                ah_error *err);

/* Oracle attention over the host mirrors; compares out (and lse) from the
 * host mirrors; updates res. label prefixes failure messages. */
int ah__conf_check_output(ah__conf_run *r, const void *out_host, const float *lse_host,
                          const char *label);

/* Forward arguments over r's tensors (out_desc serves plugins that fill
 * their own output buffer), output poisoning before a run, and fetching the
 * outputs after one (from wherever the plugin put them). */
void ah__conf_forward_args(ah__conf_run *r, ah_forward_args *a, DLTensor *out_desc, int with_kv);
/* The value cache tensor the plugin gets (the value view of an interleaved
 * layout), NULL for MLA. */
const DLTensor *ah__conf_value_cache(const ah__conf_run *r);
int ah__conf_poison_outputs(ah__conf_run *r);
int ah__conf_fetch_outputs(ah__conf_run *r, const ah_forward_args *a);
ah_phase ah__conf_phase_of(const ah__conf_case *c);

void ah__conf_run_free(ah__conf_run *r);

/* run_ragged.c: a layer's ragged prefill form on a ragged step, against
 * the oracle (and, for ragged_merge, a prefix chunk merged by LSE). */
void ah__conf_run_ragged(ah__conf_run *r, const char *plugin);

/* run_graph.c */
void ah__conf_run_graph(ah__conf_run *r, const char *plugin);
/* run_cp.c: ranks share one device (a local group), or with cp_devices at
 * least the case's world, run on devices 0 .. world - 1 over NCCL. */
void ah__conf_run_cp(ah__conf_run *r, const char *plugin, uint32_t cp_devices);

#endif
