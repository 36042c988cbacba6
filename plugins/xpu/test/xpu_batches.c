/*
 * Batches on xpu that the conformance suite does not reach, loaded through
 * its ABI with the host's services (tests/helpers/ath.h):
 *
 * - Requests without keys (AH_FEAT_EMPTY_KV): decode batches in which
 *   every third request has seq_len 0 and a block-table row of garbage
 *   (0x7ffffff0, far past the cache), and batches of nothing but such
 *   requests. The other requests run on the split-KV path (chunks of 16
 *   keys) and on the unsplit one (enough query rows to fill the device),
 *   with fp32/fp16/bf16 queries, an FP8 cache, GQA (up to 16 heads a KV
 *   head), a window, a finite sink and a -inf sink (an engine's "no
 *   sink"). Empty rows must be exactly 0 with LSE exactly -inf (the sink's
 *   logit with a finite sink); the rest must match the oracle. merge_states
 *   runs with parts of LSE -inf whose rows hold NaN: the other part must
 *   pass through.
 * - Absorbed MLA (576 / 512, one KV head) from an FP8 cache, its values
 *   under the K scale, and the MLA layers xpu refuses.
 * - plan(REPLAY) without a capture, or of another token count.
 * - A wide prefill: 32 query heads over at least 4096 query rows per
 *   compute unit, a launch from which PoCL, left to choose, makes
 *   work-groups of 4096 work-items, more private memory than its threads'
 *   stacks hold (XPU_GROUP in src/xpu.h). It must match the oracle.
 *
 * Outputs are poisoned first, so unwritten rows show.
 *
 * Usage: xpu_batches PLUGIN.so [KEY=VALUE...] ([plugin.xpu] keys: a runtime
 * and tier to run them on)
 * Exit: 0 all passed, 1 a failure, 77 skipped (no usable xpu device).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ath.h"

enum { SINK_NONE, SINK_FINITE, SINK_NEG_INF };
enum { EMPTY_THIRD, EMPTY_ALL, EMPTY_NONE }; /* the requests without keys */

typedef struct ecase {
    const char *name;
    ah_dtype q, kv;
    uint32_t hq, hk, d, reqs, window;
    int sinks; /* SINK_* */
    int empty; /* EMPTY_* */
    int qlen;  /* query tokens a request (a prefill of qlen keys); 0: decode */
    int mla;   /* absorbed MLA: d 576 (the key's), V its first 512 channels */
} ecase;

static ath_host P;
static int g_fail, g_pass;

static void report(const char *name, int ok, const char *msg)
{
    printf("%-4s %-46s%s\n", ok ? "ok" : "FAIL", name, msg);
    fflush(stdout);
    if (ok) g_pass++;
    else g_fail++;
}

static int is_empty(const ecase *c, uint32_t r)
{
    return c->empty == EMPTY_ALL || (c->empty == EMPTY_THIRD && r % 3 == 0);
}

/* Tolerances of the conformance suite's comparison, per output dtype. */
static double tol_of(ah_dtype q, ah_dtype kv)
{
    double t = q == AH_DTYPE_FP32 ? 1e-4 : q == AH_DTYPE_FP16 ? 2e-3 : 1.6e-2;
    if ((kv == AH_DTYPE_FP8_E4M3 || kv == AH_DTYPE_FP8_E5M2) && t < 5e-3) t = 5e-3;
    return t;
}

