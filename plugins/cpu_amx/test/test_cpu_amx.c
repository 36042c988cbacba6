/*
 * cpu_amx kernel test: loads the plugin with the host's services
 * (tests/helpers/ath.h) and runs every ISA path this CPU offers over random
 * batches against the double-precision oracle (attnhost/reference.h:
 * attention, write_kv and merge_states):
 * prefill, extend, decode and mixed batches; MHA/GQA/MQA and wide groups;
 * MLA (576/512, V inside the key cache); bf16/fp16/fp32 queries; bf16, fp16,
 * fp32 and FP8 E4M3/E5M2 caches (OCP and fnuz) with scales; NHD and HND; sliding window,
 * soft-cap, ALiBi, sinks; causal, bidirectional and cross attention; LSE;
 * split-KV; write_kv (bit-exact) and merge_states; and the errors a forced
 * ISA, a bad config key or a bad tensor must give.
 * Exit code 77 (skip) only if the plugin cannot be loaded at all.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "ath.h"
#include "check.h"

/* Two threads exercise the split-KV merge. Under ThreadSanitizer one: the
 * libgomp Debian ships is not instrumented, so its barriers would read as
 * races in every parallel region (the host's own thread tests cover
 * concurrency there). */
#if defined(__SANITIZE_THREAD__)
#define TEST_THREADS "1"
#else
#define TEST_THREADS "2"
#endif

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static const ah_context_options device0 = {sizeof(ah_context_options), 0};

typedef struct tcase {
    const char *name;
    ah_attn_type type;
    uint32_t hq, hk, d, dv;
    ah_dtype qdt, kvdt;
    uint32_t bs;
    ah_kv_layout layout;
    uint32_t window;
    float softcap;
    int mla, sinks, alibi;
    float k_scale, v_scale;
    int nreq;
    int32_t qlen[6], seq[6];
    const char *split_min; /* NULL: default */
} tcase;

/* The case as a workload on host memory: blocks shuffled, one spare table
 * column and three spare blocks, queries in [-2, 2), caches and new K/V in
 * [-1, 1) (FP8: quantised with the scales). A bidirectional case is a
 * decoder layer with the causal flag off (ABI 2.1); the spec's scale stays
 * 0, the plugin's default. */
static int world_build(ath_work *w, const tcase *c)
{
    ath_shape s;
    memset(&s, 0, sizeof s);
    s.attn = c->type;
    if (c->type == AH_ATTN_ENCODER || c->type == AH_ATTN_ENCODER_ONLY) {
        s.attn = AH_ATTN_DECODER;
        s.causal = AH_CAUSAL_OFF;
    }
    s.q_dtype = c->qdt, s.kv_dtype = c->kvdt;
    s.hq = c->hq, s.hk = c->hk, s.d = c->d, s.dv = c->dv, s.mla = (uint32_t)c->mla;
    s.layout = c->layout, s.window = c->window, s.softcap = c->softcap;
    s.sinks = (uint32_t)c->sinks, s.alibi = (uint32_t)c->alibi;
    s.k_scale = c->k_scale, s.v_scale = c->v_scale;
    s.scale = 1.f, s.q_amp = 2.f, s.new_kv = 1;
    s.batch = (ath_batch_spec){.num_reqs = (uint32_t)c->nreq,
                               .qlens = c->qlen,
                               .seqlens = c->seq,
                               .block_size = c->bs,
                               .table_pad = 1,
                               .extra_blocks = 3,
                               .no_slots = c->type == AH_ATTN_ENCODER_DECODER};
    if (ath_work_build(NULL, w, &s, &rng)) return -1;
    w->spec.scale = 0.0f;
    w->lim.max_seq_len = 20000;
    if (c->type == AH_ATTN_ENCODER_DECODER) w->B.b.encoder_seq_lens_host = w->B.seq; /* ABI 2.1 */
    return 0;
}

/* ramp > 0 scales the cached key at position p of a request by 1 + ramp *
 * p / seq_len, so scores keep rising along the sequence and the kernels'
 * running max moves far beyond its first value (their lazy rescale paths). */
