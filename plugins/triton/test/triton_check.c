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
 * merge_states, requests without keys (AH_FEAT_EMPTY_KV: seq_len 0 in
 * decode batches, garbage block-table rows) on the split-KV and unified
 * paths, released blocks (AH_FEAT_RELEASED_BLOCKS: negative entries for
 * the blocks a window hides) on both paths, ragged layers
 * (AH_FEAT_RAGGED_KV: packed keys, qk 192 / v 128 and equal head sizes,
 * bottom-right and context placement), speculative tree masks
 * (AH_FEAT_TREE_MASK: mixed and pure-decode batches, graphs captured with
 * a mask replaying another mask elsewhere in memory and no mask, and a
 * graph captured without one refusing a masked batch), and rejection of
 * bad input without writing anything.
 * Outputs are poisoned before each run so unwritten elements show.
 *
 * The plugin gets the host's own services (tests/helpers/ath.h).
 *
 * Usage: triton_check [--quick] [--seed N] [--plugin PATH]
 * Exit: 0 all passed, 1 a failure, 77 skipped (no usable CUDA device).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/reference.h>

#include "ath.h"

typedef enum { K_MIXED, K_DECODE, K_PREFILL } tk_kind;

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

static ath_host P;
static const ah_plugin_ops *O;
static const ah_context_options dev0 = {sizeof(ah_context_options), 0};
static int g_fail, g_pass, g_cc;

/* rel-L2 and max-abs (relative to max |ref|) against the conformance
 * suite's tolerances; counts NaN/unwritten elements as failures. */
static int verdict(const char *what, const ath_cmp *c, ah_dtype t, ah_dtype kv, char *msg,
                   size_t cap)
{
    double r = t == AH_DTYPE_FP16 ? 2e-3 : 1.6e-2;
    if ((kv == AH_DTYPE_FP8_E4M3 || kv == AH_DTYPE_FP8_E5M2) && r < 5e-3) r = 5e-3;
    double rel = c->rel_l2, lim_abs = 8 * r * (c->max_ref > 1e-30 ? c->max_ref : 1.0);
    if (t == AH_DTYPE_FP32) { /* LSE: absolute error in nats */
        rel = c->max_abs;
        r = 2e-2;
        lim_abs = 2e-2;
    }
    int ok = !c->nonfinite && rel <= r && c->max_abs <= lim_abs;
    snprintf(msg + strlen(msg), cap - strlen(msg), " %s[rel %.2e max %.2e%s%zu bad]", what, rel,
             c->max_abs, ok ? " " : " FAIL ", c->nonfinite);
    return ok;
}

static int compare(const char *what, const void *out, ah_dtype t, const double *ref, size_t n,
                   ah_dtype kv, char *msg, size_t cap)
{
    const ath_cmp c = ath_compare(out, t, ref, n, 0, 0);
    return verdict(what, &c, t, kv, msg, cap);
}

static void lengths(const tcase *c, uint64_t *rng, int32_t *ql, int32_t *sl)
{
    for (uint32_t r = 0; r < c->reqs; r++) {
        int32_t s = 1 + (int32_t)(ath_rand_u64(rng) % c->max_seq);
        int32_t q;
        switch (c->kind) {
        case K_DECODE: q = 1; break;
        case K_PREFILL: q = s; break;
        default: /* mixed: decode, extend, whole prefill */
            q = r % 3 == 0 ? 1 : r % 3 == 1 ? 1 + (int32_t)(ath_rand_u64(rng) % (uint32_t)s) : s;
        }
        if (c->type != AH_ATTN_DECODER) q = s; /* bidirectional: the whole sequence */
        if (q > s) q = s;
        ql[r] = q;
        sl[r] = s;
    }
}

/* Inputs for case c on lengths ql/sl and their device copies: a pitched
 * table (3 spare columns; unused entries would fault), 7 spare blocks,
 * values in [-2, 2) (FP8 caches: / scale), new K/V for write_kv, tensors
 * of at least min_rows tokens (a captured graph's buffers are sized for
 * the largest batch it replays). */
