/*
 * Correctness driver for cuda_fa3: random inputs per feature, run through
 * the plugin's plan/forward (and CUDA-graph capture and replay), compared
 * with the double-precision reference oracle (ah_reference_attention);
 * then ragged steps (qk 192 / v 128, the shared ath_ragged_run).
 * Exit 0: all pass; 1: a mismatch or error; 77: no usable device (skip).
 * --fp8-attention gives the layers fp8_attention, so the FP8-KV cases of
 * head size 128 run through the e4m3-GEMM kernel, held to a looser bound
 * (out: atol 4e-2, rtol 5e-2; LSE 5e-2: Q and P rounded to 3 mantissa
 * bits); every line prints max|err| and the relative L2 error, the figures
 * the README quotes for both settings.
 *
 *   fa3_check [options] [plugin.so] [case-name-substring]
 * Options (fa3_options.h): --max-splits=N, --vt-scratch-mib=N,
 * --vt-min-reads=N (the plugin's keys max_splits, fp8_vt_scratch_mib,
 * fp8_vt_min_reads), --fp8-attention, --device=N. The plugin gets the
 * host's own services (tests/helpers/ath.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa3_options.h"

#define MAXR 64

typedef struct tcase {
    const char *name;
    ah_dtype dt;
    int hq, hk, d, bs;
    ah_kv_layout layout;
    ah_attn_type type;
    int window;
    float softcap;
    int sinks, lse, shuffled, write_kv;
    int n;
    int32_t qlen[MAXR], seqlen[MAXR];
    int n2;
    int32_t qlen2[MAXR], seqlen2[MAXR]; /* n2 > 0: capture with batch 1, replay batch 2 */
    int kv8;                            /* 1: fp8 e4m3 KV cache, real = stored * scale */
    float k_scale, v_scale;             /* the FP8 descale factors */
    int var;                            /* variations, VAR_* bits */
} tcase;

/* Does either batch hold a request with no keys (AH_FEAT_EMPTY_KV)? Then
 * the table entries past each request's blocks, a whole row for such a
 * request, point far past the cache, so that reading one shows. */
static int has_empty_kv(const tcase *c)
{
    for (int r = 0; r < c->n; r++)
        if (c->seqlen[r] == 0) return 1;
    for (int r = 0; r < c->n2; r++)
        if (c->seqlen2[r] == 0) return 1;
    return 0;
}

/* tcase.var: blocks the window hides from every query of a request (see
 * hide_blocks) released, or named at a block of NaN; the cache in the
 * case's layout's interleaved form (see kv_inter); ALiBi (the helpers'
 * slopes 2^(-8 (h + 1) / Hq)). */
enum { VAR_RELEASED = 1, VAR_NAN_HIDDEN = 2, VAR_INTERLEAVED = 4, VAR_ALIBI = 8 };

/* An interleaved cache (AH_KV_LAYOUT_NHD_INTERLEAVED, HND_INTERLEAVED):
 * one device tensor [blocks, 2, d1, d2, D] (allocated as [blocks, 2 d1,
 * d2, D]) holding the workload's K and V block by block, and the two views
 * the plugin gets, K = cache[:, 0] and V = cache[:, 1] (its offset in the
 * data pointer, as PyTorch's DLPack export puts it). The oracle reads the
 * workload's dense host caches, whose values these are. */
typedef struct kv_inter {
    ath_tensor t;
    DLTensor k, v;
    int64_t shape[4], strides[4];
    size_t block_bytes; /* one block of K (or V) */
} kv_inter;

static ath_host H;
static ath_args A;

/* The interleaved copy of w's caches on the device, and its views. 0 or 1. */
static int inter_upload(kv_inter *x, const ath_work *w)
{
    const uint32_t nb = w->B.num_blocks;
    char *host = malloc(2 * x->block_bytes * nb);
    if (!host) return 1;
    for (uint32_t b = 0; b < nb; b++) {
        memcpy(host + (2 * (size_t)b) * x->block_bytes, (const char *)w->kc + b * x->block_bytes,
               x->block_bytes);
        memcpy(host + (2 * (size_t)b + 1) * x->block_bytes,
               (const char *)w->vc + b * x->block_bytes, x->block_bytes);
    }
    const int rc = ath_upload(&H, &x->t, host);
    free(host);
    return rc;
}

static int inter_build(kv_inter *x, const ath_work *w)
{
    const ah_layer_spec *s = &w->spec;
    const int hnd = ah_kv_layout_is_hnd(s->kv_layout);
    const int64_t d1 = hnd ? s->num_kv_heads : s->block_size,
                  d2 = hnd ? s->block_size : s->num_kv_heads, D = s->qk_head_size;
    const int64_t shape[4] = {w->B.num_blocks, 2 * d1, d2, D};
    memset(x, 0, sizeof *x);
    x->block_bytes = (size_t)(d1 * d2 * D) * ah_dtype_size(s->kv_dtype);
    if (ath_tensor_new(&H, &x->t, s->kv_dtype, 4, shape)) return 1;
    const int64_t view[4] = {w->B.num_blocks, d1, d2, D},
                  strides[4] = {2 * d1 * d2 * D, d2 * D, D, 1};
    memcpy(x->shape, view, sizeof view);
    memcpy(x->strides, strides, sizeof strides);
    x->k = x->t.t;
    x->k.shape = x->shape;
    x->k.strides = x->strides;
    x->v = x->k;
    x->v.data = (char *)x->t.t.data + x->block_bytes;
    return inter_upload(x, w);
}

