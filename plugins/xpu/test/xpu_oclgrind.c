/*
 * The portable kernels through the OpenCL API with cl_mem buffers, for
 * Oclgrind (test/oclgrind.sh runs this under it). Oclgrind simulates an
 * OpenCL 1.2 device and reports every access outside a buffer, but has no
 * SVM (clSVMAlloc: "Unimplemented OpenCL 2.0 API"), which the plugin's
 * OpenCL runtime needs, so this driver does what the plugin's launchers
 * do (plugin.c) with buffers of its own: it builds the OpenCL C text the
 * plugin embeds (xpu_source, kernels_embed.c), lays out work items as
 * xpu_plan does, and launches each kernel family on small cases:
 *
 * - paged decode (xpu_attn), unsplit and on the split-KV path with
 *   xpu_split_merge; a prefill and an extend with a window and sinks
 *   over an HND cache;
 *   absorbed MLA (xpu_attn_mla) from an FP8 cache, split;
 * - xpu_write_kv into FP8 caches (e4m3 with V, e5m2 MLA without);
 * - xpu_merge_states with -inf parts whose rows hold NaN.
 *
 * Every buffer is exactly as large as the kernel may touch (caches hold
 * only the requests' blocks, shuffled), so a read one element past is
 * outside it. Block-table rows are wider than their requests' blocks and
 * garbage past them (0x7ffffff0; xpu_plan's compacted table holds 0
 * there, a valid block, which would hide a read past a request's blocks),
 * and each attention case has a request
 * with no keys (seq_len 0, a row of nothing but garbage). Absent tensors
 * get a 4-byte buffer, as the plugin passes a small one. Outputs are
 * poisoned, then checked against the host's oracle (reference.h): rows of
 * requests without keys exactly 0 with LSE exactly -inf (the sink's logit
 * with sinks), the rest within the conformance suite's tolerances, and
 * write_kv's caches byte for byte.
 *
 * Usage: xpu_oclgrind [PLATFORM] (PLATFORM: a platform name must contain
 * it, so that the test cannot pass on another device than Oclgrind's)
 * Exit: 0 all passed, 1 a failure, 77 no OpenCL platform.
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/reference.h>

#include "ath.h"
#include "xpu.h"

#define GARBAGE 0x7ffffff0

static cl_context g_ctx;
static cl_command_queue g_q;
static cl_kernel g_k[XPU_K_ATTN_INTEL]; /* the portable kernels, by XPU_K_* */
static cl_mem g_dummy;                  /* for absent tensors */
static int g_fail, g_pass;

static void report(const char *name, int ok, const char *msg)
{
    printf("%-4s %-52s%s\n", ok ? "ok" : "FAIL", name, msg);
    fflush(stdout);
    if (ok) g_pass++;
    else g_fail++;
}

/* ---- OpenCL ------------------------------------------------------------------ */

/* Every buffer, released at the end of the run: Oclgrind's
 * uninitialised-value checker frees no shadow when a buffer is released,
 * so a buffer at a reused address starts with the old one's (released
 * case by case, the MLA case's merge was reported reading uninitialised
 * partials that the kernel before it had written). */
static cl_mem g_bufs[128];
static int g_n_bufs;

/* A buffer of exactly bytes, holding host's bytes (host NULL: left
 * uninitialised, like the plugin's split workspace); NULL on a failure. */
static cl_mem buf_new(const void *host, size_t bytes)
{
    cl_int rc;
    if (g_n_bufs == (int)(sizeof g_bufs / sizeof *g_bufs)) return NULL;
    cl_mem m = clCreateBuffer(g_ctx, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                              (void *)host, &rc);
    if (rc != CL_SUCCESS) return NULL;
    return g_bufs[g_n_bufs++] = m;
}

static int buf_read(cl_mem m, void *host, size_t bytes)
{
    return clEnqueueReadBuffer(g_q, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL) != CL_SUCCESS;
}

/* 0, 1 with a message (the platform's or a failed call's), 77 without any
 * OpenCL platform. */
