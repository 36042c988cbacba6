/*
 * Correctness driver of the triton plugin: loads triton.so through its ABI
 * (as the host does) and checks, for every feature the plugin claims, that
 * forward matches ah_reference_attention (double precision) and write_kv
 * matches ah_reference_write_kv bit for bit, on random paged batches:
 * prefill, extend and decode mixes, pure decode (split-KV path), GQA/MQA and
 * odd groups, head sizes 64/80/128/256, NHD/HND, block sizes 16..64,
 * fp16/bf16, fp8 e4m3/e5m2 caches with scales, sliding window, soft-cap,
 * ALiBi, sinks, the four attention types, LSE. Also: CUDA-graph capture and
 * replay with other lengths, deterministic mode (bitwise batch invariance),
 * merge_states, and rejection of bad input without writing anything.
 * Outputs are poisoned before each run so unwritten elements show.
 *
 * Usage: triton_check [--quick] [--seed N] [--plugin PATH]
 * Exit: 0 all passed, 1 a failure, 77 skipped (no usable CUDA device).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/reference.h>

#include "tk_test_util.h"

typedef enum { K_MIXED, K_DECODE, K_PREFILL, K_CROSS } tk_kind;

typedef struct tcase {
    const char *name;
    tk_kind kind;
    ah_attn_type type;
    ah_dtype q, kv;
    uint32_t hq, hk, d, bs;
    ah_kv_layout layout;
    uint32_t window;
    float softcap;
    int sinks, alibi;
    uint32_t reqs, max_seq;
    float k_scale, v_scale;
} tcase;

static tk_plugin P;
static const ah_plugin_ops *O;
static int g_fail, g_pass, g_cc;

static DLDataType dl_of(ah_dtype t) { return ah_dtype_to_dl(t); }

/* Random values stored in dtype t (FP8 through the reference's encoder). */
static void fill(void *buf, size_t n, ah_dtype t, float lo, float hi, uint64_t *rng)
{
    for (size_t i = 0; i < n; i++) ah_store_f32(buf, i, t, tk_uniform(rng, lo, hi));
}

static void poison(void *buf, size_t bytes) { memset(buf, 0xff, bytes); }

/* rel-L2 and max-abs (relative to max |ref|) against the conformance
 * suite's tolerances; counts NaN/unwritten elements as failures. */
static int compare(const char *what, const void *out, ah_dtype t, const double *ref, size_t n,
                   ah_dtype kv, char *msg, size_t cap)
{
    double r = t == AH_DTYPE_FP16 ? 2e-3 : 1.6e-2;
    if ((kv == AH_DTYPE_FP8_E4M3 || kv == AH_DTYPE_FP8_E5M2) && r < 5e-3) r = 5e-3;
    double num = 0, den = 0, maxabs = 0, maxref = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double o = t == AH_DTYPE_FP32 ? ((const float *)out)[i] : ah_load_f32(out, i, t);
        if (isinf(ref[i]) && ref[i] < 0) {
            if (!(isinf(o) && o < 0)) bad++;
            continue;
        }
        if (!isfinite(o)) {
            bad++;
            continue;
        }
        double e = fabs(o - ref[i]);
        num += e * e;
        den += ref[i] * ref[i];
        if (e > maxabs) maxabs = e;
        if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    }
    double rel = sqrt(num) / (sqrt(den) > 1e-30 ? sqrt(den) : 1e-30);
    double lim_abs = 8 * r * (maxref > 1e-30 ? maxref : 1.0);
    if (t == AH_DTYPE_FP32) { /* LSE: absolute error in nats */
        rel = maxabs;
        r = 2e-2;
        lim_abs = 2e-2;
    }
    int ok = !bad && rel <= r && maxabs <= lim_abs;
    snprintf(msg + strlen(msg), cap - strlen(msg), " %s[rel %.2e max %.2e%s%zu bad]", what, rel,
             maxabs, ok ? " " : " FAIL ", bad);
    return ok;
}

static void lengths(const tcase *c, uint64_t *rng, uint32_t *ql, uint32_t *sl)
{
    for (uint32_t r = 0; r < c->reqs; r++) {
        uint32_t s = 1 + (uint32_t)(tk_rand(rng) % c->max_seq);
        uint32_t q;
        switch (c->kind) {
        case K_DECODE: q = 1; break;
        case K_PREFILL: q = s; break;
        case K_CROSS: q = 1 + (uint32_t)(tk_rand(rng) % 70); break;
        default: /* mixed: decode, extend, whole prefill */
            q = r % 3 == 0 ? 1 : r % 3 == 1 ? 1 + (uint32_t)(tk_rand(rng) % s) : s;
        }
        if (c->type != AH_ATTN_DECODER && c->kind != K_CROSS) q = s; /* encoders: whole sequence */
        if (c->kind != K_CROSS && q > s) q = s;
        ql[r] = q;
        sl[r] = s;
    }
}

