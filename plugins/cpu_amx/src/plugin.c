/*
 * cpu_amx: paged attention on x86-64 CPUs. This file is the ABI face of the
 * plugin: the capability descriptor, the probe, context and state handles,
 * the memory checks of forward / write_kv (the host checks the rest), the
 * argument checks of merge_states, and the mapping of DLTensors onto the
 * kernels' run description (exec.c does the work).
 *
 * The ISA path is chosen per context from the host's CPU facts, or forced by
 * [plugin.cpu_amx] isa; a forced path the CPU lacks fails context_create and
 * makes probe report the plugin unusable, with the missing feature named.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "state.h"

static const uint32_t head_sizes_extra[] = {512, 576};
static const uint32_t v_sizes_extra[] = {512};

/* isa's choices, in the order of isa_paths. */
#define CPU_ISA_CHOICES "auto|amx|avx512bf16|avx512|avx2|scalar"
static const cpu_amx_path isa_paths[] = {CPU_AMX_PATH_COUNT /* auto */,
                                         CPU_AMX_AMX,
                                         CPU_AMX_AVX512BF16,
                                         CPU_AMX_AVX512,
                                         CPU_AMX_AVX2,
                                         CPU_AMX_SCALAR};

static const ah_config_key cpu_keys[] = {
    AH_KEY_ENUM_ROW(
        "isa", "auto", CPU_ISA_CHOICES,
        "kernel path; auto takes the best this CPU has; a path the CPU lacks makes the plugin unavailable"),
    AH_KEY_INT_ROW("threads", "0", 0, 4096,
                   "OpenMP threads; 0: OMP_NUM_THREADS or every logical core"),
    AH_KEY_INT_ROW(
        "split_min", "256", 16, 1 << 20,
        "fewest keys per split-KV chunk when a batch has too few items to fill the threads"),
    AH_KEY_INT_ROW(
        "tile_min_rows", "8", 1, 1 << 20,
        "bf16 q and cache: rows (query tokens x heads per KV head) from which the bf16 tile kernel (AMX / vdpbf16ps) replaces the fp32 one"),
    AH_KEY_BOOL_ROW(
        "amx_decode", "true",
        "amx path, bf16 decode: true runs Q.K and P.V on AMX tiles, false on vdpbf16ps (the avx512bf16 decode kernel)"),
    AH_KEY_INT_ROW(
        "prefetch", "-1", -1, 64,
        "pieces of 16 keys ahead that the decode and fp32 kernels prefetch into L2 (0: none, leave it to the hardware prefetchers); -1 (auto): 0 on the amx path (the Xeon's own prefetchers do better), else 4"),
    AH_KEY_BOOL_ROW(
        "amx_interleave", "true",
        "amx path, prefill: true issues each row block's tile products in small stages between the next block's softmax rows, false in one burst after it"),
    AH_KEY_BOOL_ROW(
        "tile_prefetch", "true",
        "bf16 tile kernel (prefill): true prefetches the pre-packed K/V chunk after next into L2, a few lines per softmax row; false leaves it to the hardware prefetchers"),
};

static void cpu_check_combination(const ah_layer_spec *spec, const ah_probe_info *probe,
                                  ah_reason_sink *sink);

