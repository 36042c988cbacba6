/*
 * Per-request phase split (ah_binding_plan / ah_binding_forward on a batch
 * that mixes decode and prefill requests; [select] mixed_steps = whole,
 * which keeps such batches whole, measured, which follows the tune table,
 * and the binding's own mixed_steps), through the public API on real
 * CPU plugins: cpu_amx and the test backend (sel_beta), each as the other's
 * partner. The plugins' plan and forward slots are wrapped (the unit tests
 * reach the host's loaded ops table) so the test sees exactly which
 * requests and token rows each plugin got. Every output row is compared
 * with the double-precision oracle, over a poisoned output buffer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <attnhost/attnhost.h>
#include <attnhost/reference.h>

#include "batch_fixture.h"
#include "binding_env.h"
#include "check.h"

enum { L = 2, HQ = 4, HK = 2, D = 64, BS = 16, NB = 40, MAXB = 8, MAXR = 8, MAXT = 64 };
#define CACHE_N (NB * BS * HK * D)

/* ---- hooks on the plugins' plan and forward -------------------------------- */

typedef struct call {
    int who;     /* hook index */
    int forward; /* 0: plan */
    uint32_t reqs, toks, maxq;
    int arrays_ok;      /* device tensors hold what the host copies say */
    int qsl_is_host;    /* query_start_loc tensor data == query_start_loc_host */
    int64_t row0, rows; /* forward: q's first token row in the engine's q, its rows */
    int out_same_row;   /* forward: out starts at the same token row as q */
    void *stream;       /* the stream plan or forward was given */
} call;

static call g_log[64];
static int g_n;
static const float *g_qbase, *g_obase;
static ah_plugin_ops g_orig[2];

static int arrays_match(const ah_batch *b)
{
    const int32_t *qsl = b->query_start_loc->data, *seq = b->seq_lens->data,
                  *tab = b->block_table->data;
    const int64_t *slot = b->slot_mapping->data;
    if (b->query_start_loc->shape[0] != b->num_reqs + 1 || b->seq_lens->shape[0] != b->num_reqs ||
        b->block_table->shape[0] != b->num_reqs || b->slot_mapping->shape[0] != b->num_tokens)
        return 0;
    for (uint32_t r = 0; r <= b->num_reqs; r++)
        if (qsl[r] != b->query_start_loc_host[r]) return 0;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        if (seq[r] != b->seq_lens_host[r]) return 0;
        for (int j = 0; j < MAXB; j++)
            if (tab[r * b->block_table->shape[1] + j] !=
                b->block_table_host[r * b->block_table_stride + j])
                return 0;
    }
    for (uint32_t t = 0; t < b->num_tokens; t++)
        if (slot[t] != b->slot_mapping_host[t]) return 0;
    return b->query_start_loc_host[0] == 0 &&
           (uint32_t)b->query_start_loc_host[b->num_reqs] == b->num_tokens;
}

static ah_status hook_plan(int who, ah_state *st, const ah_batch *b, ah_plan_mode m, void *stream)
{
    call *c = &g_log[g_n < 63 ? g_n++ : 63];
    memset(c, 0, sizeof *c);
    c->who = who;
    c->reqs = b->num_reqs, c->toks = b->num_tokens;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        uint32_t q = (uint32_t)(b->query_start_loc_host[r + 1] - b->query_start_loc_host[r]);
        if (q > c->maxq) c->maxq = q;
    }
    c->stream = stream;
    c->arrays_ok = arrays_match(b) && b->max_query_len >= c->maxq;
    c->qsl_is_host = b->query_start_loc->data == (const void *)b->query_start_loc_host;
    return g_orig[who].plan(st, b, m, stream);
}

static ah_status hook_forward(int who, ah_state *st, const ah_forward_args *a)
{
    call *c = &g_log[g_n < 63 ? g_n++ : 63];
    memset(c, 0, sizeof *c);
    c->who = who, c->forward = 1;
    c->stream = a->stream;
    c->row0 = ((const float *)a->q->data - g_qbase) / (HQ * D);
    c->rows = a->q->shape[0];
    c->out_same_row = ((const float *)a->out->data - g_obase) / (HQ * D) == c->row0 &&
                      a->out->shape[0] == c->rows && (!a->key || a->key->shape[0] == c->rows);
    return g_orig[who].forward(st, a);
}

