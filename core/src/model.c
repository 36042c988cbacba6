/*
 * Model descriptions: per-layer attention specs from an INI file.
 *
 *   [model]            name, num_layers, and any per-layer key as the
 *                      default for every layer
 *   [layers.<range>]   per-layer keys for the layers in range; sections
 *                      apply in file order, later ones win
 *
 * The keys come from model_keys.def. Reading happens in two steps: the INI
 * pass checks each value where it stands and records which section set it;
 * then every layer is resolved ([model], then each matching [layers.*]) and
 * validated, so an error names the layer and the line of the key (or
 * section) that made it wrong.
 */
#include "model.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "alloc.h"
#include "inifile.h"
#include "range.h"

static const ah_key_choice kind_choices[] = {{"attention", AH_LAYER_ATTENTION},
                                             {"mamba", AH_LAYER_MAMBA},
                                             {"linear_attention", AH_LAYER_LINEAR_ATTENTION},
                                             {"gdn", AH_LAYER_GDN},
                                             {"mlp_only", AH_LAYER_MLP_ONLY},
                                             {"other", AH_LAYER_OTHER},
                                             {NULL, 0}};
static const ah_key_choice attn_choices[] = {{"decoder", AH_ATTN_DECODER},
                                             {"encoder", AH_ATTN_ENCODER},
                                             {"encoder_only", AH_ATTN_ENCODER_ONLY},
                                             {"encoder_decoder", AH_ATTN_ENCODER_DECODER},
                                             {NULL, 0}};
static const ah_key_choice dtype_choices[] = {
    {"fp32", AH_DTYPE_FP32}, {"fp16", AH_DTYPE_FP16}, {"bf16", AH_DTYPE_BF16}, {NULL, 0}};
static const ah_key_choice kv_dtype_choices[] = {{"auto", AH_DTYPE_AUTO},
                                                 {"fp16", AH_DTYPE_FP16},
                                                 {"bf16", AH_DTYPE_BF16},
                                                 {"fp32", AH_DTYPE_FP32},
                                                 {"fp8_e4m3", AH_DTYPE_FP8_E4M3},
                                                 {"fp8_e5m2", AH_DTYPE_FP8_E5M2},
                                                 {"fp8_e4m3fnuz", AH_DTYPE_FP8_E4M3_FNUZ},
                                                 {"fp8_e5m2fnuz", AH_DTYPE_FP8_E5M2_FNUZ},
                                                 {NULL, 0}};
static const ah_key_choice kv_scales_choices[] = {{"host", AH_KV_SCALES_HOST},
                                                  {"tensor", AH_KV_SCALES_TENSOR},
                                                  {"per_head", AH_KV_SCALES_PER_HEAD},
                                                  {NULL, 0}};
static const ah_key_choice layout_choices[] = {{"auto", AH_KV_LAYOUT_AUTO},
                                               {"nhd", AH_KV_LAYOUT_NHD},
                                               {"hnd", AH_KV_LAYOUT_HND},
                                               {"nhd_interleaved", AH_KV_LAYOUT_NHD_INTERLEAVED},
                                               {"hnd_interleaved", AH_KV_LAYOUT_HND_INTERLEAVED},
                                               {NULL, 0}};

static const ah_key_arg arg_kind = {kind_choices, 0, 0};
static const ah_key_arg arg_attn_type = {attn_choices, 0, 0};
static const ah_key_arg arg_dtype = {dtype_choices, 0, 0};
static const ah_key_arg arg_kv_dtype = {kv_dtype_choices, 0, 0};
static const ah_key_arg arg_kv_layout = {layout_choices, 0, 0};
static const ah_key_arg arg_kv_scales = {kv_scales_choices, 0, 0};
static const ah_key_arg arg_num_layers = {NULL, 1, 16384};
static const ah_key_arg arg_heads = {NULL, 1, 4096};
static const ah_key_arg arg_head_size = {NULL, 1, 4096};
static const ah_key_choice block_size_choices[] = {{"auto", (int)AH_BLOCK_SIZE_AUTO}, {NULL, 0}};
static const ah_key_arg arg_block_size = {block_size_choices, 1, 65536};
static const ah_key_arg arg_window = {NULL, 0, 2147483647};
static const ah_key_arg arg_kv_group = {NULL, 0, AH_MAX_KV_GROUPS - 1};
static const ah_key_arg arg_softcap = {NULL, 0, 1e6};
static const ah_key_arg arg_scale = {NULL, 0, 1e6};

#define AH_CTYPE_STRING char *
#define AH_CTYPE_UINT uint32_t
#define AH_CTYPE_ENUM int
#define AH_CTYPE_FLOAT float
#define AH_CTYPE_BOOL int
#define AH_ONLY_model_model(x) x
#define AH_ONLY_model_layer(x)
#define AH_ONLY_layer_model(x)
#define AH_ONLY_layer_layer(x) x

/* Values of the [model]-only keys. */
typedef struct model_vals {
#define AH_MODEL_KEY(scope, key, type, arg, def, doc) AH_ONLY_model_##scope(AH_CTYPE_##type key;)
#include "model_keys.def"
#undef AH_MODEL_KEY
} model_vals;

/* Values of the per-layer keys, one field per key. */
typedef struct layer_vals {
#define AH_MODEL_KEY(scope, key, type, arg, def, doc) AH_ONLY_layer_##scope(AH_CTYPE_##type key;)
#include "model_keys.def"
#undef AH_MODEL_KEY
} layer_vals;

/* Short names for the AH_MK_* key indexes. */
#define N_MKEYS AH_MK_COUNT

#define AH_OFFSET_model(key) offsetof(model_vals, key)
#define AH_OFFSET_layer(key) offsetof(layer_vals, key)