/* Whether the device caches the plugin wrote (dense, or x's interleaved
 * one) hold w's host caches byte for byte, K and V. */
static int caches_match(const ath_work *w, const kv_inter *x)
{
    const size_t kb = w->d_kc.bytes, vb = w->d_vc.bytes;
    char *k = malloc(kb), *v = malloc(vb);
    int ok = k && v;
    if (ok && x) {
        char *all = malloc(2 * kb);
        ok = all && !ath_download(&H, all, &x->t);
        for (size_t b = 0; ok && b < kb / x->block_bytes; b++) {
            memcpy(k + b * x->block_bytes, all + 2 * b * x->block_bytes, x->block_bytes);
            memcpy(v + b * x->block_bytes, all + (2 * b + 1) * x->block_bytes, x->block_bytes);
        }
        free(all);
    } else if (ok) {
        ok = !ath_download(&H, k, &w->d_kc) && !ath_download(&H, v, &w->d_vc);
    }
    ok = ok && !memcmp(k, w->kc, kb) && !memcmp(v, w->vc, vb);
    free(k);
    free(v);
    return ok;
}

/* Entries of blocks whose last position is at most p0 - window (p0: the
 * request's first query position), the host's rule for released blocks:
 * with VAR_RELEASED they become negative (released,
 * AH_FEAT_RELEASED_BLOCKS); with VAR_NAN_HIDDEN they name the pool's last block, which no request
 * uses (the cases' tables are in pool order with spare blocks) and which holds NaN in K and V (all
 * bits set, NaN in bf16, fp16 and e4m3): a kernel that read such a page would turn its masked
 * probabilities' zeros into NaN. The table goes to the device again. Returns the entries changed (a
 * case that changes none fails: it would test nothing), or -1. */
static int hide_blocks(ath_work *w, const tcase *c)
{
    ath_batch *B = &w->B;
    const int32_t nan_block = (int32_t)B->num_blocks - 1;
    int changed = 0;
    for (uint32_t r = 0; r < B->num_reqs; r++) {
        int32_t *row = B->bt + (size_t)r * B->width;
        const int64_t p0 = (int64_t)B->seq[r] - (B->qsl[r + 1] - B->qsl[r]);
        const int64_t used = (B->seq[r] + c->bs - 1) / c->bs;
        for (int64_t k = 0; k < used; k++) {
            if (row[k] == nan_block) {
                fprintf(stderr, "  hide: request %u uses the pool's last block\n", r);
                return -1;
            }
            if ((k + 1) * c->bs - 1 > p0 - c->window) continue;
            row[k] = c->var & VAR_RELEASED ? -1 - (int32_t)k : nan_block;
            changed++;
        }
    }
    if (c->var & VAR_NAN_HIDDEN) {
        const size_t eb = ah_dtype_size(w->spec.kv_dtype),
                     block = (size_t)c->bs * c->hk * c->d * eb;
        memset((char *)w->kc + (size_t)nan_block * block, 0xff, block);
        memset((char *)w->vc + (size_t)nan_block * block, 0xff, block);
        if (ath_work_upload(&H, w)) return -1;
    }
    if (ath_upload(&H, &B->d_bt, B->bt)) return -1;
    printf("  %d block-table entries %s\n", changed,
           c->var & VAR_RELEASED ? "released (negative)" : "hidden, naming a NaN block");
    return changed > 0 ? changed : -1;
}

static int compare(const char *what, const tcase *c, const ah_batch *b, const void *out,
                   const float *lse, const double *ref, const double *ref_lse)
{
    const size_t rows = (size_t)b->num_tokens * c->hq;
    const int fp8_gemm = c->kv8 && c->d == 128 && fa3_fp8_attention(&A);
    const double atol = fp8_gemm                 ? 4e-2
                        : c->dt == AH_DTYPE_BF16 ? 1.2e-2
                                                 : 4e-3,
                 rtol = fp8_gemm ? 5e-2 : 2e-2;
    const ath_cmp co = ath_compare(out, c->dt, ref, rows * c->d, atol, rtol);
    /* FP8 compute: Q's rounding moves a row's logits by up to ~2^-4 of
     * |scale q.k|, and so its LSE; 5e-2 still catches any error of layout
     * or scaling. */
    ath_cmp cl;
    memset(&cl, 0, sizeof cl);
    if (lse) cl = ath_compare(lse, AH_DTYPE_FP32, ref_lse, rows, fp8_gemm ? 5e-2 : 1e-2, 1e-3);
    if (co.over) {
        const size_t i = co.first_over;
        fprintf(stderr, "  %s: %zu outputs off; out[row %zu, ch %zu] = %g, reference %g\n", what,
                co.over, i / c->d, i % c->d, ah_load_f32(out, i, c->dt), ref[i]);
    }
    if (cl.over)
        fprintf(stderr, "  %s: %zu LSEs off; lse[row %zu] = %g, reference %g\n", what, cl.over,
                cl.first_over, lse[cl.first_over], ref_lse[cl.first_over]);
    printf("  %-8s max|err| out %.3g (rel L2 %.3g) lse %.3g  %s%s\n", what, co.max_abs, co.rel_l2,
           cl.max_abs, co.over || cl.over ? "FAIL" : "ok", fp8_gemm ? " [fp8 compute]" : "");
    return co.over || cl.over;
}

