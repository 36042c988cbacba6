/*
 * KV-cache groups (ABI 2.1): the kv_group model key and the group check,
 * ah_batch_validate on per-group tables with released blocks, and a
 * two-group model on cpu_amx against the oracle: full-attention layers in
 * group 0 (block size 16) and sliding-window layers in group 1 (block size
 * 32) whose out-of-window blocks are released, on a mixed batch, whole and
 * split by phase (sel_beta decoding the full layers). Released entries
 * point into a guard of NaN blocks just before each group-1 cache, so a
 * plugin or the oracle that followed one would produce NaN.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/attnhost.h>
#include <attnhost/reference.h>

#include "batch_fixture.h"
#include "binding_env.h"
#include "check.h"

#include <attnhost/plugin_util.h>

/* ---- the model ----------------------------------------------------------- */

#define MODEL_OF(dtype) \
    "[model]\nname = two-groups\nnum_layers = 4\nnum_q_heads = 4\nnum_kv_heads = 2\n" \
    "head_size = 64\ndtype = " dtype "\nblock_size = 16\nkv_layout = nhd\n" \
    "[layers.1-3/2]\nkv_group = 1\nblock_size = 32\nsliding_window = 24\n"
#define MODEL MODEL_OF("fp32")

static void test_model(void)
{
    ah_model *m = NULL;
    ah_error err = {""};
    CHECK_MSG(ah_model_parse(MODEL, "g.ini", &m, &err) == AH_OK, "%s", err.msg);
    if (!m) return;
    CHECK(ah_model_num_kv_groups(m) == 2);
    CHECK(ah_model_layer(m, 0)->kv_group == 0 && ah_model_layer(m, 1)->kv_group == 1);
    CHECK(ah_model_layer(m, 3)->block_size == 32 && ah_model_layer(m, 2)->block_size == 16);
    /* written back as INI and parsed again: the same groups */
    char *text = NULL;
    CHECK(ah_model_to_ini(m, &text) == AH_OK && text && strstr(text, "kv_group = 1"));
    ah_model *back = NULL;
    CHECK_MSG(ah_model_parse(text, "back", &back, &err) == AH_OK, "%s", err.msg);
    if (back) {
        for (uint32_t i = 0; i < 4; i++)
            CHECK(!memcmp(ah_model_layer(back, i), ah_model_layer(m, i), sizeof(ah_layer_spec)));
        ah_model_destroy(back);
    }
    free(text);
    /* the same from C: the spec carries the group */
    ah_layer_spec specs[4];
    for (uint32_t i = 0; i < 4; i++) specs[i] = *ah_model_layer(m, i);
    ah_model_desc d = {sizeof d, "c-groups", 4, specs, NULL, NULL};
    ah_model *c = NULL;
    CHECK_MSG(ah_model_create(&d, &c, &err) == AH_OK, "%s", err.msg);
    CHECK(c && ah_model_num_kv_groups(c) == 2);
    ah_model_destroy(c);
    specs[3].block_size = 16; /* group 1 now mixes 32 and 16 */
    CHECK(ah_model_create(&d, &c, &err) == AH_ERR_CONFIG && !c);
    CHECK_CONTAINS(
        err.msg,
        "c-groups: layers 1 and 3 are both in kv_group 1 but differ in block_size (32 and 16)");
    specs[3].block_size = 32;
    specs[3].kv_dtype = AH_DTYPE_FP16; /* declared groups share a KV dtype too */
    CHECK(ah_model_create(&d, &c, &err) == AH_ERR_CONFIG);
    CHECK_CONTAINS(err.msg,
                   "layers 1 and 3 are both in kv_group 1 but differ in kv_dtype (fp32 and fp16)");
    ah_model_destroy(m);

    /* INI: mismatched block sizes in a group, a gap, a cacheless layer */
    CHECK(ah_model_parse(MODEL "[layers.3]\nblock_size = 64\n", "g.ini", &m, &err) ==
          AH_ERR_CONFIG);
    CHECK_CONTAINS(
        err.msg,
        "g.ini: layers 1 and 3 are both in kv_group 1 but differ in block_size (32 and 64)");
    CHECK(ah_model_parse(MODEL
                         "[layers.3]\nkv_group = 2\n[layers.1]\nkv_group = 0\nblock_size = 16\n"
                         "sliding_window = 0\n",
                         "g.ini", &m, &err) == AH_ERR_CONFIG);
    CHECK_CONTAINS(err.msg, "layer 3: kv_group = 2, but no layer with a KV cache is in group 1");
    CHECK(ah_model_parse(MODEL "[layers.0]\nattn_type = encoder_only\nkv_group = 1\n", "g.ini", &m,
                         &err) == AH_ERR_CONFIG);
    CHECK_CONTAINS(err.msg, "kv_group = 1 on a cacheless (encoder_only) layer");
    CHECK(ah_model_parse(MODEL "[layers.0]\nkv_group = 64\n", "g.ini", &m, &err) == AH_ERR_CONFIG);
    /* a model without groups keeps mixing KV dtypes in group 0 */
    CHECK_MSG(ah_model_parse("[model]\nname = x\nnum_layers = 2\nnum_q_heads = 4\nhead_size = 64\n"
                             "[layers.1]\nkv_dtype = fp8_e4m3\n",
                             "x", &m, &err) == AH_OK,
              "%s", err.msg);
    CHECK(ah_model_num_kv_groups(m) == 1);
    ah_model_destroy(m);
}