static const ah_key_def model_keys[N_MKEYS] = {
#define AH_MODEL_KEY(scope, key, type, arg, def, doc) \
    {#scope, #key, AH_INI_##type, arg, AH_OFFSET_##scope(key), def, doc},
#include "model_keys.def"
#undef AH_MODEL_KEY
};

/* apply_section copies per-layer values as 4-byte words. */
_Static_assert(sizeof(uint32_t) == sizeof(int) && sizeof(float) == sizeof(int),
               "per-layer values are 4 bytes");

static int is_layer_key(int k) { return model_keys[k].section[0] == 'l'; }

/* One [model] or [layers.<range>] section as read. */
typedef struct msection {
    int line;
    int is_model;
    char *title;    /* "layers.1-47/2", for messages */
    ah_range range; /* [layers.*] only */
    layer_vals vals;
    int key_line[N_MKEYS]; /* 0: not set in this section */
} msection;

typedef struct mparse {
    const char *source;
    msection *secs;
    uint32_t n_secs;
    msection *cur;
    int model_sec; /* index of [model] in secs, or -1 */
    model_vals model;
} mparse;

/* The resolved values of one layer, with where each came from. */
typedef struct layer_state {
    layer_vals vals;
    int line[N_MKEYS];  /* 0: the table default */
    int level[N_MKEYS]; /* 0 default, 1 [model], 2 [layers.*] */
    int sec[N_MKEYS];   /* the [layers.*] section that set it + 1; 0: none */
} layer_state;

/* ---------------------------------------------------------------------------
 * Reading
 * ------------------------------------------------------------------------ */

static ah_status add_section(mparse *p, const char *title, int line, int is_model, ah_range range,
                             char *msg, size_t cap)
{
    msection *secs = ah__realloc(p->secs, (p->n_secs + 1) * sizeof *secs);
    char *t = ah__strdup(title);
    if (!secs || !t) {
        if (secs) p->secs = secs;
        ah__free(t);
        ah__range_free(&range);
        snprintf(msg, cap, "out of memory");
        return AH_ERR_OUT_OF_MEMORY;
    }
    p->secs = secs;
    msection *s = &secs[p->n_secs++];
    memset(s, 0, sizeof *s);
    s->line = line;
    s->is_model = is_model;
    s->title = t;
    s->range = range;
    p->cur = s;
    return AH_OK;
}

static ah_status on_section(void *user, const char *name, int line, char *msg, size_t cap)
{
    mparse *p = user;
    if (!strcmp(name, "model")) {
        if (p->model_sec >= 0) {
            snprintf(msg, cap, "appears twice (first at line %d)", p->secs[p->model_sec].line);
            return AH_ERR_CONFIG;
        }
        p->model_sec = (int)p->n_secs;
        return add_section(p, name, line, 1, (ah_range){NULL, 0}, msg, cap);
    }
    if (!strncmp(name, "layers.", 7) || !strcmp(name, "layers")) {
        const char *text = name[6] ? name + 7 : "";
        ah_range range;
        char rmsg[256];
        if (!*text) {
            snprintf(msg, cap,
                     "no layer range: write [layers.<range>], e.g. [layers.0-3] or "
                     "[layers.1-47/2]");
            return AH_ERR_CONFIG;
        }
        if (ah__range_parse(text, &range, rmsg, sizeof rmsg)) {
            int oom = !strcmp(rmsg, "out of memory");
            snprintf(msg, cap, oom ? "%s" : "bad layer range: %s", rmsg);
            return oom ? AH_ERR_OUT_OF_MEMORY : AH_ERR_CONFIG;
        }
        return add_section(p, name, line, 0, range, msg, cap);
    }
    if (!strncmp(name, "layer.", 6))
        snprintf(msg, cap,
                 "unknown section (a model description uses [layers.%s]; "
                 "[layer.<range>] belongs in the host configuration)",
                 name + 6);
    else
        snprintf(msg, cap,
                 "unknown section; a model description has [model] and "
                 "[layers.<range>] sections");
    return AH_ERR_CONFIG;
}

static void layer_key_names(char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int k = 0; k < N_MKEYS && n < cap; k++)
        if (is_layer_key(k))
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", model_keys[k].name);
}

static ah_status on_key(void *user, const char *section, const char *key, const char *value,
                        int line, char *msg, size_t cap)
{
    mparse *p = user;
    msection *s = p->cur;
    (void)section;
    for (int k = 0; k < N_MKEYS; k++) {
        const ah_key_def *d = &model_keys[k];
        if (strcmp(d->name, key)) continue;
        if (!is_layer_key(k) && !s->is_model) {
            snprintf(msg, cap, "'%s' belongs in [model]; it cannot vary per layer", key);
            return AH_ERR_CONFIG;
        }
        if (s->key_line[k]) {
            snprintf(msg, cap, "duplicate key (first set at line %d)", s->key_line[k]);
            return AH_ERR_CONFIG;
        }
        ah_status st =
            ah__key_set(d, is_layer_key(k) ? (void *)&s->vals : (void *)&p->model, value, msg, cap);
        if (st == AH_OK) s->key_line[k] = line;
        return st;
    }
    char names[512];
    layer_key_names(names, sizeof names);
    snprintf(msg, cap, "unknown key; %sper-layer keys are %s",
             s->is_model ? "[model] takes name, num_layers and the " : "", names);
    return AH_ERR_CONFIG;
}

static void mparse_free(mparse *p)
{
    for (uint32_t i = 0; i < p->n_secs; i++) {
        ah__free(p->secs[i].title);
        ah__range_free(&p->secs[i].range);
    }
    ah__free(p->secs);
    ah__free(p->model.name);
}

/* ---------------------------------------------------------------------------
 * Resolving and validating each layer
 * ------------------------------------------------------------------------ */

