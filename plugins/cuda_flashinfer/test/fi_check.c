/*
 * Correctness driver for cuda_flashinfer: runs the plugin (loaded through
 * its entry point) over random workloads covering every capability it
 * claims, and compares output and LSE with the double-precision reference
 * oracle (ah_reference_attention). Also checks write_kv against
 * ah_reference_write_kv, merge_states against ah_reference_merge_states, and
 * CUDA-graph capture/replay against the oracle on new lengths and tables.
 *
 *   fi_check [--quick] [--match TEXT] [--list] [--plugin PATH]
 *     exit 0 all pass, 1 a failure, 77 no GPU. --match runs only the cases
 *     whose name contains TEXT (the checks of write_kv and merge_states
 *     too when it is "write_kv" or "merge_states"); --list prints the cases'
 *     names and runs nothing (no GPU needed).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>
#include <attnhost/reference.h>

#include "ath.h"

static int g_fail, g_pass;

typedef struct fi_case {
    const char *name;
    ath_shape s;
    int32_t qlens[16], seqlens[16];
    int graph;           /* 0 eager; 1 capture plan+forward; 2 capture forward only */
    int released;        /* release the blocks the window hides (release_blocks) */
    ah_kv_scales scales; /* FP8: TENSOR, PER_HEAD: scales in device tensors */
    int q_scale;         /* FP8 attention with a query scale (use_q_scale) */
    /* 1, 2: the caches interleaved in one allocation (the layout's
     * *_INTERLEAVED form, fi_inter), the value view's offset in its
     * byte_offset (1) or in its data (2) */
    int interleaved;
} fi_case;

/* A case's FP8 scale tensors on the device (kv_scales TENSOR: [1],
 * PER_HEAD: [Hk]; the query's [1]) and their values, one per KV head for
 * the oracle. */
typedef struct fi_tscales {
    ath_tensor k, v, q;
    float kh[16], vh[16], qv;
} fi_tscales;

static fi_case base_case(const char *name, ah_dtype q, uint32_t hq, uint32_t hk, uint32_t d,
                         uint32_t bs);

/* An absorbed-MLA case: hq heads over one latent KV head, qk 576 / v 512,
 * page 64. */
static fi_case mla_case(ah_dtype q, uint32_t hq)
{
    fi_case c = base_case("", q, hq, 1, 576, 64);
    c.s.dv = 512;
    c.s.mla = 1;
    return c;
}

/* mla_case on an FP8 latent cache of kind kv (k_scale 0.03). */
static fi_case mla_fp8_case(ah_dtype q, uint32_t hq, ah_dtype kv)
{
    fi_case c = mla_case(q, hq);
    c.s.kv_dtype = kv;
    c.s.k_scale = 0.03f;
    return c;
}

static double tol_for(ah_dtype q) { return q == AH_DTYPE_BF16 ? 3e-2 : 1.2e-2; }

/* The case's batch: spare_blocks more table columns and 2 + spare * R more
 * pool blocks than the lengths need (room for graph replays). */
static void case_batch(fi_case *c, uint32_t spare)
{
    ath_batch_spec *b = &c->s.batch;
    b->qlens = c->qlens;
    b->seqlens = c->seqlens;
    b->table_pad = spare;
    b->extra_blocks = 2 + spare * b->num_reqs;
}

/* An interleaved copy of a workload's caches (the layouts
 * AH_KV_LAYOUT_*_INTERLEAVED): one device allocation [blocks, 2, ...] with
 * w's key cache at index 0 and its value cache at index 1 of dim 1, the
 * two 4-dim views the plugin gets, and the host copy the oracle reads. */
typedef struct fi_inter {
    ath_tensor all;
    DLTensor k, v;
    int64_t shape[4], strides[4];
    unsigned char *host;
    size_t blk; /* bytes of one block of K (or V) */
} fi_inter;

/* w's caches into it->host, block by block, and up to the device. */
static int inter_fill(ath_host *p, fi_inter *it, const ath_work *w)
{
    for (uint32_t b = 0; b < w->B.num_blocks; b++) {
        memcpy(it->host + 2 * b * it->blk, (const unsigned char *)w->kc + b * it->blk, it->blk);
        memcpy(it->host + (2 * b + 1) * it->blk, (const unsigned char *)w->vc + b * it->blk,
               it->blk);
    }
    return ath_upload(p, &it->all, it->host);
}

/* The interleaved copy of w (qk == v, a value cache), in w's layout's
 * interleaved form, which w's spec takes; the value view's offset in its
 * byte_offset (v_in_data 0) or its data pointer. 0 or 1. */
static int inter_make(ath_host *p, fi_inter *it, ath_work *w, int v_in_data)
{
    memset(it, 0, sizeof *it);
    const ah_layer_spec *sp = &w->spec;
    const int hnd = sp->kv_layout == AH_KV_LAYOUT_HND;
    const size_t es = ah_dtype_size(sp->kv_dtype);
    const int64_t per = (int64_t)sp->block_size * sp->num_kv_heads * sp->qk_head_size;
    const int64_t n = 2 * per * w->B.num_blocks;
    it->blk = (size_t)per * es;
    it->host = malloc(2 * it->blk * w->B.num_blocks + 16);
    if (!w->vc || sp->qk_head_size != sp->v_head_size || !it->host ||
        ath_tensor_alloc(p, &it->all, ah_dtype_to_dl(sp->kv_dtype), 1, &n))
        return 1;
    const int64_t shape[4] = {w->B.num_blocks, hnd ? sp->num_kv_heads : sp->block_size,
                              hnd ? sp->block_size : sp->num_kv_heads, sp->qk_head_size};
    memcpy(it->shape, shape, sizeof shape);
    it->strides[3] = 1;
    it->strides[2] = shape[3];
    it->strides[1] = shape[2] * shape[3];
    it->strides[0] = 2 * per;
    it->k = it->all.t;
    it->k.ndim = 4;
    it->k.shape = it->shape;
    it->k.strides = it->strides;
    it->v = it->k;
    if (v_in_data) it->v.data = (unsigned char *)it->v.data + it->blk;
    else it->v.byte_offset += it->blk;
    w->spec.kv_layout = hnd ? AH_KV_LAYOUT_HND_INTERLEAVED : AH_KV_LAYOUT_NHD_INTERLEAVED;
    return inter_fill(p, it, w);
}

static void inter_free(ath_host *p, fi_inter *it)
{
    ath_tensor_free(p, &it->all);
    free(it->host);
    memset(it, 0, sizeof *it);
}

/* The oracle over w with per-KV-head scales t (the values of a case's
 * scale tensors; NULL: w's host floats) and the caches of the interleaved
 * copy it (NULL: w's own). */
static int reference_with(const ath_work *w, const fi_tscales *t, const fi_inter *it, double *out,
                          double *lse, char *why, size_t cap)
{
    ah_ref_inputs in = {.struct_size = sizeof in,
                        .spec = &w->spec,
                        .batch = &w->B.b,
                        .q = w->q,
                        .key_cache = it ? (const void *)it->host : w->kc,
                        .value_cache = it ? (const void *)(it->host + it->blk) : w->vc,
                        .sinks = w->s.sinks ? w->sinks : NULL,
                        .alibi_slopes = w->s.alibi ? w->slopes : NULL,
                        .k_scale = w->s.k_scale,
                        .v_scale = w->s.v_scale,
                        .k_scales = t ? t->kh : NULL,
                        .v_scales = t ? t->vh : NULL};
    ah_error err;
    if (ah_reference_attention(&in, out, lse, &err) != AH_OK) {
        snprintf(why, cap, "%.200s", err.msg);
        return -1;
    }
    return 0;
}

/* Compare the device output/LSE with the oracle (scales: the case's scale
 * tensors, NULL for the host floats; it: the caches' interleaved copy, or
 * NULL); prints one line. */
static int compare(ath_host *p, ath_work *w, const char *name, int want_lse,
                   const fi_tscales *scales, const fi_inter *it)
{
    const ath_shape *s = &w->s;
    const size_t n_out = (size_t)w->B.num_tokens * s->hq * w->spec.v_head_size,
                 n_lse = (size_t)w->B.num_tokens * s->hq;
    double *ref = malloc(8 * (n_out + 1)), *ref_lse = malloc(8 * (n_lse + 1));
    void *got = malloc(w->d_out.bytes + 1);
    float *got_lse = malloc(w->d_lse.bytes + 4);
    char why[256];
    int ok = 1;
    if (scales || it ? reference_with(w, scales, it, ref, ref_lse, why, sizeof why)
                     : ath_work_reference(w, ref, ref_lse, why, sizeof why)) {
        printf("FAIL %-40s reference: %s\n", name, why);
        ok = 0;
        goto done;
    }
    if (p->ops->synchronize(p->ctx, p->stream) != AH_OK || ath_download(p, got, &w->d_out) ||
        (want_lse && ath_download(p, got_lse, &w->d_lse))) {
        printf("FAIL %-40s device: %s\n", name, p->ops->context_error(p->ctx));
        ok = 0;
        goto done;
    }
    /* Outputs: |err| / (1 + |ref|), NaN counting as worst; LSE: |err|, an
     * empty row's -inf matching only -inf. */
    const ath_cmp co = ath_compare(got, s->q_dtype, ref, n_out, 0, 0);
    const double worst_lse =
        want_lse ? ath_compare(got_lse, AH_DTYPE_FP32, ref_lse, n_lse, 0, 0).max_abs : 0;
    ok = co.max_rel1 <= tol_for(s->q_dtype) && worst_lse <= 2e-2;
    printf("%s %-44s T=%-4u max_err=%.2e lse_err=%.2e%s\n", ok ? "ok  " : "FAIL", name,
           w->B.num_tokens, co.max_rel1, worst_lse, ok ? "" : " <--");
    if (!ok)
        printf("     first worst at %zu: got %g want %g\n", co.worst_at,
               ah_load_f32(got, co.worst_at, s->q_dtype), ref[co.worst_at]);
done:
    free(ref);
    free(ref_lse);
    free(got);
    free(got_lse);
    ok ? g_pass++ : g_fail++;
    return ok;
}

