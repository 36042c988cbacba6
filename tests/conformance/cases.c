/*
 * Case generation: from a plugin's capability descriptor, the list of cases
 * that exercises every claim once (quick) or with more variety (full).
 *
 * A base case picks the most ordinary configuration the plugin claims (fp16
 * if it can, head size 128, its preferred block size and layout, GQA 8/2, a
 * decoder batch that mixes prefill, extend and decode). Every other case
 * changes one thing against the base: one query dtype, one KV dtype, one
 * head size, one block size, one layout, one head grouping, one feature,
 * one attention type, one batch shape. A combination the plugin's
 * check_combination refuses is reported as skipped with its reason by the
 * runner, never as a failure.
 */
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "suite.h"

#define MAX_PICKS 12

/* Values to try from an integer set: every listed value; for a range, its
 * smallest and largest member (capped) and one in the middle. */
static uint32_t set_picks(const ah_int_set *s, uint32_t cap, uint32_t *out)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_values && n < MAX_PICKS - 3; i++)
        if (s->values[i] <= cap) out[n++] = s->values[i];
    if (s->range_step && s->range_min <= cap) {
        uint32_t lo = s->range_min, hi = s->range_max < cap ? s->range_max : cap;
        hi = lo + (hi - lo) / s->range_step * s->range_step; /* largest member <= cap */
        uint32_t mid = lo + (hi - lo) / 2 / s->range_step * s->range_step;
        const uint32_t c[3] = {lo, mid, hi};
        for (int k = 0; k < 3; k++) {
            int dup = 0;
            for (uint32_t j = 0; j < n; j++) dup |= out[j] == c[k];
            if (!dup) out[n++] = c[k];
        }
    }
    return n;
}

static int has(const ah_caps *c, uint32_t feature) { return (c->features & feature) != 0; }
static uint32_t type_feature(int t);

typedef struct gen {
    const ah_caps *caps;
    const ah_conformance_options *opts;
    ah__conf_case_list *list;
    ah__conf_case base;
    uint32_t L;       /* longest sequence in generated batches */
    ah__conf_rng rng; /* for batch lengths */
    int oom;
} gen;

/* ---- batch shapes -------------------------------------------------------- */

typedef enum shape {
    SHAPE_MIXED,   /* prefill + extend + decode, causal */
    SHAPE_DECODE,  /* every request one new token */
    SHAPE_PREFILL, /* one long new sequence */
    SHAPE_SELF,    /* non-causal self-attention: every token new */
    SHAPE_CROSS,   /* decoder queries over encoder KV already cached */
    SHAPE_UNIFORM, /* every request the same query_len > 1, over a prefix */
    SHAPE_VERIFY   /* speculative verification: draft tokens over a prefix, tree mask */
} shape;

static void set_shape(gen *g, ah__conf_case *c, shape sh)
{
    ah__conf_rng *r = &g->rng;
    const uint32_t L = g->L, bs = c->spec.block_size;
    c->write_kv = sh != SHAPE_CROSS && !ah_spec_cacheless(&c->spec);
    c->tree_mask = sh == SHAPE_VERIFY;
    switch (sh) {
    case SHAPE_MIXED:
        c->num_reqs = 4;
        c->qlen[0] = c->slen[0] = ah__conf_range(r, 2, L / 2); /* prefill */
        c->qlen[1] = ah__conf_range(r, 2, 9);                  /* extend */
        c->slen[1] = c->qlen[1] + ah__conf_range(r, 1, L / 2);
        c->qlen[2] = 1, c->slen[2] = ah__conf_range(r, L / 2, L);  /* decode, long */
        c->qlen[3] = 1, c->slen[3] = ah__conf_range(r, 1, bs + 1); /* decode, short */
        break;
    case SHAPE_DECODE:
        c->num_reqs = 5;
        for (uint32_t i = 0; i < 5; i++) c->qlen[i] = 1, c->slen[i] = ah__conf_range(r, 1, L);
        break;
    case SHAPE_PREFILL:
        c->num_reqs = 1;
        c->qlen[0] = c->slen[0] = L;
        break;
    case SHAPE_SELF:
        c->num_reqs = 3;
        for (uint32_t i = 0; i < 3; i++) c->qlen[i] = c->slen[i] = ah__conf_range(r, 1, L / 2);
        break;
    case SHAPE_CROSS: /* a Whisper decoder step: decoder lengths and encoder
                         lengths apart, one request without encoder input */
        c->num_reqs = 4;
        for (uint32_t i = 0; i < 4; i++) {
            c->qlen[i] = i == 1 ? 1 : ah__conf_range(r, 1, 6);
            c->slen[i] = c->qlen[i] + ah__conf_range(r, 0, 12);
            c->elen[i] = i == 2 ? 0 : ah__conf_range(r, 1, L);
        }
        break;
    case SHAPE_VERIFY:
        c->num_reqs = 3;
        for (uint32_t i = 0; i < 3; i++) {
            c->qlen[i] = ah__conf_range(r, 2, 7);
            c->slen[i] = c->qlen[i] + ah__conf_range(r, 1, L / 2);
        }
        break;
    case SHAPE_UNIFORM: {
        uint32_t q = ah__conf_range(r, 2, 4);
        c->num_reqs = 4;
        for (uint32_t i = 0; i < 4; i++)
            c->qlen[i] = q, c->slen[i] = q + ah__conf_range(r, 0, L - q);
        break;
    }
    }
}

static shape default_shape(ah_attn_type t)
{
    return t == AH_ATTN_DECODER           ? SHAPE_MIXED
           : t == AH_ATTN_ENCODER_DECODER ? SHAPE_CROSS
                                          : SHAPE_SELF;
}

/* ---- naming and adding --------------------------------------------------- */

