/*
 * conf_mutant: a plain, correct fp32 CPU backend into which its config key
 * `bug` plants one defect of the kind real kernels have. test_mutants runs
 * the conformance suite against each defect and expects a failure, so the
 * suite is shown to catch them (and to pass the plugin with bug = none).
 *
 *   none          correct
 *   skip_head     the last query head's output is never written
 *   window        the sliding window lets one key too many through
 *   gqa           query head h reads KV head h % Hk instead of h / (Hq/Hk)
 *   stray_write   write_kv also writes the slot after each new token's
 *   drop_write    write_kv skips the last new token
 *   nan           one output element is NaN
 *   lse           the LSE is off by 0.01
 *   stale_replay  plan(REPLAY) keeps the captured batch instead of the new one
 *
 * It also emulates CUDA graphs on the CPU (graph level ALWAYS): capture
 * records the forward calls made between graph_begin and graph_end,
 * launch replays them. That is what a device graph is to a kernel: the
 * same launches with the same pointers, reading whatever plan(REPLAY)
 * wrote into the state's buffers.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>

enum bug { BUG_NONE, BUG_SKIP_HEAD, BUG_WINDOW, BUG_GQA, BUG_STRAY, BUG_DROP, BUG_NAN, BUG_LSE, BUG_STALE };
static const char *const bug_names[] = {"none",       "skip_head", "window", "gqa",         "stray_write",
                                        "drop_write", "nan",       "lse",    "stale_replay"};

#define MAX_RECORDED 8

/* A recorded forward call. */
typedef struct recorded {
    ah_state *st;
    ah_forward_args a;
} recorded;

struct ah_graph {
    recorded calls[MAX_RECORDED];
    int n;
};

struct ah_context {
    ah_errbuf err;
    const ah_host_services *host;
    enum bug bug;
    int capturing;
    struct ah_graph pending;
};

struct ah_state {
    ah_errbuf err;
    struct ah_context *ctx;
    ah_layer_spec spec;
    ah_limits lim;
    ah_batch b;          /* host arrays copied below */
    int32_t *qsl, *sl, *bt;
    int64_t *slots;
};

static ah_status probe(const ah_host_services *host, ah_probe_info *info)
{
    info->usable = 1;
    ah_strlcpy(info->device_name, "host CPU (conformance mutant)", sizeof info->device_name);
    return AH_OK;
}

static ah_status ctx_create(const ah_host_services *host, ah_context **out, const char **why)
{
    struct ah_context *c = host->alloc(host, sizeof *c);
    *out = NULL;
    if (!c) {
        *why = "out of memory";
        return AH_ERR_OUT_OF_MEMORY;
    }
    memset(c, 0, sizeof *c);
    c->host = host;
    const char *b = host->config_get ? host->config_get(host, "bug") : NULL;
    for (int i = 0; b && i < (int)(sizeof bug_names / sizeof bug_names[0]); i++)
        if (!strcmp(b, bug_names[i])) c->bug = (enum bug)i;
    *out = c;
    return AH_OK;
}

static void ctx_destroy(ah_context *c) { c->host->free(c->host, c); }
static const char *ctx_error(const ah_context *c) { return c->err.msg; }

static void st_destroy(ah_state *s)
{
    if (!s) return;
    const ah_host_services *h = s->ctx->host;
    h->free(h, s->qsl), h->free(h, s->sl), h->free(h, s->bt), h->free(h, s->slots);
    h->free(h, s);
}

static ah_status st_create(ah_context *c, const ah_layer_spec *spec, const ah_limits *lim,
                           ah_state **out)
{
    const ah_host_services *h = c->host;
    struct ah_state *s = h->alloc(h, sizeof *s);
    *out = NULL;
    if (!s) return ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
    memset(s, 0, sizeof *s);
    s->ctx = c;
    s->spec = *spec;
    s->lim = *lim;
    s->qsl = h->alloc(h, sizeof(int32_t) * (lim->max_num_reqs + 1));
    s->sl = h->alloc(h, sizeof(int32_t) * lim->max_num_reqs);
    s->bt = h->alloc(h, sizeof(int32_t) * lim->max_num_reqs * lim->max_blocks_per_req);
    s->slots = h->alloc(h, sizeof(int64_t) * (lim->max_num_tokens + 1));
    if (!s->qsl || !s->sl || !s->bt || !s->slots) {
        st_destroy(s);
        return ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
    }
    *out = s;
    return AH_OK;
}

static const char *st_error(const ah_state *s) { return s->err.msg; }

