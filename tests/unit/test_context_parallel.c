/*
 * Context parallelism through the public API on cpu_amx, ranks emulated in
 * threads over a local group (the conformance suite checks the results
 * against the oracle; this test checks the contract around them):
 *  - the layout helpers (ah_cp_rank_of, ah_cp_local_len) against a count;
 *  - options refused at binding creation, naming the field: rank outside
 *    the world, a local group of another size, both or no collective, a
 *    window that is not a multiple of interleave x world, ALiBi, a plugin
 *    without empty_kv;
 *  - a step one rank refuses fails on every rank before any forward, with
 *    the refusing rank's own message naming the request or token: wrong
 *    cp_local_seq_lens, a slot for a position another rank holds, batches
 *    that differ between ranks;
 *  - a rank that never arrives fails the others after the time-out with a
 *    message naming it, and the outputs are untouched;
 *  - a rank whose forward is refused after the step's check fails the
 *    others at once (not after the time-out), naming it and why.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/attnhost.h>

#include "batch_fixture.h"
#include "binding_env.h"
#include "check.h"

enum { BS = 16, HQ = 4, HK = 2, D = 64, MAXR = 4, MAXT = 16, NB = 32, MAXB = 8 };

static const char *dirs[] = {ATTNHOST_BUILD_DIR "/lib/attnhost/plugins"};

static const char MODEL[] = "[model]\nname = cp\nnum_layers = 1\nnum_q_heads = 4\n"
                            "num_kv_heads = 2\nhead_size = 64\ndtype = fp32\n";

static ah_host *open_host(void)
{
    ah_host_options o = {.struct_size = sizeof o,
                         .config_text = "",
                         .plugin_dirs = dirs,
                         .n_plugin_dirs = 1,
                         .no_default_dirs = 1,
                         .cache_path = ""};
    ah_host *h = NULL;
    ah_error err;
    CHECK_MSG(ah_host_create(&o, &h, &err) == AH_OK, "%s", err.msg);
    const ah_plugin_info *amx = h ? ah_host_find_plugin(h, "cpu_amx") : NULL;
    if (!amx || amx->state != AH_PLUGIN_AVAILABLE) {
        printf("test_context_parallel: cpu_amx not available here, skipped\n");
        ah_host_destroy(h);
        return NULL;
    }
    return h;
}

static ah_selection *select_model(ah_host *h, const char *text)
{
    ah_model *m = NULL;
    ah_selection *sel = NULL;
    ah_error err;
    CHECK_MSG(ah_model_parse(text, "cp", &m, &err) == AH_OK, "%s", err.msg);
    if (m) CHECK_MSG(ah_host_select_forced(h, m, "cpu_amx", &sel, &err) == AH_OK, "%s", err.msg);
    ah_model_destroy(m);
    return sel;
}

static ah_binding_options options(const ah_cp_options *cp)
{
    ah_binding_options o = {sizeof o, {sizeof(ah_limits), MAXR, MAXT, MAXB, MAXB * BS, NB},
                            0,        0,
                            cp,       AH_MIXED_STEPS_CONFIG};
    return o;
}

/* ---- layout ----------------------------------------------------------------- */

static void test_layout(void)
{
    const uint32_t worlds[3] = {2, 3, 4}, inter[3] = {1, 4, 16};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            const uint32_t W = worlds[a], I = inter[b];
            uint64_t count[4] = {0};
            for (uint64_t p = 0; p < 200; p++) {
                uint64_t local;
                uint32_t r = ah_cp_rank_of(p, W, I, &local);
                CHECK(r == p / I % W);
                CHECK_MSG(local == count[r], "W %u I %u p %llu", W, I, (unsigned long long)p);
                count[r]++;
                for (uint32_t k = 0; k < W; k++) CHECK(ah_cp_local_len(p + 1, W, k, I) == count[k]);
            }
        }
    CHECK(ah_cp_local_len(5, 2, 1, 0) == 2); /* interleave 0 means 1 */
}