static ah_status plan0(ah_state *s, const ah_batch *b, ah_plan_mode m, void *st)
{
    return hook_plan(0, s, b, m, st);
}
static ah_status plan1(ah_state *s, const ah_batch *b, ah_plan_mode m, void *st)
{
    return hook_plan(1, s, b, m, st);
}
static ah_status fwd0(ah_state *s, const ah_forward_args *a) { return hook_forward(0, s, a); }
static ah_status fwd1(ah_state *s, const ah_forward_args *a) { return hook_forward(1, s, a); }

/* Event calls in order: 'R' a record on the engine's stream (NULL), 'r'
 * one on another, 'W' / 'w' a wait of the engine's stream / another. */
static char g_ev[64];
static int g_nev;
static ah_status (*g_record)(ah_context *, ah_event *, void *);
static ah_status (*g_wait)(ah_context *, void *, ah_event *);

static ah_status hook_record(ah_context *c, ah_event *e, void *stream)
{
    if (g_nev < 63) g_ev[g_nev++] = stream ? 'r' : 'R';
    return g_record(c, e, stream);
}

static ah_status hook_wait(ah_context *c, void *stream, ah_event *e)
{
    if (g_nev < 63) g_ev[g_nev++] = stream ? 'w' : 'W';
    return g_wait(c, stream, e);
}

/* Wrap plugin `name`'s plan and forward as hook `who` (the plugin must be
 * loaded: a binding on it exists). */
static void hook(ah_host *h, const char *name, int who)
{
    int slot = ah__host_find(h, name);
    CHECK(slot >= 0 && h->slots[slot].lp);
    if (slot < 0 || !h->slots[slot].lp) return;
    ah_plugin_ops *ops = &h->slots[slot].lp->ops;
    g_orig[who] = *ops;
    ops->plan = who ? plan1 : plan0;
    ops->forward = who ? fwd1 : fwd0;
    if (ops->event_record) {
        g_record = ops->event_record, g_wait = ops->stream_wait;
        ops->event_record = hook_record, ops->stream_wait = hook_wait;
    }
}

static int count(int who, int forward)
{
    int n = 0;
    for (int i = 0; i < g_n; i++) n += g_log[i].who == who && g_log[i].forward == forward;
    return n;
}

static const call *nth(int who, int forward, int k)
{
    for (int i = 0; i < g_n; i++)
        if (g_log[i].who == who && g_log[i].forward == forward && k-- == 0) return &g_log[i];
    return NULL;
}

/* ---- a model, a host, a binding ------------------------------------------- */

static const char *dirs[] = {ATTNHOST_BUILD_DIR "/lib/attnhost/plugins",
                             ATTNHOST_SELECT_PLUGIN_DIR};

/* tweak (may be NULL) runs on the loaded plugin `name` before the binding. */
/* What env_open gives the host and binding besides the INI text: a scan
 * cache (and so a tune table beside it; "": none) and the binding's
 * mixed_steps. */
static const char *g_cache = "";
static ah_mixed_steps g_mixed = AH_MIXED_STEPS_CONFIG;

static int env_open(env *e, const char *ini, const char *tweak_name, void (*tweak)(ah_caps *))
{
    memset(e, 0, sizeof *e);
    ah_host_options o = {
        .struct_size = sizeof o,
        .config_text = ini,
        .plugin_dirs = dirs,
        .n_plugin_dirs = 2,
        .no_default_dirs = 1,
        .cache_path = g_cache,
    };
    ah_error err;
    CHECK_MSG(ah_host_create(&o, &e->h, &err) == AH_OK, "%s", err.msg);
    const ah_plugin_info *amx = ah_host_find_plugin(e->h, "cpu_amx");
    if (!amx || amx->state != AH_PLUGIN_AVAILABLE) {
        printf("test_phase_split: cpu_amx not available here, skipped: %s\n",
               amx ? amx->reason : "not built");
        ah_host_destroy(e->h);
        return -1;
    }
    CHECK(ah_model_parse("[model]\nname = t\nnum_layers = 2\nnum_q_heads = 4\nnum_kv_heads = 2\n"
                         "head_size = 64\ndtype = fp32\nblock_size = 16\nkv_layout = nhd\n",
                         "t", &e->m, &err) == AH_OK);
    CHECK_MSG(ah_host_select(e->h, e->m, &e->sel, &err) == AH_OK, "%s", err.msg);
    ah_caps *caps = tweak ? live_caps(e->h, tweak_name) : NULL;
    if (caps) tweak(caps);
    ah_binding_options bo = {
        sizeof bo, {sizeof(ah_limits), MAXR, MAXT, MAXB, MAXB * BS, NB}, 0, 0, NULL, g_mixed};
    CHECK_MSG(ah_binding_create(e->h, e->sel, &bo, &e->b, &err) == AH_OK, "%s", err.msg);
    return e->b ? 0 : -1;
}

