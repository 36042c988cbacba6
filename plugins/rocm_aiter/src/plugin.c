/*
 * rocm_aiter: attention on AMD Instinct GPUs (CDNA2 gfx90a, CDNA3 gfx942)
 * with MFMA kernels (kernels/attn.hip) embedded as code objects per target
 * and launched through HIP's module API; libamdhip64.so is loaded at run
 * time (attnhost/hip_driver.h), so the plugin loads and probes anywhere.
 *
 * Plan: a batch whose queries are all of length <= 1 runs the split-KV
 * decode kernel (256-key partitions, GQA heads sharing a K/V read) and its
 * LSE reduce; any other batch runs the prefill/extend kernel over the paged
 * cache, or, for absorbed MLA (qk 576 / v 512, no prefill kernel), the
 * decode kernel a wave per query token. write_kv stores new K/V (converted to OCP FP8 for an FP8
 * cache); merge_states merges two partial results. An FP8 cache is read by the same kernels, its
 * bytes decoded exactly into the query's dtype (kernels/ra_layout.h says why not through gfx942's
 * fnuz FP8 hardware); k_scale joins the logit scale and v_scale the output here. The causal flag,
 * the ALiBi slopes and the cache layout (NHD or HND) go to the kernels as they are. A decode
 * request with seq_len 0 (AH_FEAT_EMPTY_KV) needs nothing here: the decode grid covers the batch's
 * longest request (none when every request is empty, and then only the reduce runs), and each
 * kernel gives such a request no key to walk.
 *
 * Unverified on hardware: the kernels' index logic runs on the CPU through
 * an MFMA model (test/test_mfma_model.c) and the code objects pass resource
 * and instruction checks, but no kernel has run on an AMD GPU until
 * `attnhost check --plugin rocm_aiter` passes on one.
 */
#include <attnhost/hip_driver.h>
#include <attnhost/plugin.h>
#include <attnhost/plugin_util.h>

#include <string.h>

#include "ra_layout.h"
#include "ra_params.h"

/* ---- embedded code objects ------------------------------------------------- */

#define RA_IMAGE(t) extern const unsigned char ra_img_##t[], ra_img_##t##_end[];
#include "ra_images.h"
#undef RA_IMAGE

typedef struct ra_image {
    const char *target;
    const unsigned char *begin, *end;
} ra_image;

static const ra_image ra_images[] = {
#define RA_IMAGE(t) {#t, ra_img_##t, ra_img_##t##_end},
#include "ra_images.h"
#undef RA_IMAGE
};
#define RA_N_IMAGES (sizeof ra_images / sizeof *ra_images)

static const char *const ra_targets[] = {
#define RA_IMAGE(t) #t,
#include "ra_images.h"
#undef RA_IMAGE
};

static const ra_image *ra_image_for(const char *arch)
{
    for (size_t i = 0; i < RA_N_IMAGES; i++)
        if (!strcmp(ra_images[i].target, arch)) return &ra_images[i];
    return NULL;
}

static void ra_targets_text(char *buf, size_t cap)
{
    buf[0] = '\0';
    for (size_t i = 0; i < RA_N_IMAGES; i++) {
        size_t n = strlen(buf);
        snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", ra_images[i].target);
    }
}

/* The gfx target of a device ("gfx942" from "gfx942:sramecc+:xnack-"). */
static void ra_arch_of(const hipDeviceProp_t *p, char *arch, size_t cap)
{
    ah_strlcpy(arch, p->gcnArchName, cap);
    char *colon = strchr(arch, ':');
    if (colon) *colon = '\0';
}

/* ---- context ---------------------------------------------------------------- */

enum { RA_FAMILY_DECODE, RA_FAMILY_REDUCE, RA_FAMILY_PREFILL, RA_FAMILIES };
static const char *const ra_family_names[RA_FAMILIES] = {"decode", "decode_reduce", "prefill"};
/* Head shapes (qk / v) with a kernel, named by the kernels' suffix;
 * absorbed MLA (576 / 512) has no prefill kernel: its decode kernel serves
 * prefill too, a wave per query token (token_rows). */
enum { RA_HEAD_SIZES = 4, RA_SHAPE_MLA = 3 };
static const uint32_t ra_qk_sizes[RA_HEAD_SIZES] = {64, 128, 256, 576};
static const uint32_t ra_v_sizes[RA_HEAD_SIZES] = {64, 128, 256, 512};
static const char *const ra_shape_names[RA_HEAD_SIZES] = {"d64", "d128", "d256", "mla"};
/* Cache element types, indexed by RA_KV_* (ra_layout.h): kernel-name suffixes. */
enum { RA_KV_TYPES = 5 };
static const char *const ra_kv_suffix[RA_KV_TYPES] = {"", "_e4m3", "_e5m2", "_e4m3fnuz",
                                                      "_e5m2fnuz"};

/* The RA_KV_* of a layer's cache, -1 for one the kernels cannot read (a
 * 16-bit cache must have the query's dtype). */