typedef struct run_io {
    tk_batch B;
    ah_layer_spec spec;
    void *q, *key, *val, *kc, *vc;
    float *sinks, *alibi;
    size_t cache_elems, q_elems, kv_elems;
    tk_dev dq, dk, dv, dkc, dvc, dout, dlse, dsinks, dalibi;
} run_io;

static void io_free(run_io *io, ah_context *ctx)
{
    free(io->q); free(io->key); free(io->val); free(io->kc); free(io->vc);
    free(io->sinks); free(io->alibi);
    tk_dev *d[] = {&io->dq, &io->dk, &io->dv, &io->dkc, &io->dvc, &io->dout, &io->dlse,
                   &io->dsinks, &io->dalibi};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) tk_dev_free(&P, ctx, d[i]);
    tk_batch_free(&P, ctx, &io->B);
}

/* Inputs for case c on lengths ql/sl; device copies; spec. */
static int io_make(run_io *io, ah_context *ctx, const tcase *c, const uint32_t *ql, const uint32_t *sl,
                   uint32_t min_rows, uint64_t *rng)
{
    memset(io, 0, sizeof *io);
    if (tk_batch_make(&P, ctx, &io->B, c->reqs, ql, sl, c->bs, 7, c->kind == K_CROSS, rng)) return -1;
    ah_layer_spec *s = &io->spec;
    *s = (ah_layer_spec){.struct_size = sizeof(ah_layer_spec), .attn_type = c->type, .num_q_heads = c->hq,
                         .num_kv_heads = c->hk, .qk_head_size = c->d, .v_head_size = c->d, .q_dtype = c->q,
                         .kv_dtype = c->kv, .block_size = c->bs, .kv_layout = c->layout,
                         .sliding_window = c->window, .softcap = c->softcap,
                         .use_sinks = (uint32_t)c->sinks, .use_alibi = (uint32_t)c->alibi};
    s->scale = 1.0f / sqrtf((float)c->d);
    uint32_t T = io->B.num_tokens;
    /* Tensors hold at least min_rows tokens (a captured graph's buffers
     * are sized for the largest batch it replays). */
    uint32_t rows = T > min_rows ? T : min_rows;
    io->q_elems = (size_t)T * c->hq * c->d;
    io->kv_elems = (size_t)rows * c->hk * c->d;
    io->cache_elems = (size_t)io->B.num_blocks * c->bs * c->hk * c->d;
    size_t qb = ah_dtype_size(c->q), cb = ah_dtype_size(c->kv);
    size_t q_alloc = (size_t)rows * c->hq * c->d;
    io->q = malloc(q_alloc * qb + 16);
    io->key = malloc(io->kv_elems * qb + 16);
    io->val = malloc(io->kv_elems * qb + 16);
    io->kc = malloc(io->cache_elems * cb);
    io->vc = malloc(io->cache_elems * cb);
    io->sinks = malloc(4 * c->hq);
    io->alibi = malloc(4 * c->hq);
    if (!io->q || !io->key || !io->val || !io->kc || !io->vc || !io->sinks || !io->alibi) return -1;
    float ks = c->k_scale ? c->k_scale : 1, vs = c->v_scale ? c->v_scale : 1;
    int fp8 = c->kv == AH_DTYPE_FP8_E4M3 || c->kv == AH_DTYPE_FP8_E5M2;
    fill(io->q, q_alloc, c->q, -2.f, 2.f, rng);
    fill(io->key, io->kv_elems, c->q, -2.f, 2.f, rng);
    fill(io->val, io->kv_elems, c->q, -2.f, 2.f, rng);
    fill(io->kc, io->cache_elems, c->kv, fp8 ? -2.f / ks : -2.f, fp8 ? 2.f / ks : 2.f, rng);
    fill(io->vc, io->cache_elems, c->kv, fp8 ? -2.f / vs : -2.f, fp8 ? 2.f / vs : 2.f, rng);
    for (uint32_t h = 0; h < c->hq; h++) {
        io->sinks[h] = tk_uniform(rng, -1.f, 3.f);
        io->alibi[h] = exp2f(-8.0f * (float)(h + 1) / (float)c->hq);
    }
    int64_t sq[3] = {rows ? rows : 1, c->hq, c->d}, sk[3] = {rows ? rows : 1, c->hk, c->d};
    int64_t sc[4] = {io->B.num_blocks, c->bs, c->hk, c->d}, sl2[2] = {rows ? rows : 1, c->hq}, sh = c->hq;
    if (c->layout == AH_KV_LAYOUT_HND) {
        sc[1] = c->hk;
        sc[2] = c->bs;
    }
    DLDataType f32 = {kDLFloat, 32, 1};
    if (tk_dev_alloc(&P, ctx, &io->dq, dl_of(c->q), 3, sq) || tk_upload(&P, ctx, &io->dq, io->q) ||
        tk_dev_alloc(&P, ctx, &io->dk, dl_of(c->q), 3, sk) || tk_upload(&P, ctx, &io->dk, io->key) ||
        tk_dev_alloc(&P, ctx, &io->dv, dl_of(c->q), 3, sk) || tk_upload(&P, ctx, &io->dv, io->val) ||
        tk_dev_alloc(&P, ctx, &io->dkc, dl_of(c->kv), 4, sc) || tk_upload(&P, ctx, &io->dkc, io->kc) ||
        tk_dev_alloc(&P, ctx, &io->dvc, dl_of(c->kv), 4, sc) || tk_upload(&P, ctx, &io->dvc, io->vc) ||
        tk_dev_alloc(&P, ctx, &io->dout, dl_of(c->q), 3, sq) ||
        tk_dev_alloc(&P, ctx, &io->dlse, f32, 2, sl2) ||
        tk_dev_alloc(&P, ctx, &io->dsinks, f32, 1, &sh) || tk_upload(&P, ctx, &io->dsinks, io->sinks) ||
        tk_dev_alloc(&P, ctx, &io->dalibi, f32, 1, &sh) || tk_upload(&P, ctx, &io->dalibi, io->alibi))
        return -1;
    return 0;
}