/* Copies the keys section s sets into layer state l. head_size comes first
 * in the table and writes both sizes; qk/v_head_size in the same section
 * then refine them. */
static void apply_section(layer_state *l, const msection *s, int level, int sec)
{
    for (int k = 0; k < N_MKEYS; k++) {
        if (!is_layer_key(k) || !s->key_line[k]) continue;
        const ah_key_def *d = &model_keys[k];
        memcpy((char *)&l->vals + d->offset, (const char *)&s->vals + d->offset, sizeof(uint32_t));
        l->line[k] = s->key_line[k];
        l->level[k] = level;
        l->sec[k] = sec;
        if (k == AH_MK_head_size) {
            l->vals.qk_head_size = l->vals.v_head_size = s->vals.head_size;
            l->line[AH_MK_qk_head_size] = l->line[AH_MK_v_head_size] = s->key_line[k];
            l->level[AH_MK_qk_head_size] = l->level[AH_MK_v_head_size] = level;
            l->sec[AH_MK_qk_head_size] = l->sec[AH_MK_v_head_size] = sec;
        }
    }
}

typedef struct resolve_ctx {
    const char *source;
    int model_line;
    ah_error *err;
} resolve_ctx;

static ah_status layer_fail(const resolve_ctx *c, const layer_state *l, int key, uint32_t layer,
                            const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static ah_status layer_fail(const resolve_ctx *c, const layer_state *l, int key, uint32_t layer,
                            const char *fmt, ...)
{
    if (!c->err) return AH_ERR_CONFIG;
    int line = key >= 0 && l->line[key] ? l->line[key] : c->model_line;
    int n = snprintf(c->err->msg, sizeof c->err->msg, "%s:%d: layer %u: ", c->source, line, layer);
    if (n < 0 || (size_t)n >= sizeof c->err->msg) return AH_ERR_CONFIG;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err->msg + n, sizeof c->err->msg - (size_t)n, fmt, ap);
    va_end(ap);
    return AH_ERR_CONFIG;
}

/* The key of a and b set later in the file, for messages about both. */
static int later(const layer_state *l, int a, int b) { return l->line[b] > l->line[a] ? b : a; }

static ah_status resolve_mla(const resolve_ctx *c, layer_state *l, uint32_t i)
{
    layer_vals *v = &l->vals;
    uint32_t derived[3] = {1, v->kv_lora_rank + v->qk_rope_head_dim, v->kv_lora_rank};
    static const int keys[3] = {AH_MK_num_kv_heads, AH_MK_qk_head_size, AH_MK_v_head_size};
    uint32_t *fields[3] = {&v->num_kv_heads, &v->qk_head_size, &v->v_head_size};
    for (int j = 0; j < 3; j++) {
        /* Set as specifically as mla itself: it must agree. Less
         * specifically (a [model] default under a [layers] mla): replaced. */
        if (l->level[keys[j]] >= l->level[AH_MK_mla] && *fields[j] != derived[j]) {
            const char *why = j == 0   ? "one KV head"
                              : j == 1 ? "kv_lora_rank + qk_rope_head_dim"
                                       : "kv_lora_rank";
            int key = l->line[keys[j]] == l->line[AH_MK_head_size] && l->level[AH_MK_head_size]
                          ? AH_MK_head_size
                          : keys[j];
            return layer_fail(
                c, l, key, i, "%s = %u conflicts with mla (line %d), which needs %u (%s)",
                model_keys[key].name, *fields[j], l->line[AH_MK_mla], derived[j], why);
        }
        *fields[j] = derived[j];
    }
    return AH_OK;
}

/* The layer's ragged prefill form, from ragged_prefill and (MLA) the
 * non-absorbed head sizes; *ragged stays zero without one. */
static ah_status resolve_ragged(const resolve_ctx *c, const layer_state *l, uint32_t i,
                                const ah_layer_spec *spec, ah_layer_spec *ragged)
{
    const layer_vals *v = &l->vals;
    if (!v->ragged_prefill) return AH_OK;
    if (spec->use_mla)
        for (int k = AH_MK_qk_nope_head_dim; k <= AH_MK_v_head_dim; k++)
            if (!l->level[k])
                return layer_fail(c, l, AH_MK_ragged_prefill, i,
                                  "ragged_prefill on an mla layer needs %s: the ragged form is "
                                  "the non-absorbed one (qk_head_size = qk_nope_head_dim + "
                                  "qk_rope_head_dim, v_head_size = v_head_dim)",
                                  model_keys[k].name);
    ah__model_ragged_form(spec, v->qk_nope_head_dim, v->v_head_dim, ragged);
    char msg[512];
    if (ah__model_ragged_check(spec, ragged, msg, sizeof msg) != AH_OK)
        return layer_fail(c, l, AH_MK_ragged_prefill, i, "%s", msg);
    return AH_OK;
}