static void batch_dims(const tcase *c, int *T, int *maxT, int *nb, int *width, int *maxn)
{
    int t1 = 0, t2 = 0, b1 = 0, b2 = 0, w = 1;
    for (int r = 0; r < c->n; r++) {
        t1 += c->qlen[r];
        int k = (c->seqlen[r] + c->bs - 1) / c->bs;
        b1 += k;
        if (k > w) w = k;
    }
    for (int r = 0; r < c->n2; r++) {
        t2 += c->qlen2[r];
        int k = (c->seqlen2[r] + c->bs - 1) / c->bs;
        b2 += k;
        if (k > w) w = k;
    }
    *T = t1;
    *maxT = t1 > t2 ? t1 : t2;
    *nb = (b1 > b2 ? b1 : b2) + 5;
    *width = w + 1;
    *maxn = c->n > c->n2 ? c->n : c->n2;
}

static int check_against_ref(const tcase *c, ath_work *w, const char *what)
{
    const size_t rows = (size_t)w->B.num_tokens * c->hq;
    void *ho = malloc(w->d_out.bytes);
    float *hl = c->lse ? malloc(w->d_lse.bytes) : NULL;
    double *ref = malloc(sizeof(double) * rows * c->d + 8),
           *ref_lse = malloc(sizeof(double) * (rows ? rows : 1));
    char why[256];
    int fail = 1;
    if (!ho || (c->lse && !hl) || !ref || !ref_lse) goto done;
    if (ath_download(&H, ho, &w->d_out) || (hl && ath_download(&H, hl, &w->d_lse))) goto done;
    if (ath_work_reference(w, ref, ref_lse, why, sizeof why)) {
        fprintf(stderr, "  reference: %s\n", why);
        goto done;
    }
    fail = compare(what, c, &w->B.b, ho, hl, ref, ref_lse);
done:
    free(ho);
    free(hl);
    free(ref);
    free(ref_lse);
    return fail;
}

/* The case as a workload: values in [-1, 1) (an FP8 cache's stored values
 * over [-1/scale, 1/scale], saturating at 448, so the dequantized cache
 * spans about [-1, 1] like the others), a table one column wider than the
 * longest request of either batch over a pool of 5 spare blocks. */
static int build(ath_work *w, const tcase *c, uint64_t *rng)
{
    int T, maxT, nb, width, maxn;
    batch_dims(c, &T, &maxT, &nb, &width, &maxn);
    ath_shape s;
    memset(&s, 0, sizeof s);
    /* ENC cases: decoder layers with causal = OFF (ABI 2.1), the
     * bidirectional attention over the paged cache the plugin serves */
    s.attn = AH_ATTN_DECODER;
    s.causal = c->type == AH_ATTN_DECODER ? AH_CAUSAL_BY_TYPE : AH_CAUSAL_OFF;
    s.q_dtype = c->dt;
    s.kv_dtype = c->kv8 ? AH_DTYPE_FP8_E4M3 : c->dt;
    s.hq = (uint32_t)c->hq, s.hk = (uint32_t)c->hk, s.d = (uint32_t)c->d;
    s.layout = c->layout, s.window = (uint32_t)c->window, s.softcap = c->softcap;
    s.sinks = (uint32_t)c->sinks, s.alibi = (c->var & VAR_ALIBI) != 0,
    s.fp8_attention = (uint32_t)fa3_fp8_attention(&A);
    s.k_scale = c->kv8 ? c->k_scale : 0.f, s.v_scale = c->kv8 ? c->v_scale : 0.f;
    s.new_kv = c->write_kv;
    s.batch = (ath_batch_spec){.num_reqs = (uint32_t)c->n,
                               .qlens = c->qlen,
                               .seqlens = c->seqlen,
                               .block_size = (uint32_t)c->bs,
                               .table_width = (uint32_t)width,
                               .num_blocks = (uint32_t)nb,
                               .ordered = !c->shuffled,
                               .unused_entry = has_empty_kv(c) ? 0x7ffffff0 : 0,
                               .cap_reqs = (uint32_t)maxn,
                               .cap_tokens = (uint32_t)maxT};
    if (ath_work_build(&H, w, &s, rng)) return 1;
    w->lim.max_seq_len = 0;
    for (int r = 0; r < c->n; r++)
        if ((uint32_t)c->seqlen[r] > w->lim.max_seq_len)
            w->lim.max_seq_len = (uint32_t)c->seqlen[r];
    for (int r = 0; r < c->n2; r++)
        if ((uint32_t)c->seqlen2[r] > w->lim.max_seq_len)
            w->lim.max_seq_len = (uint32_t)c->seqlen2[r];
    return 0;
}