static ah_status plan(ah_state *s, const ah_batch *b, ah_plan_mode mode, void *stream)
{
    if (mode == AH_PLAN_REPLAY && s->ctx->bug == BUG_STALE) return AH_OK;
    if (b->block_table_stride > s->lim.max_blocks_per_req)
        return ah_fail(&s->err, AH_ERR_INVALID_ARGUMENT, "block table wider than the limits");
    s->b = *b;
    memcpy(s->qsl, b->query_start_loc_host, sizeof(int32_t) * (b->num_reqs + 1));
    memcpy(s->sl, b->seq_lens_host, sizeof(int32_t) * b->num_reqs);
    for (uint32_t r = 0; r < b->num_reqs; r++)
        memcpy(s->bt + (size_t)r * b->block_table_stride,
               b->block_table_host + (size_t)r * b->block_table_stride,
               sizeof(int32_t) * b->block_table_stride);
    memcpy(s->slots, b->slot_mapping_host, sizeof(int64_t) * b->num_tokens);
    return AH_OK;
}

static size_t nhd(const ah_layer_spec *s, uint32_t hs, int64_t slot, uint32_t h)
{
    return ((size_t)slot * s->num_kv_heads + h) * hs; /* NHD: slot-major within the cache */
}

static ah_status write_kv(ah_state *s, const ah_kv_write_args *a)
{
    const ah_layer_spec *p = &s->spec;
    const float *k = ah_dl_data(a->key), *v = ah_dl_data(a->value);
    float *kc = ah_dl_data(a->key_cache), *vc = ah_dl_data(a->value_cache);
    const int64_t cache_slots = (int64_t)s->b.num_blocks * p->block_size;
    uint32_t T = s->b.num_tokens;
    if (s->ctx->bug == BUG_DROP && T) T--;
    for (uint32_t t = 0; t < T; t++) {
        int64_t slot = s->slots[t];
        if (slot < 0) continue;
        for (int extra = 0; extra <= (s->ctx->bug == BUG_STRAY); extra++) {
            int64_t sl = slot + extra;
            if (sl >= cache_slots) continue;
            for (uint32_t h = 0; h < p->num_kv_heads; h++) {
                memcpy(kc + nhd(p, p->qk_head_size, sl, h), k + ((size_t)t * p->num_kv_heads + h) * p->qk_head_size,
                       sizeof(float) * p->qk_head_size);
                memcpy(vc + nhd(p, p->v_head_size, sl, h), v + ((size_t)t * p->num_kv_heads + h) * p->v_head_size,
                       sizeof(float) * p->v_head_size);
            }
        }
    }
    return AH_OK;
}