static ah_status resolve_layer(const resolve_ctx *c, layer_state *l, uint32_t i,
                               ah_layer_spec *spec, ah_layer_spec *ragged, ah_layer_kind *kind)
{
    layer_vals *v = &l->vals;
    *kind = (ah_layer_kind)v->kind;
    memset(spec, 0, sizeof *spec);
    spec->struct_size = sizeof *spec;
    memset(ragged, 0, sizeof *ragged);
    if (v->kind != AH_LAYER_ATTENTION) {
        /* attention keys from [model] or other sections do not apply; in
         * the very section that makes the layer non-attention they are a
         * contradiction */
        for (int k = 0; k < N_MKEYS; k++)
            if (is_layer_key(k) && k != AH_MK_kind && l->sec[k] && l->sec[k] == l->sec[AH_MK_kind])
                return layer_fail(c, l, k, i,
                                  "%s applies only to attention layers; this is a %s "
                                  "layer (kind, line %d)",
                                  model_keys[k].name, ah_layer_kind_str(*kind),
                                  l->line[AH_MK_kind]);
        return AH_OK;
    }
    if (v->mla) {
        ah_status s = resolve_mla(c, l, i);
        if (s != AH_OK) return s;
    } else {
        static const int mla_only[4] = {AH_MK_kv_lora_rank, AH_MK_qk_rope_head_dim,
                                        AH_MK_qk_nope_head_dim, AH_MK_v_head_dim};
        for (int j = 0; j < 4; j++)
            if (l->level[mla_only[j]] && l->level[mla_only[j]] >= l->level[AH_MK_mla])
                return layer_fail(c, l, mla_only[j], i, "%s applies only to mla layers",
                                  model_keys[mla_only[j]].name);
        if (!l->level[AH_MK_num_kv_heads]) v->num_kv_heads = v->num_q_heads;
    }
    spec->attn_type = (ah_attn_type)v->attn_type;
    spec->num_q_heads = v->num_q_heads;
    spec->num_kv_heads = v->num_kv_heads;
    spec->qk_head_size = v->qk_head_size;
    spec->v_head_size = v->v_head_size;
    spec->q_dtype = (ah_dtype)v->dtype;
    spec->kv_dtype = (ah_dtype)v->kv_dtype;
    spec->block_size = v->block_size;
    spec->kv_layout = (ah_kv_layout)v->kv_layout;
    spec->sliding_window = v->sliding_window;
    spec->kv_group = v->kv_group;
    spec->softcap = v->softcap;
    spec->scale = v->scale;
    spec->use_mla = (uint32_t)v->mla;
    spec->use_sinks = (uint32_t)v->sinks;
    spec->use_alibi = (uint32_t)v->alibi;
    spec->fp8_attention = (uint32_t)v->fp8_attention;
    spec->kv_scales = (uint32_t)v->kv_scales;
    spec->use_q_scale = (uint32_t)v->q_scale;
    spec->causal =
        l->level[AH_MK_causal] ? (v->causal ? AH_CAUSAL_ON : AH_CAUSAL_OFF) : AH_CAUSAL_BY_TYPE;
    char msg[512];
    int keys[2];
    if (ah__model_layer_check(spec, *kind, msg, sizeof msg, keys) != AH_OK)
        return layer_fail(c, l, keys[1] < 0 ? keys[0] : later(l, keys[0], keys[1]), i, "%s", msg);
    return resolve_ragged(c, l, i, spec, ragged);
}

/* ---------------------------------------------------------------------------
 * The one check of a layer, whatever it came from
 * ------------------------------------------------------------------------ */

const char *ah__model_key_name(int k) { return k >= 0 && k < N_MKEYS ? model_keys[k].name : "?"; }