static int run_case(const tcase *c, uint64_t seed)
{
    printf("%s\n", c->name);
    const int hide = c->var & (VAR_RELEASED | VAR_NAN_HIDDEN);
    const int inter = c->var & VAR_INTERLEAVED;
    int fail = 1;
    const ah_plugin_ops *ops = H.ops;
    ah_state *st = NULL;
    ah_graph *g = NULL;
    ath_work w;
    kv_inter x;
    memset(&x, 0, sizeof x);
    uint64_t rng = ath_seed(seed);
    if (build(&w, c, &rng)) goto done;
    /* the plugin's layer: the case's layout, or its interleaved form */
    ah_layer_spec spec = w.spec;
    if (inter)
        spec.kv_layout = ah_kv_layout_is_hnd(spec.kv_layout) ? AH_KV_LAYOUT_HND_INTERLEAVED
                                                             : AH_KV_LAYOUT_NHD_INTERLEAVED;
    if (ops->state_create(H.ctx, &spec, &w.lim, &st) != AH_OK) {
        fprintf(stderr, "  state_create: %s\n", ops->context_error(H.ctx));
        goto done;
    }
    if (hide && hide_blocks(&w, c) < 0) goto done;
    if (inter && inter_build(&x, &w)) goto done;
    ah_forward_args fa = ath_work_args(&w, H.stream, c->lse);
    if (inter) fa.key_cache = &x.k, fa.value_cache = &x.v;
    fa.key = fa.value = NULL; /* the new K/V go in through write_kv */

    /* FP8 scales are checked by the host (finite, >= 0) before a plugin
     * runs: tests/unit/test_tensor_check.c holds that rule. */

    if (c->write_kv) {
        /* New K/V for every query token go into the cache through write_kv,
         * the host copy through the oracle's writer; then attention reads them. */
        char why[256];
        int bad = ops->plan(st, &w.B.b, AH_PLAN_EAGER, H.stream) != AH_OK;
        ah_kv_write_args wa = ath_work_write_args(&w, H.stream);
        if (inter) wa.key_cache = &x.k, wa.value_cache = &x.v;
        if (!bad && ops->write_kv(st, &wa) != AH_OK) {
            fprintf(stderr, "  write_kv: %s\n", ops->state_error(st));
            bad = 1;
        }
        if (!bad && ath_work_reference_write(&w, why, sizeof why)) {
            fprintf(stderr, "  reference write_kv: %s\n", why);
            bad = 1;
        }
        if (!bad) {
            bad = !caches_match(&w, inter ? &x : NULL);
            printf("  write_kv cache bytes %s\n", bad ? "DIFFER" : "match");
        }
        if (bad) goto done;
    }

    if (ops->plan(st, &w.B.b, c->n2 ? AH_PLAN_CAPTURE : AH_PLAN_EAGER, H.stream) != AH_OK) {
        fprintf(stderr, "  plan: %s\n", ops->state_error(st));
        goto done;
    }
    if (!c->n2) {
        if (ops->forward(st, &fa) != AH_OK) {
            fprintf(stderr, "  forward: %s\n", ops->state_error(st));
            goto done;
        }
        if (ops->synchronize(H.ctx, H.stream) != AH_OK) {
            fprintf(stderr, "  synchronize: %s\n", ops->context_error(H.ctx));
            goto done;
        }
        fail = check_against_ref(c, &w, "eager");
        goto done;
    }
    /* Graph: capture batch 1, replay it, then rewrite to batch 2 and replay. */
    if (ops->graph_begin(H.ctx, H.stream) != AH_OK || ops->forward(st, &fa) != AH_OK ||
        ops->graph_end(H.ctx, H.stream, &g) != AH_OK) {
        fprintf(stderr, "  capture: %s / %s\n", ops->context_error(H.ctx), ops->state_error(st));
        goto done;
    }
    if (ops->graph_launch(H.ctx, g, H.stream) != AH_OK ||
        ops->synchronize(H.ctx, H.stream) != AH_OK) {
        fprintf(stderr, "  replay: %s\n", ops->context_error(H.ctx));
        goto done;
    }
    fail = check_against_ref(c, &w, "graph-1");
    ath_batch_spec b2 = w.s.batch;
    b2.num_reqs = (uint32_t)c->n2, b2.qlens = c->qlen2, b2.seqlens = c->seqlen2;
    if (ath_batch_refill(&H, &w.B, &b2, &rng) || (hide && hide_blocks(&w, c) < 0) ||
        (inter && inter_upload(&x, &w))) {
        fail = 1;
        goto done;
    }
    if (ops->plan(st, &w.B.b, AH_PLAN_REPLAY, H.stream) != AH_OK) {
        fprintf(stderr, "  plan(REPLAY): %s\n", ops->state_error(st));
        fail = 1;
        goto done;
    }
    if (ops->graph_launch(H.ctx, g, H.stream) != AH_OK ||
        ops->synchronize(H.ctx, H.stream) != AH_OK) {
        fprintf(stderr, "  replay: %s\n", ops->context_error(H.ctx));
        fail = 1;
        goto done;
    }
    fail |= check_against_ref(c, &w, "graph-2");
done:
    if (g) ops->graph_destroy(H.ctx, g);
    if (st) ops->state_destroy(st);
    ath_tensor_free(&H, &x.t);
    ath_work_free(&H, &w);
    return fail;
}

#define BF AH_DTYPE_BF16
#define FP AH_DTYPE_FP16
#define NHD AH_KV_LAYOUT_NHD
#define HND AH_KV_LAYOUT_HND
#define DEC AH_ATTN_DECODER
#define ENC AH_ATTN_ENCODER_ONLY
#define X8(x) x, x, x, x, x, x, x, x

