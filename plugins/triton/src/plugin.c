/*
 * The triton plugin's descriptor: Triton-authored attention kernels compiled
 * ahead of time (generate.py) and run through the CUDA driver API, which the
 * plugin loads itself. This file holds the capability table, the probe, the
 * context (device, primary context, kernel modules) and the device-service
 * slots (memory, copies, streams, event timer, stream-capture graphs).
 */
#include <stdlib.h>
#include <string.h>

#include "triton_plugin.h"

#ifdef TK_HIP
#define TK_HIP_OR_CUDA "HIP"
#else
#define TK_HIP_OR_CUDA "CUDA"
#endif

/* ---- capabilities --------------------------------------------------------- */

/* The device is not a key: the host opens one context per device index
 * (ah_context_options.device_index, per binding), and CUDA_VISIBLE_DEVICES /
 * HIP_VISIBLE_DEVICES already remap devices for the whole process. */
static const ah_config_key tk_keys[] = {
    AH_KEY_INT_ROW("num_kv_splits", "0", 0, TK_MAX_SPLITS,
                   "split-KV decode: splits per request (1..64); 0 (auto): about 16 programs per "
                   "SM, at most ceil(max_seq_len / split_tile) and 32"),
    AH_KEY_INT_ROW("split_tile", "256", 1, 1 << 20,
                   "split-KV decode: fewest keys a split covers; short requests use fewer splits"),
    AH_KEY_BOOL_ROW("deterministic", "false",
                    "true: fixed splits (num_kv_splits, 16 when auto), independent of the batch, "
                    "fp32 reduction in a fixed order: a decode request's output is bitwise the "
                    "same in any batch"),
};

#ifdef TK_HIP
/* The AMD targets generate.py compiles (fp16/bf16 only). */
static const char *const tk_gfx_targets[] = {"gfx90a", "gfx942"};
#endif

static void tk_check_combination(const ah_layer_spec *spec, const ah_probe_info *probe,
                                 ah_reason_sink *sink)
{
    int fp8 = spec->kv_dtype == AH_DTYPE_FP8_E4M3 || spec->kv_dtype == AH_DTYPE_FP8_E5M2;
    if (!fp8 && spec->kv_dtype != spec->q_dtype)
        sink->add(sink, AH_REASON_COMBINATION, "kv_dtype", ah_dtype_name(spec->kv_dtype),
                  "the query dtype, fp8_e4m3 or fp8_e5m2");
    if (fp8 && probe && probe->compute_capability && probe->compute_capability < 90)
        sink->add(sink, AH_REASON_DEVICE, "kv_dtype", ah_dtype_name(spec->kv_dtype),
                  "fp8 KV caches need the sm_90 kernels (compute capability 9.0)");
    /* Different qk and v head sizes: the ragged kernel has a pad for each
     * (qk 192 / v 128 is MLA's non-absorbed prefill); the paged kernels
     * have one head size. */
    if (spec->qk_head_size != spec->v_head_size && !ah_spec_ragged(spec))
        sink->add(sink, AH_REASON_COMBINATION, "v_head_size", "differs from qk_head_size",
                  "equal qk and v head sizes on paged layers (different ones on ragged layers)");
    if (spec->attn_type == AH_ATTN_ENCODER_DECODER && spec->use_alibi)
        sink->add(sink, AH_REASON_COMBINATION, "alibi", "on a cross layer",
                  "ALiBi on decoder layers (a cross query has no position among its keys)");
}

#ifdef TK_HIP
#define TK_FP8_SCALE_FEATURES 0u /* no FP8 kernels for AMD */
#else
#define TK_FP8_SCALE_FEATURES (AH_FEAT_SCALE_TENSORS | AH_FEAT_KV_SCALE_PER_HEAD)
#endif

const ah_caps tk_caps = {
    .struct_size = sizeof(ah_caps),
    .q_dtypes = AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_BF16),
#ifdef TK_HIP
    .kv_dtypes = AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_BF16),