static ah_status check_fail(char *msg, size_t cap, int keys[2], int a, int b, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static ah_status check_fail(char *msg, size_t cap, int keys[2], int a, int b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    keys[0] = a;
    keys[1] = b;
    return AH_ERR_CONFIG;
}

/* A value against its key's choices or limits, as the INI parser checks
 * text; 0 when fine. */
static int out_of_range(int k, double v)
{
    const ah_key_def *d = &model_keys[k];
    if (d->type == AH_INI_BOOL) return v != 0 && v != 1;
    if (d->type == AH_INI_ENUM) return ah__key_choice_name(d, (int)v) == NULL;
    if (d->type == AH_INI_FLOAT && !isfinite(v)) return 1;
    if (d->type == AH_INI_UINT && d->arg->choices && v >= 0 && v <= UINT32_MAX &&
        ah__key_choice_name(d, (int)(uint32_t)v))
        return 0; /* a named value (block_size = auto) */
    return v < d->arg->min || v > d->arg->max;
}

ah_status ah__model_layer_check(const ah_layer_spec *s, ah_layer_kind kind, char *msg, size_t cap,
                                int keys[2])
{
    keys[0] = keys[1] = -1;
    if ((unsigned)kind >= AH_LAYER_KIND_COUNT)
        return check_fail(msg, cap, keys, AH_MK_kind, -1, "kind %d is not a layer kind", (int)kind);
    if (kind != AH_LAYER_ATTENTION) return AH_OK;
    if (!s->qk_head_size)
        return check_fail(msg, cap, keys, -1, -1, "head_size (or qk_head_size) is not set");
    if (!s->v_head_size)
        return check_fail(msg, cap, keys, AH_MK_qk_head_size, -1,
                          "v_head_size is not set (head_size sets both sizes)");
    if (!s->num_q_heads) return check_fail(msg, cap, keys, -1, -1, "num_q_heads is not set");
    /* what the INI parser checks of each value where it stands */
    const struct {
        int key;
        double v;
    } vals[] = {{AH_MK_attn_type, s->attn_type},
                {AH_MK_num_q_heads, s->num_q_heads},
                {AH_MK_num_kv_heads, s->num_kv_heads},
                {AH_MK_qk_head_size, s->qk_head_size},
                {AH_MK_v_head_size, s->v_head_size},
                {AH_MK_dtype, s->q_dtype},
                {AH_MK_kv_dtype, s->kv_dtype},
                {AH_MK_block_size, s->block_size},
                {AH_MK_kv_layout, s->kv_layout},
                {AH_MK_sliding_window, s->sliding_window},
                {AH_MK_softcap, s->softcap},
                {AH_MK_scale, s->scale},
                {AH_MK_mla, s->use_mla},
                {AH_MK_sinks, s->use_sinks},
                {AH_MK_alibi, s->use_alibi},
                {AH_MK_fp8_attention, s->fp8_attention},
                {AH_MK_kv_group, ah_spec_kv_group(s)},
                {AH_MK_kv_scales, ah_spec_kv_scales(s)},
                {AH_MK_q_scale, ah_spec_q_scale(s)}};
    for (size_t j = 0; j < sizeof vals / sizeof *vals; j++)
        if (out_of_range(vals[j].key, vals[j].v)) {
            char what[300];
            ah__key_describe(&model_keys[vals[j].key], what, sizeof what);
            return check_fail(msg, cap, keys, vals[j].key, -1, "%s = %.9g is not allowed (%s)",
                              model_keys[vals[j].key].name, vals[j].v, what);
        }
    if (s->num_q_heads % s->num_kv_heads)
        return check_fail(msg, cap, keys, AH_MK_num_q_heads, AH_MK_num_kv_heads,
                          "num_q_heads %u is not a multiple of num_kv_heads %u", s->num_q_heads,
                          s->num_kv_heads);
    if (s->use_mla) {
        if (s->attn_type != AH_ATTN_DECODER)
            return check_fail(msg, cap, keys, AH_MK_mla, AH_MK_attn_type,
                              "mla needs attn_type = decoder, not %s",
                              ah__key_choice_name(&model_keys[AH_MK_attn_type], (int)s->attn_type));
        if (s->num_kv_heads != 1)
            return check_fail(msg, cap, keys, AH_MK_num_kv_heads, AH_MK_mla,
                              "num_kv_heads = %u conflicts with mla, which needs 1 (one KV head)",
                              s->num_kv_heads);
        if (s->qk_head_size <= s->v_head_size)
            return check_fail(msg, cap, keys, AH_MK_qk_head_size, AH_MK_v_head_size,
                              "mla: qk_head_size %u must exceed v_head_size %u (kv_lora_rank + "
                              "qk_rope_head_dim over kv_lora_rank)",
                              s->qk_head_size, s->v_head_size);
    }
    if (ah_kv_layout_is_interleaved(s->kv_layout) &&
        (s->use_mla || s->qk_head_size != s->v_head_size))
        return check_fail(msg, cap, keys, AH_MK_kv_layout,
                          s->use_mla ? AH_MK_mla : AH_MK_v_head_size,
                          "kv_layout = %s keeps K and V in one tensor of one head size, which %s",
                          ah__key_choice_name(&model_keys[AH_MK_kv_layout], (int)s->kv_layout),
                          s->use_mla ? "mla (no value cache) does not have"
                                     : "different qk_head_size and v_head_size do not fit");
    if (s->sliding_window && s->attn_type == AH_ATTN_ENCODER_DECODER)
        return check_fail(
            msg, cap, keys, AH_MK_sliding_window, AH_MK_attn_type,
            "sliding_window does not apply to encoder_decoder (cross-attention) layers");
    if (AH_HAS_FIELD(s, ah_layer_spec, causal) && s->causal > AH_CAUSAL_OFF)
        return check_fail(msg, cap, keys, AH_MK_causal, -1, "causal %u is not a causal setting",
                          s->causal);
    if (AH_HAS_FIELD(s, ah_layer_spec, causal) && s->causal == AH_CAUSAL_ON &&
        s->attn_type != AH_ATTN_DECODER)
        return check_fail(msg, cap, keys, AH_MK_causal, AH_MK_attn_type,
                          "causal = true applies only to decoder layers");
    if (ah_spec_ragged(s))
        return check_fail(msg, cap, keys, AH_MK_ragged_prefill, -1,
                          "the layer's spec says ragged_kv: a layer's own spec is its paged "
                          "form; its ragged prefill form goes beside it (ragged_prefill, "
                          "ah_model_desc.ragged_forms)");
    const int fp8 = ah_dtype_is_fp8(s->kv_dtype);
    if (ah_spec_kv_scales(s) != AH_KV_SCALES_HOST && (!fp8 || ah_spec_cacheless(s)))
        return check_fail(msg, cap, keys, AH_MK_kv_scales, fp8 ? AH_MK_attn_type : AH_MK_kv_dtype,
                          "kv_scales = %s needs a KV cache in an FP8 kv_dtype (fp8_e4m3, "
                          "fp8_e5m2, fp8_e4m3fnuz, fp8_e5m2fnuz), not %s%s",
                          ah_kv_scales_str(ah_spec_kv_scales(s)),
                          fp8 ? "a cacheless " : "kv_dtype ",
                          fp8 ? ah_attn_type_str(s->attn_type)
                              : ah__key_choice_name(&model_keys[AH_MK_kv_dtype], (int)s->kv_dtype));
    if (ah_spec_q_scale(s) && (!fp8 || !s->fp8_attention || ah_spec_cacheless(s)))
        return check_fail(msg, cap, keys, AH_MK_q_scale,
                          !fp8 ? AH_MK_kv_dtype : AH_MK_fp8_attention,
                          "q_scale = true needs fp8_attention = true over an FP8 kv_dtype (the "
                          "query is quantised only for FP8 attention); the layer has kv_dtype %s, "
                          "fp8_attention = %s",
                          ah__key_choice_name(&model_keys[AH_MK_kv_dtype], (int)s->kv_dtype),
                          s->fp8_attention ? "true" : "false");
    if (ah_spec_kv_group(s) && ah_spec_cacheless(s))
        return check_fail(msg, cap, keys, AH_MK_kv_group, AH_MK_attn_type,
                          "kv_group = %u on a cacheless (%s) layer, which has no KV cache: leave "
                          "it in group 0",
                          s->kv_group,
                          ah__key_choice_name(&model_keys[AH_MK_attn_type], (int)s->attn_type));
    return AH_OK;
}

static ah_dtype group_kv_dtype(const ah_layer_spec *s)
{
    return s->kv_dtype == AH_DTYPE_AUTO ? s->q_dtype : s->kv_dtype;
}

ah_status ah__model_groups_check(ah_model *m, char *msg, size_t cap)
{
    /* Does the model declare groups? Without any, KV dtype and layout may
     * still differ between layers, as before groups existed. */
    int declared = 0;
    for (uint32_t i = 0; i < m->num_layers && !declared; i++)
        declared = m->kinds[i] == AH_LAYER_ATTENTION && ah_spec_kv_group(&m->layers[i]) != 0;
    /* first[g]: the first cache layer of group g, or UINT32_MAX */
    uint32_t first[AH_MAX_KV_GROUPS], top = 0;
    for (uint32_t g = 0; g < AH_MAX_KV_GROUPS; g++) first[g] = UINT32_MAX;
    m->num_kv_groups = 1;
    for (uint32_t i = 0; i < m->num_layers; i++) {
        const ah_layer_spec *s = &m->layers[i];
        if (m->kinds[i] != AH_LAYER_ATTENTION || ah_spec_cacheless(s)) continue;
        const uint32_t g = ah_spec_kv_group(s);
        if (g >= AH_MAX_KV_GROUPS) { /* the layer check bounds it; kept for safety */
            snprintf(msg, cap, "layer %u: kv_group = %u is not below %u", i, g, AH_MAX_KV_GROUPS);
            return AH_ERR_CONFIG;
        }
        if (g > top) top = g;
        if (first[g] == UINT32_MAX) {
            first[g] = i;
            continue;
        }
        const ah_layer_spec *a = &m->layers[first[g]];
        const char *what = NULL;
        char av[32], bv[32];
        if (a->block_size != s->block_size) {
            what = "block_size";
            if (a->block_size == AH_BLOCK_SIZE_AUTO) snprintf(av, sizeof av, "auto");
            else snprintf(av, sizeof av, "%u", a->block_size);
            if (s->block_size == AH_BLOCK_SIZE_AUTO) snprintf(bv, sizeof bv, "auto");
            else snprintf(bv, sizeof bv, "%u", s->block_size);
        } else if (declared && group_kv_dtype(a) != group_kv_dtype(s)) {
            what = "kv_dtype";
            snprintf(av, sizeof av, "%s",
                     ah__key_choice_name(&model_keys[AH_MK_kv_dtype], group_kv_dtype(a)));
            snprintf(bv, sizeof bv, "%s",
                     ah__key_choice_name(&model_keys[AH_MK_kv_dtype], group_kv_dtype(s)));
        } else if (declared && a->kv_layout != s->kv_layout && a->kv_layout != AH_KV_LAYOUT_AUTO &&
                   s->kv_layout != AH_KV_LAYOUT_AUTO) {
            what = "kv_layout";
            snprintf(av, sizeof av, "%s",
                     ah__key_choice_name(&model_keys[AH_MK_kv_layout], a->kv_layout));
            snprintf(bv, sizeof bv, "%s",
                     ah__key_choice_name(&model_keys[AH_MK_kv_layout], s->kv_layout));
        }
        if (what) {
            snprintf(msg, cap,
                     "layers %u and %u are both in kv_group %u but differ in %s (%s and %s): the "
                     "layers of a KV-cache group share one block table, so one block_size%s (put "
                     "them in different groups with kv_group, or make them agree)",
                     first[g], i, g, what, av, bv, declared ? ", kv_dtype and kv_layout" : "");
            return AH_ERR_CONFIG;
        }
    }
    for (uint32_t g = 0; g < top; g++)
        if (first[g] == UINT32_MAX) {
            snprintf(msg, cap,
                     "layer %u: kv_group = %u, but no layer with a KV cache is in group %u: groups "
                     "are numbered from 0 without gaps",
                     first[top], top, g);
            return AH_ERR_CONFIG;
        }
    m->num_kv_groups = top + 1;
    return AH_OK;
}

/* The largest layer a range names explicitly (not counting open ends). */
static uint32_t range_max(const ah_range *r)
{
    uint32_t m = 0;
    for (uint32_t i = 0; i < r->n_parts; i++) {
        const ah_range_part *p = &r->parts[i];
        uint32_t top = p->hi == UINT32_MAX ? p->lo : p->lo + (p->hi - p->lo) / p->step * p->step;
        if (top > m) m = top;
    }
    return m;
}

_Static_assert(AH_MODEL_NAME_MAX == 128, "ah__model_name_problem's message says 128");

const char *ah__model_name_problem(const char *name)
{
    const size_t n = name ? strlen(name) : 0;
    if (!n) return "must not be empty";
    if (n > AH_MODEL_NAME_MAX) return "is longer than 128 bytes";
    if (isspace((unsigned char)name[0]) || isspace((unsigned char)name[n - 1]))
        return "must not begin or end with a space";
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c == 0x7f) return "must not hold a control character (one line)";
        if (c == ';' || c == '#')
            return "must not hold ';' or '#' (a description reads them as a comment)";
    }
    return NULL;
}