static ah_limits limits_for(const tk_batch *B, uint32_t extra)
{
    return (ah_limits){sizeof(ah_limits), B->num_reqs + extra, B->num_tokens + 64 * extra,
                       B->bt_stride, B->max_seq, B->num_blocks};
}

/* Check the device caches against the reference's write, the outputs
 * against the reference's attention. Appends to msg; returns 1 if fine. */
static int verify(run_io *io, ah_context *ctx, const tcase *c, int check_cache, char *msg, size_t cap)
{
    int ok = 1;
    size_t cb = ah_dtype_size(c->kv);
    ah_error err = {{0}};
    if (check_cache) {
        if (ah_reference_write_kv(&io->spec, &io->B.b, io->key, io->val, io->kc, io->vc, c->k_scale,
                                  c->v_scale, &err) != AH_OK) {
            snprintf(msg + strlen(msg), cap - strlen(msg), " reference write_kv: %s", err.msg);
            return 0;
        }
        void *kd = malloc(io->cache_elems * cb), *vd = malloc(io->cache_elems * cb);
        tk_download(&P, ctx, kd, &io->dkc);
        tk_download(&P, ctx, vd, &io->dvc);
        size_t diff = 0;
        for (size_t i = 0; i < io->cache_elems * cb; i++)
            diff += ((uint8_t *)kd)[i] != ((uint8_t *)io->kc)[i];
        for (size_t i = 0; i < io->cache_elems * cb; i++)
            diff += ((uint8_t *)vd)[i] != ((uint8_t *)io->vc)[i];
        snprintf(msg + strlen(msg), cap - strlen(msg), " cache[%zu bytes differ]", diff);
        ok &= diff == 0;
        free(kd);
        free(vd);
    }
    uint32_t T = io->B.num_tokens;
    double *ref = malloc(sizeof(double) * (io->q_elems + 1)), *rlse = malloc(sizeof(double) * ((size_t)T * c->hq + 1));
    ah_ref_inputs in = {sizeof in, &io->spec, &io->B.b, io->q, io->kc, io->vc,
                        c->sinks ? io->sinks : NULL, c->alibi ? io->alibi : NULL, c->k_scale, c->v_scale, NULL, NULL};
    if (ah_reference_attention(&in, ref, rlse, &err) != AH_OK) {
        snprintf(msg + strlen(msg), cap - strlen(msg), " reference: %s", err.msg);
        free(ref);
        free(rlse);
        return 0;
    }
    void *out = malloc(io->dout.bytes);
    float *lse = malloc(io->dlse.bytes);
    tk_download(&P, ctx, out, &io->dout);
    tk_download(&P, ctx, lse, &io->dlse);
    ok &= compare("out", out, c->q, ref, io->q_elems, c->kv, msg, cap);
    ok &= compare("lse", lse, AH_DTYPE_FP32, rlse, (size_t)T * c->hq, c->kv, msg, cap);
    free(out);
    free(lse);
    free(ref);
    free(rlse);
    return ok;
}

