/*
 * xpu: the ABI face of the plugin. Capabilities, the entry (which picks the
 * device kind from what discovery finds), the probe, contexts over one of
 * two runtimes (Level Zero or OpenCL, behind xpu_rt), states, the plan (the
 * split-KV scheduler), and forward / write_kv / merge_states as kernel
 * launches on the caller's stream.
 *
 * Device kind. On a machine with an Intel GPU (Level Zero, or an OpenCL
 * GPU) the plugin is a LEVEL_ZERO plugin of rank PRIMARY, and its tensors
 * live in device memory (DLPack kDLExtDev as the host tags LEVEL_ZERO
 * devices). With only OpenCL CPU devices (PoCL) it is a CPU plugin of rank
 * MARGINAL, below cpu_amx: its memory is OpenCL SVM allocated through its
 * own mem_alloc, which on a CPU device is host memory, so tensors are
 * tagged kDLCPU. Host memory the plugin did not allocate (an engine's or
 * a test's malloc) is served too: each launch wraps it in a
 * CL_MEM_USE_HOST_PTR buffer and completes before returning.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "xpu.h"

/* 576 / 512: absorbed MLA only (check_combination), through its own
 * portable kernel on every tier (attn.cl xpu_attn_mla) */
static const uint32_t xpu_qk_sizes[] = {64, 96, 128, 192, 256, 576};
static const uint32_t xpu_v_sizes[] = {64, 96, 128, 192, 256, 512};
static const uint32_t xpu_block_sizes[] = {16, 32, 64, 128};

static const ah_config_key xpu_keys[] = {
    AH_KEY_ENUM_ROW("runtime", "auto", "auto|level_zero|opencl",
                    "driver runtime: auto tries Level Zero, then OpenCL"),
    AH_KEY_INT_ROW(
        "device", "0", 0, 255,
        "the runtime's device index that binding device index 0 opens (index i opens device + i)"),
    AH_KEY_ENUM_ROW("tier", "auto", "auto|portable|subgroup|xmx",
                    "kernel tier: auto takes the best the device offers (xmx: matrix engines, "
                    "subgroup: Intel sub-groups, portable: OpenCL C 1.2)"),
    AH_KEY_ENUM_ROW("sub_group_size", "auto", "auto|8|16",
                    "the Intel tiers' sub-group size: auto takes 8 for xmx where the device has "
                    "it (Arc), else 16"),
    AH_KEY_INT_ROW(
        "split_chunk_min", "128", 16, 1 << 20,
        "fewest keys per split-KV chunk when a batch has too few query rows to fill the device"),
};

static void xpu_check_combination(const ah_layer_spec *spec, const ah_probe_info *probe,
                                  ah_reason_sink *sink);

#define XPU_CAPS(RANK) \
    { \
        .struct_size = sizeof(ah_caps), \
        .q_dtypes = AH_BIT(AH_DTYPE_FP32) | AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_BF16), \
        .kv_dtypes = AH_BIT(AH_DTYPE_FP32) | AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_BF16) | \
                     AH_BIT(AH_DTYPE_FP8_E4M3) | AH_BIT(AH_DTYPE_FP8_E5M2), \
        .qk_head_sizes = AH_INT_SET_LIST(xpu_qk_sizes), \
        .v_head_sizes = AH_INT_SET_LIST(xpu_v_sizes), \
        .block_sizes = AH_INT_SET_LIST(xpu_block_sizes), .preferred_block_size = 16, \
        .features = AH_FEAT_MLA | AH_FEAT_SINKS | AH_FEAT_SLIDING_WINDOW | AH_FEAT_ALIBI | \
                    AH_FEAT_SOFTCAP | AH_FEAT_NON_CAUSAL | AH_FEAT_LSE | AH_FEAT_DIFF_HEAD_SIZES | \
                    AH_FEAT_EMPTY_KV, \
        .attn_types = AH_BIT(AH_ATTN_DECODER) | AH_BIT(AH_ATTN_ENCODER) | \
                      AH_BIT(AH_ATTN_ENCODER_ONLY) | AH_BIT(AH_ATTN_ENCODER_DECODER), \
        .kv_layouts = AH_BIT(AH_KV_LAYOUT_NHD) | AH_BIT(AH_KV_LAYOUT_HND), \
        .preferred_kv_layout = AH_KV_LAYOUT_NHD, .graph_level = AH_GRAPH_ALWAYS, \
        .caller_output = 1, .config_keys = xpu_keys, \
        .n_config_keys = sizeof xpu_keys / sizeof xpu_keys[0], \
        .check_combination = xpu_check_combination, .prefill_rank = RANK, .decode_rank = RANK, \
        .mixed_batch = AH_MIXED_WHOLE, .decode_query_len_max = 1, \
    }

/* EMPTY_KV: a request with seq_len 0 copies no block-table entry in the
 * plan and gets the empty key range in xpu_attn (out 0, LSE -inf), and
 * merge_states never reads a part whose LSE is -inf. */
static const ah_caps xpu_caps_gpu = XPU_CAPS(AH_RANK_PRIMARY);
static const ah_caps xpu_caps_cpu = XPU_CAPS(AH_RANK_MARGINAL);

/* Why spec is no layer xpu serves beyond what the caps say (MLA's sizes
 * and its one KV head), NULL when it is one; the detail in v. */
static const char *xpu_combination_why(const ah_layer_spec *spec, char *v, size_t cap,
                                       const char **field)
{
    if (spec->num_kv_heads == 0 || spec->num_q_heads % spec->num_kv_heads != 0) {
        snprintf(v, cap, "%u/%u", spec->num_q_heads, spec->num_kv_heads);
        *field = "num_q_heads/num_kv_heads";
        return "a whole number of query heads per KV head";
    }
    const int mla_sizes = spec->qk_head_size == 576 || spec->v_head_size == 512;
    if (spec->use_mla && spec->num_kv_heads != 1) {
        snprintf(v, cap, "%u", spec->num_kv_heads);
        *field = "num_kv_heads";
        return "1 with MLA";
    }
    if (spec->use_mla && !(spec->qk_head_size == 576 && spec->v_head_size == 512)) {
        snprintf(v, cap, "%u/%u", spec->qk_head_size, spec->v_head_size);
        *field = "qk_head_size/v_head_size";
        return "576/512 with MLA";
    }
    if (!spec->use_mla && mla_sizes) {
        snprintf(v, cap, "%u/%u", spec->qk_head_size, spec->v_head_size);
        *field = "qk_head_size/v_head_size";
        return "576 and 512 only with MLA";
    }
    return NULL;
}

static void xpu_check_combination(const ah_layer_spec *spec, const ah_probe_info *probe,
                                  ah_reason_sink *sink)
{
    char v[64];
    const char *field = NULL, *want = xpu_combination_why(spec, v, sizeof v, &field);
    (void)probe;
    if (want) sink->add(sink, AH_REASON_COMBINATION, field, v, want);
}

/* ---- runtime and device choice ---------------------------------------------- */

typedef struct xpu_pick {
    const xpu_rt *rt;
    int index;
    xpu_devinfo info;
    xpu_kernels kern;
} xpu_pick;

static int64_t key_int(const ah_host_services *host, const char *key)
{
    return host && host->config_int ? host->config_int(host, key) : 0;
}

/* The tier ([plugin.xpu] tier, auto: the best the device offers) and the
 * Intel tiers' sub-group size. xmx takes 8 lanes where the device has
 * them, else 16: Arc's dpas is 8 lanes wide and PVC has no sub-group of 8
 * (a module of the other width compiles, but without dpas on Arc). */