/* ---- one step --------------------------------------------------------------- */

typedef struct step {
    float kc[L][CACHE_N], vc[L][CACHE_N], kref[L][CACHE_N], vref[L][CACHE_N];
    float q[MAXT * HQ * D], k[MAXT * HK * D], v[MAXT * HK * D], out[MAXT * HQ * D];
    int32_t qsl[MAXR + 1], seq[MAXR], table[MAXR * MAXB];
    int64_t slots[MAXT];
    int64_t sh_q[3], sh_k[3], sh_c[4];
    DLTensor tq, tk, tv, to, tkc[L], tvc[L];
    bf_desc desc;
    ah_batch batch;
} step;

/* Requests with query lengths ql and sequence lengths sl (cached = sl - ql),
 * in that order, each in its own blocks. */
static void step_fill(step *s, int n, const int *ql, const int *sl)
{
    uint64_t rng = 11;
    for (int l = 0; l < L; l++)
        for (size_t i = 0; i < CACHE_N; i++)
            s->kc[l][i] = bf_frand(&rng), s->vc[l][i] = bf_frand(&rng);
    for (size_t i = 0; i < sizeof s->q / sizeof s->q[0]; i++) s->q[i] = bf_frand(&rng);
    for (size_t i = 0; i < sizeof s->k / sizeof s->k[0]; i++)
        s->k[i] = bf_frand(&rng), s->v[i] = bf_frand(&rng);
    int next = 1, maxq = 0, maxs = 0;
    s->qsl[0] = 0;
    for (int r = 0; r < n; r++) {
        for (int j = 0; j < MAXB; j++)
            s->table[r * MAXB + j] = j < (sl[r] + BS - 1) / BS ? next++ : 0;
        for (int i = 0; i < ql[r]; i++) {
            int pos = sl[r] - ql[r] + i;
            s->slots[s->qsl[r] + i] = (int64_t)s->table[r * MAXB + pos / BS] * BS + pos % BS;
        }
        s->qsl[r + 1] = s->qsl[r] + ql[r];
        s->seq[r] = sl[r];
        if (ql[r] > maxq) maxq = ql[r];
        if (sl[r] > maxs) maxs = sl[r];
    }
    CHECK(next <= NB);
    const int T = s->qsl[n];
    s->sh_q[0] = s->sh_k[0] = T, s->sh_q[1] = HQ, s->sh_k[1] = HK, s->sh_q[2] = s->sh_k[2] = D;
    s->sh_c[0] = NB, s->sh_c[1] = BS, s->sh_c[2] = HK, s->sh_c[3] = D;
    s->tq = bf_tensor(s->q, 3, s->sh_q, kDLFloat, 32);
    s->tk = bf_tensor(s->k, 3, s->sh_k, kDLFloat, 32);
    s->tv = bf_tensor(s->v, 3, s->sh_k, kDLFloat, 32);
    s->to = bf_tensor(s->out, 3, s->sh_q, kDLFloat, 32);
    for (int l = 0; l < L; l++) {
        s->tkc[l] = bf_tensor(s->kc[l], 4, s->sh_c, kDLFloat, 32);
        s->tvc[l] = bf_tensor(s->vc[l], 4, s->sh_c, kDLFloat, 32);
    }
    s->batch = bf_batch(&s->desc, (DLDevice){kDLCPU, 0},
                        (ah_batch){.num_reqs = (uint32_t)n,
                                   .num_tokens = (uint32_t)T,
                                   .max_query_len = (uint32_t)maxq,
                                   .max_seq_len = (uint32_t)maxs,
                                   .num_blocks = NB,
                                   .query_start_loc_host = s->qsl,
                                   .seq_lens_host = s->seq,
                                   .block_table_host = s->table,
                                   .slot_mapping_host = s->slots,
                                   .block_table_stride = MAXB});
    g_qbase = s->q, g_obase = s->out;
}