static ah_forward_args fwd_args(run_io *io, const tcase *c, void *stream)
{
    return (ah_forward_args){sizeof(ah_forward_args), &io->dq.t, &io->dk.t, &io->dv.t, &io->dkc.t,
                             &io->dvc.t, &io->dout.t, &io->dlse.t,
                             c->sinks ? &io->dsinks.t : NULL, c->alibi ? &io->dalibi.t : NULL,
                             c->k_scale, c->v_scale, stream};
}

static void poison_outputs(run_io *io, ah_context *ctx)
{
    void *buf = malloc(io->dout.bytes > io->dlse.bytes ? io->dout.bytes : io->dlse.bytes);
    poison(buf, io->dout.bytes);
    tk_upload(&P, ctx, &io->dout, buf);
    tk_upload(&P, ctx, &io->dlse, buf);
    free(buf);
}

static void report(const char *name, int ok, const char *msg)
{
    printf("%-4s %-52s%s\n", ok ? "ok" : "FAIL", name, msg);
    fflush(stdout);
    if (ok) g_pass++;
    else g_fail++;
}

#define TRY(what, call)                                                                          \
    do {                                                                                         \
        ah_status s_ = (call);                                                                   \
        if (s_ != AH_OK) {                                                                       \
            snprintf(msg + strlen(msg), sizeof msg - strlen(msg), " %s: %s", what,               \
                     st ? O->state_error(st) : O->context_error(ctx));                           \
            goto done;                                                                           \
        }                                                                                        \
    } while (0)

/* Eager: plan, write_kv, forward, compare. */
static void run_eager(ah_context *ctx, const tcase *c, uint64_t *rng)
{
    char msg[1024] = "";
    uint32_t ql[512], sl[512];
    lengths(c, rng, ql, sl);
    run_io io;
    ah_state *st = NULL;
    int ok = 0;
    if (io_make(&io, ctx, c, ql, sl, 0, rng)) {
        snprintf(msg, sizeof msg, " setup failed");
        goto done;
    }
    ah_limits lim = limits_for(&io.B, 0);
    TRY("state_create", O->state_create(ctx, &io.spec, &lim, &st));
    poison_outputs(&io, ctx);
    TRY("plan", O->plan(st, &io.B.b, AH_PLAN_EAGER, NULL));
    ah_kv_write_args w = {sizeof w, &io.dk.t, &io.dv.t, &io.dkc.t, &io.dvc.t, c->k_scale, c->v_scale, NULL};
    if (c->kind != K_CROSS) TRY("write_kv", O->write_kv(st, &w));
    ah_forward_args a = fwd_args(&io, c, NULL);
    TRY("forward", O->forward(st, &a));
    TRY("synchronize", O->synchronize(ctx, NULL));
    ok = verify(&io, ctx, c, c->kind != K_CROSS, msg, sizeof msg);
done:
    report(c->name, ok, msg);
    if (st) O->state_destroy(st);
    io_free(&io, ctx);
}

/* Graph: capture with one batch, replay with another of other lengths
 * (same request count bound), compare the replay with the reference. */
static void run_graph(ah_context *ctx, const tcase *c, uint64_t *rng)
{
    char msg[1024] = "";
    char name[96];
    snprintf(name, sizeof name, "graph %s", c->name);
    uint32_t ql[512], sl[512], ql2[512], sl2[512];
    lengths(c, rng, ql, sl);
    lengths(c, rng, ql2, sl2);
    run_io a_io, b_io;
    memset(&a_io, 0, sizeof a_io);
    memset(&b_io, 0, sizeof b_io);
    ah_state *st = NULL;
    ah_graph *g = NULL;
    void *stream = NULL;
    int ok = 0;
    tcase c2 = *c;
    if (io_make(&a_io, ctx, c, ql, sl, 0, rng)) goto done;
    c2.reqs = c->reqs > 2 ? c->reqs - 1 : c->reqs; /* the replay: fewer requests too */
    if (io_make(&b_io, ctx, &c2, ql2, sl2, a_io.B.num_tokens, rng)) goto done;
    /* Limits cover both; the replay's tensors must be the captured ones, so
     * replay data is copied into the captured buffers. */
    ah_limits lim = limits_for(&a_io.B, 2);
    if (b_io.B.bt_stride > lim.max_blocks_per_req) lim.max_blocks_per_req = b_io.B.bt_stride;
    if (b_io.B.max_seq > lim.max_seq_len) lim.max_seq_len = b_io.B.max_seq;
    if (b_io.B.num_tokens > lim.max_num_tokens) lim.max_num_tokens = b_io.B.num_tokens;
    TRY("stream_create", O->stream_create(ctx, &stream));
    TRY("state_create", O->state_create(ctx, &a_io.spec, &lim, &st));
    TRY("plan(CAPTURE)", O->plan(st, &a_io.B.b, AH_PLAN_CAPTURE, stream));
    /* Capture forward over b's tensors (sized for b): replay computes b. */
    ah_forward_args fa = fwd_args(&b_io, &c2, stream);
    TRY("graph_begin", O->graph_begin(ctx, stream));
    ah_status fs = O->forward(st, &fa);
    ah_status es = O->graph_end(ctx, stream, &g);
    TRY("forward (capturing)", fs);
    TRY("graph_end", es);
    poison_outputs(&b_io, ctx);
    TRY("plan(REPLAY)", O->plan(st, &b_io.B.b, AH_PLAN_REPLAY, stream));
    TRY("graph_launch", O->graph_launch(ctx, g, stream));
    TRY("synchronize", O->synchronize(ctx, stream));
    ok = verify(&b_io, ctx, &c2, 0, msg, sizeof msg);
done:
    report(name, ok, msg);
    if (g) O->graph_destroy(ctx, g);
    if (st) O->state_destroy(st);
    if (stream) O->stream_destroy(ctx, stream);
    io_free(&a_io, ctx);
    io_free(&b_io, ctx);
}