static ah_status xpu_tier_choose(const ah_host_services *host, const xpu_devinfo *info,
                                 xpu_kernels *kern, char *why, size_t cap)
{
    static const xpu_tier want_tier[4] = {XPU_TIER_XMX, XPU_TIER_PORTABLE, XPU_TIER_SUBGROUP,
                                          XPU_TIER_XMX};
    static const int want_sg[3] = {0, 8, 16};
    const int64_t tk = key_int(host, "tier"), sk = key_int(host, "sub_group_size");
    const int forced = tk != 0;
    xpu_tier t = want_tier[tk >= 0 && tk < 4 ? tk : 0];
    if (!forced && t == XPU_TIER_XMX && !info->xmx) t = XPU_TIER_SUBGROUP;
    if (!forced && t == XPU_TIER_SUBGROUP && !info->sg_sizes) t = XPU_TIER_PORTABLE;
    kern->tier = t;
    kern->sg = 0;
    if (t == XPU_TIER_PORTABLE) return AH_OK;
    if (!info->sg_sizes) {
        snprintf(why, cap,
                 "[plugin.xpu] tier = %s: %s takes no SPIR-V with cl_intel_subgroups and required "
                 "sub-group sizes of 8 or 16",
                 xpu_tier_names[t], info->name);
        return AH_ERR_UNAVAILABLE;
    }
    if (t == XPU_TIER_XMX && !info->xmx) {
        snprintf(why, cap,
                 "[plugin.xpu] tier = xmx: %s has no matrix engines "
                 "(cl_intel_subgroup_matrix_multiply_accumulate)",
                 info->name);
        return AH_ERR_UNAVAILABLE;
    }
    const int native =
        t == XPU_TIER_XMX ? ((info->sg_sizes & 8) ? 8 : 16) : ((info->sg_sizes & 16) ? 16 : 8);
    const int sg = want_sg[sk >= 0 && sk < 3 ? sk : 0] ? want_sg[sk] : native;
    if (!(info->sg_sizes & (uint32_t)sg) || (t == XPU_TIER_XMX && sg != native)) {
        snprintf(why, cap,
                 "[plugin.xpu] sub_group_size = %d: the %s tier on %s runs sub-groups of %d", sg,
                 xpu_tier_names[t], info->name, native);
        return AH_ERR_UNAVAILABLE;
    }
    kern->sg = sg;
    return AH_OK;
}

static ah_status xpu_choose(const ah_host_services *host, int offset, xpu_pick *p, char *why,
                            size_t cap)
{
    const int64_t want = key_int(host, "runtime");
    const int base = (int)key_int(host, "device");
    char e1[200] = "", e2[200] = "";
    memset(p, 0, sizeof *p);
    p->index = base + offset;
    if (want != XPU_RT_OPENCL) {
        p->rt = &xpu_rt_level_zero;
        if (xpu_rt_level_zero.discover(p->index, &p->info, e1, sizeof e1) == AH_OK)
            return xpu_tier_choose(host, &p->info, &p->kern, why, cap);
        if (want == XPU_RT_LEVEL_ZERO) {
            snprintf(why, cap, "[plugin.xpu] runtime = level_zero: %s", e1);
            return AH_ERR_UNAVAILABLE;
        }
    }
    p->rt = &xpu_rt_opencl;
    if (xpu_rt_opencl.discover(p->index, &p->info, e2, sizeof e2) == AH_OK)
        return xpu_tier_choose(host, &p->info, &p->kern, why, cap);
    if (want == XPU_RT_OPENCL) snprintf(why, cap, "[plugin.xpu] runtime = opencl: %s", e2);
    else snprintf(why, cap, "level_zero: %s; opencl: %s", e1, e2);
    return AH_ERR_UNAVAILABLE;
}

/* ---- contexts ---------------------------------------------------------------- */

typedef struct xpu_alloc_rec {
    uintptr_t base;
    size_t size;
} xpu_alloc_rec;

struct ah_context {
    const ah_host_services *host;
    const xpu_rt *rt;
    xpu_dev *dev;
    xpu_devinfo info;
    xpu_kernels kern; /* the tier the device was opened with */
    int cpu_kind;     /* the descriptor is AH_DEVICE_CPU */
    uint32_t split_chunk_min;
    void *dummy;        /* a valid pointer for absent optional tensors */
    pthread_mutex_t mu; /* the allocation registry */
    xpu_alloc_rec *allocs;
    size_t n_allocs, cap_allocs;
    ah_errbuf err;
};

static int xpu_is_cpu_kind(void);

static _Thread_local char xpu_why[320];

static ah_status reg_add(ah_context *c, void *p, size_t n)
{
    pthread_mutex_lock(&c->mu);
    if (c->n_allocs == c->cap_allocs) {
        size_t nc = c->cap_allocs ? 2 * c->cap_allocs : 64;
        xpu_alloc_rec *a = c->host->alloc(c->host, nc * sizeof *a);
        if (!a) {
            pthread_mutex_unlock(&c->mu);
            return AH_ERR_OUT_OF_MEMORY;
        }
        if (c->n_allocs) memcpy(a, c->allocs, c->n_allocs * sizeof *a);
        c->host->free(c->host, c->allocs);
        c->allocs = a;
        c->cap_allocs = nc;
    }
    c->allocs[c->n_allocs++] = (xpu_alloc_rec){(uintptr_t)p, n};
    pthread_mutex_unlock(&c->mu);
    return AH_OK;
}

static void reg_del(ah_context *c, void *p)
{
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n_allocs; i++)
        if (c->allocs[i].base == (uintptr_t)p) {
            c->allocs[i] = c->allocs[--c->n_allocs];
            break;
        }
    pthread_mutex_unlock(&c->mu);
}

/* Is [p, p + n) inside one allocation of this context? */
static int reg_has(ah_context *c, const void *p, size_t n)
{
    const uintptr_t a = (uintptr_t)p;
    int yes = 0;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n_allocs && !yes; i++)
        yes = a >= c->allocs[i].base && a + n <= c->allocs[i].base + c->allocs[i].size;
    pthread_mutex_unlock(&c->mu);
    return yes;
}

static ah_status xpu_probe(const ah_host_services *host, ah_probe_info *info)
{
    xpu_pick p;
    char why[256];
    ah_status s = xpu_choose(host, 0, &p, why, sizeof why);
    info->usable = s == AH_OK;
    if (s != AH_OK) {
        ah_strlcpy(info->reason, why, sizeof info->reason);
        return AH_OK;
    }
    ah_strlcpy(info->device_name, p.info.name, sizeof info->device_name);
    char sg[8] = "";
    if (p.kern.sg) snprintf(sg, sizeof sg, "%d", p.kern.sg);
    snprintf(info->arch, sizeof info->arch, "%.10s %.3s %s%s", p.rt->name,
             p.info.is_gpu ? "gpu" : "cpu", xpu_tier_names[p.kern.tier], sg);
    info->device_count = p.info.count;
    info->multiprocessors = p.info.compute_units;
    info->memory_bytes = p.info.memory;
    ah_strlcpy(info->driver_version, p.info.driver, sizeof info->driver_version);
    /* the descriptor's kind was fixed at entry from the same discovery */
    if (p.info.is_gpu == xpu_is_cpu_kind()) {
        info->usable = 0;
        snprintf(info->reason, sizeof info->reason,
                 "device %d (%s) is a %s device, but this plugin serves %s devices here", p.index,
                 p.info.name, p.info.is_gpu ? "GPU" : "CPU", p.info.is_gpu ? "CPU" : "GPU");
    }
    return AH_OK;
}

static void xpu_context_destroy(ah_context *c)
{
    if (!c) return;
    if (c->dummy) c->rt->free(c->dev, c->dummy);
    if (c->dev) c->rt->close(c->dev);
    c->host->free(c->host, c->allocs);
    pthread_mutex_destroy(&c->mu);
    c->host->free(c->host, c);
}

static ah_status xpu_context_create(const ah_host_services *host, const ah_context_options *opts,
                                    ah_context **out, const char **why)
{
    *out = NULL;
    xpu_pick p;
    ah_status s = xpu_choose(host, opts ? opts->device_index : 0, &p, xpu_why, sizeof xpu_why);
    if (s == AH_OK && p.info.is_gpu == xpu_is_cpu_kind()) {
        snprintf(xpu_why, sizeof xpu_why, "device %d (%s) is not of this plugin's device kind here",
                 p.index, p.info.name);
        s = AH_ERR_UNAVAILABLE;
    }
    if (s != AH_OK) {
        *why = xpu_why;
        return s;
    }
    ah_context *c = host->alloc(host, sizeof *c);
    if (!c) {
        *why = "out of memory creating the xpu context";
        return AH_ERR_OUT_OF_MEMORY;
    }
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    c->host = host;
    c->rt = p.rt;
    c->info = p.info;
    c->kern = p.kern;
    c->cpu_kind = xpu_is_cpu_kind();
    c->split_chunk_min =
        host->config_int ? (uint32_t)host->config_int(host, "split_chunk_min") : 128;
    if (c->split_chunk_min < 16) c->split_chunk_min = 128;
    s = p.rt->open(p.index, p.kern, &c->dev, xpu_why, sizeof xpu_why);
    if (s == AH_OK) s = p.rt->alloc(c->dev, 256, &c->dummy, xpu_why, sizeof xpu_why);
    if (s != AH_OK) {
        xpu_context_destroy(c);
        *why = xpu_why;
        return s;
    }
    *out = c;
    return AH_OK;
}