/* Not reformatted: one case a row (some wrap once), fields in tcase's order. */
// clang-format off
static const tcase cases[] = {
    {"d128 bf16 causal mixed prefill/decode/chunked, paged bs16, lse", BF, 4, 4, 128, 16, NHD, DEC, 0, 0, 0, 1, 1, 0,
     3, {300, 1, 77}, {300, 1000, 500}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d128 bf16 non-causal varlen", BF, 4, 4, 128, 16, NHD, ENC, 0, 0, 0, 1, 1, 0, 2, {200, 513}, {200, 513}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d128 bf16 GQA 32/8 decode split-KV, lse", BF, 32, 8, 128, 16, NHD, DEC, 0, 0, 0, 1, 1, 0, 6,
     {1, 1, 1, 1, 1, 1}, {3000, 17, 1500, 129, 2048, 700}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d128 fp16 causal contiguous bs128", FP, 4, 2, 128, 128, NHD, DEC, 0, 0, 0, 1, 0, 0, 2, {400, 130}, {400, 900}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d64 bf16 causal GQA 8/2", BF, 8, 2, 64, 32, NHD, DEC, 0, 0, 0, 1, 1, 0, 3, {260, 1, 33}, {260, 777, 300}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d64 fp16 non-causal", FP, 4, 4, 64, 64, NHD, ENC, 0, 0, 0, 1, 1, 0, 2, {150, 300}, {150, 300}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d256 bf16 causal GQA 8/4", BF, 8, 4, 256, 16, NHD, DEC, 0, 0, 0, 1, 1, 0, 3, {200, 1, 64}, {200, 900, 333}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d256 fp16 non-causal", FP, 2, 2, 256, 32, NHD, ENC, 0, 0, 0, 1, 1, 0, 2, {100, 190}, {100, 190}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d128 bf16 sliding window 100", BF, 4, 4, 128, 16, NHD, DEC, 100, 0, 0, 1, 1, 0, 3, {400, 1, 50}, {400, 1200, 700}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d128 bf16 soft-cap 30", BF, 4, 4, 128, 16, NHD, DEC, 0, 30.f, 0, 1, 1, 0, 2, {257, 1}, {257, 800}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d128 bf16 sinks, decode split + prefill", BF, 16, 4, 128, 16, NHD, DEC, 0, 0, 1, 1, 1, 0, 3, {1, 1, 90},
     {2500, 40, 90}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d128 bf16 HND layout", BF, 8, 2, 128, 32, HND, DEC, 0, 0, 0, 1, 1, 0, 2, {150, 1}, {150, 640}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d128 bf16 encoder window 64", BF, 4, 4, 128, 16, NHD, ENC, 64, 0, 0, 1, 1, 0, 1, {300}, {300}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d128 bf16 group 6 (12/2), block 48", BF, 12, 2, 128, 48, NHD, DEC, 0, 0, 0, 1, 1, 0, 3, {1, 100, 1}, {1000, 100, 65},
     0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d128 bf16 write_kv then attend", BF, 4, 2, 128, 16, NHD, DEC, 0, 0, 0, 1, 1, 1, 2, {40, 1}, {40, 300}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d128 bf16 graph: mixed capture, replay other lengths", BF, 16, 4, 128, 16, NHD, DEC, 0, 0, 1, 1, 1, 0, 4,
     {1, 1, 120, 3}, {900, 2000, 300, 40}, 4, {1, 200, 1, 1}, {3100, 200, 10, 1}, 0, 0.f, 0.f, 0},
    {"d64 fp16 graph: decode capture, replay", FP, 8, 8, 64, 16, NHD, DEC, 0, 0, 0, 1, 1, 0, 3, {1, 1, 1},
     {100, 4000, 50}, 3, {1, 1, 1}, {3000, 1, 700}, 0, 0.f, 0.f, 0},
    /* FP8 e4m3 KV cache (widened to the query dtype in shared memory). */
    {"fp8kv d128 bf16 causal mixed prefill/decode/chunked, paged bs16, lse", BF, 4, 4, 128, 16, NHD, DEC, 0, 0, 0, 1, 1,
     0, 3, {300, 1, 77}, {300, 1000, 500}, 0, {0}, {0}, 1, 1.f / 16, 1.f / 32, 0},
    {"fp8kv d128 fp16 GQA 32/8 decode split-KV, sinks, lse", FP, 32, 8, 128, 16, NHD, DEC, 0, 0, 1, 1, 1, 0, 6,
     {1, 1, 1, 1, 1, 1}, {3000, 17, 1500, 129, 2048, 700}, 0, {0}, {0}, 1, 0.01f, 0.004f, 0},
    {"fp8kv d64 fp16 causal GQA 8/2", FP, 8, 2, 64, 32, NHD, DEC, 0, 0, 0, 1, 1, 0, 3, {260, 1, 33}, {260, 777, 300}, 0,
     {0}, {0}, 1, 0.125f, 0.5f, 0},
    {"fp8kv d64 bf16 non-causal bs64", BF, 4, 4, 64, 64, NHD, ENC, 0, 0, 0, 1, 1, 0, 2, {150, 300}, {150, 300}, 0, {0},
     {0}, 1, 0.02f, 0.05f, 0},
    {"fp8kv d256 bf16 causal GQA 8/4", BF, 8, 4, 256, 16, NHD, DEC, 0, 0, 0, 1, 1, 0, 3, {200, 1, 64}, {200, 900, 333}, 0,
     {0}, {0}, 1, 1.f / 64, 1.f / 8, 0},
    {"fp8kv d256 fp16 non-causal", FP, 2, 2, 256, 32, NHD, ENC, 0, 0, 0, 1, 1, 0, 2, {100, 190}, {100, 190}, 0, {0}, {0},
     1, 0.05f, 0.05f, 0},
    {"fp8kv d128 bf16 HND bs32, soft-cap 30, window 200", BF, 8, 2, 128, 32, HND, DEC, 200, 30.f, 0, 1, 1, 0, 2,
     {150, 1}, {150, 640}, 0, {0}, {0}, 1, 0.01f, 0.02f, 0},
    {"fp8kv d128 bf16 write_kv (saturating) then attend", BF, 4, 2, 128, 16, NHD, DEC, 0, 0, 0, 1, 1, 1, 2, {40, 1},
     {40, 300}, 0, {0}, {0}, 1, 0.002f, 0.01f, 0},
    {"fp8kv d128 fp16 write_kv then attend, HND", FP, 8, 8, 128, 16, HND, DEC, 0, 0, 0, 1, 1, 1, 2, {33, 1},
     {33, 200}, 0, {0}, {0}, 1, 1.f / 128, 1.f / 256, 0},
    {"fp8kv d128 bf16 graph: mixed capture, replay other lengths", BF, 16, 4, 128, 16, NHD, DEC, 0, 0, 1, 1, 1, 0, 4,
     {1, 1, 120, 3}, {900, 2000, 300, 40}, 4, {1, 200, 1, 1}, {3100, 200, 10, 1}, 1, 0.03f, 0.03f, 0},
    /* Decode requests with no keys (a context-parallel rank holding none of
     * them yet): out 0, LSE -inf (a sink's logit with sinks), beside long
     * split-KV requests; their table rows point far past the cache, which
     * a read would show (a fault, or keys that move the LSE off -inf). */
    {"d128 bf16 GQA 32/8 decode, empty KV, split-KV, lse", BF, 32, 8, 128, 16, NHD, DEC, 0, 0, 0, 1, 1, 0, 6,
     {1, 1, 1, 1, 1, 1}, {0, 3000, 0, 17, 1, 0}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d64 fp16 decode, empty KV, sinks, window 100", FP, 8, 2, 64, 32, NHD, DEC, 100, 0, 1, 1, 1, 0, 4,
     {1, 1, 1, 1}, {0, 500, 0, 2}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d256 bf16 non-causal decode, empty KV", BF, 8, 4, 256, 16, NHD, ENC, 0, 0, 0, 1, 1, 0, 3, {1, 1, 1},
     {0, 900, 0}, 0, {0}, {0}, 0, 0.f, 0.f, 0},
    {"d128 fp16 graph: decode with empty KV, replay other empties", FP, 16, 4, 128, 16, NHD, DEC, 0, 0, 0, 1, 1, 0, 3,
     {1, 1, 1}, {0, 4000, 50}, 3, {1, 1, 1}, {3000, 0, 0}, 0, 0.f, 0.f, 0},
    {"fp8kv d128 bf16 GQA 32/8 decode, empty KV, split-KV, lse", BF, 32, 8, 128, 16, NHD, DEC, 0, 0, 0, 1, 1, 0, 5,
     {1, 1, 1, 1, 1}, {0, 2048, 0, 700, 0}, 0, {0}, {0}, 1, 0.01f, 0.004f, 0},
    /* Sliding windows over blocks the window hides from every query of a
     * request (hide_blocks): released (negative entries), or naming a block
     * of NaN that a read would show. Decode tiles begin before the first
     * visible key (the window's start is not tile-aligned); window 1000
     * splits the decode items. */
    {"d128 bf16 window 1000, released blocks: split decode, chunked prefill", BF, 16, 4, 128, 16, NHD, DEC, 1000, 0, 0,
     1, 0, 0, 4, {1, 1, 1, 200}, {5000, 1500, 800, 2600}, 0, {0}, {0}, 0, 0.f, 0.f, VAR_RELEASED},
    {"d128 bf16 window 1000, hidden blocks hold NaN: split decode, chunked prefill", BF, 16, 4, 128, 16, NHD, DEC, 1000,
     0, 0, 1, 0, 0, 4, {1, 1, 1, 200}, {5000, 1500, 800, 2600}, 0, {0}, {0}, 0, 0.f, 0.f, VAR_NAN_HIDDEN},
    {"d256 fp16 HND bs32 window 100, sinks, released blocks, graph: capture, replay", FP, 8, 4, 256, 32, HND, DEC, 100,
     0, 1, 1, 0, 0, 3, {1, 50, 1}, {600, 400, 2000}, 3, {1, 1, 130}, {1200, 90, 700}, 0, 0.f, 0.f, VAR_RELEASED},
    {"d64 fp16 non-causal window 70 bs64, hidden blocks hold NaN", FP, 8, 2, 64, 64, NHD, ENC, 70, 0, 0, 1, 0, 0, 2,
     {1, 100}, {900, 1000}, 0, {0}, {0}, 0, 0.f, 0.f, VAR_NAN_HIDDEN},
    {"fp8kv d128 bf16 window 100, released blocks: decode, chunked prefill", BF, 8, 2, 128, 16, NHD, DEC, 100, 0, 0, 1,
     0, 0, 3, {1, 300, 1}, {3000, 1300, 900}, 0, {0}, {0}, 1, 0.01f, 0.02f, VAR_RELEASED},
    {"fp8kv d128 bf16 window 100, hidden blocks hold NaN: decode, chunked prefill", BF, 8, 2, 128, 16, NHD, DEC, 100, 0,
     0, 1, 0, 0, 3, {1, 300, 1}, {3000, 1300, 900}, 0, {0}, {0}, 1, 0.01f, 0.02f, VAR_NAN_HIDDEN},
    /* Windowed prefills whose two query tiles start at keys 0 and 29 of
     * one 128-key tile: with V^T shared (--vt-min-reads=1 --fp8-attention)
     * the second tile must not publish, or readers in later rounds would
     * copy V rows 0..15 as zeros (fa3_vt_can_publish). */
    {"fp8kv d128 bf16 window 100, 40 prefills of 256 (query tiles start at keys 0 and 29)", BF, 4, 4, 128, 16, NHD,
     DEC, 100, 0, 0, 1, 1, 0, 40, {X8(256), X8(256), X8(256), X8(256), X8(256)},
     {X8(256), X8(256), X8(256), X8(256), X8(256)}, 0, {0}, {0}, 1, 0.01f, 0.02f, 0},
    /* K and V interleaved per block in one allocation (vLLM's FlashInfer
     * cache): the plugin gets the two strided views, the oracle the dense
     * caches holding the same values; write_kv must land in the right half. */
    {"d128 bf16 NHD interleaved: mixed prefill/decode/chunked, lse", BF, 8, 2, 128, 16, NHD, DEC, 0, 0, 0, 1, 1, 0, 3,
     {300, 1, 77}, {300, 1000, 500}, 0, {0}, {0}, 0, 0.f, 0.f, VAR_INTERLEAVED},
    {"d64 fp16 HND interleaved bs32: write_kv then attend", FP, 8, 2, 64, 32, HND, DEC, 0, 0, 0, 1, 1, 1, 2, {40, 1},
     {40, 300}, 0, {0}, {0}, 0, 0.f, 0.f, VAR_INTERLEAVED},
    {"d256 bf16 NHD interleaved, window 100, released blocks: decode split, chunked prefill", BF, 8, 4, 256, 32, NHD, DEC,
     100, 0, 1, 1, 0, 0, 3, {1, 120, 1}, {3000, 700, 1500}, 0, {0}, {0}, 0, 0.f, 0.f, VAR_INTERLEAVED | VAR_RELEASED},
    {"d128 fp16 HND interleaved, window 300, hidden blocks hold NaN", FP, 16, 4, 128, 16, HND, DEC, 300, 0, 0, 1, 0, 0,
     3, {1, 64, 1}, {2000, 900, 40}, 0, {0}, {0}, 0, 0.f, 0.f, VAR_INTERLEAVED | VAR_NAN_HIDDEN},
    {"d128 bf16 NHD interleaved graph: mixed capture, replay other lengths", BF, 16, 4, 128, 16, NHD, DEC, 0, 0, 1, 1, 1,
     0, 4, {1, 1, 120, 3}, {900, 2000, 300, 40}, 4, {1, 200, 1, 1}, {3100, 200, 10, 1}, 0, 0.f, 0.f, VAR_INTERLEAVED},
    {"fp8kv d128 bf16 NHD interleaved: write_kv (saturating) then attend", BF, 4, 2, 128, 16, NHD, DEC, 0, 0, 0, 1, 1,
     1, 2, {40, 1}, {40, 300}, 0, {0}, {0}, 1, 0.002f, 0.01f, VAR_INTERLEAVED},
    {"fp8kv d128 fp16 HND interleaved bs64: prefill, decode split-KV, sinks", FP, 16, 4, 128, 64, HND, DEC, 0, 0, 1, 1,
     1, 0, 4, {300, 1, 1, 64}, {300, 3000, 129, 700}, 0, {0}, {0}, 1, 0.01f, 0.004f, VAR_INTERLEAVED},
    {"fp8kv d64 bf16 NHD interleaved, window 100, released blocks", BF, 8, 2, 64, 32, NHD, DEC, 100, 0, 0, 1, 0, 0, 3,
     {1, 200, 1}, {1500, 900, 60}, 0, {0}, {0}, 1, 0.02f, 0.05f, VAR_INTERLEAVED | VAR_RELEASED},
    /* ALiBi: the bias slope * (key - query position) in the pre-pass, alone
     * and beside soft-cap, window and sinks, in each instance family. */
    {"d128 bf16 ALiBi GQA 32/8 causal mixed prefill/decode/chunked, lse", BF, 32, 8, 128, 16, NHD, DEC, 0, 0, 0, 1, 1,
     0, 3, {300, 1, 77}, {300, 1000, 500}, 0, {0}, {0}, 0, 0.f, 0.f, VAR_ALIBI},
    {"d64 fp16 ALiBi non-causal window 100", FP, 8, 2, 64, 32, NHD, ENC, 100, 0, 0, 1, 1, 0, 2, {200, 513}, {200, 513},
     0, {0}, {0}, 0, 0.f, 0.f, VAR_ALIBI},
    {"d256 bf16 ALiBi soft-cap 30, sinks: decode split + prefill", BF, 16, 8, 256, 16, NHD, DEC, 0, 30.f, 1, 1, 1, 0, 3,
     {1, 1, 90}, {2500, 40, 90}, 0, {0}, {0}, 0, 0.f, 0.f, VAR_ALIBI},
    {"d128 fp16 ALiBi graph: mixed capture, replay other lengths", FP, 16, 4, 128, 16, NHD, DEC, 0, 0, 0, 1, 1, 0, 4,
     {1, 1, 120, 3}, {900, 2000, 300, 40}, 4, {1, 200, 1, 1}, {3100, 200, 10, 1}, 0, 0.f, 0.f, VAR_ALIBI},
    {"fp8kv d128 bf16 ALiBi causal mixed prefill/decode/chunked, sinks", BF, 16, 4, 128, 16, NHD, DEC, 0, 0, 1, 1, 1, 0,
     3, {300, 1, 77}, {300, 3000, 500}, 0, {0}, {0}, 1, 0.01f, 0.02f, VAR_ALIBI},
    {"fp8kv d128 fp16 ALiBi soft-cap 30, window 200, HND bs32", FP, 8, 2, 128, 32, HND, DEC, 200, 30.f, 0, 1, 1, 0, 2,
     {150, 1}, {150, 640}, 0, {0}, {0}, 1, 0.01f, 0.02f, VAR_ALIBI},
};
// clang-format on

