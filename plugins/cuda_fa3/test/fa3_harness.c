/*
 * See fa3_harness.h. Host memory for the plugin comes from malloc; the
 * plugin's own device slots do all device work, so this harness links no
 * CUDA library and runs (and skips) on machines without one.
 */
#include "fa3_harness.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void h_log(const ah_host_services *host, ah_log_level l, const char *m)
{
    (void)host;
    fprintf(stderr, "[cuda_fa3 %d] %s\n", (int)l, m);
}
static void *h_alloc(const ah_host_services *host, size_t n) { (void)host; return malloc(n); }
static void h_free(const ah_host_services *host, void *p) { (void)host; free(p); }
/* The plugin's config keys as the host would hand them: typed values,
 * the plugin's defaults unless the command line sets them (fa3h_args).
 * fp8_compute stays auto (index 0): the tools choose FP8 math per layer
 * through fp8_attention (--fp8-attention). */
static struct {
    int64_t max_splits, vt_scratch_mib, vt_min_reads;
    int vt_min_reads_set;
    int fp8_attention;
    int32_t device;
    char text[64];
} h_opt = {64, 64, 4, 0, 0, 0, ""};

static int h_key(const char *k, int64_t *v)
{
    if (!strcmp(k, "max_splits")) *v = h_opt.max_splits;
    else if (!strcmp(k, "fp8_compute")) *v = 0;
    else if (!strcmp(k, "fp8_vt_scratch_mib")) *v = h_opt.vt_scratch_mib;
    else if (!strcmp(k, "fp8_vt_min_reads")) *v = h_opt.vt_min_reads;
    else {
        fprintf(stderr, "harness: the plugin asked for an undeclared config key '%s'\n", k);
        return 0;
    }
    return 1;
}
static int64_t h_cfg_int(const ah_host_services *host, const char *k)
{
    (void)host;
    int64_t v = 0;
    return h_key(k, &v) ? v : 0;
}
static double h_cfg_float(const ah_host_services *host, const char *k) { return (double)h_cfg_int(host, k); }
static const char *h_cfg_str(const ah_host_services *host, const char *k)
{
    (void)host;
    int64_t v = 0;
    if (!h_key(k, &v)) return NULL;
    if (!strcmp(k, "fp8_compute")) return "auto";
    snprintf(h_opt.text, sizeof h_opt.text, "%lld", (long long)v);
    return h_opt.text;
}
static ah_hw_facts h_hw = {sizeof(ah_hw_facts), 0, 0, 1, 0, "", "", ""};
static ah_host_services h_svc = {sizeof(ah_host_services), AH_ABI_VERSION, h_log, h_alloc, h_free, h_cfg_int,
                                 h_cfg_float, h_cfg_str, &h_hw, NULL};

static int h_int_opt(const char *arg, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
    const size_t n = strlen(name);
    if (strncmp(arg, name, n) || arg[n] != '=') return 0;
    char *end = NULL;
    const long long v = strtoll(arg + n + 1, &end, 10);
    if (!arg[n + 1] || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: want an integer in %lld..%lld\n", arg, (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 1;
}

int fa3h_args(int *argc, char **argv)
{
    int o = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        int64_t v = 0;
        int r = 0;
        if (!strcmp(a, "--fp8-attention")) {
            h_opt.fp8_attention = 1;
            continue;
        }
        if ((r = h_int_opt(a, "--max-splits", 1, 64, &h_opt.max_splits)) != 0 ||
            (r = h_int_opt(a, "--vt-scratch-mib", 0, 65536, &h_opt.vt_scratch_mib)) != 0) {
            if (r < 0) return 1;
            continue;
        }
        if ((r = h_int_opt(a, "--vt-min-reads", 1, 1 << 20, &h_opt.vt_min_reads)) != 0) {
            if (r < 0) return 1;
            h_opt.vt_min_reads_set = 1;
            continue;
        }
        if ((r = h_int_opt(a, "--device", 0, 1 << 16, &v)) != 0) {
            if (r < 0) return 1;
            h_opt.device = (int32_t)v;
            continue;
        }
        if (!strncmp(a, "--", 2) && a[2]) {
            fprintf(stderr, "unknown option %s\n", a);
            return 1;
        }
        argv[o++] = argv[i];
    }
    *argc = o;
    argv[o] = NULL;
    return 0;
}

int fa3h_fp8_attention(void) { return h_opt.fp8_attention; }
int fa3h_vt_min_reads_set(void) { return h_opt.vt_min_reads_set; }