static const char *xpu_context_error(const ah_context *c) { return c->err.msg; }

/* ---- memory, streams, timers --------------------------------------------------- */

static ah_status xpu_mem_alloc(ah_context *c, size_t bytes, void **ptr)
{
    ah_status s = c->rt->alloc(c->dev, bytes, ptr, c->err.msg, sizeof c->err.msg);
    if (s != AH_OK) return s;
    if (reg_add(c, *ptr, bytes ? bytes : 64) != AH_OK) {
        c->rt->free(c->dev, *ptr);
        *ptr = NULL;
        return ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "out of host memory recording an allocation");
    }
    return AH_OK;
}

static void xpu_mem_free(ah_context *c, void *ptr)
{
    if (!ptr) return;
    reg_del(c, ptr);
    c->rt->free(c->dev, ptr);
}

static ah_status xpu_mem_copy(ah_context *c, void *dst, const void *src, size_t bytes,
                              ah_copy_kind kind, void *stream)
{
    (void)kind;
    return c->rt->copy(c->dev, stream, dst, src, bytes, c->err.msg, sizeof c->err.msg);
}

static ah_status xpu_synchronize(ah_context *c, void *stream)
{
    return c->rt->sync(c->dev, stream, c->err.msg, sizeof c->err.msg);
}

static ah_status xpu_stream_create(ah_context *c, void **stream)
{
    return c->rt->stream_create(c->dev, stream, c->err.msg, sizeof c->err.msg);
}

static void xpu_stream_destroy(ah_context *c, void *stream)
{
    c->rt->stream_destroy(c->dev, stream);
}

static ah_status xpu_timer_start(ah_context *c, void *stream)
{
    return c->rt->timer_start(c->dev, stream, c->err.msg, sizeof c->err.msg);
}

static ah_status xpu_timer_stop(ah_context *c, void *stream, float *ms)
{
    return c->rt->timer_stop(c->dev, stream, ms, c->err.msg, sizeof c->err.msg);
}

/* ---- graphs -------------------------------------------------------------------- */

/* The runtime's graph is the ABI's (ah_graph is opaque to the host). */
static ah_status xpu_graph_begin(ah_context *c, void *stream)
{
    return c->rt->graph_begin(c->dev, stream, c->err.msg, sizeof c->err.msg);
}

static ah_status xpu_graph_end(ah_context *c, void *stream, ah_graph **out)
{
    xpu_graph *g = NULL;
    ah_status s = c->rt->graph_end(c->dev, stream, &g, c->err.msg, sizeof c->err.msg);
    *out = (ah_graph *)g;
    return s;
}

static ah_status xpu_graph_launch(ah_context *c, ah_graph *g, void *stream)
{
    return c->rt->graph_launch(c->dev, (xpu_graph *)g, stream, c->err.msg, sizeof c->err.msg);
}

static void xpu_graph_destroy(ah_context *c, ah_graph *g)
{
    c->rt->graph_destroy(c->dev, (xpu_graph *)g);
}

/* ---- states -------------------------------------------------------------------- */

/* A device buffer the state grows on demand. */
typedef struct xpu_buf {
    void *p;
    size_t cap;
} xpu_buf;

/* A plan's device metadata: what the kernels read besides the tensors. */
typedef struct xpu_meta {
    xpu_buf qsl, seq_lens, bt, slots, items, dest, splits, part_o, part_lse, blocks;
} xpu_meta;
#define XPU_META_BUFS(m) \
    { \
        &(m)->qsl, &(m)->seq_lens, &(m)->bt, &(m)->slots, &(m)->items, &(m)->dest, &(m)->splits, \
            &(m)->part_o, &(m)->part_lse, &(m)->blocks \
    }

struct ah_state {
    ah_context *ctx;
    ah_layer_spec spec;
    float scale;
    int mode; /* 0 causal, 1 bidirectional, 2 cross */
    /* Attention through the Intel tier's kernel (fp16 and bf16 queries on
     * a device opened with an Intel tier; fp32 takes the portable one). Its
     * row blocks: hpr query heads of a KV head times up to tpb work items,
     * the group's heads in n_hchunks chunks (attn_intel.cl). */
    int intel, hpr, tpb, n_hchunks;
    ah_limits lim;
    /* the last plan, and the metadata it wrote: eager plans into their own
     * buffers, which grow as batches need; CAPTURE and REPLAY plans into
     * the graph's, sized once from the limits, so that an eager plan
     * between replays never moves what a recorded launch points to */
    int planned;
    uint32_t num_tokens, n_items, n_splits, bt_width, n_blocks;
    int32_t max_block;
    xpu_meta eager, graph, *cur;
    /* what the CAPTURE plan fixed (0: no capture yet): the launch's query
     * tokens and table width, and the key cache's blocks at capture */
    uint32_t g_tokens, g_width;
    int64_t g_cache_blocks;
    int replaying; /* inside plan(REPLAY) */
    /* host staging */
    int32_t *h_items, *h_dest, *h_splits, *h_bt, *h_blocks;
    size_t h_items_cap, h_splits_cap, h_bt_cap, h_blocks_cap;
    ah_errbuf err;
};

static void buf_free(ah_state *st, xpu_buf *b)
{
    if (b->p) st->ctx->rt->free(st->ctx->dev, b->p);
    b->p = NULL;
    b->cap = 0;
}

static ah_status buf_need(ah_state *st, xpu_buf *b, size_t bytes, void *stream)
{
    if (bytes <= b->cap && b->p) return AH_OK;
    ah_context *c = st->ctx;
    if (st->replaying) /* a replay never moves the graph's buffers */
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "plan(REPLAY) needs %zu bytes where the captured buffer holds %zu", bytes,
                       b->cap);
    if (b->p) {
        c->rt->sync(c->dev, stream, st->err.msg, sizeof st->err.msg); /* work may still read it */
        buf_free(st, b);
    }
    size_t n = bytes < 256 ? 256 : bytes + bytes / 2;
    ah_status s = c->rt->alloc(c->dev, n, &b->p, st->err.msg, sizeof st->err.msg);
    if (s == AH_OK) b->cap = n;
    return s;
}

static ah_status host_need(ah_state *st, int32_t **p, size_t *cap, size_t n)
{
    if (n <= *cap) return AH_OK;
    const ah_host_services *h = st->ctx->host;
    h->free(h, *p);
    *cap = n + n / 2 + 16;
    *p = h->alloc(h, *cap * sizeof(int32_t));
    if (!*p) {
        *cap = 0;
        return ah_fail(&st->err, AH_ERR_OUT_OF_MEMORY, "out of host memory planning a batch");
    }
    return AH_OK;
}