static int ra_kv_type(const ah_layer_spec *s)
{
    switch (s->kv_dtype) {
    case AH_DTYPE_FP8_E4M3: return RA_KV_E4M3;
    case AH_DTYPE_FP8_E5M2: return RA_KV_E5M2;
    case AH_DTYPE_FP8_E4M3_FNUZ: return RA_KV_E4M3_FNUZ;
    case AH_DTYPE_FP8_E5M2_FNUZ: return RA_KV_E5M2_FNUZ;
    default: return s->kv_dtype == s->q_dtype ? RA_KV_16 : -1;
    }
}

struct ah_context {
    const ah_hip_api *hip;
    int device;
    hipModule_t module;
    /* [bf16?][RA_KV_*][family][head size index]; the reduce reads float
     * partials, so every cache type has the same one */
    hipFunction_t attn[2][RA_KV_TYPES][RA_FAMILIES][RA_HEAD_SIZES];
    /* write_kv: [bf16?][RA_KV_*], one bit copy for the 16-bit caches */
    hipFunction_t write_kv[2][RA_KV_TYPES], merge[2];
    hipEvent_t t0, t1;
    ah_errbuf err;
};

#define RA_HIP(CTX, ERRP, CALL) \
    do { \
        hipError_t ra_e_ = (CALL); \
        if (ra_e_ != hipSuccess) \
            return ah_fail((ERRP), \
                           ra_e_ == hipErrorOutOfMemory ? AH_ERR_OUT_OF_MEMORY : AH_ERR_DEVICE, \
                           "%s: %s", #CALL, ah_hip_errstr((CTX)->hip, ra_e_)); \
    } while (0)

static ah_status ra_probe(const ah_host_services *host, ah_probe_info *info)
{
    const char *why;
    const ah_hip_api *hip = ah_hip_load(&why);
    if (!hip) {
        ah_strlcpy(info->reason, why, sizeof info->reason);
        return AH_OK;
    }
    int n = 0, drv = 0;
    hipError_t e = hip->init(0);
    if (e == hipSuccess) e = hip->device_count(&n);
    if (e != hipSuccess || n == 0) {
        snprintf(info->reason, sizeof info->reason, "no AMD GPU: %s",
                 e != hipSuccess ? ah_hip_errstr(hip, e) : "hipGetDeviceCount found none");
        return AH_OK;
    }
    hipDeviceProp_t p;
    memset(&p, 0, sizeof p);
    if ((e = hip->device_props(&p, 0)) != hipSuccess) {
        snprintf(info->reason, sizeof info->reason, "hipGetDeviceProperties: %s",
                 ah_hip_errstr(hip, e));
        return AH_OK;
    }
    hip->driver_version(&drv);
    info->device_count = (uint32_t)n;
    ah_strlcpy(info->device_name, p.name, sizeof info->device_name);
    ra_arch_of(&p, info->arch, sizeof info->arch);
    info->multiprocessors = (uint32_t)p.multiProcessorCount;
    info->memory_bytes = (uint64_t)p.totalGlobalMem;
    snprintf(info->driver_version, sizeof info->driver_version, "HIP %d.%d.%d", drv / 10000000,
             drv / 100000 % 100, drv % 100000);
    if (!ra_image_for(info->arch)) {
        char built[96];
        ra_targets_text(built, sizeof built);
        snprintf(info->reason, sizeof info->reason,
                 "%s: no code object for this target (built for %s)", info->arch, built);
        return AH_OK;
    }
    info->usable = 1;
    if (host && host->log)
        host->log(
            host, AH_LOG_INFO,
            "rocm_aiter: kernels unverified on hardware until `attnhost check --plugin rocm_aiter` "
            "passes on this GPU");
    return AH_OK;
}

static ah_status ra_context_create(const ah_host_services *host, const ah_context_options *opts,
                                   ah_context **out, const char **why)
{
    (void)host;
    *out = NULL;
    const ah_hip_api *hip = ah_hip_load(why);
    if (!hip) return AH_ERR_UNAVAILABLE;
    int n = 0;
    if (hip->init(0) != hipSuccess || hip->device_count(&n) != hipSuccess ||
        opts->device_index < 0 || opts->device_index >= n) {
        *why = "no such AMD GPU";
        return AH_ERR_UNAVAILABLE;
    }
    hipDeviceProp_t p;
    memset(&p, 0, sizeof p);
    char arch[32];
    if (hip->device_props(&p, opts->device_index) != hipSuccess) {
        *why = "hipGetDeviceProperties failed";
        return AH_ERR_DEVICE;
    }
    ra_arch_of(&p, arch, sizeof arch);
    const ra_image *img = ra_image_for(arch);
    if (!img) {
        *why = "no code object for this GPU's gfx target";
        return AH_ERR_UNAVAILABLE;
    }
    ah_context *c = calloc(1, sizeof *c);
    if (!c) {
        *why = "out of memory";
        return AH_ERR_OUT_OF_MEMORY;
    }
    c->hip = hip;
    c->device = opts->device_index;
    if (hip->set_device(c->device) != hipSuccess ||
        hip->module_load(&c->module, img->begin) != hipSuccess) {
        free(c);
        *why = "hipModuleLoadData failed for the embedded code object";
        return AH_ERR_DEVICE;
    }
    int ok = 1;
    char name[64];
    for (int bf = 0; bf < 2; bf++) {
        const char *dt = bf ? "bf16" : "fp16";
        for (int kv = 0; kv < RA_KV_TYPES; kv++) {
            for (int f = 0; f < RA_FAMILIES; f++)
                for (int d = 0; d < RA_HEAD_SIZES; d++) {
                    if (f == RA_FAMILY_PREFILL && d == RA_SHAPE_MLA) continue;
                    snprintf(name, sizeof name, "ra_%s_%s%s_%s", ra_family_names[f], dt,
                             f == RA_FAMILY_REDUCE ? "" : ra_kv_suffix[kv], ra_shape_names[d]);
                    ok &=
                        hip->module_function(&c->attn[bf][kv][f][d], c->module, name) == hipSuccess;
                }
            if (kv == RA_KV_16) snprintf(name, sizeof name, "ra_write_kv");
            else snprintf(name, sizeof name, "ra_write_kv_%s%s", dt, ra_kv_suffix[kv]);
            ok &= hip->module_function(&c->write_kv[bf][kv], c->module, name) == hipSuccess;
        }
        ok &= hip->module_function(&c->merge[bf], c->module,
                                   bf ? "ra_merge_bf16" : "ra_merge_fp16") == hipSuccess;
    }
    ok &= hip->event_create(&c->t0, 0) == hipSuccess && hip->event_create(&c->t1, 0) == hipSuccess;
    if (!ok) {
        hip->module_unload(c->module);
        free(c);
        *why = "a kernel is missing from the embedded code object";
        return AH_ERR_DEVICE;
    }
    *out = c;
    return AH_OK;
}

static void ra_context_destroy(ah_context *c)
{
    if (!c) return;
    c->hip->event_destroy(c->t0);
    c->hip->event_destroy(c->t1);
    c->hip->module_unload(c->module);
    free(c);
}

static const char *ra_context_error(const ah_context *c) { return c->err.msg; }

/* ---- device slots ------------------------------------------------------------- */

static ah_status ra_mem_alloc(ah_context *c, size_t n, void **p)
{
    RA_HIP(c, &c->err, c->hip->set_device(c->device));
    RA_HIP(c, &c->err, c->hip->mem_alloc(p, n ? n : 1));
    return AH_OK;
}
static void ra_mem_free(ah_context *c, void *p)
{
    if (p) c->hip->mem_free(p);
}
static ah_status ra_mem_copy(ah_context *c, void *dst, const void *src, size_t n, ah_copy_kind kind,
                             void *s)
{
    static const hipMemcpyKind kinds[] = {hipMemcpyHostToDevice, hipMemcpyDeviceToHost,
                                          hipMemcpyDeviceToDevice};
    RA_HIP(c, &c->err, c->hip->copy_async(dst, src, n, kinds[kind], (hipStream_t)s));
    if (kind == AH_COPY_DEVICE_TO_HOST) RA_HIP(c, &c->err, c->hip->stream_sync((hipStream_t)s));
    return AH_OK;
}
static ah_status ra_synchronize(ah_context *c, void *s)
{
    RA_HIP(c, &c->err, c->hip->stream_sync((hipStream_t)s));
    return AH_OK;
}
static ah_status ra_stream_create(ah_context *c, void **s)
{
    RA_HIP(c, &c->err, c->hip->set_device(c->device));
    RA_HIP(c, &c->err, c->hip->stream_create((hipStream_t *)s, hipStreamNonBlocking));
    return AH_OK;
}
static void ra_stream_destroy(ah_context *c, void *s)
{
    if (s) c->hip->stream_destroy((hipStream_t)s);
}
/* Events order the host's split-step streams (plugin.h, ABI 2.4): a
 * hipEvent_t (timing off) is the ah_event. */
static ah_status ra_event_create(ah_context *c, ah_event **e)
{
    *e = NULL;
    RA_HIP(c, &c->err, c->hip->set_device(c->device));
    RA_HIP(c, &c->err, c->hip->event_create((hipEvent_t *)e, hipEventDisableTiming));
    return AH_OK;
}
static void ra_event_destroy(ah_context *c, ah_event *e)
{
    if (e) c->hip->event_destroy((hipEvent_t)e);
}
static ah_status ra_event_record(ah_context *c, ah_event *e, void *s)
{
    RA_HIP(c, &c->err, c->hip->event_record((hipEvent_t)e, (hipStream_t)s));
    return AH_OK;
}
static ah_status ra_stream_wait(ah_context *c, void *s, ah_event *e)
{
    RA_HIP(c, &c->err, c->hip->stream_wait((hipStream_t)s, (hipEvent_t)e, 0));
    return AH_OK;
}
static ah_status ra_timer_start(ah_context *c, void *s)
{
    RA_HIP(c, &c->err, c->hip->event_record(c->t0, (hipStream_t)s));
    return AH_OK;
}
static ah_status ra_timer_stop(ah_context *c, void *s, float *ms)
{
    RA_HIP(c, &c->err, c->hip->event_record(c->t1, (hipStream_t)s));
    RA_HIP(c, &c->err, c->hip->event_sync(c->t1));
    RA_HIP(c, &c->err, c->hip->event_elapsed(ms, c->t0, c->t1));
    return AH_OK;
}

/* ---- state, plan, forward ---------------------------------------------------------- */

struct ah_state {
    ah_context *ctx;
    ah_layer_spec spec;
    ah_limits lim;
    int bf, kv, hidx, max_parts; /* kv: RA_KV_*; hidx: head shape, RA_SHAPE_MLA */
    uint32_t group;              /* query heads per KV head */
    float *part_o, *part_ml;     /* decode partials */
    /* Graph plans: the batch's metadata copied here, at the addresses the
     * captured kernels read: query_start_loc [max_num_reqs + 1], seq_lens
     * [max_num_reqs], block table [max_num_reqs][max_blocks_per_req]. */
    int32_t *g_qsl, *g_seq, *g_table;
    uint32_t graph_reqs; /* requests of the captured decode grid, 0: none */
    const ah_batch *batch;
    int decode; /* the planned batch has no query longer than 1 */
    int graph;  /* the plan is CAPTURE or REPLAY: kernels read g_* */
    ah_errbuf err;
};

/* The head shape of a layer (RA_SHAPE_MLA for absorbed MLA with one KV
 * head), -1 for one without a kernel. */
static int ra_head_index(const ah_layer_spec *s)
{
    for (int i = 0; i < RA_HEAD_SIZES; i++)
        if (ra_qk_sizes[i] == s->qk_head_size && ra_v_sizes[i] == s->v_head_size)
            return (i == RA_SHAPE_MLA) == (s->use_mla && s->num_kv_heads == 1) ? i : -1;
    return -1;
}

static ah_status ra_workspace_size(const ah_layer_spec *spec, const ah_limits *lim, uint64_t *bytes)
{
    const uint64_t parts = (uint64_t)ra_num_partitions((int)lim->max_seq_len);
    /* decode partials, and the metadata graph plans copy (ra_plan) */
    *bytes = (uint64_t)lim->max_num_reqs * spec->num_q_heads * parts * (spec->v_head_size + 2) *
                 sizeof(float) +
             ((uint64_t)lim->max_num_reqs * (2 + lim->max_blocks_per_req) + 1) * sizeof(int32_t);
    return AH_OK;
}

static ah_status ra_state_create(ah_context *c, const ah_layer_spec *spec, const ah_limits *lim,
                                 ah_state **out)
{
    *out = NULL;
    const int hidx = ra_head_index(spec), kv = ra_kv_type(spec);
    if (hidx < 0 || kv < 0 || (spec->q_dtype != AH_DTYPE_BF16 && spec->q_dtype != AH_DTYPE_FP16))
        return ah_fail(&c->err, AH_ERR_UNSUPPORTED,
                       "rocm_aiter: unsupported layer (head %u/%u%s, %s/%s)", spec->qk_head_size,
                       spec->v_head_size, spec->use_mla ? " MLA" : "", ah_dtype_name(spec->q_dtype),
                       ah_dtype_name(spec->kv_dtype));
    ah_state *st = calloc(1, sizeof *st);
    if (!st) return ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
    st->ctx = c;
    st->spec = *spec;
    st->lim = *lim;
    st->bf = spec->q_dtype == AH_DTYPE_BF16;
    st->kv = kv;
    st->hidx = hidx;
    st->group = spec->num_q_heads / spec->num_kv_heads;
    st->max_parts = ra_num_partitions((int)lim->max_seq_len);
    const size_t rows = (size_t)lim->max_num_reqs * spec->num_q_heads * (size_t)st->max_parts;
    const size_t meta = (size_t)lim->max_num_reqs * (2 + lim->max_blocks_per_req) + 1;
    if (c->hip->set_device(c->device) != hipSuccess ||
        c->hip->mem_alloc((void **)&st->part_o, rows * spec->v_head_size * sizeof(float) + 4) !=
            hipSuccess ||
        c->hip->mem_alloc((void **)&st->part_ml, rows * 2 * sizeof(float) + 4) != hipSuccess ||
        c->hip->mem_alloc((void **)&st->g_qsl, meta * sizeof(int32_t)) != hipSuccess) {
        if (st->part_o) c->hip->mem_free(st->part_o);
        if (st->part_ml) c->hip->mem_free(st->part_ml);
        free(st);
        return ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY,
                       "rocm_aiter: decode workspace of %zu partial rows", rows);
    }
    st->g_seq = st->g_qsl + lim->max_num_reqs + 1;
    st->g_table = st->g_seq + lim->max_num_reqs;
    *out = st;
    return AH_OK;
}