static ah_status build(mparse *p, ah_model *m, ah_error *err)
{
    if (p->model_sec < 0) {
        if (err)
            snprintf(err->msg, sizeof err->msg,
                     "%s: no [model] section (it sets name and num_layers)", p->source);
        return AH_ERR_CONFIG;
    }
    const msection *ms = &p->secs[p->model_sec];
    for (int k = AH_MK_name; k <= AH_MK_num_layers; k++)
        if (!ms->key_line[k]) {
            if (err)
                snprintf(err->msg, sizeof err->msg, "%s:%d: [model] %s: not set (required)",
                         p->source, ms->line, model_keys[k].name);
            return AH_ERR_CONFIG;
        }
    const char *bad = ah__model_name_problem(p->model.name);
    if (bad) {
        if (err)
            snprintf(err->msg, sizeof err->msg, "%s:%d: [model] name: %s", p->source,
                     ms->key_line[AH_MK_name], bad);
        return AH_ERR_CONFIG;
    }
    uint32_t n = p->model.num_layers;
    for (uint32_t s = 0; s < p->n_secs; s++) {
        const msection *sec = &p->secs[s];
        if (sec->is_model) continue;
        uint32_t top = range_max(&sec->range);
        if (top >= n) {
            if (err)
                snprintf(err->msg, sizeof err->msg,
                         "%s:%d: [%s]: layer %u is beyond the model's %u layers (0-%u)", p->source,
                         sec->line, sec->title, top, n, n - 1);
            return AH_ERR_CONFIG;
        }
    }

    /* Table defaults, parsed once, are where every layer starts. */
    layer_state base;
    memset(&base, 0, sizeof base);
    char msg[256];
    for (int k = 0; k < N_MKEYS; k++)
        if (is_layer_key(k) && model_keys[k].def &&
            ah__key_set(&model_keys[k], &base.vals, model_keys[k].def, msg, sizeof msg) != AH_OK) {
            if (err)
                snprintf(err->msg, sizeof err->msg, "internal: default of %s: %s",
                         model_keys[k].name, msg);
            return AH_ERR_INTERNAL;
        }
    apply_section(&base, ms, 1, 0);

    m->layers = ah__calloc(n, sizeof *m->layers);
    m->kinds = ah__calloc(n, sizeof *m->kinds);
    m->ragged = ah__calloc(n, sizeof *m->ragged);
    m->name = ah__strdup(p->model.name);
    if (!m->layers || !m->kinds || !m->ragged || !m->name) {
        if (err) snprintf(err->msg, sizeof err->msg, "%s: out of memory", p->source);
        return AH_ERR_OUT_OF_MEMORY;
    }
    m->num_layers = n;
    resolve_ctx c = {p->source, ms->line, err};
    for (uint32_t i = 0; i < n; i++) {
        layer_state l = base;
        for (uint32_t s = 0; s < p->n_secs; s++)
            if (!p->secs[s].is_model && ah__range_contains(&p->secs[s].range, i))
                apply_section(&l, &p->secs[s], 2, (int)s + 1);
        ah_status st = resolve_layer(&c, &l, i, &m->layers[i], &m->ragged[i], &m->kinds[i]);
        if (st != AH_OK) return st;
    }
    char gmsg[512];
    if (ah__model_groups_check(m, gmsg, sizeof gmsg) != AH_OK) {
        if (err) snprintf(err->msg, sizeof err->msg, "%s: %s", p->source, gmsg);
        return AH_ERR_CONFIG;
    }
    return AH_OK;
}