static ah_status xpu_state_create(ah_context *ctx, const ah_layer_spec *spec, const ah_limits *lim,
                                  ah_state **out)
{
    *out = NULL;
    const ah_caps *c = &xpu_caps_gpu;
    ah_status rc = ah_spec_check_caps(spec, c, &ctx->err);
    if (rc != AH_OK) return rc;
    char v[64];
    const char *field = NULL, *want = xpu_combination_why(spec, v, sizeof v, &field);
    if (want) return ah_fail(&ctx->err, AH_ERR_UNSUPPORTED, "%s %s: xpu serves %s", field, v, want);
    if (!(spec->softcap >= 0.0f) || !isfinite(spec->softcap))
        return ah_fail(&ctx->err, AH_ERR_INVALID_ARGUMENT, "softcap %g is not a finite value >= 0",
                       (double)spec->softcap);
    ah_state *st = ctx->host->alloc(ctx->host, sizeof *st);
    if (!st) return ah_fail(&ctx->err, AH_ERR_OUT_OF_MEMORY, "out of memory creating a state");
    memset(st, 0, sizeof *st);
    st->ctx = ctx;
    memcpy(&st->spec, spec, sizeof st->spec);
    if (lim && lim->struct_size >= sizeof st->lim) st->lim = *lim;
    st->cur = &st->eager;
    st->scale = spec->scale != 0.0f ? spec->scale : 1.0f / sqrtf((float)spec->qk_head_size);
    st->mode = spec->attn_type == AH_ATTN_DECODER           ? 0
               : spec->attn_type == AH_ATTN_ENCODER_DECODER ? 2
                                                            : 1;
    const int group = (int)(spec->num_q_heads / spec->num_kv_heads);
    /* MLA's rows (8 queries x 512 fp32 accumulators, 576-wide query
     * operands) are past the Intel kernel's register budget: its portable
     * kernel serves it on every tier */
    st->intel = ctx->kern.tier != XPU_TIER_PORTABLE && !spec->use_mla &&
                (spec->q_dtype == AH_DTYPE_FP16 || spec->q_dtype == AH_DTYPE_BF16);
    st->hpr = group < 8 ? group : 8;
    st->tpb = 8 / st->hpr;
    st->n_hchunks = (group + st->hpr - 1) / st->hpr;
    *out = st;
    return AH_OK;
}

static void xpu_state_destroy(ah_state *st)
{
    if (!st) return;
    xpu_buf *bufs[] = XPU_META_BUFS(&st->eager), *gbufs[] = XPU_META_BUFS(&st->graph);
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        buf_free(st, bufs[i]);
        buf_free(st, gbufs[i]);
    }
    const ah_host_services *h = st->ctx->host;
    h->free(h, st->h_items);
    h->free(h, st->h_dest);
    h->free(h, st->h_splits);
    h->free(h, st->h_bt);
    h->free(h, st->h_blocks);
    h->free(h, st);
}

static const char *xpu_state_error(const ah_state *st) { return st->err.msg; }

/* The key range query token i of a request may see (the kernel clamps the
 * same way; the plan uses it to size split-KV chunks). */
static void visible(const ah_state *st, int64_t p, int64_t len, int64_t *lo, int64_t *hi)
{
    const int64_t w = st->spec.sliding_window;
    *lo = 0;
    *hi = len;
    if (st->mode == 0) {
        if (*hi > p + 1) *hi = p + 1;
        if (w > 0 && *lo < p - w + 1) *lo = p - w + 1;
    } else if (st->mode == 1 && w > 0) {
        if (*lo < p - w + 1) *lo = p - w + 1;
        if (*hi > p + w) *hi = p + w;
    }
    if (*hi < *lo) *hi = *lo;
}

static ah_status upload(ah_state *st, xpu_buf *b, const void *src, size_t bytes, void *stream)
{
    ah_context *c = st->ctx;
    ah_status s = buf_need(st, b, bytes, stream);
    if (s == AH_OK && bytes)
        s = c->rt->copy(c->dev, stream, b->p, src, bytes, st->err.msg, sizeof st->err.msg);
    return s;
}

/* The Intel kernel's row blocks over the plan's work items: up to tpb
 * consecutive unsplit items of one request (consecutive query tokens,
 * which read the same keys), or one split-KV item. blocks[i] = (first
 * item, number of items). A graph's plans take tpb 1: their block count
 * is then the token count, which a replay may not change. */
static ah_status plan_blocks(ah_state *st, size_t n_items, int tpb, size_t *n_blocks)
{
    ah_status s = host_need(st, &st->h_blocks, &st->h_blocks_cap, 2 * n_items + 2);
    if (s != AH_OK) return s;
    size_t nb = 0;
    for (size_t i = 0; i < n_items; i++) {
        int32_t *cur = st->h_blocks + 2 * (nb ? nb - 1 : 0);
        const int joins = nb && st->h_dest[i] < 0 && st->h_dest[cur[0]] < 0 && cur[1] < tpb &&
                          st->h_items[4 * (size_t)cur[0] + 1] == st->h_items[4 * i + 1];
        if (joins) {
            cur[1]++;
        } else {
            st->h_blocks[2 * nb] = (int32_t)i;
            st->h_blocks[2 * nb + 1] = 1;
            nb++;
        }
    }
    *n_blocks = nb;
    return AH_OK;
}

/* What a CAPTURE or REPLAY plan needs of its batch, checked before
 * anything is written: the state's limits; for a replay, an earlier
 * capture, the captured token count (a launch's size) and blocks inside
 * the key cache the capture saw. */
static ah_status check_graph_batch(ah_state *st, const ah_batch *b, ah_plan_mode mode)
{
    const ah_limits *l = &st->lim;
    if (mode == AH_PLAN_EAGER) return AH_OK;
    if (!l->max_num_reqs || !l->max_num_tokens || !l->max_blocks_per_req)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "plan(CAPTURE/REPLAY) needs the state's limits (max_num_reqs, "
                       "max_num_tokens, max_blocks_per_req), given at state_create");
    if (b->num_reqs > l->max_num_reqs || b->num_tokens > l->max_num_tokens)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "%u requests / %u tokens exceed the state's limits %u / %u", b->num_reqs,
                       b->num_tokens, l->max_num_reqs, l->max_num_tokens);
    if (mode == AH_PLAN_CAPTURE) return AH_OK;
    if (!st->g_tokens)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "plan(REPLAY) without an earlier plan(CAPTURE) on this state");
    if (b->num_tokens != st->g_tokens)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "plan(REPLAY) of %u query tokens; the graph was captured with %u",
                       b->num_tokens, st->g_tokens);
    const uint32_t bs = st->spec.block_size;
    for (uint32_t r = 0; r < b->num_reqs && st->g_cache_blocks; r++) {
        const uint32_t nb = ((uint32_t)b->seq_lens_host[r] + bs - 1) / bs;
        const int32_t *row = b->block_table_host + (size_t)r * b->block_table_stride;
        for (uint32_t i = 0; i < nb && i < b->block_table_stride; i++)
            if (row[i] < 0 || row[i] >= st->g_cache_blocks)
                return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                               "request %u's block %d is outside the captured key cache's %lld "
                               "blocks",
                               r, row[i], (long long)st->g_cache_blocks);
    }
    return AH_OK;
}

/* A capture's buffers, sized once from the limits (the table W wide). */
static ah_status graph_buffers(ah_state *st, uint32_t W, void *stream)
{
    const size_t R = st->lim.max_num_reqs, T = st->lim.max_num_tokens;
    xpu_meta *m = &st->graph;
    ah_status s;
    if ((s = buf_need(st, &m->qsl, (R + 1) * sizeof(int32_t), stream)) != AH_OK ||
        (s = buf_need(st, &m->seq_lens, R * sizeof(int32_t), stream)) != AH_OK ||
        (s = buf_need(st, &m->bt, R * W * sizeof(int32_t), stream)) != AH_OK ||
        (s = buf_need(st, &m->slots, T * sizeof(int64_t), stream)) != AH_OK ||
        (s = buf_need(st, &m->items, T * 4 * sizeof(int32_t), stream)) != AH_OK ||
        (s = buf_need(st, &m->dest, T * sizeof(int32_t), stream)) != AH_OK ||
        (s = buf_need(st, &m->blocks, T * 2 * sizeof(int32_t), stream)) != AH_OK ||
        (s = buf_need(st, &m->splits, 0, stream)) != AH_OK ||
        (s = buf_need(st, &m->part_o, 0, stream)) != AH_OK ||
        (s = buf_need(st, &m->part_lse, 0, stream)) != AH_OK)
        return s;
    return AH_OK;
}