static const ah_caps cpu_caps = {
    .struct_size = sizeof(ah_caps),
    .q_dtypes = AH_BIT(AH_DTYPE_FP32) | AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_BF16),
    .kv_dtypes = AH_BIT(AH_DTYPE_FP32) | AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_BF16) |
                 AH_BIT(AH_DTYPE_FP8_E4M3) | AH_BIT(AH_DTYPE_FP8_E5M2) |
                 /* ABI 2.3: every ISA's cvt_row decodes them (kern_vec.h) */
                 AH_BIT(AH_DTYPE_FP8_E4M3_FNUZ) | AH_BIT(AH_DTYPE_FP8_E5M2_FNUZ),
    .qk_head_sizes = AH_INT_SET_LIST_AND_RANGE(head_sizes_extra, 32, 256, 16),
    .v_head_sizes = AH_INT_SET_LIST_AND_RANGE(v_sizes_extra, 32, 256, 16),
    .block_sizes = AH_INT_SET_RANGE(16, 4096, 16),
    .preferred_block_size = 16,
    .features = AH_FEAT_MLA | AH_FEAT_SINKS | AH_FEAT_SLIDING_WINDOW | AH_FEAT_ALIBI |
                AH_FEAT_SOFTCAP | AH_FEAT_NON_CAUSAL | AH_FEAT_LSE | AH_FEAT_DIFF_HEAD_SIZES |
                /* ABI 2.1, on every ISA path: encoder layers on packed rows through
                 * the same kernels, cross layers over encoder_seq_lens, decoder
                 * layers with causal = off, tree masks (a portable fp32 kernel) */
                AH_FEAT_TREE_MASK | AH_FEAT_CACHELESS | AH_FEAT_CROSS_ATTENTION |
                AH_FEAT_CAUSAL_FLAG | AH_FEAT_RELEASED_BLOCKS | AH_FEAT_EMPTY_KV |
                /* ABI 2.3: ragged K/V rows go through the cacheless path;
                 * scales per KV head, in (host-memory) tensors; the query
                 * scale, which kernels without FP8 math leave unused */
                AH_FEAT_RAGGED_KV | AH_FEAT_KV_SCALE_PER_HEAD | AH_FEAT_SCALE_TENSORS |
                AH_FEAT_Q_SCALE,
    .attn_types = AH_BIT(AH_ATTN_DECODER) | AH_BIT(AH_ATTN_ENCODER) | AH_BIT(AH_ATTN_ENCODER_ONLY) |
                  AH_BIT(AH_ATTN_ENCODER_DECODER),
    .kv_layouts = AH_BIT(AH_KV_LAYOUT_NHD) | AH_BIT(AH_KV_LAYOUT_HND) |
                  AH_BIT(AH_KV_LAYOUT_NHD_INTERLEAVED) | AH_BIT(AH_KV_LAYOUT_HND_INTERLEAVED),
    .preferred_kv_layout = AH_KV_LAYOUT_NHD,
    .cpu_isa_required = 0,
    .graph_level = AH_GRAPH_NEVER,
    .graph_seq_len_fill = 0,
    .forward_writes_kv = 0,
    .caller_output = 1,
    .max_head_groups = 0,
    .config_keys = cpu_keys,
    .n_config_keys = sizeof cpu_keys / sizeof cpu_keys[0],
    .check_combination = cpu_check_combination,
    .prefill_rank = AH_RANK_PRIMARY,
    .decode_rank = AH_RANK_PRIMARY,
    .mixed_batch = AH_MIXED_WHOLE,
    .decode_query_len_max = 1,
};

/* Rules across fields that the sets above cannot say. */
static void cpu_check_combination(const ah_layer_spec *spec, const ah_probe_info *probe,
                                  ah_reason_sink *sink)
{
    char v[64];
    (void)probe;
    if (spec->num_kv_heads == 0 || spec->num_q_heads % spec->num_kv_heads != 0) {
        snprintf(v, sizeof v, "%u/%u", spec->num_q_heads, spec->num_kv_heads);
        sink->add(sink, AH_REASON_COMBINATION, "num_q_heads/num_kv_heads", v,
                  "a whole number of query heads per KV head");
    }
    if (spec->use_mla) {
        if (spec->num_kv_heads != 1) {
            snprintf(v, sizeof v, "%u", spec->num_kv_heads);
            sink->add(sink, AH_REASON_COMBINATION, "num_kv_heads", v, "1 with MLA");
        }
        if (spec->v_head_size > spec->qk_head_size) {
            snprintf(v, sizeof v, "%u > %u", spec->v_head_size, spec->qk_head_size);
            sink->add(sink, AH_REASON_COMBINATION, "v_head_size", v,
                      "<= qk_head_size with MLA (V is the head of the key)");
        }
    } else if (spec->qk_head_size == 576) {
        sink->add(sink, AH_REASON_COMBINATION, "qk_head_size", "576", "576 only with MLA");
    }
}

/* ---- ISA and threads from the host --------------------------------------- */

static _Thread_local char why_buf[256];

