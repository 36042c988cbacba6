/*
 * acme_attn: an example vendor plugin. A plain, single-threaded CPU
 * attention over the paged KV cache (fp32/fp16/bf16, decoder and
 * encoder-only, sliding window, LSE), written only against attnhost's
 * installed plugin headers. It shows the whole contract in one file:
 * capabilities, probe, context, state, plan, KV write and forward.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin.h>
#include <attnhost/plugin_util.h>

struct ah_context {
    ah_errbuf err;
};

struct ah_state {
    ah_errbuf err;
    ah_layer_spec spec;
    const ah_batch *batch; /* the planned batch: the engine keeps it alive for the step */
};

static ah_status acme_probe(const ah_host_services *host, ah_probe_info *info)
{
    info->usable = 1;
    ah_strlcpy(info->device_name, "host CPU (reference kernel)", sizeof info->device_name);
    ah_strlcpy(info->arch, "generic", sizeof info->arch);
    info->device_count = 1;
    info->multiprocessors = 1;
    return AH_OK;
}

static ah_status acme_context_create(const ah_host_services *host, const ah_context_options *opts,
                                     ah_context **out, const char **why)
{
    (void)host;
    *out = NULL;
    if (opts->device_index != 0) {
        *why = "the CPU is device 0";
        return AH_ERR_UNAVAILABLE;
    }
    *out = calloc(1, sizeof **out);
    if (!*out) *why = "out of memory";
    return *out ? AH_OK : AH_ERR_OUT_OF_MEMORY;
}

static void acme_context_destroy(ah_context *ctx) { free(ctx); }
static const char *acme_context_error(const ah_context *ctx) { return ctx->err.msg; }