/* Released blocks (AH_FEAT_RELEASED_BLOCKS), as an engine's sliding-window
 * group releases them: each request's table entries of the blocks its
 * window hides from its first query become negative, alternately -1 (a
 * kernel following it reads just before the cache) and INT32_MIN (a
 * fault); must: at least one (a case that releases nothing tests
 * nothing). Then every pool block no entry names any more holds NaN (all
 * ones in every KV dtype here), so a kernel that reads a key outside the
 * rows' windows through some other block (an entry clamped to one, a stale
 * page) turns its output NaN. Uploads the table and the caches; 0 or 1. */
static int release_blocks(ath_host *p, ath_work *w, int must)
{
    ath_batch *B = &w->B;
    const uint32_t bs = w->spec.block_size, W = w->spec.sliding_window;
    const size_t ke = ah_dtype_size(w->spec.kv_dtype);
    const size_t kblock = (size_t)bs * w->spec.num_kv_heads * w->spec.qk_head_size * ke,
                 vblock = (size_t)bs * w->spec.num_kv_heads * w->spec.v_head_size * ke;
    unsigned char *named = calloc(B->num_blocks + 1, 1);
    if (!named) return 1;
    uint32_t released = 0;
    for (uint32_t r = 0; r < B->num_reqs; r++) {
        const int64_t p0 = (int64_t)B->seq[r] - (B->qsl[r + 1] - B->qsl[r]);
        const int64_t hidden = W && p0 - (int64_t)W + 1 > 0 ? (p0 - W + 1) / bs : 0;
        const int64_t np = ((int64_t)B->seq[r] + bs - 1) / bs;
        int32_t *row = B->bt + (size_t)r * B->width;
        for (int64_t k = 0; k < np; k++) {
            if (k < hidden) {
                row[k] = k % 2 ? INT32_MIN : -1;
                released++;
            } else {
                named[row[k]] = 1;
            }
        }
    }
    for (uint32_t b = 0; b < B->num_blocks; b++)
        if (!named[b]) {
            memset((unsigned char *)w->kc + b * kblock, 0xff, kblock);
            if (w->vc) memset((unsigned char *)w->vc + b * vblock, 0xff, vblock);
        }
    free(named);
    if (must && !released) {
        fprintf(stderr, "release_blocks: no block hidden from a whole request\n");
        return 1;
    }
    return ath_work_upload(p, w);
}

/* Round r's scale values of c (replays change them, so a kernel that read
 * them at capture fails): PER_HEAD a different one for each KV head, TENSOR
 * one for all; the query's (which the plugin may leave unread). Uploaded. */
static int tscales_set(ath_host *p, fi_tscales *t, const fi_case *c, int r)
{
    const float m = 1.f + 0.5f * (float)r;
    const int per_head = c->scales == AH_KV_SCALES_PER_HEAD;
    for (uint32_t h = 0; h < c->s.hk && h < 16; h++) {
        t->kh[h] = c->s.k_scale * m * (per_head ? 1.f + 0.75f * (float)h : 1.3f);
        t->vh[h] = c->s.v_scale * m * (per_head ? 1.f + 0.5f * (float)h : 0.7f);
    }
    t->qv = 0.01f * m;
    return ath_upload(p, &t->k, t->kh) || (t->v.t.data && ath_upload(p, &t->v, t->vh)) ||
           ath_upload(p, &t->q, &t->qv);
}

/* Allocate c's scale tensors and set round 0's values. */
static int tscales_make(ath_host *p, fi_tscales *t, const fi_case *c)
{
    memset(t, 0, sizeof *t);
    const int64_t n = c->scales == AH_KV_SCALES_PER_HEAD ? (int64_t)c->s.hk : 1, one = 1;
    if (c->s.hk > 16 || ath_tensor_new(p, &t->k, AH_DTYPE_FP32, 1, &n) ||
        (!c->s.mla && ath_tensor_new(p, &t->v, AH_DTYPE_FP32, 1, &n)) ||
        ath_tensor_new(p, &t->q, AH_DTYPE_FP32, 1, &one))
        return 1;
    return tscales_set(p, t, c, 0);
}

static void tscales_free(ath_host *p, fi_tscales *t)
{
    ath_tensor_free(p, &t->k);
    ath_tensor_free(p, &t->v);
    ath_tensor_free(p, &t->q);
}

#define TRY(call, what) \
    do { \
        if ((call) != AH_OK) { \
            printf("FAIL %-44s %s: %s\n", c->name, what, \
                   st ? p->ops->state_error(st) : p->ops->context_error(p->ctx)); \
            g_fail++; \
            goto out; \
        } \
    } while (0)

static void run_case(ath_host *p, fi_case *c, uint64_t seed)
{
    ath_work w;
    ah_state *st = NULL;
    ah_graph *g = NULL;
    fi_tscales ts;
    fi_inter iv;
    const fi_tscales *tsp = c->scales != AH_KV_SCALES_HOST ? &ts : NULL;
    const fi_inter *ivp = c->interleaved ? &iv : NULL;
    memset(&ts, 0, sizeof ts);
    memset(&iv, 0, sizeof iv);
    uint64_t rng = ath_seed(seed);
    if (ath_work_build(p, &w, &c->s, &rng) || (c->released && release_blocks(p, &w, 1)) ||
        (tsp && tscales_make(p, &ts, c)) || (ivp && inter_make(p, &iv, &w, c->interleaved == 2))) {
        printf("FAIL %-44s workload\n", c->name);
        g_fail++;
        tscales_free(p, &ts);
        inter_free(p, &iv);
        ath_work_free(p, &w);
        return;
    }
    w.spec.kv_scales = c->scales;
    w.spec.use_q_scale = (uint32_t)c->q_scale;
    if (c->q_scale) w.spec.fp8_attention = 1;
    TRY(p->ops->state_create(p->ctx, &w.spec, &w.lim, &st), "state_create");
    ah_forward_args a = ath_work_args(&w, p->stream, 1);
    if (tsp) { /* the tensors, and no host floats beside them */
        a.k_scale = a.v_scale = 0.f;
        a.k_scale_tensor = &ts.k.t;
        a.v_scale_tensor = c->s.mla ? NULL : &ts.v.t;
        a.q_scale_tensor = c->q_scale ? &ts.q.t : NULL;
    } else if (c->q_scale) {
        a.q_scale = 0.01f;
    }
    if (ivp) {
        a.key_cache = &iv.k;
        a.value_cache = &iv.v;
    }
    if (!c->graph) {
        TRY(p->ops->plan(st, &w.B.b, AH_PLAN_EAGER, p->stream), "plan");
        TRY(p->ops->forward(st, &a), "forward");
        compare(p, &w, c->name, 1, tsp, ivp);
        goto out;
    }
    /* Graph: capture, then replay twice on new lengths/tables/values. */
    if (c->graph == 2) TRY(p->ops->plan(st, &w.B.b, AH_PLAN_CAPTURE, p->stream), "plan(CAPTURE)");
    TRY(p->ops->graph_begin(p->ctx, p->stream), "graph_begin");
    if (c->graph == 1) TRY(p->ops->plan(st, &w.B.b, AH_PLAN_CAPTURE, p->stream), "plan(CAPTURE)");
    TRY(p->ops->forward(st, &a), "forward (captured)");
    TRY(p->ops->graph_end(p->ctx, p->stream, &g), "graph_end");
    const uint32_t bs = c->s.batch.block_size, R = c->s.batch.num_reqs;
    for (int rep = 0; rep < 2; rep++) {
        /* Same token counts, new lengths: shuffle the context lengths. */
        for (uint32_t r = 0; r < R; r++) {
            const int32_t base = c->qlens[r];
            const int32_t cap = (int32_t)(w.B.width * bs) - base;
            c->seqlens[r] =
                base + (int32_t)((seed * 31 + r * 17 + rep * 101) % (uint64_t)(cap > 1 ? cap : 1));
            if (c->seqlens[r] > (int32_t)(w.B.width * bs))
                c->seqlens[r] = (int32_t)(w.B.width * bs);
        }
        /* The cache layout was sized for the old lengths: keep every new
         * length inside the original total so the block pool suffices. */
        uint32_t need = 0;
        for (uint32_t r = 0; r < R; r++) need += (c->seqlens[r] + bs - 1) / bs;
        if (need + 2 > w.B.num_blocks)
            for (uint32_t r = 0; r < R; r++) c->seqlens[r] = c->qlens[r] + rep * 3;
        uint64_t rr = ath_seed(seed + 1000 + rep);
        if (ath_work_refill(p, &w, &c->s, &rr) || (c->released && release_blocks(p, &w, 0)) ||
            (tsp && tscales_set(p, &ts, c, rep + 1)) || (ivp && inter_fill(p, &iv, &w))) {
            printf("FAIL %-44s refill\n", c->name);
            g_fail++;
            goto out;
        }
        TRY(p->ops->plan(st, &w.B.b, AH_PLAN_REPLAY, p->stream), "plan(REPLAY)");
        TRY(p->ops->graph_launch(p->ctx, g, p->stream), "graph_launch");
        char name[96];
        snprintf(name, sizeof name, "%s replay %d", c->name, rep);
        compare(p, &w, name, 1, tsp, ivp);
    }
out:
    if (g) p->ops->graph_destroy(p->ctx, g);
    if (st) p->ops->state_destroy(st);
    tscales_free(p, &ts);
    inter_free(p, &iv);
    ath_work_free(p, &w);
}