#else
    .kv_dtypes = AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_BF16) | AH_BIT(AH_DTYPE_FP8_E4M3) |
                 AH_BIT(AH_DTYPE_FP8_E5M2),
#endif
    .qk_head_sizes = AH_INT_SET_RANGE(16, 256, 16),
    .v_head_sizes = AH_INT_SET_RANGE(16, 256, 16),
    .block_sizes = AH_INT_SET_RANGE(16, 1024, 16),
    .preferred_block_size = 16,
    /* EMPTY_KV: a request with seq_len 0 gets no key tiles in the unified
     * kernel and no non-empty split in split-KV stage 1, so neither reads
     * its block-table row; both normalisations guard 0/0 and LSE is
     * log(0) = -inf (the kernels' docstrings). merge_states takes -inf as
     * "no keys" (kernels/merge_states.py).
     * RELEASED_BLOCKS: split-KV splits start at the first key the window
     * shows; the unified kernel's tiles can start before it, but only its
     * masked tiles, which mask the K/V loads of negative entries.
     * RAGGED_KV: ragged decoder layers, causal or not, with every feature
     * above, on the ragged kernel (kernels/ragged_attention.py), qk and v
     * head sizes up to 256 each; DIFF_HEAD_SIZES only there
     * (check_combination refuses a paged layer with qk != v).
     * TREE_MASK: plan sends every batch with a mask on a decoder layer,
     * pure decode included, to the unified kernel's masked specialization
     * (unified_mask: the general kernel plus the mask's bytes in every
     * tile); a graph captured with it replays batches with or without a
     * mask, one captured without it refuses a masked batch (state.c).
     * SCALE_TENSORS, KV_SCALE_PER_HEAD (CUDA: AMD has no FP8 kernels):
     * FP8 layers whose K and V scales come in float32 tensors, [1] or one
     * a KV head, run kernels that read them on the device when they run
     * (the unified kernel's specializations and split-KV stage 1 at the
     * program's KV head, kv_write dividing by them); layers with host
     * floats keep the kernels without. Not Q_SCALE: the kernels take no
     * FP8 queries (the cache converts to the query's dtype), so a query
     * scale would have nothing to scale. */
    .features = AH_FEAT_SINKS | AH_FEAT_SLIDING_WINDOW | AH_FEAT_ALIBI | AH_FEAT_SOFTCAP |
                AH_FEAT_NON_CAUSAL | AH_FEAT_LSE | AH_FEAT_CAUSAL_FLAG | AH_FEAT_EMPTY_KV |
                AH_FEAT_CROSS_ATTENTION | AH_FEAT_RELEASED_BLOCKS | AH_FEAT_RAGGED_KV |
                AH_FEAT_DIFF_HEAD_SIZES | AH_FEAT_TREE_MASK | TK_FP8_SCALE_FEATURES,
    /* decoder layers over the paged cache, causal or not, and cross layers
     * (the plan hands the kernels encoder_seq_lens as the sequence, every
     * key visible); not the cacheless encoder layers (packed K/V, no cache) */
    .attn_types = AH_BIT(AH_ATTN_DECODER) | AH_BIT(AH_ATTN_ENCODER_DECODER),
    /* every layout is strides to the kernels (launch.c, tk_cache); the
     * interleaved ones are two views of one allocation */
    .kv_layouts = AH_BIT(AH_KV_LAYOUT_NHD) | AH_BIT(AH_KV_LAYOUT_HND) |
                  AH_BIT(AH_KV_LAYOUT_NHD_INTERLEAVED) | AH_BIT(AH_KV_LAYOUT_HND_INTERLEAVED),
    .preferred_kv_layout = AH_KV_LAYOUT_NHD,
#ifdef TK_HIP
    .gfx_targets = tk_gfx_targets,
    .n_gfx_targets = sizeof tk_gfx_targets / sizeof tk_gfx_targets[0],