/* Resolve the path and thread count; on failure write the reason to why. */
static ah_status cpu_resolve(const ah_host_services *host, cpu_amx_path *path, int *threads,
                             uint32_t *split_min, uint32_t *tile_min, uint32_t *amx_dec,
                             uint32_t *pf, uint32_t *ilv, uint32_t *tpf, char *why, size_t cap)
{
    const uint32_t isa = host && host->hw ? host->hw->cpu_isa : 0;
    const cpu_amx_path want =
        isa_paths[host && host->config_int ? host->config_int(host, "isa") : 0];
    int is_auto = want == CPU_AMX_PATH_COUNT;
    *path = want;
    if (is_auto) *path = cpu_amx_path_best(isa);
    uint32_t need = cpu_amx_path_needs(*path), missing = need & ~isa;
    if (missing) {
        static const char *const names[] = {"SSE4.2",   "AVX",         "AVX2",        "FMA",
                                            "F16C",     "AVX512F",     "AVX512BW",    "AVX512VL",
                                            "AVX512DQ", "AVX512-VNNI", "AVX512-BF16", "AVX512-FP16",
                                            "AMX-TILE", "AMX-BF16",    "AMX-INT8",    "AMX-FP16"};
        int bit = __builtin_ctz(missing);
        const char *note = host->hw && host->hw->amx_note[0] && bit >= 12 ? host->hw->amx_note : "";
        snprintf(
            why, cap,
            "[plugin.cpu_amx] isa = %s needs %s, which this CPU lacks or the OS has not enabled%s%s",
            cpu_amx_path_name(*path), names[bit], note[0] ? ": " : "", note);
        return AH_ERR_UNAVAILABLE;
    }
    int t = host && host->config_int ? (int)host->config_int(host, "threads") : 0;
#ifdef _OPENMP
    if (t == 0) t = omp_get_max_threads();
#endif
    if (t <= 0) t = 1;
    *threads = t;
    const char *keys[6] = {"split_min", "tile_min_rows",  "amx_decode",
                           "prefetch",  "amx_interleave", "tile_prefetch"};
    uint32_t *dst[6] = {split_min, tile_min, amx_dec, pf, ilv, tpf};
    for (int i = 0; i < 6; i++)
        *dst[i] = host && host->config_int ? (uint32_t)host->config_int(host, keys[i]) : 0;
    /* prefetch auto: software prefetch pays on the EPYC (decode 11.9 vs 5.1
     * GB/cpu-s without) but costs on the Xeon with AMX, whose own
     * prefetchers keep up with the decode kernels (DECISIONS.md). */
    if (*pf == (uint32_t)-1) *pf = *path == CPU_AMX_AMX ? 0u : 4u;
    return AH_OK;
}

static ah_status cpu_probe(const ah_host_services *host, ah_probe_info *info)
{
    cpu_amx_path path;
    int threads;
    uint32_t sm, tm, ad, pf, il, tp;
    char why[256];
    ah_status rc =
        cpu_resolve(host, &path, &threads, &sm, &tm, &ad, &pf, &il, &tp, why, sizeof why);
    info->usable = rc == AH_OK;
    if (rc != AH_OK) ah_strlcpy(info->reason, why, sizeof info->reason);
    const ah_hw_facts *hw = host ? host->hw : NULL;
    ah_strlcpy(info->device_name, hw && hw->cpu_model[0] ? hw->cpu_model : "x86-64 CPU",
               sizeof info->device_name);
    ah_strlcpy(info->arch, rc == AH_OK ? cpu_amx_path_name(path) : "none", sizeof info->arch);
    info->compute_capability = 0;
    info->device_count = 1;
    info->multiprocessors = rc == AH_OK ? (uint32_t)threads : (hw ? hw->cpu_logical_cores : 0);
    info->memory_bytes = hw ? hw->memory_bytes : 0;
    ah_strlcpy(info->driver_version, "", sizeof info->driver_version);
    return AH_OK;
}

static ah_status cpu_context_create(const ah_host_services *host, const ah_context_options *opts,
                                    ah_context **out, const char **why)
{
    *out = NULL;
    if (opts && opts->device_index != 0) {
        *why = "the CPU is device 0";
        return AH_ERR_UNAVAILABLE;
    }
    cpu_amx_path path;
    int threads;
    uint32_t sm, tm, ad, pf, il, tp;
    ah_status rc =
        cpu_resolve(host, &path, &threads, &sm, &tm, &ad, &pf, &il, &tp, why_buf, sizeof why_buf);
    if (rc != AH_OK) {
        if (why) *why = why_buf;
        return rc;
    }
    ah_context *c = host->alloc(host, sizeof *c);
    if (!c) {
        if (why) *why = "out of memory creating the cpu_amx context";
        return AH_ERR_OUT_OF_MEMORY;
    }
    memset(c, 0, sizeof *c);
    c->host = host;
    c->path = path;
    c->k = cpu_amx_path_kernels(path);
    c->threads = threads;
    c->split_min = sm;
    c->tile_min_rows = tm;
    c->amx_decode = ad;
    c->prefetch = pf;
    c->amx_interleave = il;
    c->tile_prefetch = tp;
    *out = c;
    return AH_OK;
}