static ah_status xpu_plan(ah_state *st, const ah_batch *b, ah_plan_mode mode, void *stream)
{
    st->planned = 0;
    if (!b) return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "batch is NULL");
    if (mode != AH_PLAN_EAGER && mode != AH_PLAN_CAPTURE && mode != AH_PLAN_REPLAY)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "plan mode %d", (int)mode);
    if (!b->query_start_loc_host || !b->seq_lens_host || !b->block_table_host ||
        !b->slot_mapping_host)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "the batch lacks its host copies");
    const uint32_t R = b->num_reqs, T = b->num_tokens, bs = st->spec.block_size,
                   hq = st->spec.num_q_heads;
    const int graph = mode != AH_PLAN_EAGER;
    ah_status s;
    if ((s = check_graph_batch(st, b, mode)) != AH_OK) return s;
    /* block table, compacted to the widest request of this batch; only a
     * request's own blocks are copied, so the row of a request with no
     * keys (AH_FEAT_EMPTY_KV), which may be garbage, is never read */
    uint32_t W = 1;
    st->max_block = -1;
    for (uint32_t r = 0; r < R; r++) {
        uint32_t nb = ((uint32_t)b->seq_lens_host[r] + bs - 1) / bs;
        if (nb > W) W = nb;
    }
    if (R && W > b->block_table_stride && b->block_table_stride)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "a request needs %u blocks, the table has %u columns", W,
                       b->block_table_stride);
    if (graph) {
        /* the table's width is a launch argument: the limits' at capture */
        const uint32_t gw = mode == AH_PLAN_CAPTURE ? st->lim.max_blocks_per_req : st->g_width;
        if (W > gw)
            return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                           "a request needs %u blocks; the graph's table holds %u a request", W,
                           gw);
        W = gw;
    }
    if ((s = host_need(st, &st->h_bt, &st->h_bt_cap, (size_t)R * W + 1)) != AH_OK) return s;
    for (uint32_t r = 0; r < R; r++) {
        const int32_t *row = b->block_table_host + (size_t)r * b->block_table_stride;
        uint32_t nb = ((uint32_t)b->seq_lens_host[r] + bs - 1) / bs;
        for (uint32_t i = 0; i < W; i++) {
            st->h_bt[(size_t)r * W + i] = i < nb ? row[i] : 0;
            if (i < nb && row[i] > st->max_block) st->max_block = row[i];
        }
    }
    /* work items: one per query token, long visible ranges cut into chunks
     * when the batch has too few query rows to fill the device. Every token
     * gets at least one item, so every output row is written; a token with
     * no visible key (a request with seq_len 0) gets one unsplit item of
     * the empty range, which xpu_attn ends as out 0, LSE -inf. */
    const uint64_t lanes =
        (uint64_t)(st->ctx->info.compute_units ? st->ctx->info.compute_units : 1) * 256u;
    const uint64_t rows = (uint64_t)T * hq;
    uint64_t chunk = UINT64_MAX;
    if (!graph && rows && rows < lanes) { /* a graph's item count is its token count */
        const uint64_t want_items = lanes / hq > T ? lanes / hq : T;
        chunk = ((uint64_t)b->max_seq_len * T + want_items - 1) / want_items;
        if (chunk < st->ctx->split_chunk_min) chunk = st->ctx->split_chunk_min;
    }
    size_t n_items = 0, n_splits = 0, n_parts = 0;
    for (int pass = 0; pass < 2; pass++) {
        n_items = n_splits = n_parts = 0;
        for (uint32_t r = 0; r < R; r++) {
            const int32_t q0 = b->query_start_loc_host[r], qn = b->query_start_loc_host[r + 1] - q0;
            const int64_t len = b->seq_lens_host[r];
            for (int32_t i = 0; i < qn; i++) {
                int64_t lo, hi;
                visible(st, len - qn + i, len, &lo, &hi);
                const int64_t range = hi - lo;
                const uint64_t nc = chunk != UINT64_MAX && (uint64_t)range > chunk
                                        ? ((uint64_t)range + chunk - 1) / chunk
                                        : 1;
                if (pass) {
                    if (nc > 1) {
                        int32_t *sp = st->h_splits + 4 * n_splits;
                        sp[0] = q0 + i, sp[1] = (int32_t)n_parts, sp[2] = (int32_t)nc, sp[3] = 0;
                    }
                    for (uint64_t k = 0; k < nc; k++) {
                        int32_t *it = st->h_items + 4 * (n_items + k);
                        it[0] = q0 + i;
                        it[1] = (int32_t)r;
                        it[2] = nc > 1 ? (int32_t)(lo + (int64_t)(k * chunk)) : 0;
                        it[3] = nc > 1 ? (int32_t)(lo + (int64_t)((k + 1) * chunk) < hi
                                                       ? lo + (int64_t)((k + 1) * chunk)
                                                       : hi)
                                       : (int32_t)len;
                        st->h_dest[n_items + k] = nc > 1 ? (int32_t)(n_parts + k) : -1;
                    }
                }
                n_items += nc;
                if (nc > 1) n_splits++, n_parts += nc;
            }
        }
        if (!pass) {
            if ((s = host_need(st, &st->h_items, &st->h_items_cap, 4 * (n_items + T) + 4)) != AH_OK)
                return s;
            st->ctx->host->free(st->ctx->host, st->h_dest);
            st->h_dest =
                st->ctx->host->alloc(st->ctx->host, (st->h_items_cap / 4 + 1) * sizeof(int32_t));
            if (!st->h_dest)
                return ah_fail(&st->err, AH_ERR_OUT_OF_MEMORY,
                               "out of host memory planning a batch");
            if ((s = host_need(st, &st->h_splits, &st->h_splits_cap, 4 * n_splits + 4)) != AH_OK)
                return s;
        }
    }
    /* A graph launches one item per token of the batch: tokens past the
     * last request (an engine's padding) get items of no request, which the
     * kernels skip, so that the count is the same in every replay. */
    for (; graph && n_items < T; n_items++) {
        int32_t *it = st->h_items + 4 * n_items;
        it[0] = (int32_t)n_items, it[1] = -1, it[2] = it[3] = 0;
        st->h_dest[n_items] = -1;
    }
    size_t n_blocks = 0;
    if (st->intel && (s = plan_blocks(st, n_items, graph ? 1 : st->tpb, &n_blocks)) != AH_OK)
        return s;
    xpu_meta *m = graph ? &st->graph : &st->eager;
    if (mode == AH_PLAN_CAPTURE && (s = graph_buffers(st, W, stream)) != AH_OK) return s;
    st->cur = m;
    st->replaying = mode == AH_PLAN_REPLAY;
    const size_t dv = st->spec.v_head_size;
    if ((s = upload(st, &m->blocks, st->h_blocks, n_blocks * 2 * sizeof(int32_t), stream)) !=
            AH_OK ||
        (s = upload(st, &m->qsl, b->query_start_loc_host, (R + 1) * sizeof(int32_t), stream)) !=
            AH_OK ||
        (s = upload(st, &m->seq_lens, b->seq_lens_host, R * sizeof(int32_t), stream)) != AH_OK ||
        (s = upload(st, &m->bt, st->h_bt, (size_t)R * W * sizeof(int32_t), stream)) != AH_OK ||
        (s = upload(st, &m->slots, b->slot_mapping_host, T * sizeof(int64_t), stream)) != AH_OK ||
        (s = upload(st, &m->items, st->h_items, n_items * 4 * sizeof(int32_t), stream)) != AH_OK ||
        (s = upload(st, &m->dest, st->h_dest, n_items * sizeof(int32_t), stream)) != AH_OK ||
        (s = upload(st, &m->splits, st->h_splits, n_splits * 4 * sizeof(int32_t), stream)) !=
            AH_OK ||
        (s = buf_need(st, &m->part_o, n_parts * hq * dv * sizeof(float), stream)) != AH_OK ||
        (s = buf_need(st, &m->part_lse, n_parts * hq * sizeof(float), stream)) != AH_OK) {
        st->replaying = 0;
        return s;
    }
    st->replaying = 0;
    if (mode == AH_PLAN_CAPTURE) st->g_tokens = T, st->g_width = W, st->g_cache_blocks = 0;
    st->num_tokens = T;
    st->n_items = (uint32_t)n_items;
    st->n_splits = (uint32_t)n_splits;
    st->n_blocks = (uint32_t)n_blocks;
    st->bt_width = W;
    st->planned = 1;
    return AH_OK;
}

/* ---- tensor checks --------------------------------------------------------------- */

/* Check a tensor; *x gets its extent and whether it is foreign memory:
 * allowed on a CPU device through OpenCL (host memory that an engine or a
 * test allocated itself; the launch wraps it), refused elsewhere. */