/* Ragged layers (AH_FEAT_RAGGED_KV): MLA's non-absorbed prefill, qk 192 /
 * v 128 over K/V packed by cu_seqlens_k (the shared runner). Bottom-right
 * and context steps, every logit feature, DeepSeek-V3's 128 heads (TP 1)
 * and 16 (TP 8), many short requests (tiles reading past a request's keys
 * into the next one's, masked), and a few long ones (keys split, merged
 * by the combine kernel at v 128). */
// clang-format off
static const ath_ragged_case rcases[] = {
    /* name {t hq hk dqk dv causal context window softcap sinks alibi reqs max_len} */
    {"ragged bf16 192/128 h16 causal", {BF, 16, 16, 192, 128, 1, 0, 0, 0, 0, 0, 5, 700}},
    {"ragged fp16 192/128 h16 context, sinks", {FP, 16, 16, 192, 128, 1, 1, 0, 0, 1, 0, 5, 500}},
    {"ragged bf16 192/128 h8 window 70, soft-cap 30, ALiBi, sinks", {BF, 8, 8, 192, 128, 1, 0, 70, 30.f, 1, 1, 4, 400}},
    {"ragged bf16 192/128 h4 bidirectional window 50", {BF, 4, 4, 192, 128, 0, 0, 50, 0, 0, 0, 4, 300}},
    {"ragged fp16 192/128 h4 bidirectional context", {FP, 4, 4, 192, 128, 0, 1, 0, 0, 0, 0, 3, 300}},
    {"ragged bf16 192/128 h128 causal", {BF, 128, 128, 192, 128, 1, 0, 0, 0, 0, 0, 3, 300}},
    {"ragged bf16 192/128 h16 64 short requests", {BF, 16, 16, 192, 128, 1, 0, 0, 0, 0, 0, 64, 40}},
    {"ragged bf16 192/128 h2 long (keys split)", {BF, 2, 2, 192, 128, 1, 0, 0, 0, 0, 0, 2, 4000}},
};
// clang-format on