static void run_case(const ecase *c, const char *path_name, uint64_t *rng)
{
    char name[128], msg[512] = "";
    snprintf(name, sizeof name, "%s %s", path_name, c->name);
    const ah_plugin_ops *O = P.ops;
    int32_t *ql = malloc(2 * sizeof(int32_t) * c->reqs), *sl = ql + c->reqs;
    if (!ql) {
        report(name, 0, " out of memory");
        return;
    }
    for (uint32_t r = 0; r < c->reqs; r++) {
        ql[r] = c->qlen ? c->qlen : 1;
        sl[r] = is_empty(c, r) ? 0 : c->qlen ? c->qlen : 1 + (int32_t)(ath_rand_u64(rng) % 300);
    }
    ath_shape s;
    memset(&s, 0, sizeof s);
    s.attn = AH_ATTN_DECODER, s.q_dtype = c->q, s.kv_dtype = c->kv;
    const uint32_t dv = c->mla ? 512 : c->d;
    s.hq = c->hq, s.hk = c->hk, s.d = c->d, s.dv = dv, s.mla = (uint32_t)c->mla;
    s.layout = AH_KV_LAYOUT_NHD;
    s.window = c->window, s.sinks = c->sinks != SINK_NONE;
    s.k_scale = s.v_scale = c->kv == c->q ? 0.f : 0.5f;
    if (c->mla && s.k_scale != 0.f) s.v_scale = 4.f; /* MLA's values take the K scale */
    s.q_amp = s.kv_amp = 2.f;
    s.batch = (ath_batch_spec){.num_reqs = c->reqs,
                               .qlens = ql,
                               .seqlens = sl,
                               .block_size = 16,
                               .table_pad = 2,
                               .extra_blocks = 3,
                               .unused_entry = 0x7ffffff0};
    ath_work io;
    ah_state *st = NULL;
    int ok = 0;
    double *ref = NULL, *rlse = NULL;
    void *out = NULL;
    float *lse = NULL;
    if (ath_work_build(&P, &io, &s, rng)) {
        snprintf(msg, sizeof msg, " setup failed");
        goto done;
    }
    if (c->sinks == SINK_NEG_INF) {
        for (uint32_t h = 0; h < c->hq; h++) io.sinks[h] = -INFINITY;
        if (ath_work_upload(&P, &io)) goto done;
    }
    ah_limits lim = {
        sizeof lim,     io.B.num_reqs, io.B.num_tokens, io.B.width, io.B.max_seq ? io.B.max_seq : 1,
        io.B.num_blocks};
    const size_t T = io.B.num_tokens, nl = T * c->hq, no = nl * dv;
    out = malloc(io.d_out.bytes);
    lse = malloc(io.d_lse.bytes);
    memset(out, 0xff, io.d_out.bytes);
    memset(lse, 0xff, io.d_lse.bytes);
    if (ath_upload(&P, &io.d_out, out) || ath_upload(&P, &io.d_lse, lse)) goto done;
    ah_forward_args a = ath_work_args(&io, NULL, 1);
    if (O->state_create(P.ctx, &io.spec, &lim, &st) != AH_OK) {
        snprintf(msg, sizeof msg, " state_create: %s", O->context_error(P.ctx));
        goto done;
    }
    if (O->plan(st, &io.B.b, AH_PLAN_EAGER, NULL) != AH_OK || O->forward(st, &a) != AH_OK ||
        O->synchronize(P.ctx, NULL) != AH_OK) {
        snprintf(msg, sizeof msg, " %s", O->state_error(st));
        goto done;
    }
    if (ath_download(&P, out, &io.d_out) || ath_download(&P, lse, &io.d_lse)) goto done;
    /* The oracle takes no request without keys: it sees one key at block 0
     * (host copies only), and those rows are then set to what they must be. */
    for (uint32_t r = 0; r < c->reqs; r++)
        if (is_empty(c, r)) io.B.seq[r] = 1, io.B.bt[(size_t)r * io.B.width] = 0;
    if (io.B.b.max_seq_len < 1) io.B.b.max_seq_len = io.B.max_seq = 1;
    ref = malloc(sizeof(double) * (no + 1));
    rlse = malloc(sizeof(double) * (nl + 1));
    char why[256];
    if (ath_work_reference(&io, ref, rlse, why, sizeof why)) {
        snprintf(msg, sizeof msg, " reference: %s", why);
        goto done;
    }
    size_t bad_empty = 0, n_empty = 0;
    for (uint32_t r = 0; r < c->reqs; r++) {
        if (!is_empty(c, r)) continue;
        n_empty++;
        const size_t t = (size_t)io.B.qsl[r];
        for (uint32_t h = 0; h < c->hq; h++) {
            const float want = c->sinks == SINK_FINITE ? io.sinks[h] : -INFINITY;
            const float got = lse[t * c->hq + h];
            bad_empty += !(got == want);
            rlse[t * c->hq + h] = want;
            for (uint32_t e = 0; e < dv; e++) {
                const size_t i = (t * c->hq + h) * dv + e;
                bad_empty += ah_load_f32(out, i, c->q) != 0.0f; /* exactly 0: no tolerance */
                ref[i] = 0;
            }
        }
    }
    const double tol = tol_of(c->q, c->kv);
    const ath_cmp co = ath_compare(out, c->q, ref, no, tol, tol);
    const ath_cmp cl = ath_compare(lse, AH_DTYPE_FP32, rlse, nl, 2e-2, 0);
    snprintf(msg, sizeof msg,
             " %zu empty (%zu wrong)  out rel_l2 %.2e over %zu  lse max_abs %.2e over %zu", n_empty,
             bad_empty, co.rel_l2, co.over, cl.max_abs, cl.over);
    ok = bad_empty == 0 && co.over == 0 && co.nonfinite == 0 && cl.over == 0 && cl.nonfinite == 0;
done:
    report(name, ok, msg);
    if (st) O->state_destroy(st);
    ath_work_free(&P, &io);
    free(ref), free(rlse), free(out), free(lse), free(ql);
}