static ah_status model_read(const char *path, const char *text, const char *source, ah_model **out,
                            ah_error *err)
{
    if (!out) return AH_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!path && !text) {
        if (err) snprintf(err->msg, sizeof err->msg, "no model description given");
        return AH_ERR_INVALID_ARGUMENT;
    }
    if (!source) source = path ? path : "<text>";
    mparse p;
    memset(&p, 0, sizeof p);
    p.source = source;
    p.model_sec = -1;
    ah_ini_callbacks cb = {&p, on_section, on_key};
    ah_status s = ah__ini_parse(path, text, source, &cb, err);
    ah_model *m = NULL;
    if (s == AH_OK) {
        m = ah__calloc(1, sizeof *m);
        if (!m) {
            if (err) snprintf(err->msg, sizeof err->msg, "%s: out of memory", source);
            s = AH_ERR_OUT_OF_MEMORY;
        }
    }
    if (s == AH_OK) s = build(&p, m, err);
    mparse_free(&p);
    if (s != AH_OK) {
        ah_model_destroy(m);
        return s;
    }
    *out = m;
    return AH_OK;
}

/* ---------------------------------------------------------------------------
 * Public API
 * ------------------------------------------------------------------------ */

ah_status ah_model_load(const char *path, ah_model **out, ah_error *err)
{
    if (!path) {
        if (out) *out = NULL;
        if (err) snprintf(err->msg, sizeof err->msg, "no model file given");
        return AH_ERR_INVALID_ARGUMENT;
    }
    return model_read(path, NULL, NULL, out, err);
}

ah_status ah_model_parse(const char *text, const char *source, ah_model **out, ah_error *err)
{
    return model_read(NULL, text, source, out, err);
}

void ah_model_destroy(ah_model *model)
{
    if (!model) return;
    ah__free(model->name);
    ah__free(model->layers);
    ah__free(model->kinds);
    ah__free(model->ragged);
    ah__free(model);
}

const char *ah_model_name(const ah_model *model) { return model ? model->name : NULL; }

uint32_t ah_model_num_layers(const ah_model *model) { return model ? model->num_layers : 0; }

uint32_t ah_model_num_kv_groups(const ah_model *model) { return model ? model->num_kv_groups : 0; }

const ah_layer_spec *ah_model_layer(const ah_model *model, uint32_t layer)
{
    return model && layer < model->num_layers ? &model->layers[layer] : NULL;
}

const ah_layer_spec *ah_model_layer_ragged(const ah_model *model, uint32_t layer)
{
    return model && layer < model->num_layers && model->ragged[layer].struct_size
               ? &model->ragged[layer]
               : NULL;
}

void ah__model_ragged_form(const ah_layer_spec *paged, uint32_t qk_nope, uint32_t v_dim,
                           ah_layer_spec *out)
{
    *out = *paged;
    out->struct_size = sizeof *out;
    out->ragged_kv = 1;
    out->kv_group = 0;      /* no cache */
    out->fp8_attention = 0; /* keys come in the query dtype */
    out->kv_dtype = paged->q_dtype;
    if (out->scale == 0.0f) out->scale = (float)(1.0 / sqrt((double)paged->qk_head_size));
    if (!paged->use_mla) return;
    out->use_mla = 0;
    out->num_kv_heads = paged->num_q_heads;
    out->qk_head_size = qk_nope + (paged->qk_head_size - paged->v_head_size);
    out->v_head_size = v_dim;
}

