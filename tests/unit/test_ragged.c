/*
 * Ragged K/V (ABI 2.3): a layer's ragged prefill form in the model
 * (ragged_prefill and MLA's non-absorbed sizes, from INI and from C, and
 * back to INI), every refusal of ah_batch_validate on cu_seqlens_k, the
 * selection of the form (cpu_amx claims it; a backend without
 * AH_FEAT_RAGGED_KV is refused with that reason and leaves it unbound),
 * and a DeepSeek-shaped step on cpu_amx: write_kv stores the absorbed
 * latent in the paged cache while the ragged form attends over packed
 * decompressed K/V, both compared with the oracle, and each refusal of a
 * ragged step by ah_binding_plan and ah_binding_forward; a context step
 * (ragged_keys = context) merged by LSE with the new tokens' pass in one
 * binding equals the oracle's one causal pass.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/attnhost.h>
#include <attnhost/reference.h>

#include "batch_fixture.h"
#include "binding_env.h"
#include "check.h"

/* Absorbed MLA 192 / 128 (rank 128, rope 64), one KV head, decoding;
 * ragged prefill 128 / 64 (nope 64 + rope 64, v 64) with a KV head per
 * query head. */
#define MLA_MODEL \
    "[model]\nname = mini-mla\nnum_layers = 2\nnum_q_heads = 4\nmla = true\n" \
    "kv_lora_rank = 128\nqk_rope_head_dim = 64\nqk_nope_head_dim = 64\nv_head_dim = 64\n" \
    "ragged_prefill = true\ndtype = fp32\nblock_size = 16\nkv_layout = nhd\nscale = 0.125\n"
#define GQA_MODEL \
    "[model]\nname = gqa\nnum_layers = 1\nnum_q_heads = 4\nnum_kv_heads = 2\nhead_size = 64\n" \
    "dtype = fp32\nblock_size = 16\nkv_layout = nhd\n"

enum { HQ = 4, QK = 128, V = 64, LAT = 192, LV = 128, BS = 16, NB = 16, STRIDE = 4 };

/* ---- the model ----------------------------------------------------------- */