static int io_make(ath_host *h, ath_work *io, const tcase *c, const int32_t *ql, const int32_t *sl,
                   uint32_t min_rows, uint32_t min_blocks, uint64_t *rng)
{
    ath_shape s;
    memset(&s, 0, sizeof s);
    /* the "encoder" cases: decoder layers with causal = OFF (ABI 2.1), the
     * bidirectional attention over the paged cache the plugin serves */
    s.attn = AH_ATTN_DECODER, s.q_dtype = c->q, s.kv_dtype = c->kv;
    s.causal = c->type == AH_ATTN_DECODER ? AH_CAUSAL_BY_TYPE : AH_CAUSAL_OFF;
    s.hq = c->hq, s.hk = c->hk, s.d = c->d, s.layout = c->layout;
    s.window = c->window, s.softcap = c->softcap, s.sinks = (uint32_t)c->sinks,
    s.alibi = (uint32_t)c->alibi;
    s.k_scale = c->k_scale, s.v_scale = c->v_scale;
    s.scale = 1.0f / sqrtf((float)c->d);
    s.q_amp = s.kv_amp = s.new_amp = 2.f;
    s.new_kv = 1;
    s.min_rows = min_rows;
    s.batch = (ath_batch_spec){.num_reqs = c->reqs,
                               .qlens = ql,
                               .seqlens = sl,
                               .block_size = c->bs,
                               .table_pad = 3,
                               .extra_blocks = 7,
                               .min_blocks = min_blocks,
                               .unused_entry = 0x3fffffff};
    return ath_work_build(h, io, &s, rng);
}

static ah_limits limits_for(const ath_batch *B, uint32_t extra)
{
    return (ah_limits){sizeof(ah_limits), B->num_reqs + extra, B->num_tokens + 64 * extra,
                       B->width,          B->max_seq,          B->num_blocks};
}

/* Check the device caches against the reference's write, the outputs
 * against the reference's attention. Appends to msg; returns 1 if fine. */
/* Requests without keys (AH_FEAT_EMPTY_KV): every third of a decode batch. */
static int is_empty_req(uint32_t r) { return r % 3 == 0; }

static void empty_lengths(const tcase *c, int32_t *ql, int32_t *sl)
{
    for (uint32_t r = 0; r < c->reqs; r++)
        if (is_empty_req(r)) ql[r] = 1, sl[r] = 0;
}

/* Empty rows exactly 0 (a tolerance would hide a read of garbage). */
static int empty_rows_zero(const ath_work *io, const tcase *c, const void *out, char *msg,
                           size_t cap)
{
    size_t bad = 0;
    for (uint32_t r = 0; r < io->B.num_reqs; r++) {
        if (!is_empty_req(r)) continue;
        const size_t t = (size_t)io->B.qsl[r], n = (size_t)c->hq * c->d;
        for (size_t i = 0; i < n; i++) bad += ah_load_f32(out, t * n + i, c->q) != 0.0f;
    }
    snprintf(msg + strlen(msg), cap - strlen(msg), " empty[%zu nonzero]", bad);
    return bad == 0;
}

static int verify(ath_host *h, ath_work *io, const tcase *c, int check_cache, char *msg, size_t cap)
{
    int ok = 1;
    const size_t kb = io->d_kc.bytes, vb = io->d_vc.bytes;
    char why[256];
    if (check_cache) {
        if (ath_work_reference_write(io, why, sizeof why)) {
            snprintf(msg + strlen(msg), cap - strlen(msg), " reference write_kv: %s", why);
            return 0;
        }
        void *kd = malloc(kb), *vd = malloc(vb);
        ath_download(h, kd, &io->d_kc);
        ath_download(h, vd, &io->d_vc);
        size_t diff = ath_bytes_differ(kd, io->kc, kb) + ath_bytes_differ(vd, io->vc, vb);
        snprintf(msg + strlen(msg), cap - strlen(msg), " cache[%zu bytes differ]", diff);
        ok &= diff == 0;
        free(kd);
        free(vd);
    }
    uint32_t T = io->B.num_tokens;
    const size_t q_elems = (size_t)T * c->hq * c->d;
    double *ref = malloc(sizeof(double) * (q_elems + 1)),
           *rlse = malloc(sizeof(double) * ((size_t)T * c->hq + 1));
    uint32_t empties = 0; /* requests without keys: the oracle gives 0 / -inf (or the sink) */
    for (uint32_t r = 0; r < io->B.num_reqs; r++) empties += io->B.seq[r] == 0;
    if (ath_work_reference(io, ref, rlse, why, sizeof why)) {
        snprintf(msg + strlen(msg), cap - strlen(msg), " reference: %s", why);
        free(ref);
        free(rlse);
        return 0;
    }
    void *out = malloc(io->d_out.bytes);
    float *lse = malloc(io->d_lse.bytes);
    ath_download(h, out, &io->d_out);
    ath_download(h, lse, &io->d_lse);
    if (empties) ok &= empty_rows_zero(io, c, out, msg, cap);
    ok &= compare("out", out, c->q, ref, q_elems, c->kv, msg, cap);
    ok &= compare("lse", lse, AH_DTYPE_FP32, rlse, (size_t)T * c->hq, c->kv, msg, cap);
    free(out);
    free(lse);
    free(ref);
    free(rlse);
    return ok;
}