ah_status ah__model_ragged_check(const ah_layer_spec *p, const ah_layer_spec *r, char *msg,
                                 size_t cap)
{
    if (!r->struct_size) return AH_OK;
    const char *bad = NULL;
    if (p->attn_type != AH_ATTN_DECODER || ah_spec_ragged(p))
        bad = "only paged decoder layers have a ragged prefill form";
    else if (!ah_spec_ragged(r)) bad = "it does not say ragged_kv or is not a decoder layer";
    else if (r->use_mla) bad = "it is absorbed MLA; a ragged form is non-absorbed";
    else if (r->num_q_heads != p->num_q_heads) bad = "its num_q_heads differs from the layer's";
    else if (!r->num_kv_heads || r->num_q_heads % r->num_kv_heads)
        bad = "its num_q_heads is not a multiple of its num_kv_heads";
    else if (!p->use_mla &&
             (r->num_kv_heads != p->num_kv_heads || r->qk_head_size != p->qk_head_size ||
              r->v_head_size != p->v_head_size))
        bad = "its heads or head sizes differ from the layer's (only an mla layer's ragged form "
              "has other sizes)";
    else if (p->use_mla && r->num_kv_heads != r->num_q_heads)
        bad = "an mla layer's ragged form has as many KV heads as query heads (decompressed "
              "K/V per head)";
    else if (p->use_mla && r->qk_head_size <= p->qk_head_size - p->v_head_size)
        bad = "its qk_head_size does not exceed the layer's qk_rope_head_dim";
    else if (!r->qk_head_size || !r->v_head_size || r->qk_head_size > 4096 || r->v_head_size > 4096)
        bad = "its head sizes are outside 1..4096";
    else if (r->q_dtype != p->q_dtype || r->kv_dtype != p->q_dtype)
        bad = "its dtype or kv_dtype is not the layer's dtype";
    else if (r->sliding_window != p->sliding_window || r->softcap != p->softcap ||
             r->use_sinks != p->use_sinks || r->use_alibi != p->use_alibi ||
             ah_spec_causal(r) != ah_spec_causal(p))
        bad = "its window, soft-cap, sinks, ALiBi or causal flag differs from the layer's";
    else if (r->scale !=
             (p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)p->qk_head_size))))
        bad = "its scale differs from the layer's (both forms compute one softmax)";
    if (!bad) return AH_OK;
    snprintf(msg, cap, "ragged prefill form (qk %u / v %u, %u/%u heads): %s", r->qk_head_size,
             r->v_head_size, r->num_q_heads, r->num_kv_heads, bad);
    return AH_ERR_CONFIG;
}

/* Small enough for a 2-core CPU to run in seconds with short sequences, and
 * varied enough to need more than one kind of kernel: global and windowed
 * GQA layers and absorbed-MLA layers. */
static const char demo_model[] =
    "# attnhost demo model: global, sliding-window and MLA layers\n"
    "[model]\n"
    "name = demo-mixed\n"
    "num_layers = 6\n"
    "num_q_heads = 32\n"
    "num_kv_heads = 8\n"
    "head_size = 128\n"
    "dtype = bf16\n"
    "block_size = 16\n"
    "\n"
    "# Layers 1 and 3 see the last 1024 tokens; 0 and 2 are global.\n"
    "[layers.1-3/2]\n"
    "sliding_window = 1024\n"
    "\n"
    "# The last two layers use DeepSeek-style MLA (qk 576, v 512, one KV head).\n"
    "[layers.4-5]\n"
    "mla = true\n"
    "num_q_heads = 16\n";

const char *ah_demo_model_text(void) { return demo_model; }

/* ---------------------------------------------------------------------------
 * Documentation
 * ------------------------------------------------------------------------ */

ah_status ah__model_keys_dump(char **text)
{
    ah_strbuf b = {0};
    *text = NULL;
    ah__strbuf_printf(
        &b,
        "# attnhost model description: every key, its documentation and its "
        "default.\n# Keys are shown commented out, with their default where they have one.\n\n[model]\n\n");
    for (int k = 0; k < N_MKEYS; k++) {
        const ah_key_def *d = &model_keys[k];
        char type[300];
        if (k == AH_MK_kind) {
            ah__strbuf_comment(&b, "Every key below may also appear in [layers.<range>] "
                                   "sections; in [model] it is the default for every layer.");
            ah__strbuf_printf(&b, "\n");
        }
        ah__key_describe(d, type, sizeof type);
        ah__strbuf_comment(&b, d->doc);
        ah__strbuf_printf(&b, "# Value: %s. Default: %s.\n", type, d->def ? d->def : "not set");
        /* Commented out even with a default: per-layer keys set in [model]
         * count as set there (see mla), so a copy of this text must not set
         * them all. */
        ah__strbuf_printf(&b, "#%s =%s%s\n\n", d->name, d->def ? " " : "", d->def ? d->def : "");
    }
    ah__strbuf_comment(&b, "[layers.<range>] sections set per-layer keys for the layers in "
                           "<range> (a layer '7', a range '0-31', a stepped range '1-47/2', an "
                           "open range '8-*', '*', or a comma-separated list of these). They "
                           "apply after [model], in file order: a later section wins where "
                           "ranges overlap. For example, every second layer with a window:");
    ah__strbuf_printf(&b, "#[layers.1-47/2]\n#sliding_window = 4096\n");
    *text = ah__strbuf_take(&b);
    return *text ? AH_OK : AH_ERR_OUT_OF_MEMORY;
}