static void ra_state_destroy(ah_state *st)
{
    if (!st) return;
    st->ctx->hip->mem_free(st->part_o);
    st->ctx->hip->mem_free(st->part_ml);
    st->ctx->hip->mem_free(st->g_qsl);
    free(st);
}

static const char *ra_state_error(const ah_state *st) { return st->err.msg; }

static const char *const ra_mode_names[] = {"EAGER", "CAPTURE", "REPLAY"};

/* Graphs (UNIFORM_SINGLE_TOKEN_DECODE): CAPTURE and REPLAY copy the
 * batch's query_start_loc, seq_lens and block table into the state's
 * buffers on the stream, which the captured kernels read; the decode grid
 * is fixed at capture (its requests, the partitions of max_seq_len), so a
 * replay rewrites those buffers and nothing else. EAGER plans read the
 * batch's tensors. */
static ah_status ra_plan(ah_state *st, const ah_batch *b, ah_plan_mode mode, void *stream)
{
    /* Bounds the kernels rely on (the host checks them too unless validation is off). */
    if (b->num_reqs > st->lim.max_num_reqs || b->max_seq_len > st->lim.max_seq_len)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "rocm_aiter: batch of %u requests, max_seq_len %u beyond the state's "
                       "limits %u, %u",
                       b->num_reqs, b->max_seq_len, st->lim.max_num_reqs, st->lim.max_seq_len);
    st->batch = b;
    st->decode = b->max_query_len <= 1;
    st->graph = mode != AH_PLAN_EAGER;
    if (!st->graph) return AH_OK;
    const char *mname = ra_mode_names[mode];
    if (!st->decode)
        return ah_fail(&st->err, AH_ERR_UNSUPPORTED,
                       "rocm_aiter: plan(%s): graphs take decode batches (graph level "
                       "uniform_single_token_decode), this one has max_query_len %u",
                       mname, b->max_query_len);
    if (mode == AH_PLAN_REPLAY && b->num_reqs != st->graph_reqs)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "rocm_aiter: plan(REPLAY): num_reqs %u, the captured graph has %u "
                       "(pad the batch to the captured size)",
                       b->num_reqs, st->graph_reqs);
    const int64_t cols = b->block_table->ndim == 2 ? b->block_table->shape[1] : -1;
    if (cols < 0 || cols > st->lim.max_blocks_per_req)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "rocm_aiter: plan(%s): block_table has %lld columns, the limits %u", mname,
                       (long long)cols, st->lim.max_blocks_per_req);
    const ah_hip_api *hip = st->ctx->hip;
    hipStream_t s = (hipStream_t)stream;
    const size_t n = b->num_reqs;
    RA_HIP(st->ctx, &st->err,
           hip->copy_async(st->g_qsl, ah_dl_data(b->query_start_loc), (n + 1) * sizeof(int32_t),
                           hipMemcpyDeviceToDevice, s));
    if (n) {
        RA_HIP(st->ctx, &st->err,
               hip->copy_async(st->g_seq, ah_dl_data(b->seq_lens), n * sizeof(int32_t),
                               hipMemcpyDeviceToDevice, s));
        if (cols)
            RA_HIP(st->ctx, &st->err,
                   hip->copy_2d(st->g_table, st->lim.max_blocks_per_req * sizeof(int32_t),
                                ah_dl_data(b->block_table),
                                (size_t)ah_dl_stride(b->block_table, 0) * sizeof(int32_t),
                                (size_t)cols * sizeof(int32_t), n, hipMemcpyDeviceToDevice, s));
    }
    if (mode == AH_PLAN_CAPTURE) st->graph_reqs = b->num_reqs;
    return AH_OK;
}