static void test_model(void)
{
    ah_model *m = NULL;
    ah_error err = {""};
    CHECK_MSG(ah_model_parse(MLA_MODEL, "m.ini", &m, &err) == AH_OK, "%s", err.msg);
    if (!m) return;
    const ah_layer_spec *p = ah_model_layer(m, 0), *r = ah_model_layer_ragged(m, 0);
    CHECK(p->use_mla && p->num_kv_heads == 1 && p->qk_head_size == LAT && p->v_head_size == LV);
    CHECK(!ah_spec_ragged(p));
    CHECK(r && ah_spec_ragged(r) && !r->use_mla && r->num_kv_heads == HQ && r->num_q_heads == HQ);
    CHECK(r && r->qk_head_size == QK && r->v_head_size == V && r->scale == 0.125f);
    CHECK(r && r->kv_dtype == AH_DTYPE_FP32 && r->kv_group == 0);
    CHECK(!ah_model_layer_ragged(m, 2));
    /* back to INI and parsed again: the same forms */
    char *text = NULL;
    CHECK(ah_model_to_ini(m, &text) == AH_OK && text && strstr(text, "ragged_prefill = true"));
    ah_model *back = NULL;
    CHECK_MSG(text && ah_model_parse(text, "back", &back, &err) == AH_OK, "%s", err.msg);
    if (back) {
        CHECK(!memcmp(ah_model_layer_ragged(back, 1), r, sizeof *r));
        CHECK(!memcmp(ah_model_layer(back, 1), p, sizeof *p));
        ah_model_destroy(back);
    }
    free(text);
    /* from C: the forms beside the specs; a bad one names the layer */
    ah_layer_spec specs[2] = {*p, *p}, forms[2] = {*r, *r};
    forms[0].struct_size = 0; /* layer 0 without one */
    ah_model_desc d = {sizeof d, "c", 2, specs, NULL, forms};
    ah_model *c = NULL;
    CHECK_MSG(ah_model_create(&d, &c, &err) == AH_OK, "%s", err.msg);
    CHECK(c && !ah_model_layer_ragged(c, 0) && ah_model_layer_ragged(c, 1));
    ah_model_destroy(c);
    forms[1].num_kv_heads = 2;
    CHECK(ah_model_create(&d, &c, &err) == AH_ERR_CONFIG && !c);
    CHECK_CONTAINS(err.msg, "c: layer 1: ragged prefill form (qk 128 / v 64, 4/2 heads): an mla "
                            "layer's ragged form has as many KV heads as query heads");
    forms[1] = *r;
    forms[1].softcap = 5;
    CHECK(ah_model_create(&d, &c, &err) == AH_ERR_CONFIG);
    CHECK_CONTAINS(err.msg, "its window, soft-cap, sinks, ALiBi or causal flag differs");
    specs[1].ragged_kv = 1; /* a layer's own spec is its paged form */
    CHECK(ah_model_create(&d, &c, &err) == AH_ERR_CONFIG);
    CHECK_CONTAINS(err.msg, "c: layer 1: the layer's spec says ragged_kv");
    ah_model_destroy(m);

    /* INI refusals, each naming the line */
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"[model]\nname = x\nnum_layers = 1\nnum_q_heads = 4\nmla = true\nragged_prefill = true\n",
         "x.ini:6: layer 0: ragged_prefill on an mla layer needs qk_nope_head_dim"},
        {"[model]\nname = x\nnum_layers = 1\nnum_q_heads = 4\nhead_size = 64\nv_head_dim = 64\n",
         "x.ini:6: layer 0: v_head_dim applies only to mla layers"},
        {"[model]\nname = x\nnum_layers = 1\nnum_q_heads = 4\nhead_size = 64\nattn_type = "
         "encoder_only\nragged_prefill = true\n",
         "x.ini:7: layer 0: ragged prefill form (qk 64 / v 64, 4/4 heads): only paged decoder "
         "layers have a ragged prefill form"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(ah_model_parse(bad[i].text, "x.ini", &m, &err) == AH_ERR_CONFIG && !m);
        CHECK_CONTAINS(err.msg, bad[i].msg);
    }
    /* a plain layer's form has its own heads and sizes */
    CHECK_MSG(ah_model_parse(GQA_MODEL "ragged_prefill = true\n", "g", &m, &err) == AH_OK, "%s",
              err.msg);
    if (m) {
        r = ah_model_layer_ragged(m, 0);
        CHECK(r && r->num_kv_heads == 2 && r->qk_head_size == 64 && r->v_head_size == 64);
        CHECK(r && fabsf(r->scale - 0.125f) < 1e-7f);
        ah_model_destroy(m);
    }
}

/* ---- batch validation ---------------------------------------------------- */

/* Three requests: a prompt (4 queries over 4 keys), a chunk over context
 * (2 over 7) and a single query over 5 keys. */
typedef struct rbatch {
    int32_t qsl[4], cuk[4], seq[3], tab[3 * STRIDE];
    int64_t slots[7];
    bf_desc d;
    int64_t sh_cuk[1];
    DLTensor tcuk;
    ah_batch b;
} rbatch;

static void rbatch_init(rbatch *x)
{
    static const int32_t qsl[4] = {0, 4, 6, 7}, cuk[4] = {0, 4, 11, 16}, seq[3] = {4, 7, 5};
    memset(x, 0, sizeof *x);
    memcpy(x->qsl, qsl, sizeof qsl);
    memcpy(x->cuk, cuk, sizeof cuk);
    memcpy(x->seq, seq, sizeof seq);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < STRIDE; k++) x->tab[r * STRIDE + k] = r * STRIDE + k;
    for (int r = 0; r < 3; r++) /* each new token's slot in its request's first block */
        for (int t = qsl[r]; t < qsl[r + 1]; t++)
            x->slots[t] = (int64_t)x->tab[r * STRIDE] * BS + (seq[r] - (qsl[r + 1] - t));
    x->b = bf_batch(&x->d, (DLDevice){kDLCPU, 0},
                    (ah_batch){.num_reqs = 3,
                               .num_tokens = 7,
                               .max_query_len = 4,
                               .max_seq_len = 7,
                               .num_blocks = NB,
                               .query_start_loc_host = x->qsl,
                               .seq_lens_host = x->seq,
                               .block_table_host = x->tab,
                               .slot_mapping_host = x->slots,
                               .block_table_stride = STRIDE});
    x->sh_cuk[0] = 4;
    x->tcuk = bf_tensor(x->cuk, 1, x->sh_cuk, kDLInt, 32);
    x->b.cu_seqlens_k = &x->tcuk;
    x->b.cu_seqlens_k_host = x->cuk;
    x->b.num_k_tokens = 16;
}