/* 0xff in the outputs, so elements a kernel leaves unwritten show. */
static void poison(ath_host *h, ath_tensor *out, ath_tensor *lse)
{
    const size_t n = out->bytes > lse->bytes ? out->bytes : lse->bytes;
    void *buf = malloc(n);
    memset(buf, 0xff, n);
    ath_upload(h, out, buf);
    ath_upload(h, lse, buf);
    free(buf);
}

static void poison_outputs(ath_host *h, ath_work *io) { poison(h, &io->d_out, &io->d_lse); }

static void report(const char *name, int ok, const char *msg)
{
    printf("%-4s %-52s%s\n", ok ? "ok" : "FAIL", name, msg);
    fflush(stdout);
    if (ok) g_pass++;
    else g_fail++;
}

#define TRY(what, call) \
    do { \
        ah_status s_ = (call); \
        if (s_ != AH_OK) { \
            snprintf(msg + strlen(msg), sizeof msg - strlen(msg), " %s: %s", what, \
                     st ? O->state_error(st) : O->context_error(ctx)); \
            goto done; \
        } \
    } while (0)

/* Released blocks (AH_FEAT_RELEASED_BLOCKS): every block-table entry of a
 * block the window hides from every query of its request, (k + 1) * bs - 1
 * <= p0 - window, becomes negative (-1, or far below the cache, so a load
 * through one faults or reads outside it); the table is uploaded again.
 * Returns the count released. */
static uint32_t release_blocks(ath_host *h, ath_work *io, const tcase *c)
{
    ath_batch *B = &io->B;
    uint32_t n = 0;
    for (uint32_t r = 0; r < B->num_reqs; r++) {
        const int64_t p0 = B->seq[r] - (B->qsl[r + 1] - B->qsl[r]);
        for (uint32_t k = 0; k < B->width; k++)
            if ((int64_t)(k + 1) * c->bs - 1 <= p0 - (int64_t)c->window)
                B->bt[(size_t)r * B->width + k] = n++ % 2 ? -1 : -(1 << 24);
    }
    return ath_upload(h, &B->d_bt, B->bt) ? 0 : n;
}

/* A speculative tree's mask over a batch (plugin.h, SGLang's layout). */
typedef struct tk_tree {
    uint8_t *m;  /* host copy: lead bytes, then every request's block */
    int64_t *ip; /* mask_indptr, host copy */
    ath_tensor dm, dip;
} tk_tree;

static void tree_free(ath_host *h, tk_tree *t)
{
    free(t->m);
    free(t->ip);
    ath_tensor_free(h, &t->dm);
    ath_tensor_free(h, &t->dip);
    memset(t, 0, sizeof *t);
}

/* Per request a [q_len x seq_len] block of bytes: the prefix visible but
 * for random holes, each new token its ancestors (a random parent among
 * the tokens before it) and itself. The blocks start lead bytes into the
 * tensor (mask_indptr[0] = lead, as a split part's view keeps the whole
 * batch's offsets). Sets B's mask fields; 0, or 1 on failure. */
static int tree_build(ath_host *h, ath_batch *B, tk_tree *t, uint32_t lead, uint64_t *rng)
{
    memset(t, 0, sizeof *t);
    const uint32_t R = B->num_reqs;
    int64_t n = lead;
    for (uint32_t r = 0; r < R; r++) n += (int64_t)(B->qsl[r + 1] - B->qsl[r]) * B->seq[r];
    t->m = malloc((size_t)n + 1);
    t->ip = malloc(sizeof(int64_t) * (R + 1));
    uint32_t *parent = malloc(sizeof(uint32_t) * (B->max_q + 1));
    const int64_t sm = n, sip = R + 1;
    if (!t->m || !t->ip || !parent ||
        ath_tensor_alloc(h, &t->dm, (DLDataType){kDLUInt, 8, 1}, 1, &sm) ||
        ath_tensor_alloc(h, &t->dip, ath_i64, 1, &sip)) {
        free(parent);
        return 1;
    }
    for (uint32_t i = 0; i < lead; i++) t->m[i] = (uint8_t)ath_rand_u64(rng);
    t->ip[0] = lead;
    for (uint32_t r = 0; r < R; r++) {
        const uint32_t q = (uint32_t)(B->qsl[r + 1] - B->qsl[r]), L = (uint32_t)B->seq[r];
        const uint32_t first = L - q;
        uint8_t *blk = t->m + t->ip[r];
        t->ip[r + 1] = t->ip[r] + (int64_t)q * L;
        for (uint32_t i = 0; i < q; i++) {
            uint8_t *row = blk + (size_t)i * L;
            parent[i] = i ? (uint32_t)(ath_rand_u64(rng) % i) : 0;
            for (uint32_t j = 0; j < first; j++) row[j] = ath_rand_u64(rng) % 10 != 0;
            memset(row + first, 0, q);
            if (i) memcpy(row + first, blk + (size_t)parent[i] * L + first, i);
            row[first + i] = 1;
        }
    }
    free(parent);
    if (ath_upload(h, &t->dm, t->m) || ath_upload(h, &t->dip, t->ip)) return 1;
    B->b.custom_mask = &t->dm.t;
    B->b.mask_indptr = &t->dip.t;
    B->b.custom_mask_host = t->m;
    B->b.mask_indptr_host = t->ip;
    B->b.custom_mask_len = (uint64_t)n;
    return 0;
}