/* Deterministic mode: request 0 alone and inside a larger batch give the
 * same bits (split-KV decode). */
static void run_deterministic(const char *path, const tcase *c, uint64_t *rng)
{
    char msg[1024] = "";
    tk_plugin p2;
    ah_context *ctx = NULL;
    ah_state *s1 = NULL, *s2 = NULL;
    run_io big, one;
    memset(&big, 0, sizeof big);
    memset(&one, 0, sizeof one);
    ah_state *st = NULL;
    int ok = 0;
    const char *why = NULL;
    if (tk_plugin_open(&p2, path)) goto done;
    tk_plugin_set(&p2, "deterministic", "true");
    tk_plugin_set(&p2, "num_kv_splits", "8");
    tk_plugin_set(&p2, "split_tile", "128");
    if (p2.ops->context_create(&p2.host, &p2.opts, &ctx, &why) != AH_OK) {
        snprintf(msg, sizeof msg, " context: %s", why);
        goto done;
    }
    {
        uint32_t ql[64], sl[64];
        lengths(c, rng, ql, sl);
        tcase c1 = *c;
        c1.reqs = 1;
        uint64_t seed = *rng;
        if (io_make(&big, ctx, c, ql, sl, 0, rng)) goto done;
        /* Same request 0 data: rebuild with the same seed, one request. */
        uint64_t r2 = seed;
        if (io_make(&one, ctx, &c1, ql, sl, 0, &r2)) goto done;
        /* Make request 0's cache rows and query identical: copy big's. */
        size_t qb = ah_dtype_size(c->q), cb = ah_dtype_size(c->kv);
        memcpy(one.q, big.q, (size_t)c->hq * c->d * qb);
        uint32_t nb = (sl[0] + c->bs - 1) / c->bs;
        size_t per_block = (size_t)c->bs * c->hk * c->d;
        for (uint32_t j = 0; j < nb; j++) {
            size_t bb = (size_t)big.B.block_table[j], bo = (size_t)one.B.block_table[j];
            memcpy((char *)one.kc + bo * per_block * cb, (char *)big.kc + bb * per_block * cb, per_block * cb);
            memcpy((char *)one.vc + bo * per_block * cb, (char *)big.vc + bb * per_block * cb, per_block * cb);
        }
        tk_upload(&p2, ctx, &one.dq, one.q);
        tk_upload(&p2, ctx, &one.dkc, one.kc);
        tk_upload(&p2, ctx, &one.dvc, one.vc);
        ah_limits l1 = limits_for(&big.B, 0), l2 = limits_for(&one.B, 0);
        const ah_plugin_ops *o = p2.ops;
        if (o->state_create(ctx, &big.spec, &l1, &s1) || o->state_create(ctx, &one.spec, &l2, &s2) ||
            o->plan(s1, &big.B.b, AH_PLAN_EAGER, NULL) || o->plan(s2, &one.B.b, AH_PLAN_EAGER, NULL)) {
            snprintf(msg, sizeof msg, " setup: %s", o->context_error(ctx));
            goto done;
        }
        ah_forward_args fb = fwd_args(&big, c, NULL), f1 = fwd_args(&one, &c1, NULL);
        if (o->forward(s1, &fb) || o->forward(s2, &f1) || o->synchronize(ctx, NULL)) {
            snprintf(msg, sizeof msg, " forward: %s / %s", o->state_error(s1), o->state_error(s2));
            goto done;
        }
        size_t n = (size_t)c->hq * c->d * qb;
        char *ob = malloc(big.dout.bytes), *o1 = malloc(one.dout.bytes);
        tk_download(&p2, ctx, ob, &big.dout);
        tk_download(&p2, ctx, o1, &one.dout);
        ok = memcmp(ob, o1, n) == 0;
        snprintf(msg, sizeof msg, " request 0 alone vs in %u requests: %s", c->reqs,
                 ok ? "bitwise equal" : "DIFFER");
        free(ob);
        free(o1);
    }
done:
    report("deterministic decode batch invariance", ok, msg);
    if (ctx) {
        if (s1) p2.ops->state_destroy(s1);
        if (s2) p2.ops->state_destroy(s2);
        io_free(&big, ctx);
        io_free(&one, ctx);
        p2.ops->context_destroy(ctx);
    }
    (void)st;
}