static void ramp_keys(ath_work *w, const tcase *c, float ramp)
{
    for (int r = 0; ramp > 0 && r < c->nreq; r++)
        for (int32_t p = 0; p < c->seq[r]; p++) {
            const uint32_t blk = (uint32_t)w->B.bt[(size_t)r * w->B.width + (uint32_t)p / c->bs];
            const float f = 1.0f + ramp * (float)p / (float)c->seq[r];
            for (uint32_t h = 0; h < c->hk; h++)
                for (uint32_t ch = 0; ch < c->d; ch++) {
                    const size_t at = ah_kv_offset(c->layout, c->bs, c->hk, c->d, blk,
                                                   (uint32_t)p % c->bs, h, ch);
                    ah_store_f32(w->kc, at, c->kvdt, ah_load_f32(w->kc, at, c->kvdt) * f);
                }
        }
}

static void *dup(const void *p, size_t n)
{
    void *q = malloc(n ? n : 1);
    if (q && n) memcpy(q, p, n);
    return q;
}

static double tol_of(ah_dtype t)
{
    return t == AH_DTYPE_BF16 ? 2.5e-2 : t == AH_DTYPE_FP16 ? 3e-3 : 2e-4;
}

/* One case on one ISA path: write_kv against the oracle's writer (bit for
 * bit), forward against the oracle over the caches that writer left. */