static void cpu_context_destroy(ah_context *c)
{
    if (c) c->host->free(c->host, c);
}

static const char *cpu_context_error(const ah_context *c) { return c->err.msg; }

/* ---- states --------------------------------------------------------------- */

static ah_status cpu_state_create(ah_context *ctx, const ah_layer_spec *spec, const ah_limits *lim,
                                  ah_state **out)
{
    *out = NULL;
    const ah_caps *c = &cpu_caps;
    ah_status rc = ah_spec_check_caps(spec, c, &ctx->err);
    if (rc == AH_OK) rc = ah_spec_check_combination(spec, c, &ctx->err);
    if (rc != AH_OK) return rc;
    if (!(spec->softcap >= 0.0f) || !isfinite(spec->softcap))
        return ah_fail(&ctx->err, AH_ERR_INVALID_ARGUMENT, "softcap %g is not a finite value >= 0",
                       (double)spec->softcap);

    ah_state *st = ctx->host->alloc(ctx->host, sizeof *st);
    if (!st) return ah_fail(&ctx->err, AH_ERR_OUT_OF_MEMORY, "out of memory creating a state");
    memset(st, 0, sizeof *st);
    st->ctx = ctx;
    memcpy(&st->spec, spec, sizeof st->spec);
    if (lim)
        memcpy(&st->lim, lim,
               lim->struct_size < sizeof st->lim ? lim->struct_size : sizeof st->lim);
    cpu_amx_layer *L = &st->L;
    L->hq = spec->num_q_heads;
    L->hk = spec->num_kv_heads;
    L->group = L->hq / L->hk;
    L->d = spec->qk_head_size;
    L->dv = spec->v_head_size;
    L->dpad = (L->d + 31) & ~31u;
    L->q_dtype = spec->q_dtype;
    L->kv_dtype = spec->kv_dtype;
    L->block_size = spec->block_size;
    L->causal = ah_spec_causal(spec);
    L->cross = spec->attn_type == AH_ATTN_ENCODER_DECODER;
    L->ragged = ah_spec_ragged(spec);
    /* packed rows, new (cacheless) or ragged, take one path: a block table
     * over the rows (copy_batch) */
    L->cacheless = ah_spec_cacheless(spec) || L->ragged;
    if (L->cacheless) L->kv_dtype = spec->q_dtype; /* keys are packed rows in q dtype */
    L->window = spec->sliding_window;
    L->softcap = spec->softcap;
    L->scale = ah_spec_scale(spec);
    L->mla = spec->use_mla != 0;
    L->sinks = spec->use_sinks != 0;
    L->alibi = spec->use_alibi != 0;
    rc = cpu_amx_scratch_create(st);
    if (rc != AH_OK) {
        ah_strlcpy(ctx->err.msg, st->err.msg, sizeof ctx->err.msg);
        ctx->host->free(ctx->host, st);
        return rc;
    }
    *out = st;
    return AH_OK;
}

static void cpu_state_destroy(ah_state *st)
{
    if (!st) return;
    const ah_host_services *h = st->ctx->host;
    void *bufs[] = {st->ws_mem, st->qsl,    st->seq_lens, st->bt,       st->slots,
                    st->items,  st->merges, st->part_o,   st->part_lse, st->pp,
                    st->pp_off, st->pp_np,  st->pp_tasks, st->mask_ip};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) h->free(h, bufs[i]);
    h->free(h, st);
}

static const char *cpu_state_error(const ah_state *st) { return st->err.msg; }

static ah_status cpu_plan(ah_state *st, const ah_batch *batch, ah_plan_mode mode, void *stream)
{
    (void)stream;
    if (mode != AH_PLAN_EAGER)
        return ah_fail(&st->err, AH_ERR_UNSUPPORTED,
                       "cpu_amx has no graph capture (graph level NEVER); plan mode %d", (int)mode);
    return cpu_amx_plan(st, batch);
}