/* ---- refused at creation ---------------------------------------------------- */

static void expect_create(ah_host *h, ah_selection *sel, const ah_cp_options *cp, ah_status want,
                          const char *needle)
{
    ah_binding_options o = options(cp);
    ah_binding *b = NULL;
    ah_error err = {{0}};
    ah_status s = ah_binding_create(h, sel, &o, &b, &err);
    CHECK_MSG(s == want && !b, "%s: %s", ah_status_str(s), err.msg);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "'%s' not in: %s", needle, err.msg);
    ah_binding_destroy(b);
}

static void test_creation(ah_host *h)
{
    ah_selection *sel = select_model(h, MODEL);
    ah_cp_local_group *g2 = NULL, *g3 = NULL;
    ah_error err;
    CHECK(ah_cp_local_group_create(2, &g2, &err) == AH_OK);
    CHECK(ah_cp_local_group_create(3, &g3, &err) == AH_OK);
    ah_cp_local_group *none = NULL;
    CHECK(ah_cp_local_group_create(0, &none, &err) == AH_ERR_INVALID_ARGUMENT && !none);
    ah_cp_options cp = {sizeof cp, 2, 2, 1, NULL, g2, NULL, 0};
    expect_create(h, sel, &cp, AH_ERR_INVALID_ARGUMENT, "rank 2 is outside a world of 2");
    cp.rank = 0;
    cp.local_group = g3;
    expect_create(h, sel, &cp, AH_ERR_INVALID_ARGUMENT, "local group has 3 ranks");
    cp.local_group = NULL;
    expect_create(h, sel, &cp, AH_ERR_INVALID_ARGUMENT, "neither is set");
    cp.local_group = g2;
    cp.nccl_comm = (void *)&cp;
    expect_create(h, sel, &cp, AH_ERR_INVALID_ARGUMENT, "both are set");
    ah_selection_destroy(sel);

    sel = select_model(h, "[model]\nname = w\nnum_layers = 1\nnum_q_heads = 4\nnum_kv_heads = 2\n"
                          "head_size = 64\ndtype = fp32\nsliding_window = 12\n");
    cp = (ah_cp_options){sizeof cp, 2, 0, 4, NULL, g2, NULL, 0};
    expect_create(h, sel, &cp, AH_ERR_UNSUPPORTED, "sliding window 12 is not a multiple of");
    cp.interleave = 2; /* 12 = 3 x (2 x 2): fine */
    ah_binding_options o = options(&cp);
    ah_binding *b = NULL;
    CHECK_MSG(ah_binding_create(h, sel, &o, &b, &err) == AH_OK, "%s", err.msg);
    ah_binding_destroy(b);
    ah_selection_destroy(sel);

    sel = select_model(h, "[model]\nname = a\nnum_layers = 1\nnum_q_heads = 4\nnum_kv_heads = 2\n"
                          "head_size = 64\ndtype = fp32\nalibi = true\n");
    expect_create(h, sel, &cp, AH_ERR_UNSUPPORTED, "ALiBi");
    ah_selection_destroy(sel);

    /* a plugin that cannot serve a rank holding no key of a request */
    sel = select_model(h, MODEL);
    ah_caps *caps = live_caps(h, "cpu_amx");
    if (caps) {
        caps->features &= ~(uint32_t)AH_FEAT_EMPTY_KV;
        expect_create(h, sel, &cp, AH_ERR_UNSUPPORTED, "does not offer the empty_kv feature");
        caps->features |= AH_FEAT_EMPTY_KV;
    }
    ah_selection_destroy(sel);
    ah_cp_local_group_destroy(g2);
    ah_cp_local_group_destroy(g3);
}

/* ---- a step over W ranks ---------------------------------------------------- */

/* One request of seq_len 9 with 3 new tokens (positions 6, 7, 8), and one
 * decode request of seq_len 5; rank r keeps its shard in blocks of its own. */
