/*
 * Helpers of the triton plugin's test and benchmark programs (see
 * tk_test_util.h). The programs talk to the plugin through its ABI only,
 * exactly as the host would.
 */
#include "tk_test_util.h"

#include "plugin_keys.h" /* the host's parser: the drivers link attnhost_static */

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void svc_log(const ah_host_services *h, ah_log_level lvl, const char *msg)
{
    (void)h;
    if (lvl <= AH_LOG_WARN) fprintf(stderr, "[triton] %s\n", msg);
}
static void *svc_alloc(const ah_host_services *h, size_t n) { (void)h; return malloc(n); }
static void svc_free(const ah_host_services *h, void *ptr) { (void)h; free(ptr); }
/* The driver's value of key, else the declared default, parsed by the
 * host's own parser (plugin_keys.c): a driver setting a value the host
 * would refuse fails here as it would there. NULL for an undeclared key,
 * a wrong getter or a refused value, with a message. */
static const ah_config_key *svc_key(const ah_host_services *h, const char *key, unsigned types,
                                    ah_plugin_value *v, const char **text)
{
    const tk_plugin *p = h->host_data;
    const ah_caps *c = p->desc ? p->desc->caps : NULL;
    const ah_config_key *k = c ? ah__plugin_key_find(c->config_keys, c->n_config_keys, key) : NULL;
    if (!k) {
        fprintf(stderr, "[triton] asked for undeclared config key '%s'\n", key);
        return NULL;
    }
    if (!(types & (1u << k->type))) {
        fprintf(stderr, "[triton] config key '%s' (%s) read with the wrong getter\n", key,
                ah__plugin_key_type_str(k->type));
        return NULL;
    }
    *text = k->default_value;
    for (int i = 0; i < p->n_keys; i++)
        if (strcmp(p->keys[i], key) == 0) *text = p->vals[i];
    char msg[256];
    if (ah__plugin_key_parse(k, *text, v, msg, sizeof msg) != 0) {
        fprintf(stderr, "[plugin.triton] %s: %s\n", key, msg);
        return NULL;
    }
    return k;
}
#define TYPES_INT (1u << AH_KEY_BOOL | 1u << AH_KEY_INT | 1u << AH_KEY_ENUM)
#define TYPES_FLOAT (1u << AH_KEY_INT | 1u << AH_KEY_FLOAT)
#define TYPES_ANY ((1u << AH_KEY_TYPE_COUNT) - 1)
static int64_t svc_config_int(const ah_host_services *h, const char *key)
{
    ah_plugin_value v;
    const char *t;
    return svc_key(h, key, TYPES_INT, &v, &t) ? v.i : 0;
}
static double svc_config_float(const ah_host_services *h, const char *key)
{
    ah_plugin_value v;
    const char *t;
    return svc_key(h, key, TYPES_FLOAT, &v, &t) ? v.f : 0;
}
static const char *svc_config_str(const ah_host_services *h, const char *key)
{
    ah_plugin_value v;
    const char *t;
    return svc_key(h, key, TYPES_ANY, &v, &t) ? t : NULL;
}

void tk_plugin_set(tk_plugin *p, const char *key, const char *val)
{
    for (int i = 0; i < p->n_keys; i++)
        if (strcmp(p->keys[i], key) == 0) {
            p->vals[i] = val;
            return;
        }
    if (p->n_keys < 8) {
        p->keys[p->n_keys] = key;
        p->vals[p->n_keys++] = val;
    }
}

int tk_plugin_open(tk_plugin *p, const char *path)
{
    memset(p, 0, sizeof *p);
    p->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!p->lib) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return -1;
    }
    ah_plugin_entry_fn entry;
    *(void **)&entry = dlsym(p->lib, AH_PLUGIN_ENTRY_SYMBOL);
    if (!entry) {
        fprintf(stderr, "%s: no %s\n", path, AH_PLUGIN_ENTRY_SYMBOL);
        return -1;
    }
    p->hw.struct_size = sizeof p->hw;
    p->opts = (ah_context_options){sizeof(ah_context_options), 0};
    p->host = (ah_host_services){sizeof(ah_host_services), AH_ABI_VERSION, svc_log, svc_alloc,
                                 svc_free, svc_config_int, svc_config_float, svc_config_str,
                                 &p->hw, p};
    const char *why = NULL;
    p->desc = entry(AH_ABI_VERSION, &p->host, &why);
    if (!p->desc) {
        fprintf(stderr, "%s refused the host: %s\n", path, why ? why : "?");
        return -1;
    }
    p->ops = p->desc->ops;
    return 0;
}

int tk_dev_alloc(const tk_plugin *p, ah_context *c, tk_dev *d, DLDataType dt, int ndim,
                 const int64_t *shape)
{
    memset(d, 0, sizeof *d);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        d->shape[i] = shape[i];
        n *= (size_t)shape[i];
    }
    d->bytes = n * (dt.bits / 8);
    void *ptr = NULL;
    if (p->ops->mem_alloc(c, d->bytes ? d->bytes : 16, &ptr) != AH_OK) {
        fprintf(stderr, "mem_alloc(%zu): %s\n", d->bytes, p->ops->context_error(c));
        return -1;
    }
    d->t.data = ptr;
    d->t.device = (DLDevice){kDLCUDA, 0};
    d->t.ndim = ndim;
    d->t.dtype = dt;
    d->t.shape = d->shape;
    return 0;
}

void tk_dev_free(const tk_plugin *p, ah_context *c, tk_dev *d)
{
    if (d->t.data) p->ops->mem_free(c, d->t.data);
    d->t.data = NULL;
}