static ah_status check_tensor(ah_context *c, ah_errbuf *e, const DLTensor *t, const char *name,
                              ah_dtype dt, int ndim, const int64_t *shape, xpu_ext *x)
{
    x->bytes = 0;
    x->foreign = 0;
    if (!t) return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s is NULL", name);
    if (!ah_dl_dtype_is(t, dt))
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "%s has DLPack dtype code %u bits %u, expected %s", name, t->dtype.code,
                       t->dtype.bits, ah_dtype_name(dt));
    if (t->ndim != ndim)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s has %d dims, expected %d", name, t->ndim,
                       ndim);
    for (int i = 0; i < ndim; i++)
        if (shape[i] >= 0 && t->shape[i] != shape[i])
            return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s dim %d is %lld, expected %lld", name, i,
                           (long long)t->shape[i], (long long)shape[i]);
    if (ah_dl_stride(t, ndim - 1) != 1)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s: the last dimension must be contiguous",
                       name);
    const int dev_ok =
        c->cpu_kind ? t->device.device_type == kDLCPU
                    : (t->device.device_type == kDLExtDev || (int)t->device.device_type == 14);
    if (!dev_ok)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "%s is on DLPack device type %d, not this plugin's", name,
                       (int)t->device.device_type);
    /* extent of the view in bytes, for the allocation check */
    int64_t last = 0;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] > 0) last += (t->shape[i] - 1) * ah_dl_stride(t, i);
    const size_t bytes = ah_dl_numel(t) > 0 ? ((size_t)last + 1) * ah_dtype_size(dt) : 0;
    x->bytes = bytes;
    x->foreign = bytes && !reg_has(c, ah_dl_data(t), bytes);
    if (x->foreign && !(c->cpu_kind && c->rt == &xpu_rt_opencl))
        return ah_fail(
            e, AH_ERR_INVALID_ARGUMENT,
            "%s is not memory from the xpu plugin's mem_alloc (%s %s): allocate tensors through the host's device",
            name, c->rt->name, c->rt == &xpu_rt_opencl ? "SVM" : "USM device memory");
    return AH_OK;
}

static ah_status check_cache(ah_state *st, const DLTensor *t, const char *name, uint32_t hsz,
                             int64_t *bs_s, int64_t *ts_s, int64_t *hs_s, xpu_ext *x)
{
    const int hnd = st->spec.kv_layout == AH_KV_LAYOUT_HND;
    const int64_t shape[4] = {-1, hnd ? st->spec.num_kv_heads : st->spec.block_size,
                              hnd ? st->spec.block_size : st->spec.num_kv_heads, hsz};
    ah_status rc = check_tensor(st->ctx, &st->err, t, name, st->spec.kv_dtype, 4, shape, x);
    if (rc != AH_OK) return rc;
    if (t->shape[0] <= st->max_block)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "%s holds %lld blocks, the plan references block %d", name,
                       (long long)t->shape[0], st->max_block);
    *bs_s = ah_dl_stride(t, 0);
    *ts_s = ah_dl_stride(t, hnd ? 2 : 1);
    *hs_s = ah_dl_stride(t, hnd ? 1 : 2);
    return AH_OK;
}

static int is_fp8(ah_dtype t) { return t == AH_DTYPE_FP8_E4M3 || t == AH_DTYPE_FP8_E5M2; }

static ah_status xpu_forward(ah_state *st, const ah_forward_args *a)
{
    ah_context *c = st->ctx;
    const ah_layer_spec *sp = &st->spec;
    if (!a) return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "forward args are NULL");
    if (!st->planned)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "forward before a successful plan");
    const int64_t T = st->num_tokens;
    const int64_t qs[3] = {T, sp->num_q_heads, sp->qk_head_size},
                  os[3] = {T, sp->num_q_heads, sp->v_head_size};
    const int64_t ls[2] = {T, sp->num_q_heads}, hs[1] = {sp->num_q_heads};
    int64_t k_bs, k_ts, k_hs, v_bs, v_ts, v_hs;
    xpu_ext xq, xo, xk, xv, xl = {0, 0}, xs = {0, 0}, xa = {0, 0};
    ah_status s;
    if ((s = check_tensor(c, &st->err, a->q, "q", sp->q_dtype, 3, qs, &xq)) != AH_OK) return s;
    if ((s = check_tensor(c, &st->err, a->out, "out", sp->q_dtype, 3, os, &xo)) != AH_OK) return s;
    if ((s = check_cache(st, a->key_cache, "key_cache", sp->qk_head_size, &k_bs, &k_ts, &k_hs,
                         &xk)) != AH_OK)
        return s;
    /* MLA's values are the key rows' first v_head_size channels */
    if (sp->use_mla) v_bs = k_bs, v_ts = k_ts, v_hs = k_hs, xv = xk;
    else if ((s = check_cache(st, a->value_cache, "value_cache", sp->v_head_size, &v_bs, &v_ts,
                              &v_hs, &xv)) != AH_OK)
        return s;
    if (st->cur == &st->graph && !st->g_cache_blocks) { /* what replays' tables may reference */
        st->g_cache_blocks = a->key_cache->shape[0];
        if (!sp->use_mla && a->value_cache->shape[0] < st->g_cache_blocks)
            st->g_cache_blocks = a->value_cache->shape[0];
    }
    void *lse = c->dummy, *sinks = c->dummy, *alibi = c->dummy;
    int64_t l_ts = 0;
    int flags = 0;
    if (a->lse) {
        if ((s = check_tensor(c, &st->err, a->lse, "lse", AH_DTYPE_FP32, 2, ls, &xl)) != AH_OK)
            return s;
        lse = ah_dl_data(a->lse), l_ts = ah_dl_stride(a->lse, 0), flags |= 1;
    }
    if (sp->use_sinks) {
        if ((s = check_tensor(c, &st->err, a->sinks, "sinks", AH_DTYPE_FP32, 1, hs, &xs)) != AH_OK)
            return s;
        sinks = ah_dl_data(a->sinks), flags |= 2;
    }
    if (sp->use_alibi) {
        if ((s = check_tensor(c, &st->err, a->alibi_slopes, "alibi_slopes", AH_DTYPE_FP32, 1, hs,
                              &xa)) != AH_OK)
            return s;
        alibi = ah_dl_data(a->alibi_slopes), flags |= 4;
    }
    const int fp8 = is_fp8(sp->kv_dtype);
    float k_scale = fp8 && a->k_scale != 0.0f ? a->k_scale : 1.0f,
          v_scale = sp->use_mla                 ? k_scale
                    : fp8 && a->v_scale != 0.0f ? a->v_scale
                                                : 1.0f;
    if (!isfinite(k_scale) || !isfinite(v_scale))
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "k_scale %g / v_scale %g are not finite",
                       (double)a->k_scale, (double)a->v_scale);
    void *q = ah_dl_data(a->q), *kc = ah_dl_data(a->key_cache),
         *vc = sp->use_mla ? kc : ah_dl_data(a->value_cache), *out = ah_dl_data(a->out);
    int64_t q_ts = ah_dl_stride(a->q, 0), q_hs = ah_dl_stride(a->q, 1),
            o_ts = ah_dl_stride(a->out, 0), o_hs = ah_dl_stride(a->out, 1);
    int q_dt = (int)AH_BIT(sp->q_dtype), kv_dt = (int)AH_BIT(sp->kv_dtype),
        bt_w = (int)st->bt_width, n_items = (int)st->n_items;
    int hq = (int)sp->num_q_heads, group = (int)(sp->num_q_heads / sp->num_kv_heads),
        d = (int)sp->qk_head_size;
    int dv = (int)sp->v_head_size, bsz = (int)sp->block_size, window = (int)sp->sliding_window,
        mode = st->mode;
    float scale = st->scale, softcap = sp->softcap;
    const xpu_meta *m = st->cur;
    void *qsl = m->qsl.p, *sl = m->seq_lens.p, *bt = m->bt.p, *items = m->items.p,
         *dest = m->dest.p;
    void *po = m->part_o.p, *pl = m->part_lse.p, *blocks = m->blocks.p;
    int n_blocks = (int)st->n_blocks, hpr = st->hpr, n_hchunks = st->n_hchunks;
    /* the Intel kernel block-reads V's rows where every row it reads starts
     * 16-byte aligned (its 2-byte elements from a multiple of 8 lanes) */
    const int64_t vstr = v_bs | v_ts | v_hs;
    if (st->intel && ah_dtype_size(sp->kv_dtype) == 2 && (uintptr_t)vc % 16 == 0 && vstr % 8 == 0)
        flags |= 8;
    /* Not reformatted: one line per group of the kernel's parameters (xpu_attn, kernels/attn.cl;
     * xpu_attn_intel takes the same, then the last line's). */
    // clang-format off
    const xpu_arg args[] = {
        XPU_TPTR(q, xq, 0), XPU_VAL(q_ts), XPU_VAL(q_hs), XPU_VAL(q_dt),
        XPU_TPTR(kc, xk, 0), XPU_VAL(k_bs), XPU_VAL(k_ts), XPU_VAL(k_hs),
        XPU_TPTR(vc, xv, 0), XPU_VAL(v_bs), XPU_VAL(v_ts), XPU_VAL(v_hs),
        XPU_VAL(kv_dt), XPU_VAL(k_scale), XPU_VAL(v_scale),
        XPU_TPTR(out, xo, 1), XPU_VAL(o_ts), XPU_VAL(o_hs),
        XPU_TPTR(lse, xl, 1), XPU_VAL(l_ts),
        XPU_TPTR(sinks, xs, 0), XPU_TPTR(alibi, xa, 0),
        XPU_PTR(qsl), XPU_PTR(sl), XPU_PTR(bt), XPU_VAL(bt_w),
        XPU_PTR(items), XPU_PTR(dest), XPU_VAL(n_items),
        XPU_PTR(po), XPU_PTR(pl),
        XPU_VAL(hq), XPU_VAL(group), XPU_VAL(d), XPU_VAL(dv), XPU_VAL(bsz),
        XPU_VAL(scale), XPU_VAL(softcap), XPU_VAL(window), XPU_VAL(mode), XPU_VAL(flags),
        XPU_PTR(blocks), XPU_VAL(n_blocks), XPU_VAL(hpr), XPU_VAL(n_hchunks),
    };
    // clang-format on
    const int n_args = (int)(sizeof args / sizeof args[0]);
    const uint32_t sg = (uint32_t)c->kern.sg;
    if (st->intel)
        s = c->rt->launch(c->dev, a->stream, XPU_K_ATTN_INTEL, st->n_blocks * sg,
                          sp->num_kv_heads * (uint32_t)n_hchunks, sg, args, n_args, st->err.msg,
                          sizeof st->err.msg);
    else
        s = c->rt->launch(c->dev, a->stream, sp->use_mla ? XPU_K_ATTN_MLA : XPU_K_ATTN, st->n_items,
                          (uint32_t)hq, 0, args, n_args - 4, st->err.msg, sizeof st->err.msg);
    if (s != AH_OK || !st->n_splits) return s;
    void *splits = m->splits.p;
    int n_splits = (int)st->n_splits;
    /* Not reformatted: one line per group of the kernel's parameters (xpu_split_merge,
     * kernels/attn.cl). */
    // clang-format off
    const xpu_arg margs[] = {
        XPU_PTR(splits), XPU_VAL(n_splits), XPU_PTR(po), XPU_PTR(pl),
        XPU_TPTR(out, xo, 1), XPU_VAL(o_ts), XPU_VAL(o_hs), XPU_VAL(q_dt),
        XPU_TPTR(lse, xl, 1), XPU_VAL(l_ts), XPU_TPTR(sinks, xs, 0),
        XPU_VAL(hq), XPU_VAL(dv), XPU_VAL(flags),
    };
    // clang-format on
    return c->rt->launch(c->dev, a->stream, XPU_K_SPLIT_MERGE, st->n_splits, (uint32_t)hq, 0, margs,
                         (int)(sizeof margs / sizeof margs[0]), st->err.msg, sizeof st->err.msg);
}