static ah_status ra_launch(ah_state *st, hipFunction_t f, unsigned gx, unsigned gy, unsigned gz,
                           void *arg, void *stream)
{
    ah_context *c = st->ctx;
    void *args[] = {arg};
    if (gx == 0 || gy == 0 || gz == 0) return AH_OK;
    RA_HIP(c, &st->err,
           c->hip->launch(f, gx, gy, gz, RA_WAVE, 1, 1, 0, (hipStream_t)stream, args, NULL));
    return AH_OK;
}

static ah_status ra_forward(ah_state *st, const ah_forward_args *a)
{
    const ah_batch *b = st->batch;
    const ah_layer_spec *s = &st->spec;
    if (!b) return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "forward before plan");
    ra_attn_params p;
    memset(&p, 0, sizeof p);
    p.q = ah_dl_data(a->q);
    p.k_cache = ah_dl_data(a->key_cache);
    /* absorbed MLA: V is the first v_head_size channels of the key cache */
    p.v_cache = s->use_mla ? p.k_cache : ah_dl_data(a->value_cache);
    p.out = ah_dl_data(a->out);
    p.lse = a->lse ? (float *)ah_dl_data(a->lse) : NULL;
    p.query_start_loc = st->graph ? st->g_qsl : (const int *)ah_dl_data(b->query_start_loc);
    p.seq_lens = st->graph ? st->g_seq : (const int *)ah_dl_data(b->seq_lens);
    p.block_table = st->graph ? st->g_table : (const int *)ah_dl_data(b->block_table);
    p.sinks = s->use_sinks && a->sinks ? (const float *)ah_dl_data(a->sinks) : NULL;
    p.alibi = s->use_alibi && a->alibi_slopes ? (const float *)ah_dl_data(a->alibi_slopes) : NULL;
    p.part_o = st->part_o;
    p.part_ml = st->part_ml;
    p.stride_q_t = ah_dl_stride(a->q, 0);
    p.stride_q_h = ah_dl_stride(a->q, 1);
    p.stride_o_t = ah_dl_stride(a->out, 0);
    p.stride_o_h = ah_dl_stride(a->out, 1);
    p.table_stride =
        st->graph ? (int)st->lim.max_blocks_per_req : (int)ah_dl_stride(b->block_table, 0);
    p.num_reqs = (int)b->num_reqs;
    p.num_q_heads = (int)s->num_q_heads;
    p.num_kv_heads = (int)s->num_kv_heads;
    p.head_size = (int)s->qk_head_size;
    p.block_size = (int)s->block_size;
    p.window = (int)s->sliding_window;
    p.max_parts = st->max_parts;
    p.scale = s->scale * ah_kv_scale(a->k_scale, s->kv_dtype);
    p.softcap = s->softcap;
    /* MLA's V is the key cache's, so its scale is k_scale */
    p.v_scale = ah_kv_scale(s->use_mla ? a->k_scale : a->v_scale, s->kv_dtype);
    p.use_sinks = p.sinks != NULL;
    p.causal = ah_spec_causal(s);
    p.kv_hnd = s->kv_layout == AH_KV_LAYOUT_HND;
    hipFunction_t(*fn)[RA_HEAD_SIZES] = st->ctx->attn[st->bf][st->kv];
    /* decode waves: 16 query heads of a KV head each */
    const unsigned groups = s->num_kv_heads * (unsigned)ra_head_groups((int)st->group);
    ah_status r;
    if (st->decode) { /* a graph's grid covers every length the limits allow */
        const unsigned parts =
            (unsigned)ra_num_partitions((int)(st->graph ? st->lim.max_seq_len : b->max_seq_len));
        r = ra_launch(st, fn[RA_FAMILY_DECODE][st->hidx], b->num_reqs, groups, parts, &p,
                      a->stream);
        if (r == AH_OK)
            r = ra_launch(st, fn[RA_FAMILY_REDUCE][st->hidx], s->num_q_heads, b->num_reqs, 1, &p,
                          a->stream);
        return r;
    }
    if (st->hidx == RA_SHAPE_MLA) { /* a decode wave per query token over all its keys */
        p.token_rows = 1;
        return ra_launch(st, fn[RA_FAMILY_DECODE][st->hidx], b->num_tokens, groups, 1, &p,
                         a->stream);
    }
    const unsigned tiles = (b->max_query_len + RA_PRE_QUERIES - 1) / RA_PRE_QUERIES;
    return ra_launch(st, fn[RA_FAMILY_PREFILL][st->hidx], tiles, s->num_q_heads, b->num_reqs, &p,
                     a->stream);
}