/* Forward every layer over a NaN-poisoned output and compare each token
 * row with the oracle (which writes the new K/V into its own caches). */
static void step_check(env *e, step *s, const char *what)
{
    const ah_decision *d = ah_selection_decision(e->sel, 0, AH_PHASE_PREFILL);
    const uint32_t T = s->batch.num_tokens;
    for (int l = 0; l < L; l++) {
        memcpy(s->kref[l], s->kc[l], sizeof s->kref[l]);
        memcpy(s->vref[l], s->vc[l], sizeof s->vref[l]);
        ah_error err;
        CHECK(ah_reference_write_kv(&d->spec, &s->batch, s->k, s->v, s->kref[l], s->vref[l], 1, 1,
                                    &err) == AH_OK);
        for (size_t i = 0; i < sizeof s->out / sizeof s->out[0]; i++) s->out[i] = NAN;
        ah_forward_args a =
            bf_forward_args(&s->tq, &s->tk, &s->tv, &s->tkc[l], &s->tvc[l], &s->to, NULL);
        CHECK_MSG(ah_binding_forward(e->b, (uint32_t)l, &a) == AH_OK, "%s: %s", what,
                  ah_binding_errmsg(e->b));
        CHECK_MSG(memcmp(s->kref[l], s->kc[l], sizeof s->kref[l]) == 0 &&
                      memcmp(s->vref[l], s->vc[l], sizeof s->vref[l]) == 0,
                  "%s: layer %d K/V cache", what, l);
        static double ref[MAXT * HQ * D];
        ah_ref_inputs in = {.struct_size = sizeof in,
                            .spec = &d->spec,
                            .batch = &s->batch,
                            .q = s->q,
                            .key_cache = s->kref[l],
                            .value_cache = s->vref[l],
                            .sinks = NULL,
                            .alibi_slopes = NULL,
                            .k_scale = 1,
                            .v_scale = 1,
                            .key = NULL,
                            .value = NULL};
        CHECK(ah_reference_attention(&in, ref, NULL, &err) == AH_OK);
        uint32_t unwritten = 0, bad_row = UINT32_MAX;
        double worst = 0;
        for (uint32_t t = 0; t < T; t++)
            for (int i = 0; i < HQ * D; i++) {
                float o = s->out[t * HQ * D + i];
                if (isnan(o)) {
                    unwritten++;
                    continue;
                }
                double diff = fabs(o - ref[t * HQ * D + i]);
                if (diff > worst) worst = diff, bad_row = t;
            }
        CHECK_MSG(unwritten == 0, "%s: layer %d: %u output elements never written", what, l,
                  unwritten);
        CHECK_MSG(worst < 1e-4, "%s: layer %d: max abs error %g (token %u)", what, l, worst,
                  bad_row);
        for (uint32_t i = T * HQ * D; i < MAXT * HQ * D; i++)
            if (!isnan(s->out[i])) {
                CHECK_MSG(0, "%s: layer %d wrote past the batch's tokens", what, l);
                break;
            }
    }
}

/* 5 decodes of varied context, then a chunk of 7 over 20 cached tokens and a
 * fresh prefill of 12. */
static const int ORD_Q[7] = {1, 1, 1, 1, 1, 7, 12}, ORD_S[7] = {1, 17, 40, 100, 33, 27, 12};
/* the same requests, two decodes behind the prefills */
static const int UNORD_Q[7] = {1, 1, 7, 1, 1, 12, 1}, UNORD_S[7] = {1, 17, 27, 40, 100, 12, 33};

#define PREFILL_AMX "[select]\nprefill_priority = cpu_amx\ndecode_priority = sel_beta\n"
#define PREFILL_BETA "[select]\nprefill_priority = sel_beta\ndecode_priority = cpu_amx\n"

/* Plan the 7-request step of query lengths q and sequence lengths sl,
 * eager, the call log emptied first. */
