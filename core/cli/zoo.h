/*
 * The zoo: a model's distinct layer specs timed at standard engine steps
 * (decode batches, prefills, a mixed chunked-prefill step with its decodes
 * first), shared by `attnhost bench --model` and `attnhost tune`.
 *
 * Work counted (bench/README.md): per request of c cached and q new
 * tokens, the keys each new token sees (causal: its position + 1, capped
 * by the sliding window; non-causal: c + q) summed; FLOPs = 2 * Hq *
 * (qk + v) * keys; bytes = the KV rows each request reads once (c + q,
 * or the window's last W + q - 1) times Hk * (qk + v) * KV element size
 * (MLA: the one latent row of qk elements), plus q and out.
 */
#ifndef AH_CLI_ZOO_H
#define AH_CLI_ZOO_H

#include <stdint.h>

#include <attnhost/attnhost.h>

typedef struct zoo_step {
    char name[48];                    /* "d64x8192", "p4x2048", "m30x4096+2x512@1024" */
    uint32_t n_dec, dec_ctx;          /* decode requests, first, each on dec_ctx cached tokens */
    uint32_t n_pre, pre_len, pre_ctx; /* then prefill requests: pre_len new on pre_ctx cached */
} zoo_step;

/* "dBxC" (B decodes on C cached), "pBxL[@C]" (B prefills of L new tokens on
 * C cached), "mDxC+PxL[@K]" (D decodes on C, then P chunks of L on K).
 * 0 fine, -1 not a step. */
int zoo_parse_step(const char *text, zoo_step *out);
/* Cap every context and length at max_ctx and every count at max_batch
 * (0: no cap); the name follows. */
void zoo_clamp(zoo_step *s, uint32_t max_ctx, uint32_t max_batch);
/* The zoo's steps (bench --model): decode B1/B16/B64/B256 on 4k..32k,
 * prefill 1x8k and 4x2k, one mixed step; quick: a subset. */
uint32_t zoo_standard_steps(int quick, zoo_step *out, uint32_t cap);
/* tune's steps for one phase (a few, so tune takes minutes on a GPU). */
uint32_t zoo_tune_steps(ah_phase phase, int quick, zoo_step *out, uint32_t cap);
/* tune's mixed step (the zoo's): timed split and whole. 0 fine. */
int zoo_tune_mixed_step(zoo_step *out);

/* The model's distinct attention layer specs (a layer's ragged prefill
 * form counts as part of its spec): first[i] is a layer with spec i,
 * count[i] how many layers share it. Returns how many (<= cap). */
uint32_t zoo_distinct_specs(const ah_model *m, uint32_t *first, uint32_t *count, uint32_t cap);
/* A one-layer model of m's layer l: its spec and its ragged prefill form. */
ah_model *zoo_one_layer(const ah_model *m, uint32_t l, ah_error *err);
/* "28/4 d128 bf16 w4096 cap50 sinks hnd": a spec in a few words (the
 * layout when it is not nhd). */
void zoo_spec_label(const ah_layer_spec *s, char *buf, size_t cap);
/* The label of m's layer l: its spec's, then its ragged prefill form's
 * heads and sizes ("128/1 d576/512 bf16 mla, ragged 128/128 d192/128"). */
void zoo_layer_label(const ah_model *m, uint32_t l, char *buf, size_t cap);

typedef struct zoo_timing {
    double ms, tflops, gbs;
    ah_device_kind kind; /* the device the step ran on (the prefill winner's) */
    int ragged;          /* the step ran the layer's ragged prefill form */
    const char *mixed;   /* a mixed step: "split" between the decode and prefill winners or
                            "whole" on one plugin; NULL for other steps */
} zoo_timing;

/* Whether step runs a layer's ragged prefill form where the selection
 * binds one: prefill requests without cached context, no decodes (with
 * context, each forward would gather every context pass's keys on the
 * host again). */
int zoo_step_ragged(const zoo_step *step);
/* The plugins that serve the ragged prefill form of the one-layer model
 * m1 beside the default paged forms (ah_host_select_ragged), among those
 * available here (only: that one): each one's selection in sels and info
 * in infos, up to cap. Returns how many; the caller destroys them. */
uint32_t zoo_ragged_candidates(ah_host *h, const ah_model *m1, const char *only,
                               ah_selection **sels, const ah_plugin_info **infos, uint32_t cap);

/* Time step through sel (a selection of the one-layer model m), bound with
 * mixed (ah_binding_options.mixed_steps): median of iters timings of b2b
 * forwards each. 0 fine; -1 with why in err.
 * bw_gbs (may be NULL): when it holds 0, the bandwidth ceiling of the
 * step's device is measured into it (cpu_read_gbs or device_copy_gbs).
 * ragged: a prefill step of a layer whose ragged prefill form sel binds
 * runs that form, as the engine would (a ragged step; FLOPs and bytes
 * then count the form's heads and sizes). */
int zoo_time(ah_host *h, const ah_model *m, const ah_selection *sel, const zoo_step *step,
             ah_mixed_steps mixed, int iters, int b2b, int ragged, zoo_timing *out, double *bw_gbs,
             char *err, size_t cap);

/* The FLOPs and bytes of step on a resolved spec. */
void zoo_work(const ah_layer_spec *s, const zoo_step *step, double *flops, double *bytes);

#endif