static int cl_setup(const char *want)
{
    cl_platform_id plats[8];
    cl_uint np = 0;
    if (clGetPlatformIDs(8, plats, &np) != CL_SUCCESS || np == 0) {
        printf("no OpenCL platform: skipped\n");
        return 77;
    }
    cl_platform_id plat = NULL;
    char name[256] = "";
    for (cl_uint i = 0; i < np && !plat; i++) {
        clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
        if (!want || strstr(name, want)) plat = plats[i];
    }
    if (!plat) {
        printf("FAIL no OpenCL platform named \"%s\" (is the driver running under it?)\n", want);
        return 1;
    }
    cl_device_id dev;
    cl_int rc = clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL);
    char dname[256] = "";
    if (rc == CL_SUCCESS) clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof dname, dname, NULL);
    printf("platform %s, device %s\n", name, dname);
    if (rc == CL_SUCCESS) g_ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &rc);
    if (rc == CL_SUCCESS) g_q = clCreateCommandQueue(g_ctx, dev, 0, &rc);
    if (rc != CL_SUCCESS) {
        printf("FAIL OpenCL setup: %d\n", rc);
        return 1;
    }
    /* the plugin's three portable modules, from the text it embeds, with
     * the options its runtime builds source with (rt_opencl.c) */
    cl_program prog[XPU_N_MODULES];
    for (int m = 0; m < XPU_N_MODULES; m++) {
        const char *src = (const char *)xpu_source[m].data;
        prog[m] = clCreateProgramWithSource(g_ctx, 1, &src, NULL, &rc);
        if (rc == CL_SUCCESS) rc = clBuildProgram(prog[m], 1, &dev, "-cl-std=CL1.2", NULL, NULL);
        if (rc != CL_SUCCESS) {
            static char log[1 << 16];
            log[0] = 0;
            clGetProgramBuildInfo(prog[m], dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
            printf("FAIL building module %d: %d\n%s\n", m, rc, log);
            return 1;
        }
    }
    for (int k = 0; k < XPU_K_ATTN_INTEL; k++) {
        g_k[k] = clCreateKernel(prog[xpu_kernel_module[k]], xpu_kernel_names[k], &rc);
        if (rc != CL_SUCCESS) {
            printf("FAIL kernel %s: %d\n", xpu_kernel_names[k], rc);
            return 1;
        }
    }
    for (int m = 0; m < XPU_N_MODULES; m++) clReleaseProgram(prog[m]);
    const float zero = 0.0f;
    g_dummy = buf_new(&zero, sizeof zero);
    return g_dummy ? 0 : 1;
}

/* One kernel argument: a buffer (the address of its cl_mem) or a scalar. */
typedef struct karg {
    size_t size;
    const void *val;
} karg;
#define A_BUF(m) ((karg){sizeof(cl_mem), &(m)})
#define A_VAL(v) ((karg){sizeof(v), &(v)})

/* Kernel k over gx x gy work-items in groups of XPU_GROUP x 1, gx rounded
 * up to the group as the plugin's runtimes launch (rt_opencl.c), so the
 * kernels' return past their last row runs too; completes before it
 * returns. 0 or the failing call's error. */
static int launch(int k, const karg *a, int n, size_t gx, size_t gy)
{
    cl_int rc = CL_SUCCESS;
    for (int i = 0; i < n && rc == CL_SUCCESS; i++)
        rc = clSetKernelArg(g_k[k], (cl_uint)i, a[i].size, a[i].val);
    const size_t gsz[2] = {(gx + XPU_GROUP - 1) / XPU_GROUP * XPU_GROUP, gy},
                 lsz[2] = {XPU_GROUP, 1};
    if (rc == CL_SUCCESS)
        rc = clEnqueueNDRangeKernel(g_q, g_k[k], 2, NULL, gsz, lsz, 0, NULL, NULL);
    if (rc == CL_SUCCESS) rc = clFinish(g_q);
    return rc;
}

/* ---- attention ----------------------------------------------------------------- */

typedef struct acase {
    const char *name;
    ah_dtype q, kv;
    uint32_t hq, hk, d, dv, bs, window, mla;
    int hnd; /* HND cache layout (blocks of [head][slot][channel]), else NHD */
    int sinks, alibi;
    float softcap, k_scale, v_scale;
    uint32_t reqs;
    int32_t qlen[4], seq[4]; /* seq 0: a request without keys (query length 1) */
    uint32_t chunk;          /* split-KV chunk in keys; 0 unsplit */
} acase;

/* Tolerances of the conformance suite's comparison, per output dtype. */
static double tol_of(ah_dtype q, ah_dtype kv)
{
    double t = q == AH_DTYPE_FP32 ? 1e-4 : q == AH_DTYPE_FP16 ? 2e-3 : 1.6e-2;
    if (ah_dtype_is_fp8(kv) && t < 5e-3) t = 5e-3;
    return t;
}

/* The work items and split list xpu_plan makes for a causal decoder layer:
 * one item per query token over [0, seq_len), or, with a chunk and a
 * visible range longer than it, one per chunk of the range, each writing
 * partial dest. items (4 per item), dest and splits (4 per split) hold
 * T * (max_seq / chunk + 1) entries. */