int fa3h_open(fa3h *h, const char *path)
{
    memset(h, 0, sizeof *h);
    h->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h->dl) {
        fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
        return 1;
    }
    ah_plugin_entry_fn entry = (ah_plugin_entry_fn)dlsym(h->dl, AH_PLUGIN_ENTRY_SYMBOL);
    const char *why = NULL;
    h->desc = entry ? entry(AH_ABI_VERSION, &h_svc, &why) : NULL;
    if (!h->desc) {
        fprintf(stderr, "plugin entry refused: %s\n", why ? why : "no entry symbol");
        return 1;
    }
    h->ops = h->desc->ops;
    h->probe.struct_size = sizeof h->probe;
    if (h->ops->probe(&h_svc, &h->probe) != AH_OK || !h->probe.usable) {
        printf("skipped: %s\n", h->probe.reason);
        return 77;
    }
    printf("device: %s (%s, %u SMs), %s\n", h->probe.device_name, h->probe.arch, h->probe.multiprocessors,
           h->probe.driver_version);
    ah_context_options co = {sizeof co, h_opt.device};
    if (h->ops->context_create(&h_svc, &co, &h->ctx, &why) != AH_OK) {
        fprintf(stderr, "context_create: %s\n", why ? why : "?");
        return 1;
    }
    if (h->ops->stream_create(h->ctx, &h->stream) != AH_OK) {
        fprintf(stderr, "stream_create: %s\n", h->ops->context_error(h->ctx));
        return 1;
    }
    return 0;
}

void fa3h_close(fa3h *h)
{
    if (h->ctx) {
        if (h->stream) h->ops->stream_destroy(h->ctx, h->stream);
        h->ops->context_destroy(h->ctx);
    }
    if (h->dl) dlclose(h->dl);
}

int fa3h_tensor_alloc(fa3h *h, fa3h_tensor *x, ah_dtype dt, int ndim, const int64_t *shape)
{
    memset(x, 0, sizeof *x);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        x->shape[i] = shape[i];
        n *= (size_t)shape[i];
    }
    x->bytes = n * ah_dtype_size(dt);
    if (h->ops->mem_alloc(h->ctx, x->bytes, &x->dev) != AH_OK) {
        fprintf(stderr, "mem_alloc(%zu): %s\n", x->bytes, h->ops->context_error(h->ctx));
        return 1;
    }
    x->t.data = x->dev;
    x->t.device.device_type = kDLCUDA;
    x->t.ndim = ndim;
    x->t.dtype = ah_dtype_to_dl(dt);
    x->t.shape = x->shape;
    return 0;
}

void fa3h_tensor_free(fa3h *h, fa3h_tensor *x)
{
    if (x->dev) h->ops->mem_free(h->ctx, x->dev);
    x->dev = NULL;
}

int fa3h_upload(fa3h *h, fa3h_tensor *x, const void *host)
{
    if (h->ops->mem_copy(h->ctx, x->dev, host, x->bytes, AH_COPY_HOST_TO_DEVICE, h->stream) != AH_OK) {
        fprintf(stderr, "upload: %s\n", h->ops->context_error(h->ctx));
        return 1;
    }
    return 0;
}

int fa3h_download(fa3h *h, void *host, const fa3h_tensor *x)
{
    if (h->ops->mem_copy(h->ctx, host, x->dev, x->bytes, AH_COPY_DEVICE_TO_HOST, h->stream) != AH_OK) {
        fprintf(stderr, "download: %s\n", h->ops->context_error(h->ctx));
        return 1;
    }
    return 0;
}