static void plan7(env *e, step *s, const int *q, const int *sl, const char *what)
{
    step_fill(s, 7, q, sl);
    g_n = 0;
    CHECK_MSG(ah_binding_plan(e->b, &s->batch, AH_PLAN_EAGER, NULL) == AH_OK, "%s: %s", what,
              ah_binding_errmsg(e->b));
}

/* The 7 requests (in the order q / sl give) planned whole on the prefill
 * winner (hook 1), the decode winner (hook 0) idle; ah_binding_split says
 * `because`. */
static void expect_whole(env *e, step *s, const int *q, const int *sl, const char *because,
                         const char *what)
{
    const char *why = "x";
    uint32_t toks = 99;
    plan7(e, s, q, sl, what);
    CHECK(ah_binding_split(e->b, &toks, &why) == 0 && toks == 0);
    CHECK_CONTAINS(why, because);
    CHECK(ah_binding_phase(e->b) == AH_PHASE_PREFILL);
    CHECK(count(0, 0) == 0 && count(1, 0) == 1 && nth(1, 0, 0)->reqs == 7);
    step_check(e, s, what);
    CHECK(count(0, 1) == 0 && count(1, 1) == L);
}

/* The 5 decodes alone: the decode winner (hook 0) plans the whole batch. */
static void expect_decodes_alone(env *e, step *s, const char *what)
{
    const char *why = "x";
    uint32_t toks = 0;
    step_fill(s, 5, ORD_Q, ORD_S);
    g_n = 0;
    CHECK(ah_binding_plan(e->b, &s->batch, AH_PLAN_EAGER, NULL) == AH_OK);
    CHECK(ah_binding_phase(e->b) == AH_PHASE_DECODE);
    CHECK(ah_binding_split(e->b, &toks, &why) == 5 && toks == 5);
    CHECK_STREQ(why, "");
    CHECK(count(0, 0) == 1 && count(1, 0) == 0);
    step_check(e, s, what);
}

/* cpu_amx prefill, sel_beta decode. */
static void test_split_amx_prefill(void)
{
    env e;
    if (env_open(&e, PREFILL_AMX, NULL, NULL)) return;
    CHECK_STREQ(ah_selection_decision(e.sel, 0, AH_PHASE_PREFILL)->plugin, "cpu_amx");
    CHECK_STREQ(ah_selection_decision(e.sel, 1, AH_PHASE_DECODE)->plugin, "sel_beta");
    /* graphs: sel_beta's level for captured decode batches, cpu_amx's for the rest */
    uint32_t gl = 9;
    CHECK(ah_selection_graph_level(e.sel, NULL) == AH_GRAPH_NEVER);
    CHECK(ah_selection_graph_level_for(e.sel, AH_PHASE_DECODE, &gl) == AH_GRAPH_UNIFORM_BATCH &&
          gl == 0);
    CHECK(ah_selection_graph_level_for(e.sel, AH_PHASE_PREFILL, NULL) == AH_GRAPH_NEVER);
    CHECK(ah_selection_graph_level_for(e.sel, (ah_phase)7, NULL) == AH_GRAPH_NEVER);
    hook(e.h, "sel_beta", 0);
    hook(e.h, "cpu_amx", 1);
    step *s = calloc(1, sizeof *s);
    const char *why = "x";
    uint32_t toks = 99;

    /* ordered mixed batch: split */
    step_fill(s, 7, ORD_Q, ORD_S);
    g_n = 0, g_nev = 0;
    CHECK_MSG(ah_binding_plan(e.b, &s->batch, AH_PLAN_EAGER, NULL) == AH_OK, "%s",
              ah_binding_errmsg(e.b));
    CHECK(ah_binding_phase(e.b) == AH_PHASE_PREFILL);
    CHECK(ah_binding_split(e.b, &toks, &why) == 5 && toks == 5);
    CHECK_STREQ(why, "");
    /* one plan per plugin for both layers; the decode plugin saw only decodes */
    CHECK(count(0, 0) == 1 && count(1, 0) == 1);
    const call *c = nth(0, 0, 0);
    CHECK(c && c->reqs == 5 && c->toks == 5 && c->maxq == 1 && c->arrays_ok);
    c = nth(1, 0, 0);
    CHECK(c && c->reqs == 2 && c->toks == 19 && c->maxq == 12 && c->arrays_ok && c->qsl_is_host);
    step_check(&e, s, "ordered");
    CHECK(count(0, 1) == L && count(1, 1) == L);
    for (int l = 0; l < L; l++) {
        const call *fd = nth(0, 1, l), *fp = nth(1, 1, l);
        CHECK(fd && fd->row0 == 0 && fd->rows == 5 && fd->out_same_row);
        CHECK(fp && fp->row0 == 5 && fp->rows == 19 && fp->out_same_row);
        /* sel_beta offers events: its decode part runs on the binding's side
         * stream, the prefill part on the engine's (NULL here) */
        CHECK(fd && fd->stream && fp && !fp->stream);
    }
    /* per layer: fork (record on the engine's stream, the side stream
     * waits), then join (record on the side stream, the engine's waits) */
    g_ev[g_nev] = '\0';
    CHECK_STREQ(g_ev, "RwrWRwrW");

    /* decodes not all first: whole on cpu_amx */
    expect_whole(&e, s, UNORD_Q, UNORD_S, "not all first", "unordered");
    /* decodes only: the decode plugin plans the whole batch */
    expect_decodes_alone(&e, s, "decode only");

    /* prefills only */
    step_fill(s, 2, ORD_Q + 5, ORD_S + 5);
    CHECK(ah_binding_plan(e.b, &s->batch, AH_PLAN_EAGER, NULL) == AH_OK);
    CHECK(ah_binding_split(e.b, &toks, &why) == 0 && toks == 0);
    CHECK_STREQ(why, "");

    /* cascade: whole */
    step_fill(s, 7, ORD_Q, ORD_S);
    s->batch.common_prefix_len = 1;
    CHECK(ah_binding_plan(e.b, &s->batch, AH_PLAN_EAGER, NULL) == AH_OK);
    CHECK(ah_binding_split(e.b, NULL, &why) == 0);
    CHECK_CONTAINS(why, "cascade");

    /* a bad batch is refused before any split, and the last split is gone */
    step_fill(s, 7, ORD_Q, ORD_S);
    s->table[6 * MAXB] = NB;
    CHECK(ah_binding_plan(e.b, &s->batch, AH_PLAN_EAGER, NULL) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(e.b), "block_table[6][0]");
    CHECK(ah_binding_split(e.b, NULL, NULL) == 0);
    free(s);
    env_close(&e);
}