static ah_status ra_write_kv(ah_state *st, const ah_kv_write_args *a)
{
    const ah_batch *b = st->batch;
    if (!b) return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "write_kv before plan");
    ra_kv_params p;
    memset(&p, 0, sizeof p);
    p.key = ah_dl_data(a->key);
    /* absorbed MLA: the keys alone (value and value_cache NULL) */
    const int mla = st->spec.use_mla != 0;
    p.value = mla ? NULL : ah_dl_data(a->value);
    p.k_cache = ah_dl_data(a->key_cache);
    p.v_cache = mla ? NULL : ah_dl_data(a->value_cache);
    p.slot_mapping = (const long long *)ah_dl_data(b->slot_mapping);
    p.stride_k_t = ah_dl_stride(a->key, 0);
    p.stride_k_h = ah_dl_stride(a->key, 1);
    p.stride_v_t = mla ? 0 : ah_dl_stride(a->value, 0);
    p.stride_v_h = mla ? 0 : ah_dl_stride(a->value, 1);
    p.num_tokens = (int)a->key->shape[0];
    p.num_kv_heads = (int)st->spec.num_kv_heads;
    p.head_size = (int)st->spec.qk_head_size;
    p.block_size = (int)st->spec.block_size;
    p.kv_hnd = st->spec.kv_layout == AH_KV_LAYOUT_HND;
    p.k_scale = ah_kv_scale(a->k_scale, st->spec.kv_dtype);
    p.v_scale = ah_kv_scale(a->v_scale, st->spec.kv_dtype);
    return ra_launch(st, st->ctx->write_kv[st->bf][st->kv], (unsigned)p.num_tokens, 1, 1, &p,
                     a->stream);
}