static void run_case(ath_host *h, const tcase *c, const char *isa, float ramp)
{
    ath_work w;
    CHECK_MSG(ath_set(h, "isa", isa) == 0 &&
                  ath_set(h, "split_min", c->split_min ? c->split_min : "256") == 0,
              "%s/%s: config", c->name, isa);
    if (world_build(&w, c)) {
        CHECK_MSG(0, "%s/%s: workload", c->name, isa);
        ath_work_free(NULL, &w);
        return;
    }
    ramp_keys(&w, c, ramp);
    const size_t ke = ah_dtype_size(c->kvdt), kbytes = w.kc_elems * ke, vbytes = w.vc_elems * ke;
    const uint32_t T = w.B.num_tokens;
    /* What write_kv must leave in the caches, and the oracle over them. */
    void *kx = dup(w.kc, kbytes), *vx = c->mla ? NULL : dup(w.vc, vbytes), *kc = w.kc, *vc = w.vc;
    double *ref_out = calloc((size_t)T * c->hq * c->dv + 1, sizeof(double)),
           *ref_lse = calloc((size_t)T * c->hq + 1, sizeof(double));
    char why[256] = "";
    w.kc = kx, w.vc = vx;
    int ref_ok = ath_work_reference_write(&w, why, sizeof why) == 0 &&
                 ath_work_reference(&w, ref_out, ref_lse, why, sizeof why) == 0;
    w.kc = kc, w.vc = vc;
    CHECK_MSG(ref_ok, "%s/%s: oracle: %s", c->name, isa, why);
    const ah_plugin_ops *ops = h->ops;
    ah_context *ctx = NULL;
    ah_state *st = NULL;
    const char *cwhy = NULL;
    if (ops->context_create(&h->svc, &device0, &ctx, &cwhy) != AH_OK) {
        CHECK_MSG(0, "%s/%s: context_create: %s", c->name, isa, cwhy);
        goto out;
    }
    if (ops->state_create(ctx, &w.spec, &w.lim, &st) != AH_OK) {
        CHECK_MSG(0, "%s/%s: state_create: %s", c->name, isa, ops->context_error(ctx));
        goto out;
    }
    ah_status rc = ops->plan(st, &w.B.b, AH_PLAN_EAGER, NULL);
    CHECK_MSG(rc == AH_OK, "%s/%s: plan: %s", c->name, isa, ops->state_error(st));
    ah_kv_write_args wa = ath_work_write_args(&w, NULL);
    rc = ops->write_kv(st, &wa);
    CHECK_MSG(rc == AH_OK, "%s/%s: write_kv: %s", c->name, isa, ops->state_error(st));
    CHECK_MSG(memcmp(w.kc, kx, kbytes) == 0, "%s/%s: key cache after write_kv differs", c->name,
              isa);
    if (!c->mla)
        CHECK_MSG(memcmp(w.vc, vx, vbytes) == 0, "%s/%s: value cache after write_kv differs",
                  c->name, isa);

    const size_t on = (size_t)T * c->hq * c->dv;
    unsigned char *o = w.out_host;
    memset(o, 0x7f, on * ah_dtype_size(c->qdt)); /* garbage the kernel must overwrite */
    ah_forward_args fa = ath_work_args(&w, NULL, 1);
    fa.key = fa.value = NULL; /* paged layers: the caches only */
    rc = ops->forward(st, &fa);
    CHECK_MSG(rc == AH_OK, "%s/%s: forward: %s", c->name, isa, ops->state_error(st));
    const double tol = tol_of(c->qdt);
    const ath_cmp co = ath_compare(o, c->qdt, ref_out, on, tol, 0),
                  cl = ath_compare(w.lse_host, AH_DTYPE_FP32, ref_lse, (size_t)T * c->hq, 0, 0);
    CHECK_MSG(co.over == 0, "%s/%s: %zu of %zu outputs off by more than %g (worst %g)", c->name,
              isa, co.over, on, tol, co.max_abs);
    CHECK_MSG(cl.max_abs <= 2e-3, "%s/%s: lse off by %g", c->name, isa, cl.max_abs);
    printf("  %-28s %-10s T=%-4u max|err| out %.2e lse %.2e\n", c->name, isa, T, co.max_abs,
           cl.max_abs);

    /* Bad input: a wrong q shape is refused and the output is left alone. */
    unsigned char probe_byte = o[0];
    w.d_q.shape[1] = c->hq + 1;
    rc = ops->forward(st, &fa);
    w.d_q.shape[1] = c->hq;
    char want_msg[64];
    snprintf(want_msg, sizeof want_msg, "q: shape [%u, %u,", T, c->hq + 1);
    CHECK_MSG(rc == AH_ERR_INVALID_ARGUMENT && strstr(ops->state_error(st), want_msg),
              "%s/%s: bad q shape gave %d '%s'", c->name, isa, rc, ops->state_error(st));
    CHECK_MSG(o[0] == probe_byte, "%s/%s: failed forward wrote output", c->name, isa);
out:
    if (st) ops->state_destroy(st);
    if (ctx) ops->context_destroy(ctx);
    free(kx), free(vx), free(ref_out), free(ref_lse);
    ath_work_free(NULL, &w);
}