/* ---- KV-cache write ------------------------------------------------------------------ */

static ah_status xpu_write_kv(ah_state *st, const ah_kv_write_args *a)
{
    ah_context *c = st->ctx;
    const ah_layer_spec *sp = &st->spec;
    if (!a) return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "write_kv args are NULL");
    if (!st->planned)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "write_kv before a successful plan");
    const int64_t T = st->num_tokens;
    const int64_t ks[3] = {T, sp->num_kv_heads, sp->qk_head_size},
                  vs[3] = {T, sp->num_kv_heads, sp->v_head_size};
    int64_t k_bs, k_ts, k_hs, v_bs = 0, v_ts = 0, v_hs = 0;
    xpu_ext xk, xv = {0, 0}, xkc, xvc = {0, 0};
    ah_status s;
    if ((s = check_tensor(c, &st->err, a->key, "key", sp->q_dtype, 3, ks, &xk)) != AH_OK) return s;
    if ((s = check_cache(st, a->key_cache, "key_cache", sp->qk_head_size, &k_bs, &k_ts, &k_hs,
                         &xkc)) != AH_OK)
        return s;
    /* MLA writes the key (latent) rows alone: value and value_cache are not read */
    if (!sp->use_mla &&
        ((s = check_tensor(c, &st->err, a->value, "value", sp->q_dtype, 3, vs, &xv)) != AH_OK ||
         (s = check_cache(st, a->value_cache, "value_cache", sp->v_head_size, &v_bs, &v_ts, &v_hs,
                          &xvc)) != AH_OK))
        return s;
    const int fp8 = is_fp8(sp->kv_dtype);
    const float ksc = fp8 && a->k_scale != 0.0f ? a->k_scale : 1.0f,
                vsc = fp8 && a->v_scale != 0.0f && !sp->use_mla ? a->v_scale : 1.0f;
    if (!isfinite(ksc) || !isfinite(vsc) || ksc <= 0.0f || vsc <= 0.0f)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "k_scale %g / v_scale %g must be finite and > 0", (double)a->k_scale,
                       (double)a->v_scale);
    float k_inv = 1.0f / ksc, v_inv = 1.0f / vsc;
    void *key = ah_dl_data(a->key), *kc = ah_dl_data(a->key_cache);
    void *val = sp->use_mla ? c->dummy : ah_dl_data(a->value),
         *vc = sp->use_mla ? c->dummy : ah_dl_data(a->value_cache);
    int64_t key_ts = ah_dl_stride(a->key, 0), key_hs = ah_dl_stride(a->key, 1);
    int64_t val_ts = sp->use_mla ? 0 : ah_dl_stride(a->value, 0),
            val_hs = sp->use_mla ? 0 : ah_dl_stride(a->value, 1);
    int src_dt = (int)AH_BIT(sp->q_dtype), kv_dt = (int)AH_BIT(sp->kv_dtype), n = (int)T,
        hk = (int)sp->num_kv_heads;
    int d = (int)sp->qk_head_size, dv = (int)sp->v_head_size, bsz = (int)sp->block_size,
        has_v = !sp->use_mla;
    void *slots = st->cur->slots.p;
    /* Not reformatted: one line per group of the kernel's parameters (xpu_write_kv, kernels/kv.cl).
     */
    // clang-format off
    const xpu_arg args[] = {
        XPU_TPTR(key, xk, 0), XPU_VAL(key_ts), XPU_VAL(key_hs),
        XPU_TPTR(val, xv, 0), XPU_VAL(val_ts), XPU_VAL(val_hs), XPU_VAL(src_dt),
        XPU_TPTR(kc, xkc, 1), XPU_VAL(k_bs), XPU_VAL(k_ts), XPU_VAL(k_hs),
        XPU_TPTR(vc, xvc, 1), XPU_VAL(v_bs), XPU_VAL(v_ts), XPU_VAL(v_hs), XPU_VAL(kv_dt),
        XPU_VAL(k_inv), XPU_VAL(v_inv), XPU_PTR(slots), XPU_VAL(n),
        XPU_VAL(hk), XPU_VAL(d), XPU_VAL(dv), XPU_VAL(bsz), XPU_VAL(has_v),
    };
    // clang-format on
    return c->rt->launch(c->dev, a->stream, XPU_K_WRITE_KV, (uint32_t)T, (uint32_t)hk, 0, args,
                         (int)(sizeof args / sizeof args[0]), st->err.msg, sizeof st->err.msg);
}