static ah_status ra_merge_states(ah_context *c, const ah_merge_args *a)
{
    const int bf = ah_dl_dtype_is(a->v_a, AH_DTYPE_BF16);
    if (!bf && !ah_dl_dtype_is(a->v_a, AH_DTYPE_FP16))
        return ah_fail(&c->err, AH_ERR_UNSUPPORTED, "rocm_aiter: merge_states takes bf16 or fp16");
    if (!ah_dl_is_contiguous(a->v_a) || !ah_dl_is_contiguous(a->v_b) ||
        !ah_dl_is_contiguous(a->out))
        return ah_fail(&c->err, AH_ERR_UNSUPPORTED, "rocm_aiter: merge_states takes dense tensors");
    ra_merge_params p;
    memset(&p, 0, sizeof p);
    p.v_a = ah_dl_data(a->v_a);
    p.v_b = ah_dl_data(a->v_b);
    p.lse_a = (const float *)ah_dl_data(a->lse_a);
    p.lse_b = (const float *)ah_dl_data(a->lse_b);
    p.out = ah_dl_data(a->out);
    p.lse_out = a->lse_out ? (float *)ah_dl_data(a->lse_out) : NULL;
    p.rows = (int)(a->v_a->shape[0] * a->v_a->shape[1]);
    p.head_size = (int)a->v_a->shape[2];
    void *args[] = {&p};
    if (p.rows == 0) return AH_OK;
    RA_HIP(c, &c->err,
           c->hip->launch(c->merge[bf], (unsigned)p.rows, 1, 1, RA_WAVE, 1, 1, 0,
                          (hipStream_t)a->stream, args, NULL));
    return AH_OK;
}