static void test_merge(ath_host *h)
{
    const ah_plugin_ops *ops = h->ops;
    ah_context *ctx = NULL;
    const char *why = NULL;
    ath_set(h, "isa", "auto");
    if (ops->context_create(&h->svc, &device0, &ctx, &why) != AH_OK) {
        CHECK_MSG(0, "merge: context_create: %s", why);
        return;
    }
    enum { T = 5, H = 3, D = 48, N = T * H * D };
    const int64_t sv[3] = {T, H, D}, sl[2] = {T, H}, sbad[3] = {T, H, D - 16};
    for (int dti = 0; dti < 3; dti++) {
        ah_dtype dt = dti == 0 ? AH_DTYPE_FP32 : dti == 1 ? AH_DTYPE_FP16 : AH_DTYPE_BF16;
        const size_t e = ah_dtype_size(dt);
        void *a = malloc(N * e), *b = malloc(N * e), *o = malloc(N * e);
        ath_fill_uniform(a, N, dt, 1, 1, &rng);
        ath_fill_uniform(b, N, dt, 1, 1, &rng);
        ath_fill_uniform(o, N, dt, 1, 1, &rng);
        float la[T * H], lb[T * H], lo[T * H];
        double da[N], db[N], dla[T * H], dlb[T * H], ro[N], rl[T * H];
        for (int i = 0; i < T * H; i++) {
            la[i] = (float)ath_rand_range(&rng, -3, 3);
            lb[i] = (float)ath_rand_range(&rng, -3, 3);
        }
        la[4] = -INFINITY;
        la[7] = lb[7] = -INFINITY;
        for (int i = 0; i < T * H; i++) dla[i] = la[i], dlb[i] = lb[i];
        for (int i = 0; i < N; i++)
            da[i] = ah_load_f32(a, (size_t)i, dt), db[i] = ah_load_f32(b, (size_t)i, dt);
        ah_reference_merge_states(T, H, D, da, dla, db, dlb, ro, rl);
        const DLDataType vt = ah_dtype_to_dl(dt);
        ath_tensor ta, tb, to, tla, tlb, tlo;
        ath_tensor_host(&ta, a, vt, 3, sv), ath_tensor_host(&tb, b, vt, 3, sv),
            ath_tensor_host(&to, o, vt, 3, sv);
        ath_tensor_host(&tla, la, ath_f32, 2, sl), ath_tensor_host(&tlb, lb, ath_f32, 2, sl);
        ath_tensor_host(&tlo, lo, ath_f32, 2, sl);
        ah_merge_args m = {sizeof m, &ta.t, &tla.t, &tb.t, &tlb.t, &to.t, &tlo.t, NULL};
        CHECK_MSG(ops->merge_states(ctx, &m) == AH_OK, "merge: %s", ops->context_error(ctx));
        for (int r = 0; r < T * H; r++)
            CHECK_MSG((rl[r] == -INFINITY && lo[r] == -INFINITY) || fabs(lo[r] - rl[r]) < 1e-5,
                      "merge lse row %d: %g vs %g", r, lo[r], rl[r]);
        const ath_cmp co = ath_compare(o, dt, ro, N, 0, 0);
        CHECK_MSG(co.max_abs <= tol_of(dt) / 4, "merge %s: worst error %g", ah_dtype_name(dt),
                  co.max_abs);
        /* out aliasing v_a is allowed. */
        m.out = &ta.t;
        CHECK_MSG(ops->merge_states(ctx, &m) == AH_OK && memcmp(a, o, N * e) == 0,
                  "merge in place into v_a differs (%s)", ah_dtype_name(dt));
        /* A shape mismatch is refused. */
        ath_tensor_host(&tb, b, vt, 3, sbad);
        CHECK_MSG(ops->merge_states(ctx, &m) == AH_ERR_INVALID_ARGUMENT,
                  "merge accepted mismatched shapes");
        free(a);
        free(b);
        free(o);
    }
    ops->context_destroy(ctx);
}

static void test_forced_paths(ath_host *h)
{
    const ah_plugin_ops *ops = h->ops;
    ah_context *ctx = NULL;
    const char *why = NULL;
    /* Malformed values never reach the plugin: the host refuses them against
     * the declared key table (tests/unit/test_plugin_keys.c). */
    ath_set(h, "threads", TEST_THREADS);
    /* Every path the CPU lacks must be refused, by probe and by context_create. */
    const char *paths[] = {"amx", "avx512bf16", "avx512", "avx2", "scalar"};
    for (int i = 0; i < 5; i++) {
        ath_set(h, "isa", paths[i]);
        ah_probe_info pi;
        memset(&pi, 0, sizeof pi);
        pi.struct_size = sizeof pi;
        ops->probe(&h->svc, &pi);
        ah_status rc = ops->context_create(&h->svc, &device0, &ctx, &why);
        if (pi.usable) {
            CHECK_MSG(rc == AH_OK && strcmp(pi.arch, paths[i]) == 0 &&
                          pi.multiprocessors == (uint32_t)atoi(TEST_THREADS),
                      "probe says %s usable (arch %s, %u threads) but context_create gave %d",
                      paths[i], pi.arch, pi.multiprocessors, rc);
            if (rc == AH_OK) ops->context_destroy(ctx);
        } else {
            CHECK_MSG(rc == AH_ERR_UNAVAILABLE && ctx == NULL && strstr(why, paths[i]) &&
                          strstr(pi.reason, "lacks"),
                      "forced %s on a CPU without it: rc %d why '%s' reason '%s'", paths[i], rc,
                      why ? why : "", pi.reason);
            printf("  forced isa=%s refused: %s\n", paths[i], pi.reason);
        }
    }
    ath_set(h, "isa", "auto");
}

