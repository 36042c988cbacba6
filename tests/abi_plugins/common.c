/*
 * The test backend: naive fp32 attention over host memory. Slow and simple
 * on purpose; it lets the host's binding and execution paths run against a
 * plugin that computes the right answer, on any machine.
 *
 * The probe reads its [plugin.<name>] key "usable": "0" makes it report the
 * device unusable, so tests can see config keys reach a probe (and the scan
 * cache notice a changed key).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "common.h"

const ah_host_services *abi_host;

typedef struct ah_context {
    ah_errbuf err;
    const ah_host_services *host;
} ctx_t;

typedef struct ah_state {
    ah_errbuf err;
    ctx_t *ctx;
    ah_layer_spec spec;
    ah_limits lim;
    /* copies of the last planned batch's host arrays */
    uint32_t num_reqs, num_tokens, bt_stride;
    int32_t *qsl, *seq, *bt;
    int64_t *slots;
} state_t;

ah_status abi_probe(const ah_host_services *host, ah_probe_info *info)
{
    const char *u = host && host->config_get ? host->config_get(host, "usable") : NULL;
    ah_strlcpy(info->device_name, "host CPU (ABI test plugin)", sizeof info->device_name);
    ah_strlcpy(info->arch, "generic", sizeof info->arch);
    info->device_count = 1;
    info->multiprocessors = host && host->hw ? host->hw->cpu_logical_cores : 1;
    info->memory_bytes = host && host->hw ? host->hw->memory_bytes : 0;
    if (u && strcmp(u, "0") == 0) {
        info->usable = 0;
        ah_strlcpy(info->reason, "switched off by its config key usable = 0", sizeof info->reason);
        return AH_OK;
    }
    info->usable = 1;
    return AH_OK;
}

static ah_status ctx_create(const ah_host_services *host, ah_context **out, const char **why)
{
    ctx_t *c = host->alloc(host, sizeof *c);
    *out = NULL;
    if (!c) {
        *why = "out of memory";
        return AH_ERR_OUT_OF_MEMORY;
    }
    memset(c, 0, sizeof *c);
    c->host = host;
    *out = c;
    return AH_OK;
}

static void ctx_destroy(ah_context *c)
{
    if (c) c->host->free(c->host, c);
}

static const char *ctx_error(const ah_context *c) { return c->err.msg; }

static void st_destroy(ah_state *s)
{
    if (!s) return;
    const ah_host_services *h = s->ctx->host;
    h->free(h, s->qsl);
    h->free(h, s->seq);
    h->free(h, s->bt);
    h->free(h, s->slots);
    h->free(h, s);
}

static ah_status st_create(ah_context *c, const ah_layer_spec *spec, const ah_limits *lim,
                           ah_state **out)
{
    *out = NULL;
    if (spec->q_dtype != AH_DTYPE_FP32 || spec->kv_dtype != AH_DTYPE_FP32)
        return ah_fail(&c->err, AH_ERR_UNSUPPORTED, "only fp32");
    if (spec->kv_layout != AH_KV_LAYOUT_NHD || spec->attn_type != AH_ATTN_DECODER ||
        spec->use_mla || spec->use_sinks || spec->use_alibi || spec->sliding_window ||
        spec->softcap != 0 || spec->num_kv_heads == 0 || spec->num_q_heads % spec->num_kv_heads)
        return ah_fail(&c->err, AH_ERR_UNSUPPORTED, "unsupported layer spec");
    const ah_host_services *h = c->host;
    state_t *s = h->alloc(h, sizeof *s);
    if (!s) return ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
    memset(s, 0, sizeof *s);
    s->ctx = c;
    s->spec = *spec;
    s->lim = *lim;
    s->qsl = h->alloc(h, ((size_t)lim->max_num_reqs + 1) * sizeof(int32_t));
    s->seq = h->alloc(h, ((size_t)lim->max_num_reqs + 1) * sizeof(int32_t));
    s->bt = h->alloc(h, ((size_t)lim->max_num_reqs * lim->max_blocks_per_req + 1) * sizeof(int32_t));
    s->slots = h->alloc(h, ((size_t)lim->max_num_tokens + 1) * sizeof(int64_t));
    if (!s->qsl || !s->seq || !s->bt || !s->slots) {
        st_destroy(s);
        return ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
    }
    *out = s;
    return AH_OK;
}

static const char *st_error(const ah_state *s) { return s->err.msg; }

static ah_status plan(ah_state *s, const ah_batch *b, ah_plan_mode mode, void *stream)
{
    (void)mode;
    (void)stream;
    if (b->num_reqs > s->lim.max_num_reqs || b->num_tokens > s->lim.max_num_tokens)
        return ah_fail(&s->err, AH_ERR_INVALID_ARGUMENT, "batch exceeds the state's limits");
    uint32_t width = s->lim.max_blocks_per_req < b->block_table_stride ? s->lim.max_blocks_per_req
                                                                       : b->block_table_stride;
    memcpy(s->qsl, b->query_start_loc_host, ((size_t)b->num_reqs + 1) * sizeof(int32_t));
    memcpy(s->seq, b->seq_lens_host, (size_t)b->num_reqs * sizeof(int32_t));
    for (uint32_t r = 0; r < b->num_reqs; r++)
        memcpy(s->bt + (size_t)r * width, b->block_table_host + (size_t)r * b->block_table_stride,
               width * sizeof(int32_t));
    memcpy(s->slots, b->slot_mapping_host, (size_t)b->num_tokens * sizeof(int64_t));
    s->num_reqs = b->num_reqs;
    s->num_tokens = b->num_tokens;
    s->bt_stride = width;
    return AH_OK;
}