/* ---- tensor checks --------------------------------------------------------- */

/* The host checks forward's and write_kv's tensors against the spec and
 * the batch unless the engine switched validation off (plugin_util.h).
 * What stays here protects memory then: each tensor holds what the
 * kernels address (cpu_amx_plan has checked every block id and slot
 * against the batch's num_blocks, so a cache of that many blocks holds
 * them all). */

static ah_status check_rows(ah_state *st, const DLTensor *t, const char *name, int64_t rows,
                            uint32_t heads, uint32_t hsz)
{
    const ah_dl_want w = {name, 3, {rows, heads, hsz}, 1, st->L.q_dtype, 0, AH_KV_LAYOUT_AUTO};
    return ah_dl_check(t, &w, &st->err);
}

static ah_status check_vec(ah_state *st, const DLTensor *t, const char *name, int ndim)
{
    const ah_dl_want w = {name,
                          ndim,
                          {ndim == 2 ? st->num_tokens : st->L.hq, st->L.hq},
                          1,
                          AH_DTYPE_FP32,
                          0,
                          AH_KV_LAYOUT_AUTO};
    return ah_dl_check(t, &w, &st->err);
}

/* A cache tensor; its strides into (block, token, head). The kernels address
 * every row through these strides, so the views of an interleaved layout
 * (block stride twice a dense one, ah_dl_cache_want) need nothing else. */
static ah_status check_cache(ah_state *st, const DLTensor *t, const char *name, uint32_t hsz,
                             int64_t *bs_str, int64_t *ts_str, int64_t *hs_str)
{
    const ah_dl_want w = ah_dl_cache_want(name, &st->spec, st->num_blocks, hsz);
    ah_status rc = ah_dl_check(t, &w, &st->err);
    if (rc != AH_OK) return rc;
    const int hnd = ah_kv_layout_is_hnd(st->spec.kv_layout);
    *bs_str = ah_dl_stride(t, 0);
    *ts_str = ah_dl_stride(t, hnd ? 2 : 1);
    *hs_str = ah_dl_stride(t, hnd ? 1 : 2);
    return AH_OK;
}

/* One of a call's K and V scales (see cpu_amx_run): the tensor's values
 * when the layer takes scale tensors ([1] or [Hk], *hs 0 or 1), else the
 * float (0 meaning 1) kept in *one. 1 for a cache that is not FP8. The
 * query scale needs nothing here: these kernels keep queries in fp32 or
 * bf16, never FP8, so q_scale leaves the result as it is (plugin.h,
 * "FP8 scales"). */
static ah_status scales_of(ah_state *st, const DLTensor *t, float f, const char *name, float *one,
                           const float **out, uint32_t *hs)
{
    const cpu_amx_layer *L = &st->L;
    *one = ah_kv_scale(f, L->kv_dtype);
    *out = one;
    *hs = 0;
    if (!t || !ah_dtype_is_fp8(L->kv_dtype)) return AH_OK;
    const ah_dl_want w = {name, 1, {1}, 1, AH_DTYPE_FP32, 1, AH_KV_LAYOUT_AUTO};
    ah_status rc = ah_dl_check(t, &w, &st->err);
    if (rc != AH_OK) return rc;
    if (t->shape[0] != 1 && t->shape[0] != (int64_t)L->hk)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "%s holds %lld scales, expected 1 or %u (one per KV head)", name,
                       (long long)t->shape[0], L->hk);
    *out = ah_dl_data(t);
    *hs = t->shape[0] > 1;
    return AH_OK;
}

/* The K and V scales of forward or write_kv into *k, *v and *hs (one head
 * stride for both: the host gives both tensors one form). MLA's values are
 * the key cache's head, so they take the K scales. */
static ah_status kv_scales_of(ah_state *st, const DLTensor *kt, const DLTensor *vt, float kf,
                              float vf, float one[2], const float **k, const float **v,
                              uint32_t *hs)
{
    uint32_t vhs;
    ah_status rc = scales_of(st, kt, kf, "k_scale_tensor", &one[0], k, hs);
    if (rc == AH_OK && st->L.mla) {
        *v = *k;
        return AH_OK;
    }
    if (rc == AH_OK) rc = scales_of(st, vt, vf, "v_scale_tensor", &one[1], v, &vhs);
    if (rc == AH_OK && vhs != *hs)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "k_scale_tensor and v_scale_tensor differ in form (per head or not)");
    return rc;
}