static void plan_items(const acase *c, const int32_t *qsl, int32_t *items, int32_t *dest,
                       int32_t *splits, int *n_items, int *n_splits, int *n_parts)
{
    int ni = 0, ns = 0, np = 0;
    for (uint32_t r = 0; r < c->reqs; r++) {
        const int32_t q0 = qsl[r], qn = qsl[r + 1] - q0, len = c->seq[r];
        for (int32_t i = 0; i < qn; i++) {
            const int64_t p = (int64_t)len - qn + i;
            int64_t lo = 0, hi = len;
            if (hi > p + 1) hi = p + 1;
            if (c->window > 0 && lo < p - c->window + 1) lo = p - c->window + 1;
            if (hi < lo) hi = lo;
            const int64_t ch = c->chunk, nc = ch && hi - lo > ch ? (hi - lo + ch - 1) / ch : 1;
            if (nc > 1) {
                int32_t *sp = splits + 4 * ns++;
                sp[0] = q0 + i, sp[1] = np, sp[2] = (int32_t)nc, sp[3] = 0;
            }
            for (int64_t k = 0; k < nc; k++, ni++) {
                int32_t *it = items + 4 * ni;
                it[0] = q0 + i, it[1] = (int32_t)r;
                it[2] = nc > 1 ? (int32_t)(lo + k * ch) : 0;
                it[3] = nc > 1 ? (int32_t)(lo + (k + 1) * ch < hi ? lo + (k + 1) * ch : hi) : len;
                dest[ni] = nc > 1 ? np + (int32_t)k : -1;
            }
            if (nc > 1) np += (int32_t)nc;
        }
    }
    *n_items = ni, *n_splits = ns, *n_parts = np;
}