/* sel_beta (device memory slots, emulated graphs) prefill, cpu_amx decode:
 * the rebased query_start_loc travels through the plugin's mem_copy. */
static void test_split_device_copy(void)
{
    env e;
    if (env_open(&e, PREFILL_BETA, NULL, NULL)) return;
    CHECK(ah_selection_graph_level_for(e.sel, AH_PHASE_DECODE, NULL) == AH_GRAPH_NEVER);
    CHECK(ah_selection_graph_level_for(e.sel, AH_PHASE_PREFILL, NULL) == AH_GRAPH_UNIFORM_BATCH);
    hook(e.h, "cpu_amx", 0);
    hook(e.h, "sel_beta", 1);
    step *s = calloc(1, sizeof *s);
    const char *why = "x";
    step_fill(s, 7, ORD_Q, ORD_S);
    g_n = 0;
    CHECK_MSG(ah_binding_plan(e.b, &s->batch, AH_PLAN_EAGER, NULL) == AH_OK, "%s",
              ah_binding_errmsg(e.b));
    CHECK(ah_binding_split(e.b, NULL, &why) == 5);
    CHECK_STREQ(why, "");
    const call *c = nth(1, 0, 0);
    CHECK(c && c->reqs == 2 && c->arrays_ok && !c->qsl_is_host);
    step_check(&e, s, "device copy");
    /* graph capture of a mixed batch: whole on the prefill winner */
    g_n = 0;
    CHECK_MSG(ah_binding_plan(e.b, &s->batch, AH_PLAN_CAPTURE, NULL) == AH_OK, "%s",
              ah_binding_errmsg(e.b));
    CHECK(ah_binding_split(e.b, NULL, &why) == 0);
    CHECK_CONTAINS(why, "graph");
    CHECK(count(0, 0) == 0 && count(1, 0) == 1 && nth(1, 0, 0)->reqs == 7);
    free(s);
    env_close(&e);
}

/* [select] mixed_steps = whole: a mixed step goes whole to the prefill
 * winner (cpu_amx), a step of decodes alone still to the decode winner. */