typedef struct rank {
    ah_host *h;
    ah_selection *sel;
    ah_cp_options cp;
    ah_binding *b;
    int32_t qsl[3], sl[2], local[2], bt[2 * MAXB];
    int64_t slots[5];
    /* 64-byte aligned, as tensors an engine allocates */
    _Alignas(64) float q[5 * HQ * D];
    _Alignas(64) float k[5 * HK * D];
    _Alignas(64) float v[5 * HK * D];
    _Alignas(64) float kc[NB * BS * HK * D];
    _Alignas(64) float vc[NB * BS * HK * D];
    _Alignas(64) float out[5 * HQ * D];
    _Alignas(64) float lse[5 * HQ];
    bf_desc desc; /* the batch-description tensors */
    DLTensor tlocal, tq, tk, tv, tkc, tvc, tout, tlse;
    int64_t ssl, sq[3], skv[3], sc[4], sl2[2];
    ah_batch batch;
    int skip_plan; /* this rank stops before the step (a failed rank) */
    int bad_local, bad_slot, other_batch, capture, bad_forward;
    ah_status plan, fwd;
    char msg[1024];
} rank;

static void build(rank *k)
{
    const uint32_t W = k->cp.world_size, R = k->cp.rank, I = k->cp.interleave;
    k->qsl[0] = 0, k->qsl[1] = 3, k->qsl[2] = k->other_batch ? 5 : 4;
    k->sl[0] = 9, k->sl[1] = k->other_batch ? 6 : 5;
    int32_t next = 0;
    for (int r = 0; r < 2; r++) {
        k->local[r] = (int32_t)ah_cp_local_len((uint64_t)k->sl[r], W, R, I);
        for (int j = 0; j < MAXB; j++) k->bt[r * MAXB + j] = j * BS < k->local[r] ? next++ : 0;
        for (int32_t t = k->qsl[r]; t < k->qsl[r + 1]; t++) {
            uint64_t lp, p = (uint64_t)(k->sl[r] - (k->qsl[r + 1] - k->qsl[r]) + t - k->qsl[r]);
            k->slots[t] = ah_cp_rank_of(p, W, I, &lp) == R
                              ? (int64_t)k->bt[r * MAXB + (int)(lp / BS)] * BS + (int64_t)(lp % BS)
                              : -1;
        }
    }
    if (k->bad_local) k->local[1]++;
    if (k->bad_slot) k->slots[3] = k->slots[3] < 0 ? 5 : -1;
    const uint32_t T = (uint32_t)k->qsl[2];
    for (size_t i = 0; i < sizeof k->q / sizeof k->q[0]; i++) k->q[i] = (float)((i * 7) % 11) / 11;
    for (size_t i = 0; i < sizeof k->k / sizeof k->k[0]; i++) k->k[i] = k->v[i] = 0.25f;
    for (size_t i = 0; i < sizeof k->out / sizeof k->out[0]; i++) k->out[i] = 12345.0f;
    k->ssl = 2;
    k->sq[0] = T, k->sq[1] = HQ, k->sq[2] = D;
    k->skv[0] = T, k->skv[1] = HK, k->skv[2] = D;
    k->sc[0] = NB, k->sc[1] = BS, k->sc[2] = HK, k->sc[3] = D;
    k->sl2[0] = T, k->sl2[1] = HQ;
    k->tlocal = bf_tensor(k->local, 1, &k->ssl, kDLInt, 32);
    k->tq = bf_tensor(k->q, 3, k->sq, kDLFloat, 32);
    k->tk = bf_tensor(k->k, 3, k->skv, kDLFloat, 32);
    k->tv = bf_tensor(k->v, 3, k->skv, kDLFloat, 32);
    k->tkc = bf_tensor(k->kc, 4, k->sc, kDLFloat, 32);
    k->tvc = bf_tensor(k->vc, 4, k->sc, kDLFloat, 32);
    k->tout = bf_tensor(k->out, 3, k->sq, kDLFloat, 32);
    k->tlse = bf_tensor(k->lse, 2, k->sl2, kDLFloat, 32);
    k->batch = bf_batch(&k->desc, (DLDevice){kDLCPU, 0},
                        (ah_batch){.num_reqs = 2,
                                   .num_tokens = T,
                                   .max_query_len = 3,
                                   .max_seq_len = 9,
                                   .num_blocks = NB,
                                   .query_start_loc_host = k->qsl,
                                   .seq_lens_host = k->sl,
                                   .block_table_host = k->bt,
                                   .slot_mapping_host = k->slots,
                                   .block_table_stride = MAXB,
                                   .cp_local_seq_lens = &k->tlocal,
                                   .cp_local_seq_lens_host = k->local});
}