/* ---- graphs ------------------------------------------------------------------------------ */

struct ah_graph {
    hipGraph_t graph;
    hipGraphExec_t exec;
};

static ah_status ra_graph_begin(ah_context *c, void *stream)
{
    if (!stream)
        return ah_fail(&c->err, AH_ERR_INVALID_ARGUMENT,
                       "graph_begin: the default stream cannot be captured; pass a stream");
    RA_HIP(c, &c->err, c->hip->capture_begin((hipStream_t)stream, hipStreamCaptureModeThreadLocal));
    return AH_OK;
}

static ah_status ra_graph_end(ah_context *c, void *stream, ah_graph **out)
{
    *out = NULL;
    hipGraph_t graph = NULL;
    RA_HIP(c, &c->err, c->hip->capture_end((hipStream_t)stream, &graph));
    ah_graph *g = calloc(1, sizeof *g);
    if (!g) {
        c->hip->graph_destroy(graph);
        return ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "graph_end: out of host memory");
    }
    g->graph = graph;
    const hipError_t e = c->hip->graph_instantiate(&g->exec, graph, 0);
    if (e != hipSuccess) {
        c->hip->graph_destroy(graph);
        free(g);
        return ah_fail(&c->err, e == hipErrorOutOfMemory ? AH_ERR_OUT_OF_MEMORY : AH_ERR_DEVICE,
                       "hipGraphInstantiateWithFlags: %s", ah_hip_errstr(c->hip, e));
    }
    *out = g;
    return AH_OK;
}

static ah_status ra_graph_launch(ah_context *c, ah_graph *g, void *stream)
{
    if (!g) return ah_fail(&c->err, AH_ERR_INVALID_ARGUMENT, "graph_launch: graph is NULL");
    RA_HIP(c, &c->err, c->hip->graph_launch(g->exec, (hipStream_t)stream));
    return AH_OK;
}

static void ra_graph_destroy(ah_context *c, ah_graph *g)
{
    if (!g) return;
    if (g->exec) c->hip->graph_exec_destroy(g->exec);
    if (g->graph) c->hip->graph_destroy(g->graph);
    free(g);
}

/* ---- the descriptor -------------------------------------------------------------------- */

static void ra_check_combination(const ah_layer_spec *spec, const ah_probe_info *probe,
                                 ah_reason_sink *sink)
{
    (void)probe;
    if (ra_kv_type(spec) < 0)
        sink->add(sink, AH_REASON_COMBINATION, "kv_dtype", ah_dtype_name(spec->kv_dtype),
                  "the query dtype, or fp8_e4m3 / fp8_e5m2 / fp8_e4m3fnuz / fp8_e5m2fnuz");
    char v[64];
    snprintf(v, sizeof v, "qk %u, v %u%s, %u KV heads", spec->qk_head_size, spec->v_head_size,
             spec->use_mla ? " MLA" : "", spec->num_kv_heads);
    if (ra_head_index(spec) < 0)
        sink->add(sink, AH_REASON_COMBINATION, "head_sizes", v,
                  "qk == v of 64, 128, 256; or absorbed MLA qk 576, v 512, one KV head");
}