static void name_case(ah__conf_case *c, const char *what)
{
    const ah_layer_spec *s = &c->spec;
    char extra[96] = "";
    size_t u = 0;
    if (s->sliding_window)
        u += (size_t)snprintf(extra + u, sizeof extra - u, " window=%u", s->sliding_window);
    if (s->softcap > 0 && u < sizeof extra)
        u += (size_t)snprintf(extra + u, sizeof extra - u, " softcap=%g", (double)s->softcap);
    if (s->use_alibi && u < sizeof extra)
        u += (size_t)snprintf(extra + u, sizeof extra - u, " alibi");
    if (s->use_sinks && u < sizeof extra)
        u += (size_t)snprintf(extra + u, sizeof extra - u, " sinks");
    if (s->use_mla && u < sizeof extra) u += (size_t)snprintf(extra + u, sizeof extra - u, " mla");
    if (s->causal == AH_CAUSAL_OFF && u < sizeof extra)
        u += (size_t)snprintf(extra + u, sizeof extra - u, " bidir");
    if (ah_spec_kv_scales(s) != AH_KV_SCALES_HOST && u < sizeof extra)
        u += (size_t)snprintf(extra + u, sizeof extra - u, " scales=%s",
                              ah_kv_scales_str(ah_spec_kv_scales(s)));
    if (ah_spec_q_scale(s) && u < sizeof extra)
        u += (size_t)snprintf(extra + u, sizeof extra - u, " q_scale");
    if (c->tree_mask && u < sizeof extra)
        u += (size_t)snprintf(extra + u, sizeof extra - u, " tree");
    if (c->want_lse && u < sizeof extra) u += (size_t)snprintf(extra + u, sizeof extra - u, " lse");
    if (c->cp_world && u < sizeof extra)
        u += (size_t)snprintf(extra + u, sizeof extra - u, " cp=%ux%u", c->cp_world,
                              c->cp_interleave);
    if (c->kind == AH__CONF_RAGGED && s->use_mla && u < sizeof extra)
        snprintf(extra + u, sizeof extra - u, " ragged=%u/%u",
                 c->ragged_nope + s->qk_head_size - s->v_head_size, c->ragged_v);
    snprintf(c->name, sizeof c->name, "%-10s q=%s kv=%s hd=%u/%u bs=%u %s h=%u/%u %s%s", what,
             ah_dtype_name(s->q_dtype), ah_dtype_name(s->kv_dtype), s->qk_head_size, s->v_head_size,
             s->block_size, ah_kv_layout_str(s->kv_layout), s->num_q_heads, s->num_kv_heads,
             ah_attn_type_str(s->attn_type), extra);
}