/* Scales of 3 significant bits, so an FP8 midpoint (at most 5) times one
 * is exact in fp16 and bf16, and 7 x 2^k: of those, the ones whose float32
 * reciprocal is off enough that value x (1 / scale) leaves a quarter of the
 * ties (1.25 and 1.5 leave none). */
static const float tie_scales[4] = {1.75f, 0.875f, 3.5f, 0.4375f};

/* n new K or V values of rows of `heads` heads of hs channels (dtype q):
 * midpoints between neighbouring FP8 values of kv times head h's scale
 * sc[h % 4], so stored = value / scale is an exact tie, which rounds to
 * even; value times the reciprocal lands on either side of it. */
static void fill_ties(void *dst, size_t rows, uint32_t heads, uint32_t hs, ah_dtype q, ah_dtype kv,
                      const float *sc, uint64_t *rng)
{
    const int mb = kv == AH_DTYPE_FP8_E4M3 ? 3 : 2; /* mantissa bits */
    for (size_t i = 0; i < rows * heads * hs; i++) {
        const uint64_t r = ath_rand_u64(rng);
        const double m = (double)((1u << mb) + (uint32_t)(r % (1u << mb))) + 0.5;
        const double t = ldexp(m, (int)((r >> 8) % 7) - 3 - mb) * ((r >> 16) & 1 ? -1 : 1);
        ah_store_f32(dst, i, q, (float)(t * sc[(i / hs) % heads % 4]));
    }
}

/* write_kv: new K/V into a random cache; compare the whole cache with the
 * oracle's writer's. Random values in [-2, 2) under host scales 0.5 / 2,
 * or with ties (FP8) values whose quotient by the scale is a tie of the
 * FP8 rounding: host floats 1.75 / 0.875, or in tensors (form TENSOR, or
 * PER_HEAD with tie_scales[h % 4] / tie_scales[(h + 1) % 4] for KV head h,
 * where a kernel that took another head's scale would miss by a power of
 * two). */
static void check_write_kv(ath_host *p, ah_dtype q, ah_dtype kv, ah_kv_layout lay, uint32_t mla,
                           uint64_t seed, int ties, ah_kv_scales form, int interleaved)
{
    fi_case cc = base_case("write_kv", q, mla ? 4 : 8, mla ? 1 : 4, mla ? 576 : 128, 16);
    fi_case *c = &cc;
    c->s.kv_dtype = kv;
    c->s.dv = mla ? 512 : 128;
    c->s.mla = mla;
    c->s.layout = lay;
    c->s.k_scale = ties ? tie_scales[0] : 0.5f;
    c->s.v_scale = ties ? tie_scales[1] : 2.f;
    c->s.new_kv = 1;
    c->s.new_amp = 2.f;
    c->s.batch.num_reqs = 3;
    c->scales = form;
    int32_t ql[3] = {5, 1, 9}, sl[3] = {40, 17, 9};
    memcpy(c->qlens, ql, sizeof ql);
    memcpy(c->seqlens, sl, sizeof sl);
    case_batch(c, 0);
    ath_work w;
    ah_state *st = NULL;
    void *gk = NULL, *gv = NULL;
    fi_tscales ts;
    fi_inter iv;
    memset(&ts, 0, sizeof ts);
    memset(&iv, 0, sizeof iv);
    char name[96];
    snprintf(name, sizeof name, "write_kv %s/%s %s%s%s%s%s", ah_dtype_name(q), ah_dtype_name(kv),
             lay == AH_KV_LAYOUT_HND ? "HND" : "NHD", interleaved ? " interleaved" : "",
             mla ? " mla" : "", ties ? " ties" : "",
             form == AH_KV_SCALES_PER_HEAD ? " per-head tensors"
             : form == AH_KV_SCALES_TENSOR ? " tensors"
                                           : "");
    c->name = name;
    float k4[4], v4[4]; /* head h's scales: k4[h % 4], v4[h % 4] */
    for (int i = 0; i < 4; i++) {
        const int ph = form == AH_KV_SCALES_PER_HEAD;
        k4[i] = ph ? tie_scales[i] : c->s.k_scale;
        v4[i] = ph ? tie_scales[(i + 1) % 4] : c->s.v_scale;
    }
    uint64_t rng = ath_seed(seed);
    int bad = ath_work_build(p, &w, &c->s, &rng);
    if (!bad && ties) {
        fill_ties(w.knew, w.rows, c->s.hk, c->s.d, q, kv, k4, &rng);
        if (w.vnew) fill_ties(w.vnew, w.rows, c->s.hk, c->s.dv, q, kv, v4, &rng);
        bad = ath_work_upload(p, &w);
    }
    if (!bad && form != AH_KV_SCALES_HOST) {
        bad = tscales_make(p, &ts, c);
        for (uint32_t h = 0; h < c->s.hk; h++) ts.kh[h] = k4[h % 4], ts.vh[h] = v4[h % 4];
        bad = bad || ath_upload(p, &ts.k, ts.kh) || (!mla && ath_upload(p, &ts.v, ts.vh));
    }
    if (!bad && interleaved) bad = inter_make(p, &iv, &w, interleaved == 2);
    if (bad) {
        printf("FAIL %-44s workload\n", name);
        g_fail++;
        tscales_free(p, &ts);
        inter_free(p, &iv);
        ath_work_free(p, &w);
        return;
    }
    w.spec.kv_scales = form;
    TRY(p->ops->state_create(p->ctx, &w.spec, &w.lim, &st), "state_create");
    TRY(p->ops->plan(st, &w.B.b, AH_PLAN_EAGER, p->stream), "plan");
    ah_kv_write_args a = ath_work_write_args(&w, p->stream);
    if (form != AH_KV_SCALES_HOST) {
        a.k_scale = a.v_scale = 0.f;
        a.k_scale_tensor = &ts.k.t;
        a.v_scale_tensor = mla ? NULL : &ts.v.t;
    }
    if (interleaved) {
        a.key_cache = &iv.k;
        a.value_cache = &iv.v;
    }
    TRY(p->ops->write_kv(st, &a), "write_kv");
    /* the plugin's caches first: a host plugin's are w's own arrays, which
     * the oracle's writer then rewrites */
    const ath_tensor *tk = interleaved ? &iv.all : &w.d_kc;
    const ath_tensor *tv = interleaved || mla ? NULL : &w.d_vc;
    void *hk = interleaved ? (void *)iv.host : w.kc;
    void *hv = interleaved ? (void *)(iv.host + iv.blk) : w.vc;
    gk = malloc(tk->bytes);
    gv = tv ? malloc(tv->bytes) : NULL;
    TRY(p->ops->synchronize(p->ctx, p->stream), "synchronize");
    if (!gk || (tv && !gv) || ath_download(p, gk, tk) || (tv && ath_download(p, gv, tv))) {
        printf("FAIL %-44s download\n", name);
        g_fail++;
        goto out;
    }
    ah_error err;
    const ah_status rs = form == AH_KV_SCALES_PER_HEAD
                             ? ah_reference_write_kv_per_head(&w.spec, &w.B.b, w.knew, w.vnew, hk,
                                                              hv, ts.kh, ts.vh, &err)
                             : ah_reference_write_kv(&w.spec, &w.B.b, w.knew, w.vnew, hk, hv,
                                                     w.s.k_scale, w.s.v_scale, &err);
    if (rs != AH_OK) {
        printf("FAIL %-44s reference: %s\n", name, err.msg);
        g_fail++;
        goto out;
    }
    size_t diff = ath_bytes_differ(gk, hk, tk->bytes);
    if (tv) diff += ath_bytes_differ(gv, hv, tv->bytes);
    printf("%s %-44s differing bytes=%zu\n", diff ? "FAIL" : "ok  ", name, diff);
    diff ? g_fail++ : g_pass++;
out:
    free(gk);
    free(gv);
    if (st) p->ops->state_destroy(st);
    tscales_free(p, &ts);
    inter_free(p, &iv);
    ath_work_free(p, &w);
}

static void check_merge(ath_host *p, ah_dtype dt, uint64_t seed)
{
    /* Every 11th row's second part empty; out aliases v_a, as the ABI allows. */
    const ath_merge_spec m = {dt, 37, 6, 128, 1.f, 0, 0, 11, 3, 1, 0};
    uint64_t rng = seed;
    ath_cmp co, cl;
    char why[256];
    int ok = ath_merge_run(p, &m, &rng, &co, &cl, why, sizeof why) == 0;
    ok = ok && co.max_abs <= tol_for(dt) && cl.max_abs <= 1e-4;
    printf("%s merge_states %-31s max_err=%.2e lse_err=%.2e\n", ok ? "ok  " : "FAIL",
           ah_dtype_name(dt), ok ? co.max_abs : 0, ok ? cl.max_abs : 0);
    ok ? g_pass++ : g_fail++;
}