static void run_merge(ah_context *ctx, ah_dtype t, uint32_t T, uint32_t H, uint32_t D, uint64_t *rng)
{
    char msg[512] = "", name[64];
    snprintf(name, sizeof name, "merge_states %s T%u H%u D%u", ah_dtype_name(t), T, H, D);
    size_t n = (size_t)T * H * D, m = (size_t)T * H, eb = ah_dtype_size(t);
    void *va = malloc(n * eb), *vb = malloc(n * eb), *vo = malloc(n * eb);
    float *la = malloc(4 * m), *lb = malloc(4 * m), *lo = malloc(4 * m);
    double *da = malloc(8 * n), *db = malloc(8 * n), *dla = malloc(8 * m), *dlb = malloc(8 * m),
           *ro = malloc(8 * n), *rl = malloc(8 * m);
    fill(va, n, t, -2, 2, rng);
    fill(vb, n, t, -2, 2, rng);
    for (size_t i = 0; i < m; i++) {
        la[i] = tk_uniform(rng, -5, 5);
        lb[i] = tk_uniform(rng, -5, 5);
        if (i % 7 == 0) la[i] = -INFINITY; /* an empty part */
        if (i % 21 == 0) lb[i] = -INFINITY; /* both empty */
        dla[i] = la[i];
        dlb[i] = lb[i];
    }
    for (size_t i = 0; i < n; i++) {
        da[i] = ah_load_f32(va, i, t);
        db[i] = ah_load_f32(vb, i, t);
    }
    ah_reference_merge_states(T, H, D, da, dla, db, dlb, ro, rl);
    tk_dev a, b, o, l1, l2, l3;
    int64_t sv[3] = {T, H, D}, sl[2] = {T, H};
    DLDataType f32 = {kDLFloat, 32, 1};
    int ok = 0;
    ah_state *st = NULL;
    tk_dev_alloc(&P, ctx, &a, dl_of(t), 3, sv); tk_upload(&P, ctx, &a, va);
    tk_dev_alloc(&P, ctx, &b, dl_of(t), 3, sv); tk_upload(&P, ctx, &b, vb);
    tk_dev_alloc(&P, ctx, &o, dl_of(t), 3, sv);
    tk_dev_alloc(&P, ctx, &l1, f32, 2, sl); tk_upload(&P, ctx, &l1, la);
    tk_dev_alloc(&P, ctx, &l2, f32, 2, sl); tk_upload(&P, ctx, &l2, lb);
    tk_dev_alloc(&P, ctx, &l3, f32, 2, sl);
    ah_merge_args ma = {sizeof ma, &a.t, &l1.t, &b.t, &l2.t, &o.t, &l3.t, NULL};
    TRY("merge_states", O->merge_states(ctx, &ma));
    TRY("synchronize", O->synchronize(ctx, NULL));
    tk_download(&P, ctx, vo, &o);
    tk_download(&P, ctx, lo, &l3);
    ok = compare("out", vo, t, ro, n, t, msg, sizeof msg);
    ok &= compare("lse", lo, AH_DTYPE_FP32, rl, m, t, msg, sizeof msg);
done:
    report(name, ok, msg);
    tk_dev *all[] = {&a, &b, &o, &l1, &l2, &l3};
    for (int i = 0; i < 6; i++) tk_dev_free(&P, ctx, all[i]);
    free(va); free(vb); free(vo); free(la); free(lb); free(lo);
    free(da); free(db); free(dla); free(dlb); free(ro); free(rl);
}

/* Bad input: a q tensor of the wrong dtype must fail with a message and
 * leave the output untouched. */
