/*
 * attnhost test helpers (ath_): what the plugins' own test and benchmark
 * drivers share. A plugin under test is loaded the way the host loads it and
 * gets the host's real services (core/src/services.c: logging, allocator,
 * typed [plugin.<name>] getters answering from INI text through the host's
 * own parser, the host's CPU facts), not a stand-in. Around it: one
 * deterministic RNG (xorshift64, with a jump-ahead so large fills run on
 * several threads bit for bit as one thread would), tensors on the plugin's
 * device (through its own memory slots) or over host memory, paged batches
 * and whole workloads (layer spec, limits, batch, Q, caches, new K/V, sinks,
 * ALiBi slopes), ragged steps (K/V packed by cu_seqlens_k), and comparison
 * with the double-precision oracle (attnhost/reference.h). Checks and reports: tests/unit/check.h.
 *
 * Linked as the static library attnhost_test_helpers (with attnhost_static).
 */
#ifndef ATTNHOST_TEST_HELPERS_H
#define ATTNHOST_TEST_HELPERS_H

#include <stddef.h>
#include <stdint.h>

#include <attnhost/plugin.h>
#include <attnhost/plugin_util.h>
#include <attnhost/reference.h>

/* ---- the plugin under test, with the host's services ------------------------ */

struct ah_config;

typedef struct ath_host {
    void *dl;
    const ah_plugin_descriptor *desc;
    const ah_plugin_ops *ops;
    ah_host_services svc; /* the host's own services, bound to this plugin */
    void *svc_data;
    ah_hw_facts hw; /* the host's facts (ah__hw_facts_gather) */
    struct ah_config *config;
    char name[64];
    struct {
        char key[64], val[192];
    } set[16]; /* [plugin.<name>] keys set by the driver */
    int n_set;
    ah_probe_info probe;
    ah_context *ctx; /* ath_context's, or one the driver created */
    void *stream;    /* ath_context's (NULL: the default stream) */
} ath_host;

/* dlopen the plugin, give its entry the host's services, validate its
 * descriptor as the host does and bind the services to its name and keys.
 * 0, or -1 with the reason printed and nothing held (h is cleared). */
int ath_load(ath_host *h, const char *path);
/* Set [plugin.<name>] key = val (replacing an earlier value), checked
 * against the plugin's declaration with the host's parser: an undeclared key
 * or a value the host would refuse is -1 with the reason printed. "key=val"
 * in one string: ath_set_kv. The getters answer the new value at once. */
int ath_set(ath_host *h, const char *key, const char *val);
int ath_set_kv(ath_host *h, const char *key_eq_val);
/* Probe into h->probe: 0 usable; 77 after printing "skipped: <reason>";
 * 1 when the probe call fails. */
int ath_probe(ath_host *h);
/* ath_load + ath_probe, then "device: name (arch, N SMs), driver" on
 * stdout: 0, 77 (skip) or 1; on 77 or 1, h holds nothing. */
int ath_start(ath_host *h, const char *path);
/* Open h->ctx on device index `device`, and h->stream when with_stream:
 * 0, or 1 with the reason printed. */
int ath_context(ath_host *h, int32_t device, int with_stream);
/* ath_load + ath_probe + ath_context(device, with a stream): 0, 77 (skip)
 * or 1; on 77 or 1, h holds nothing. */
int ath_open(ath_host *h, const char *path, int32_t device);
/* Stream, context, library, services: whatever h holds. */
void ath_close(ath_host *h);

/* Command-line options that set [plugin.<name>] keys ("--max-splits=N" for
 * max_splits; key NULL: a flag without a value) and --device=N, taken out of
 * argv (the rest keep their order). Any other "--" option is an error: 1
 * after printing it; else 0. ath_apply sets the keys (after ath_load),
 * checked as ath_set checks them: 0 or -1. */
