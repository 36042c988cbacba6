/*
 * Correctness driver for cuda_fa3: random inputs per feature, run through
 * the plugin's plan/forward (and CUDA-graph capture and replay), compared
 * with the double-precision reference oracle (ah_reference_attention).
 * Exit 0: all pass; 1: a mismatch or error; 77: no usable device (skip).
 * --fp8-attention gives the layers fp8_attention, so the FP8-KV cases of
 * head size 128 run through the e4m3-GEMM kernel, held to a looser bound
 * (out: atol 4e-2, rtol 5e-2; LSE 5e-2: Q and P rounded to 3 mantissa
 * bits); every line prints max|err| and the relative L2 error, the figures
 * the README quotes for both settings.
 *
 *   fa3_check [harness options] [plugin.so] [case-name-substring]
 * (harness options: fa3_harness.h)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa3_harness.h"

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
    int n, qlen[MAXR], seqlen[MAXR];
    int n2, qlen2[MAXR], seqlen2[MAXR]; /* n2 > 0: capture with batch 1, replay batch 2 */
    int kv8;                 /* 1: fp8 e4m3 KV cache, real = stored * scale */
    float k_scale, v_scale;  /* the FP8 descale factors */
} tcase;

static fa3h H;

static int compare(const char *what, const tcase *c, const ah_batch *b, const void *out, const float *lse,
                   const double *ref, const double *ref_lse)
{
    const size_t rows = (size_t)b->num_tokens * c->hq;
    const int fp8_gemm = c->kv8 && c->d == 128 && fa3h_fp8_attention();
    const double atol = fp8_gemm ? 4e-2 : c->dt == AH_DTYPE_BF16 ? 1.2e-2 : 4e-3, rtol = fp8_gemm ? 5e-2 : 2e-2;
    double worst = 0, worst_lse = 0, e2 = 0, r2 = 0;
    size_t bad = 0, bad_lse = 0;
    for (size_t i = 0; i < rows * c->d; i++) {
        double g = ah_load_f32(out, i, c->dt), r = ref[i], err = fabs(g - r);
        e2 += (g - r) * (g - r);
        r2 += r * r;
        if (!(err <= atol + rtol * fabs(r))) {
            if (bad < 3) fprintf(stderr, "  %s: out[row %zu, ch %zu] = %g, reference %g\n", what, i / c->d, i % c->d, g, r);
            bad++;
        }
        if (err > worst || err != err) worst = err != err ? INFINITY : err;
    }
    if (lse)
        for (size_t i = 0; i < rows; i++) {
            double g = lse[i], r = ref_lse[i];
            /* FP8 compute: Q's rounding moves a row's logits by up to ~2^-4
             * of |scale q.k|, and so its LSE; 5e-2 still catches any error
             * of layout or scaling. */
            int ok = (isinf(r) && g == r) || fabs(g - r) <= (fp8_gemm ? 5e-2 : 1e-2) + 1e-3 * fabs(r);
            if (!ok) {
                if (bad_lse < 3) fprintf(stderr, "  %s: lse[row %zu] = %g, reference %g\n", what, i, g, r);
                bad_lse++;
            }
            if (!isinf(r) && fabs(g - r) > worst_lse) worst_lse = fabs(g - r);
        }
    printf("  %-8s max|err| out %.3g (rel L2 %.3g) lse %.3g  %s%s\n", what, worst, r2 > 0 ? sqrt(e2 / r2) : 0.0,
           worst_lse, bad || bad_lse ? "FAIL" : "ok", fp8_gemm ? " [fp8 compute]" : "");
    return bad || bad_lse;
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

static int check_against_ref(const tcase *c, const ah_layer_spec *sp, const ah_batch *b, const void *hq,
                             const void *hk, const void *hv, const float *hsinks, fa3h_tensor *out,
                             fa3h_tensor *lse, const char *what)
{
    const size_t rows = (size_t)b->num_tokens * c->hq;
    void *ho = malloc(out->bytes);
    float *hl = lse ? malloc(lse->bytes) : NULL;
    double *ref = malloc(sizeof(double) * rows * c->d), *ref_lse = malloc(sizeof(double) * (rows ? rows : 1));
    int fail = 1;
    if (!ho || (lse && !hl) || !ref || !ref_lse) goto done;
    if (fa3h_download(&H, ho, out) || (lse && fa3h_download(&H, hl, lse))) goto done;
    ah_ref_inputs in = {sizeof in, sp, b, hq, hk, hv, hsinks, NULL, c->kv8 ? c->k_scale : 0.f,
                        c->kv8 ? c->v_scale : 0.f, NULL, NULL};
    ah_error err;
    if (ah_reference_attention(&in, ref, ref_lse, &err) != AH_OK) {
        fprintf(stderr, "  reference: %s\n", err.msg);
        goto done;
    }
    fail = compare(what, c, b, ho, hl, ref, ref_lse);
done:
    free(ho);
    free(hl);
    free(ref);
    free(ref_lse);
    return fail;
}

static int run_case(const tcase *c, unsigned seed)
{
    printf("%s\n", c->name);
    int T, maxT, nb, width, maxn, fail = 1;
    batch_dims(c, &T, &maxT, &nb, &width, &maxn);
    const ah_plugin_ops *ops = H.ops;
    ah_layer_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.struct_size = sizeof sp;
    sp.attn_type = c->type;
    sp.num_q_heads = (uint32_t)c->hq;
    sp.num_kv_heads = (uint32_t)c->hk;
    sp.qk_head_size = sp.v_head_size = (uint32_t)c->d;
    sp.q_dtype = c->dt;
    sp.kv_dtype = c->kv8 ? AH_DTYPE_FP8_E4M3 : c->dt;
    sp.block_size = (uint32_t)c->bs;
    sp.kv_layout = c->layout;
    sp.sliding_window = (uint32_t)c->window;
    sp.softcap = c->softcap;
    sp.scale = 1.0f / sqrtf((float)c->d);
    sp.use_sinks = (uint32_t)c->sinks;
    sp.fp8_attention = (uint32_t)fa3h_fp8_attention();

    const size_t es = ah_dtype_size(c->dt), kes = ah_dtype_size(sp.kv_dtype);
    const size_t cache_n = (size_t)nb * c->bs * c->hk * c->d, q_n = (size_t)maxT * c->hq * c->d;
    void *hk = malloc(cache_n * kes), *hv = malloc(cache_n * kes), *hq = malloc(q_n * es);
    float sinks[256];
    fa3h_tensor q, kc, vc, out, lse, ts;
    memset(&q, 0, sizeof q), memset(&kc, 0, sizeof kc), memset(&vc, 0, sizeof vc);
    memset(&out, 0, sizeof out), memset(&lse, 0, sizeof lse), memset(&ts, 0, sizeof ts);
    fa3h_batch B;
    memset(&B, 0, sizeof B);
    ah_state *st = NULL;
    ah_graph *g = NULL;
    if (!hk || !hv || !hq) goto done;
    /* FP8: stored values spread over [-1/scale, 1/scale] (saturating at
     * 448), so the dequantized cache spans about [-1, 1] like the others. */
    fa3h_fill(hk, cache_n, sp.kv_dtype, c->kv8 ? 1.0f / c->k_scale : 1.0f, &seed);
    fa3h_fill(hv, cache_n, sp.kv_dtype, c->kv8 ? 1.0f / c->v_scale : 1.0f, &seed);
    fa3h_fill(hq, q_n, c->dt, 1.0f, &seed);
    for (int i = 0; i < c->hq; i++) sinks[i] = -1.0f + 3.0f * (float)((seed = seed * 1103515245u + 12345u) >> 16 & 1023) / 1023.f;
    int64_t s_q[3] = {maxT, c->hq, c->d}, s_lse[2] = {maxT, c->hq}, s_s[1] = {c->hq};
    int64_t s_c[4] = {nb, c->layout == AH_KV_LAYOUT_HND ? c->hk : c->bs, c->layout == AH_KV_LAYOUT_HND ? c->bs : c->hk,
                      c->d};
    if (fa3h_tensor_alloc(&H, &q, c->dt, 3, s_q) || fa3h_tensor_alloc(&H, &out, c->dt, 3, s_q) ||
        fa3h_tensor_alloc(&H, &kc, sp.kv_dtype, 4, s_c) || fa3h_tensor_alloc(&H, &vc, sp.kv_dtype, 4, s_c) ||
        fa3h_tensor_alloc(&H, &lse, AH_DTYPE_FP32, 2, s_lse) || fa3h_tensor_alloc(&H, &ts, AH_DTYPE_FP32, 1, s_s))
        goto done;
    if (fa3h_upload(&H, &q, hq) || fa3h_upload(&H, &kc, hk) || fa3h_upload(&H, &vc, hv) || fa3h_upload(&H, &ts, sinks))
        goto done;
    if (fa3h_batch_make(&H, &B, c->n, c->qlen, c->seqlen, c->bs, nb, width, c->shuffled, seed, maxn, maxT)) goto done;
    ah_limits lim = {sizeof lim, (uint32_t)maxn, (uint32_t)maxT, (uint32_t)width, 0, (uint32_t)nb};
    for (int r = 0; r < c->n; r++)
        if ((uint32_t)c->seqlen[r] > lim.max_seq_len) lim.max_seq_len = (uint32_t)c->seqlen[r];
    for (int r = 0; r < c->n2; r++)
        if ((uint32_t)c->seqlen2[r] > lim.max_seq_len) lim.max_seq_len = (uint32_t)c->seqlen2[r];
    if (ops->state_create(H.ctx, &sp, &lim, &st) != AH_OK) {
        fprintf(stderr, "  state_create: %s\n", ops->context_error(H.ctx));
        goto done;
    }
    ah_forward_args fa;
    memset(&fa, 0, sizeof fa);
    fa.struct_size = sizeof fa;
    fa.q = &q.t;
    fa.key_cache = &kc.t;
    fa.value_cache = &vc.t;
    fa.out = &out.t;
    fa.lse = c->lse ? &lse.t : NULL;
    fa.sinks = c->sinks ? &ts.t : NULL;
    fa.stream = H.stream;
    fa.k_scale = c->kv8 ? c->k_scale : 0.f;
    fa.v_scale = c->kv8 ? c->v_scale : 0.f;

    if (c->kv8 && !c->n2) {
        /* A negative descale is refused with a message, before any launch. */
        fa.k_scale = -c->k_scale;
        if (ops->plan(st, &B.b, AH_PLAN_EAGER, H.stream) != AH_OK || ops->forward(st, &fa) == AH_OK) {
            fprintf(stderr, "  forward accepted k_scale %g (or plan failed: %s)\n", (double)fa.k_scale,
                    ops->state_error(st));
            goto done;
        }
        printf("  negative k_scale refused: %s\n", ops->state_error(st));
        fa.k_scale = c->k_scale;
    }

    if (c->write_kv) {
        /* New K/V for every query token go into the cache through write_kv,
         * the host copy through the oracle's writer; then attention reads them. */
        const size_t kv_n = (size_t)maxT * c->hk * c->d;
        void *nk = malloc(kv_n * es), *nv = malloc(kv_n * es);
        fa3h_tensor tk, tv;
        int64_t s_kv[3] = {maxT, c->hk, c->d};
        int bad = !nk || !nv;
        if (!bad) {
            fa3h_fill(nk, kv_n, c->dt, 1.0f, &seed);
            fa3h_fill(nv, kv_n, c->dt, 1.0f, &seed);
            bad = fa3h_tensor_alloc(&H, &tk, c->dt, 3, s_kv) || fa3h_tensor_alloc(&H, &tv, c->dt, 3, s_kv) ||
                  fa3h_upload(&H, &tk, nk) || fa3h_upload(&H, &tv, nv);
        }
        if (!bad && ops->plan(st, &B.b, AH_PLAN_EAGER, H.stream) != AH_OK) bad = 1;
        ah_kv_write_args wa = {sizeof wa, &tk.t, &tv.t, &kc.t, &vc.t, fa.k_scale, fa.v_scale, H.stream};
        if (!bad && ops->write_kv(st, &wa) != AH_OK) {
            fprintf(stderr, "  write_kv: %s\n", ops->state_error(st));
            bad = 1;
        }
        ah_error err;
        if (!bad && ah_reference_write_kv(&sp, &B.b, nk, nv, hk, hv, fa.k_scale, fa.v_scale, &err) != AH_OK) {
            fprintf(stderr, "  reference write_kv: %s\n", err.msg);
            bad = 1;
        }
        if (!bad) {
            void *dk = malloc(kc.bytes);
            bad = !dk || fa3h_download(&H, dk, &kc) || memcmp(dk, hk, kc.bytes);
            printf("  write_kv cache bytes %s\n", bad ? "DIFFER" : "match");
            free(dk);
        }
        fa3h_tensor_free(&H, &tk);
        fa3h_tensor_free(&H, &tv);
        free(nk);
        free(nv);
        if (bad) goto done;
    }

    if (ops->plan(st, &B.b, c->n2 ? AH_PLAN_CAPTURE : AH_PLAN_EAGER, H.stream) != AH_OK) {
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
        fail = check_against_ref(c, &sp, &B.b, hq, hk, hv, sinks, &out, c->lse ? &lse : NULL, "eager");
        goto done;
    }
    /* Graph: capture batch 1, replay it, then rewrite to batch 2 and replay. */
    if (ops->graph_begin(H.ctx, H.stream) != AH_OK || ops->forward(st, &fa) != AH_OK ||
        ops->graph_end(H.ctx, H.stream, &g) != AH_OK) {
        fprintf(stderr, "  capture: %s / %s\n", ops->context_error(H.ctx), ops->state_error(st));
        goto done;
    }
    if (ops->graph_launch(H.ctx, g, H.stream) != AH_OK || ops->synchronize(H.ctx, H.stream) != AH_OK) {
        fprintf(stderr, "  replay: %s\n", ops->context_error(H.ctx));
        goto done;
    }
    fail = check_against_ref(c, &sp, &B.b, hq, hk, hv, sinks, &out, c->lse ? &lse : NULL, "graph-1");
    if (fa3h_batch_rewrite(&H, &B, c->n2, c->qlen2, c->seqlen2, c->bs, nb, c->shuffled, seed + 7)) {
        fail = 1;
        goto done;
    }
    if (ops->plan(st, &B.b, AH_PLAN_REPLAY, H.stream) != AH_OK) {
        fprintf(stderr, "  plan(REPLAY): %s\n", ops->state_error(st));
        fail = 1;
        goto done;
    }
    if (ops->graph_launch(H.ctx, g, H.stream) != AH_OK || ops->synchronize(H.ctx, H.stream) != AH_OK) {
        fprintf(stderr, "  replay: %s\n", ops->context_error(H.ctx));
        fail = 1;
        goto done;
    }
    fail |= check_against_ref(c, &sp, &B.b, hq, hk, hv, sinks, &out, c->lse ? &lse : NULL, "graph-2");
done:
    if (g) ops->graph_destroy(H.ctx, g);
    if (st) ops->state_destroy(st);
    fa3h_batch_free(&H, &B);
    fa3h_tensor_free(&H, &q), fa3h_tensor_free(&H, &out), fa3h_tensor_free(&H, &kc);
    fa3h_tensor_free(&H, &vc), fa3h_tensor_free(&H, &lse), fa3h_tensor_free(&H, &ts);
    free(hk), free(hv), free(hq);
    return fail;
}

#define BF AH_DTYPE_BF16
#define FP AH_DTYPE_FP16
#define NHD AH_KV_LAYOUT_NHD
#define HND AH_KV_LAYOUT_HND
#define DEC AH_ATTN_DECODER
#define ENC AH_ATTN_ENCODER_ONLY
#define XATT AH_ATTN_ENCODER_DECODER

static const tcase cases[] = {
    {"d128 bf16 causal mixed prefill/decode/chunked, paged bs16, lse", BF, 4, 4, 128, 16, NHD, DEC, 0, 0, 0, 1, 1, 0,
     3, {300, 1, 77}, {300, 1000, 500}, 0, {0}, {0}, 0, 0.f, 0.f},
    {"d128 bf16 non-causal varlen", BF, 4, 4, 128, 16, NHD, ENC, 0, 0, 0, 1, 1, 0, 2, {200, 513}, {200, 513}, 0, {0}, {0}, 0, 0.f, 0.f},
    {"d128 bf16 GQA 32/8 decode split-KV, lse", BF, 32, 8, 128, 16, NHD, DEC, 0, 0, 0, 1, 1, 0, 6,
     {1, 1, 1, 1, 1, 1}, {3000, 17, 1500, 129, 2048, 700}, 0, {0}, {0}, 0, 0.f, 0.f},
    {"d128 fp16 causal contiguous bs128", FP, 4, 2, 128, 128, NHD, DEC, 0, 0, 0, 1, 0, 0, 2, {400, 130}, {400, 900}, 0, {0}, {0}, 0, 0.f, 0.f},
    {"d64 bf16 causal GQA 8/2", BF, 8, 2, 64, 32, NHD, DEC, 0, 0, 0, 1, 1, 0, 3, {260, 1, 33}, {260, 777, 300}, 0, {0}, {0}, 0, 0.f, 0.f},
    {"d64 fp16 non-causal", FP, 4, 4, 64, 64, NHD, ENC, 0, 0, 0, 1, 1, 0, 2, {150, 300}, {150, 300}, 0, {0}, {0}, 0, 0.f, 0.f},
    {"d256 bf16 causal GQA 8/4", BF, 8, 4, 256, 16, NHD, DEC, 0, 0, 0, 1, 1, 0, 3, {200, 1, 64}, {200, 900, 333}, 0, {0}, {0}, 0, 0.f, 0.f},
    {"d256 fp16 non-causal", FP, 2, 2, 256, 32, NHD, ENC, 0, 0, 0, 1, 1, 0, 2, {100, 190}, {100, 190}, 0, {0}, {0}, 0, 0.f, 0.f},
    {"d128 bf16 sliding window 100", BF, 4, 4, 128, 16, NHD, DEC, 100, 0, 0, 1, 1, 0, 3, {400, 1, 50}, {400, 1200, 700}, 0, {0}, {0}, 0, 0.f, 0.f},
    {"d128 bf16 soft-cap 30", BF, 4, 4, 128, 16, NHD, DEC, 0, 30.f, 0, 1, 1, 0, 2, {257, 1}, {257, 800}, 0, {0}, {0}, 0, 0.f, 0.f},
    {"d128 bf16 sinks, decode split + prefill", BF, 16, 4, 128, 16, NHD, DEC, 0, 0, 1, 1, 1, 0, 3, {1, 1, 90},
     {2500, 40, 90}, 0, {0}, {0}, 0, 0.f, 0.f},
    {"d128 bf16 HND layout", BF, 8, 2, 128, 32, HND, DEC, 0, 0, 0, 1, 1, 0, 2, {150, 1}, {150, 640}, 0, {0}, {0}, 0, 0.f, 0.f},
    {"d128 bf16 cross-attention", BF, 4, 4, 128, 16, NHD, XATT, 0, 0, 0, 1, 1, 0, 2, {70, 5}, {300, 64}, 0, {0}, {0}, 0, 0.f, 0.f},
    {"d128 bf16 encoder window 64", BF, 4, 4, 128, 16, NHD, ENC, 64, 0, 0, 1, 1, 0, 1, {300}, {300}, 0, {0}, {0}, 0, 0.f, 0.f},
    {"d128 bf16 group 6 (12/2), block 48", BF, 12, 2, 128, 48, NHD, DEC, 0, 0, 0, 1, 1, 0, 3, {1, 100, 1}, {1000, 100, 65},
     0, {0}, {0}, 0, 0.f, 0.f},
    {"d128 bf16 write_kv then attend", BF, 4, 2, 128, 16, NHD, DEC, 0, 0, 0, 1, 1, 1, 2, {40, 1}, {40, 300}, 0, {0}, {0}, 0, 0.f, 0.f},
    {"d128 bf16 graph: mixed capture, replay other lengths", BF, 16, 4, 128, 16, NHD, DEC, 0, 0, 1, 1, 1, 0, 4,
     {1, 1, 120, 3}, {900, 2000, 300, 40}, 4, {1, 200, 1, 1}, {3100, 200, 10, 1}, 0, 0.f, 0.f},
    {"d64 fp16 graph: decode capture, replay", FP, 8, 8, 64, 16, NHD, DEC, 0, 0, 0, 1, 1, 0, 3, {1, 1, 1},
     {100, 4000, 50}, 3, {1, 1, 1}, {3000, 1, 700}, 0, 0.f, 0.f},
    /* FP8 e4m3 KV cache (widened to the query dtype in shared memory). */
    {"fp8kv d128 bf16 causal mixed prefill/decode/chunked, paged bs16, lse", BF, 4, 4, 128, 16, NHD, DEC, 0, 0, 0, 1, 1,
     0, 3, {300, 1, 77}, {300, 1000, 500}, 0, {0}, {0}, 1, 1.f / 16, 1.f / 32},
    {"fp8kv d128 fp16 GQA 32/8 decode split-KV, sinks, lse", FP, 32, 8, 128, 16, NHD, DEC, 0, 0, 1, 1, 1, 0, 6,
     {1, 1, 1, 1, 1, 1}, {3000, 17, 1500, 129, 2048, 700}, 0, {0}, {0}, 1, 0.01f, 0.004f},
    {"fp8kv d64 fp16 causal GQA 8/2", FP, 8, 2, 64, 32, NHD, DEC, 0, 0, 0, 1, 1, 0, 3, {260, 1, 33}, {260, 777, 300}, 0,
     {0}, {0}, 1, 0.125f, 0.5f},
    {"fp8kv d64 bf16 non-causal bs64", BF, 4, 4, 64, 64, NHD, ENC, 0, 0, 0, 1, 1, 0, 2, {150, 300}, {150, 300}, 0, {0},
     {0}, 1, 0.02f, 0.05f},
    {"fp8kv d256 bf16 causal GQA 8/4", BF, 8, 4, 256, 16, NHD, DEC, 0, 0, 0, 1, 1, 0, 3, {200, 1, 64}, {200, 900, 333}, 0,
     {0}, {0}, 1, 1.f / 64, 1.f / 8},
    {"fp8kv d256 fp16 non-causal", FP, 2, 2, 256, 32, NHD, ENC, 0, 0, 0, 1, 1, 0, 2, {100, 190}, {100, 190}, 0, {0}, {0},
     1, 0.05f, 0.05f},
    {"fp8kv d128 bf16 HND bs32, soft-cap 30, window 200", BF, 8, 2, 128, 32, HND, DEC, 200, 30.f, 0, 1, 1, 0, 2,
     {150, 1}, {150, 640}, 0, {0}, {0}, 1, 0.01f, 0.02f},
    {"fp8kv d128 bf16 write_kv (saturating) then attend", BF, 4, 2, 128, 16, NHD, DEC, 0, 0, 0, 1, 1, 1, 2, {40, 1},
     {40, 300}, 0, {0}, {0}, 1, 0.002f, 0.01f},
    {"fp8kv d128 fp16 write_kv then attend, HND", FP, 8, 8, 128, 16, HND, DEC, 0, 0, 0, 1, 1, 1, 2, {33, 1},
     {33, 200}, 0, {0}, {0}, 1, 1.f / 128, 1.f / 256},
    {"fp8kv d128 bf16 graph: mixed capture, replay other lengths", BF, 16, 4, 128, 16, NHD, DEC, 0, 0, 1, 1, 1, 0, 4,
     {1, 1, 120, 3}, {900, 2000, 300, 40}, 4, {1, 200, 1, 1}, {3100, 200, 10, 1}, 1, 0.03f, 0.03f},
};

int main(int argc, char **argv)
{
    if (fa3h_args(&argc, argv)) {
        fprintf(stderr, "usage: fa3_check [harness options] [plugin.so [case-substring]]\n");
        return 2;
    }
    const char *path = argc > 1 ? argv[1] : FA3_PLUGIN_PATH;
    const char *only = argc > 2 ? argv[2] : NULL;
    int rc = fa3h_open(&H, path);
    if (rc) return rc;
    int failed = 0, ran = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (only && !strstr(cases[i].name, only)) continue;
        ran++;
        failed += run_case(&cases[i], 1234u + (unsigned)i);
    }
    /* The V^T scratch belongs to the first stream whose forward used it; the
     * first case again on a second stream must take the in-kernel path and
     * give the same answers (--vt-min-reads=1 makes the first stream use
     * the scratch). */
    void *first = H.stream, *second = NULL;
    if (fa3h_vt_min_reads_set() && fa3h_fp8_attention() && H.ops->stream_create(H.ctx, &second) == AH_OK) {
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
    fa3h_close(&H);
    return failed ? 1 : 0;
}