static int run_ragged(const ath_ragged_case *c, uint64_t seed)
{
    printf("%s\n", c->name);
    const double tol[3] = {c->s.dt == AH_DTYPE_BF16 ? 1.2e-2 : 4e-3, 2e-2, 1e-2}; /* as compare() */
    uint64_t rng = ath_seed(seed);
    char why[512];
    ath_cmp co, cl;
    if (ath_ragged_run(&H, &c->s, tol, &rng, &co, &cl, why, sizeof why)) {
        printf("  FAIL %s\n", why);
        return 1;
    }
    const int fail = co.over || cl.over || co.nonfinite || cl.nonfinite;
    printf("  ragged   max|err| out %.3g (rel L2 %.3g) lse %.3g  %s\n", co.max_abs, co.rel_l2,
           cl.max_abs, fail ? "FAIL" : "ok");
    return fail;
}

int main(int argc, char **argv)
{
    if (ath_take_options(&argc, argv, fa3_opts, FA3_N_OPTS, &A)) {
        fprintf(stderr, "usage: fa3_check [options] [plugin.so [case-substring]]\n");
        return 2;
    }
    const char *path = argc > 1 ? argv[1] : FA3_PLUGIN_PATH;
    const char *only = argc > 2 ? argv[2] : NULL;
    int rc = fa3_open(&H, path, &A);
    if (rc) return rc;
    int failed = 0, ran = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (only && !strstr(cases[i].name, only)) continue;
        ran++;
        failed += run_case(&cases[i], 1234u + (unsigned)i);
    }
    for (size_t i = 0; i < sizeof rcases / sizeof rcases[0]; i++) {
        if (only && !strstr(rcases[i].name, only)) continue;
        ran++;
        failed += run_ragged(&rcases[i], 777u + (unsigned)i);
    }
    /* The V^T scratch belongs to the first stream whose forward used it; the
     * first case again on a second stream must take the in-kernel path and
     * give the same answers (--vt-min-reads=1 makes the first stream use
     * the scratch). */
    void *first = H.stream, *second = NULL;
    if ((A.given & FA3_OPT_VT_MIN_READS) && fa3_fp8_attention(&A) &&
        H.ops->stream_create(H.ctx, &second) == AH_OK) {
        const tcase *c = &cases[0];
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            if (cases[i].kv8 && cases[i].d == 128) {
                c = &cases[i];
                break;
            }
        H.stream = second;
        printf("second stream: ");
        ran++;
        failed += run_case(c, 4321u);
        H.stream = first;
        H.ops->stream_destroy(H.ctx, second);
    }
    printf("%d of %d cases passed\n", ran - failed, ran);
    ath_close(&H);
    return failed ? 1 : 0;
}