int tk_upload(const tk_plugin *p, ah_context *c, tk_dev *d, const void *host)
{
    if (p->ops->mem_copy(c, d->t.data, host, d->bytes, AH_COPY_HOST_TO_DEVICE, NULL) != AH_OK) {
        fprintf(stderr, "upload: %s\n", p->ops->context_error(c));
        return -1;
    }
    return 0;
}

int tk_download(const tk_plugin *p, ah_context *c, void *host, const tk_dev *d)
{
    if (p->ops->mem_copy(c, host, d->t.data, d->bytes, AH_COPY_DEVICE_TO_HOST, NULL) != AH_OK) {
        fprintf(stderr, "download: %s\n", p->ops->context_error(c));
        return -1;
    }
    return 0;
}

uint64_t tk_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

float tk_uniform(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (float)((tk_rand(s) >> 40) * (1.0 / 16777216.0));
}

int tk_batch_make(const tk_plugin *p, ah_context *c, tk_batch *b, uint32_t n, const uint32_t *qlen,
                  const uint32_t *seqlen, uint32_t bs, uint32_t extra_blocks, int no_slots,
                  uint64_t *rng)
{
    memset(b, 0, sizeof *b);
    b->num_reqs = n;
    uint32_t total_blocks = 0, max_cols = 1;
    for (uint32_t r = 0; r < n; r++) {
        uint32_t nb = (seqlen[r] + bs - 1) / bs;
        total_blocks += nb;
        if (nb > max_cols) max_cols = nb;
        b->num_tokens += qlen[r];
        if (qlen[r] > b->max_q) b->max_q = qlen[r];
        if (seqlen[r] > b->max_seq) b->max_seq = seqlen[r];
    }
    b->num_blocks = total_blocks + extra_blocks;
    b->bt_cols = max_cols;
    b->bt_stride = max_cols + 3; /* a pitched table, as engines pad them */
    b->qsl = calloc(n + 1, 4);
    b->seq_lens = calloc(n, 4);
    b->block_table = calloc((size_t)n * b->bt_stride, 4);
    b->slots = calloc(b->num_tokens ? b->num_tokens : 1, 8);
    uint32_t *perm = calloc(b->num_blocks, 4);
    if (!b->qsl || !b->seq_lens || !b->block_table || !b->slots || !perm) return -1;
    for (uint32_t i = 0; i < b->num_blocks; i++) perm[i] = i;
    for (uint32_t i = b->num_blocks; i > 1; i--) {
        uint32_t j = (uint32_t)(tk_rand(rng) % i), t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    uint32_t next = 0;
    for (uint32_t r = 0; r < n; r++) {
        b->qsl[r + 1] = b->qsl[r] + (int32_t)qlen[r];
        b->seq_lens[r] = (int32_t)seqlen[r];
        int32_t *row = b->block_table + (size_t)r * b->bt_stride;
        uint32_t nb = (seqlen[r] + bs - 1) / bs;
        for (uint32_t j = 0; j < b->bt_stride; j++)
            row[j] = j < nb ? (int32_t)perm[next + j] : 0x3fffffff; /* unused: would fault */
        next += nb;
        for (uint32_t i = 0; i < qlen[r]; i++) {
            int64_t pos = (int64_t)seqlen[r] - qlen[r] + i;
            b->slots[b->qsl[r] + i] =
                no_slots || pos < 0 ? -1 : (int64_t)row[pos / bs] * bs + pos % bs;
        }
    }
    free(perm);
    DLDataType i32 = {kDLInt, 32, 1}, i64 = {kDLInt, 64, 1};
    int64_t s_qsl = n + 1, s_seq = n, s_bt[2] = {n, b->bt_stride},
            s_slots = b->num_tokens ? b->num_tokens : 1;
    if (tk_dev_alloc(p, c, &b->d_qsl, i32, 1, &s_qsl) || tk_upload(p, c, &b->d_qsl, b->qsl) ||
        tk_dev_alloc(p, c, &b->d_seq, i32, 1, &s_seq) || tk_upload(p, c, &b->d_seq, b->seq_lens) ||
        tk_dev_alloc(p, c, &b->d_bt, i32, 2, s_bt) || tk_upload(p, c, &b->d_bt, b->block_table) ||
        tk_dev_alloc(p, c, &b->d_slots, i64, 1, &s_slots) || tk_upload(p, c, &b->d_slots, b->slots))
        return -1;
    b->b = (ah_batch){.struct_size = sizeof(ah_batch),
                      .num_reqs = n,
                      .num_tokens = b->num_tokens,
                      .max_query_len = b->max_q,
                      .max_seq_len = b->max_seq,
                      .num_blocks = b->num_blocks,
                      .query_start_loc = &b->d_qsl.t,
                      .seq_lens = &b->d_seq.t,
                      .block_table = &b->d_bt.t,
                      .slot_mapping = &b->d_slots.t,
                      .query_start_loc_host = b->qsl,
                      .seq_lens_host = b->seq_lens,
                      .block_table_host = b->block_table,
                      .slot_mapping_host = b->slots,
                      .block_table_stride = b->bt_stride};
    return 0;
}

void tk_batch_free(const tk_plugin *p, ah_context *c, tk_batch *b)
{
    tk_dev_free(p, c, &b->d_qsl);
    tk_dev_free(p, c, &b->d_seq);
    tk_dev_free(p, c, &b->d_bt);
    tk_dev_free(p, c, &b->d_slots);
    free(b->qsl);
    free(b->seq_lens);
    free(b->block_table);
    free(b->slots);
}