typedef struct ath_opt {
    const char *name, *key;
} ath_opt;
typedef struct ath_args {
    const char *keys[16], *vals[16];
    int n;
    uint32_t given; /* bit k: opts[k] was on the command line */
    int32_t device; /* --device=N (0) */
} ath_args;
int ath_take_options(int *argc, char **argv, const ath_opt *opts, int n_opts, ath_args *out);
int ath_apply(ath_host *h, const ath_args *a);
/* A driver's own options, "--name VALUE": the value when argv[*i] is name
 * and a value follows (*i moves onto it), else NULL. */
const char *ath_arg_value(int argc, char **argv, int *i, const char *name);
/* "usage: prog synopsis" on stderr; returns 2, the exit status for it. */
int ath_usage(const char *prog, const char *synopsis);

/* ---- deterministic random numbers (xorshift64) ------------------------------ */

uint64_t ath_rand_u64(uint64_t *s);
double ath_rand_unit(uint64_t *s);                        /* [0, 1), 53 bits */
double ath_rand_range(uint64_t *s, double lo, double hi); /* [lo, hi) */
/* The state k ath_rand_u64 steps after s. */
uint64_t ath_rand_jump(uint64_t s, uint64_t k);
/* A seed's starting state (never 0). */
uint64_t ath_seed(uint64_t seed);
/* n values uniform in [-amp, amp) stored as dt (FP8: value / scale), the
 * sequence of ath_rand_unit from *rng, which ends n steps on; large fills
 * run on several threads, the same bits as one thread's. */
void ath_fill_uniform(void *buf, size_t n, ah_dtype dt, float amp, float scale, uint64_t *rng);

/* ---- tensors ---------------------------------------------------------------- */

typedef struct ath_tensor {
    DLTensor t;
    int64_t shape[4];
    size_t bytes;
    int owned; /* device memory of h->ctx to free */
} ath_tensor;

/* Device memory of h->ctx (the plugin's mem_alloc), tagged with the DLPack device
 * type the host gives the plugin's device kind; 0 or 1 (printed). */
int ath_tensor_alloc(ath_host *h, ath_tensor *t, DLDataType dt, int ndim, const int64_t *shape);
int ath_tensor_new(ath_host *h, ath_tensor *t, ah_dtype dt, int ndim, const int64_t *shape);
/* A CPU tensor over host memory (nothing to free). */
void ath_tensor_host(ath_tensor *t, void *data, DLDataType dt, int ndim, const int64_t *shape);
void ath_tensor_free(ath_host *h, ath_tensor *t);
/* Copies on h->stream; 0 or 1 (printed). */
int ath_upload(ath_host *h, ath_tensor *t, const void *host);
int ath_download(ath_host *h, void *host, const ath_tensor *t);
/* Element count of a tensor. */
size_t ath_tensor_elems(const ath_tensor *t);

extern const DLDataType ath_i32, ath_i64, ath_f32;

/* ---- paged batches ---------------------------------------------------------- */

typedef struct ath_batch_spec {
    uint32_t num_reqs;
    const int32_t *qlens, *seqlens;
    uint32_t block_size;
    uint32_t table_width; /* 0: the longest request's blocks + table_pad */
    uint32_t table_pad;
    uint32_t num_blocks; /* 0: the blocks the requests use + extra_blocks */
    uint32_t extra_blocks;
    uint32_t min_blocks;           /* at least this many (a replay over a captured batch's cache) */
    uint32_t prefix_blocks;        /* leading blocks shared by every request (cascade) */
    int ordered;                   /* blocks in pool order, not shuffled */
    int no_slots;                  /* every slot -1 (cross attention: no new keys) */
    int32_t unused_entry;          /* table entries past a request's blocks */
    uint32_t cap_reqs, cap_tokens; /* room for ath_batch_refill (0: this batch) */
} ath_batch_spec;

typedef struct ath_batch {
    ah_batch b;
    uint32_t num_reqs, num_tokens, max_q, max_seq, num_blocks, width, cap_reqs, cap_tokens;
    int32_t *qsl, *seq, *bt; /* host copies */
    int64_t *slots;
    ath_tensor d_qsl, d_seq, d_bt, d_slots; /* on h's device, or over the host copies */
} ath_batch;