/* What run_eager changes in a case's batch. */
enum { V_PLAIN = 0, V_EMPTY = 1, V_RELEASED = 2, V_TREE = 3 };

/* Eager: plan, write_kv, forward, compare. */
static void run_eager(ah_context *ctx, const tcase *c, int variant, uint64_t *rng)
{
    char msg[1024] = "";
    char name[96];
    snprintf(name, sizeof name, "%s%s",
             variant == V_EMPTY      ? "empty kv "
             : variant == V_RELEASED ? "released blocks "
             : variant == V_TREE     ? "tree mask "
                                     : "",
             c->name);
    int32_t ql[512], sl[512];
    lengths(c, rng, ql, sl);
    if (variant == V_EMPTY) empty_lengths(c, ql, sl);
    ath_work io;
    tk_tree tree;
    memset(&tree, 0, sizeof tree);
    ah_state *st = NULL;
    int ok = 0;
    if (io_make(&P, &io, c, ql, sl, 0, 0, rng) ||
        (variant == V_TREE && tree_build(&P, &io.B, &tree, 5, rng))) {
        snprintf(msg, sizeof msg, " setup failed");
        goto done;
    }
    if (variant == V_RELEASED) {
        const uint32_t n = release_blocks(&P, &io, c);
        snprintf(msg, sizeof msg, " %u entries released", n);
        if (!n) goto done;
    }
    ah_limits lim = limits_for(&io.B, 0);
    TRY("state_create", O->state_create(ctx, &io.spec, &lim, &st));
    poison_outputs(&P, &io);
    TRY("plan", O->plan(st, &io.B.b, AH_PLAN_EAGER, NULL));
    ah_kv_write_args w = ath_work_write_args(&io, NULL);
    TRY("write_kv", O->write_kv(st, &w));
    ah_forward_args a = ath_work_args(&io, NULL, 1);
    TRY("forward", O->forward(st, &a));
    TRY("synchronize", O->synchronize(ctx, NULL));
    ok = verify(&P, &io, c, 1, msg, sizeof msg);
done:
    report(name, ok, msg);
    if (st) O->state_destroy(st);
    tree_free(&P, &tree);
    ath_work_free(&P, &io);
}

/* run_graph's tree masks: on the captured batch, on the replayed one. */
enum { G_TREE_CAPTURE = 1, G_TREE_REPLAY = 2 };

/* Graph: capture with one batch, replay with another of other lengths
 * (same request count bound), compare the replay with the reference.
 * replay (same layer as c, or NULL: c) shapes the replayed batch; empty:
 * its every third request has no keys; tree: G_TREE_* (a mask on the
 * replay alone must be refused: the captured launch applies none). */