static float *f32(const DLTensor *t) { return (float *)ah_dl_data(t); }

static ah_status write_kv(ah_state *s, const ah_kv_write_args *a)
{
    const ah_layer_spec *sp = &s->spec;
    if (!a->key || !a->value || !a->key_cache || !a->value_cache)
        return ah_fail(&s->err, AH_ERR_INVALID_ARGUMENT, "write_kv needs key, value and caches");
    size_t hk = sp->num_kv_heads, dq = sp->qk_head_size, dv = sp->v_head_size;
    size_t bs = sp->block_size;
    for (uint32_t t = 0; t < s->num_tokens; t++) {
        int64_t slot = s->slots[t];
        if (slot < 0) continue;
        size_t blk = (size_t)slot / bs, off = (size_t)slot % bs;
        float *kc = f32(a->key_cache) + ((blk * bs + off) * hk) * dq;
        float *vc = f32(a->value_cache) + ((blk * bs + off) * hk) * dv;
        memcpy(kc, f32(a->key) + (size_t)t * hk * dq, hk * dq * sizeof(float));
        memcpy(vc, f32(a->value) + (size_t)t * hk * dv, hk * dv * sizeof(float));
    }
    return AH_OK;
}

static ah_status forward(ah_state *s, const ah_forward_args *a)
{
    const ah_layer_spec *sp = &s->spec;
    if (!a->q || !a->out || !a->key_cache || !a->value_cache)
        return ah_fail(&s->err, AH_ERR_INVALID_ARGUMENT, "forward needs q, out and caches");
    size_t hq = sp->num_q_heads, hk = sp->num_kv_heads, dq = sp->qk_head_size, dv = sp->v_head_size;
    size_t bs = sp->block_size, group = hq / hk;
    float scale = sp->scale != 0 ? sp->scale : 1.0f / sqrtf((float)dq);
    const float *q = f32(a->q), *kc = f32(a->key_cache), *vc = f32(a->value_cache);
    float *o = f32(a->out);
    float *p = malloc(((size_t)s->lim.max_seq_len + 1) * sizeof(float));
    if (!p) return ah_fail(&s->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
    for (uint32_t r = 0; r < s->num_reqs; r++) {
        int32_t q0 = s->qsl[r], qlen = s->qsl[r + 1] - s->qsl[r], seq = s->seq[r];
        for (int32_t i = 0; i < qlen; i++) {
            int32_t pos = seq - qlen + i; /* sees keys 0..pos */
            for (size_t h = 0; h < hq; h++) {
                const float *qv = q + ((size_t)(q0 + i) * hq + h) * dq;
                size_t kh = h / group;
                float mx = -INFINITY;
                for (int32_t k = 0; k <= pos; k++) {
                    size_t blk = (size_t)s->bt[(size_t)r * s->bt_stride + (size_t)k / bs];
                    const float *kv = kc + ((blk * bs + (size_t)k % bs) * hk + kh) * dq;
                    float d = 0;
                    for (size_t c = 0; c < dq; c++) d += qv[c] * kv[c];
                    p[k] = d * scale;
                    if (p[k] > mx) mx = p[k];
                }
                float sum = 0;
                for (int32_t k = 0; k <= pos; k++) sum += (p[k] = expf(p[k] - mx));
                float *ov = o + ((size_t)(q0 + i) * hq + h) * dv;
                for (size_t c = 0; c < dv; c++) ov[c] = 0;
                for (int32_t k = 0; k <= pos; k++) {
                    size_t blk = (size_t)s->bt[(size_t)r * s->bt_stride + (size_t)k / bs];
                    const float *vv = vc + ((blk * bs + (size_t)k % bs) * hk + kh) * dv;
                    for (size_t c = 0; c < dv; c++) ov[c] += p[k] / sum * vv[c];
                }
            }
        }
    }
    free(p);
    return AH_OK;
}

static const ah_config_key abi_keys[] = {
    {"usable", "1", "0: the probe reports the device unusable (for tests)"}};

const ah_caps abi_caps = {
    .struct_size = sizeof(ah_caps),
    .q_dtypes = AH_BIT(AH_DTYPE_FP32),
    .kv_dtypes = AH_BIT(AH_DTYPE_FP32),
    .qk_head_sizes = AH_INT_SET_RANGE(1, 1024, 1),
    .v_head_sizes = AH_INT_SET_RANGE(1, 1024, 1),
    .block_sizes = AH_INT_SET_RANGE(1, 1024, 1),
    .preferred_block_size = 16,
    .features = AH_FEAT_DIFF_HEAD_SIZES,
    .attn_types = AH_BIT(AH_ATTN_DECODER),
    .kv_layouts = AH_BIT(AH_KV_LAYOUT_NHD),
    .preferred_kv_layout = AH_KV_LAYOUT_NHD,
    .graph_level = AH_GRAPH_NEVER,
    .caller_output = 1,
    .config_keys = abi_keys,
    .n_config_keys = 1,
};

const ah_plugin_ops abi_ops = {
    .struct_size = sizeof(ah_plugin_ops),
    .probe = abi_probe,
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