static ah_status acme_state_create(ah_context *ctx, const ah_layer_spec *spec, const ah_limits *lim,
                                   ah_state **out)
{
    ah_state *st = calloc(1, sizeof *st);
    if (!st) return ah_fail(&ctx->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
    st->spec = *spec;
    *out = st;
    return AH_OK;
}

static void acme_state_destroy(ah_state *st) { free(st); }
static const char *acme_state_error(const ah_state *st) { return st->err.msg; }

static ah_status acme_plan(ah_state *st, const ah_batch *b, ah_plan_mode mode, void *stream)
{
    st->batch = b;
    return AH_OK;
}

/* Element index of (slot, head, channel) in a dense NHD cache. */
static size_t cache_index(const ah_layer_spec *s, int64_t slot, uint32_t h, uint32_t ch, uint32_t d)
{
    return ((size_t)slot * s->num_kv_heads + h) * d + ch;
}

static ah_status acme_write_kv(ah_state *st, const ah_kv_write_args *a)
{
    const ah_layer_spec *s = &st->spec;
    const ah_batch *b = st->batch;
    for (uint32_t t = 0; t < b->num_tokens; t++) {
        int64_t slot = b->slot_mapping_host[t];
        if (slot < 0) continue;
        for (uint32_t h = 0; h < s->num_kv_heads; h++)
            for (uint32_t c = 0; c < s->qk_head_size; c++) {
                size_t src = ((size_t)t * s->num_kv_heads + h) * s->qk_head_size + c;
                ah_store_f32(ah_dl_data(a->key_cache), cache_index(s, slot, h, c, s->qk_head_size),
                             s->kv_dtype, ah_load_f32(ah_dl_data(a->key), src, s->q_dtype));
                ah_store_f32(ah_dl_data(a->value_cache), cache_index(s, slot, h, c, s->v_head_size),
                             s->kv_dtype, ah_load_f32(ah_dl_data(a->value), src, s->q_dtype));
            }
    }
    return AH_OK;
}

static ah_status acme_forward(ah_state *st, const ah_forward_args *a)
{
    const ah_layer_spec *s = &st->spec;
    const ah_batch *b = st->batch;
    uint32_t d = s->qk_head_size, group = s->num_q_heads / s->num_kv_heads;
    float *score = malloc((size_t)b->max_seq_len * sizeof *score);
    float *acc = malloc(d * sizeof *acc);
    if (!score || !acc) {
        free(score);
        free(acc);
        return ah_fail(&st->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        int32_t q0 = b->query_start_loc_host[r], qn = b->query_start_loc_host[r + 1] - q0;
        int32_t len = b->seq_lens_host[r];
        const int32_t *row = b->block_table_host + (size_t)r * b->block_table_stride;
        for (int32_t i = 0; i < qn; i++) {
            int64_t pos = len - qn + i;
            for (uint32_t h = 0; h < s->num_q_heads; h++) {
                size_t qi = ((size_t)(q0 + i) * s->num_q_heads + h) * d;
                float m = -INFINITY, sum = 0;
                for (int32_t j = 0; j < len; j++) {
                    int visible = s->attn_type != AH_ATTN_DECODER || j <= pos;
                    if (s->sliding_window && (pos - j >= (int64_t)s->sliding_window ||
                                              (s->attn_type != AH_ATTN_DECODER &&
                                               j - pos >= (int64_t)s->sliding_window)))
                        visible = 0;
                    score[j] = -INFINITY;
                    if (!visible) continue;
                    int64_t slot = (int64_t)row[j / s->block_size] * s->block_size + j % s->block_size;
                    float dot = 0;
                    for (uint32_t c = 0; c < d; c++)
                        dot += ah_load_f32(ah_dl_data(a->q), qi + c, s->q_dtype) *
                               ah_load_f32(ah_dl_data(a->key_cache), cache_index(s, slot, h / group, c, d),
                                           s->kv_dtype);
                    score[j] = dot * s->scale;
                    m = score[j] > m ? score[j] : m;
                }
                memset(acc, 0, d * sizeof *acc);
                for (int32_t j = 0; j < len; j++) {
                    if (score[j] == -INFINITY) continue;
                    float p = expf(score[j] - m);
                    sum += p;
                    int64_t slot = (int64_t)row[j / s->block_size] * s->block_size + j % s->block_size;
                    for (uint32_t c = 0; c < d; c++)
                        acc[c] += p * ah_load_f32(ah_dl_data(a->value_cache),
                                                  cache_index(s, slot, h / group, c, d), s->kv_dtype);
                }
                for (uint32_t c = 0; c < d; c++)
                    ah_store_f32(ah_dl_data(a->out), qi + c, s->q_dtype, sum > 0 ? acc[c] / sum : 0);
                if (a->lse)
                    ((float *)ah_dl_data(a->lse))[(size_t)(q0 + i) * s->num_q_heads + h] =
                        sum > 0 ? m + logf(sum) : -INFINITY;
            }
        }
    }
    free(score);
    free(acc);
    return AH_OK;
}

static const ah_caps acme_caps = {
    .struct_size = sizeof(ah_caps),
    .q_dtypes = AH_BIT(AH_DTYPE_FP32) | AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_BF16),
    .kv_dtypes = AH_BIT(AH_DTYPE_FP32) | AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_BF16),
    .qk_head_sizes = AH_INT_SET_RANGE(8, 256, 8),
    .v_head_sizes = AH_INT_SET_RANGE(8, 256, 8),
    .block_sizes = AH_INT_SET_RANGE(1, 1024, 1),
    .preferred_block_size = 16,
    .features = AH_FEAT_SLIDING_WINDOW | AH_FEAT_NON_CAUSAL | AH_FEAT_LSE,
    .attn_types = AH_BIT(AH_ATTN_DECODER) | AH_BIT(AH_ATTN_ENCODER_ONLY),
    .kv_layouts = AH_BIT(AH_KV_LAYOUT_NHD),
    .preferred_kv_layout = AH_KV_LAYOUT_NHD,
    .graph_level = AH_GRAPH_NEVER,
    .caller_output = 1,
    /* a reference backend: behind a primary CPU plugin, ahead of nothing */
    .prefill_rank = AH_RANK_SECONDARY,
    .decode_rank = AH_RANK_SECONDARY,
    .mixed_batch = AH_MIXED_WHOLE,
    .decode_query_len_max = 1,
};

static const ah_plugin_ops acme_ops = {
    .struct_size = sizeof(ah_plugin_ops),
    .probe = acme_probe,
    .context_create = acme_context_create,
    .context_destroy = acme_context_destroy,
    .context_error = acme_context_error,
    .state_create = acme_state_create,
    .state_destroy = acme_state_destroy,
    .state_error = acme_state_error,
    .plan = acme_plan,
    .forward = acme_forward,
    .write_kv = acme_write_kv,
};

AH_PLUGIN_DEFINE(acme_attn, "1.0.0", "Acme Corp", "MIT", "Acme reference CPU attention",
                 AH_DEVICE_CPU, &acme_caps, &acme_ops)