/* ---- the case table --------------------------------------------------------------- */

static fi_case base_case(const char *name, ah_dtype q, uint32_t hq, uint32_t hk, uint32_t d,
                         uint32_t bs)
{
    fi_case c;
    memset(&c, 0, sizeof c);
    c.name = name;
    c.s.q_dtype = q;
    c.s.kv_dtype = q;
    c.s.hq = hq;
    c.s.hk = hk;
    c.s.d = c.s.dv = d;
    c.s.batch.block_size = bs;
    c.s.layout = AH_KV_LAYOUT_NHD;
    c.s.attn = AH_ATTN_DECODER;
    return c;
}

/* Lengths: kind 0 decode, 1 prefill (no cache), 2 extend, 3 mixed. */
static void lengths(fi_case *c, int kind, uint32_t R, int32_t max_ctx, uint64_t *rng)
{
    c->s.batch.num_reqs = R;
    for (uint32_t r = 0; r < R; r++) {
        int32_t ctx = 1 + (int32_t)(ath_rand_u64(rng) % (uint64_t)max_ctx);
        int32_t q = 1;
        if (kind == 1 || kind == 2 || (kind == 3 && r % 2 == 0))
            q = 1 + (int32_t)(ath_rand_u64(rng) % 90);
        c->qlens[r] = q;
        c->seqlens[r] = kind == 1 ? q : ctx + (kind == 0 ? 0 : q);
        if (kind == 0 && c->seqlens[r] < 1) c->seqlens[r] = 1;
    }
}

/* Requests 0, 2, 4, ... of a decode batch without keys (a context-parallel
 * rank holding none of them yet: AH_FEAT_EMPTY_KV), their table rows far
 * past the cache: out 0 and LSE -inf (with sinks, the sink's logit), which
 * a read of the row would break (a fault, or keys that move the LSE). */
static void empty_kv(fi_case *c)
{
    for (uint32_t r = 0; r < c->s.batch.num_reqs; r += 2) c->seqlens[r] = 0;
    c->s.batch.unused_entry = 0x7ffffff0;
}

int main(int argc, char **argv)
{
    const char *path = FI_PLUGIN_PATH;
    const char *match = NULL;
    int quick = 0, list = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--list")) list = 1;
        else if (!strcmp(argv[i], "--match") && i + 1 < argc) match = argv[++i];
        else if (!strcmp(argv[i], "--plugin") && i + 1 < argc) path = argv[++i];
    }
    /* Line-buffered, and each case named on stderr before it runs: a run
     * cut off by a time limit still shows how far it got. */
    setvbuf(stdout, NULL, _IOLBF, 0);

    static fi_case cases[768];
    static char names[768][96];
    int n = 0;
    uint64_t rng = 12345;
    const ah_dtype qts[2] = {AH_DTYPE_BF16, AH_DTYPE_FP16};
    const char *kinds[4] = {"decode", "prefill", "extend", "mixed"};