#else
    .min_compute_capability = 80,
    .max_compute_capability = 90,
#endif
    .graph_level = AH_GRAPH_ALWAYS,
    .graph_seq_len_fill = 0,
    .forward_writes_kv = 0,
    .caller_output = 1,
    .max_head_groups = 0,
    .config_keys = tk_keys,
    .n_config_keys = sizeof tk_keys / sizeof tk_keys[0],
    .check_combination = tk_check_combination,
    /* A portable fallback: below the vendor libraries' plugins. */
    .prefill_rank = AH_RANK_SECONDARY,
    .decode_rank = AH_RANK_SECONDARY,
    /* The unified kernel serves any mix of decode and prefill requests. */
    .mixed_batch = AH_MIXED_WHOLE,
    .decode_query_len_max = 1,
};

/* ---- helpers shared by the source files ----------------------------------- */

ah_status tk_cu_fail(const ah_cu_api *cu, ah_errbuf *e, CUresult r, const char *what)
{
    ah_status s = r == CUDA_ERROR_OUT_OF_MEMORY ? AH_ERR_OUT_OF_MEMORY : AH_ERR_DEVICE;
    return ah_fail(e, s, "%s: %s (CUDA error %d)", what, tk_cu_errstr(cu, r), r);
}

ah_status tk_ctx_bind(ah_context *ctx, ah_errbuf *e)
{
    TK_CU(ctx, e, ctx->cu->ctx_set_current(ctx->cuctx));
    return AH_OK;
}

#ifdef TK_HIP
/* HIP reports a gfx9 device's version as its compute capability: gfx90a is
 * 9.0 (as are gfx900/gfx908, whose module load then fails with a message),
 * gfx942 is 9.4. */
static const char *tk_arch_for(int cc)
{
    if (cc == 90) return "gfx90a";
    if (cc == 94) return "gfx942";
    return NULL;
}
#define TK_ARCH_HINT "gfx90a, gfx942"
#else
static const char *tk_arch_for(int cc)
{
    if (cc >= 80 && cc < 90) return "sm80"; /* sm_80 cubins run on every 8.x device */
    if (cc == 90) return "sm90";
    return NULL;
}
#define TK_ARCH_HINT "sm_80..sm_89 via sm80, sm_90"
#endif

/* ---- configuration -------------------------------------------------------- */

void tk_config_read(const ah_host_services *host, tk_config *cfg)
{
    /* The host validated every value against tk_keys (types and ranges). */
    int has = host && AH_HAS_FIELD(host, ah_host_services, config_int) && host->config_int;
    cfg->num_kv_splits = has ? (int)host->config_int(host, "num_kv_splits") : 0;
    cfg->split_tile = has ? (int)host->config_int(host, "split_tile") : 256;
    cfg->deterministic = has ? (int)host->config_int(host, "deterministic") : 0;
    if (cfg->deterministic && !cfg->num_kv_splits) cfg->num_kv_splits = 16;
}

/* ---- probe ---------------------------------------------------------------- */