static void *run(void *arg)
{
    rank *k = arg;
    ah_binding_options o = options(&k->cp);
    ah_error err;
    k->plan = k->fwd = AH_ERR_INTERNAL;
    if (ah_binding_create(k->h, k->sel, &o, &k->b, &err) != AH_OK) {
        snprintf(k->msg, sizeof k->msg, "create: %.900s", err.msg);
        return NULL;
    }
    build(k);
    if (k->skip_plan) return NULL;
    k->plan = ah_binding_plan(k->b, &k->batch, k->capture ? AH_PLAN_CAPTURE : AH_PLAN_EAGER, NULL);
    snprintf(k->msg, sizeof k->msg, "%s", ah_binding_errmsg(k->b));
    if (k->plan != AH_OK) return NULL;
    ah_forward_args a =
        bf_forward_args(&k->tq, &k->tk, &k->tv, &k->tkc, &k->tvc, &k->tout, &k->tlse);
    DLTensor q = k->tq;
    int64_t wrong[3] = {k->sq[0], HQ + 1, D};
    if (k->bad_forward) q.shape = wrong, a.q = &q; /* refused by the host's tensor check */
    k->fwd = ah_binding_forward(k->b, 0, &a);
    snprintf(k->msg, sizeof k->msg, "%s", ah_binding_errmsg(k->b));
    return NULL;
}

/* Run W ranks; set(k) marks what goes wrong where. */
static void step(ah_host *h, ah_selection *sel, uint32_t W, uint32_t timeout_ms, rank *ranks,
                 void (*set)(rank *))
{
    ah_cp_local_group *g = NULL;
    ah_error err;
    CHECK(ah_cp_local_group_create(W, &g, &err) == AH_OK);
    pthread_t th[4];
    for (uint32_t i = 0; i < W; i++) {
        rank *k = &ranks[i];
        memset(k, 0, sizeof *k);
        k->h = h, k->sel = sel;
        k->cp = (ah_cp_options){sizeof k->cp, W, i, 1, NULL, g, NULL, timeout_ms};
        if (set) set(k);
        CHECK(pthread_create(&th[i], NULL, run, k) == 0);
    }
    for (uint32_t i = 0; i < W; i++) pthread_join(th[i], NULL);
    for (uint32_t i = 0; i < W; i++) ah_binding_destroy(ranks[i].b);
    ah_cp_local_group_destroy(g);
}

static int untouched(const rank *k)
{
    for (size_t i = 0; i < (size_t)k->qsl[2] * HQ * D; i++)
        if (k->out[i] != 12345.0f) return 0;
    return 1;
}

static void bad_local_on_1(rank *k) { k->bad_local = k->cp.rank == 1; }
static void bad_slot_on_2(rank *k) { k->bad_slot = k->cp.rank == 2; }
static void other_batch_on_1(rank *k) { k->other_batch = k->cp.rank == 1; }
static void rank_1_stops(rank *k) { k->skip_plan = k->cp.rank == 1; }
static void capture(rank *k) { k->capture = 1; }
static void bad_forward_on_1(rank *k) { k->bad_forward = k->cp.rank == 1; }