#define ADD(...) \
    do { \
        if (n + 1 >= (int)(sizeof cases / sizeof cases[0])) { \
            fprintf(stderr, "fi_check: more cases than the table holds\n"); \
            return 1; \
        } \
        snprintf(names[n], sizeof names[n], __VA_ARGS__); \
        cases[n].name = names[n]; \
        n++; \
    } while (0)

    for (int qi = 0; qi < 2; qi++) {
        const ah_dtype qt = qts[qi];
        const char *qn = ah_dtype_name(qt);
        /* head sizes x path kinds x GQA shapes */
        const uint32_t ds[3] = {64, 128, 256};
        const uint32_t grp[4][2] = {{8, 8}, {8, 2}, {8, 1}, {6, 2}};
        for (int di = 0; di < 3; di++)
            for (int k = 0; k < 4; k++)
                for (int gi = 0; gi < 4; gi++) {
                    if (quick && gi != (di + k) % 4) continue;
                    cases[n] = base_case("", qt, grp[gi][0], grp[gi][1], ds[di], 16);
                    lengths(&cases[n], k, 4, 300, &rng);
                    ADD("%s %s d%u h%u/%u", qn, kinds[k], ds[di], grp[gi][0], grp[gi][1]);
                }
        /* page sizes and layouts */
        const uint32_t pages[6] = {1, 2, 16, 32, 64, 128};
        for (int pi = 0; pi < 6; pi++)
            for (int lay = 0; lay < 2; lay++)
                for (int k = 0; k < 4; k += (quick ? 3 : 1)) {
                    cases[n] = base_case("", qt, 8, 2, 128, pages[pi]);
                    cases[n].s.layout = lay ? AH_KV_LAYOUT_HND : AH_KV_LAYOUT_NHD;
                    lengths(&cases[n], k, 3, 260, &rng);
                    ADD("%s %s page%u %s", qn, kinds[k], pages[pi], lay ? "HND" : "NHD");
                }
        /* split-KV over rows of very different lengths: one of 6000 keys
         * among five of up to 200 */
        cases[n] = base_case("", qt, 32, 8, 128, 16);
        lengths(&cases[n], 0, 6, 200, &rng);
        cases[n].seqlens[2] = 6000 + 11;
        ADD("%s decode split-kv ragged", qn);
        /* split-KV: few long decode rows */
        for (int r = 1; r <= 2; r++) {
            cases[n] = base_case("", qt, 32, 8, 128, 16);
            lengths(&cases[n], 0, (uint32_t)r, 5000, &rng);
            cases[n].seqlens[0] = 4000 + 97 * r;
            ADD("%s decode split-kv R%d", qn, r);
        }
        /* FP8 caches */
        const ah_dtype f8[2] = {AH_DTYPE_FP8_E4M3, AH_DTYPE_FP8_E5M2};
        for (int fi = 0; fi < 2; fi++)
            for (int k = 0; k < 4; k += (quick ? 2 : 1)) {
                cases[n] = base_case("", qt, 8, 2, 128, 16);
                cases[n].s.kv_dtype = f8[fi];
                cases[n].s.k_scale = 0.05f;
                cases[n].s.v_scale = 0.02f;
                cases[n].s.layout = k % 2 ? AH_KV_LAYOUT_HND : AH_KV_LAYOUT_NHD;
                lengths(&cases[n], k, 3, 200, &rng);
                ADD("%s %s kv %s", qn, kinds[k], ah_dtype_name(f8[fi]));
            }
        /* FP8 decode with queries beyond fp16's range (bf16) and in its
         * subnormals: the tensor-core FP8 decode scales each head's query
         * into fp16 by a power of two. */
        for (int a = qt == AH_DTYPE_BF16 ? 0 : 1; a < 2; a++) {
            cases[n] = base_case("", qt, 32, 8, 128, 16);
            cases[n].s.kv_dtype = AH_DTYPE_FP8_E4M3;
            cases[n].s.k_scale = 0.05f;
            cases[n].s.v_scale = 0.02f;
            cases[n].s.q_amp = a ? 1e-6f : 1e5f;
            lengths(&cases[n], 0, 4, 600, &rng);
            ADD("%s decode kv fp8_e4m3 |q| %s", qn, a ? "1e-6" : "1e5");
        }
        /* FP8 scales in device tensors (kv_scales TENSOR, PER_HEAD), on every
         * kernel that reads an FP8 cache: decode on tensor cores (d128,
         * padded head blocks too) and CUDA cores (d64, d256), split-KV,
         * MLA on CUDA cores, the general tensor-core kernel (extend,
         * mixed), the cascade's two passes; with a query scale; graphs
         * replayed after the scales changed. Per-head scales differ by KV
         * head (1 + 0.75 h), so a kernel reading another head's fails.
         * Lengths from a generator of their own. */
        {
            uint64_t srng = 4242 + (uint64_t)qi;
            const struct {
                uint32_t hq, hk, d;
                ah_dtype kv;
                int kind;
                ah_kv_scales form;
            } sv[] = {
                {32, 8, 128, AH_DTYPE_FP8_E4M3, 0, AH_KV_SCALES_PER_HEAD},
                {14, 2, 128, AH_DTYPE_FP8_E4M3, 0, AH_KV_SCALES_PER_HEAD},
                {8, 4, 64, AH_DTYPE_FP8_E5M2, 0, AH_KV_SCALES_PER_HEAD},
                {8, 4, 256, AH_DTYPE_FP8_E4M3, 0, AH_KV_SCALES_PER_HEAD},
                {8, 4, 128, AH_DTYPE_FP8_E4M3, 2, AH_KV_SCALES_PER_HEAD},
                {8, 4, 64, AH_DTYPE_FP8_E5M2, 3, AH_KV_SCALES_PER_HEAD},
                {8, 8, 128, AH_DTYPE_FP8_E4M3, 3, AH_KV_SCALES_TENSOR},
                {8, 2, 128, AH_DTYPE_FP8_E5M2, 0, AH_KV_SCALES_TENSOR},
            };
            for (size_t i = 0; i < sizeof sv / sizeof sv[0]; i++) {
                if (quick && i % 2) continue;
                cases[n] = base_case("", qt, sv[i].hq, sv[i].hk, sv[i].d, 16);
                cases[n].s.kv_dtype = sv[i].kv;
                cases[n].s.k_scale = 0.05f;
                cases[n].s.v_scale = 0.02f;
                cases[n].scales = sv[i].form;
                lengths(&cases[n], sv[i].kind, 4, 300, &srng);
                ADD("%s %s kv %s h%u/%u d%u %s scales", qn, kinds[sv[i].kind],
                    ah_dtype_name(sv[i].kv), sv[i].hq, sv[i].hk, sv[i].d,
                    sv[i].form == AH_KV_SCALES_PER_HEAD ? "per-head" : "tensor");
            }
            cases[n] = base_case("", qt, 32, 8, 128, 16);
            cases[n].s.kv_dtype = AH_DTYPE_FP8_E4M3;
            cases[n].s.k_scale = 0.05f;
            cases[n].s.v_scale = 0.02f;
            cases[n].scales = AH_KV_SCALES_PER_HEAD;
            lengths(&cases[n], 0, 2, 5000, &srng);
            cases[n].seqlens[0] = 4000 + 97;
            ADD("%s decode kv fp8_e4m3 split-kv per-head scales", qn);
            for (int k = 0; k < 4; k += 3) {
                cases[n] = mla_case(qt, 16);
                cases[n].s.kv_dtype = AH_DTYPE_FP8_E4M3;
                cases[n].s.k_scale = 0.03f;
                cases[n].scales = AH_KV_SCALES_TENSOR;
                lengths(&cases[n], k, 3, 300, &srng);
                ADD("%s mla %s fp8 tensor scales", qn, kinds[k]);
            }
            cases[n] = base_case("", qt, 8, 4, 128, 16);
            cases[n].s.kv_dtype = AH_DTYPE_FP8_E4M3;
            cases[n].s.k_scale = 0.05f;
            cases[n].s.v_scale = 0.02f;
            cases[n].scales = AH_KV_SCALES_PER_HEAD;
            lengths(&cases[n], 3, 5, 150, &srng);
            cases[n].s.batch.prefix_blocks = 5;
            for (int r = 0; r < 5; r++) cases[n].seqlens[r] += 80;
            ADD("%s cascade mixed kv fp8_e4m3 per-head scales", qn);
            for (int f = 0; f < 2; f++) {
                cases[n] = base_case("", qt, 8, 4, 128, 16);
                cases[n].s.kv_dtype = AH_DTYPE_FP8_E4M3;
                cases[n].s.k_scale = 0.05f;
                cases[n].s.v_scale = 0.02f;
                cases[n].scales = f ? AH_KV_SCALES_PER_HEAD : AH_KV_SCALES_HOST;
                cases[n].q_scale = 1;
                lengths(&cases[n], 3, 4, 300, &srng);
                ADD("%s mixed kv fp8_e4m3 q-scale%s", qn, f ? " per-head scales" : "");
            }
            for (int gm = 1; gm <= 2; gm++) {
                cases[n] = base_case("", qt, 8, 4, 128, 16);
                cases[n].s.kv_dtype = AH_DTYPE_FP8_E4M3;
                cases[n].s.k_scale = 0.05f;
                cases[n].s.v_scale = 0.02f;
                cases[n].scales = gm == 1 ? AH_KV_SCALES_TENSOR : AH_KV_SCALES_PER_HEAD;
                cases[n].q_scale = gm == 2;
                lengths(&cases[n], gm == 1 ? 3 : 0, 4, 200, &srng);
                cases[n].s.batch.table_pad = 6; /* case_batch */
                cases[n].graph = gm;
                ADD("%s graph(%s) %s kv fp8_e4m3 %s scales", qn, gm == 1 ? "plan+fwd" : "fwd",
                    gm == 1 ? "mixed" : "decode", gm == 1 ? "tensor" : "per-head");
            }
        }
        /* Interleaved K/V (AH_KV_LAYOUT_NHD_INTERLEAVED, HND_INTERLEAVED):
         * one allocation, K and V views with twice the block stride, the
         * value view's offset in its byte_offset or its data, on every
         * kernel of a value cache: register-load decode (d64, d128, d256),
         * streaming (FP8 on tensor cores), split-KV, the fast (sm90
         * at d128 on Hopper) and general (FP8 with per-head scales,
         * soft-cap) tensor-core kernels, a cascade and a graph replay.
         * Lengths from a generator of their own. */
        {
            uint64_t irng = 5150 + (uint64_t)qi;
            const struct {
                uint32_t d;
                int hnd, kind;
                ah_dtype kv; /* AH_DTYPE_COUNT: the query's type */
                float softcap;
            } iv[] = {
                {128, 0, 0, AH_DTYPE_COUNT, 0},    {64, 1, 0, AH_DTYPE_COUNT, 0},
                {256, 0, 0, AH_DTYPE_COUNT, 0},    {128, 1, 0, AH_DTYPE_FP8_E4M3, 0},
                {128, 0, 2, AH_DTYPE_COUNT, 0},    {64, 1, 3, AH_DTYPE_COUNT, 0},
                {128, 0, 3, AH_DTYPE_FP8_E5M2, 0}, {128, 1, 3, AH_DTYPE_COUNT, 8.f},
            };
            for (size_t i = 0; i < sizeof iv / sizeof iv[0]; i++) {
                if (quick && i % 2) continue;
                cases[n] = base_case("", qt, 8, 2, iv[i].d, 16);
                cases[n].s.layout = iv[i].hnd ? AH_KV_LAYOUT_HND : AH_KV_LAYOUT_NHD;
                cases[n].s.softcap = iv[i].softcap;
                if (iv[i].kv != AH_DTYPE_COUNT) {
                    cases[n].s.kv_dtype = iv[i].kv;
                    cases[n].s.k_scale = 0.05f;
                    cases[n].s.v_scale = 0.02f;
                    cases[n].scales = AH_KV_SCALES_PER_HEAD;
                }
                cases[n].interleaved = 1 + (int)(i % 2);
                lengths(&cases[n], iv[i].kind, 4, 300, &irng);
                ADD("%s %s d%u %s_INTERLEAVED%s%s%s", qn, kinds[iv[i].kind], iv[i].d,
                    iv[i].hnd ? "HND" : "NHD", iv[i].kv != AH_DTYPE_COUNT ? " kv " : "",
                    iv[i].kv != AH_DTYPE_COUNT ? ah_dtype_name(iv[i].kv) : "",
                    iv[i].softcap > 0 ? " softcap" : "");
            }
            cases[n] = base_case("", qt, 32, 8, 128, 16);
            cases[n].s.layout = AH_KV_LAYOUT_HND;
            cases[n].interleaved = 1;
            lengths(&cases[n], 0, 2, 5000, &irng);
            cases[n].seqlens[0] = 4000 + 97;
            ADD("%s decode split-kv HND_INTERLEAVED", qn);
            cases[n] = base_case("", qt, 8, 2, 128, 16);
            cases[n].interleaved = 2;
            lengths(&cases[n], 3, 5, 150, &irng);
            cases[n].s.batch.prefix_blocks = 5;
            for (int r = 0; r < 5; r++) cases[n].seqlens[r] += 80;
            ADD("%s cascade mixed NHD_INTERLEAVED", qn);
            cases[n] = base_case("", qt, 8, 2, 128, 16);
            cases[n].interleaved = 1;
            lengths(&cases[n], 3, 4, 200, &irng);
            cases[n].s.batch.table_pad = 6; /* case_batch */
            cases[n].graph = 1;
            ADD("%s graph(plan+fwd) mixed NHD_INTERLEAVED", qn);
        }
        /* MLA absorbed decode (and its per-token path for longer queries) */
        for (int k = 0; k < 4; k += (quick ? 3 : 1)) {
            cases[n] = mla_case(qt, 16);
            if (k == 1) cases[n].s.kv_dtype = AH_DTYPE_FP8_E4M3, cases[n].s.k_scale = 0.03f;
            lengths(&cases[n], k, 3, 300, &rng);
            ADD("%s mla %s%s", qn, kinds[k], k == 1 ? " fp8" : "");
        }
        /* MLA on the Hopper kernel on sm_90 (decode_mla_sm90.cu, from 16
         * heads), 64 heads per CTA: partial key tiles, a last head block
         * of 32 (96 heads), a lone long request split over partitions; and
         * 8 heads, which stay on the mma.sync kernel everywhere */
        for (int k = 0; k < 4; k += (quick ? 3 : 1)) {
            cases[n] = mla_case(qt, 128);
            lengths(&cases[n], k, 3, 700, &rng);
            ADD("%s mla h128 %s", qn, kinds[k]);
        }
        /* its FP8 form (fp16 MMAs, each query row scaled into fp16's range by
         * a power of two): e4m3 on decode; e5m2 on a mixed batch, its queries
         * beyond fp16's range (bf16) or in its subnormals */
        for (int f = 0; f < 2; f++) {
            cases[n] = mla_case(qt, 128);
            cases[n].s.kv_dtype = f ? AH_DTYPE_FP8_E5M2 : AH_DTYPE_FP8_E4M3;
            cases[n].s.k_scale = 0.03f;
            if (f) cases[n].s.q_amp = qt == AH_DTYPE_BF16 ? 1e5f : 1e-6f;
            lengths(&cases[n], f ? 3 : 0, 3, 700, &rng);
            ADD("%s mla h128 %s %s%s", qn, kinds[f ? 3 : 0], ah_dtype_name(cases[n].s.kv_dtype),
                !f                    ? ""
                : qt == AH_DTYPE_BF16 ? " |q| 1e5"
                                      : " |q| 1e-6");
        }
        cases[n] = mla_case(qt, 64);
        lengths(&cases[n], 0, 1, 100, &rng);
        cases[n].seqlens[0] = 6000 + 37;
        ADD("%s mla h64 decode split-kv", qn);
        cases[n] = mla_case(qt, 96);
        lengths(&cases[n], 3, 3, 500, &rng);
        ADD("%s mla h96 mixed", qn);
        /* token blocks (mla_token_block): 16 heads take 4 tokens a CTA, 32
         * heads 2; a last block of 3, a lone request split over partitions
         * whose rows end at different keys */
        cases[n] = mla_case(qt, 16);
        lengths(&cases[n], 2, 1, 100, &rng);
        cases[n].qlens[0] = 7;
        cases[n].seqlens[0] = 6000 + 7;
        ADD("%s mla h16 extend 7 split-kv", qn);
        cases[n] = mla_case(qt, 32);
        lengths(&cases[n], 3, 5, 400, &rng);
        ADD("%s mla h32 mixed", qn);
        /* a chunked-prefill step in small: three decodes over 5000-6000
         * keys, which split, beside an extend of 9 tokens over 700 (three
         * token blocks) and a decode over 900 */
        cases[n] = mla_case(qt, 16);
        lengths(&cases[n], 0, 5, 100, &rng);
        for (int r = 0; r < 3; r++) cases[n].seqlens[r] = 5000 + 500 * r + 3;
        cases[n].qlens[3] = 9, cases[n].seqlens[3] = 709;
        cases[n].seqlens[4] = 900;
        ADD("%s mla h16 mixed long and short", qn);
        cases[n] = mla_case(qt, 8);
        lengths(&cases[n], 0, 3, 700, &rng);
        ADD("%s mla h8 decode", qn);
        /* FP8 at 16 heads on decode steps: the kernel with keys as M on sm_90
         * (decode_mla_fp8_sm90.cu). e4m3 at random lengths (partial 64-key
         * tiles), both consumers' shares; lengths 1-130 (tiles of one key,
         * a consumer with none); a lone long request split over partitions
         * beside short ones; e5m2 with queries beyond fp16's range (bf16) or
         * in its subnormals */
        cases[n] = mla_fp8_case(qt, 16, AH_DTYPE_FP8_E4M3);
        lengths(&cases[n], 0, 5, 900, &rng);
        ADD("%s mla h16 decode fp8_e4m3", qn);
        cases[n] = mla_fp8_case(qt, 16, AH_DTYPE_FP8_E4M3);
        lengths(&cases[n], 0, 16, 130, &rng);
        cases[n].seqlens[0] = 1, cases[n].seqlens[1] = 64, cases[n].seqlens[2] = 65;
        ADD("%s mla h16 decode fp8_e4m3 short", qn);
        cases[n] = mla_fp8_case(qt, 16, AH_DTYPE_FP8_E4M3);
        lengths(&cases[n], 0, 3, 200, &rng);
        cases[n].seqlens[0] = 7000 + 21;
        ADD("%s mla h16 decode fp8_e4m3 split-kv", qn);
        cases[n] = mla_fp8_case(qt, 16, AH_DTYPE_FP8_E5M2);
        cases[n].s.q_amp = qt == AH_DTYPE_BF16 ? 1e5f : 1e-6f;
        lengths(&cases[n], 0, 4, 700, &rng);
        ADD("%s mla h16 decode fp8_e5m2%s", qn, qt == AH_DTYPE_BF16 ? " |q| 1e5" : " |q| 1e-6");
        /* FP8 below 16 heads (TP 16 and up) on sm_90: decode steps on the
         * kernel with keys as M (8 zero heads), mixed steps on the 64-row
         * kernel, in token blocks of 8 at 8 heads and one token a CTA at 3 */
        cases[n] = mla_fp8_case(qt, 8, AH_DTYPE_FP8_E4M3);
        lengths(&cases[n], 0, 4, 900, &rng);
        ADD("%s mla h8 decode fp8_e4m3", qn);
        cases[n] = mla_fp8_case(qt, 8, AH_DTYPE_FP8_E4M3);
        lengths(&cases[n], 3, 5, 400, &rng);
        ADD("%s mla h8 mixed fp8_e4m3", qn);
        cases[n] = mla_fp8_case(qt, 3, AH_DTYPE_FP8_E5M2);
        lengths(&cases[n], 3, 4, 300, &rng);
        ADD("%s mla h3 mixed fp8_e5m2", qn);
        /* features, on decode and mixed batches */
        for (int k = 0; k < 4; k += 3) {
            const char *kn = kinds[k];
            cases[n] = base_case("", qt, 8, 2, 128, 16);
            cases[n].s.window = 37;
            lengths(&cases[n], k, 4, 300, &rng);
            ADD("%s %s sliding-window 37", qn, kn);
            cases[n] = base_case("", qt, 8, 2, 128, 16);
            cases[n].s.softcap = 5.f;
            lengths(&cases[n], k, 4, 300, &rng);
            ADD("%s %s softcap 5", qn, kn);
            cases[n] = base_case("", qt, 8, 2, 128, 16);
            cases[n].s.alibi = 1;
            lengths(&cases[n], k, 4, 300, &rng);
            ADD("%s %s alibi", qn, kn);
            cases[n] = base_case("", qt, 8, 2, 128, 16);
            cases[n].s.sinks = 1;
            lengths(&cases[n], k, 4, 300, &rng);
            ADD("%s %s sinks", qn, kn);
            cases[n] = base_case("", qt, 8, 8, 64, 16);
            cases[n].s.window = 20, cases[n].s.softcap = 8.f, cases[n].s.alibi = 1,
            cases[n].s.sinks = 1;
            lengths(&cases[n], k, 3, 200, &rng);
            ADD("%s %s window+softcap+alibi+sinks", qn, kn);
        }
        /* soft-cap and ALiBi on the Hopper prefill kernel (d128), with the
         * masks of a window and causal extends */
        for (int k = 1; k < 3; k++) {
            cases[n] = base_case("", qt, 16, 4, 128, 16);
            cases[n].s.window = k == 1 ? 300 : 0, cases[n].s.softcap = 8.f, cases[n].s.alibi = 1,
            cases[n].s.sinks = k == 1;
            lengths(&cases[n], k, 3, 400, &rng);
            ADD("%s %s d128 softcap+alibi%s", qn, kinds[k], k == 1 ? "+window+sinks" : "");
        }
        /* Released blocks (AH_FEAT_RELEASED_BLOCKS): windows hiding whole
         * blocks from each request, their entries negative and every
         * block no entry names NaN (release_blocks), on every kernel that
         * reads pages: decode by register loads (d64, d128, d256, pages of 1
         * and 64), streaming (FP8 on tensor cores at d128, on CUDA cores
         * at d64), split-KV, MLA on tensor and CUDA cores; extend and
         * mixed batches on the fast (sm90 at d128 on Hopper) and general
         * (FP8, soft-cap) tensor-core kernels; bidirectional windows; a
         * graph replayed over new tables; cascades (below). Their lengths
         * come from a generator of their own, leaving the other cases'. */
        {
            uint64_t rrng = 777 + (uint64_t)qi;
            const struct {
                uint32_t d, bs, window;
                ah_dtype kv; /* AH_DTYPE_COUNT: the query's type */
                int kind;
                float softcap;
            } rv[] = {
                {128, 16, 37, AH_DTYPE_COUNT, 0, 0},    {64, 16, 20, AH_DTYPE_COUNT, 0, 0},
                {128, 1, 37, AH_DTYPE_COUNT, 0, 0},     {128, 64, 100, AH_DTYPE_COUNT, 0, 0},
                {256, 16, 37, AH_DTYPE_COUNT, 0, 0},    {128, 16, 37, AH_DTYPE_FP8_E4M3, 0, 0},
                {64, 16, 37, AH_DTYPE_FP8_E5M2, 0, 0},  {128, 16, 37, AH_DTYPE_COUNT, 2, 0},
                {128, 16, 37, AH_DTYPE_COUNT, 3, 0},    {64, 16, 37, AH_DTYPE_COUNT, 3, 0},
                {256, 32, 70, AH_DTYPE_COUNT, 2, 0},    {128, 16, 37, AH_DTYPE_FP8_E4M3, 3, 0},
                {128, 16, 37, AH_DTYPE_COUNT, 3, 10.f},
            };
            for (size_t i = 0; i < sizeof rv / sizeof rv[0]; i++) {
                if (quick && i % 2) continue;
                cases[n] = base_case("", qt, 8, 2, rv[i].d, rv[i].bs);
                cases[n].s.window = rv[i].window;
                cases[n].s.softcap = rv[i].softcap;
                if (rv[i].kv != AH_DTYPE_COUNT) {
                    cases[n].s.kv_dtype = rv[i].kv;
                    cases[n].s.k_scale = 0.05f;
                    cases[n].s.v_scale = 0.02f;
                }
                cases[n].released = 1;
                lengths(&cases[n], rv[i].kind, 4, 400, &rrng);
                ADD("%s %s released d%u page%u window %u%s%s%s", qn, kinds[rv[i].kind], rv[i].d,
                    rv[i].bs, rv[i].window, rv[i].kv != AH_DTYPE_COUNT ? " kv " : "",
                    rv[i].kv != AH_DTYPE_COUNT ? ah_dtype_name(rv[i].kv) : "",
                    rv[i].softcap > 0 ? " softcap" : "");
            }
            cases[n] = base_case("", qt, 32, 8, 128, 16);
            cases[n].s.window = 2000;
            cases[n].released = 1;
            lengths(&cases[n], 0, 2, 5000, &rrng);
            cases[n].seqlens[0] = 4000 + 97;
            cases[n].seqlens[1] = 2500 + 3;
            ADD("%s decode released split-kv window 2000", qn);
            for (int fp8 = 0; fp8 < 2; fp8++) {
                cases[n] = mla_case(qt, fp8 ? 3 : 16);
                cases[n].s.window = 100;
                if (fp8) cases[n].s.kv_dtype = AH_DTYPE_FP8_E4M3, cases[n].s.k_scale = 0.03f;
                cases[n].released = 1;
                lengths(&cases[n], 0, 3, 400, &rrng);
                cases[n].seqlens[0] = 390;
                ADD("%s mla decode released window 100%s", qn, fp8 ? " fp8 h3/1" : "");
            }
            cases[n] = mla_case(qt, 128);
            cases[n].s.window = 100;
            cases[n].released = 1;
            lengths(&cases[n], 0, 3, 400, &rrng);
            cases[n].seqlens[0] = 390;
            ADD("%s mla h128 decode released window 100", qn);
            cases[n] = base_case("", qt, 8, 2, 128, 16);
            cases[n].s.causal = AH_CAUSAL_OFF;
            cases[n].s.window = 9;
            cases[n].released = 1;
            lengths(&cases[n], 2, 3, 200, &rrng);
            ADD("%s extend bidirectional released window 9", qn);
            cases[n] = base_case("", qt, 28, 4, 128, 16);
            cases[n].s.window = 37;
            cases[n].released = 1;
            lengths(&cases[n], 0, 4, 200, &rrng);
            cases[n].seqlens[0] = 180;
            cases[n].s.batch.table_pad = 6; /* case_batch */
            cases[n].graph = 1;
            ADD("%s graph(plan+fwd) decode released window 37", qn);
            /* Cascades over a shared prefix request 0's window released:
             * request 1 still sees some of it (the prefix pass would follow
             * request 0's released entries: the plan takes no cascade);
             * every window starting past them (the cascade is planned,
             * its prefix pass sees only the blocks request 0 keeps). */
            cases[n] = base_case("", qt, 8, 2, 128, 16);
            cases[n].s.window = 37;
            cases[n].released = 1;
            cases[n].s.batch.num_reqs = 3;
            cases[n].s.batch.prefix_blocks = 5;
            {
                const int32_t ql[3] = {1, 1, 1}, sl[3] = {300, 100, 250};
                memcpy(cases[n].qlens, ql, sizeof ql);
                memcpy(cases[n].seqlens, sl, sizeof sl);
            }
            ADD("%s cascade decode released, prefix still seen", qn);
            cases[n] = base_case("", qt, 8, 2, 128, 16);
            cases[n].s.window = 100;
            cases[n].released = 1;
            cases[n].s.batch.num_reqs = 3;
            cases[n].s.batch.prefix_blocks = 10;
            {
                const int32_t ql[3] = {1, 1, 20}, sl[3] = {200, 230, 240};
                memcpy(cases[n].qlens, ql, sizeof ql);
                memcpy(cases[n].seqlens, sl, sizeof sl);
            }
            ADD("%s cascade mixed released, prefix past", qn);
        }
        /* bidirectional decoder layers (causal = OFF) over the paged cache
         * (query = sequence), with and without window */
        for (int wv = 0; wv < 2; wv++) {
            cases[n] = base_case("", qt, 8, 2, 128, 16);
            cases[n].s.causal = AH_CAUSAL_OFF;
            cases[n].s.window = wv ? 9 : 0;
            lengths(&cases[n], 1, 3, 100, &rng);
            ADD("%s bidirectional%s", qn, wv ? " window 9" : "");
        }
        /* cascade: shared prefix of 5 blocks */
        for (int k = 0; k < 4; k += (quick ? 3 : 1)) {
            if (k == 1) continue;
            cases[n] = base_case("", qt, 8, 2, 128, 16);
            lengths(&cases[n], k, 5, 150, &rng);
            cases[n].s.batch.prefix_blocks = 5;
            for (int r = 0; r < 5; r++) cases[n].seqlens[r] += 80;
            if (k == 3) cases[n].s.sinks = 1;
            ADD("%s cascade %s%s", qn, kinds[k], k == 3 ? " +sinks" : "");
        }
        /* decode with empty requests on every decode kernel: register-load
         * (d64, d128, d256), streaming (FP8), split-KV, MLA on tensor and
         * CUDA cores, sinks with a window, page size 1 */
        {
            const uint32_t dd[3] = {64, 128, 256};
            for (int di = 0; di < 3; di++) {
                cases[n] = base_case("", qt, 8, 2, dd[di], 16);
                lengths(&cases[n], 0, 5, 300, &rng);
                empty_kv(&cases[n]);
                ADD("%s decode empty-kv d%u", qn, dd[di]);
            }
            cases[n] = base_case("", qt, 32, 8, 128, 16);
            lengths(&cases[n], 0, 3, 100, &rng);
            cases[n].seqlens[1] = 4097;
            empty_kv(&cases[n]);
            ADD("%s decode empty-kv split-kv", qn);
            for (int fi = 0; fi < 2; fi++) {
                cases[n] = base_case("", qt, 8, 2, fi ? 64 : 128, 16);
                cases[n].s.kv_dtype = fi ? AH_DTYPE_FP8_E5M2 : AH_DTYPE_FP8_E4M3;
                cases[n].s.k_scale = 0.05f;
                cases[n].s.v_scale = 0.02f;
                lengths(&cases[n], 0, 5, 300, &rng);
                empty_kv(&cases[n]);
                ADD("%s decode empty-kv kv %s d%u", qn, ah_dtype_name(cases[n].s.kv_dtype),
                    fi ? 64 : 128);
            }
            for (int fp8 = 0; fp8 < 2; fp8++) {
                cases[n] = mla_case(qt, 16);
                if (fp8) cases[n].s.kv_dtype = AH_DTYPE_FP8_E4M3, cases[n].s.k_scale = 0.03f;
                lengths(&cases[n], 0, 3, 300, &rng);
                empty_kv(&cases[n]);
                ADD("%s mla decode empty-kv%s", qn, fp8 ? " fp8" : "");
            }
            cases[n] = base_case("", qt, 8, 2, 128, 16);
            cases[n].s.sinks = 1, cases[n].s.window = 37;
            lengths(&cases[n], 0, 4, 300, &rng);
            empty_kv(&cases[n]);
            ADD("%s decode empty-kv sinks window 37", qn);
            cases[n] = base_case("", qt, 8, 2, 128, 1);
            lengths(&cases[n], 0, 3, 200, &rng);
            empty_kv(&cases[n]);
            ADD("%s decode empty-kv page1", qn);
        }
        /* Decode over groups that no power-of-two block divides (3, 5, 6,
         * 7: Llama-3.2-3B, Qwen2.5-14B, Qwen2-1.5B, Qwen2.5-7B): each KV
         * head's last head block runs past the group, on every decode
         * kernel: register loads (16-bit d64, d128, d256), streaming on
         * CUDA cores (FP8 d64 and d256) and on tensor cores (FP8 d128).
         * Lengths up to 300 keys take 2 partitions (split-KV). */
        {
            const uint32_t og[4][2] = {{12, 4}, {10, 2}, {12, 2}, {14, 2}};
            const struct {
                uint32_t d;
                ah_dtype kv; /* AH_DTYPE_COUNT: the query's type */
            } pv[6] = {{128, AH_DTYPE_COUNT},    {64, AH_DTYPE_COUNT},    {256, AH_DTYPE_COUNT},
                       {128, AH_DTYPE_FP8_E4M3}, {64, AH_DTYPE_FP8_E5M2}, {256, AH_DTYPE_FP8_E4M3}};
            for (int gi = 0; gi < 4; gi++)
                for (int v = 0; v < 6; v++) {
                    if (quick && v % 2 != gi % 2) continue;
                    cases[n] = base_case("", qt, og[gi][0], og[gi][1], pv[v].d, 16);
                    if (pv[v].kv != AH_DTYPE_COUNT) {
                        cases[n].s.kv_dtype = pv[v].kv;
                        cases[n].s.k_scale = 0.05f;
                        cases[n].s.v_scale = 0.02f;
                    }
                    lengths(&cases[n], 0, 4, 300, &rng);
                    ADD("%s decode h%u/%u d%u%s%s", qn, og[gi][0], og[gi][1], pv[v].d,
                        pv[v].kv != AH_DTYPE_COUNT ? " kv " : "",
                        pv[v].kv != AH_DTYPE_COUNT ? ah_dtype_name(pv[v].kv) : "");
                }
            /* Four padded head blocks per CTA of the register-load kernel
             * (no split: at most 256 keys; the merge buffers fit at GB x
             * (D + 2) <= 768): 28/4 at d64 (blocks of 8), 12/4 at d128
             * (blocks of 4). Then Qwen2.5-7B's 28/4 and Qwen2.5-14B's 40/8
             * with split-KV. */
            const uint32_t hp[2][3] = {{28, 4, 64}, {12, 4, 128}};
            for (int i = 0; i < 2; i++) {
                cases[n] = base_case("", qt, hp[i][0], hp[i][1], hp[i][2], 16);
                lengths(&cases[n], 0, 4, 250, &rng);
                ADD("%s decode h%u/%u d%u one partition", qn, hp[i][0], hp[i][1], hp[i][2]);
            }
            cases[n] = base_case("", qt, 28, 4, 128, 16);
            lengths(&cases[n], 0, 2, 5000, &rng);
            cases[n].seqlens[0] = 4000 + 89;
            ADD("%s decode h28/4 split-kv", qn);
            cases[n] = base_case("", qt, 40, 8, 128, 16);
            lengths(&cases[n], 0, 1, 5000, &rng);
            cases[n].seqlens[0] = 4000 + 13;
            ADD("%s decode h40/8 split-kv", qn);
            /* sinks (finish_state and the split merge read them per head),
             * a window, ALiBi slopes (read per head in the key loops) */
            cases[n] = base_case("", qt, 14, 2, 128, 16);
            cases[n].s.sinks = 1;
            lengths(&cases[n], 0, 4, 300, &rng);
            ADD("%s decode h14/2 sinks", qn);
            cases[n] = base_case("", qt, 28, 4, 128, 16);
            cases[n].s.sinks = 1;
            lengths(&cases[n], 0, 2, 5000, &rng);
            cases[n].seqlens[1] = 3000 + 7;
            ADD("%s decode h28/4 sinks split-kv", qn);
            cases[n] = base_case("", qt, 14, 2, 128, 16);
            cases[n].s.window = 37;
            lengths(&cases[n], 0, 4, 300, &rng);
            ADD("%s decode h14/2 sliding-window 37", qn);
            cases[n] = base_case("", qt, 12, 4, 64, 16);
            cases[n].s.window = 20, cases[n].s.softcap = 8.f, cases[n].s.alibi = 1,
            cases[n].s.sinks = 1;
            lengths(&cases[n], 0, 4, 200, &rng);
            ADD("%s decode h12/4 d64 window+softcap+alibi+sinks", qn);
            const struct {
                uint32_t d;
                ah_dtype kv;
            } av[2] = {{256, AH_DTYPE_COUNT}, {128, AH_DTYPE_FP8_E4M3}};
            for (int a = 0; a < 2; a++) {
                cases[n] = base_case("", qt, 14, 2, av[a].d, 16);
                cases[n].s.alibi = 1;
                if (av[a].kv != AH_DTYPE_COUNT) {
                    cases[n].s.kv_dtype = av[a].kv;
                    cases[n].s.k_scale = 0.05f;
                    cases[n].s.v_scale = 0.02f;
                }
                lengths(&cases[n], 0, 4, 300, &rng);
                ADD("%s decode h14/2 d%u alibi%s", qn, av[a].d, a ? " kv fp8_e4m3" : "");
            }
            /* 16-bit d128 batches of a head block an SM and more, which
             * stream through shared memory on a chip reading at 4 TB/s
             * and more (scheduler.h, decode_stream_grid; the register
             * loads elsewhere): 16 tokens of 32 KV heads, groups of 4 and
             * of 7 (padded blocks of 8) with sinks, NHD and HND, a window
             * with soft-cap and ALiBi; and of 16 KV heads over up to 3000
             * keys, which split to fill the wave. */
            {
                const uint32_t sg[5][2] = {{128, 32}, {224, 32}, {128, 32}, {128, 32}, {64, 16}};
                const char *what[5] = {"", " sinks", " HND", " window+softcap+alibi", " split-kv"};
                for (int i = 0; i < 5; i++) {
                    cases[n] = base_case("", qt, sg[i][0], sg[i][1], 128, 16);
                    cases[n].s.sinks = i == 1;
                    if (i == 2) cases[n].s.layout = AH_KV_LAYOUT_HND;
                    if (i == 3)
                        cases[n].s.window = 37, cases[n].s.softcap = 8.f, cases[n].s.alibi = 1;
                    lengths(&cases[n], 0, 16, i == 4 ? 3000 : 300, &rng);
                    ADD("%s decode large-grid h%u/%u%s", qn, sg[i][0], sg[i][1], what[i]);
                }
            }
            /* MLA on CUDA cores (FP8): 3 heads in blocks of 2 */
            cases[n] = mla_case(qt, 3);
            cases[n].s.kv_dtype = AH_DTYPE_FP8_E4M3, cases[n].s.k_scale = 0.03f;
            lengths(&cases[n], 0, 3, 300, &rng);
            ADD("%s mla decode fp8 h3/1", qn);
            cases[n] = base_case("", qt, 14, 2, 128, 16);
            lengths(&cases[n], 0, 5, 300, &rng);
            empty_kv(&cases[n]);
            ADD("%s decode empty-kv h14/2", qn);
            cases[n] = base_case("", qt, 14, 2, 128, 16);
            lengths(&cases[n], 3, 4, 300, &rng);
            ADD("%s mixed h14/2", qn);
            cases[n] = base_case("", qt, 28, 4, 128, 16);
            lengths(&cases[n], 0, 4, 200, &rng);
            cases[n].s.batch.table_pad = 6; /* case_batch */
            cases[n].graph = 1;
            ADD("%s graph(plan+fwd) decode h28/4", qn);
        }
        /* CUDA graphs: capture plan+forward, and forward only */
        for (int gm = 1; gm <= 2; gm++)
            for (int k = 0; k < 4; k += 3) {
                cases[n] = base_case("", qt, 8, 2, 128, 16);
                lengths(&cases[n], k, 4, 200, &rng);
                cases[n].s.batch.table_pad = 6; /* case_batch */
                cases[n].graph = gm;
                ADD("%s graph(%s) %s", qn, gm == 1 ? "plan+fwd" : "fwd", kinds[k]);
            }
    }
    if (list) {
        for (int i = 0; i < n; i++)
            if (!match || strstr(cases[i].name, match)) printf("%s\n", cases[i].name);
        return 0;
    }
    ath_host p;
    int rc = ath_open(&p, path, 0);
    if (rc) return rc;
    printf("device: %s (%s), %u SMs\n", p.probe.device_name, p.probe.arch, p.probe.multiprocessors);
    for (int i = 0; i < n; i++) {
        if (match && !strstr(cases[i].name, match)) continue;
        case_batch(&cases[i], cases[i].s.batch.table_pad);
        fprintf(stderr, "case %d/%d: %s\n", i + 1, n, cases[i].name);
        run_case(&p, &cases[i], 1000 + (uint64_t)i);
    }
    for (int qi = 0; qi < 2; qi++) {
        if (!match || strstr("merge_states", match)) check_merge(&p, qts[qi], 77 + qi);
        if (match && !strstr("write_kv", match)) continue;
        const ah_kv_scales H = AH_KV_SCALES_HOST, TS = AH_KV_SCALES_TENSOR,
                           PH = AH_KV_SCALES_PER_HEAD;
        check_write_kv(&p, qts[qi], qts[qi], AH_KV_LAYOUT_NHD, 0, 5, 0, H, 0);
        check_write_kv(&p, qts[qi], AH_DTYPE_FP8_E4M3, AH_KV_LAYOUT_HND, 0, 6, 0, H, 0);
        check_write_kv(&p, qts[qi], AH_DTYPE_FP8_E5M2, AH_KV_LAYOUT_NHD, 1, 7, 0, H, 0);
        check_write_kv(&p, qts[qi], AH_DTYPE_FP8_E4M3, AH_KV_LAYOUT_NHD, 0, 8, 1, H, 0);
        check_write_kv(&p, qts[qi], AH_DTYPE_FP8_E5M2, AH_KV_LAYOUT_HND, 1, 9, 1, H, 0);
        check_write_kv(&p, qts[qi], AH_DTYPE_FP8_E4M3, AH_KV_LAYOUT_NHD, 0, 10, 1, PH, 0);
        check_write_kv(&p, qts[qi], AH_DTYPE_FP8_E5M2, AH_KV_LAYOUT_HND, 0, 11, 1, PH, 0);
        check_write_kv(&p, qts[qi], AH_DTYPE_FP8_E4M3, AH_KV_LAYOUT_HND, 0, 12, 1, TS, 0);
        check_write_kv(&p, qts[qi], AH_DTYPE_FP8_E4M3, AH_KV_LAYOUT_NHD, 1, 13, 1, TS, 0);
        check_write_kv(&p, qts[qi], qts[qi], AH_KV_LAYOUT_NHD, 0, 14, 0, H, 1);
        check_write_kv(&p, qts[qi], AH_DTYPE_FP8_E4M3, AH_KV_LAYOUT_HND, 0, 15, 1, PH, 2);
    }
    printf("summary: %d passed, %d failed\n", g_pass, g_fail);
    ath_close(&p);
    return g_fail ? 1 : 0;
}