static void run_merge(ah_dtype dt, int out_in_a, uint64_t *rng)
{
    char name[96], msg[320] = "", why[256];
    snprintf(name, sizeof name, "merge_states %s, -inf parts hold NaN%s", ah_dtype_name(dt),
             out_in_a ? ", out = a" : "");
    /* a empty on rows 0, 5, 10...; b on rows 0, 3, 6...: both on 0, 15, ... */
    const ath_merge_spec m = {dt, 23, 6, 128, 2.f, 5, 0, 3, 0, out_in_a, 1};
    ath_cmp co, cl;
    int ok = ath_merge_run(&P, &m, rng, &co, &cl, why, sizeof why) == 0;
    if (!ok) snprintf(msg, sizeof msg, " %s", why);
    else {
        const double tol = tol_of(dt, dt);
        ok = co.nonfinite == 0 && cl.nonfinite == 0 && co.max_rel1 <= tol && cl.max_abs <= 1e-5;
        snprintf(msg, sizeof msg, " out max_rel %.2e nonfinite %zu  lse max_abs %.2e nonfinite %zu",
                 co.max_rel1, co.nonfinite, cl.max_abs, cl.nonfinite);
    }
    report(name, ok, msg);
}

/* Layers xpu must refuse at state creation, with the reason. */
static void run_refusals(void)
{
    static const struct {
        const char *name;
        uint32_t hk, d, dv, mla;
        const char *says;
    } bad[] = {
        {"mla with 2 KV heads", 2, 576, 512, 1, "1 with MLA"},
        {"mla 192/128", 1, 192, 128, 1, "576/512 with MLA"},
        {"qk 576 without mla", 1, 576, 512, 0, "only with MLA"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[96], msg[320] = "";
        snprintf(name, sizeof name, "refuses %s", bad[i].name);
        ah_layer_spec sp = ath_spec(AH_ATTN_DECODER, 16, bad[i].hk, bad[i].d, AH_DTYPE_FP16, 16);
        sp.v_head_size = bad[i].dv, sp.use_mla = bad[i].mla;
        ah_limits lim = {sizeof lim, 4, 64, 8, 128, 64};
        ah_state *st = NULL;
        const ah_status rc = P.ops->state_create(P.ctx, &sp, &lim, &st);
        const char *why = P.ops->context_error(P.ctx);
        snprintf(msg, sizeof msg, " %s: %s", ah_status_str(rc), why);
        report(name, rc == AH_ERR_UNSUPPORTED && !st && strstr(why, bad[i].says), msg);
        if (st) P.ops->state_destroy(st);
    }
}

/* plan(REPLAY) with no capture before it, or of another token count than
 * the capture's (a recorded launch's size), must be refused. */
static void run_replay_refusals(uint64_t *rng)
{
    int32_t ql[3] = {1, 1, 1}, sl[3] = {40, 7, 90}, ql2[2] = {1, 1};
    ath_shape s;
    memset(&s, 0, sizeof s);
    s.attn = AH_ATTN_DECODER, s.q_dtype = s.kv_dtype = AH_DTYPE_FP16;
    s.hq = 8, s.hk = 2, s.d = 64, s.layout = AH_KV_LAYOUT_NHD;
    s.batch = (ath_batch_spec){.num_reqs = 3, .qlens = ql, .seqlens = sl, .block_size = 16};
    ath_work io, io2;
    memset(&io2, 0, sizeof io2);
    ah_state *st = NULL;
    char msg[320] = "";
    int ok = 0;
    if (ath_work_build(&P, &io, &s, rng)) {
        report("plan(REPLAY) refusals", 0, " setup failed");
        return;
    }
    s.batch.num_reqs = 2, s.batch.qlens = ql2;
    if (ath_work_build(&P, &io2, &s, rng) ||
        P.ops->state_create(P.ctx, &io.spec, &io.lim, &st) != AH_OK) {
        snprintf(msg, sizeof msg, " setup failed");
        goto done;
    }
    const ah_status r0 = P.ops->plan(st, &io.B.b, AH_PLAN_REPLAY, NULL);
    const int first = r0 != AH_OK && strstr(P.ops->state_error(st), "without an earlier");
    const ah_status r1 = P.ops->plan(st, &io.B.b, AH_PLAN_CAPTURE, NULL);
    const ah_status r2 = P.ops->plan(st, &io2.B.b, AH_PLAN_REPLAY, NULL);
    snprintf(msg, sizeof msg, " %s", P.ops->state_error(st));
    ok = first && r1 == AH_OK && r2 == AH_ERR_INVALID_ARGUMENT &&
         strstr(P.ops->state_error(st), "captured with 3");
done:
    report("plan(REPLAY) refusals", ok, msg);
    if (st) P.ops->state_destroy(st);
    ath_work_free(&P, &io);
    ath_work_free(&P, &io2);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: xpu_batches PLUGIN.so [KEY=VALUE...]\n");
        return 2;
    }
    int rc = ath_load(&P, argv[1]);
    if (rc) return 1;
    for (int i = 2; i < argc; i++)
        if (ath_set_kv(&P, argv[i])) {
            ath_close(&P);
            return 2;
        }
    if ((rc = ath_probe(&P)) != 0) {
        ath_close(&P);
        return rc;
    }
    if (!(P.desc->caps->features & AH_FEAT_EMPTY_KV)) {
        printf("FAIL xpu does not claim AH_FEAT_EMPTY_KV\n");
        ath_close(&P);
        return 1;
    }
    uint64_t rng = ath_seed(7);
    /* decode batches of few query rows take the split-KV path (the device
     * has compute_units * 256 lanes); 24 requests of 32 heads fill it */
    static const ecase split[] = {
        {"fp16 d128 gqa4", AH_DTYPE_FP16, AH_DTYPE_FP16, 8, 2, 128, 9, 0, SINK_NONE, EMPTY_THIRD, 0,
         0},
        {"bf16 d64 window 32, sinks", AH_DTYPE_BF16, AH_DTYPE_BF16, 4, 1, 64, 7, 32, SINK_FINITE,
         EMPTY_THIRD, 0, 0},
        {"fp32 d128 sinks -inf", AH_DTYPE_FP32, AH_DTYPE_FP32, 4, 4, 128, 6, 0, SINK_NEG_INF,
         EMPTY_THIRD, 0, 0},
        {"fp16 e4m3 cache d64", AH_DTYPE_FP16, AH_DTYPE_FP8_E4M3, 8, 2, 64, 5, 0, SINK_NONE,
         EMPTY_THIRD, 0, 0},
        /* 16 query heads per KV head: the Intel tier's rows hold 8 heads,
         * so each KV head's group runs as two chunks */
        {"fp16 d128 gqa16", AH_DTYPE_FP16, AH_DTYPE_FP16, 32, 2, 128, 7, 0, SINK_FINITE,
         EMPTY_THIRD, 0, 0},
        {"bf16 d128 all empty, sinks", AH_DTYPE_BF16, AH_DTYPE_BF16, 4, 2, 128, 4, 0, SINK_FINITE,
         EMPTY_ALL, 0, 0},
        {"fp16 d64 all empty, sinks -inf", AH_DTYPE_FP16, AH_DTYPE_FP16, 4, 2, 64, 3, 0,
         SINK_NEG_INF, EMPTY_ALL, 0, 0},
        /* MLA through its own kernel on every tier; V from the FP8 key
         * cache with the K scale (v_scale, set to another value, unread) */
        {"bf16 e4m3 cache mla 576/512", AH_DTYPE_BF16, AH_DTYPE_FP8_E4M3, 16, 1, 576, 6, 0,
         SINK_FINITE, EMPTY_THIRD, 0, 1},
    };
    static const ecase unsplit[] = {
        {"fp16 d64 32 heads", AH_DTYPE_FP16, AH_DTYPE_FP16, 32, 8, 64, 24, 0, SINK_NONE,
         EMPTY_THIRD, 0, 0},
        {"bf16 d64 32 heads sinks -inf", AH_DTYPE_BF16, AH_DTYPE_BF16, 32, 4, 64, 24, 0,
         SINK_NEG_INF, EMPTY_THIRD, 0, 0},
        {"fp32 d64 32 heads window 16, sinks", AH_DTYPE_FP32, AH_DTYPE_FP32, 32, 8, 64, 24, 16,
         SINK_FINITE, EMPTY_THIRD, 0, 0},
    };
    /* the split path at two chunk floors: the default and 16 keys */
    static const char *const floors[] = {"128", "16"};
    for (int f = 0; f < 2; f++) {
        if (ath_set(&P, "split_chunk_min", floors[f]) || ath_context(&P, 0, 0)) {
            ath_close(&P);
            return 1;
        }
        char path_name[48];
        snprintf(path_name, sizeof path_name, "split(min %s)", floors[f]);
        for (size_t i = 0; i < sizeof split / sizeof split[0]; i++)
            run_case(&split[i], path_name, &rng);
        if (f == 0)
            for (size_t i = 0; i < sizeof unsplit / sizeof unsplit[0]; i++)
                run_case(&unsplit[i], "unsplit", &rng);
        if (f == 0) run_refusals(), run_replay_refusals(&rng);
        if (f == 0)
            for (int dt = 0; dt < 3; dt++) {
                const ah_dtype t[3] = {AH_DTYPE_FP32, AH_DTYPE_FP16, AH_DTYPE_BF16};
                run_merge(t[dt], 0, &rng);
                run_merge(t[dt], 1, &rng);
            }
        P.ops->context_destroy(P.ctx);
        P.ctx = NULL;
    }
    /* The wide prefill: requests of 64 tokens, 32 query heads, at least
     * 4096 work-items per compute unit in a power of two (so that PoCL's
     * own choice would be groups of 4096); d 128 bf16 as `attnhost bench`'s
     * prefill. */
    uint32_t tokens = 256;
    while (tokens < 128u * (P.probe.multiprocessors ? P.probe.multiprocessors : 1u)) tokens *= 2;
    const ecase wide = {"bf16 d128 32/8 heads, 64-token requests",
                        AH_DTYPE_BF16,
                        AH_DTYPE_BF16,
                        32,
                        8,
                        128,
                        tokens / 64,
                        0,
                        SINK_NONE,
                        EMPTY_NONE,
                        64,
                        0};
    if (ath_set(&P, "split_chunk_min", "128") || ath_context(&P, 0, 0)) {
        ath_close(&P);
        return 1;
    }
    char wide_name[48];
    snprintf(wide_name, sizeof wide_name, "prefill(%u tokens)", tokens);
    run_case(&wide, wide_name, &rng);
    P.ops->context_destroy(P.ctx);
    P.ctx = NULL;
    printf("xpu_batches: %d passed, %d failed\n", g_pass, g_fail);
    ath_close(&P);
    return g_fail ? 1 : 0;
}