/* Host copies (blocks shuffled from *rng unless ordered) and, with h, device
 * copies; h NULL: the batch's tensors are CPU views of the host copies.
 * 0, or 1 (printed) when out of memory or the requests do not fit. */
int ath_batch_build(ath_host *h, ath_batch *B, const ath_batch_spec *s, uint64_t *rng);
/* New requests and lengths into B's arrays (same width, pool and capacity). */
int ath_batch_refill(ath_host *h, ath_batch *B, const ath_batch_spec *s, uint64_t *rng);
void ath_batch_free(ath_host *h, ath_batch *B);

/* ---- workloads: a layer, a batch and its data ------------------------------- */

typedef struct ath_shape {
    ah_attn_type attn;
    uint32_t causal; /* ah_causal (ABI 2.1) */
    ah_dtype q_dtype, kv_dtype;
    uint32_t hq, hk, d, dv; /* dv 0: d */
    uint32_t mla;
    ah_kv_layout layout;
    uint32_t window, alibi, sinks, fp8_attention;
    float softcap, k_scale, v_scale; /* scales 0: 1 (FP8 caches hold value / scale) */
    float scale;                     /* 0: 1 / sqrt(d) / q_amp */
    float q_amp, kv_amp, new_amp;    /* value ranges (0: 1); q_amp also divides the scale */
    int new_kv;                      /* new K/V rows [T, Hk, d|dv] for write_kv */
    uint32_t min_rows;               /* q/out/lse/new-K/V tensors hold at least this many tokens */
    ath_batch_spec batch;            /* requests, lengths, block size, table and pool */
} ath_shape;

/* A layer of hq query and hk KV heads of head size d (qk and v), q and KV
 * cache in one dtype dt, block size bs, NHD, the default scale: what the
 * bench drivers time; they change what differs. */
ah_layer_spec ath_spec(ah_attn_type attn, uint32_t hq, uint32_t hk, uint32_t d, ah_dtype dt,
                       uint32_t bs);

typedef struct ath_work {
    ath_shape s;
    ah_layer_spec spec;
    ah_limits lim;
    ath_batch B;
    uint32_t rows;                   /* tokens the per-token tensors hold */
    void *q, *kc, *vc, *knew, *vnew; /* host data (vc, vnew NULL for MLA) */
    float *sinks, *slopes;
    size_t kc_elems, vc_elems;
    ath_tensor d_q, d_kc, d_vc, d_k, d_v, d_out, d_lse, d_sinks, d_slopes;
    void *out_host; /* h NULL: the output and LSE buffers d_out, d_lse view */
    float *lse_host;
} ath_work;

/* Build shape s: spec, limits, batch, random values (the layout first, then
 * q, key cache, value cache, new K, new V from *rng; sinks in [-1, 3); ALiBi
 * slopes 2^(-8 (h+1) / Hq)) and, with h, device copies. 0 or 1 (printed). */
int ath_work_build(ath_host *h, ath_work *w, const ath_shape *s, uint64_t *rng);
/* New lengths (s->batch) and new values in place, for a graph replay. */
int ath_work_refill(ath_host *h, ath_work *w, const ath_shape *s, uint64_t *rng);
/* Upload the host data again (after the driver changed it). */
int ath_work_upload(ath_host *h, ath_work *w);
void ath_work_free(ath_host *h, ath_work *w);
ah_forward_args ath_work_args(ath_work *w, void *stream, int want_lse);
/* Forward arguments over the driver's own tensors (lse may be NULL). */
ah_forward_args ath_forward_args(const DLTensor *q, const DLTensor *key_cache,
                                 const DLTensor *value_cache, DLTensor *out, DLTensor *lse,
                                 void *stream);
ah_kv_write_args ath_work_write_args(ath_work *w, void *stream);
/* The oracle over w's host data: out [T, Hq, dv], lse [T, Hq] (may be
 * NULL); 0, or -1 with the oracle's message in why. */