static void run_bad_input(ah_context *ctx, const tcase *c, uint64_t *rng)
{
    char msg[1024] = "";
    uint32_t ql[64], sl[64];
    lengths(c, rng, ql, sl);
    run_io io;
    ah_state *st = NULL;
    int ok = 0;
    if (io_make(&io, ctx, c, ql, sl, 0, rng)) goto done;
    ah_limits lim = limits_for(&io.B, 0);
    TRY("state_create", O->state_create(ctx, &io.spec, &lim, &st));
    TRY("plan", O->plan(st, &io.B.b, AH_PLAN_EAGER, NULL));
    poison_outputs(&io, ctx);
    ah_forward_args a = fwd_args(&io, c, NULL);
    DLTensor badq = io.dq.t;
    badq.dtype.bits = 32;
    badq.dtype.code = kDLFloat;
    a.q = &badq;
    ah_status s = O->forward(st, &a);
    O->synchronize(ctx, NULL);
    char *out = malloc(io.dout.bytes);
    tk_download(&P, ctx, out, &io.dout);
    size_t touched = 0;
    for (size_t i = 0; i < io.dout.bytes; i++) touched += (uint8_t)out[i] != 0xff;
    free(out);
    ok = s == AH_ERR_INVALID_ARGUMENT && touched == 0 && strstr(O->state_error(st), "q") != NULL;
    snprintf(msg, sizeof msg, " status %d, \"%s\", %zu output bytes touched", s, O->state_error(st),
             touched);
done:
    report("bad input rejected, nothing written", ok, msg);
    if (st) O->state_destroy(st);
    io_free(&io, ctx);
}