static void test_mixed_steps_whole(void)
{
    env e;
    if (env_open(&e, PREFILL_AMX "mixed_steps = whole\n", NULL, NULL)) return;
    hook(e.h, "sel_beta", 0);
    hook(e.h, "cpu_amx", 1);
    step *s = calloc(1, sizeof *s);
    expect_whole(&e, s, ORD_Q, ORD_S, "mixed_steps = whole", "mixed step whole");
    expect_decodes_alone(&e, s, "decodes alone under mixed_steps = whole");
    free(s);
    env_close(&e);
}

/* The 7-request mixed step split: its 5 decodes on the decode winner. */
static void expect_split(env *e, step *s, const char *what)
{
    const char *why = "x";
    uint32_t toks = 0;
    plan7(e, s, ORD_Q, ORD_S, what);
    CHECK_MSG(ah_binding_split(e->b, &toks, &why) == 5 && toks == 5, "%s: %s", what, why);
    CHECK_STREQ(why, "");
    CHECK(count(0, 0) == 1 && nth(0, 0, 0)->reqs == 5);
    step_check(e, s, what);
}

static int open_hooked(env *e, const char *ini)
{
    if (env_open(e, ini, NULL, NULL)) return -1;
    hook(e->h, "sel_beta", 0);
    hook(e->h, "cpu_amx", 1);
    return 0;
}

/* The binding's mixed_steps over [select]'s, and mixed_steps = measured:
 * split while untuned, then as the tune table's mixed-step entries for the
 * pair (cpu_amx's prefills, sel_beta's decodes) say. */
static void test_mixed_steps_chosen(void)
{
    env e;
    ah_error err;
    step *s = calloc(1, sizeof *s);
    g_mixed = AH_MIXED_STEPS_WHOLE;
    if (!open_hooked(&e, PREFILL_AMX)) {
        expect_whole(&e, s, ORD_Q, ORD_S, "the binding's options", "options: whole");
        env_close(&e);
    }
    g_mixed = AH_MIXED_STEPS_SPLIT;
    if (!open_hooked(&e, PREFILL_AMX "mixed_steps = whole\n")) {
        expect_split(&e, s, "options: split over [select] whole");
        ah_binding *b = NULL;
        ah_binding_options bo = {sizeof bo, {sizeof(ah_limits), MAXR, MAXT, MAXB, MAXB * BS, NB},
                                 0,         0,
                                 NULL,      (ah_mixed_steps)7};
        CHECK(ah_binding_create(e.h, e.sel, &bo, &b, &err) == AH_ERR_INVALID_ARGUMENT && !b);
        CHECK_CONTAINS(err.msg, "mixed_steps = 7");
        env_close(&e);
    }
    g_mixed = AH_MIXED_STEPS_CONFIG;
    char dir[] = "/tmp/ah_mixed_XXXXXX", cache[64];
    if (!mkdtemp(dir)) {
        CHECK_MSG(0, "mkdtemp: no temporary directory");
        free(s);
        return;
    }
    snprintf(cache, sizeof cache, "%s/scan-cache", dir);
    g_cache = cache;
    static const double whole_ms[2] = {1.0, 5.0};
    for (int k = 0; k < 2; k++) {
        if (open_hooked(&e, PREFILL_AMX "mixed_steps = measured\n")) break;
        if (k == 0) expect_split(&e, s, "measured, untuned: split");
        /* per layer: whole 1 ms (then 5) on cpu_amx, split with sel_beta 3 ms */
        const ah_layer_spec *rs = &ah_selection_decision(e.sel, 0, AH_PHASE_PREFILL)->spec;
        ah_tune_entry t[2] = {{sizeof t[0], "cpu_amx", rs, AH_PHASE_PREFILL, whole_ms[k], "m",
                               AH_MIXED_STEPS_WHOLE, NULL},
                              {sizeof t[0], "cpu_amx", rs, AH_PHASE_PREFILL, 3.0, "m",
                               AH_MIXED_STEPS_SPLIT, "sel_beta"}};
        CHECK_MSG(ah_host_record_tune(e.h, t, 2, &err) == AH_OK, "%s", err.msg);
        env_close(&e);
        if (open_hooked(&e, PREFILL_AMX "mixed_steps = measured\n")) break;
        uint32_t n = 0;
        double w = 0, sp = 0;
        CHECK(ah_selection_mixed_steps(e.h, e.sel, &n, &w, &sp) ==
                  (k == 0 ? AH_MIXED_STEPS_WHOLE : AH_MIXED_STEPS_SPLIT) &&
              n == L && w == 2 * whole_ms[k] && sp == 6.0);
        if (k == 0)
            expect_whole(&e, s, ORD_Q, ORD_S,
                         "mixed_steps = measured: attnhost tune timed the mixed step whole in 2 "
                         "ms against 6 ms split, over the 2 layers with two winners",
                         "measured: whole");
        else expect_split(&e, s, "measured: split");
        env_close(&e);
    }
    g_cache = "";
    static const char *const files[] = {"scan-cache", "tune-table", "check-records"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char f[96];
        snprintf(f, sizeof f, "%s/%s", dir, files[i]);
        unlink(f);
    }
    CHECK_MSG(rmdir(dir) == 0, "%s: left files behind", dir);
    free(s);
}