static void test_validate(void)
{
    ah_model *m = NULL;
    ah_error err = {""};
    CHECK(ah_model_parse(MLA_MODEL, "m", &m, &err) == AH_OK);
    if (!m) return;
    ah_layer_spec causal = *ah_model_layer_ragged(m, 0), bidir = causal;
    bidir.causal = AH_CAUSAL_OFF;
    rbatch x;
    rbatch_init(&x);
    CHECK_MSG(ah_batch_validate(&x.b, &causal, NULL, &err) == AH_OK, "%s", err.msg);
    /* the paged form reads seq_lens, not cu_seqlens_k */
    CHECK_MSG(ah_batch_validate(&x.b, ah_model_layer(m, 0), NULL, &err) == AH_OK, "%s", err.msg);
    static const struct {
        int idx; /* cu_seqlens_k entry changed (-1: num_k_tokens, -2: no keys) */
        int32_t value;
        int bidir;
        const char *msg;
    } bad[] = {
        {-2, 0, 0, "cu_seqlens_k_host is NULL"},
        {0, 1, 0, "cu_seqlens_k[0] = 1, expected 0"},
        {2, 3, 0,
         "cu_seqlens_k[2] = 3 after cu_seqlens_k[1] = 4: request 1 has k_len -1 and "
         "query_len 2 (must be >= 0)"},
        {2, 4, 1,
         "cu_seqlens_k[2] = 4 after cu_seqlens_k[1] = 4: request 1 has k_len 0 and "
         "query_len 2 (a real request needs at least one key, except in a context step"},
        {1, 3, 0,
         "cu_seqlens_k[1] = 3 after cu_seqlens_k[0] = 0: request 0 has k_len 3 and "
         "query_len 4 below its query_len"},
        {2, 12, 0, "cu_seqlens_k[2] = 12: request 1 has k_len 8 above max_seq_len = 7"},
        {-1, 15, 0, "cu_seqlens_k[3] = 16, expected num_k_tokens = 15 (the key tensor's rows)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rbatch_init(&x);
        if (bad[i].idx == -2) x.b.cu_seqlens_k_host = NULL;
        else if (bad[i].idx == -1) x.b.num_k_tokens = (uint32_t)bad[i].value;
        else x.cuk[bad[i].idx] = bad[i].value;
        CHECK(ah_batch_validate(&x.b, bad[i].bidir ? &bidir : &causal, NULL, &err) ==
              AH_ERR_INVALID_ARGUMENT);
        CHECK_CONTAINS(err.msg, bad[i].msg);
    }
    /* non-causal: fewer keys than queries is fine */
    rbatch_init(&x);
    x.cuk[1] = 3, x.cuk[2] = 10, x.cuk[3] = 15, x.b.num_k_tokens = 15;
    CHECK_MSG(ah_batch_validate(&x.b, &bidir, NULL, &err) == AH_OK, "%s", err.msg);
    /* a context step: every key precedes the queries, so a causal layer
     * takes fewer keys than queries, and a request without context */
    rbatch_init(&x);
    x.cuk[1] = 0, x.cuk[2] = 1, x.cuk[3] = 6, x.b.num_k_tokens = 6;
    CHECK(ah_batch_validate(&x.b, &causal, NULL, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "request 0 has k_len 0 and query_len 4 (a real request needs at "
                            "least one key, except in a context step: ragged_keys = context)");
    x.b.ragged_keys = AH_RAGGED_KEYS_CONTEXT;
    CHECK_MSG(ah_batch_validate(&x.b, &causal, NULL, &err) == AH_OK, "%s", err.msg);
    CHECK_MSG(ah_batch_validate(&x.b, &bidir, NULL, &err) == AH_OK, "%s", err.msg);
    x.cuk[3] = 9, x.b.num_k_tokens = 9; /* request 2: 8 keys, past max_seq_len */
    CHECK(ah_batch_validate(&x.b, &causal, NULL, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "request 2 has k_len 8 above max_seq_len = 7");
    x.cuk[3] = 6, x.b.num_k_tokens = 6;
    x.b.ragged_keys = 7;
    CHECK(ah_batch_validate(&x.b, &causal, NULL, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "ragged_keys = 7 is unknown (0: bottom_right");
    /* a batch whose struct_size stops before ragged_keys is bottom-right */
    x.b.struct_size = offsetof(ah_batch, ragged_keys);
    CHECK(ah_batch_validate(&x.b, &causal, NULL, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "request 0 has k_len 0 and query_len 4");
    /* above the limits, and a padded request with keys */
    rbatch_init(&x);
    ah_limits lim = {sizeof lim, 3, 7, STRIDE, 6, NB};
    x.b.max_seq_len = 6;
    x.cuk[2] = 10, x.cuk[3] = 15, x.b.num_k_tokens = 15; /* request 1: 6 keys */
    x.seq[1] = 6;
    CHECK_MSG(ah_batch_validate(&x.b, &causal, &lim, &err) == AH_OK, "%s", err.msg);
    lim.max_seq_len = 5;
    CHECK(ah_batch_validate(&x.b, &causal, &lim, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "exceeds limits.max_seq_len = 5");
    rbatch_init(&x);
    x.qsl[3] = 6, x.b.num_tokens = 6; /* request 2 padded, but it has 5 keys */
    CHECK(ah_batch_validate(&x.b, &causal, NULL, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "request 2 has k_len 5 and query_len 0 for a padded request");
    /* a tree mask does not apply to ragged keys */
    rbatch_init(&x);
    uint8_t mask[64] = {0};
    int64_t mip[4] = {0, 16, 30, 35};
    x.b.custom_mask_host = mask, x.b.mask_indptr_host = mip, x.b.custom_mask_len = 64;
    CHECK(ah_batch_validate(&x.b, &causal, NULL, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "custom_mask is set, but a ragged layer takes no tree mask");
    /* a batch of ABI 2.2 has no ragged keys */
    rbatch_init(&x);
    x.b.struct_size = offsetof(ah_batch, cu_seqlens_k);
    CHECK(ah_batch_validate(&x.b, &causal, NULL, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "predates it");
    ah_model_destroy(m);
}

/* ---- selection and a step on cpu_amx -------------------------------------- */

static const char *dirs[] = {ATTNHOST_BUILD_DIR "/lib/attnhost/plugins",
                             ATTNHOST_SELECT_PLUGIN_DIR};

/* forced: every layer (and form) to that plugin; NULL: default order. */
static int env_open(env *e, const char *model, const char *forced)
{
    memset(e, 0, sizeof *e);
    ah_host_options o = {.struct_size = sizeof o,
                         .plugin_dirs = dirs,
                         .n_plugin_dirs = 2,
                         .no_default_dirs = 1,
                         .cache_path = ""};
    ah_error err;
    CHECK_MSG(ah_host_create(&o, &e->h, &err) == AH_OK, "%s", err.msg);
    const ah_plugin_info *amx = e->h ? ah_host_find_plugin(e->h, "cpu_amx") : NULL;
    if (!amx || amx->state != AH_PLUGIN_AVAILABLE) {
        printf("test_ragged: cpu_amx not available here, skipped: %s\n",
               amx ? amx->reason : "not built");
        return -1;
    }
    CHECK(ah_model_parse(model, "m", &e->m, &err) == AH_OK);
    ah_status s = forced ? ah_host_select_forced(e->h, e->m, forced, &e->sel, &err)
                         : ah_host_select(e->h, e->m, &e->sel, &err);
    CHECK_MSG(s == AH_OK, "%s", err.msg);
    ah_binding_options bo = {
        sizeof bo, {sizeof(ah_limits), 4, 16, STRIDE, 16, NB}, 0, 0, NULL, AH_MIXED_STEPS_CONFIG};
    CHECK_MSG(e->sel && ah_binding_create(e->h, e->sel, &bo, &e->b, &err) == AH_OK, "%s", err.msg);
    return e->b ? 0 : -1;
}

static void fill(float *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) p[i] = bf_frand(&seed);
}

static void test_selection(void)
{
    env e;
    if (env_open(&e, GQA_MODEL "ragged_prefill = true\n", "sel_beta") == 0) {
        const ah_decision *d = ah_selection_ragged_decision(e.sel, 0);
        CHECK(d && !d->plugin && !ah_selection_ragged_bound(e.sel, 0));
        int found = 0;
        for (uint32_t k = 0; d && k < d->n_candidates; k++)
            for (uint32_t i = 0; i < d->candidates[k].n_reasons; i++)
                found |= !strcmp(d->candidates[k].reasons[i].field, "ragged_kv") &&
                         d->candidates[k].reasons[i].code == AH_REASON_FEATURE;
        CHECK_MSG(found, "sel_beta's refusal of the ragged form names ragged_kv");
        /* the binding stands; a ragged step is refused naming the layer */
        rbatch x;
        rbatch_init(&x);
        CHECK(ah_binding_plan(e.b, &x.b, AH_PLAN_EAGER, NULL) == AH_ERR_UNSUPPORTED);
        CHECK_CONTAINS(ah_binding_errmsg(e.b),
                       "cu_seqlens_k is set (a ragged step), but layer 0's ragged prefill form "
                       "is not bound");
        /* without cu_seqlens_k the step is an ordinary paged one */
        x.b.cu_seqlens_k = NULL, x.b.cu_seqlens_k_host = NULL;
        CHECK_MSG(ah_binding_plan(e.b, &x.b, AH_PLAN_EAGER, NULL) == AH_OK, "%s",
                  ah_binding_errmsg(e.b));
    }
    env_close(&e);
    if (env_open(&e, MLA_MODEL, NULL) == 0) {
        const ah_decision *d = ah_selection_ragged_decision(e.sel, 1);
        CHECK(d && d->plugin && !strcmp(d->plugin, "cpu_amx") &&
              ah_selection_ragged_bound(e.sel, 1));
        CHECK(d && ah_spec_ragged(&d->spec) && d->spec.qk_head_size == QK);
        CHECK(!strcmp(ah_selection_warnings(e.sel), ""));
    }
    env_close(&e);
    /* a model without ragged forms refuses a batch with cu_seqlens_k */
    if (env_open(&e, GQA_MODEL, "cpu_amx") == 0) {
        CHECK(!ah_selection_ragged_decision(e.sel, 0));
        rbatch x;
        rbatch_init(&x);
        CHECK(ah_binding_plan(e.b, &x.b, AH_PLAN_EAGER, NULL) == AH_ERR_INVALID_ARGUMENT);
        CHECK_CONTAINS(ah_binding_errmsg(e.b), "but no layer has a ragged prefill form");
    }
    env_close(&e);
}

static void test_step(void)
{
    env e;
    if (env_open(&e, MLA_MODEL, "cpu_amx") != 0) {
        env_close(&e);
        return;
    }
    rbatch x;
    rbatch_init(&x);
    const ah_layer_spec *paged = &ah_selection_decision(e.sel, 0, AH_PHASE_PREFILL)->spec;
    const ah_layer_spec *rf = &ah_selection_ragged_decision(e.sel, 0)->spec;
    /* tensors: the latent for the cache, the ragged step's q and K/V */
    static float lat[7 * LAT], q[7 * HQ * QK], k[16 * HQ * QK], v[16 * HQ * V], out[7 * HQ * V],
        lse[7 * HQ], kc[NB * BS * LAT], kc_ref[NB * BS * LAT];
    fill(lat, sizeof lat / 4, 1), fill(q, sizeof q / 4, 2), fill(k, sizeof k / 4, 3);
    fill(v, sizeof v / 4, 4), fill(kc, sizeof kc / 4, 5);
    memcpy(kc_ref, kc, sizeof kc);
    int64_t sh_lat[3] = {7, 1, LAT}, sh_q[3] = {7, HQ, QK}, sh_k[3] = {16, HQ, QK},
            sh_v[3] = {16, HQ, V}, sh_o[3] = {7, HQ, V}, sh_l[2] = {7, HQ},
            sh_kc[4] = {NB, BS, 1, LAT};
    DLTensor tlat = bf_tensor(lat, 3, sh_lat, kDLFloat, 32),
             tq = bf_tensor(q, 3, sh_q, kDLFloat, 32), tk = bf_tensor(k, 3, sh_k, kDLFloat, 32),
             tv = bf_tensor(v, 3, sh_v, kDLFloat, 32), to = bf_tensor(out, 3, sh_o, kDLFloat, 32),
             tl = bf_tensor(lse, 2, sh_l, kDLFloat, 32),
             tkc = bf_tensor(kc, 4, sh_kc, kDLFloat, 32);
    CHECK_MSG(ah_binding_plan(e.b, &x.b, AH_PLAN_EAGER, NULL) == AH_OK, "%s",
              ah_binding_errmsg(e.b));
    CHECK(ah_binding_phase(e.b) == AH_PHASE_PREFILL);
    const char *why = NULL;
    CHECK(ah_binding_split(e.b, NULL, &why) == 0 && why && strstr(why, "ragged step"));
    /* the latent goes to the paged cache (the paged form's write_kv) */
    ah_kv_write_args w = {.struct_size = sizeof w, .key = &tlat, .key_cache = &tkc};
    CHECK_MSG(ah_binding_write_kv(e.b, 0, &w) == AH_OK, "%s", ah_binding_errmsg(e.b));
    ah_error err;
    CHECK_MSG(ah_reference_write_kv(paged, &x.b, lat, NULL, kc_ref, NULL, 0, 0, &err) == AH_OK,
              "%s", err.msg);
    CHECK_MSG(!memcmp(kc, kc_ref, sizeof kc), "write_kv in a ragged step fills the paged cache");
    /* attention over the packed keys, poisoned output first */
    for (size_t i = 0; i < sizeof out / 4; i++) out[i] = NAN;
    ah_forward_args a = {.struct_size = sizeof a,
                         .q = &tq,
                         .key = &tk,
                         .value = &tv,
                         .key_cache = &tkc,
                         .out = &to,
                         .lse = &tl};
    CHECK_MSG(ah_binding_forward(e.b, 1, &a) == AH_OK, "%s", ah_binding_errmsg(e.b));
    double ref[7 * HQ * V], rl[7 * HQ];
    ah_ref_inputs in = {
        .struct_size = sizeof in, .spec = rf, .batch = &x.b, .q = q, .key = k, .value = v};
    CHECK_MSG(ah_reference_attention(&in, ref, rl, &err) == AH_OK, "%s", err.msg);
    double worst = 0, worst_l = 0;
    for (size_t i = 0; i < sizeof out / 4; i++)
        worst = fmax(worst, isnan(out[i]) ? INFINITY : fabs(out[i] - ref[i]));
    for (size_t i = 0; i < sizeof lse / 4; i++) worst_l = fmax(worst_l, fabs(lse[i] - rl[i]));
    CHECK_MSG(worst < 1e-4 && worst_l < 1e-4, "ragged output off the oracle by %g (lse %g)", worst,
              worst_l);
    /* the same queries' first request over its own 4 keys alone: causal,
     * the first query sees one key, so the oracle differs from a
     * non-causal pass (the check above can fail) */
    CHECK(fabs(ref[0] - (double)v[0]) < 1e-9);
    /* forward's refusals: wrong key rows, no value */
    sh_k[0] = 15;
    CHECK(ah_binding_forward(e.b, 0, &a) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(e.b),
                   "layer 0: key: shape [15, 4, 128], expected [16, 4, 128]");
    sh_k[0] = 16;
    a.value = NULL;
    CHECK(ah_binding_forward(e.b, 0, &a) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(e.b), "value is NULL: a ragged step attends over the keys");
    a.value = &tv;
    /* plan's refusals leave nothing planned */
    x.cuk[1] = 3;
    CHECK(ah_binding_plan(e.b, &x.b, AH_PLAN_EAGER, NULL) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(e.b), "batch: layer 0's ragged form: cu_seqlens_k[1] = 3");
    CHECK(ah_binding_forward(e.b, 0, &a) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(e.b), "no planned batch");
    x.cuk[1] = 4;
    CHECK(ah_binding_plan(e.b, &x.b, AH_PLAN_CAPTURE, NULL) == AH_ERR_UNSUPPORTED);
    CHECK_CONTAINS(ah_binding_errmsg(e.b), "a ragged step is planned eager only");
    env_close(&e);
}

/* Rows of a per-request key tensor (rows [0, w) of request r at row0[r],
 * hq * d floats a row) gathered into dst: rows [a, b) of each request. */
static void gather(float *dst, const float *src, const int32_t *row0, const int32_t *a,
                   const int32_t *b, size_t per_row)
{
    for (int r = 0; r < 3; r++) {
        size_t n = (size_t)(b[r] - a[r]) * per_row;
        memcpy(dst, src + ((size_t)row0[r] + (size_t)a[r]) * per_row, n * sizeof *dst);
        dst += n;
    }
}

/* vLLM's MLA chunked prefill in one binding: the new tokens causally over
 * their own keys, a context step over the cached context (request 0 has
 * none), each against the oracle, merged by LSE into the causal pass over
 * context and new tokens together. */
static void test_context_step(void)
{
    env e;
    if (env_open(&e, MLA_MODEL, "cpu_amx") != 0) {
        env_close(&e);
        return;
    }
    const ah_layer_spec *rf = &ah_selection_ragged_decision(e.sel, 0)->spec;
    /* request r: ctx[r] context keys, then q[r] new ones (seq_lens 4, 7, 5) */
    static const int32_t ctx[3] = {0, 5, 4}, qn[3] = {4, 2, 1}, zero[3] = {0, 0, 0};
    static const int32_t full0[3] = {0, 4, 11}, cuk_full[4] = {0, 4, 11, 16};
    static float q[7 * HQ * QK], kf[16 * HQ * QK], vf[16 * HQ * V], kc[9 * HQ * QK], vc[9 * HQ * V],
        kn[7 * HQ * QK], vn[7 * HQ * V], oc[7 * HQ * V], lc[7 * HQ], on[7 * HQ * V], ln[7 * HQ],
        om[7 * HQ * V], lm[7 * HQ];
    fill(q, sizeof q / 4, 11), fill(kf, sizeof kf / 4, 12), fill(vf, sizeof vf / 4, 13);
    int32_t seq_end[3];
    for (int r = 0; r < 3; r++) seq_end[r] = ctx[r] + qn[r];
    gather(kc, kf, full0, zero, ctx, HQ * QK), gather(vc, vf, full0, zero, ctx, HQ * V);
    gather(kn, kf, full0, ctx, seq_end, HQ * QK), gather(vn, vf, full0, ctx, seq_end, HQ * V);
    int64_t sh_q[3] = {7, HQ, QK}, sh_kc[3] = {9, HQ, QK}, sh_vc[3] = {9, HQ, V},
            sh_kn[3] = {7, HQ, QK}, sh_vn[3] = {7, HQ, V}, sh_o[3] = {7, HQ, V}, sh_l[2] = {7, HQ};
    DLTensor tq = bf_tensor(q, 3, sh_q, kDLFloat, 32), tkc = bf_tensor(kc, 3, sh_kc, kDLFloat, 32),
             tvc = bf_tensor(vc, 3, sh_vc, kDLFloat, 32),
             tkn = bf_tensor(kn, 3, sh_kn, kDLFloat, 32),
             tvn = bf_tensor(vn, 3, sh_vn, kDLFloat, 32),
             toc = bf_tensor(oc, 3, sh_o, kDLFloat, 32), tlc = bf_tensor(lc, 2, sh_l, kDLFloat, 32),
             ton = bf_tensor(on, 3, sh_o, kDLFloat, 32), tln = bf_tensor(ln, 2, sh_l, kDLFloat, 32),
             tom = bf_tensor(om, 3, sh_o, kDLFloat, 32), tlm = bf_tensor(lm, 2, sh_l, kDLFloat, 32);
    rbatch x;
    rbatch_init(&x);
    ah_error err;
    double ref[7 * HQ * V], rl[7 * HQ];
    ah_ref_inputs in = {.struct_size = sizeof in, .spec = rf, .batch = &x.b, .q = q};
    /* the context step: ragged_keys = context, cu_seqlens_k over ctx */
    x.cuk[0] = 0;
    for (int r = 0; r < 3; r++) x.cuk[r + 1] = x.cuk[r] + ctx[r];
    x.b.num_k_tokens = 9;
    x.b.ragged_keys = AH_RAGGED_KEYS_CONTEXT;
    CHECK_MSG(ah_binding_plan(e.b, &x.b, AH_PLAN_EAGER, NULL) == AH_OK, "%s",
              ah_binding_errmsg(e.b));
    ah_forward_args a = {
        .struct_size = sizeof a, .q = &tq, .key = &tkc, .value = &tvc, .out = &toc, .lse = &tlc};
    CHECK_MSG(ah_binding_forward(e.b, 0, &a) == AH_OK, "%s", ah_binding_errmsg(e.b));
    in.key = kc, in.value = vc;
    CHECK_MSG(ah_reference_attention(&in, ref, rl, &err) == AH_OK, "%s", err.msg);
    double worst = 0;
    for (size_t i = 0; i < sizeof oc / 4; i++) worst = fmax(worst, fabs(oc[i] - ref[i]));
    for (size_t i = 0; i < sizeof lc / 4; i++)
        worst = fmax(worst, isinf(rl[i]) ? (isinf(lc[i]) && lc[i] < 0 ? 0 : INFINITY)
                                         : fabs(lc[i] - rl[i]));
    CHECK_MSG(worst < 1e-4, "context step off the oracle by %g", worst);
    /* request 0 has no context: out 0, lse -inf. (Were the context keys
     * placed bottom-right, request 1's first query would miss the last of
     * them, and the merge below would not match the oracle.) */
    CHECK(oc[0] == 0.0f && isinf(lc[0]) && lc[0] < 0 && isinf(rl[0]));
    /* the new tokens, bottom-right over their own keys */
    for (int r = 0; r < 3; r++) x.cuk[r + 1] = x.cuk[r] + qn[r];
    x.b.num_k_tokens = 7;
    x.b.ragged_keys = AH_RAGGED_KEYS_BOTTOM_RIGHT;
    CHECK_MSG(ah_binding_plan(e.b, &x.b, AH_PLAN_EAGER, NULL) == AH_OK, "%s",
              ah_binding_errmsg(e.b));
    a.key = &tkn, a.value = &tvn, a.out = &ton, a.lse = &tln;
    CHECK_MSG(ah_binding_forward(e.b, 0, &a) == AH_OK, "%s", ah_binding_errmsg(e.b));
    ah_merge_args ma = {sizeof ma, &ton, &tln, &toc, &tlc, &tom, &tlm, NULL};
    CHECK_MSG(ah_binding_merge_states(e.b, 0, &ma) == AH_OK, "%s", ah_binding_errmsg(e.b));
    /* the oracle's one causal pass over context and new tokens */
    memcpy(x.cuk, cuk_full, sizeof cuk_full);
    x.b.num_k_tokens = 16;
    in.key = kf, in.value = vf;
    CHECK_MSG(ah_reference_attention(&in, ref, rl, &err) == AH_OK, "%s", err.msg);
    worst = 0;
    for (size_t i = 0; i < sizeof om / 4; i++) worst = fmax(worst, fabs(om[i] - ref[i]));
    for (size_t i = 0; i < sizeof lm / 4; i++) worst = fmax(worst, fabs(lm[i] - rl[i]));
    CHECK_MSG(worst < 1e-4, "merged context and new tokens off the oracle by %g", worst);
    /* ragged_keys without cu_seqlens_k: a context step lacks its keys */
    x.b.cu_seqlens_k = NULL, x.b.cu_seqlens_k_host = NULL;
    x.b.ragged_keys = AH_RAGGED_KEYS_CONTEXT;
    CHECK(ah_binding_plan(e.b, &x.b, AH_PLAN_EAGER, NULL) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(e.b), "batch: ragged_keys = 1 places ragged keys, but "
                                           "cu_seqlens_k is NULL");
    env_close(&e);
}

int main(void)
{
    test_model();
    test_validate();
    test_selection();
    test_step();
    test_context_step();
    return check_report("test_ragged");
}