int main(int argc, char **argv)
{
    ath_host h;
    if (ath_load(&h, argc > 1 ? argv[1] : CPU_AMX_SO) != 0) return 77;
    ath_set(&h, "threads", TEST_THREADS);
    const char *paths[] = {"scalar", "avx2", "avx512", "avx512bf16", "amx"};
    /* argv[2] restricts the run to one path. */
    const char *only = argc > 2 ? argv[2] : NULL;
    const ah_dtype BF = AH_DTYPE_BF16, F16 = AH_DTYPE_FP16, F32 = AH_DTYPE_FP32,
                   E4 = AH_DTYPE_FP8_E4M3, E5 = AH_DTYPE_FP8_E5M2, E4Z = AH_DTYPE_FP8_E4M3_FNUZ,
                   E5Z = AH_DTYPE_FP8_E5M2_FNUZ;
    const ah_kv_layout NHD = AH_KV_LAYOUT_NHD, HND = AH_KV_LAYOUT_HND;
    const ah_attn_type DEC = AH_ATTN_DECODER;
    /* Not reformatted: one case a row, fields in tcase's order. */
    // clang-format off
    const tcase cases[] = {
        {"decode gqa bf16", DEC, 8, 2, 128, 128, BF, BF, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 4, {1, 1, 1, 1}, {1, 17, 100, 333}, NULL},
        {"prefill mha bf16 bs32", DEC, 4, 4, 64, 64, BF, BF, 32, NHD, 0, 0, 0, 0, 0, 1, 1, 2, {70, 33}, {70, 33}, NULL},
        {"extend gqa bf16 HND", DEC, 8, 2, 128, 128, BF, BF, 16, HND, 0, 0, 0, 0, 0, 1, 1, 2, {20, 5}, {150, 37}, NULL},
        {"mixed bf16 d80", DEC, 6, 2, 80, 80, BF, BF, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 4, {40, 10, 1, 1}, {40, 90, 64, 1}, NULL},
        {"mixed fp16 d96 mqa", DEC, 4, 1, 96, 96, F16, F16, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 4, {40, 10, 1, 1}, {40, 90, 64, 1}, NULL},
        {"fp32 win/cap/alibi/sink", DEC, 2, 1, 32, 32, F32, F32, 48, NHD, 7, 5.0f, 0, 1, 1, 1, 1, 3, {30, 4, 1}, {30, 100, 77}, NULL},
        {"bf16 win/cap/alibi/sink", DEC, 8, 2, 64, 64, BF, BF, 16, HND, 33, 3.0f, 0, 1, 1, 1, 1, 3, {50, 4, 1}, {50, 100, 77}, NULL},
        {"fp8 e4m3 bf16 q", DEC, 8, 2, 128, 128, BF, E4, 16, NHD, 0, 0, 0, 0, 0, 0.05f, 0.02f, 3, {1, 12, 1}, {90, 60, 5}, NULL},
        {"fp8 e5m2 fp16 q HND", DEC, 4, 2, 64, 64, F16, E5, 32, HND, 0, 0, 0, 0, 0, 0.03f, 0.5f, 3, {1, 12, 1}, {90, 60, 5}, NULL},
        {"fp8 e4m3fnuz bf16 q", DEC, 8, 2, 128, 128, BF, E4Z, 16, NHD, 0, 0, 0, 0, 0, 0.05f, 0.02f, 3, {1, 12, 1}, {90, 60, 5}, NULL},
        {"fp8 e5m2fnuz fp16 q HND", DEC, 4, 2, 64, 64, F16, E5Z, 32, HND, 0, 0, 0, 0, 0, 0.03f, 0.5f, 3, {1, 12, 1}, {90, 60, 5}, NULL},
        {"fp8 e4m3 fp32 q", DEC, 4, 4, 48, 48, F32, E4, 16, NHD, 0, 0, 0, 1, 0, 2.0f, 1.0f, 2, {3, 1}, {40, 19}, NULL},
        {"mla 576/512 bf16", DEC, 16, 1, 576, 512, BF, BF, 16, NHD, 0, 0, 1, 0, 0, 1, 1, 3, {1, 1, 9}, {50, 130, 40}, NULL},
        {"mla 576/512 fp8 e4m3", DEC, 8, 1, 576, 512, BF, E4, 64, NHD, 0, 0, 1, 0, 0, 0.04f, 0.04f, 2, {1, 5}, {70, 30}, NULL},
        {"mla fp16 sinks", DEC, 4, 1, 576, 512, F16, F16, 16, NHD, 0, 0, 1, 1, 0, 1, 1, 2, {1, 3}, {33, 20}, NULL},
        {"mla bf16 group 4 sinks", DEC, 4, 1, 576, 512, BF, BF, 32, NHD, 0, 0, 1, 1, 0, 1, 1, 3, {1, 1, 2}, {45, 97, 20}, NULL},
        {"bf16 decode window split", DEC, 8, 2, 80, 80, BF, BF, 16, HND, 700, 2.0f, 0, 1, 1, 1, 1, 2, {1, 1}, {1500, 333}, "64"},
        /* cacheless encoder layers (ABI 2.1) run in the conformance suite */
        {"bidirectional decoder bf16", AH_ATTN_ENCODER_ONLY, 4, 4, 64, 64, BF, BF, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 2, {50, 17}, {50, 17}, NULL},
        {"bidirectional decoder window fp32", AH_ATTN_ENCODER, 4, 2, 64, 64, F32, BF, 16, NHD, 9, 0, 0, 0, 0, 1, 1, 2, {50, 17}, {50, 17}, NULL},
        {"cross attention bf16", AH_ATTN_ENCODER_DECODER, 4, 4, 64, 64, BF, BF, 16, NHD, 0, 0, 0, 0, 1, 1, 1, 2, {3, 7}, {40, 13}, NULL},
        {"cross attention fp16 win", AH_ATTN_ENCODER_DECODER, 4, 2, 32, 32, F16, F16, 16, HND, 5, 0, 0, 0, 0, 1, 1, 2, {3, 1}, {40, 13}, NULL},
        {"head 256 bf16 sinks", DEC, 4, 2, 256, 256, BF, BF, 64, NHD, 0, 0, 0, 1, 0, 1, 1, 2, {1, 20}, {200, 40}, NULL},
        {"head 512 fp16", DEC, 2, 1, 512, 512, F16, F16, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 2, {1, 6}, {50, 40}, NULL},
        {"qk 192 v 128 bf16", DEC, 4, 2, 192, 128, BF, BF, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 2, {1, 19}, {60, 40}, NULL},
        {"wide group 64/1 bf16", DEC, 64, 1, 64, 64, BF, BF, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 2, {1, 3}, {90, 30}, NULL},
        {"split-kv decode bf16", DEC, 8, 2, 128, 128, BF, BF, 16, NHD, 0, 0, 0, 1, 0, 1, 1, 1, {1}, {3001}, "64"},
        {"split-kv decode fp32 win", DEC, 4, 1, 64, 64, F32, F32, 16, NHD, 1500, 0, 0, 0, 0, 1, 1, 1, {1}, {2500}, "64"},
        {"split-kv prefill bf16", DEC, 2, 1, 64, 64, BF, BF, 32, NHD, 0, 0, 0, 0, 0, 1, 1, 1, {40}, {1200}, "64"},
        {"split-kv prefill gqa4 bf16 HND", DEC, 8, 2, 128, 64, BF, BF, 32, HND, 0, 0, 0, 1, 0, 1, 1, 2, {40, 70}, {1500, 70}, "80"},
        {"decode group 16 alibi bf16", DEC, 32, 2, 64, 64, BF, BF, 16, NHD, 0, 0, 0, 0, 1, 1, 1, 3, {1, 1, 1}, {7, 50, 129}, NULL},
        {"decode window bf16 HND", DEC, 8, 2, 128, 128, BF, BF, 32, HND, 37, 0, 0, 1, 0, 1, 1, 3, {1, 1, 1}, {5, 90, 200}, NULL},
        {"empty and zero-len rows", DEC, 4, 2, 32, 32, BF, BF, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 3, {0, 2, 1}, {5, 2, 1}, NULL},
    };
    // clang-format on
    /* Rising scores (world_build's ramp): MQA (one KV head per decode item,
     * consecutive AMX units on the same head), GQA 4 over two KV heads,
     * groups of 8 (the AMX kernel's transposed S^T), and prefill/extend (the
     * tile kernel's 16-row softmax step). */
    /* Not reformatted: one case a row, fields in tcase's order. */
    // clang-format off
    const tcase ramped[] = {
        {"decode mqa rising bf16", DEC, 4, 1, 128, 128, BF, BF, 16, NHD, 0, 0, 0, 1, 0, 1, 1, 2, {1, 1}, {700, 1001}, NULL},
        {"decode gqa4 rising bf16", DEC, 8, 2, 128, 64, BF, BF, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 2, {1, 1}, {333, 500}, NULL},
        {"decode group 8 rising bf16", DEC, 16, 2, 64, 64, BF, BF, 32, HND, 0, 0, 0, 0, 0, 1, 1, 2, {1, 1}, {95, 600}, NULL},
        {"extend gqa4 rising bf16", DEC, 8, 2, 128, 128, BF, BF, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 2, {300, 40}, {300, 1001}, NULL},
    };
    // clang-format on
    const int ncases = (int)(sizeof cases / sizeof cases[0]),
              nramped = (int)(sizeof ramped / sizeof ramped[0]);
    int ran_paths = 0;
    for (int p = 0; p < 5; p++) {
        if (only && strcmp(only, paths[p]) != 0) continue;
        ah_probe_info pi;
        memset(&pi, 0, sizeof pi);
        pi.struct_size = sizeof pi;
        ath_set(&h, "isa", paths[p]);
        h.ops->probe(&h.svc, &pi);
        if (!pi.usable) {
            printf("isa %s: skipped: %s\n", paths[p], pi.reason);
            continue;
        }
        ran_paths++;
        printf("isa %s:\n", paths[p]);
        for (int i = 0; i < ncases; i++) run_case(&h, &cases[i], paths[p], 0.0f);
        for (int i = 0; i < nramped; i++) run_case(&h, &ramped[i], paths[p], 6.0f);
        if (strcmp(paths[p], "amx") == 0) {
            /* The amx path's other decode kernel (vdpbf16ps), as amx_decode = 0
             * picks it, and the prefill's tile products in one burst per row
             * block (amx_interleave = 0). */
            ath_set(&h, "amx_decode", "0");
            ath_set(&h, "amx_interleave", "0");
            printf("isa amx, amx_decode = 0, amx_interleave = 0:\n");
            for (int i = 0; i < ncases; i++) run_case(&h, &cases[i], paths[p], 0.0f);
            for (int i = 0; i < nramped; i++) run_case(&h, &ramped[i], paths[p], 6.0f);
            ath_set(&h, "amx_decode", "1");
            ath_set(&h, "amx_interleave", "1");
        }
    }
    if (ran_paths == 0 && only) {
        printf("skipped: isa %s is not usable here\n", only);
        ath_close(&h);
        return 77;
    }
    CHECK_MSG(ran_paths > 0, "no ISA path ran");
    test_merge(&h);
    test_forced_paths(&h);
    ath_close(&h);
    return check_report("cpu_amx_test");
}
