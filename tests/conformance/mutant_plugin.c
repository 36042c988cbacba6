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
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>

enum bug { BUG_NONE, BUG_SKIP_HEAD, BUG_WINDOW, BUG_GQA, BUG_STRAY, BUG_DROP, BUG_NAN, BUG_LSE };
static const char *const bug_names[] = {"none", "skip_head", "window", "gqa",
                                        "stray_write", "drop_write", "nan", "lse"};

struct ah_context {
    ah_errbuf err;
    const ah_host_services *host;
    enum bug bug;
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

static ah_status forward(ah_state *s, const ah_forward_args *a)
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
    .graph_level = AH_GRAPH_NEVER,
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
};

AH_PLUGIN_DEFINE(conf_mutant, "1.0", "attnhost tests", "MIT",
                 "fp32 CPU backend with plantable defects (conformance self-test)", AH_DEVICE_CPU,
                 &caps, &ops)