/* ---- ah_batch_validate on groups ------------------------------------------ */

/* Two requests; group 0 block size 4 (16 blocks), group 1 block size 8 (6
 * blocks). r0: decode at seq 20 (position 19); r1: prefill of 3 at seq 12
 * (positions 9..11). */
typedef struct vfix {
    ah_layer_spec s0, s1;
    ah_limits lim;
    ah_batch b;
    ah_kv_group g[2];
    int32_t qsl[3], sl[2], bt0[2 * 5], bt1[2 * 3];
    int64_t sl0[4], sl1[4];
} vfix;

static void vfix_init(vfix *f)
{
    memset(f, 0, sizeof *f);
    ah_layer_spec s = {.struct_size = sizeof s,
                       .attn_type = AH_ATTN_DECODER,
                       .num_q_heads = 2,
                       .num_kv_heads = 2,
                       .qk_head_size = 8,
                       .v_head_size = 8,
                       .q_dtype = AH_DTYPE_FP16,
                       .kv_dtype = AH_DTYPE_FP16,
                       .block_size = 4,
                       .kv_layout = AH_KV_LAYOUT_NHD};
    f->s0 = s;
    s.block_size = 8, s.kv_group = 1, s.sliding_window = 6;
    f->s1 = s;
    f->lim = (ah_limits){sizeof(ah_limits), 8, 64, 8, 32, 16};
    const int32_t qsl[3] = {0, 1, 4}, sl[2] = {20, 12};
    const int32_t bt0[10] = {0, 1, 2, 3, 4, 5, 6, 7, -1, -1};
    /* r0 sees 14..19 (blocks 1, 2), r1 sees from 9 - 6 + 1 = 4 on (blocks 0, 1) */
    const int32_t bt1[6] = {-1, 0, 1, 2, 3, -1};
    memcpy(f->qsl, qsl, sizeof qsl);
    memcpy(f->sl, sl, sizeof sl);
    memcpy(f->bt0, bt0, sizeof bt0);
    memcpy(f->bt1, bt1, sizeof bt1);
    const int64_t s0[4] = {4 * 4 + 3, 7 * 4 + 1, 7 * 4 + 2, 7 * 4 + 3};
    const int64_t s1[4] = {1 * 8 + 3, 3 * 8 + 1, 3 * 8 + 2, 3 * 8 + 3};
    memcpy(f->sl0, s0, sizeof s0);
    memcpy(f->sl1, s1, sizeof s1);
    f->b = (ah_batch){.struct_size = sizeof(ah_batch),
                      .num_reqs = 2,
                      .num_tokens = 4,
                      .max_query_len = 3,
                      .max_seq_len = 20,
                      .num_blocks = 16,
                      .query_start_loc_host = f->qsl,
                      .seq_lens_host = f->sl,
                      .block_table_host = f->bt0,
                      .slot_mapping_host = f->sl0,
                      .block_table_stride = 5,
                      .num_kv_groups = 2,
                      .kv_groups = f->g};
    f->g[0] = (ah_kv_group){.struct_size = sizeof(ah_kv_group)}; /* the batch's own fields */
    f->g[1] = (ah_kv_group){sizeof(ah_kv_group), 6, NULL, NULL, f->bt1, f->sl1, 3};
}