static void run_graph(ah_context *ctx, const tcase *c, const tcase *replay, int empty, int tree,
                      uint64_t *rng)
{
    char msg[1024] = "";
    char name[160], tn[48] = "";
    if (tree)
        snprintf(tn, sizeof tn, "tree mask %s%s", tree & G_TREE_CAPTURE ? "captured" : "",
                 tree == G_TREE_CAPTURE  ? ", none replayed "
                 : tree == G_TREE_REPLAY ? "replayed only (refused) "
                                         : " and replayed ");
    if (!replay) replay = c;
    if (replay == c)
        snprintf(name, sizeof name, "graph %s%s%s", tn, empty ? "empty kv " : "", c->name);
    else
        snprintf(name, sizeof name, "graph %s%s, replay %s%s", tn, c->name,
                 empty ? "empty kv " : "", replay->name);
    int32_t ql[512], sl[512], ql2[512], sl2[512];
    lengths(c, rng, ql, sl);
    lengths(replay, rng, ql2, sl2);
    ath_work a_io, b_io;
    tk_tree ta, tb;
    memset(&a_io, 0, sizeof a_io);
    memset(&b_io, 0, sizeof b_io);
    memset(&ta, 0, sizeof ta);
    memset(&tb, 0, sizeof tb);
    ah_state *st = NULL;
    ah_graph *g = NULL;
    void *stream = NULL;
    int ok = 0;
    tcase c2 = *replay;
    if (io_make(&P, &a_io, c, ql, sl, 0, 0, rng)) goto done;
    c2.reqs = c->reqs > 2 ? c->reqs - 1 : c->reqs; /* the replay: fewer requests too */
    if (empty) empty_lengths(&c2, ql2, sl2);
    /* b's cache holds a's blocks too: the captured plan's bounds are a's */
    if (io_make(&P, &b_io, &c2, ql2, sl2, a_io.B.num_tokens, a_io.B.num_blocks, rng)) goto done;
    /* the replay's mask lies elsewhere than the captured one's */
    if (((tree & G_TREE_CAPTURE) && tree_build(&P, &a_io.B, &ta, 0, rng)) ||
        ((tree & G_TREE_REPLAY) && tree_build(&P, &b_io.B, &tb, 3, rng)))
        goto done;
    /* Limits cover both; the replay's tensors must be the captured ones, so
     * replay data is copied into the captured buffers. */
    ah_limits lim = limits_for(&a_io.B, 2);
    if (b_io.B.width > lim.max_blocks_per_req) lim.max_blocks_per_req = b_io.B.width;
    if (b_io.B.max_seq > lim.max_seq_len) lim.max_seq_len = b_io.B.max_seq;
    if (b_io.B.num_tokens > lim.max_num_tokens) lim.max_num_tokens = b_io.B.num_tokens;
    TRY("stream_create", O->stream_create(ctx, &stream));
    TRY("state_create", O->state_create(ctx, &a_io.spec, &lim, &st));
    TRY("plan(CAPTURE)", O->plan(st, &a_io.B.b, AH_PLAN_CAPTURE, stream));
    /* Capture forward over b's tensors (sized for b): replay computes b. */
    ah_forward_args fa = ath_work_args(&b_io, stream, 1);
    TRY("graph_begin", O->graph_begin(ctx, stream));
    ah_status fs = O->forward(st, &fa);
    ah_status es = O->graph_end(ctx, stream, &g);
    TRY("forward (capturing)", fs);
    TRY("graph_end", es);
    poison_outputs(&P, &b_io);
    if (tree == G_TREE_REPLAY) {
        const ah_status rs = O->plan(st, &b_io.B.b, AH_PLAN_REPLAY, stream);
        ok = rs == AH_ERR_INVALID_ARGUMENT && strstr(O->state_error(st), "tree mask");
        snprintf(msg, sizeof msg, " plan(REPLAY): status %d, \"%s\"", (int)rs, O->state_error(st));
        goto done;
    }
    TRY("plan(REPLAY)", O->plan(st, &b_io.B.b, AH_PLAN_REPLAY, stream));
    TRY("graph_launch", O->graph_launch(ctx, g, stream));
    TRY("synchronize", O->synchronize(ctx, stream));
    ok = verify(&P, &b_io, &c2, 0, msg, sizeof msg);
done:
    report(name, ok, msg);
    if (g) O->graph_destroy(ctx, g);
    if (st) O->state_destroy(st);
    if (stream) O->stream_destroy(ctx, stream);
    tree_free(&P, &ta);
    tree_free(&P, &tb);
    ath_work_free(&P, &a_io);
    ath_work_free(&P, &b_io);
}

/* Deterministic mode: request 0 alone and inside a larger batch give the
 * same bits (split-KV decode). */