static ah_status tk_probe(const ah_host_services *host, ah_probe_info *info)
{
    (void)host;
    char reason[256] = "";
    const char *why = NULL;
    const ah_cu_api *cu = tk_cu_load(&why);
    if (!cu) {
        ah_strlcpy(info->reason, why, sizeof info->reason);
        info->usable = 0;
        return AH_OK;
    }
    CUresult r = cu->init(0);
    int count = 0, ver = 0;
    if (r == CUDA_SUCCESS) r = cu->device_count(&count);
    if (r != CUDA_SUCCESS || count == 0) {
        snprintf(reason, sizeof reason, "no %s device: %s", TK_HIP_OR_CUDA,
                 r == CUDA_SUCCESS ? "the driver reports none" : tk_cu_errstr(cu, r));
        ah_strlcpy(info->reason, reason, sizeof info->reason);
        info->usable = 0;
        return AH_OK;
    }
    CUdevice dev;
    int major = 0, minor = 0, sms = 0;
    size_t mem = 0;
    cu->device_get(&dev, 0);
    cu->device_name(info->device_name, (int)sizeof info->device_name, dev);
    cu->device_attr(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    cu->device_attr(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    cu->device_attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    cu->device_mem(&mem, dev);
    cu->driver_version(&ver);
    info->compute_capability = (uint32_t)(major * 10 + minor);
    info->device_count = (uint32_t)count;
    info->multiprocessors = (uint32_t)sms;
    info->memory_bytes = mem;
#ifdef TK_HIP
    const char *a = tk_arch_for(major * 10 + minor);
    snprintf(info->arch, sizeof info->arch, "%s", a ? a : "gfx?");
    info->compute_capability = 0; /* CUDA only */
    snprintf(info->driver_version, sizeof info->driver_version, "HIP runtime %d", ver);
#else
    snprintf(info->arch, sizeof info->arch, "sm_%d%d", major, minor);
    snprintf(info->driver_version, sizeof info->driver_version, "CUDA driver %d.%d", ver / 1000,
             ver % 1000 / 10);
#endif
    if (!tk_arch_for(major * 10 + minor)) {
        snprintf(reason, sizeof reason, "device version %d.%d has no compiled kernels (%s)", major,
                 minor, TK_ARCH_HINT);
        ah_strlcpy(info->reason, reason, sizeof info->reason);
        info->usable = 0;
        return AH_OK;
    }
    info->usable = 1;
    return AH_OK;
}

/* ---- context -------------------------------------------------------------- */

static void tk_context_destroy(ah_context *ctx)
{
    if (!ctx) return;
    const ah_cu_api *cu = ctx->cu;
    if (ctx->cuctx) {
        cu->ctx_set_current(ctx->cuctx);
        for (unsigned i = 0; ctx->modules && i < ah_tk_table_len; i++)
            if (ctx->modules[i]) cu->module_unload(ctx->modules[i]);
        if (ctx->timer_begin) cu->event_destroy(ctx->timer_begin);
        if (ctx->timer_end) cu->event_destroy(ctx->timer_end);
        cu->ctx_release(ctx->dev);
    }
    const ah_host_services *host = ctx->host;
    host->free(host, ctx->modules);
    host->free(host, ctx->funcs);
    host->free(host, ctx);
}

static ah_status tk_context_create(const ah_host_services *host, const ah_context_options *opts,
                                   ah_context **out, const char **why)
{
    static char why_buf[512];
    *out = NULL;
    const ah_cu_api *cu = tk_cu_load(why);
    if (!cu) return AH_ERR_UNAVAILABLE;
    ah_context *ctx = host->alloc(host, sizeof *ctx);
    if (!ctx) {
        *why = "out of host memory";
        return AH_ERR_OUT_OF_MEMORY;
    }
    memset(ctx, 0, sizeof *ctx);
    ctx->host = host;
    ctx->cu = cu;
    ctx->device =
        opts && AH_HAS_FIELD(opts, ah_context_options, device_index) ? opts->device_index : 0;
    tk_config_read(host, &ctx->cfg);
    ah_status s = AH_OK;
    ctx->modules = host->alloc(host, ah_tk_table_len * sizeof *ctx->modules);
    ctx->funcs = host->alloc(host, ah_tk_table_len * sizeof *ctx->funcs);
    if (!ctx->modules || !ctx->funcs)
        s = ah_fail(&ctx->err, AH_ERR_OUT_OF_MEMORY, "out of host memory");
    else {
        memset(ctx->modules, 0, ah_tk_table_len * sizeof *ctx->modules);
        memset(ctx->funcs, 0, ah_tk_table_len * sizeof *ctx->funcs);
    }
    CUresult r = CUDA_SUCCESS;
    const char *step = "";
    int major = 0, minor = 0, count = 0;
    if (s == AH_OK) {
        if ((r = cu->init(0))) step = "cuInit";
        else if ((r = cu->device_count(&count))) step = "cuDeviceGetCount";
        else if (ctx->device < 0 || ctx->device >= count)
            s = ah_fail(&ctx->err, AH_ERR_UNAVAILABLE, "no %s device %d (this process sees %d)",
                        TK_HIP_OR_CUDA, ctx->device, count);
        else if ((r = cu->device_get(&ctx->dev, ctx->device))) step = "cuDeviceGet";
        else if ((r = cu->ctx_retain(&ctx->cuctx, ctx->dev))) step = "cuDevicePrimaryCtxRetain";
        else if ((r = cu->ctx_set_current(ctx->cuctx))) step = "cuCtxSetCurrent";
        else {
            cu->device_attr(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ctx->dev);
            cu->device_attr(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ctx->dev);
            cu->device_attr(&ctx->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ctx->dev);
            cu->device_attr(&ctx->smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                            ctx->dev);
            ctx->cc = major * 10 + minor;
            if ((r = cu->event_create(&ctx->timer_begin, CU_EVENT_DEFAULT)) ||
                (r = cu->event_create(&ctx->timer_end, CU_EVENT_DEFAULT)))
                step = "cuEventCreate";
        }
        if (r) s = tk_cu_fail(cu, &ctx->err, r, step);
    }
    if (s == AH_OK && !(ctx->arch = tk_arch_for(ctx->cc)))
        s = ah_fail(&ctx->err, AH_ERR_UNAVAILABLE,
                    "compute capability %d.%d has no compiled kernels", major, minor);
    if (s != AH_OK) {
        snprintf(why_buf, sizeof why_buf, "%s", ctx->err.msg);
        *why = why_buf;
        tk_context_destroy(ctx);
        return s;
    }
    *out = ctx;
    return AH_OK;
}

static const char *tk_context_error(const ah_context *ctx) { return ctx->err.msg; }

/* ---- device services ------------------------------------------------------ */

static ah_status tk_mem_alloc(ah_context *ctx, size_t bytes, void **ptr)
{
    *ptr = NULL;
    ah_status s = tk_ctx_bind(ctx, &ctx->err);
    if (s) return s;
    CUdeviceptr p = 0;
    TK_CU(ctx, &ctx->err, ctx->cu->mem_alloc(&p, bytes ? bytes : 1));
    *ptr = (void *)(uintptr_t)p;
    return AH_OK;
}

static void tk_mem_free(ah_context *ctx, void *ptr)
{
    if (!ptr) return;
    ctx->cu->ctx_set_current(ctx->cuctx);
    ctx->cu->mem_free((CUdeviceptr)(uintptr_t)ptr);
}

static ah_status tk_mem_copy(ah_context *ctx, void *dst, const void *src, size_t bytes,
                             ah_copy_kind kind, void *stream)
{
    ah_status s = tk_ctx_bind(ctx, &ctx->err);
    if (s) return s;
    const ah_cu_api *cu = ctx->cu;
    CUstream st = (CUstream)stream;
    if (!bytes) return AH_OK;
    switch (kind) {
    case AH_COPY_HOST_TO_DEVICE:
        TK_CU(ctx, &ctx->err, cu->copy_htod((CUdeviceptr)(uintptr_t)dst, src, bytes, st));
        break;
    case AH_COPY_DEVICE_TO_HOST:
        TK_CU(ctx, &ctx->err, cu->copy_dtoh(dst, (CUdeviceptr)(uintptr_t)src, bytes, st));
        break;
    case AH_COPY_DEVICE_TO_DEVICE:
        TK_CU(ctx, &ctx->err,
              cu->copy_dtod((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes, st));
        return AH_OK;
    default: return ah_fail(&ctx->err, AH_ERR_INVALID_ARGUMENT, "unknown copy kind %d", kind);
    }
    /* Host memory takes part: return only when it may be reused or read. */
    TK_CU(ctx, &ctx->err, cu->stream_sync(st));
    return AH_OK;
}

static ah_status tk_synchronize(ah_context *ctx, void *stream)
{
    ah_status s = tk_ctx_bind(ctx, &ctx->err);
    if (s) return s;
    TK_CU(ctx, &ctx->err, ctx->cu->stream_sync((CUstream)stream));
    return AH_OK;
}

static ah_status tk_stream_create(ah_context *ctx, void **stream)
{
    *stream = NULL;
    ah_status s = tk_ctx_bind(ctx, &ctx->err);
    if (s) return s;
    CUstream st;
    TK_CU(ctx, &ctx->err, ctx->cu->stream_create(&st, CU_STREAM_NON_BLOCKING));
    *stream = st;
    return AH_OK;
}

static void tk_stream_destroy(ah_context *ctx, void *stream)
{
    if (!stream) return;
    ctx->cu->ctx_set_current(ctx->cuctx);
    ctx->cu->stream_destroy((CUstream)stream);
}

static ah_status tk_timer_start(ah_context *ctx, void *stream)
{
    ah_status s = tk_ctx_bind(ctx, &ctx->err);
    if (s) return s;
    TK_CU(ctx, &ctx->err, ctx->cu->event_record(ctx->timer_begin, (CUstream)stream));
    ctx->timer_running = 1;
    return AH_OK;
}

static ah_status tk_timer_stop(ah_context *ctx, void *stream, float *ms)
{
    if (!ctx->timer_running)
        return ah_fail(&ctx->err, AH_ERR_INVALID_ARGUMENT, "timer_stop without timer_start");
    ctx->timer_running = 0;
    ah_status s = tk_ctx_bind(ctx, &ctx->err);
    if (s) return s;
    TK_CU(ctx, &ctx->err, ctx->cu->event_record(ctx->timer_end, (CUstream)stream));
    TK_CU(ctx, &ctx->err, ctx->cu->event_sync(ctx->timer_end));
    TK_CU(ctx, &ctx->err, ctx->cu->event_elapsed(ms, ctx->timer_begin, ctx->timer_end));
    return AH_OK;
}

struct ah_graph {
    CUgraph graph;
    CUgraphExec exec;
};

static ah_status tk_graph_begin(ah_context *ctx, void *stream)
{
    ah_status s = tk_ctx_bind(ctx, &ctx->err);
    if (s) return s;
    if (!stream)
        return ah_fail(&ctx->err, AH_ERR_INVALID_ARGUMENT,
                       "graph capture needs a created stream, not the default stream");
    TK_CU(ctx, &ctx->err,
          ctx->cu->capture_begin((CUstream)stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    return AH_OK;
}

static ah_status tk_graph_end(ah_context *ctx, void *stream, ah_graph **out)
{
    *out = NULL;
    ah_status s = tk_ctx_bind(ctx, &ctx->err);
    if (s) return s;
    const ah_cu_api *cu = ctx->cu;
    CUgraph g = NULL;
    TK_CU(ctx, &ctx->err, cu->capture_end((CUstream)stream, &g));
    CUgraphExec ex = NULL;
    CUresult r = cu->graph_instantiate(&ex, g, 0);
    if (r != CUDA_SUCCESS) {
        cu->graph_destroy(g);
        return tk_cu_fail(cu, &ctx->err, r, "cuGraphInstantiateWithFlags");
    }
    ah_graph *h = ctx->host->alloc(ctx->host, sizeof *h);
    if (!h) {
        cu->graph_exec_destroy(ex);
        cu->graph_destroy(g);
        return ah_fail(&ctx->err, AH_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    h->graph = g;
    h->exec = ex;
    *out = h;
    return AH_OK;
}

static ah_status tk_graph_launch(ah_context *ctx, ah_graph *g, void *stream)
{
    ah_status s = tk_ctx_bind(ctx, &ctx->err);
    if (s) return s;
    TK_CU(ctx, &ctx->err, ctx->cu->graph_launch(g->exec, (CUstream)stream));
    return AH_OK;
}

static void tk_graph_destroy(ah_context *ctx, ah_graph *g)
{
    if (!g) return;
    ctx->cu->ctx_set_current(ctx->cuctx);
    ctx->cu->graph_exec_destroy(g->exec);
    ctx->cu->graph_destroy(g->graph);
    ctx->host->free(ctx->host, g);
}

/* Events order the host's split-step streams (plugin.h, ABI 2.4): a CUevent
 * (timing off) is the ah_event. */
static ah_status tk_event_create(ah_context *ctx, ah_event **out)
{
    *out = NULL;
    ah_status s = tk_ctx_bind(ctx, &ctx->err);
    if (s) return s;
    CUevent e;
    TK_CU(ctx, &ctx->err, ctx->cu->event_create(&e, CU_EVENT_DISABLE_TIMING));
    *out = (ah_event *)e;
    return AH_OK;
}

static void tk_event_destroy(ah_context *ctx, ah_event *e)
{
    if (!e) return;
    ctx->cu->ctx_set_current(ctx->cuctx);
    ctx->cu->event_destroy((CUevent)e);
}

static ah_status tk_event_record(ah_context *ctx, ah_event *e, void *stream)
{
    ah_status s = tk_ctx_bind(ctx, &ctx->err);
    if (s) return s;
    TK_CU(ctx, &ctx->err, ctx->cu->event_record((CUevent)e, (CUstream)stream));
    return AH_OK;
}

static ah_status tk_stream_wait(ah_context *ctx, void *stream, ah_event *e)
{
    ah_status s = tk_ctx_bind(ctx, &ctx->err);
    if (s) return s;
    TK_CU(ctx, &ctx->err, ctx->cu->stream_wait((CUstream)stream, (CUevent)e, 0));
    return AH_OK;
}

static const char *tk_state_error(const ah_state *st) { return st->err.msg; }

static const ah_plugin_ops tk_ops = {
    .struct_size = sizeof(ah_plugin_ops),
    .probe = tk_probe,
    .context_create = tk_context_create,
    .context_destroy = tk_context_destroy,
    .context_error = tk_context_error,
    .state_create = tk_state_create,
    .state_destroy = tk_state_destroy,
    .state_error = tk_state_error,
    .plan = tk_plan,
    .forward = tk_forward,
    .write_kv = tk_write_kv,
    .merge_states = tk_merge_states,
    .workspace_size = tk_workspace_size,
    .mem_alloc = tk_mem_alloc,
    .mem_free = tk_mem_free,
    .mem_copy = tk_mem_copy,
    .synchronize = tk_synchronize,
    .stream_create = tk_stream_create,
    .stream_destroy = tk_stream_destroy,
    .timer_start = tk_timer_start,
    .timer_stop = tk_timer_stop,
    .graph_begin = tk_graph_begin,
    .graph_end = tk_graph_end,
    .graph_launch = tk_graph_launch,
    .graph_destroy = tk_graph_destroy,
    .event_create = tk_event_create,
    .event_destroy = tk_event_destroy,
    .event_record = tk_event_record,
    .stream_wait = tk_stream_wait,
};

#ifdef TK_HIP
AH_PLUGIN_DEFINE(triton_hip, "0.1.0", "attnhost", "Apache-2.0",
                 "Triton attention kernels (unified paged, split-KV decode), AOT-compiled for "
                 "gfx90a/gfx942, run through HIP's module API (untested on AMD hardware)",
                 AH_DEVICE_HIP, &tk_caps, &tk_ops)
#else
AH_PLUGIN_DEFINE(triton, "0.1.0", "attnhost", "Apache-2.0",
                 "Triton attention kernels (unified paged, split-KV decode), AOT-compiled, "
                 "run through the CUDA driver API",
                 AH_DEVICE_CUDA, &tk_caps, &tk_ops)
#endif
