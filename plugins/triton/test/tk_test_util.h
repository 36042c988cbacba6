/*
 * Shared by the triton plugin's correctness driver and benchmark: load the
 * plugin .so like the host does (dlopen + entry), minimal host services
 * with a settable [plugin.triton] table (typed getters that parse like the
 * host), device tensors through the
 * plugin's own device slots, and a random paged batch builder.
 */
#ifndef TK_TEST_UTIL_H
#define TK_TEST_UTIL_H

#include <stdint.h>

#include <attnhost/plugin.h>
#include <attnhost/plugin_util.h>

typedef struct tk_plugin {
    void *lib;
    const ah_plugin_descriptor *desc;
    const ah_plugin_ops *ops;
    ah_host_services host;
    ah_hw_facts hw;
    ah_context_options opts;        /* device 0 */
    const char *keys[8], *vals[8]; /* set values; others: the declared default */
    int n_keys;
} tk_plugin;

/* dlopen the plugin; 0 on success, else prints why and returns -1. */
int tk_plugin_open(tk_plugin *p, const char *path);
void tk_plugin_set(tk_plugin *p, const char *key, const char *val);

/* A device tensor owned by the test: descriptor + shape storage. */
typedef struct tk_dev {
    DLTensor t;
    int64_t shape[4];
    size_t bytes;
} tk_dev;

int tk_dev_alloc(const tk_plugin *p, ah_context *c, tk_dev *d, DLDataType dt, int ndim,
                 const int64_t *shape);
void tk_dev_free(const tk_plugin *p, ah_context *c, tk_dev *d);
int tk_upload(const tk_plugin *p, ah_context *c, tk_dev *d, const void *host);
int tk_download(const tk_plugin *p, ah_context *c, void *host, const tk_dev *d);

/* xorshift random numbers */
uint64_t tk_rand(uint64_t *s);
float tk_uniform(uint64_t *s, float lo, float hi);

/* Host image of a batch and its device copies. */
typedef struct tk_batch {
    uint32_t num_reqs, num_tokens, max_q, max_seq, num_blocks, bt_cols, bt_stride;
    int32_t *qsl, *seq_lens, *block_table;
    int64_t *slots;
    tk_dev d_qsl, d_seq, d_bt, d_slots;
    ah_batch b;
} tk_batch;

/* Build a batch with the given query and KV lengths, a shuffled block
 * assignment (extra_blocks unused blocks in the cache), slots for the new
 * tokens (or -1 everywhere when no_slots). Uploads the metadata. */
int tk_batch_make(const tk_plugin *p, ah_context *c, tk_batch *b, uint32_t n, const uint32_t *qlen,
                  const uint32_t *seqlen, uint32_t block_size, uint32_t extra_blocks, int no_slots,
                  uint64_t *rng);
void tk_batch_free(const tk_plugin *p, ah_context *c, tk_batch *b);

#endif