static unsigned lcg(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

void fa3h_fill(void *buf, size_t n, ah_dtype dt, float a, unsigned *seed)
{
    for (size_t i = 0; i < n; i++) {
        float u = (float)(lcg(seed) & 0xffffff) / 16777216.0f;
        ah_store_f32(buf, i, dt, (2.f * u - 1.f) * a);
    }
}

/* Fill host arrays for lengths; table rows get distinct blocks. */
static int fill_batch(fa3h_batch *B, int n, const int *qlen, const int *seqlen, int bs, int num_blocks,
                      int shuffled, unsigned seed)
{
    int *perm = malloc(sizeof(int) * (size_t)num_blocks);
    if (!perm) return 1;
    for (int i = 0; i < num_blocks; i++) perm[i] = i;
    if (shuffled)
        for (int i = num_blocks - 1; i > 0; i--) {
            int j = (int)(lcg(&seed) % (unsigned)(i + 1)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    int next = 0, T = 0, maxq = 0, maxs = 0;
    B->qsl[0] = 0;
    memset(B->table, 0, sizeof(int32_t) * (size_t)B->d_table.shape[0] * (size_t)B->max_blocks_per_req);
    for (int r = 0; r < n; r++) {
        B->qsl[r + 1] = B->qsl[r] + qlen[r];
        B->seq[r] = seqlen[r];
        int nb = (seqlen[r] + bs - 1) / bs;
        if (nb > B->max_blocks_per_req || next + nb > num_blocks) {
            free(perm);
            fprintf(stderr, "batch does not fit the cache\n");
            return 1;
        }
        for (int k = 0; k < nb; k++) B->table[(size_t)r * B->max_blocks_per_req + k] = perm[next++];
        for (int i = 0; i < qlen[r]; i++) {
            int pos = seqlen[r] - qlen[r] + i;
            B->slots[T + i] = (int64_t)B->table[(size_t)r * B->max_blocks_per_req + pos / bs] * bs + pos % bs;
        }
        T += qlen[r];
        if (qlen[r] > maxq) maxq = qlen[r];
        if (seqlen[r] > maxs) maxs = seqlen[r];
    }
    free(perm);
    memset(&B->b, 0, sizeof B->b);
    B->b.struct_size = sizeof B->b;
    B->b.num_reqs = (uint32_t)n;
    B->b.num_tokens = (uint32_t)T;
    B->b.max_query_len = (uint32_t)maxq;
    B->b.max_seq_len = (uint32_t)maxs;
    B->b.num_blocks = (uint32_t)num_blocks;
    B->b.query_start_loc = &B->d_qsl.t;
    B->b.seq_lens = &B->d_seq.t;
    B->b.block_table = &B->d_table.t;
    B->b.slot_mapping = &B->d_slots.t;
    B->b.query_start_loc_host = B->qsl;
    B->b.seq_lens_host = B->seq;
    B->b.block_table_host = B->table;
    B->b.slot_mapping_host = B->slots;
    B->b.block_table_stride = (uint32_t)B->max_blocks_per_req;
    return 0;
}

static int upload_batch(fa3h *h, fa3h_batch *B)
{
    return fa3h_upload(h, &B->d_qsl, B->qsl) || fa3h_upload(h, &B->d_seq, B->seq) ||
           fa3h_upload(h, &B->d_table, B->table) || fa3h_upload(h, &B->d_slots, B->slots);
}

int fa3h_batch_make(fa3h *h, fa3h_batch *B, int n, const int *qlen, const int *seqlen, int bs, int num_blocks,
                    int table_width, int shuffled, unsigned seed, int cap_reqs, int cap_tokens)
{
    memset(B, 0, sizeof *B);
    int64_t T = 0;
    for (int r = 0; r < n; r++) T += qlen[r];
    const int nr = cap_reqs > n ? cap_reqs : n;
    if (cap_tokens > T) T = cap_tokens;
    B->max_blocks_per_req = table_width;
    int64_t s_qsl = nr + 1, s_seq = nr, s_tab[2] = {nr, table_width}, s_sl = T > 0 ? T : 1;
    B->qsl = calloc((size_t)nr + 1, 4);
    B->seq = calloc((size_t)nr, 4);
    B->table = calloc((size_t)nr * (size_t)table_width, 4);
    B->slots = calloc((size_t)s_sl, 8);
    if (!B->qsl || !B->seq || !B->table || !B->slots) return 1;
    if (fa3h_tensor_alloc(h, &B->d_qsl, AH_DTYPE_FP32, 1, &s_qsl) || fa3h_tensor_alloc(h, &B->d_seq, AH_DTYPE_FP32, 1, &s_seq) ||
        fa3h_tensor_alloc(h, &B->d_table, AH_DTYPE_FP32, 2, s_tab) ||
        fa3h_tensor_alloc(h, &B->d_slots, AH_DTYPE_FP32, 1, &s_sl))
        return 1;
    /* int32 / int64 dtypes over the float allocations above */
    DLDataType i32 = {kDLInt, 32, 1}, i64 = {kDLInt, 64, 1};
    B->d_qsl.t.dtype = B->d_seq.t.dtype = B->d_table.t.dtype = i32;
    B->d_slots.t.dtype = i64;
    if (h->ops->mem_free(h->ctx, B->d_slots.dev), h->ops->mem_alloc(h->ctx, (size_t)s_sl * 8, &B->d_slots.dev) != AH_OK)
        return 1;
    B->d_slots.t.data = B->d_slots.dev;
    B->d_slots.bytes = (size_t)s_sl * 8;
    if (fill_batch(B, n, qlen, seqlen, bs, num_blocks, shuffled, seed)) return 1;
    return upload_batch(h, B);
}

int fa3h_batch_rewrite(fa3h *h, fa3h_batch *B, int n, const int *qlen, const int *seqlen, int bs, int num_blocks,
                       int shuffled, unsigned seed)
{
    int64_t T = 0;
    for (int r = 0; r < n; r++) T += qlen[r];
    if (n > B->d_seq.shape[0] || T > B->d_slots.shape[0]) {
        fprintf(stderr, "rewrite: batch larger than the captured one\n");
        return 1;
    }
    if (fill_batch(B, n, qlen, seqlen, bs, num_blocks, shuffled, seed)) return 1;
    return upload_batch(h, B);
}

void fa3h_batch_free(fa3h *h, fa3h_batch *B)
{
    fa3h_tensor_free(h, &B->d_qsl);
    fa3h_tensor_free(h, &B->d_seq);
    fa3h_tensor_free(h, &B->d_table);
    fa3h_tensor_free(h, &B->d_slots);
    free(B->qsl);
    free(B->seq);
    free(B->table);
    free(B->slots);
}