/* ---- merge_states ---------------------------------------------------------------------- */

static ah_status xpu_merge_states(ah_context *c, const ah_merge_args *a)
{
    if (!a || !a->v_a || !a->v_b || !a->lse_a || !a->lse_b || !a->out)
        return ah_fail(&c->err, AH_ERR_INVALID_ARGUMENT,
                       "merge_states needs v_a, lse_a, v_b, lse_b and out");
    if (a->v_a->ndim != 3)
        return ah_fail(&c->err, AH_ERR_INVALID_ARGUMENT, "v_a has %d dims, expected 3",
                       a->v_a->ndim);
    ah_dtype dt = AH_DTYPE_AUTO;
    const ah_dtype cand[3] = {AH_DTYPE_FP32, AH_DTYPE_FP16, AH_DTYPE_BF16};
    for (int i = 0; i < 3; i++)
        if (ah_dl_dtype_is(a->v_a, cand[i])) dt = cand[i];
    if (dt == AH_DTYPE_AUTO)
        return ah_fail(&c->err, AH_ERR_UNSUPPORTED, "v_a is not fp32, fp16 or bf16");
    const int64_t T = a->v_a->shape[0], H = a->v_a->shape[1], D = a->v_a->shape[2];
    const int64_t vs[3] = {T, H, D}, ls[2] = {T, H};
    ah_status s;
    xpu_ext xva, xvb, xo, xla, xlb, xlo = {0, 0};
    if ((s = check_tensor(c, &c->err, a->v_a, "v_a", dt, 3, vs, &xva)) != AH_OK ||
        (s = check_tensor(c, &c->err, a->v_b, "v_b", dt, 3, vs, &xvb)) != AH_OK ||
        (s = check_tensor(c, &c->err, a->out, "out", dt, 3, vs, &xo)) != AH_OK ||
        (s = check_tensor(c, &c->err, a->lse_a, "lse_a", AH_DTYPE_FP32, 2, ls, &xla)) != AH_OK ||
        (s = check_tensor(c, &c->err, a->lse_b, "lse_b", AH_DTYPE_FP32, 2, ls, &xlb)) != AH_OK)
        return s;
    void *lo = c->dummy;
    int64_t lo_ts = 0;
    int has_lo = 0;
    if (a->lse_out) {
        if ((s = check_tensor(c, &c->err, a->lse_out, "lse_out", AH_DTYPE_FP32, 2, ls, &xlo)) !=
            AH_OK)
            return s;
        lo = ah_dl_data(a->lse_out), lo_ts = ah_dl_stride(a->lse_out, 0), has_lo = 1;
    }
    void *va = ah_dl_data(a->v_a), *vb = ah_dl_data(a->v_b), *la = ah_dl_data(a->lse_a),
         *lb = ah_dl_data(a->lse_b);
    void *out = ah_dl_data(a->out);
    int64_t a_ts = ah_dl_stride(a->v_a, 0), a_hs = ah_dl_stride(a->v_a, 1),
            b_ts = ah_dl_stride(a->v_b, 0), b_hs = ah_dl_stride(a->v_b, 1);
    int64_t o_ts = ah_dl_stride(a->out, 0), o_hs = ah_dl_stride(a->out, 1);
    int64_t la_ts = ah_dl_stride(a->lse_a, 0), lb_ts = ah_dl_stride(a->lse_b, 0);
    int n = (int)T, heads = (int)H, dv = (int)D, dti = (int)AH_BIT(dt);
    /* Not reformatted: one line per group of the kernel's parameters (xpu_merge_states,
     * kernels/merge.cl). */
    // clang-format off
    const xpu_arg args[] = {
        XPU_TPTR(va, xva, 0), XPU_VAL(a_ts), XPU_VAL(a_hs), XPU_TPTR(la, xla, 0), XPU_VAL(la_ts),
        XPU_TPTR(vb, xvb, 0), XPU_VAL(b_ts), XPU_VAL(b_hs), XPU_TPTR(lb, xlb, 0), XPU_VAL(lb_ts),
        XPU_TPTR(out, xo, 1), XPU_VAL(o_ts), XPU_VAL(o_hs), XPU_TPTR(lo, xlo, 1), XPU_VAL(lo_ts), XPU_VAL(has_lo),
        XPU_VAL(n), XPU_VAL(heads), XPU_VAL(dv), XPU_VAL(dti),
    };
    // clang-format on
    return c->rt->launch(c->dev, a->stream, XPU_K_MERGE_STATES, (uint32_t)T, (uint32_t)H, 0, args,
                         (int)(sizeof args / sizeof args[0]), c->err.msg, sizeof c->err.msg);
}

/* ---- descriptor and entry --------------------------------------------------------------- */

static const ah_plugin_ops xpu_ops = {
    .struct_size = sizeof(ah_plugin_ops),
    .probe = xpu_probe,
    .context_create = xpu_context_create,
    .context_destroy = xpu_context_destroy,
    .context_error = xpu_context_error,
    .state_create = xpu_state_create,
    .state_destroy = xpu_state_destroy,
    .state_error = xpu_state_error,
    .plan = xpu_plan,
    .forward = xpu_forward,
    .write_kv = xpu_write_kv,
    .merge_states = xpu_merge_states,
    .mem_alloc = xpu_mem_alloc,
    .mem_free = xpu_mem_free,
    .mem_copy = xpu_mem_copy,
    .synchronize = xpu_synchronize,
    .stream_create = xpu_stream_create,
    .stream_destroy = xpu_stream_destroy,
    .timer_start = xpu_timer_start,
    .timer_stop = xpu_timer_stop,
    .graph_begin = xpu_graph_begin,
    .graph_end = xpu_graph_end,
    .graph_launch = xpu_graph_launch,
    .graph_destroy = xpu_graph_destroy,
};

#define XPU_DESC(KIND, CAPS) \
    { \
        sizeof(ah_plugin_descriptor), AH_ABI_VERSION, "xpu", "0.1.0", "attnhost", "MIT", \
            "Intel GPUs through Level Zero (OpenCL devices through OpenCL): OpenCL C kernels as SPIR-V", \
            KIND, CAPS, &xpu_ops \
    }
static const ah_plugin_descriptor xpu_desc_gpu = XPU_DESC(AH_DEVICE_LEVEL_ZERO, &xpu_caps_gpu);
static const ah_plugin_descriptor xpu_desc_cpu = XPU_DESC(AH_DEVICE_CPU, &xpu_caps_cpu);

/* The device kind: LEVEL_ZERO when a Level Zero GPU or an OpenCL GPU is
 * here, else CPU (OpenCL CPU devices, or nothing). Decided once per
 * process; the scanner and the host decide alike in one environment. */
static int xpu_cpu_kind;
static pthread_once_t xpu_kind_once = PTHREAD_ONCE_INIT;

static void xpu_kind_decide(void)
{
    xpu_devinfo info;
    char err[200];
    if (xpu_rt_level_zero.discover(0, &info, err, sizeof err) == AH_OK) return;
    if (xpu_rt_opencl.discover(0, &info, err, sizeof err) == AH_OK && info.is_gpu) return;
    xpu_cpu_kind = 1;
}

static int xpu_is_cpu_kind(void)
{
    pthread_once(&xpu_kind_once, xpu_kind_decide);
    return xpu_cpu_kind;
}

AH_EXPORT const ah_plugin_descriptor *
attnhost_plugin_entry(uint32_t host_abi_version, const ah_host_services *host, const char **why);
AH_EXPORT const ah_plugin_descriptor *
attnhost_plugin_entry(uint32_t host_abi_version, const ah_host_services *host, const char **why)
{
    (void)host;
    if (AH_ABI_MAJOR(host_abi_version) != AH_ABI_VERSION_MAJOR) {
        if (why) *why = "plugin xpu needs attnhost ABI major " AH_PLUGIN_STR(AH_ABI_VERSION_MAJOR);
        return NULL;
    }
    return xpu_is_cpu_kind() ? &xpu_desc_cpu : &xpu_desc_gpu;
}