static void add(gen *g, ah__conf_case *c, const char *what)
{
    ah__conf_case_list *l = g->list;
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? 2 * l->cap : 64;
        ah__conf_case *v = realloc(l->v, sizeof *v * cap);
        if (!v) {
            g->oom = 1;
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    c->seed = g->opts->seed * 1000003u + l->n;
    name_case(c, what);
    l->v[l->n++] = *c;
}

/* A variant of the base with a fresh batch of the spec's attention type. */
static ah__conf_case variant(gen *g)
{
    ah__conf_case c = g->base;
    return c;
}

static void add_shaped(gen *g, ah__conf_case *c, const char *what)
{
    set_shape(g, c, default_shape(c->spec.attn_type));
    add(g, c, what);
}

/* ---- the base ------------------------------------------------------------ */

static ah_dtype pick_q_dtype(const ah_caps *c)
{
    const ah_dtype pref[3] = {AH_DTYPE_FP16, AH_DTYPE_BF16, AH_DTYPE_FP32};
    for (int i = 0; i < 3; i++)
        if (c->q_dtypes & AH_BIT(pref[i])) return pref[i];
    return AH_DTYPE_FP16;
}

/* The KV dtype to pair with a query dtype: the same if claimed, else the
 * first claimed non-FP8 type, else the first claimed. */
static ah_dtype pair_kv_dtype(const ah_caps *c, ah_dtype q)
{
    if (c->kv_dtypes & AH_BIT(q)) return q;
    for (int t = AH_DTYPE_FP32; t <= AH_DTYPE_BF16; t++)
        if (c->kv_dtypes & AH_BIT(t)) return (ah_dtype)t;
    for (int t = AH_DTYPE_FP32; t < AH_DTYPE_COUNT; t++)
        if (c->kv_dtypes & AH_BIT(t)) return (ah_dtype)t;
    return q;
}

/* Heads for a group size: Hq = 8 split into Hk KV heads, kept inside
 * max_head_groups. */
static void set_heads(const ah_caps *c, ah_layer_spec *s, uint32_t hq, uint32_t hk)
{
    if (c->max_head_groups && hq / hk > c->max_head_groups) hk = hq / c->max_head_groups;
    if (hk == 0) hk = 1;
    s->num_q_heads = hq;
    s->num_kv_heads = hk;
}

/* A v head size for a qk head size: the same when allowed, else (with
 * different head sizes claimed) the largest v member not above qk. */
static int pair_v_head(const ah_caps *c, uint32_t qk, uint32_t *v)
{
    if (ah_int_set_contains(&c->v_head_sizes, qk)) {
        *v = qk;
        return 1;
    }
    if (!has(c, AH_FEAT_DIFF_HEAD_SIZES)) return 0;
    uint32_t picks[MAX_PICKS], n = set_picks(&c->v_head_sizes, 1024, picks), best = 0;
    for (uint32_t i = 0; i < n; i++)
        if (picks[i] <= qk && picks[i] > best) best = picks[i];
    if (!best) return 0;
    *v = best;
    return 1;
}

static int make_base(gen *g)
{
    const ah_caps *c = g->caps;
    ah_layer_spec *s = &g->base.spec;
    memset(&g->base, 0, sizeof g->base);
    s->struct_size = sizeof *s;
    s->q_dtype = pick_q_dtype(c);
    s->kv_dtype = pair_kv_dtype(c, s->q_dtype);
    s->attn_type = (c->attn_types & AH_BIT(AH_ATTN_DECODER)) || !c->attn_types ? AH_ATTN_DECODER
                   : (c->attn_types & AH_BIT(AH_ATTN_ENCODER_ONLY)) ? AH_ATTN_ENCODER_ONLY
                   : (c->attn_types & AH_BIT(AH_ATTN_ENCODER))      ? AH_ATTN_ENCODER
                                                                    : AH_ATTN_ENCODER_DECODER;
    if (s->attn_type != AH_ATTN_DECODER && !has(c, type_feature((int)s->attn_type))) return 0;
    s->kv_layout = (c->kv_layouts & AH_BIT(c->preferred_kv_layout)) ? c->preferred_kv_layout
                   : (c->kv_layouts & AH_BIT(AH_KV_LAYOUT_NHD))     ? AH_KV_LAYOUT_NHD
                   : (c->kv_layouts & AH_BIT(AH_KV_LAYOUT_HND))     ? AH_KV_LAYOUT_HND
                                                                    : AH_KV_LAYOUT_NHD_INTERLEAVED;
    uint32_t bpicks[MAX_PICKS], nb = set_picks(&c->block_sizes, 256, bpicks);
    s->block_size = ah_int_set_contains(&c->block_sizes, c->preferred_block_size) &&
                            c->preferred_block_size <= 256
                        ? c->preferred_block_size
                    : nb ? bpicks[0]
                         : 16;
    /* head size: 128, else 64, else any qk with a v partner */
    const uint32_t pref[2] = {128, 64};
    uint32_t qk = 0, v = 0;
    for (int i = 0; i < 2 && !qk; i++)
        if (ah_int_set_contains(&c->qk_head_sizes, pref[i]) && pair_v_head(c, pref[i], &v))
            qk = pref[i];
    uint32_t hp[MAX_PICKS], nh = set_picks(&c->qk_head_sizes, 1024, hp);
    for (uint32_t i = 0; i < nh && !qk; i++)
        if (hp[i] != 576 && pair_v_head(c, hp[i], &v)) qk = hp[i];
    set_heads(c, s, 8, 2);
    if (!qk && has(c, AH_FEAT_MLA) && ah_int_set_contains(&c->qk_head_sizes, 576) &&
        ah_int_set_contains(&c->v_head_sizes, 512)) {
        qk = 576, v = 512; /* an MLA-only backend */
        s->use_mla = 1;
        set_heads(c, s, 8, 1);
    }
    if (!qk) return 0;
    s->qk_head_size = qk;
    s->v_head_size = v;
    g->base.want_lse = has(c, AH_FEAT_LSE);
    return 1;
}

/* ---- the generator ------------------------------------------------------- */

static void gen_dtypes(gen *g)
{
    const ah_caps *c = g->caps;
    for (int t = AH_DTYPE_FP32; t < AH_DTYPE_COUNT; t++) {
        if (!(c->q_dtypes & AH_BIT(t)) || t == (int)g->base.spec.q_dtype) continue;
        ah__conf_case x = variant(g);
        x.spec.q_dtype = (ah_dtype)t;
        x.spec.kv_dtype = pair_kv_dtype(c, (ah_dtype)t);
        add_shaped(g, &x, "q-dtype");
    }
    for (int t = AH_DTYPE_FP32; t < AH_DTYPE_COUNT; t++) {
        if (!(c->kv_dtypes & AH_BIT(t)) || t == (int)g->base.spec.kv_dtype) continue;
        ah__conf_case x = variant(g);
        x.spec.kv_dtype = (ah_dtype)t;
        add_shaped(g, &x, "kv-dtype");
        if (!ah_dtype_is_fp8((ah_dtype)t)) continue;
        x.spec.fp8_attention = 1; /* the model lets the math run in FP8 */
        add_shaped(g, &x, "fp8-attn");
        if (!g->opts->quick) {
            x = variant(g); /* FP8 under a decode-only batch too */
            x.spec.kv_dtype = (ah_dtype)t;
            set_shape(g, &x, SHAPE_DECODE);
            add(g, &x, "kv-dtype");
        }
    }
}

static void gen_head_sizes(gen *g)
{
    const ah_caps *c = g->caps;
    uint32_t hp[MAX_PICKS], nh = set_picks(&c->qk_head_sizes, 1024, hp);
    for (uint32_t i = 0; i < nh; i++) {
        uint32_t v;
        if (hp[i] == g->base.spec.qk_head_size || hp[i] == 576 || !pair_v_head(c, hp[i], &v))
            continue;
        ah__conf_case x = variant(g);
        x.spec.qk_head_size = hp[i];
        x.spec.v_head_size = v;
        x.spec.use_mla = 0;
        if (g->base.spec.use_mla) set_heads(c, &x.spec, 8, 2);
        add_shaped(g, &x, "head-size");
    }
    /* qk != v without MLA (e.g. 192/128), when claimed */
    if (has(c, AH_FEAT_DIFF_HEAD_SIZES)) {
        uint32_t vp[MAX_PICKS], nv = set_picks(&c->v_head_sizes, 1024, vp);
        for (uint32_t i = 0; i < nh; i++)
            for (uint32_t j = 0; j < nv; j++)
                if (hp[i] != 576 && vp[j] < hp[i]) {
                    ah__conf_case x = variant(g);
                    x.spec.qk_head_size = hp[i];
                    x.spec.v_head_size = vp[j];
                    x.spec.use_mla = 0;
                    set_heads(c, &x.spec, 8, 2);
                    add_shaped(g, &x, "qk!=v");
                    i = nh; /* one is enough */
                    break;
                }
    }
}

static void gen_blocks_layouts_groups(gen *g)
{
    const ah_caps *c = g->caps;
    uint32_t bp[MAX_PICKS], nb = set_picks(&c->block_sizes, 256, bp);
    for (uint32_t i = 0; i < nb; i++) {
        if (bp[i] == g->base.spec.block_size) continue;
        ah__conf_case x = variant(g);
        x.spec.block_size = bp[i];
        add_shaped(g, &x, "block-size");
    }
    /* every claimed layout; the interleaved ones (ABI 2.3) need one K/V
     * head size, and their random cache holds different K and V, so a
     * plugin that reads V at the key view's address fails them */
    const ah_layer_spec *bs = &g->base.spec;
    for (int l = AH_KV_LAYOUT_NHD; l < AH_KV_LAYOUT_COUNT; l++) {
        if (!(c->kv_layouts & AH_BIT(l)) || l == (int)bs->kv_layout) continue;
        if (ah_kv_layout_is_interleaved((ah_kv_layout)l) &&
            (bs->use_mla || bs->qk_head_size != bs->v_head_size))
            continue;
        ah__conf_case x = variant(g);
        x.spec.kv_layout = (ah_kv_layout)l;
        add_shaped(g, &x, "layout");
        x = variant(g); /* the other layout with the smallest block size too */
        x.spec.kv_layout = (ah_kv_layout)l;
        if (nb) x.spec.block_size = bp[0];
        if (!g->opts->quick) add_shaped(g, &x, "layout");
    }
    /* a cache block the plugin lacks but that is a multiple of one it takes
     * (ABI 2.3): the host runs it on kernel blocks; sequences cross cache
     * blocks where the block is small enough */
    if ((c->kv_layouts & AH_BIT(AH_KV_LAYOUT_NHD)) && !bs->use_mla) {
        const uint32_t b0 = bs->block_size;
        for (uint32_t x = 2 * b0; x <= 8192; x += b0) {
            if (ah_int_set_contains(&c->block_sizes, x)) continue;
            ah__conf_case k = variant(g);
            k.spec.kv_layout = AH_KV_LAYOUT_NHD;
            k.spec.block_size = x;
            add_shaped(g, &k, "kernel-blk");
            break;
        }
    }
    if (g->base.spec.use_mla) return;               /* MLA has one KV head */
    const uint32_t groups[2][2] = {{4, 4}, {8, 1}}; /* MHA, MQA */
    for (int i = 0; i < 2; i++) {
        ah__conf_case x = variant(g);
        set_heads(c, &x.spec, groups[i][0], groups[i][1]);
        if (x.spec.num_kv_heads == g->base.spec.num_kv_heads &&
            x.spec.num_q_heads == g->base.spec.num_q_heads)
            continue;
        add_shaped(g, &x, i ? "mqa" : "mha");
    }
    /* Groups that no power of two above 1 divides, or only 2 (the query
     * heads per KV head of Llama-3.2-3B: 3, Qwen2.5-14B/32B: 5, Qwen2-1.5B:
     * 6, Qwen2.5-7B: 7), in a mixed batch and a decode one: a kernel that
     * serves a group's heads in power-of-two blocks pads the last block of
     * each KV head, and must keep the padding out of every head's result. */
    const uint32_t odd[4][2] = {{12, 4}, {10, 2}, {12, 2}, {14, 2}};
    for (int i = 0; i < 4; i++) {
        if (c->max_head_groups && odd[i][0] / odd[i][1] > c->max_head_groups) continue;
        for (int decode = 0; decode < 2; decode++) {
            if (decode && g->base.spec.attn_type != AH_ATTN_DECODER) continue;
            ah__conf_case x = variant(g);
            x.spec.num_q_heads = odd[i][0];
            x.spec.num_kv_heads = odd[i][1];
            set_shape(g, &x, decode ? SHAPE_DECODE : default_shape(x.spec.attn_type));
            add(g, &x, decode ? "group-dec" : "group");
        }
    }
}

static void gen_features(gen *g)
{
    const ah_caps *c = g->caps;
    ah__conf_case x;
    if (has(c, AH_FEAT_SLIDING_WINDOW)) {
        const uint32_t windows[3] = {1, ah__conf_range(&g->rng, 2, 8), g->L / 3 + 1};
        for (int i = 0; i < 3; i++) {
            if (g->opts->quick && i == 0) continue;
            x = variant(g);
            x.spec.sliding_window = windows[i];
            add_shaped(g, &x, "window");
        }
        if (has(c, AH_FEAT_RELEASED_BLOCKS) && g->base.spec.attn_type == AH_ATTN_DECODER) {
            x = variant(g);
            x.spec.sliding_window = ah__conf_range(&g->rng, 2, 8);
            x.release = 1;
            add_shaped(g, &x, "released");
        }
    }
    if (has(c, AH_FEAT_SOFTCAP)) {
        x = variant(g);
        x.spec.softcap = 2.5f; /* logits reach a few units: the cap bends them */
        add_shaped(g, &x, "softcap");
    }
    if (has(c, AH_FEAT_ALIBI)) {
        x = variant(g);
        x.spec.use_alibi = 1;
        add_shaped(g, &x, "alibi");
    }
    if (has(c, AH_FEAT_SINKS)) {
        x = variant(g);
        x.spec.use_sinks = 1;
        add_shaped(g, &x, "sinks");
        if (has(c, AH_FEAT_SLIDING_WINDOW)) { /* the gpt-oss combination */
            x.spec.sliding_window = ah__conf_range(&g->rng, 4, 16);
            add_shaped(g, &x, "sinks");
        }
    }
    if (has(c, AH_FEAT_MLA) && !g->base.spec.use_mla &&
        ah_int_set_contains(&c->qk_head_sizes, 576) && ah_int_set_contains(&c->v_head_sizes, 512)) {
        x = variant(g);
        x.spec.qk_head_size = 576, x.spec.v_head_size = 512, x.spec.use_mla = 1;
        set_heads(c, &x.spec, 8, 1);
        add_shaped(g, &x, "mla");
        if (!g->opts->quick) {
            set_shape(g, &x, SHAPE_DECODE);
            add(g, &x, "mla");
        }
    }
    if (has(c, AH_FEAT_LSE) && !g->opts->quick) {
        x = variant(g);
        set_shape(g, &x, SHAPE_DECODE);
        add(g, &x, "lse");
    }
    /* everything at once, where claimed */
    if (!g->opts->quick && has(c, AH_FEAT_SLIDING_WINDOW) && has(c, AH_FEAT_SOFTCAP) &&
        has(c, AH_FEAT_SINKS)) {
        x = variant(g);
        x.spec.sliding_window = 7;
        x.spec.softcap = 2.5f;
        x.spec.use_sinks = 1;
        add_shaped(g, &x, "combined");
    }
}

/* The feature an attention type needs since ABI 2.1 (0: none). */
static uint32_t type_feature(int t)
{
    return t == AH_ATTN_ENCODER || t == AH_ATTN_ENCODER_ONLY ? AH_FEAT_CACHELESS
           : t == AH_ATTN_ENCODER_DECODER                    ? AH_FEAT_CROSS_ATTENTION
                                                             : 0;
}

static void gen_attn_types(gen *g)
{
    const ah_caps *c = g->caps;
    for (int t = 0; t < AH_ATTN_TYPE_COUNT; t++) {
        if (!(c->attn_types & AH_BIT(t)) || t == (int)g->base.spec.attn_type) continue;
        if (type_feature(t) && !has(c, type_feature(t))) continue; /* not claimed: skipped */
        ah__conf_case x = variant(g);
        x.spec.attn_type = (ah_attn_type)t;
        add_shaped(g, &x, "attn-type");
        if (type_feature(t) && (c->q_dtypes & AH_BIT(AH_DTYPE_BF16)) &&
            x.spec.q_dtype != AH_DTYPE_BF16) {
            ah__conf_case y = x; /* bf16 too: CPU tile kernels take bf16 rows */
            y.spec.q_dtype = AH_DTYPE_BF16;
            y.spec.kv_dtype = pair_kv_dtype(c, AH_DTYPE_BF16);
            add_shaped(g, &y, "attn-type");
        }
        if (t != AH_ATTN_ENCODER_DECODER && has(c, AH_FEAT_SLIDING_WINDOW) && !g->opts->quick) {
            x.spec.sliding_window = ah__conf_range(&g->rng, 2, 6); /* two-sided window */
            add_shaped(g, &x, "attn-type");
        }
    }
}

static void gen_batches(gen *g)
{
    if (g->base.spec.attn_type != AH_ATTN_DECODER) return;
    ah__conf_case x;
    if (has(g->caps, AH_FEAT_TREE_MASK)) { /* a tree-mask verify batch */
        x = variant(g);
        set_shape(g, &x, SHAPE_VERIFY);
        add(g, &x, "tree-mask");
        if (has(g->caps, AH_FEAT_SOFTCAP) && has(g->caps, AH_FEAT_SINKS)) {
            x.spec.softcap = 2.5f; /* the masked path with the logit features */
            x.spec.use_sinks = 1;
            set_shape(g, &x, SHAPE_VERIFY);
            add(g, &x, "tree-mask");
        }
    }
    if (has(g->caps, AH_FEAT_CAUSAL_FLAG)) { /* a bidirectional decoder layer */
        x = variant(g);
        x.spec.causal = AH_CAUSAL_OFF;
        add_shaped(g, &x, "causal=off");
        if (has(g->caps, AH_FEAT_SLIDING_WINDOW) && !g->opts->quick) {
            x.spec.sliding_window = ah__conf_range(&g->rng, 3, 9);
            add_shaped(g, &x, "causal=off");
        }
    }
    x = variant(g);
    set_shape(g, &x, SHAPE_DECODE);
    add(g, &x, "decode");
    x = variant(g);
    set_shape(g, &x, SHAPE_PREFILL);
    add(g, &x, "prefill");
    if (!g->opts->quick) {
        x = variant(g);
        set_shape(g, &x, SHAPE_UNIFORM);
        add(g, &x, "uniform");
        x = variant(g);
        set_shape(g, &x, SHAPE_MIXED);
        add(g, &x, "mixed");
    }
}

static void gen_merge_graphs(gen *g)
{
    ah__conf_case x = variant(g);
    x.kind = AH__CONF_MERGE;
    add_shaped(g, &x, "merge");
    if (g->base.spec.attn_type != AH_ATTN_DECODER) return;
    for (int lvl = AH_GRAPH_UNIFORM_SINGLE_TOKEN_DECODE; lvl <= (int)g->caps->graph_level; lvl++) {
        if (g->opts->quick && lvl != (int)g->caps->graph_level) continue;
        x = variant(g);
        x.kind = AH__CONF_GRAPH;
        x.graph = (ah_graph_level)lvl;
        x.write_kv = 0;
        set_shape(g, &x,
                  lvl == AH_GRAPH_UNIFORM_SINGLE_TOKEN_DECODE ? SHAPE_DECODE
                  : lvl == AH_GRAPH_UNIFORM_BATCH             ? SHAPE_UNIFORM
                                                              : SHAPE_MIXED);
        x.write_kv = 0;
        add(g, &x,
            lvl == AH_GRAPH_UNIFORM_SINGLE_TOKEN_DECODE ? "graph-dec"
            : lvl == AH_GRAPH_UNIFORM_BATCH             ? "graph-unif"
                                                        : "graph-mix");
    }
}

/* FP8 scales (ABI 2.3), as claimed, over the first FP8 KV dtype claimed:
 * scales in tensors; per-head scales, different for each KV head, under
 * GQA and MHA and in a decode batch (a kernel that reads one head's scale
 * for another fails them); a query scale for FP8 attention, as a float and
 * in a tensor; and a graph captured once and replayed after every scale
 * (the query's too, where claimed) changed. */
static void gen_scales(gen *g)
{
    const ah_caps *c = g->caps;
    const int tensors = has(c, AH_FEAT_SCALE_TENSORS);
    const int per_head = tensors && has(c, AH_FEAT_KV_SCALE_PER_HEAD);
    const ah_kv_scales form = per_head  ? AH_KV_SCALES_PER_HEAD
                              : tensors ? AH_KV_SCALES_TENSOR
                                        : AH_KV_SCALES_HOST;
    ah_dtype fp8 = AH_DTYPE_AUTO;
    for (int t = AH_DTYPE_FP8_E4M3; t < AH_DTYPE_COUNT && fp8 == AH_DTYPE_AUTO; t++)
        if (ah_dtype_is_fp8((ah_dtype)t) && (c->kv_dtypes & AH_BIT(t))) fp8 = (ah_dtype)t;
    if (fp8 == AH_DTYPE_AUTO || ah_spec_cacheless(&g->base.spec)) return;
    ah__conf_case x;
    if (tensors) {
        x = variant(g);
        x.spec.kv_dtype = fp8;
        x.spec.kv_scales = AH_KV_SCALES_TENSOR;
        add_shaped(g, &x, "scales");
    }
    if (per_head && !g->base.spec.use_mla) { /* MLA has one KV head: nothing per head */
        x = variant(g);
        x.spec.kv_dtype = fp8;
        x.spec.kv_scales = AH_KV_SCALES_PER_HEAD;
        add_shaped(g, &x, "scales");
        set_heads(c, &x.spec, 4, 4);
        add_shaped(g, &x, "scales");
        if (g->base.spec.attn_type == AH_ATTN_DECODER) {
            set_shape(g, &x, SHAPE_DECODE);
            add(g, &x, "scales");
        }
    }
    if (has(c, AH_FEAT_Q_SCALE)) {
        x = variant(g);
        x.spec.kv_dtype = fp8;
        x.spec.fp8_attention = 1;
        x.spec.use_q_scale = 1;
        add_shaped(g, &x, "q-scale");
        if (tensors) {
            x.spec.kv_scales = form;
            add_shaped(g, &x, "q-scale");
        }
    }
    if (tensors && g->base.spec.attn_type == AH_ATTN_DECODER &&
        c->graph_level >= AH_GRAPH_UNIFORM_SINGLE_TOKEN_DECODE) {
        x = variant(g);
        x.kind = AH__CONF_GRAPH;
        x.graph = AH_GRAPH_UNIFORM_SINGLE_TOKEN_DECODE;
        x.spec.kv_dtype = fp8;
        x.spec.kv_scales = g->base.spec.use_mla ? AH_KV_SCALES_TENSOR : form;
        x.spec.fp8_attention = x.spec.use_q_scale = (uint32_t)has(c, AH_FEAT_Q_SCALE);
        set_shape(g, &x, SHAPE_DECODE);
        x.write_kv = 0;
        add(g, &x, "graph-scale");
    }
}

/* Context parallelism (ABI 2.2), where the plugin returns LSE and serves
 * ranks that hold no key of a request: decode batches with sequences
 * shorter than the world (some ranks empty), a mixed batch (queries of
 * several tokens, one request per token on a rank), a block-sized
 * interleave, a window spanning shards, sinks (counted once) and MLA. */
static void gen_context_parallel(gen *g)
{
    const ah_caps *c = g->caps;
    if (!has(c, AH_FEAT_LSE) || !has(c, AH_FEAT_EMPTY_KV) ||
        g->base.spec.attn_type != AH_ATTN_DECODER)
        return;
    uint32_t worlds[2] = {2, 4}, nw = 2;
    if (g->opts->cp_devices > 1) { /* over NCCL: as many ranks as devices */
        worlds[0] = g->opts->cp_devices < AH_CONF_MAX_CP ? g->opts->cp_devices : AH_CONF_MAX_CP;
        nw = 1;
    }
    for (uint32_t w = 0; w < nw; w++) {
        ah__conf_case x = variant(g);
        x.kind = AH__CONF_CP;
        x.cp_world = worlds[w];
        x.cp_interleave = 1;
        set_shape(g, &x, SHAPE_DECODE);
        x.slen[0] = 1; /* ranks after 0 hold nothing of it */
        x.slen[1] = x.cp_world - 1 > 1 ? x.cp_world - 1 : 2;
        add(g, &x, "cp-decode");
        set_shape(g, &x, SHAPE_MIXED);
        add(g, &x, "cp-mixed");
        x.cp_interleave = x.spec.block_size;
        set_shape(g, &x, SHAPE_DECODE);
        add(g, &x, "cp-interlv");
        if (g->opts->cp_devices > 1 &&
            c->graph_level >= AH_GRAPH_UNIFORM_SINGLE_TOKEN_DECODE) { /* NCCL captures */
            ah__conf_case y = x;
            y.graph = AH_GRAPH_UNIFORM_SINGLE_TOKEN_DECODE;
            add(g, &y, "cp-graph");
        }
        x.cp_interleave = 2;
        if (has(c, AH_FEAT_SLIDING_WINDOW)) {
            ah__conf_case y = x;
            y.spec.sliding_window = 2 * x.cp_world * 3; /* a multiple of 2 x world */
            set_shape(g, &y, SHAPE_MIXED);
            add(g, &y, "cp-window");
        }
        if (has(c, AH_FEAT_SINKS)) {
            ah__conf_case y = x;
            y.spec.use_sinks = 1;
            set_shape(g, &y, SHAPE_DECODE);
            add(g, &y, "cp-sinks");
        }
        if (has(c, AH_FEAT_MLA) && ah_int_set_contains(&c->qk_head_sizes, 576) &&
            ah_int_set_contains(&c->v_head_sizes, 512)) {
            ah__conf_case y = x;
            y.spec.qk_head_size = 576, y.spec.v_head_size = 512, y.spec.use_mla = 1;
            set_heads(c, &y.spec, 8, 1);
            set_shape(g, &y, SHAPE_DECODE);
            add(g, &y, "cp-mla");
        }
        /* each claimed interleaved layout (ABI 2.3): a rank's shard in one
         * allocation, its values a view into it, new tokens written on the
         * ranks that own them */
        for (int l = AH_KV_LAYOUT_NHD; l < AH_KV_LAYOUT_COUNT; l++) {
            if (!ah_kv_layout_is_interleaved((ah_kv_layout)l) || !(c->kv_layouts & AH_BIT(l)) ||
                l == (int)x.spec.kv_layout || x.spec.use_mla ||
                x.spec.qk_head_size != x.spec.v_head_size)
                continue;
            ah__conf_case y = x;
            y.spec.kv_layout = (ah_kv_layout)l;
            set_shape(g, &y, SHAPE_MIXED);
            add(g, &y, "cp-layout");
        }
    }
}

/* How a ragged case's keys are given. */
enum { RAGGED_STEP = 0, RAGGED_MERGE = 1, RAGGED_CONTEXT = 2 };

/* A ragged step (ABI 2.3): request lengths that mix a whole prompt (k_len
 * = q_len), chunks over context (k_len > q_len), a single query and, for
 * a non-causal layer, fewer keys than queries. RAGGED_MERGE: klen is the
 * prefix chunk before the new tokens instead; RAGGED_CONTEXT: the context
 * of a context step. Both give request 0 no context. */
static void ragged_shape(gen *g, ah__conf_case *c, int how)
{
    ah__conf_rng *r = &g->rng;
    const uint32_t L = g->L;
    const int causal = c->spec.causal != AH_CAUSAL_OFF, merge = how != RAGGED_STEP;
    c->kind = AH__CONF_RAGGED;
    c->ragged_merge = how == RAGGED_MERGE;
    c->ragged_context = how == RAGGED_CONTEXT;
    /* a request without context has lse -inf: check it where claimed */
    if (c->ragged_context && has(g->caps, AH_FEAT_LSE)) c->want_lse = 1;
    c->write_kv = 0;
    c->num_reqs = 4;
    c->qlen[0] = ah__conf_range(r, 2, L / 2);
    c->qlen[1] = ah__conf_range(r, 2, 9);
    c->qlen[2] = 1;
    c->qlen[3] = ah__conf_range(r, 5, 12);
    for (uint32_t i = 0; i < 4; i++) {
        const uint32_t ctx = i == 0 ? 0 : ah__conf_range(r, 1, i == 2 ? L : L / 2);
        c->klen[i] = !merge ? c->qlen[i] + ctx : i == 0 ? 0 : ah__conf_range(r, 1, L / 2);
        c->slen[i] = 0; /* the runner sizes the paging from klen */
    }
    if (!causal && !merge) c->klen[3] = ah__conf_range(r, 1, c->qlen[3] - 1); /* fewer keys */
}

static void gen_ragged(gen *g)
{
    const ah_caps *c = g->caps;
    if (!has(c, AH_FEAT_RAGGED_KV) || g->base.spec.attn_type != AH_ATTN_DECODER ||
        g->base.spec.use_mla)
        return;
    ah__conf_case x = variant(g);
    ragged_shape(g, &x, RAGGED_STEP);
    add(g, &x, "ragged");
    if (c->q_dtypes & AH_BIT(AH_DTYPE_BF16) && x.spec.q_dtype != AH_DTYPE_BF16) {
        ah__conf_case y = x; /* the CPU tile kernels take bf16 rows */
        y.spec.q_dtype = AH_DTYPE_BF16;
        y.spec.kv_dtype = pair_kv_dtype(c, AH_DTYPE_BF16);
        add(g, &y, "ragged");
    }
    x = variant(g);
    set_heads(c, &x.spec, 4, 4);
    ragged_shape(g, &x, RAGGED_STEP);
    add(g, &x, "ragged-mha");
    if (has(c, AH_FEAT_SLIDING_WINDOW)) {
        x = variant(g);
        x.spec.sliding_window = ah__conf_range(&g->rng, 2, 8);
        ragged_shape(g, &x, RAGGED_STEP);
        add(g, &x, "ragged-win");
    }
    if (has(c, AH_FEAT_SOFTCAP) && has(c, AH_FEAT_SINKS) && has(c, AH_FEAT_ALIBI)) {
        x = variant(g);
        x.spec.softcap = 2.5f;
        x.spec.use_sinks = 1;
        x.spec.use_alibi = 1;
        ragged_shape(g, &x, RAGGED_STEP);
        add(g, &x, "ragged-logit");
    }
    if (has(c, AH_FEAT_CAUSAL_FLAG)) {
        x = variant(g);
        x.spec.causal = AH_CAUSAL_OFF;
        ragged_shape(g, &x, RAGGED_STEP);
        add(g, &x, "ragged-bidir");
        if (has(c, AH_FEAT_SLIDING_WINDOW) && !g->opts->quick) {
            x.spec.sliding_window = ah__conf_range(&g->rng, 3, 9);
            ragged_shape(g, &x, RAGGED_STEP);
            add(g, &x, "ragged-bidir");
        }
    }
    /* context steps, alone and merged: their window and ALiBi see the
     * chunk right before the queries, so merging stays exact with them */
    x = variant(g);
    ragged_shape(g, &x, RAGGED_CONTEXT);
    add(g, &x, "ragged-ctx");
    if (has(c, AH_FEAT_SLIDING_WINDOW) && has(c, AH_FEAT_ALIBI)) {
        x.spec.sliding_window = ah__conf_range(&g->rng, 3, 12);
        x.spec.use_alibi = 1;
        ragged_shape(g, &x, RAGGED_CONTEXT);
        add(g, &x, "ragged-ctx-win");
        if (has(c, AH_FEAT_CAUSAL_FLAG)) { /* every key visible anyway, but the window */
            x.spec.causal = AH_CAUSAL_OFF;
            x.spec.use_alibi = 0;
            ragged_shape(g, &x, RAGGED_CONTEXT);
            add(g, &x, "ragged-ctx-bidir");
        }
    }
    const int merge = has(c, AH_FEAT_LSE);
    if (merge) {
        x = variant(g);
        ragged_shape(g, &x, RAGGED_MERGE);
        add(g, &x, "ragged-merge");
        if (has(c, AH_FEAT_SLIDING_WINDOW) && has(c, AH_FEAT_ALIBI) && !g->opts->quick) {
            x.spec.sliding_window = ah__conf_range(&g->rng, 3, 12);
            x.spec.use_alibi = 1;
            ragged_shape(g, &x, RAGGED_MERGE);
            add(g, &x, "ragged-merge-win");
        }
    }
    /* qk != v on a ragged layer of its own (the form MLA's non-absorbed
     * prefill takes: 192 / 128, a KV head per query head), for backends that
     * serve it without the absorbed form */
    if (has(c, AH_FEAT_DIFF_HEAD_SIZES) && ah_int_set_contains(&c->qk_head_sizes, 192) &&
        ah_int_set_contains(&c->v_head_sizes, 128)) {
        x = variant(g);
        x.spec.qk_head_size = 192, x.spec.v_head_size = 128, x.spec.use_mla = 0;
        set_heads(c, &x.spec, 4, 4);
        ragged_shape(g, &x, RAGGED_STEP);
        add(g, &x, "ragged-qk!=v");
        ragged_shape(g, &x, RAGGED_CONTEXT);
        add(g, &x, "ragged-ctx-qk!=v");
    }
    /* MLA's non-absorbed prefill: qk 192 / v 128 with a KV head per query
     * head, beside the absorbed 576 / 512 form */
    if (has(c, AH_FEAT_MLA) && has(c, AH_FEAT_DIFF_HEAD_SIZES) &&
        ah_int_set_contains(&c->qk_head_sizes, 576) && ah_int_set_contains(&c->v_head_sizes, 512) &&
        ah_int_set_contains(&c->qk_head_sizes, 192) && ah_int_set_contains(&c->v_head_sizes, 128)) {
        x = variant(g);
        x.spec.qk_head_size = 576, x.spec.v_head_size = 512, x.spec.use_mla = 1;
        set_heads(c, &x.spec, 8, 1);
        x.ragged_nope = 128, x.ragged_v = 128;
        ragged_shape(g, &x, RAGGED_STEP);
        add(g, &x, "ragged-mla");
        if (merge) {
            ragged_shape(g, &x, RAGGED_MERGE);
            add(g, &x, "ragged-merge");
        }
    }
    /* the same form on a backend of it alone (no absorbed form): the
     * layer's paged MLA form binds by priority to another plugin, where one
     * serves it (else the cases skip, saying so) */
    if (!has(c, AH_FEAT_MLA) && has(c, AH_FEAT_DIFF_HEAD_SIZES) &&
        ah_int_set_contains(&c->qk_head_sizes, 192) && ah_int_set_contains(&c->v_head_sizes, 128)) {
        x = variant(g);
        x.spec.qk_head_size = 576, x.spec.v_head_size = 512, x.spec.use_mla = 1;
        x.spec.num_q_heads = 8, x.spec.num_kv_heads = 1;
        x.ragged_nope = 128, x.ragged_v = 128, x.ragged_beside = 1;
        ragged_shape(g, &x, RAGGED_STEP);
        add(g, &x, "ragged-beside");
        ragged_shape(g, &x, RAGGED_CONTEXT);
        add(g, &x, "ragged-ctx-beside");
        if (merge) {
            ragged_shape(g, &x, RAGGED_MERGE);
            add(g, &x, "ragged-merge-beside");
        }
    }
}

ah_status ah__conf_make_cases(const ah_plugin_info *info, const ah_conformance_options *opts,
                              ah__conf_case_list *out)
{
    memset(out, 0, sizeof *out);
    gen g;
    memset(&g, 0, sizeof g);
    g.caps = info->caps;
    g.opts = opts;
    g.list = out;
    g.L = opts->quick ? 40 : 150;
    ah__conf_rng_seed(&g.rng, opts->seed, 0x5eed);
    if (!g.caps || !make_base(&g)) return AH_ERR_UNSUPPORTED;
    ah__conf_case b = g.base;
    add_shaped(&g, &b, "base");
    gen_dtypes(&g);
    gen_head_sizes(&g);
    gen_blocks_layouts_groups(&g);
    gen_features(&g);
    gen_attn_types(&g);
    gen_batches(&g);
    gen_merge_graphs(&g);
    gen_scales(&g);
    gen_context_parallel(&g);
    gen_ragged(&g);
    if (g.oom) {
        ah__conf_case_list_free(out);
        return AH_ERR_OUT_OF_MEMORY;
    }
    if (opts->match) { /* keep the cases named so; seeds stay as generated */
        uint32_t n = 0;
        for (uint32_t i = 0; i < out->n; i++)
            if (strstr(out->v[i].name, opts->match)) out->v[n++] = out->v[i];
        out->n = n;
    }
    return AH_OK;
}

void ah__conf_case_list_free(ah__conf_case_list *l)
{
    free(l->v);
    memset(l, 0, sizeof *l);
}
