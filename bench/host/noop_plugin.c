/*
 * A plugin that does no work: plan and forward return at once. Timing the
 * host against it measures the host's own cost per step (batch validation,
 * tensor checks, dispatch) and nothing of any kernel. Built twice: as
 * bench_noop, which takes mixed batches whole, and with NOOP_DECODE as
 * bench_noop_decode, which takes decodes only, so a mixed step splits
 * between the two.
 */
#include <stdlib.h>

#include <attnhost/plugin.h>
#include <attnhost/plugin_util.h>

struct ah_context {
    ah_errbuf err;
};
struct ah_state {
    ah_errbuf err;
};

static ah_status probe(const ah_host_services *h, ah_probe_info *info)
{
    (void)h;
    info->usable = 1;
    ah_strlcpy(info->device_name, "nothing", sizeof info->device_name);
    return AH_OK;
}
static ah_status ctx_create(const ah_host_services *h, const ah_context_options *o,
                            ah_context **out, const char **why)
{
    (void)h;
    (void)o;
    *out = calloc(1, sizeof **out);
    *why = "out of memory";
    return *out ? AH_OK : AH_ERR_OUT_OF_MEMORY;
}
static void ctx_destroy(ah_context *c) { free(c); }
static const char *ctx_error(const ah_context *c) { return c->err.msg; }
static ah_status st_create(ah_context *c, const ah_layer_spec *s, const ah_limits *l,
                           ah_state **out)
{
    (void)s, (void)l;
    *out = calloc(1, sizeof **out);
    return *out ? AH_OK : ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
}
static void st_destroy(ah_state *s) { free(s); }
static const char *st_error(const ah_state *s) { return s->err.msg; }
static ah_status plan(ah_state *s, const ah_batch *b, ah_plan_mode m, void *stream)
{
    (void)s, (void)b, (void)m, (void)stream;
    return AH_OK;
}
static ah_status forward(ah_state *s, const ah_forward_args *a)
{
    (void)s, (void)a;
    return AH_OK;
}

static const ah_caps caps = {
    .struct_size = sizeof(ah_caps),
    .q_dtypes = AH_BIT(AH_DTYPE_BF16),
    .kv_dtypes = AH_BIT(AH_DTYPE_BF16),
    .qk_head_sizes = AH_INT_SET_ANY,
    .v_head_sizes = AH_INT_SET_ANY,
    .block_sizes = AH_INT_SET_RANGE(1, 16, 1), /* a cache block of 256 runs as kernel blocks */
    .preferred_block_size = 16,
    .features = AH_FEAT_SINKS | AH_FEAT_SLIDING_WINDOW | AH_FEAT_ALIBI | AH_FEAT_SOFTCAP |
                AH_FEAT_NON_CAUSAL | AH_FEAT_LSE,
    .attn_types = AH_BIT(AH_ATTN_DECODER),
    .kv_layouts = AH_BIT(AH_KV_LAYOUT_NHD),
    .preferred_kv_layout = AH_KV_LAYOUT_NHD,
    .forward_writes_kv = 1,
    .caller_output = 1,
    .prefill_rank = AH_RANK_PRIMARY,
    .decode_rank = AH_RANK_PRIMARY,
#ifdef NOOP_DECODE
    .mixed_batch = AH_MIXED_SPLIT,
#else
    .mixed_batch = AH_MIXED_WHOLE,
#endif
    .decode_query_len_max = 1,
};
static const ah_plugin_ops ops = {.struct_size = sizeof(ah_plugin_ops),
                                  .probe = probe,
                                  .context_create = ctx_create,
                                  .context_destroy = ctx_destroy,
                                  .context_error = ctx_error,
                                  .state_create = st_create,
                                  .state_destroy = st_destroy,
                                  .state_error = st_error,
                                  .plan = plan,
                                  .forward = forward};

#ifdef NOOP_DECODE
AH_PLUGIN_DEFINE(bench_noop_decode, "1.0", "attnhost", "MIT",
                 "does nothing, for host timing (decodes only)", AH_DEVICE_CPU, &caps, &ops)
#else
AH_PLUGIN_DEFINE(bench_noop, "1.0", "attnhost", "MIT", "does nothing, for host timing",
                 AH_DEVICE_CPU, &caps, &ops)
#endif