static ah_status cpu_forward(ah_state *st, const ah_forward_args *a)
{
    const cpu_amx_layer *L = &st->L;
    cpu_amx_run run;
    memset(&run, 0, sizeof run);
    run.L = L;
    run.pf_dist = st->ctx->prefetch;
    run.interleave = st->ctx->amx_interleave;
    run.tile_pf = st->ctx->tile_prefetch;
    if (st->n_pp_tasks) {
        run.pp = (uint16_t *)(((uintptr_t)st->pp + 63) & ~(uintptr_t)63);
        run.pp_off = st->pp_off;
        run.pp_np = st->pp_np;
    }
    ah_status rc;
    if ((rc = check_rows(st, a->q, "q", st->num_tokens, L->hq, L->d)) != AH_OK) return rc;
    if ((rc = check_rows(st, a->out, "out", st->num_tokens, L->hq, L->dv)) != AH_OK) return rc;
    if (L->cacheless) {
        /* keys and values are packed rows (copy_batch's block table): the
         * new tokens', or a ragged step's num_k_tokens */
        const int64_t Tk = L->ragged ? st->num_k_tokens : st->num_tokens;
        if ((rc = check_rows(st, a->key, "key", Tk, L->hk, L->d)) != AH_OK) return rc;
        if ((rc = check_rows(st, a->value, "value", Tk, L->hk, L->dv)) != AH_OK) return rc;
        run.kc = ah_dl_data(a->key);
        run.vc = ah_dl_data(a->value);
        run.k_bs = run.k_ts = ah_dl_stride(a->key, 0);
        run.k_hs = ah_dl_stride(a->key, 1);
        run.v_bs = run.v_ts = ah_dl_stride(a->value, 0);
        run.v_hs = ah_dl_stride(a->value, 1);
    } else if ((rc = check_cache(st, a->key_cache, "key_cache", L->d, &run.k_bs, &run.k_ts,
                                 &run.k_hs)) != AH_OK) {
        return rc;
    } else if (L->mla) {
        run.vc = ah_dl_data(a->key_cache);
        run.v_bs = run.k_bs, run.v_ts = run.k_ts, run.v_hs = run.k_hs;
    } else {
        if ((rc = check_cache(st, a->value_cache, "value_cache", L->dv, &run.v_bs, &run.v_ts,
                              &run.v_hs)) != AH_OK)
            return rc;
        run.vc = ah_dl_data(a->value_cache);
    }
    if (!L->cacheless) run.kc = ah_dl_data(a->key_cache);
    if (a->lse) {
        if ((rc = check_vec(st, a->lse, "lse", 2)) != AH_OK) return rc;
        run.lse = ah_dl_data(a->lse);
        run.l_ts = ah_dl_stride(a->lse, 0);
        run.l_hs = 1;
    }
    if (L->sinks) {
        if ((rc = check_vec(st, a->sinks, "sinks", 1)) != AH_OK) return rc;
        run.sinks = ah_dl_data(a->sinks);
    }
    if (L->alibi) {
        if ((rc = check_vec(st, a->alibi_slopes, "alibi_slopes", 1)) != AH_OK) return rc;
        run.alibi = ah_dl_data(a->alibi_slopes);
    }
    float one[2];
    if ((rc = kv_scales_of(st, a->k_scale_tensor, a->v_scale_tensor, a->k_scale, a->v_scale, one,
                           &run.k_scale, &run.v_scale, &run.scale_hs)) != AH_OK)
        return rc;
    run.q = ah_dl_data(a->q);
    run.q_ts = ah_dl_stride(a->q, 0);
    run.q_hs = ah_dl_stride(a->q, 1);
    run.out = ah_dl_data(a->out);
    run.o_ts = ah_dl_stride(a->out, 0);
    run.o_hs = ah_dl_stride(a->out, 1);
    run.qsl = st->qsl;
    run.seq_lens = st->seq_lens;
    run.block_table = st->bt;
    run.bt_stride = st->bt_stride;
    cpu_amx_execute(st, &run);
    return AH_OK;
}

/* ---- KV-cache write -------------------------------------------------------- */