static ah_status forward_now(ah_state *s, const ah_forward_args *a)
{
    const ah_layer_spec *p = &s->spec;
    const enum bug bug = s->ctx->bug;
    const float *q = ah_dl_data(a->q), *kc = ah_dl_data(a->key_cache), *vc = ah_dl_data(a->value_cache);
    float *out = ah_dl_data(a->out), *lse = a->lse ? ah_dl_data(a->lse) : NULL;
    const uint32_t hq = p->num_q_heads, group = hq / p->num_kv_heads, bs = p->block_size;
    const double scale = p->scale ? p->scale : 1.0 / sqrt(p->qk_head_size);
    double *w = malloc(sizeof(double) * (s->b.max_seq_len + 1));
    if (!w) return ah_fail(&s->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
    for (uint32_t r = 0; r < s->b.num_reqs; r++)
        for (int32_t t = s->qsl[r]; t < s->qsl[r + 1]; t++) {
            int64_t pos = s->sl[r] - (s->qsl[r + 1] - s->qsl[r]) + (t - s->qsl[r]);
            const int32_t *row = s->bt + (size_t)r * s->b.block_table_stride;
            for (uint32_t h = 0; h < hq; h++) {
                if (bug == BUG_SKIP_HEAD && h == hq - 1) continue;
                uint32_t kh = bug == BUG_GQA ? h % p->num_kv_heads : h / group;
                double m = -INFINITY, den = 0;
                for (int32_t j = 0; j < s->sl[r]; j++) {
                    int64_t win = p->sliding_window + (bug == BUG_WINDOW);
                    w[j] = NAN;
                    if (j > pos || (p->sliding_window && j <= pos - win)) continue;
                    int64_t slot = (int64_t)row[j / bs] * bs + j % bs;
                    const float *kr = kc + nhd(p, p->qk_head_size, slot, kh);
                    double d = 0;
                    for (uint32_t c = 0; c < p->qk_head_size; c++)
                        d += (double)q[((size_t)t * hq + h) * p->qk_head_size + c] * kr[c];
                    w[j] = d * scale;
                    if (w[j] > m) m = w[j];
                }
                float *o = out + ((size_t)t * hq + h) * p->v_head_size;
                double acc[1024] = {0};
                for (int32_t j = 0; j < s->sl[r]; j++) {
                    if (isnan(w[j])) continue;
                    double e = exp(w[j] - m);
                    den += e;
                    int64_t slot = (int64_t)row[j / bs] * bs + j % bs;
                    const float *vr = vc + nhd(p, p->v_head_size, slot, kh);
                    for (uint32_t c = 0; c < p->v_head_size; c++) acc[c] += e * vr[c];
                }
                for (uint32_t c = 0; c < p->v_head_size; c++) o[c] = (float)(acc[c] / den);
                if (bug == BUG_NAN && t == 0 && h == 0) o[0] = NAN;
                if (lse) lse[(size_t)t * hq + h] = (float)(m + log(den) + (bug == BUG_LSE ? 0.01 : 0));
            }
        }
    free(w);
    return AH_OK;
}

static ah_status forward(ah_state *s, const ah_forward_args *a)
{
    struct ah_context *c = s->ctx;
    if (!c->capturing) return forward_now(s, a);
    if (c->pending.n == MAX_RECORDED) return ah_fail(&s->err, AH_ERR_UNSUPPORTED, "graph too long");
    c->pending.calls[c->pending.n++] = (recorded){s, *a};
    return AH_OK;
}

/* ---- host memory as "device" memory, and emulated graphs ---------------- */

static ah_status mem_alloc(ah_context *c, size_t bytes, void **p)
{
    *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    return *p ? AH_OK : ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
}
static void mem_free(ah_context *c, void *p) { free(p); }
static ah_status mem_copy(ah_context *c, void *dst, const void *src, size_t n, ah_copy_kind k,
                          void *stream)
{
    memmove(dst, src, n);
    return AH_OK;
}
static ah_status synchronize(ah_context *c, void *stream) { return AH_OK; }
static ah_status stream_create(ah_context *c, void **stream)
{
    *stream = malloc(1);
    return *stream ? AH_OK : ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
}
static void stream_destroy(ah_context *c, void *stream) { free(stream); }

static ah_status graph_begin(ah_context *c, void *stream)
{
    if (c->capturing) return ah_fail(&c->err, AH_ERR_INVALID_ARGUMENT, "already capturing");
    c->capturing = 1;
    c->pending.n = 0;
    return AH_OK;
}
static ah_status graph_end(ah_context *c, void *stream, ah_graph **out)
{
    *out = NULL;
    if (!c->capturing) return ah_fail(&c->err, AH_ERR_INVALID_ARGUMENT, "not capturing");
    c->capturing = 0;
    struct ah_graph *g = malloc(sizeof *g);
    if (!g) return ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
    *g = c->pending;
    *out = g;
    return AH_OK;
}
static ah_status graph_launch(ah_context *c, ah_graph *g, void *stream)
{
    for (int i = 0; i < g->n; i++) {
        ah_status s = forward_now(g->calls[i].st, &g->calls[i].a);
        if (s != AH_OK) return ah_fail(&c->err, s, "replayed forward: %s", g->calls[i].st->err.msg);
    }
    return AH_OK;
}
static void graph_destroy(ah_context *c, ah_graph *g) { free(g); }

static const ah_config_key keys[] = {{"bug", "none", "the defect to plant (see mutant_plugin.c)"}};

static const ah_caps caps = {
    .struct_size = sizeof(ah_caps),
    .q_dtypes = AH_BIT(AH_DTYPE_FP32),
    .kv_dtypes = AH_BIT(AH_DTYPE_FP32),
    .qk_head_sizes = AH_INT_SET_RANGE(32, 128, 32),
    .v_head_sizes = AH_INT_SET_RANGE(32, 128, 32),
    .block_sizes = AH_INT_SET_RANGE(8, 16, 8),
    .preferred_block_size = 16,
    .features = AH_FEAT_SLIDING_WINDOW | AH_FEAT_LSE,
    .attn_types = AH_BIT(AH_ATTN_DECODER),
    .kv_layouts = AH_BIT(AH_KV_LAYOUT_NHD),
    .preferred_kv_layout = AH_KV_LAYOUT_NHD,
    .graph_level = AH_GRAPH_ALWAYS,
    .caller_output = 1,
    .config_keys = keys,
    .n_config_keys = 1,
};

static const ah_plugin_ops ops = {
    .struct_size = sizeof(ah_plugin_ops),
    .probe = probe,
    .context_create = ctx_create,
    .context_destroy = ctx_destroy,
    .context_error = ctx_error,
    .state_create = st_create,
    .state_destroy = st_destroy,
    .state_error = st_error,
    .plan = plan,
    .forward = forward,
    .write_kv = write_kv,
    .mem_alloc = mem_alloc,
    .mem_free = mem_free,
    .mem_copy = mem_copy,
    .synchronize = synchronize,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .graph_begin = graph_begin,
    .graph_end = graph_end,
    .graph_launch = graph_launch,
    .graph_destroy = graph_destroy,
};

AH_PLUGIN_DEFINE(conf_mutant, "1.0", "attnhost tests", "MIT",
                 "fp32 CPU backend with plantable defects (conformance self-test)", AH_DEVICE_CPU,
                 &caps, &ops)