int main(int argc, char **argv)
{
    int quick = 0;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    const char *path = TK_PLUGIN_PATH;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0) | 1;
        else if (!strcmp(argv[i], "--plugin") && i + 1 < argc) path = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--quick] [--seed N] [--plugin PATH]\n", argv[0]);
            return 2;
        }
    }
    if (tk_plugin_open(&P, path)) return 1;
    O = P.ops;
    ah_probe_info pi;
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    O->probe(&P.host, &pi);
    if (!pi.usable) {
        printf("skipped: %s\n", pi.reason);
        return 77;
    }
    g_cc = (int)pi.compute_capability;
    printf("device: %s (%s, %u SMs), %s\n", pi.device_name, pi.arch, pi.multiprocessors,
           pi.driver_version);
    ah_context *ctx = NULL;
    const char *why = NULL;
    /* A device index past the process's devices is UNAVAILABLE, with a reason. */
    ah_context_options past = {sizeof past, (int32_t)pi.device_count};
    ah_status ps = O->context_create(&P.host, &past, &ctx, &why);
    if (ps != AH_ERR_UNAVAILABLE || ctx || !why || !*why) {
        printf("FAIL context_create(device %u): status %d, want UNAVAILABLE with a reason\n",
               pi.device_count, (int)ps);
        if (ctx) O->context_destroy(ctx);
        return 1;
    }
    printf("ok   %-52s%s\n", "device index past the last", why);
    g_pass++;
    ctx = NULL;
    if (O->context_create(&P.host, &P.opts, &ctx, &why) != AH_OK) {
        printf("FAIL context_create: %s\n", why);
        return 1;
    }
    const ah_dtype BF = AH_DTYPE_BF16, FH = AH_DTYPE_FP16, E4 = AH_DTYPE_FP8_E4M3, E5 = AH_DTYPE_FP8_E5M2;
    const ah_kv_layout NHD = AH_KV_LAYOUT_NHD, HND = AH_KV_LAYOUT_HND;
    const ah_attn_type DEC = AH_ATTN_DECODER;
    const tcase cases[] = {
        /* name kind type q kv hq hk d bs layout window softcap sinks alibi reqs max_seq ks vs */
        {"mixed bf16 gqa4 d128 bs16 nhd", K_MIXED, DEC, BF, BF, 8, 2, 128, 16, NHD, 0, 0, 0, 0, 7, 300, 0, 0},
        {"mixed fp16 gqa2 d64 bs32 hnd", K_MIXED, DEC, FH, FH, 4, 2, 64, 32, HND, 0, 0, 0, 0, 6, 260, 0, 0},
        {"mixed bf16 mha d256 bs16 nhd", K_MIXED, DEC, BF, BF, 4, 4, 256, 16, NHD, 0, 0, 0, 0, 4, 200, 0, 0},
        {"mixed fp16 gqa2 d80 bs48 nhd", K_MIXED, DEC, FH, FH, 4, 2, 80, 48, NHD, 0, 0, 0, 0, 5, 230, 0, 0},
        {"mixed bf16 group6 d128 bs16 hnd", K_MIXED, DEC, BF, BF, 12, 2, 128, 16, HND, 0, 0, 0, 0, 5, 200, 0, 0},
        {"mixed fp16 mqa16 d96 bs16 nhd", K_MIXED, DEC, FH, FH, 16, 1, 96, 16, NHD, 0, 0, 0, 0, 5, 200, 0, 0},
        {"mixed bf16 window+softcap+sinks+alibi", K_MIXED, DEC, BF, BF, 8, 2, 128, 16, NHD, 37, 30.f, 1, 1, 6, 300, 0, 0},
        {"mixed fp16 window64 sinks d64", K_MIXED, DEC, FH, FH, 8, 4, 64, 16, HND, 64, 0, 1, 0, 6, 400, 0, 0},
        {"prefill fp16 gqa4 d128 long", K_PREFILL, DEC, FH, FH, 8, 2, 128, 16, NHD, 0, 0, 0, 0, 2, 1500, 0, 0},
        {"decode bf16 gqa8 d128 (split-KV)", K_DECODE, DEC, BF, BF, 16, 2, 128, 16, NHD, 0, 0, 0, 0, 9, 3000, 0, 0},
        {"decode fp16 gqa4 d64 hnd bs32", K_DECODE, DEC, FH, FH, 8, 2, 64, 32, HND, 0, 0, 0, 0, 7, 2000, 0, 0},
        {"decode bf16 d256 mha", K_DECODE, DEC, BF, BF, 4, 4, 256, 16, NHD, 0, 0, 0, 0, 5, 1200, 0, 0},
        {"decode fp16 group24 d128 (2 head blocks)", K_DECODE, DEC, FH, FH, 48, 2, 128, 16, NHD, 0, 0, 0, 0, 3, 900, 0, 0},
        {"decode bf16 window+softcap+sinks+alibi", K_DECODE, DEC, BF, BF, 8, 2, 128, 16, NHD, 200, 50.f, 1, 1, 8, 2000, 0, 0},
        {"encoder fp16 window16 alibi d64", K_PREFILL, AH_ATTN_ENCODER, FH, FH, 4, 2, 64, 16, NHD, 16, 0, 0, 1, 4, 150, 0, 0},
        {"encoder-only bf16 sinks softcap d128", K_PREFILL, AH_ATTN_ENCODER_ONLY, BF, BF, 8, 8, 128, 32, HND, 0, 20.f, 1, 0, 3, 200, 0, 0},
        {"encoder-only bf16 gqa4 d128 long", K_PREFILL, AH_ATTN_ENCODER_ONLY, BF, BF, 8, 2, 128, 16, NHD, 0, 0, 0, 0, 2, 1100, 0, 0},
        {"cross fp16 d64", K_CROSS, AH_ATTN_ENCODER_DECODER, FH, FH, 8, 2, 64, 16, NHD, 0, 0, 0, 0, 4, 180, 0, 0},
        {"mixed bf16 fp8e4m3 kv scales", K_MIXED, DEC, BF, E4, 8, 2, 128, 16, NHD, 0, 0, 0, 0, 6, 300, 0.05f, 0.02f},
        {"mixed fp16 fp8e5m2 kv scales hnd", K_MIXED, DEC, FH, E5, 8, 2, 64, 16, HND, 0, 0, 0, 0, 6, 300, 0.5f, 0.25f},
        {"decode bf16 fp8e4m3 kv window sinks", K_DECODE, DEC, BF, E4, 16, 2, 128, 16, NHD, 100, 0, 1, 0, 6, 1500, 0.03f, 0.07f},
        {"decode fp16 fp8e5m2 kv d256", K_DECODE, DEC, FH, E5, 4, 2, 256, 16, NHD, 0, 0, 0, 0, 4, 800, 0.1f, 0.1f},
    };
    uint64_t rng = seed;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const tcase *c = &cases[i];
        if ((c->kv == E4 || c->kv == E5) && g_cc < 90) {
            printf("skip %-52s fp8 KV needs sm_90\n", c->name);
            continue;
        }
        if (quick && c->max_seq > 1000 && c->kind == K_PREFILL) continue;
        run_eager(ctx, c, &rng);
    }
    run_graph(ctx, &cases[0], &rng);  /* mixed: unified kernel */
    run_graph(ctx, &cases[9], &rng);  /* pure decode: split-KV */
    run_graph(ctx, &cases[13], &rng); /* decode with every feature */
    run_merge(ctx, BF, 37, 8, 128, &rng);
    run_merge(ctx, FH, 19, 4, 80, &rng);
    run_bad_input(ctx, &cases[0], &rng);
    O->context_destroy(ctx);
    run_deterministic(path, &cases[9], &rng);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