static int float_dtype_of(const DLTensor *t, ah_dtype *out)
{
    const ah_dtype c[3] = {AH_DTYPE_FP32, AH_DTYPE_FP16, AH_DTYPE_BF16};
    for (int i = 0; i < 3; i++)
        if (ah_dl_dtype_is(t, c[i])) {
            *out = c[i];
            return 1;
        }
    return 0;
}

static void write_rows(const ah_state *st, const char *src, int64_t s_ts, int64_t s_hs, char *cache,
                       int64_t c_bs, int64_t c_ts, int64_t c_hs, uint32_t hsz, const float *scale,
                       uint32_t scale_hs)
{
    const cpu_amx_layer *L = &st->L;
    const ah_dtype sdt = L->q_dtype;
    const size_t ssz = ah_dtype_size(sdt), csz = ah_dtype_size(L->kv_dtype);
    const int fp8 = ah_dtype_is_fp8(L->kv_dtype);
    const long T = (long)st->num_tokens;
    const int nt = st->ctx->threads;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && T > 64)
    for (long t = 0; t < T; t++) {
        int64_t slot = st->slots[t];
        if (slot < 0) continue;
        int64_t blk = slot / L->block_size, off = slot % L->block_size;
        for (uint32_t h = 0; h < L->hk; h++) {
            /* stored = real / scale, a float32 division as plugin.h defines it
             * (a multiply by the reciprocal rounds ties differently) */
            const float sc = scale[h * scale_hs];
            const char *s = src + ((int64_t)t * s_ts + (int64_t)h * s_hs) * (int64_t)ssz;
            char *d = cache + (blk * c_bs + off * c_ts + (int64_t)h * c_hs) * (int64_t)csz;
            if (sdt == L->kv_dtype) {
                memcpy(d, s, hsz * ssz);
            } else {
                for (uint32_t c = 0; c < hsz; c++) {
                    float v = ah_load_f32(s, c, sdt);
                    ah_store_f32(d, c, L->kv_dtype, fp8 ? v / sc : v);
                }
            }
        }
    }
}

static ah_status cpu_write_kv(ah_state *st, const ah_kv_write_args *a)
{
    const cpu_amx_layer *L = &st->L;
    int64_t kb, kt, kh, vb = 0, vt = 0, vh = 0;
    ah_status rc;
    if ((rc = check_rows(st, a->key, "key", st->num_tokens, L->hk, L->d)) != AH_OK ||
        (rc = check_cache(st, a->key_cache, "key_cache", L->d, &kb, &kt, &kh)) != AH_OK)
        return rc;
    if (!L->mla &&
        ((rc = check_rows(st, a->value, "value", st->num_tokens, L->hk, L->dv)) != AH_OK ||
         (rc = check_cache(st, a->value_cache, "value_cache", L->dv, &vb, &vt, &vh)) != AH_OK))
        return rc;
    float one[2];
    const float *ksc, *vsc;
    uint32_t shs;
    if ((rc = kv_scales_of(st, a->k_scale_tensor, a->v_scale_tensor, a->k_scale, a->v_scale, one,
                           &ksc, &vsc, &shs)) != AH_OK)
        return rc;
    write_rows(st, ah_dl_data(a->key), ah_dl_stride(a->key, 0), ah_dl_stride(a->key, 1),
               ah_dl_data(a->key_cache), kb, kt, kh, L->d, ksc, shs);
    if (!L->mla)
        write_rows(st, ah_dl_data(a->value), ah_dl_stride(a->value, 0), ah_dl_stride(a->value, 1),
                   ah_dl_data(a->value_cache), vb, vt, vh, L->dv, vsc, shs);
    return AH_OK;
}

/* ---- merge_states ---------------------------------------------------------- */

static ah_status merge_check(ah_context *ctx, const DLTensor *t, const char *name, int ndim,
                             const int64_t *shape, int is_lse, ah_dtype *dt)
{
    if (!t) return ah_fail(&ctx->err, AH_ERR_INVALID_ARGUMENT, "%s is NULL", name);
    if (t->device.device_type != kDLCPU)
        return ah_fail(&ctx->err, AH_ERR_INVALID_ARGUMENT, "%s is not in host memory", name);
    if (is_lse ? !ah_dl_dtype_is(t, AH_DTYPE_FP32) : !float_dtype_of(t, dt))
        return ah_fail(&ctx->err, AH_ERR_INVALID_ARGUMENT, "%s must be %s", name,
                       is_lse ? "fp32" : "fp32, fp16 or bf16");
    if (t->ndim != ndim)
        return ah_fail(&ctx->err, AH_ERR_INVALID_ARGUMENT, "%s has %d dims, expected %d", name,
                       t->ndim, ndim);
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i])
            return ah_fail(&ctx->err, AH_ERR_INVALID_ARGUMENT, "%s dim %d is %lld, expected %lld",
                           name, i, (long long)t->shape[i], (long long)shape[i]);
    if (!ah_dl_is_contiguous(t))
        return ah_fail(&ctx->err, AH_ERR_INVALID_ARGUMENT, "%s must be contiguous", name);
    return AH_OK;
}

