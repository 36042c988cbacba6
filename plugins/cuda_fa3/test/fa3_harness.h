/*
 * Test and benchmark harness for cuda_fa3: loads the plugin .so by path
 * (no host scan), drives it through its ops table only (device memory,
 * copies, streams, timers and graphs included), and builds random paged
 * batches whose host copies the reference oracle reads.
 */
#ifndef FA3_HARNESS_H
#define FA3_HARNESS_H

#include <attnhost/plugin_util.h>
#include <attnhost/reference.h>

typedef struct fa3h {
    void *dl;
    const ah_plugin_descriptor *desc;
    const ah_plugin_ops *ops;
    ah_context *ctx;
    ah_probe_info probe;
    void *stream;
} fa3h;

/* Returns 0 when ready, 77 when no usable device (the reason printed). */
int fa3h_open(fa3h *h, const char *path);
void fa3h_close(fa3h *h);

/* The harness's command-line options, taken out of argv (the rest keep
 * their order); 0, or 1 after printing what was wrong:
 *   --max-splits=N       config key max_splits (1..64; default 64)
 *   --vt-scratch-mib=N   config key fp8_vt_scratch_mib (default 64)
 *   --vt-min-reads=N     config key fp8_vt_min_reads (default 4)
 *   --fp8-attention      the tools' layers allow FP8 math (fp8_attention),
 *                        so an fp8 e4m3 cache at head size 128 runs the
 *                        FP8-compute kernel
 *   --device=N           the context's device_index (default 0)
 * Call before fa3h_open. */
int fa3h_args(int *argc, char **argv);
int fa3h_fp8_attention(void);
/* Whether --vt-min-reads was given. */
int fa3h_vt_min_reads_set(void);

/* A device buffer with its DLTensor (up to 4 dims). */
typedef struct fa3h_tensor {
    DLTensor t;
    int64_t shape[4];
    void *dev;
    size_t bytes;
} fa3h_tensor;

int fa3h_tensor_alloc(fa3h *h, fa3h_tensor *x, ah_dtype dt, int ndim, const int64_t *shape);
void fa3h_tensor_free(fa3h *h, fa3h_tensor *x);
int fa3h_upload(fa3h *h, fa3h_tensor *x, const void *host);
int fa3h_download(fa3h *h, void *host, const fa3h_tensor *x);

/* A batch: requests with query and KV lengths, a page table over a cache
 * of num_blocks blocks (shuffled when paged, consecutive otherwise). */
typedef struct fa3h_batch {
    ah_batch b;
    int32_t *qsl, *seq, *table; /* host */
    int64_t *slots;
    int max_blocks_per_req;
    fa3h_tensor d_qsl, d_seq, d_table, d_slots;
} fa3h_batch;

/* cap_reqs / cap_tokens: room for later rewrites (0: this batch's size). */
int fa3h_batch_make(fa3h *h, fa3h_batch *B, int n, const int *qlen, const int *seqlen, int block_size,
                    int num_blocks, int table_width, int shuffled, unsigned seed, int cap_reqs, int cap_tokens);
/* Rewrite B's device arrays in place with new lengths (same table buffer). */
int fa3h_batch_rewrite(fa3h *h, fa3h_batch *B, int n, const int *qlen, const int *seqlen, int block_size,
                       int num_blocks, int shuffled, unsigned seed);
void fa3h_batch_free(fa3h *h, fa3h_batch *B);

/* Uniform random values in [-a, a] stored as dt. */
void fa3h_fill(void *buf, size_t n, ah_dtype dt, float a, unsigned *seed);

#endif