int ath_work_reference(const ath_work *w, double *out, double *lse, char *why, size_t cap);
/* The oracle's write_kv of w's new K/V into w's host caches; 0 or -1. */
int ath_work_reference_write(ath_work *w, char *why, size_t cap);

/* ---- comparison with the oracle --------------------------------------------- */

typedef struct ath_cmp {
    size_t n;
    double max_abs;   /* max |got - ref| (NaN or a missed -inf: INFINITY) */
    double max_rel1;  /* max |got - ref| / (1 + |ref|) */
    double rel_l2;    /* ||got - ref|| / ||ref|| over finite pairs */
    double max_ref;   /* max |ref| over finite refs */
    size_t worst_at;  /* index of max_rel1 */
    size_t over;      /* elements with |got - ref| > atol + rtol |ref| (or non-finite) */
    size_t nonfinite; /* got NaN/inf where ref is finite, or ref -inf and got not */
    size_t first_over;
} ath_cmp;

/* got: n values of dtype dt (FP32 for LSE); ref: the oracle's. A -inf ref
 * (an empty row's LSE) matches only -inf. */
ath_cmp ath_compare(const void *got, ah_dtype dt, const double *ref, size_t n, double atol,
                    double rtol);
/* Bytes that differ between a and b. */
size_t ath_bytes_differ(const void *a, const void *b, size_t n);

/* ---- merge_states ----------------------------------------------------------- */

typedef struct ath_merge_spec {
    ah_dtype dt;
    uint32_t T, H, D;
    float amp;                    /* values in [-amp, amp); LSEs in [-5, 5) */
    uint32_t empty_a, empty_a_at; /* LSE row i of a is -inf when i % empty_a == empty_a_at */
    uint32_t empty_b, empty_b_at;
    int out_in_a;  /* out aliases v_a */
    int nan_empty; /* an empty part's rows hold NaN on the device (the oracle
                      gets the random values): a merge that reads a part of
                      LSE -inf instead of passing the other through fails */
} ath_merge_spec;

/* Random partial states through the plugin's merge_states on h's device,
 * against ah_reference_merge_states: 0 with the comparisons of the merged
 * values and LSEs, or -1 with the reason. */
int ath_merge_run(ath_host *h, const ath_merge_spec *m, uint64_t *rng, ath_cmp *out, ath_cmp *lse,
                  char *why, size_t cap);

/* ---- ragged layers ---------------------------------------------------------- */
/* A ragged step (ABI 2.3): K/V packed by cu_seqlens_k, no cache. */
typedef struct ath_ragged_spec {
    ah_dtype dt; /* q, key, value and out */
    uint32_t hq, hk, dqk, dv;
    int causal, context; /* context: ragged_keys = context (queries after every key) */
    uint32_t window;
    float softcap;
    int sinks, alibi;
    uint32_t reqs, max_len; /* 1 to 64 requests; queries and extra keys 1 .. max_len each */
} ath_ragged_spec;
/* A driver's named ragged case. */
typedef struct ath_ragged_case {
    const char *name;
    ath_ragged_spec s;
} ath_ragged_case;
/* Random lengths (bottom-right: k_len >= q_len, one request with fewer
 * keys than queries on a bidirectional layer; context steps: request 0
 * without keys) and values; state_create, plan and forward on h's context
 * (outputs poisoned first), against the oracle: 0 with the comparisons of
 * out and LSE (ath_compare's bounds from tol: out's atol and rtol, the
 * LSE's atol; NULL: 0), or -1 with the reason (the plugin's message for a
 * refusal). */
int ath_ragged_run(ath_host *h, const ath_ragged_spec *s, const double tol[3], uint64_t *rng,
                   ath_cmp *out, ath_cmp *lse, char *why, size_t cap);
/* ---- timing ----------------------------------------------------------------- */

/* Ascending sorts; medians (sorting v; the mean of the middle two for even
 * n; v[n / 2] after a sort is the upper median). */
void ath_sort_f(float *v, int n);
void ath_sort_d(double *v, int n);
double ath_median_f(float *v, int n);
double ath_median_d(double *v, int n);

#endif