static void run_deterministic(const char *path, const tcase *c, uint64_t *rng)
{
    char msg[1024] = "";
    ath_host p2;
    ah_context *ctx = NULL;
    ah_state *s1 = NULL, *s2 = NULL;
    ath_work big, one;
    memset(&big, 0, sizeof big);
    memset(&one, 0, sizeof one);
    ah_state *st = NULL;
    int ok = 0;
    const char *why = NULL;
    memset(&p2, 0, sizeof p2);
    if (ath_load(&p2, path) || ath_set(&p2, "deterministic", "true") ||
        ath_set(&p2, "num_kv_splits", "8") || ath_set(&p2, "split_tile", "128"))
        goto done;
    if (p2.ops->context_create(&p2.svc, &dev0, &ctx, &why) != AH_OK) {
        snprintf(msg, sizeof msg, " context: %s", why);
        goto done;
    }
    p2.ctx = ctx;
    {
        int32_t ql[64], sl[64];
        lengths(c, rng, ql, sl);
        tcase c1 = *c;
        c1.reqs = 1;
        uint64_t seed = *rng;
        if (io_make(&p2, &big, c, ql, sl, 0, 0, rng)) goto done;
        /* Same request 0 data: rebuild with the same seed, one request. */
        uint64_t r2 = seed;
        if (io_make(&p2, &one, &c1, ql, sl, 0, 0, &r2)) goto done;
        /* Make request 0's cache rows and query identical: copy big's. */
        size_t qb = ah_dtype_size(c->q), cb = ah_dtype_size(c->kv);
        memcpy(one.q, big.q, (size_t)c->hq * c->d * qb);
        uint32_t nb = (sl[0] + c->bs - 1) / c->bs;
        size_t per_block = (size_t)c->bs * c->hk * c->d;
        for (uint32_t j = 0; j < nb; j++) {
            size_t bb = (size_t)big.B.bt[j], bo = (size_t)one.B.bt[j];
            memcpy((char *)one.kc + bo * per_block * cb, (char *)big.kc + bb * per_block * cb,
                   per_block * cb);
            memcpy((char *)one.vc + bo * per_block * cb, (char *)big.vc + bb * per_block * cb,
                   per_block * cb);
        }
        ath_work_upload(&p2, &one);
        ah_limits l1 = limits_for(&big.B, 0), l2 = limits_for(&one.B, 0);
        const ah_plugin_ops *o = p2.ops;
        if (o->state_create(ctx, &big.spec, &l1, &s1) ||
            o->state_create(ctx, &one.spec, &l2, &s2) ||
            o->plan(s1, &big.B.b, AH_PLAN_EAGER, NULL) ||
            o->plan(s2, &one.B.b, AH_PLAN_EAGER, NULL)) {
            snprintf(msg, sizeof msg, " setup: %s", o->context_error(ctx));
            goto done;
        }
        ah_forward_args fb = ath_work_args(&big, NULL, 1), f1 = ath_work_args(&one, NULL, 1);
        if (o->forward(s1, &fb) || o->forward(s2, &f1) || o->synchronize(ctx, NULL)) {
            snprintf(msg, sizeof msg, " forward: %s / %s", o->state_error(s1), o->state_error(s2));
            goto done;
        }
        size_t n = (size_t)c->hq * c->d * qb;
        char *ob = malloc(big.d_out.bytes), *o1 = malloc(one.d_out.bytes);
        ath_download(&p2, ob, &big.d_out);
        ath_download(&p2, o1, &one.d_out);
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
        ath_work_free(&p2, &big);
        ath_work_free(&p2, &one);
    }
    ath_close(&p2);
    (void)st;
}

static void run_merge(ah_dtype t, uint32_t T, uint32_t H, uint32_t D, uint64_t *rng)
{
    char msg[512] = "", name[64], why[256];
    snprintf(name, sizeof name, "merge_states %s T%u H%u D%u", ah_dtype_name(t), T, H, D);
    /* Every 7th row's first part empty, every 21st both. */
    const ath_merge_spec m = {t, T, H, D, 2.f, 7, 0, 21, 0, 0, 0};
    ath_cmp co, cl;
    int ok = ath_merge_run(&P, &m, rng, &co, &cl, why, sizeof why) == 0;
    if (!ok) snprintf(msg, sizeof msg, " merge_states: %s", why);
    else
        ok = verdict("out", &co, t, t, msg, sizeof msg) &
             verdict("lse", &cl, AH_DTYPE_FP32, t, msg, sizeof msg);
    report(name, ok, msg);
}

/* A ragged layer (AH_FEAT_RAGGED_KV): keys and values packed by
 * cu_seqlens_k, no cache (the shared runner, ath_ragged_run). */
static void run_ragged(const ath_ragged_case *c, uint64_t *rng)
{
    char msg[1024] = "", why[512];
    ath_cmp co, cl;
    int ok = ath_ragged_run(&P, &c->s, NULL, rng, &co, &cl, why, sizeof why) == 0;
    if (!ok) snprintf(msg, sizeof msg, " %s", why);
    else
        ok = verdict("out", &co, c->s.dt, c->s.dt, msg, sizeof msg) &
             verdict("lse", &cl, AH_DTYPE_FP32, c->s.dt, msg, sizeof msg);
    report(c->name, ok, msg);
}

/* Bad input: a q tensor of the wrong dtype must fail with a message and
 * leave the output untouched. */
static void run_bad_input(ah_context *ctx, const tcase *c, uint64_t *rng)
{
    char msg[1024] = "";
    int32_t ql[64], sl[64];
    lengths(c, rng, ql, sl);
    ath_work io;
    ah_state *st = NULL;
    int ok = 0;
    if (io_make(&P, &io, c, ql, sl, 0, 0, rng)) goto done;
    ah_limits lim = limits_for(&io.B, 0);
    TRY("state_create", O->state_create(ctx, &io.spec, &lim, &st));
    TRY("plan", O->plan(st, &io.B.b, AH_PLAN_EAGER, NULL));
    poison_outputs(&P, &io);
    ah_forward_args a = ath_work_args(&io, NULL, 1);
    DLTensor badq = io.d_q.t;
    badq.dtype.bits = 32;
    badq.dtype.code = kDLFloat;
    a.q = &badq;
    ah_status s = O->forward(st, &a);
    O->synchronize(ctx, NULL);
    char *out = malloc(io.d_out.bytes);
    ath_download(&P, out, &io.d_out);
    size_t touched = 0;
    for (size_t i = 0; i < io.d_out.bytes; i++) touched += (uint8_t)out[i] != 0xff;
    free(out);
    ok = s == AH_ERR_INVALID_ARGUMENT && touched == 0 && strstr(O->state_error(st), "q") != NULL;
    snprintf(msg, sizeof msg, " status %d, \"%s\", %zu output bytes touched", s, O->state_error(st),
             touched);
done:
    report("bad input rejected, nothing written", ok, msg);
    if (st) O->state_destroy(st);
    ath_work_free(&P, &io);
}