static void test_steps(ah_host *h)
{
    ah_selection *sel = select_model(h, MODEL);
    rank *ranks = aligned_alloc(64, 4 * sizeof *ranks);
    /* a good step: every rank ends with the same output, written */
    step(h, sel, 3, 0, ranks, NULL);
    for (uint32_t i = 0; i < 3; i++) {
        CHECK_MSG(ranks[i].plan == AH_OK && ranks[i].fwd == AH_OK, "rank %u: %s", i, ranks[i].msg);
        CHECK(!untouched(&ranks[i]));
        CHECK(memcmp(ranks[i].out, ranks[0].out, sizeof ranks[0].out) == 0);
        for (size_t j = 0; j < sizeof ranks[i].out / sizeof(float); j++)
            CHECK(isfinite(ranks[i].out[j]));
    }
    /* one rank's wrong local lengths: it names the request, the others the rank */
    step(h, sel, 2, 0, ranks, bad_local_on_1);
    CHECK(ranks[1].plan == AH_ERR_INVALID_ARGUMENT);
    CHECK_MSG(
        strstr(ranks[1].msg,
               "cp_local_seq_lens[1] = 3, but request 1 (seq_len 5) has 2 of its keys on rank 1"),
        "%s", ranks[1].msg);
    CHECK(ranks[0].plan == AH_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(ranks[0].msg, "rank 1 refused this step"), "%s", ranks[0].msg);
    CHECK(untouched(&ranks[0]) && untouched(&ranks[1]));
    /* a slot for a position another rank holds */
    step(h, sel, 4, 0, ranks, bad_slot_on_2);
    CHECK(ranks[2].plan == AH_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(ranks[2].msg, "slot_mapping[3]"), "%s", ranks[2].msg);
    for (uint32_t i = 0; i < 4; i++) CHECK(ranks[i].plan != AH_OK && untouched(&ranks[i]));
    /* ranks that disagree on the batch */
    step(h, sel, 2, 0, ranks, other_batch_on_1);
    CHECK_MSG(strstr(ranks[0].msg, "batch differs from rank 0's") ||
                  strstr(ranks[1].msg, "batch differs from rank 0's"),
              "%s / %s", ranks[0].msg, ranks[1].msg);
    CHECK(ranks[0].plan != AH_OK && ranks[1].plan != AH_OK);
    /* a local group copies on the host: no graph can capture its step */
    step(h, sel, 2, 0, ranks, capture);
    for (uint32_t i = 0; i < 2; i++) {
        CHECK(ranks[i].plan == AH_ERR_INVALID_ARGUMENT);
        CHECK_MSG(strstr(ranks[i].msg, "a CUDA graph cannot capture it"), "%s", ranks[i].msg);
    }
    /* a rank that never arrives: the others time out, naming it */
    step(h, sel, 3, 300, ranks, rank_1_stops);
    for (uint32_t i = 0; i < 3; i += 2) {
        CHECK(ranks[i].plan == AH_ERR_UNAVAILABLE);
        CHECK_MSG(strstr(ranks[i].msg, "rank(s) 1 did not arrive within 300 ms"), "%s",
                  ranks[i].msg);
        CHECK(untouched(&ranks[i]));
    }
    /* a rank refused at forward, after the step's check: the others stop
     * at once with its reason (the default 60 s time-out never passes) */
    step(h, sel, 3, 0, ranks, bad_forward_on_1);
    CHECK_MSG(ranks[1].fwd == AH_ERR_INVALID_ARGUMENT && strstr(ranks[1].msg, "q: shape"), "%s",
              ranks[1].msg);
    for (uint32_t i = 0; i < 3; i += 2) {
        CHECK(ranks[i].plan == AH_OK && ranks[i].fwd == AH_ERR_UNAVAILABLE);
        CHECK_MSG(strstr(ranks[i].msg, "rank 1 failed: layer 0: q: shape"), "%s", ranks[i].msg);
        CHECK(untouched(&ranks[i]));
    }
    free(ranks);
    ah_selection_destroy(sel);
}

int main(void)
{
    test_layout();
    ah_host *h = open_host();
    if (h) {
        test_creation(h);
        test_steps(h);
        ah_host_destroy(h);
    }
    return check_report("test_context_parallel");
}