static void as_split(ah_caps *c) { c->mixed_batch = AH_MIXED_SPLIT; }
static void spec_decode(ah_caps *c) { c->decode_query_len_max = 2; }

/* One plugin for both phases: WHOLE shares a state and plans mixed batches
 * whole; SPLIT gets a state per phase and the two parts. */
static void test_one_plugin(void)
{
    env e;
    step *s = calloc(1, sizeof *s);
    const char *why = "x";
    if (!env_open(&e, "[select]\npriority = sel_beta\n", NULL, NULL)) {
        hook(e.h, "sel_beta", 0);
        step_fill(s, 7, ORD_Q, ORD_S);
        g_n = 0;
        CHECK(ah_binding_plan(e.b, &s->batch, AH_PLAN_EAGER, NULL) == AH_OK);
        CHECK(ah_binding_split(e.b, NULL, &why) == 0);
        CHECK_CONTAINS(why, "one state");
        CHECK(count(0, 0) == 1 && nth(0, 0, 0)->reqs == 7);
        step_check(&e, s, "whole");
        env_close(&e);
    }
    if (!env_open(&e, "[select]\npriority = sel_beta\n", "sel_beta", as_split)) {
        hook(e.h, "sel_beta", 0);
        step_fill(s, 7, ORD_Q, ORD_S);
        g_n = 0;
        CHECK(ah_binding_plan(e.b, &s->batch, AH_PLAN_EAGER, NULL) == AH_OK);
        CHECK(ah_binding_split(e.b, NULL, &why) == 5);
        CHECK(count(0, 0) == 2 && nth(0, 0, 0)->reqs == 5 && nth(0, 0, 1)->reqs == 2);
        step_check(&e, s, "split plugin");
        /* unordered: its prefill state takes the whole batch */
        step_fill(s, 7, UNORD_Q, UNORD_S);
        g_n = 0;
        CHECK(ah_binding_plan(e.b, &s->batch, AH_PLAN_EAGER, NULL) == AH_OK);
        CHECK(count(0, 0) == 1 && nth(0, 0, 0)->reqs == 7);
        step_check(&e, s, "split plugin, unordered");
        env_close(&e);
    }
    /* a decode winner that verifies a speculative token (query_len 2) */
    if (!env_open(&e, PREFILL_AMX, "sel_beta", spec_decode)) {
        hook(e.h, "sel_beta", 0);
        static const int q[5] = {2, 1, 2, 3, 9}, sl[5] = {30, 8, 2, 50, 20};
        step_fill(s, 5, q, sl);
        g_n = 0;
        uint32_t toks = 0;
        CHECK(ah_binding_plan(e.b, &s->batch, AH_PLAN_EAGER, NULL) == AH_OK);
        CHECK(ah_binding_split(e.b, &toks, &why) == 3 && toks == 5);
        CHECK(count(0, 0) == 1 && nth(0, 0, 0)->maxq == 2 && nth(0, 0, 0)->reqs == 3);
        step_check(&e, s, "speculative decode");
        env_close(&e);
    }
    free(s);
}

int main(void)
{
    test_split_amx_prefill();
    test_split_device_copy();
    test_mixed_steps_whole();
    test_mixed_steps_chosen();
    test_one_plugin();
    return check_report("test_phase_split");
}