int main(int argc, char **argv)
{
    int quick = 0;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    const char *path = TK_PLUGIN_PATH;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if ((v = ath_arg_value(argc, argv, &i, "--seed"))) seed = strtoull(v, NULL, 0) | 1;
        else if ((v = ath_arg_value(argc, argv, &i, "--plugin"))) path = v;
        else return ath_usage(argv[0], "[--quick] [--seed N] [--plugin PATH]");
    }
    int prc = ath_start(&P, path);
    if (prc) return prc;
    O = P.ops;
    const ah_probe_info pi = P.probe;
    g_cc = (int)pi.compute_capability;
    ah_context *ctx = NULL;
    const char *why = NULL;
    /* A device index past the process's devices is UNAVAILABLE, with a reason. */
    ah_context_options past = {sizeof past, (int32_t)pi.device_count};
    ah_status ps = O->context_create(&P.svc, &past, &ctx, &why);
    if (ps != AH_ERR_UNAVAILABLE || ctx || !why || !*why) {
        printf("FAIL context_create(device %u): status %d, want UNAVAILABLE with a reason\n",
               pi.device_count, (int)ps);
        if (ctx) O->context_destroy(ctx);
        return 1;
    }
    printf("ok   %-52s%s\n", "device index past the last", why);
    g_pass++;
    ctx = NULL;
    if (O->context_create(&P.svc, &dev0, &ctx, &why) != AH_OK) {
        printf("FAIL context_create: %s\n", why);
        return 1;
    }
    P.ctx = ctx; /* the helpers' device memory and copies */
    const ah_dtype BF = AH_DTYPE_BF16, FH = AH_DTYPE_FP16, E4 = AH_DTYPE_FP8_E4M3,
                   E5 = AH_DTYPE_FP8_E5M2;
    const ah_kv_layout NHD = AH_KV_LAYOUT_NHD, HND = AH_KV_LAYOUT_HND;
    const ah_attn_type DEC = AH_ATTN_DECODER;
    /* Not reformatted: one case a row, fields as the header comment names them. */
    // clang-format off
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
        {"mixed bf16 fp8e4m3 kv scales", K_MIXED, DEC, BF, E4, 8, 2, 128, 16, NHD, 0, 0, 0, 0, 6, 300, 0.05f, 0.02f},
        {"mixed fp16 fp8e5m2 kv scales hnd", K_MIXED, DEC, FH, E5, 8, 2, 64, 16, HND, 0, 0, 0, 0, 6, 300, 0.5f, 0.25f},
        {"decode bf16 fp8e4m3 kv window sinks", K_DECODE, DEC, BF, E4, 16, 2, 128, 16, NHD, 100, 0, 1, 0, 6, 1500, 0.03f, 0.07f},
        {"decode fp16 fp8e5m2 kv d256", K_DECODE, DEC, FH, E5, 4, 2, 256, 16, NHD, 0, 0, 0, 0, 4, 800, 0.1f, 0.1f},
    };
    // clang-format on
    uint64_t rng = seed;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const tcase *c = &cases[i];
        if ((c->kv == E4 || c->kv == E5) && g_cc < 90) {
            printf("skip %-52s fp8 KV needs sm_90\n", c->name);
            continue;
        }
        if (quick && c->max_seq > 1000 && c->kind == K_PREFILL) continue;
        run_eager(ctx, c, V_PLAIN, &rng);
    }
    run_graph(ctx, &cases[0], NULL, 0, 0, &rng);  /* mixed: unified kernel */
    run_graph(ctx, &cases[9], NULL, 0, 0, &rng);  /* pure decode: split-KV */
    run_graph(ctx, &cases[13], NULL, 0, 0, &rng); /* decode with every feature */
    /* Requests without keys in decode batches: split-KV (eager, every KV
     * dtype and head pad, with and without sinks) and, replayed from a
     * graph captured on a mixed batch, the unified kernel. */
    const size_t empty_cases[] = {9, 10, 11, 13, 19, 20};
    for (size_t i = 0; i < sizeof empty_cases / sizeof empty_cases[0]; i++) {
        const tcase *c = &cases[empty_cases[i]];
        if ((c->kv == E4 || c->kv == E5) && g_cc < 90) continue;
        run_eager(ctx, c, V_EMPTY, &rng);
    }
    /* Released blocks under windowed layers: the unified kernel, general
     * (soft-cap, ALiBi) and plain, whose key tiles start before the first
     * visible key, and split-KV decode, FP8 cache included. */
    const size_t released_cases[] = {6, 7, 13, 19};
    for (size_t i = 0; i < sizeof released_cases / sizeof released_cases[0]; i++) {
        const tcase *c = &cases[released_cases[i]];
        if ((c->kv == E4 || c->kv == E5) && g_cc < 90) continue;
        run_eager(ctx, c, V_RELEASED, &rng);
    }
    run_graph(ctx, &cases[9], NULL, 1, 0, &rng);
    /* Not reformatted: the fields laid out like the cases table above. */
    // clang-format off
    const tcase dec0 = {"decode bf16 gqa4 d128 bs16 nhd", K_DECODE, DEC, BF, BF, 8, 2, 128, 16, NHD,
                        0, 0, 0, 0, 7, 300, 0, 0};
    run_graph(ctx, &cases[0], &dec0, 1, 0, &rng);
    const tcase dec6 = {"decode bf16 window+softcap+sinks+alibi", K_DECODE, DEC, BF, BF, 8, 2, 128, 16,
                        NHD, 37, 30.f, 1, 1, 6, 300, 0, 0};
    run_graph(ctx, &cases[6], &dec6, 1, 0, &rng);
    // clang-format on
    /* Speculative tree masks: the masked unified kernel on mixed batches
     * (general and plain layers, every logit feature, an FP8 cache) and
     * on pure-decode ones, which it takes from split-KV; graphs. */
    const size_t tree_cases[] = {0, 6, 7, 9, 13, 17};
    for (size_t i = 0; i < sizeof tree_cases / sizeof tree_cases[0]; i++) {
        const tcase *c = &cases[tree_cases[i]];
        if ((c->kv == E4 || c->kv == E5) && g_cc < 90) continue;
        run_eager(ctx, c, V_TREE, &rng);
    }
    run_graph(ctx, &cases[0], NULL, 0, G_TREE_CAPTURE | G_TREE_REPLAY, &rng);
    run_graph(ctx, &cases[6], NULL, 0, G_TREE_CAPTURE | G_TREE_REPLAY, &rng);
    run_graph(ctx, &cases[0], NULL, 0, G_TREE_CAPTURE, &rng);
    run_graph(ctx, &cases[0], NULL, 0, G_TREE_REPLAY, &rng);
    run_graph(ctx, &cases[9], NULL, 0, G_TREE_REPLAY, &rng);
    /* Ragged layers: MLA's non-absorbed prefill (qk 192 / v 128, a KV head
     * per query head, DeepSeek-V3's 16 heads at TP 8) on the plain kernel,
     * bottom-right and context; with every logit feature on the general
     * kernel; equal head sizes with GQA, bidirectional with fewer keys
     * than queries. At most 64 requests and 256 heads (ath_ragged_run). */
    // clang-format off
    const ath_ragged_case rcases[] = {
        /* name {t hq hk dqk dv causal context window softcap sinks alibi reqs max_len} */
        {"ragged bf16 mla 192/128 h16", {BF, 16, 16, 192, 128, 1, 0, 0, 0, 0, 0, 5, 400}},
        {"ragged fp16 mla 192/128 h16 context sinks", {FH, 16, 16, 192, 128, 1, 1, 0, 0, 1, 0, 5, 300}},
        {"ragged bf16 mla 192/128 window softcap alibi sinks", {BF, 8, 8, 192, 128, 1, 0, 70, 30.f, 1, 1, 4, 300}},
        {"ragged bf16 gqa4 d128 bidirectional window", {BF, 8, 2, 128, 128, 0, 0, 50, 0, 0, 0, 4, 200}},
        {"ragged fp16 gqa2 d64", {FH, 4, 2, 64, 64, 1, 0, 0, 0, 0, 0, 6, 300}},
        {"ragged bf16 d256 alibi context", {BF, 4, 2, 256, 256, 1, 1, 0, 0, 0, 1, 4, 200}},
    };
    // clang-format on
    for (size_t i = 0; i < sizeof rcases / sizeof rcases[0]; i++) run_ragged(&rcases[i], &rng);
    run_merge(BF, 37, 8, 128, &rng);
    run_merge(FH, 19, 4, 80, &rng);
    run_bad_input(ctx, &cases[0], &rng);
    run_deterministic(path, &cases[9], &rng);
    ath_close(&P);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