static ah_status vcheck(vfix *f, const ah_layer_spec *s, ah_error *err)
{
    memset(err, 0, sizeof *err);
    return ah_batch_validate(&f->b, s, &f->lim, err);
}

static void test_validate(void)
{
    vfix f;
    ah_error err;
    vfix_init(&f);
    CHECK_MSG(vcheck(&f, &f.s0, &err) == AH_OK, "%s", err.msg);
    CHECK_MSG(vcheck(&f, &f.s1, &err) == AH_OK, "%s", err.msg);
    /* the view a group-1 plugin sees: group 1's paging, no groups */
    ah_batch v;
    CHECK(ah_batch_group_view(&f.b, 1, &v, &err) == AH_OK);
    CHECK(v.block_table_host == f.bt1 && v.slot_mapping_host == f.sl1 && v.num_blocks == 6 &&
          v.block_table_stride == 3 && v.num_kv_groups == 0 && !v.kv_groups &&
          v.seq_lens_host == f.sl);
    CHECK(ah_batch_group_view(&f.b, 0, &v, &err) == AH_OK && v.block_table_host == f.bt0 &&
          v.num_blocks == 16);

    /* released where the window still sees it: r0's block 1 holds 8..15,
     * and position 19 sees 14.. */
    f.bt1[1] = -1;
    CHECK(vcheck(&f, &f.s1, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(
        err.msg, "kv group 1: block_table[0][1] = -1: a released block, but request 0's first "
                 "query token (position 19, sliding_window 6) still sees keys from position 14 on");
    vfix_init(&f);
    f.bt1[3] = -2; /* r1's block 0 (0..7) is seen from position 4 by its first query (9) */
    CHECK(vcheck(&f, &f.s1, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "kv group 1: block_table[1][0] = -2: a released block");
    /* released in a group without a window */
    vfix_init(&f);
    f.bt0[0] = -1;
    CHECK(vcheck(&f, &f.s0, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg,
                   "kv group 0: block_table[0][0] = -1 is outside the cache (16 blocks): a "
                   "negative entry marks a released block, but the layer has no sliding window");
    /* each group against its own cache */
    vfix_init(&f);
    f.bt1[2] = 6;
    CHECK(vcheck(&f, &f.s1, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "kv group 1: block_table[0][2] = 6 is outside the cache (6 blocks)");
    CHECK(vcheck(&f, &f.s0, &err) == AH_OK); /* group 0 does not read group 1's table */
    vfix_init(&f);
    f.g[1].num_blocks = 17;
    CHECK(vcheck(&f, &f.s1, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "kv group 1: num_blocks = 17 exceeds limits.num_blocks = 16");
    vfix_init(&f);
    f.sl1[0] = 2 * 8 + 3; /* the slot of block 1 in the other group's numbering */
    CHECK(vcheck(&f, &f.s1, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(
        err.msg,
        "kv group 1: slot_mapping[0] = 19, but token position 19 of request 0 lives at slot 11");
    /* group counts */
    vfix_init(&f);
    f.b.num_kv_groups = 1;
    CHECK(vcheck(&f, &f.s1, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "num_kv_groups = 1, but the layer is in kv_group 1");
    f.b.num_kv_groups = 0;
    CHECK(vcheck(&f, &f.s1, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "num_kv_groups = 0");
    f.b.num_kv_groups = 2;
    f.b.kv_groups = NULL;
    CHECK(vcheck(&f, &f.s1, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "num_kv_groups = 2 but kv_groups is NULL");
    vfix_init(&f);
    f.g[1].struct_size = 8;
    CHECK(vcheck(&f, &f.s1, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "kv_groups[1].struct_size = 8 is too small");
    /* a batch predating the fields is one group */
    vfix_init(&f);
    f.b.struct_size = offsetof(ah_batch, num_kv_groups);
    CHECK(vcheck(&f, &f.s0, &err) == AH_OK);
    CHECK(vcheck(&f, &f.s1, &err) == AH_ERR_INVALID_ARGUMENT);
}

/* ---- a two-group model on cpu_amx ------------------------------------------ */

enum { L = 4, HQ = 4, HK = 2, D = 64, NR = 5, MAXT = 48, GUARD = 8 };
static const uint32_t BS[2] = {16, 32}, NB[2] = {40, 24};
enum { STRIDE = 8 };
#define ROWS(g) ((size_t)BS[g] * HK * D)               /* floats per block */
#define CACHE_MAX ((size_t)(24 + GUARD) * 32 * HK * D) /* the larger of the two groups */

typedef struct gstep {
    float *kc[L], *vc[L], *kref[L], *vref[L]; /* GUARD NaN blocks, then the cache */
    float q[MAXT * HQ * D], k[MAXT * HK * D], v[MAXT * HK * D], out[MAXT * HQ * D];
    double ref[MAXT * HQ * D];
    int32_t qsl[NR + 1], seq[NR], table[2][NR * STRIDE];
    int64_t slots[2][MAXT];
    int64_t sh_q[3], sh_k[3], sh_c[2][4];
    DLTensor tq, tk, tv, to, tkc[L], tvc[L];
    ah_kv_group groups[2];
    ah_batch batch;
} gstep;

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (2.0 / 16777216.0) - 1.0);
}

static DLTensor tensor(void *data, int ndim, int64_t *shape)
{
    DLTensor t = {data, {kDLCPU, 0}, ndim, {kDLFloat, 32, 1}, shape, NULL, 0};
    return t;
}

static int group_of(int l) { return l & 1; }

/* Three decodes, a chunk of 20 and a fresh prefill of 12 (decodes first).
 * Group 1 (window 24, blocks of 32) releases every block wholly before a
 * request's first query position minus 23. */
static const int Q[NR] = {1, 1, 1, 20, 12}, S[NR] = {100, 70, 17, 100, 12};

static void gstep_fill(gstep *s, int release)
{
    uint64_t rng = 5;
    for (int l = 0; l < L; l++) {
        const int g = group_of(l);
        const size_t guard = GUARD * ROWS(g), n = (size_t)NB[g] * ROWS(g);
        for (size_t i = 0; i < guard; i++) s->kc[l][i] = s->vc[l][i] = NAN;
        for (size_t i = 0; i < n; i++)
            s->kc[l][guard + i] = frand(&rng), s->vc[l][guard + i] = frand(&rng);
        s->tkc[l] = tensor(s->kc[l] + guard, 4, s->sh_c[g]);
        s->tvc[l] = tensor(s->vc[l] + guard, 4, s->sh_c[g]);
    }
    for (size_t i = 0; i < sizeof s->q / sizeof s->q[0]; i++) s->q[i] = frand(&rng);
    for (size_t i = 0; i < sizeof s->k / sizeof s->k[0]; i++)
        s->k[i] = frand(&rng), s->v[i] = frand(&rng);
    int next[2] = {3, 1}, maxs = 0, maxq = 0;
    s->qsl[0] = 0;
    for (int r = 0; r < NR; r++) {
        const int p0 = S[r] - Q[r];
        for (int g = 0; g < 2; g++)
            for (int j = 0; j < STRIDE; j++) {
                int32_t *e = &s->table[g][r * STRIDE + j];
                *e = j < (S[r] + (int)BS[g] - 1) / (int)BS[g] ? next[g]++ : 0;
                if (g == 1 && release && (j + 1) * 32 <= p0 - 23)
                    *e = j % 2 ? -1 : -(1 << 24); /* far: a read faults */
            }
        for (int i = 0; i < Q[r]; i++)
            for (int g = 0; g < 2; g++) {
                int pos = p0 + i;
                s->slots[g][s->qsl[r] + i] =
                    (int64_t)s->table[g][r * STRIDE + pos / (int)BS[g]] * BS[g] + pos % (int)BS[g];
            }
        s->qsl[r + 1] = s->qsl[r] + Q[r];
        s->seq[r] = S[r];
        if (S[r] > maxs) maxs = S[r];
        if (Q[r] > maxq) maxq = Q[r];
    }
    CHECK(next[0] <= (int)NB[0] && next[1] <= (int)NB[1]);
    const int T = s->qsl[NR];
    s->sh_q[0] = s->sh_k[0] = T, s->sh_q[1] = HQ, s->sh_k[1] = HK, s->sh_q[2] = s->sh_k[2] = D;
    for (int g = 0; g < 2; g++)
        s->sh_c[g][0] = NB[g], s->sh_c[g][1] = BS[g], s->sh_c[g][2] = HK, s->sh_c[g][3] = D;
    s->tq = tensor(s->q, 3, s->sh_q);
    s->tk = tensor(s->k, 3, s->sh_k);
    s->tv = tensor(s->v, 3, s->sh_k);
    s->to = tensor(s->out, 3, s->sh_q);
    /* group 0 where a one-group batch has it, group 1 in its entry */
    s->groups[0] = (ah_kv_group){.struct_size = sizeof(ah_kv_group)};
    s->groups[1] =
        (ah_kv_group){sizeof(ah_kv_group), NB[1], NULL, NULL, s->table[1], s->slots[1], STRIDE};
    s->batch = (ah_batch){.struct_size = sizeof(ah_batch),
                          .num_reqs = NR,
                          .num_tokens = (uint32_t)T,
                          .max_query_len = (uint32_t)maxq,
                          .max_seq_len = (uint32_t)maxs,
                          .num_blocks = NB[0],
                          .query_start_loc_host = s->qsl,
                          .seq_lens_host = s->seq,
                          .block_table_host = s->table[0],
                          .slot_mapping_host = s->slots[0],
                          .block_table_stride = STRIDE,
                          .num_kv_groups = 2,
                          .kv_groups = s->groups};
}

static gstep *gstep_new(void)
{
    gstep *s = calloc(1, sizeof *s);
    for (int l = 0; s && l < L; l++) {
        s->kc[l] = calloc(CACHE_MAX, sizeof(float));
        s->vc[l] = calloc(CACHE_MAX, sizeof(float));
        s->kref[l] = calloc(CACHE_MAX, sizeof(float));
        s->vref[l] = calloc(CACHE_MAX, sizeof(float));
    }
    return s;
}

static void gstep_free(gstep *s)
{
    for (int l = 0; s && l < L; l++)
        free(s->kc[l]), free(s->vc[l]), free(s->kref[l]), free(s->vref[l]);
    free(s);
}

/* Plan s's step on e eagerly: the status is want, and the binding's
 * message holds msg (when not NULL). */
static void expect_plan(env *e, gstep *s, ah_status want, const char *msg)
{
    const ah_status got = ah_binding_plan(e->b, &s->batch, AH_PLAN_EAGER, NULL);
    CHECK_MSG(got == want, "plan gave %d, want %d: %s", got, want, ah_binding_errmsg(e->b));
    if (msg) CHECK_CONTAINS(ah_binding_errmsg(e->b), msg);
}

static const char *dirs[] = {ATTNHOST_BUILD_DIR "/lib/attnhost/plugins",
                             ATTNHOST_SELECT_PLUGIN_DIR};

/* forced: bind every layer to cpu_amx; else by ini's priorities. drop:
 * features cpu_amx loses before the binding. */
static int env_open_model(env *e, const char *ini, int forced, uint32_t drop, const char *model);
static int env_open(env *e, const char *ini, int forced, uint32_t drop)
{
    return env_open_model(e, ini, forced, drop, MODEL);
}

static int env_open_model(env *e, const char *ini, int forced, uint32_t drop, const char *model)
{
    memset(e, 0, sizeof *e);
    ah_host_options o = {.struct_size = sizeof o,
                         .config_text = ini,
                         .plugin_dirs = dirs,
                         .n_plugin_dirs = 2,
                         .no_default_dirs = 1,
                         .cache_path = ""};
    ah_error err;
    CHECK_MSG(ah_host_create(&o, &e->h, &err) == AH_OK, "%s", err.msg);
    const ah_plugin_info *amx = ah_host_find_plugin(e->h, "cpu_amx");
    if (!amx || amx->state != AH_PLUGIN_AVAILABLE) {
        printf("test_kv_groups: cpu_amx not available here, skipped: %s\n",
               amx ? amx->reason : "not built");
        ah_host_destroy(e->h);
        e->h = NULL;
        return -1;
    }
    CHECK(ah_model_parse(model, "g", &e->m, &err) == AH_OK);
    ah_status s = forced ? ah_host_select_forced(e->h, e->m, "cpu_amx", &e->sel, &err)
                         : ah_host_select(e->h, e->m, &e->sel, &err);
    CHECK_MSG(s == AH_OK, "%s", err.msg);
    ah_caps *caps = drop ? live_caps(e->h, "cpu_amx") : NULL;
    if (caps) caps->features &= ~drop;
    ah_binding_options bo = {sizeof bo, {sizeof(ah_limits), 8, MAXT, STRIDE, 128, 40},
                             0,         0,
                             NULL,      AH_MIXED_STEPS_CONFIG};
    CHECK_MSG(ah_binding_create(e->h, e->sel, &bo, &e->b, &err) == AH_OK, "%s", err.msg);
    return e->b ? 0 : -1;
}

/* Forward every layer over a NaN-poisoned output and compare with the
 * oracle, which writes the new K/V into its own caches first. */
static void gstep_check(env *e, gstep *s, const char *what)
{
    const uint32_t T = s->batch.num_tokens;
    for (int l = 0; l < L; l++) {
        const int g = group_of(l);
        const size_t all = (GUARD + (size_t)NB[g]) * ROWS(g), guard = GUARD * ROWS(g);
        const ah_decision *d = ah_selection_decision(e->sel, (uint32_t)l, AH_PHASE_PREFILL);
        CHECK(d->spec.kv_group == (uint32_t)g && d->spec.block_size == BS[g]);
        memcpy(s->kref[l], s->kc[l], all * sizeof(float));
        memcpy(s->vref[l], s->vc[l], all * sizeof(float));
        ah_error err;
        CHECK_MSG(ah_reference_write_kv(&d->spec, &s->batch, s->k, s->v, s->kref[l] + guard,
                                        s->vref[l] + guard, 1, 1, &err) == AH_OK,
                  "%s", err.msg);
        for (size_t i = 0; i < sizeof s->out / sizeof s->out[0]; i++) s->out[i] = NAN;
        ah_forward_args a =
            bf_forward_args(&s->tq, &s->tk, &s->tv, &s->tkc[l], &s->tvc[l], &s->to, NULL);
        CHECK_MSG(ah_binding_forward(e->b, (uint32_t)l, &a) == AH_OK, "%s: %s", what,
                  ah_binding_errmsg(e->b));
        CHECK_MSG(
            memcmp(s->kref[l] + guard, s->kc[l] + guard, (all - guard) * sizeof(float)) == 0 &&
                memcmp(s->vref[l] + guard, s->vc[l] + guard, (all - guard) * sizeof(float)) == 0,
            "%s: layer %d: K/V written elsewhere than the group's slots", what, l);
        ah_ref_inputs in = {.struct_size = sizeof in,
                            .spec = &d->spec,
                            .batch = &s->batch,
                            .q = s->q,
                            .key_cache = s->kref[l] + guard,
                            .value_cache = s->vref[l] + guard,
                            .sinks = NULL,
                            .alibi_slopes = NULL,
                            .k_scale = 1,
                            .v_scale = 1,
                            .key = NULL,
                            .value = NULL};
        CHECK_MSG(ah_reference_attention(&in, s->ref, NULL, &err) == AH_OK, "%s", err.msg);
        double worst = 0;
        uint32_t nan = 0, refnan = 0;
        for (uint32_t i = 0; i < T * HQ * D; i++) {
            if (isnan(s->ref[i])) refnan++;
            if (isnan(s->out[i])) {
                nan++;
                continue;
            }
            double diff = fabs(s->out[i] - s->ref[i]);
            if (diff > worst) worst = diff;
        }
        CHECK_MSG(!refnan, "%s: layer %d: the oracle read a released block (%u NaN)", what, l,
                  refnan);
        CHECK_MSG(!nan,
                  "%s: layer %d: %u NaN outputs (a released block read, or rows never written)",
                  what, l, nan);
        CHECK_MSG(worst < 1e-4, "%s: layer %d: max abs error %g", what, l, worst);
    }
}

static void test_cpu_amx_groups(void)
{
    env e;
    if (env_open(&e, "", 1, 0)) return;
    gstep *s = gstep_new();
    gstep_fill(s, 1);
    int released = 0;
    for (int i = 0; i < NR * STRIDE; i++) released += s->table[1][i] < 0;
    CHECK(released == 4); /* r0: blocks 0, 1; r1: 0; r3: 0 */
    expect_plan(&e, s, AH_OK, NULL);
    gstep_check(&e, s, "cpu_amx, two groups");

    /* a released block a query still sees: refused before any plan */
    gstep_fill(s, 1);
    s->table[1][2 * STRIDE + 0] = -1; /* r2 (seq 17) sees all of its block 0 */
    expect_plan(&e, s, AH_ERR_INVALID_ARGUMENT,
                "batch: kv group 1: block_table[2][0] = -1: a released block, but "
                "request 2's first query token (position 16, sliding_window 24)");
    CHECK(ah_binding_forward(e.b, 0, &(ah_forward_args){.struct_size = sizeof(ah_forward_args)}) ==
          AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(e.b), "no planned batch");
    /* released in the full-attention group */
    gstep_fill(s, 1);
    s->table[0][0] = -1;
    expect_plan(&e, s, AH_ERR_INVALID_ARGUMENT,
                "batch: kv group 0: block_table[0][0] = -1 is outside the cache (40 "
                "blocks): a negative entry marks a released block, but layer 0 of "
                "kv_group 0 has no sliding window");
    /* the wrong number of groups */
    gstep_fill(s, 1);
    s->batch.num_kv_groups = 0;
    expect_plan(&e, s, AH_ERR_INVALID_ARGUMENT,
                "batch: num_kv_groups = 0, but the model has 2 KV-cache groups");
    s->batch.num_kv_groups = 3;
    expect_plan(&e, s, AH_ERR_INVALID_ARGUMENT, "num_kv_groups = 3, but the model has 2");
    /* without released blocks, the same step plans */
    gstep_fill(s, 0);
    expect_plan(&e, s, AH_OK, NULL);
    gstep_check(&e, s, "cpu_amx, two groups, nothing released");
    env_close(&e);

    /* a plugin that does not claim released_blocks never gets them */
    if (!env_open(&e, "", 1, AH_FEAT_RELEASED_BLOCKS)) {
        gstep_fill(s, 1);
        expect_plan(&e, s, AH_ERR_UNSUPPORTED,
                    "batch: kv group 1 has released blocks (negative block_table "
                    "entries), but layer 1's cpu_amx does not claim the "
                    "released_blocks feature");
        gstep_fill(s, 0);
        expect_plan(&e, s, AH_OK, NULL);
        env_close(&e);
    }
    gstep_free(s);
}

/* The phase split with groups: sel_beta decodes the full-attention layers
 * (group 0), cpu_amx prefills them and serves the windowed layers (group
 * 1, released blocks) whole. */
static void test_split_groups(void)
{
    env e;
    if (env_open(
            &e,
            "[select]\nprefill_priority = cpu_amx\ndecode_priority = sel_beta\nfallback = allow\n",
            0, 0))
        return;
    CHECK_STREQ(ah_selection_decision(e.sel, 0, AH_PHASE_DECODE)->plugin, "sel_beta");
    CHECK_STREQ(ah_selection_decision(e.sel, 1, AH_PHASE_DECODE)->plugin, "cpu_amx");
    gstep *s = gstep_new();
    gstep_fill(s, 1);
    expect_plan(&e, s, AH_OK, NULL);
    uint32_t dtok = 0;
    const char *why = NULL;
    CHECK_MSG(ah_binding_split(e.b, &dtok, &why) == 3 && dtok == 3, "not split: %s",
              why ? why : "");
    gstep_check(&e, s, "split, two groups");
    /* a released block in group 0 would reach sel_beta: the full layers
     * see it anyway, so validation refuses it first */
    gstep_fill(s, 1);
    s->table[0][STRIDE] = -1;
    expect_plan(&e, s, AH_ERR_INVALID_ARGUMENT, "kv group 0: block_table[1][0] = -1");
    gstep_free(s);
    env_close(&e);
}

/* bf16 on cpu_amx: the tile kernels and the pre-packing of long prefills
 * (request 3, 20 tokens, its first block released far away) against the
 * oracle on the same bf16 inputs. */
static void test_bf16(void)
{
    env e;
    if (env_open_model(&e, "", 1, 0, MODEL_OF("bf16"))) return;
    gstep *s = gstep_new();
    gstep_fill(s, 1);
    expect_plan(&e, s, AH_OK, NULL);
    const uint32_t T = s->batch.num_tokens;
    static uint16_t q[MAXT * HQ * D], k[MAXT * HK * D], v[MAXT * HK * D], out[MAXT * HQ * D];
    for (uint32_t i = 0; i < T * HQ * D; i++) q[i] = ah_f32_to_bf16(s->q[i]);
    for (uint32_t i = 0; i < T * HK * D; i++)
        k[i] = ah_f32_to_bf16(s->k[i]), v[i] = ah_f32_to_bf16(s->v[i]);
    DLTensor tq = s->tq, tk = s->tk, tv = s->tv, to = s->to;
    tq.data = q, tk.data = k, tv.data = v, to.data = out;
    tq.dtype = tk.dtype = tv.dtype = to.dtype = (DLDataType){kDLBfloat, 16, 1};
    for (int l = 0; l < L; l++) {
        const int g = group_of(l);
        const size_t n = (GUARD + (size_t)NB[g]) * ROWS(g), guard = GUARD * ROWS(g);
        uint16_t *kc = calloc(n, 2), *vc = calloc(n, 2), *kr = calloc(n, 2), *vr = calloc(n, 2);
        for (size_t i = 0; i < n; i++)
            kc[i] = ah_f32_to_bf16(s->kc[l][i]), vc[i] = ah_f32_to_bf16(s->vc[l][i]);
        memcpy(kr, kc, n * 2);
        memcpy(vr, vc, n * 2);
        DLTensor tkc = s->tkc[l], tvc = s->tvc[l];
        tkc.data = kc + guard, tvc.data = vc + guard;
        tkc.dtype = tvc.dtype = (DLDataType){kDLBfloat, 16, 1};
        const ah_decision *d = ah_selection_decision(e.sel, (uint32_t)l, AH_PHASE_PREFILL);
        ah_error err;
        CHECK(ah_reference_write_kv(&d->spec, &s->batch, k, v, kr + guard, vr + guard, 1, 1,
                                    &err) == AH_OK);
        ah_forward_args a = bf_forward_args(&tq, &tk, &tv, &tkc, &tvc, &to, NULL);
        CHECK_MSG(ah_binding_forward(e.b, (uint32_t)l, &a) == AH_OK, "bf16: %s",
                  ah_binding_errmsg(e.b));
        ah_ref_inputs in = {.struct_size = sizeof in,
                            .spec = &d->spec,
                            .batch = &s->batch,
                            .q = q,
                            .key_cache = kr + guard,
                            .value_cache = vr + guard,
                            .sinks = NULL,
                            .alibi_slopes = NULL,
                            .k_scale = 1,
                            .v_scale = 1,
                            .key = NULL,
                            .value = NULL};
        CHECK_MSG(ah_reference_attention(&in, s->ref, NULL, &err) == AH_OK, "%s", err.msg);
        double worst = 0;
        for (uint32_t i = 0; i < T * HQ * D; i++) {
            double diff = fabs((double)ah_bf16_to_f32(out[i]) - s->ref[i]);
            if (!(diff <= worst)) worst = diff; /* NaN wins */
        }
        CHECK_MSG(worst < 2e-2, "bf16: layer %d: max abs error %g", l, worst);
        free(kc), free(vc), free(kr), free(vr);
    }
    gstep_free(s);
    env_close(&e);
}

int main(void)
{
    test_model();
    test_validate();
    test_cpu_amx_groups();
    test_split_groups();
    test_bf16();
    return check_report("test_kv_groups");
}