static const uint32_t ra_qk_list[] = {64, 128, 256, 576};
static const uint32_t ra_v_list[] = {64, 128, 256, 512};

static const ah_caps ra_caps = {
    .struct_size = sizeof(ah_caps),
    .q_dtypes = AH_BIT(AH_DTYPE_BF16) | AH_BIT(AH_DTYPE_FP16),
    /* FP8: OCP and fnuz bytes decoded exactly in software on every target
     * (ra_layout.h; gfx942 and gfx90a run the same code), the math at the
     * query's precision whatever fp8_attention says */
    .kv_dtypes = AH_BIT(AH_DTYPE_BF16) | AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_FP8_E4M3) |
                 AH_BIT(AH_DTYPE_FP8_E5M2) | AH_BIT(AH_DTYPE_FP8_E4M3_FNUZ) |
                 AH_BIT(AH_DTYPE_FP8_E5M2_FNUZ),
    .qk_head_sizes = AH_INT_SET_LIST(ra_qk_list),
    .v_head_sizes = AH_INT_SET_LIST(ra_v_list),
    .block_sizes = AH_INT_SET_RANGE(16, 1024, 16),
    .preferred_block_size = 16,
    /* EMPTY_KV: a request with seq_len 0 walks no key in the decode or the
     * prefill kernel (ra_decode_keys, ra_prefill_keys: its table row is
     * never read) and ends as out 0, LSE -inf; merge_states does not read
     * a part of LSE -inf. */
    .features = AH_FEAT_MLA | AH_FEAT_SINKS | AH_FEAT_SLIDING_WINDOW | AH_FEAT_SOFTCAP |
                AH_FEAT_ALIBI | AH_FEAT_NON_CAUSAL | AH_FEAT_CAUSAL_FLAG | AH_FEAT_LSE |
                AH_FEAT_EMPTY_KV,
    .attn_types = AH_BIT(AH_ATTN_DECODER),
    .kv_layouts = AH_BIT(AH_KV_LAYOUT_NHD) | AH_BIT(AH_KV_LAYOUT_HND),
    .preferred_kv_layout = AH_KV_LAYOUT_NHD,
    .gfx_targets = ra_targets,
    .n_gfx_targets = (uint32_t)(sizeof ra_targets / sizeof *ra_targets),
    /* decode batches (ra_plan), as vLLM's ROCM_AITER_FA; host logic tested
     * against a fake libamdhip64 (test/fake_hip.c), never run on a GPU */
    .graph_level = AH_GRAPH_UNIFORM_SINGLE_TOKEN_DECODE,
    .graph_seq_len_fill = 0,
    .forward_writes_kv = 0,
    .caller_output = 1,
    /* decode serves any grouping 16 heads a wave; MLA's 8..128 are tested */
    .max_head_groups = 128,
    .check_combination = ra_check_combination,
    .prefill_rank = AH_RANK_PRIMARY,
    .decode_rank = AH_RANK_PRIMARY,
    .mixed_batch = AH_MIXED_SPLIT,
    .decode_query_len_max = 1,
};

static const ah_plugin_ops ra_ops = {
    .struct_size = sizeof(ah_plugin_ops),
    .probe = ra_probe,
    .context_create = ra_context_create,
    .context_destroy = ra_context_destroy,
    .context_error = ra_context_error,
    .state_create = ra_state_create,
    .state_destroy = ra_state_destroy,
    .state_error = ra_state_error,
    .plan = ra_plan,
    .forward = ra_forward,
    .write_kv = ra_write_kv,
    .merge_states = ra_merge_states,
    .workspace_size = ra_workspace_size,
    .mem_alloc = ra_mem_alloc,
    .mem_free = ra_mem_free,
    .mem_copy = ra_mem_copy,
    .synchronize = ra_synchronize,
    .stream_create = ra_stream_create,
    .stream_destroy = ra_stream_destroy,
    .timer_start = ra_timer_start,
    .timer_stop = ra_timer_stop,
    .graph_begin = ra_graph_begin,
    .graph_end = ra_graph_end,
    .graph_launch = ra_graph_launch,
    .graph_destroy = ra_graph_destroy,
    .event_create = ra_event_create,
    .event_destroy = ra_event_destroy,
    .event_record = ra_event_record,
    .stream_wait = ra_stream_wait,
};

AH_PLUGIN_DEFINE(
    rocm_aiter, "0.1", "attnhost", "MIT",
    "AITER-class MFMA attention for AMD Instinct (gfx90a, gfx942) through HIP: paged decode "
    "with 256-key partitions, prefill/extend, FP8 KV (OCP), KV write, merge_states; unverified on "
    "hardware until `attnhost check --plugin rocm_aiter` passes on an AMD GPU",
    AH_DEVICE_HIP, &ra_caps, &ra_ops)