static ah_status cpu_merge_states(ah_context *ctx, const ah_merge_args *a)
{
    if (!a || !a->v_a)
        return ah_fail(&ctx->err, AH_ERR_INVALID_ARGUMENT, "merge args or v_a are NULL");
    if (a->v_a->ndim != 3)
        return ah_fail(&ctx->err, AH_ERR_INVALID_ARGUMENT, "v_a has %d dims, expected 3 [T, H, D]",
                       a->v_a->ndim);
    const int64_t *sh = a->v_a->shape, lsh[2] = {sh[0], sh[1]};
    ah_dtype da, db, dout, dl;
    ah_status rc;
    if ((rc = merge_check(ctx, a->v_a, "v_a", 3, sh, 0, &da)) != AH_OK ||
        (rc = merge_check(ctx, a->v_b, "v_b", 3, sh, 0, &db)) != AH_OK ||
        (rc = merge_check(ctx, a->out, "out", 3, sh, 0, &dout)) != AH_OK ||
        (rc = merge_check(ctx, a->lse_a, "lse_a", 2, lsh, 1, &dl)) != AH_OK ||
        (rc = merge_check(ctx, a->lse_b, "lse_b", 2, lsh, 1, &dl)) != AH_OK ||
        (a->lse_out && (rc = merge_check(ctx, a->lse_out, "lse_out", 2, lsh, 1, &dl)) != AH_OK))
        return rc;
    const long rows = (long)(sh[0] * sh[1]);
    const int64_t D = sh[2];
    const char *va = ah_dl_data(a->v_a), *vb = ah_dl_data(a->v_b);
    char *vo = ah_dl_data(a->out);
    const float *la = ah_dl_data(a->lse_a), *lb = ah_dl_data(a->lse_b);
    float *lo = a->lse_out ? (float *)ah_dl_data(a->lse_out) : NULL;
    const int nt = ctx->threads;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && rows * D > 65536)
    for (long r = 0; r < rows; r++) {
        float x = la[r], y = lb[r], M = x > y ? x : y;
        float wa = 0, wb = 0, lse = -INFINITY;
        if (M != -INFINITY) {
            wa = expf(x - M);
            wb = expf(y - M);
            lse = M + logf(wa + wb);
            float inv = 1.0f / (wa + wb);
            wa *= inv;
            wb *= inv;
        }
        /* Read both inputs of an element before writing: out may alias v_a. */
        for (int64_t c = 0; c < D; c++) {
            size_t i = (size_t)(r * D + c);
            float v = wa * ah_load_f32(va, i, da) + wb * ah_load_f32(vb, i, db);
            if (M == -INFINITY) v = 0.0f;
            ah_store_f32(vo, i, dout, v);
        }
        if (lo) lo[r] = lse;
    }
    return AH_OK;
}

static const ah_plugin_ops cpu_ops = {
    .struct_size = sizeof(ah_plugin_ops),
    .probe = cpu_probe,
    .context_create = cpu_context_create,
    .context_destroy = cpu_context_destroy,
    .context_error = cpu_context_error,
    .state_create = cpu_state_create,
    .state_destroy = cpu_state_destroy,
    .state_error = cpu_state_error,
    .plan = cpu_plan,
    .forward = cpu_forward,
    .write_kv = cpu_write_kv,
    .merge_states = cpu_merge_states,
};

AH_PLUGIN_DEFINE(
    cpu_amx, "1.0.0", "attnhost", "Apache-2.0",
    "Paged attention on x86-64 CPUs: AMX, AVX-512-BF16, AVX-512, AVX2 and scalar kernels",
    AH_DEVICE_CPU, &cpu_caps, &cpu_ops)