static void run_attn(const acase *c, uint64_t *rng)
{
    char msg[512] = "";
    int ok = 0;
    const uint32_t R = c->reqs, bs = c->bs, hq = c->hq, hk = c->hk, d = c->d, dv = c->dv;
    int32_t qsl[5] = {0}, nb[4], W = 1, NB = 0, max_q = 0, max_s = 0;
    for (uint32_t r = 0; r < R; r++) {
        qsl[r + 1] = qsl[r] + c->qlen[r];
        nb[r] = (c->seq[r] + (int32_t)bs - 1) / (int32_t)bs;
        NB += nb[r];
        if (nb[r] > W) W = nb[r];
        if (c->qlen[r] > max_q) max_q = c->qlen[r];
        if (c->seq[r] > max_s) max_s = c->seq[r];
    }
    const uint32_t T = (uint32_t)qsl[R], stride = (uint32_t)W + 2;
    const size_t qe = ah_dtype_size(c->q), ke = ah_dtype_size(c->kv);
    const size_t nq = (size_t)T * hq * d, no = (size_t)T * hq * dv, nl = (size_t)T * hq;
    const size_t nk = (size_t)NB * bs * hk * d, nv = c->mla ? 0 : (size_t)NB * bs * hk * dv;
    const size_t cap = (size_t)T * ((size_t)max_s / (c->chunk ? c->chunk : 1) + 2);
    /* every request's blocks, shuffled over the cache; garbage past them */
    int32_t *bt = malloc(sizeof(int32_t) * R * stride), *perm = malloc(sizeof(int32_t) * NB + 1);
    int64_t *slots = malloc(sizeof(int64_t) * T);
    int32_t *items = malloc(sizeof(int32_t) * 4 * cap), *dest = malloc(sizeof(int32_t) * cap);
    int32_t *splits = malloc(sizeof(int32_t) * 4 * cap);
    void *q = malloc(nq * qe), *kc = malloc(nk * ke), *vc = malloc(nv * ke + 1);
    void *out = malloc(no * qe);
    float *lse = malloc(sizeof(float) * nl), sinks[16], alibi[16];
    double *ref = malloc(sizeof(double) * no), *rlse = malloc(sizeof(double) * nl);
    cl_mem m[16] = {0};
    if (!bt || !perm || !slots || !items || !dest || !splits || !q || !kc || !vc || !out || !lse ||
        !ref || !rlse) {
        snprintf(msg, sizeof msg, " out of memory");
        goto done;
    }
    for (int32_t i = 0; i < NB; i++) perm[i] = i;
    for (int32_t i = NB - 1; i > 0; i--) {
        const int32_t j = (int32_t)(ath_rand_u64(rng) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (uint32_t r = 0, b = 0; r < R; r++)
        for (uint32_t i = 0; i < stride; i++)
            bt[r * stride + i] = (int32_t)i < nb[r] ? perm[b++] : GARBAGE;
    /* the new tokens' slots: the last query positions of each request */
    for (uint32_t r = 0; r < R; r++)
        for (int32_t i = 0; i < c->qlen[r]; i++) {
            const int32_t pos = c->seq[r] - c->qlen[r] + i;
            slots[qsl[r] + i] =
                pos < 0 ? -1 : (int64_t)bt[r * stride + pos / (int32_t)bs] * bs + pos % (int32_t)bs;
        }
    ath_fill_uniform(q, nq, c->q, 2.f, 1.f, rng);
    ath_fill_uniform(kc, nk, c->kv, 2.f, c->k_scale != 0.f ? c->k_scale : 1.f, rng);
    ath_fill_uniform(vc, nv, c->kv, 2.f, c->v_scale != 0.f ? c->v_scale : 1.f, rng);
    for (uint32_t h = 0; h < hq; h++)
        sinks[h] = (float)ath_rand_range(rng, -2, 2), alibi[h] = -0.25f / (float)(h + 1);
    memset(out, 0xff, no * qe);
    memset(lse, 0xff, sizeof(float) * nl);
    int n_items, n_splits, n_parts;
    plan_items(c, qsl, items, dest, splits, &n_items, &n_splits, &n_parts);

    const float scale = 1.0f / sqrtf((float)d);
    const int fp8 = ah_dtype_is_fp8(c->kv);
    float k_scale = fp8 && c->k_scale != 0.f ? c->k_scale : 1.f,
          v_scale = c->mla                     ? k_scale
                    : fp8 && c->v_scale != 0.f ? c->v_scale
                                               : 1.f;
    int64_t q_ts = (int64_t)hq * d, q_hs = d, o_ts = (int64_t)hq * dv, o_hs = dv, l_ts = hq;
    /* element strides of a block, a slot and a head, as plugin.c's check_cache */
    int64_t k_bs = (int64_t)bs * hk * d, k_ts = c->hnd ? d : (int64_t)hk * d,
            k_hs = c->hnd ? (int64_t)bs * d : d;
    int64_t v_bs = (int64_t)bs * hk * dv, v_ts = c->hnd ? dv : (int64_t)hk * dv,
            v_hs = c->hnd ? (int64_t)bs * dv : dv;
    if (c->mla) v_bs = k_bs, v_ts = k_ts, v_hs = k_hs;
    int q_dt = (int)AH_BIT(c->q), kv_dt = (int)AH_BIT(c->kv), bt_w = (int)stride;
    int ihq = (int)hq, group = (int)(hq / hk), id = (int)d, idv = (int)dv, ibs = (int)bs;
    int window = (int)c->window, mode = 0, flags = 1 | (c->sinks ? 2 : 0) | (c->alibi ? 4 : 0);
    float softcap = c->softcap;
    enum { Q, KC, VC, OUT, LSE, SINKS, ALIBI, QSL, SL, BT, ITEMS, DEST, PO, PL, SPLITS };
    m[Q] = buf_new(q, nq * qe), m[KC] = buf_new(kc, nk * ke);
    m[VC] = c->mla ? NULL : buf_new(vc, nv * ke);
    m[OUT] = buf_new(out, no * qe), m[LSE] = buf_new(lse, sizeof(float) * nl);
    m[SINKS] = c->sinks ? buf_new(sinks, sizeof(float) * hq) : NULL;
    m[ALIBI] = c->alibi ? buf_new(alibi, sizeof(float) * hq) : NULL;
    m[QSL] = buf_new(qsl, sizeof(int32_t) * (R + 1)), m[SL] = buf_new(c->seq, sizeof(int32_t) * R);
    m[BT] = buf_new(bt, sizeof(int32_t) * R * stride);
    m[ITEMS] = buf_new(items, sizeof(int32_t) * 4 * (size_t)n_items);
    m[DEST] = buf_new(dest, sizeof(int32_t) * (size_t)n_items);
    if (n_parts) {
        m[PO] = buf_new(NULL, sizeof(float) * n_parts * hq * dv);
        m[PL] = buf_new(NULL, sizeof(float) * n_parts * hq);
        m[SPLITS] = buf_new(splits, sizeof(int32_t) * 4 * (size_t)n_splits);
    }
    cl_mem vcm = c->mla ? m[KC] : m[VC], sm = c->sinks ? m[SINKS] : g_dummy,
           am = c->alibi ? m[ALIBI] : g_dummy, pom = n_parts ? m[PO] : g_dummy,
           plm = n_parts ? m[PL] : g_dummy;
    for (int i = Q; i <= SPLITS; i++)
        if (!m[i] && !(i == VC && c->mla) && !(i == SINKS && !c->sinks) &&
            !(i == ALIBI && !c->alibi) && !(i >= PO && !n_parts)) {
            snprintf(msg, sizeof msg, " clCreateBuffer failed");
            goto done;
        }
    /* Not reformatted: one line per group of the kernel's parameters (XPU_ATTN_PARAMS). */
    // clang-format off
    const karg args[] = {
        A_BUF(m[Q]), A_VAL(q_ts), A_VAL(q_hs), A_VAL(q_dt),
        A_BUF(m[KC]), A_VAL(k_bs), A_VAL(k_ts), A_VAL(k_hs),
        A_BUF(vcm), A_VAL(v_bs), A_VAL(v_ts), A_VAL(v_hs),
        A_VAL(kv_dt), A_VAL(k_scale), A_VAL(v_scale),
        A_BUF(m[OUT]), A_VAL(o_ts), A_VAL(o_hs),
        A_BUF(m[LSE]), A_VAL(l_ts),
        A_BUF(sm), A_BUF(am),
        A_BUF(m[QSL]), A_BUF(m[SL]), A_BUF(m[BT]), A_VAL(bt_w),
        A_BUF(m[ITEMS]), A_BUF(m[DEST]), A_VAL(n_items),
        A_BUF(pom), A_BUF(plm),
        A_VAL(ihq), A_VAL(group), A_VAL(id), A_VAL(idv), A_VAL(ibs),
        A_VAL(scale), A_VAL(softcap), A_VAL(window), A_VAL(mode), A_VAL(flags),
    };
    const karg margs[] = {
        A_BUF(m[SPLITS]), A_VAL(n_splits), A_BUF(pom), A_BUF(plm),
        A_BUF(m[OUT]), A_VAL(o_ts), A_VAL(o_hs), A_VAL(q_dt),
        A_BUF(m[LSE]), A_VAL(l_ts), A_BUF(sm),
        A_VAL(ihq), A_VAL(idv), A_VAL(flags),
    };
    // clang-format on
    int rc = launch(c->mla ? XPU_K_ATTN_MLA : XPU_K_ATTN, args, (int)(sizeof args / sizeof *args),
                    (size_t)n_items, hq);
    if (!rc && n_splits)
        rc = launch(XPU_K_SPLIT_MERGE, margs, (int)(sizeof margs / sizeof *margs), (size_t)n_splits,
                    hq);
    if (rc || buf_read(m[OUT], out, no * qe) || buf_read(m[LSE], lse, sizeof(float) * nl)) {
        snprintf(msg, sizeof msg, " launch or read: %d", rc);
        goto done;
    }

    ah_layer_spec sp = {.struct_size = sizeof sp,
                        .attn_type = AH_ATTN_DECODER,
                        .num_q_heads = hq,
                        .num_kv_heads = hk,
                        .qk_head_size = d,
                        .v_head_size = dv,
                        .q_dtype = c->q,
                        .kv_dtype = c->kv,
                        .block_size = bs,
                        .kv_layout = c->hnd ? AH_KV_LAYOUT_HND : AH_KV_LAYOUT_NHD,
                        .sliding_window = c->window,
                        .softcap = c->softcap,
                        .scale = scale,
                        .use_mla = c->mla,
                        .use_sinks = (uint32_t)c->sinks,
                        .use_alibi = (uint32_t)c->alibi};
    ah_batch b = {.struct_size = sizeof b,
                  .num_reqs = R,
                  .num_tokens = T,
                  .max_query_len = (uint32_t)max_q,
                  .max_seq_len = (uint32_t)max_s,
                  .num_blocks = (uint32_t)NB,
                  .query_start_loc_host = qsl,
                  .seq_lens_host = c->seq,
                  .block_table_host = bt,
                  .slot_mapping_host = slots,
                  .block_table_stride = stride};
    ah_ref_inputs in = {.struct_size = sizeof in,
                        .spec = &sp,
                        .batch = &b,
                        .q = q,
                        .key_cache = kc,
                        .value_cache = c->mla ? NULL : vc,
                        .sinks = c->sinks ? sinks : NULL,
                        .alibi_slopes = c->alibi ? alibi : NULL,
                        .k_scale = c->k_scale,
                        .v_scale = c->v_scale};
    ah_error err;
    if (ah_reference_attention(&in, ref, rlse, &err) != AH_OK) {
        snprintf(msg, sizeof msg, " reference: %.200s", err.msg);
        goto done;
    }
    /* requests without keys: exactly 0 and -inf (the sink's logit) */
    size_t bad_empty = 0;
    for (uint32_t r = 0; r < R; r++) {
        if (c->seq[r]) continue;
        for (size_t i = (size_t)qsl[r] * hq; i < (size_t)qsl[r + 1] * hq; i++) {
            bad_empty += !(lse[i] == (c->sinks ? sinks[i % hq] : -INFINITY));
            for (uint32_t e = 0; e < dv; e++) bad_empty += ah_load_f32(out, i * dv + e, c->q) != 0;
        }
    }
    const double tol = tol_of(c->q, c->kv);
    const ath_cmp co = ath_compare(out, c->q, ref, no, tol, tol);
    const ath_cmp cl = ath_compare(lse, AH_DTYPE_FP32, rlse, nl, 2e-2, 0);
    snprintf(msg, sizeof msg,
             " %d items, %d split; empty rows wrong %zu; out max_abs %.1e over %zu; lse max_abs "
             "%.1e over %zu",
             n_items, n_splits, bad_empty, co.max_abs, co.over, cl.max_abs, cl.over);
    ok = bad_empty == 0 && co.over == 0 && co.nonfinite == 0 && cl.over == 0 && cl.nonfinite == 0;
done:
    report(c->name, ok, msg);
    free(bt), free(perm), free(slots), free(items), free(dest), free(splits);
    free(q), free(kc), free(vc), free(out), free(lse), free(ref), free(rlse);
}

/* ---- write_kv ------------------------------------------------------------------ */

typedef struct wcase {
    const char *name;
    ah_dtype src, kv;
    uint32_t hk, d, dv, bs, blocks, mla;
    float k_scale, v_scale;
    int32_t n;
    int64_t slots[6]; /* negative: padding */
} wcase;

static void run_write_kv(const wcase *c, uint64_t *rng)
{
    char msg[320] = "";
    int ok = 0;
    const uint32_t hk = c->hk, d = c->d, dv = c->dv, T = (uint32_t)c->n;
    const size_t se = ah_dtype_size(c->src), ke = ah_dtype_size(c->kv);
    const size_t nk = (size_t)T * hk * d, nv = c->mla ? 0 : (size_t)T * hk * dv;
    const size_t ck = (size_t)c->blocks * c->bs * hk * d,
                 cv = c->mla ? 0 : (size_t)c->blocks * c->bs * hk * dv;
    void *key = malloc(nk * se), *val = malloc(nv * se + 1);
    uint8_t *kc = malloc(ck * ke), *vc = malloc(cv * ke + 1), *rk = malloc(ck * ke),
            *rv = malloc(cv * ke + 1);
    cl_mem m[5] = {0};
    if (!key || !val || !kc || !vc || !rk || !rv) {
        snprintf(msg, sizeof msg, " out of memory");
        goto done;
    }
    ath_fill_uniform(key, nk, c->src, 2.f, 1.f, rng);
    ath_fill_uniform(val, nv, c->src, 2.f, 1.f, rng);
    /* caches start as random bytes: slots not written must keep them */
    for (size_t i = 0; i < ck * ke; i++) kc[i] = rk[i] = (uint8_t)ath_rand_u64(rng);
    for (size_t i = 0; i < cv * ke; i++) vc[i] = rv[i] = (uint8_t)ath_rand_u64(rng);
    m[0] = buf_new(key, nk * se), m[1] = c->mla ? NULL : buf_new(val, nv * se);
    m[2] = buf_new(kc, ck * ke), m[3] = c->mla ? NULL : buf_new(vc, cv * ke);
    m[4] = buf_new(c->slots, sizeof(int64_t) * T);
    if (!m[0] || !m[2] || !m[4] || (!c->mla && (!m[1] || !m[3]))) {
        snprintf(msg, sizeof msg, " clCreateBuffer failed");
        goto done;
    }
    /* as plugin.c's xpu_write_kv: MLA passes a dummy value and value cache */
    cl_mem vm = c->mla ? g_dummy : m[1], vcm = c->mla ? g_dummy : m[3];
    int64_t key_ts = (int64_t)hk * d, key_hs = d, val_ts = c->mla ? 0 : (int64_t)hk * dv,
            val_hs = c->mla ? 0 : dv;
    int64_t k_bs = (int64_t)c->bs * hk * d, k_ts = (int64_t)hk * d, k_hs = d;
    int64_t v_bs = c->mla ? 0 : (int64_t)c->bs * hk * dv, v_ts = c->mla ? 0 : (int64_t)hk * dv,
            v_hs = c->mla ? 0 : dv;
    int src_dt = (int)AH_BIT(c->src), kv_dt = (int)AH_BIT(c->kv), n = c->n, ihk = (int)hk;
    int id = (int)d, idv = (int)dv, ibs = (int)c->bs, has_v = !c->mla;
    float k_inv = 1.0f / c->k_scale, v_inv = c->mla ? 1.0f : 1.0f / c->v_scale;
    /* Not reformatted: one line per group of the kernel's parameters (kernels/kv.cl). */
    // clang-format off
    const karg args[] = {
        A_BUF(m[0]), A_VAL(key_ts), A_VAL(key_hs),
        A_BUF(vm), A_VAL(val_ts), A_VAL(val_hs), A_VAL(src_dt),
        A_BUF(m[2]), A_VAL(k_bs), A_VAL(k_ts), A_VAL(k_hs),
        A_BUF(vcm), A_VAL(v_bs), A_VAL(v_ts), A_VAL(v_hs), A_VAL(kv_dt),
        A_VAL(k_inv), A_VAL(v_inv), A_BUF(m[4]), A_VAL(n),
        A_VAL(ihk), A_VAL(id), A_VAL(idv), A_VAL(ibs), A_VAL(has_v),
    };
    // clang-format on
    const int rc = launch(XPU_K_WRITE_KV, args, (int)(sizeof args / sizeof *args), T, hk);
    if (rc || buf_read(m[2], kc, ck * ke) || (!c->mla && buf_read(m[3], vc, cv * ke))) {
        snprintf(msg, sizeof msg, " launch or read: %d", rc);
        goto done;
    }
    ah_layer_spec sp = {.struct_size = sizeof sp,
                        .attn_type = AH_ATTN_DECODER,
                        .num_q_heads = hk,
                        .num_kv_heads = hk,
                        .qk_head_size = d,
                        .v_head_size = dv,
                        .q_dtype = c->src,
                        .kv_dtype = c->kv,
                        .block_size = c->bs,
                        .kv_layout = AH_KV_LAYOUT_NHD,
                        .use_mla = c->mla};
    ah_batch b = {.struct_size = sizeof b,
                  .num_tokens = T,
                  .num_blocks = c->blocks,
                  .slot_mapping_host = c->slots};
    ah_error err;
    if (ah_reference_write_kv(&sp, &b, key, c->mla ? NULL : val, rk, c->mla ? NULL : rv, c->k_scale,
                              c->v_scale, &err) != AH_OK) {
        snprintf(msg, sizeof msg, " reference: %.200s", err.msg);
        goto done;
    }
    const size_t dk = ath_bytes_differ(kc, rk, ck * ke), dvb = ath_bytes_differ(vc, rv, cv * ke);
    snprintf(msg, sizeof msg, " %u tokens; bytes differing from the oracle: K %zu, V %zu", T, dk,
             dvb);
    ok = dk == 0 && dvb == 0;
done:
    report(c->name, ok, msg);
    free(key), free(val), free(kc), free(vc), free(rk), free(rv);
}

/* ---- merge_states ----------------------------------------------------------------- */

/* Rows (t, h) with t % 4: 0 both parts, 1 a's LSE -inf, 2 b's, 3 both;
 * an empty part's rows hold NaN, which must not be read. out_in_a: out is
 * a's buffer; has_lo 0 passes the dummy as the plugin does. */
static void run_merge(ah_dtype dt, int out_in_a, int has_lo, uint64_t *rng)
{
    char name[96], msg[320] = "";
    snprintf(name, sizeof name, "merge_states %s%s%s", ah_dtype_name(dt),
             out_in_a ? ", out = a" : "", has_lo ? "" : ", no lse_out");
    enum { T = 5, H = 3, D = 64 };
    const size_t n = (size_t)T * H * D, e = ah_dtype_size(dt);
    uint8_t va[T * H * D * 4], vb[T * H * D * 4], vo[T * H * D * 4];
    float la[T * H], lb[T * H], lo[T * H];
    double da[T * H * D], db[T * H * D], dla[T * H], dlb[T * H], ref[T * H * D], rlo[T * H];
    ath_fill_uniform(va, n, dt, 2.f, 1.f, rng);
    ath_fill_uniform(vb, n, dt, 2.f, 1.f, rng);
    memset(vo, 0xff, sizeof vo);
    memset(lo, 0xff, sizeof lo);
    for (size_t i = 0; i < (size_t)T * H; i++) {
        const size_t t = i / H;
        la[i] = t % 4 == 1 || t % 4 == 3 ? -INFINITY : (float)ath_rand_range(rng, -5, 5);
        lb[i] = t % 4 == 2 || t % 4 == 3 ? -INFINITY : (float)ath_rand_range(rng, -5, 5);
        dla[i] = la[i], dlb[i] = lb[i];
        for (size_t c = 0; c < D; c++) {
            /* the oracle multiplies by the weight, so it sees 0, the kernel NaN */
            da[i * D + c] = la[i] == -INFINITY ? 0 : ah_load_f32(va, i * D + c, dt);
            db[i * D + c] = lb[i] == -INFINITY ? 0 : ah_load_f32(vb, i * D + c, dt);
            if (la[i] == -INFINITY) ah_store_f32(va, i * D + c, dt, NAN);
            if (lb[i] == -INFINITY) ah_store_f32(vb, i * D + c, dt, NAN);
        }
    }
    ah_reference_merge_states(T, H, D, da, dla, db, dlb, ref, rlo);
    cl_mem m[5] = {buf_new(va, n * e), buf_new(la, sizeof la), buf_new(vb, n * e),
                   buf_new(lb, sizeof lb), NULL};
    m[4] = out_in_a ? NULL : buf_new(vo, n * e);
    cl_mem lom = has_lo ? buf_new(lo, sizeof lo) : g_dummy, om = out_in_a ? m[0] : m[4];
    int ok = 0;
    if (!m[0] || !m[1] || !m[2] || !m[3] || !om || !lom) {
        snprintf(msg, sizeof msg, " clCreateBuffer failed");
        goto done;
    }
    int64_t ts = (int64_t)H * D, hs = D, lts = H;
    int ihas = has_lo, in = T, ih = H, id = D, idt = (int)AH_BIT(dt);
    /* Not reformatted: one line per group of the kernel's parameters (kernels/merge.cl). */
    // clang-format off
    const karg args[] = {
        A_BUF(m[0]), A_VAL(ts), A_VAL(hs), A_BUF(m[1]), A_VAL(lts),
        A_BUF(m[2]), A_VAL(ts), A_VAL(hs), A_BUF(m[3]), A_VAL(lts),
        A_BUF(om), A_VAL(ts), A_VAL(hs), A_BUF(lom), A_VAL(lts), A_VAL(ihas),
        A_VAL(in), A_VAL(ih), A_VAL(id), A_VAL(idt),
    };
    // clang-format on
    const int rc = launch(XPU_K_MERGE_STATES, args, (int)(sizeof args / sizeof *args), T, H);
    if (rc || buf_read(om, vo, n * e) || (has_lo && buf_read(lom, lo, sizeof lo))) {
        snprintf(msg, sizeof msg, " launch or read: %d", rc);
        goto done;
    }
    const double tol = tol_of(dt, dt);
    const ath_cmp co = ath_compare(vo, dt, ref, n, tol, tol);
    const ath_cmp cl =
        has_lo ? ath_compare(lo, AH_DTYPE_FP32, rlo, (size_t)T * H, 1e-5, 0) : (ath_cmp){0};
    snprintf(msg, sizeof msg, " out max_abs %.1e over %zu; lse max_abs %.1e over %zu", co.max_abs,
             co.over, cl.max_abs, cl.over);
    ok = co.over == 0 && co.nonfinite == 0 && cl.over == 0 && cl.nonfinite == 0;
done:
    report(name, ok, msg);
}

int main(int argc, char **argv)
{
    const int st = cl_setup(argc > 1 ? argv[1] : NULL);
    if (st) return st;
    uint64_t rng = ath_seed(27);
    /* name, q, kv, hq, hk, d, dv, bs, window, mla, hnd, sinks, alibi,
     * softcap, k_scale, v_scale, reqs, qlen, seq, chunk */
    static const acase attn[] = {
        {"decode fp16, GQA 4/2, ALiBi, unsplit",
         AH_DTYPE_FP16,
         AH_DTYPE_FP16,
         4,
         2,
         64,
         64,
         16,
         0,
         0,
         0,
         0,
         1,
         0.f,
         0.f,
         0.f,
         4,
         {1, 1, 1, 1},
         {37, 0, 16, 5},
         0},
        {"decode bf16 / e4m3, sinks, soft-cap, split-KV",
         AH_DTYPE_BF16,
         AH_DTYPE_FP8_E4M3,
         4,
         2,
         64,
         64,
         16,
         0,
         0,
         0,
         1,
         0,
         30.f,
         0.5f,
         2.f,
         4,
         {1, 1, 1, 1},
         {37, 0, 33, 5},
         16},
        {"prefill + extend fp32 / bf16 HND, window 8, sinks",
         AH_DTYPE_FP32,
         AH_DTYPE_BF16,
         4,
         2,
         96,
         64,
         32,
         8,
         0,
         1,
         1,
         0,
         0.f,
         0.f,
         0.f,
         3,
         {6, 12, 1},
         {40, 12, 0},
         0},
        {"mla fp16 / e4m3 576/512, split-KV",
         AH_DTYPE_FP16,
         AH_DTYPE_FP8_E4M3,
         2,
         1,
         576,
         512,
         16,
         0,
         1,
         0,
         0,
         0,
         0.f,
         0.5f,
         4.f,
         2,
         {1, 1},
         {40, 0},
         16},
    };
    for (size_t i = 0; i < sizeof attn / sizeof *attn; i++) run_attn(&attn[i], &rng);
    /* the first slot, one mid-cache, padding and the cache's very last slot */
    static const wcase wkv[] = {
        {"write_kv fp16 -> e4m3, qk 96 / v 64",
         AH_DTYPE_FP16,
         AH_DTYPE_FP8_E4M3,
         2,
         96,
         64,
         16,
         3,
         0,
         0.5f,
         2.f,
         5,
         {0, 21, -1, 47, 30}},
        {"write_kv bf16 -> e5m2, mla 576 (no V)",
         AH_DTYPE_BF16,
         AH_DTYPE_FP8_E5M2,
         1,
         576,
         512,
         16,
         2,
         1,
         0.25f,
         0.f,
         3,
         {31, -1, 0}},
    };
    for (size_t i = 0; i < sizeof wkv / sizeof *wkv; i++) run_write_kv(&wkv[i], &rng);
    run_merge(AH_DTYPE_FP32, 0, 1, &rng);
    run_merge(AH_DTYPE_BF16, 1, 0, &rng);
    run_merge(AH_DTYPE_FP16, 0, 1, &rng);
    for (int i = 0; i < g_n_bufs; i++) clReleaseMemObject(g_bufs[i]);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
