/*
 * Test and benchmark harness for cuda_flashinfer: loads the built plugin
 * through its entry point the way the host does, gives it minimal host
 * services, and builds random paged-KV workloads (batch, caches, queries) on
 * the host and on the device. fi_check compares the plugin with the
 * reference oracle over these workloads; fi_bench times them.
 */
#ifndef FI_HARNESS_H
#define FI_HARNESS_H

#include <stdint.h>

#include <attnhost/attnhost.h>
#include <attnhost/plugin.h>

typedef struct fi_plugin {
    void *dl;
    const ah_plugin_descriptor *desc;
    const ah_plugin_ops *ops;
    ah_context *ctx;
    ah_probe_info probe;
    void *stream;
} fi_plugin;

/* Load path, probe, open a context and a stream. Returns 0 on success, 77
 * (skip) when the device is unusable, 1 on any other failure (printed). */
int fi_plugin_open(fi_plugin *p, const char *path);
void fi_plugin_close(fi_plugin *p);

/* A device tensor with its own shape storage. */
typedef struct fi_tensor {
    DLTensor t;
    int64_t shape[4];
    size_t bytes;
} fi_tensor;

int fi_tensor_alloc(fi_plugin *p, fi_tensor *t, ah_dtype dt, int ndim, const int64_t *shape);
int fi_tensor_alloc_raw(fi_plugin *p, fi_tensor *t, DLDataType dl, int ndim, const int64_t *shape);
void fi_tensor_free(fi_plugin *p, fi_tensor *t);
int fi_upload(fi_plugin *p, fi_tensor *t, const void *host);
int fi_download(fi_plugin *p, void *host, const fi_tensor *t);

/* One workload: what a test case or benchmark shape describes. */
typedef struct fi_shape {
    ah_dtype q_dtype, kv_dtype;
    uint32_t hq, hk, d, dv, mla, block_size;
    ah_kv_layout layout;
    ah_attn_type attn;
    uint32_t window, alibi, sinks;
    float softcap, k_scale, v_scale;
    uint32_t num_reqs;
    const int32_t *qlens, *seqlens; /* [num_reqs] */
    uint32_t prefix_blocks;         /* shared leading blocks (cascade) */
    uint32_t spare_blocks;          /* extra table width / cache blocks */
    uint32_t ordered_blocks;        /* blocks in allocation order, not shuffled */
    float q_amp;                    /* queries times this, softmax scale over it (0: 1) */
} fi_shape;

/* Host and device copies of a workload. */
typedef struct fi_work {
    ah_layer_spec spec;
    ah_limits lim;
    ah_batch batch;
    uint32_t num_tokens, max_blocks, num_blocks;
    int32_t *qsl, *seq, *bt;
    int64_t *slots;
    void *q, *kc, *vc; /* host */
    float *sinks, *slopes;
    fi_tensor d_qsl, d_seq, d_bt, d_slots, d_q, d_kc, d_vc, d_out, d_lse, d_sinks, d_slopes;
} fi_work;

uint64_t fi_rand_u64(uint64_t *s);
double fi_rand_unit(uint64_t *s); /* [0, 1) */
/* The state k fi_rand_u64 steps after s. */
uint64_t fi_rand_jump(uint64_t s, uint64_t k);
/* n values uniform in [-amp, amp) of dtype dt (FP8: value / scale), the
 * sequence of fi_rand_unit from *rng, which ends n steps on; filled on
 * several threads when n is large, the same bits as one thread's fill. */
void fi_fill_uniform(void *buf, size_t n, ah_dtype dt, float amp, float scale, uint64_t *rng);

/* Build (host + device) a workload; lengths from shape, values from seed. */
int fi_work_build(fi_plugin *p, fi_work *w, const fi_shape *s, uint64_t seed);
/* New lengths/tables/values in place (same counts): for graph replay. The
 * caller has already put new qlens/seqlens in shape. */
int fi_work_refill(fi_plugin *p, fi_work *w, const fi_shape *s, uint64_t seed);
void fi_work_free(fi_plugin *p, fi_work *w);
/* Forward arguments pointing at the workload's tensors. */
ah_forward_args fi_work_args(fi_work *w, const fi_shape *s, void *stream, int want_lse);

#endif
