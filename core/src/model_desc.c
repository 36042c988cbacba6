/*
 * Models without INI text: a layer's kind, ah_model_create (per-layer specs
 * from C, checked by ah__model_layer_check like every parsed layer) and
 * ah_model_to_ini (a model written back as a description that parses to
 * the same model, which it checks before handing the text out).
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "model.h"
#include "strbuf.h"

#include <attnhost/plugin_util.h>

ah_layer_kind ah_model_layer_kind(const ah_model *m, uint32_t layer)
{
    return m && layer < m->num_layers ? m->kinds[layer] : AH_LAYER_KIND_COUNT;
}

/* ---------------------------------------------------------------------------
 * ah_model_create
 * ------------------------------------------------------------------------ */

static ah_status desc_fail(ah_error *err, ah_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ah_status desc_fail(ah_error *err, ah_status s, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return s;
}

/* The spec as given with the "not set" zeros filled in as the INI path
 * fills keys left out. */
static void fill_defaults(ah_layer_spec *s)
{
    if (s->use_mla) {
        if (!s->qk_head_size && !s->v_head_size) {
            s->qk_head_size = 576;
            s->v_head_size = 512;
        }
        if (!s->num_kv_heads) s->num_kv_heads = 1;
    } else if (!s->num_kv_heads) {
        s->num_kv_heads = s->num_q_heads;
    }
    if (!s->v_head_size) s->v_head_size = s->qk_head_size;
    if (s->q_dtype == AH_DTYPE_AUTO) s->q_dtype = AH_DTYPE_BF16;
    if (!s->block_size) s->block_size = 16; /* AH_BLOCK_SIZE_AUTO stays */
}

/* Layer i's ragged prefill form as given (struct_size 0: none), scale 0
 * filled with the paged form's resolved scale, checked against it. */
static ah_status take_ragged(const ah_layer_spec *in, const ah_layer_spec *paged,
                             ah_layer_spec *out, const char *source, uint32_t i, ah_error *err)
{
    if (!in->struct_size) return AH_OK;
    if (in->struct_size < offsetof(ah_layer_spec, ragged_kv) + sizeof in->ragged_kv)
        return desc_fail(err, AH_ERR_ABI,
                         "%s: layer %u: ragged_forms[%u].struct_size %u predates ragged_kv", source,
                         i, i, in->struct_size);
    *out = *in;
    out->struct_size = sizeof *out;
    if (out->scale == 0.0f)
        out->scale =
            paged->scale != 0.0f ? paged->scale : (float)(1.0 / sqrt((double)paged->qk_head_size));
    char msg[512];
    if (ah__model_ragged_check(paged, out, msg, sizeof msg) != AH_OK)
        return desc_fail(err, AH_ERR_CONFIG, "%s: layer %u: %s", source, i, msg);
    return AH_OK;
}

ah_status ah__model_create(const ah_model_desc *d, const char *source, ah_model **out,
                           ah_error *err)
{
    if (!out) return desc_fail(err, AH_ERR_INVALID_ARGUMENT, "ah_model_create: out is NULL");
    *out = NULL;
    if (!d) return desc_fail(err, AH_ERR_INVALID_ARGUMENT, "ah_model_create: no model description");
    const size_t min_size = offsetof(ah_model_desc, kinds) + sizeof d->kinds;
    if (d->struct_size < min_size)
        return desc_fail(err, AH_ERR_ABI, "ah_model_desc.struct_size %u is too small (%zu)",
                         d->struct_size, min_size);
    const ah_layer_spec *ragged_in =
        AH_HAS_FIELD(d, ah_model_desc, ragged_forms) ? d->ragged_forms : NULL;
    /* unset as the INI path says it; every other problem by the one rule */
    if (!d->name)
        return desc_fail(err, AH_ERR_CONFIG, "%s: name: not set (required)",
                         source ? source : "<model>");
    const char *bad = ah__model_name_problem(d->name);
    if (bad) return desc_fail(err, AH_ERR_CONFIG, "%s: name: %s", source ? source : "<model>", bad);
    if (!source) source = d->name;
    if (d->num_layers < 1 || d->num_layers > 16384)
        return desc_fail(err, AH_ERR_CONFIG, "%s: num_layers = %u is out of range 1..16384", source,
                         d->num_layers);
    ah_model *m = ah__calloc(1, sizeof *m);
    if (m) {
        m->layers = ah__calloc(d->num_layers, sizeof *m->layers);
        m->kinds = ah__calloc(d->num_layers, sizeof *m->kinds);
        m->ragged = ah__calloc(d->num_layers, sizeof *m->ragged);
        m->name = ah__strdup(d->name);
    }
    if (!m || !m->layers || !m->kinds || !m->ragged || !m->name) {
        ah_model_destroy(m);
        return desc_fail(err, AH_ERR_OUT_OF_MEMORY, "%s: out of memory", source);
    }
    m->num_layers = d->num_layers;
    for (uint32_t i = 0; i < d->num_layers; i++) {
        ah_layer_kind kind = d->kinds ? d->kinds[i] : AH_LAYER_ATTENTION;
        ah_layer_spec *s = &m->layers[i];
        s->struct_size = sizeof *s;
        m->kinds[i] = kind;
        ah_status st = AH_OK;
        if (kind == AH_LAYER_ATTENTION) {
            const ah_layer_spec *in = d->layers ? &d->layers[i] : NULL;
            if (!in)
                st = desc_fail(err, AH_ERR_INVALID_ARGUMENT,
                               "%s: layer %u: an attention layer, but ah_model_desc.layers is NULL",
                               source, i);
            else if (in->struct_size < offsetof(ah_layer_spec, fp8_attention))
                st = desc_fail(err, AH_ERR_ABI,
                               "%s: layer %u: ah_layer_spec.struct_size %u is too small", source, i,
                               in->struct_size);
            else {
                memcpy(s, in, in->struct_size < sizeof *s ? in->struct_size : sizeof *s);
                s->struct_size = sizeof *s;
                fill_defaults(s);
            }
        }
        char msg[512];
        int keys[2];
        if (st == AH_OK && ah__model_layer_check(s, kind, msg, sizeof msg, keys) != AH_OK)
            st = desc_fail(err, AH_ERR_CONFIG, "%s: layer %u: %s", source, i, msg);
        if (st == AH_OK && kind == AH_LAYER_ATTENTION && ragged_in)
            st = take_ragged(&ragged_in[i], s, &m->ragged[i], source, i, err);
        if (st != AH_OK) {
            ah_model_destroy(m);
            return st;
        }
        if (kind != AH_LAYER_ATTENTION) {
            memset(s, 0, sizeof *s);
            s->struct_size = sizeof *s;
        }
    }
    char msg[512];
    if (ah__model_groups_check(m, msg, sizeof msg) != AH_OK) {
        ah_model_destroy(m);
        return desc_fail(err, AH_ERR_CONFIG, "%s: %s", source, msg);
    }
    *out = m;
    return AH_OK;
}

ah_status ah_model_create(const ah_model_desc *desc, ah_model **out, ah_error *err)
{
    return ah__model_create(desc, NULL, out, err);
}

/* ---------------------------------------------------------------------------
 * ah_model_to_ini
 * ------------------------------------------------------------------------ */

/* The per-layer keys a layer's description has, as text: NULL where the
 * key does not apply (head sizes and num_kv_heads of an MLA layer, the
 * ranks of another) and, in the default column, where the table has no
 * default. Head sizes are one entry, "head_size = X" or the pair. */
enum {
    V_ATTN,
    V_CAUSAL,
    V_QH,
    V_KVH,
    V_HS,
    V_DTYPE,
    V_KVDTYPE,
    V_BLOCK,
    V_LAYOUT,
    V_GROUP,
    V_WINDOW,
    V_SOFTCAP,
    V_SCALE,
    V_SINKS,
    V_ALIBI,
    V_FP8,
    V_KVSCALES,
    V_QSCALE,
    V_MLA,
    V_RANK,
    V_ROPE,
    V_RAGGED,
    V_COUNT
};

typedef struct layer_text {
    char v[V_COUNT][96];
    int set[V_COUNT];
} layer_text;

static const char *tf(uint32_t b) { return b ? "true" : "false"; }

static void layer_render(const ah_layer_spec *s, const ah_layer_spec *ragged, layer_text *t)
{
    memset(t, 0, sizeof *t);
#define PUT(i, ...) (snprintf(t->v[i], sizeof t->v[i], __VA_ARGS__), t->set[i] = 1)
    PUT(V_ATTN, "attn_type = %s", ah_attn_type_str(s->attn_type));
    if (s->causal != AH_CAUSAL_BY_TYPE) PUT(V_CAUSAL, "causal = %s", tf(s->causal == AH_CAUSAL_ON));
    PUT(V_QH, "num_q_heads = %u", s->num_q_heads);
    if (s->use_mla) {
        PUT(V_RANK, "kv_lora_rank = %u", s->v_head_size);
        PUT(V_ROPE, "qk_rope_head_dim = %u", s->qk_head_size - s->v_head_size);
    } else {
        PUT(V_KVH, "num_kv_heads = %u", s->num_kv_heads);
        if (s->qk_head_size == s->v_head_size) PUT(V_HS, "head_size = %u", s->qk_head_size);
        else PUT(V_HS, "qk_head_size = %u\nv_head_size = %u", s->qk_head_size, s->v_head_size);
    }
    PUT(V_DTYPE, "dtype = %s", ah_dtype_name(s->q_dtype));
    PUT(V_KVDTYPE, "kv_dtype = %s", ah_dtype_name(s->kv_dtype));
    if (s->block_size == AH_BLOCK_SIZE_AUTO) PUT(V_BLOCK, "block_size = auto");
    else PUT(V_BLOCK, "block_size = %u", s->block_size);
    PUT(V_LAYOUT, "kv_layout = %s", ah_kv_layout_str(s->kv_layout));
    PUT(V_GROUP, "kv_group = %u", s->kv_group);
    PUT(V_WINDOW, "sliding_window = %u", s->sliding_window);
    PUT(V_SOFTCAP, "softcap = %.9g", (double)s->softcap);
    PUT(V_SCALE, "scale = %.9g", (double)s->scale);
    PUT(V_SINKS, "sinks = %s", tf(s->use_sinks));
    PUT(V_ALIBI, "alibi = %s", tf(s->use_alibi));
    PUT(V_FP8, "fp8_attention = %s", tf(s->fp8_attention));
    PUT(V_KVSCALES, "kv_scales = %s", ah_kv_scales_str(ah_spec_kv_scales(s)));
    PUT(V_QSCALE, "q_scale = %s", tf((uint32_t)ah_spec_q_scale(s)));
    PUT(V_MLA, "mla = %s", tf(s->use_mla));
    if (!ragged->struct_size) PUT(V_RAGGED, "ragged_prefill = false");
    else if (!s->use_mla) PUT(V_RAGGED, "ragged_prefill = true");
    else
        PUT(V_RAGGED, "ragged_prefill = true\nqk_nope_head_dim = %u\nv_head_dim = %u",
            ragged->qk_head_size - (s->qk_head_size - s->v_head_size), ragged->v_head_size);
#undef PUT
}

/* The table's defaults in the same form (model_keys.def). */
static void defaults_render(layer_text *t)
{
    static const char *const def[V_COUNT] = {[V_ATTN] = "attn_type = decoder",
                                             [V_DTYPE] = "dtype = bf16",
                                             [V_KVDTYPE] = "kv_dtype = auto",
                                             [V_BLOCK] = "block_size = 16",
                                             [V_LAYOUT] = "kv_layout = auto",
                                             [V_GROUP] = "kv_group = 0",
                                             [V_WINDOW] = "sliding_window = 0",
                                             [V_SOFTCAP] = "softcap = 0",
                                             [V_SCALE] = "scale = 0",
                                             [V_SINKS] = "sinks = false",
                                             [V_ALIBI] = "alibi = false",
                                             [V_FP8] = "fp8_attention = false",
                                             [V_KVSCALES] = "kv_scales = host",
                                             [V_QSCALE] = "q_scale = false",
                                             [V_MLA] = "mla = false",
                                             [V_RANK] = "kv_lora_rank = 512",
                                             [V_ROPE] = "qk_rope_head_dim = 64",
                                             [V_RAGGED] = "ragged_prefill = false"};
    memset(t, 0, sizeof *t);
    for (int i = 0; i < V_COUNT; i++)
        if (def[i]) {
            snprintf(t->v[i], sizeof t->v[i], "%s", def[i]);
            t->set[i] = 1;
        }
}

/* The lines of layer text l that differ from what base gives. */
static void diff_lines(ah_strbuf *b, const layer_text *l, const layer_text *base)
{
    for (int i = 0; i < V_COUNT; i++)
        if (l->set[i] && (!base->set[i] || strcmp(l->v[i], base->v[i])))
            ah__strbuf_printf(b, "%s\n", l->v[i]);
}

/* "0-31", "1-47/2", "3", joined by commas, for sorted layers. */
static void range_text(ah_strbuf *b, const uint32_t *a, uint32_t n)
{
    for (uint32_t i = 0; i < n;) {
        uint32_t j = i;
        if (i + 1 < n) {
            uint32_t step = a[i + 1] - a[i];
            j = i + 1;
            while (j + 1 < n && a[j + 1] - a[j] == step) j++;
            if (!(j - i + 1 >= 3 || step == 1)) j = i;
            if (j > i) {
                ah__strbuf_printf(b, "%s%u-%u", i ? "," : "", a[i], a[j]);
                if (step > 1) ah__strbuf_printf(b, "/%u", step);
                i = j + 1;
                continue;
            }
        }
        ah__strbuf_printf(b, "%s%u", i ? "," : "", a[i]);
        i++;
    }
}

/* 0 when text parses to m: its name, layer kinds, specs and ragged prefill
 * forms; else -1 with what differs in why. */
static int reads_back(const ah_model *m, const char *text, char *why, size_t cap)
{
    ah_model *back = NULL;
    ah_error err;
    memset(&err, 0, sizeof err);
    int bad = 1;
    if (ah_model_parse(text, "<to_ini>", &back, &err) != AH_OK)
        snprintf(why, cap, "the description does not parse: %s", err.msg);
    else if (strcmp(back->name, m->name))
        snprintf(why, cap, "name '%s' reads back as '%s'", m->name, back->name);
    else if (back->num_layers != m->num_layers)
        snprintf(why, cap, "%u layers read back as %u", m->num_layers, back->num_layers);
    else bad = 0;
    for (uint32_t i = 0; !bad && i < m->num_layers; i++) {
        const char *what = back->kinds[i] != m->kinds[i]                                  ? "kind"
                           : memcmp(&back->layers[i], &m->layers[i], sizeof m->layers[i]) ? "spec"
                           : memcmp(&back->ragged[i], &m->ragged[i], sizeof m->ragged[i])
                               ? "ragged prefill form"
                               : NULL;
        if (what) {
            snprintf(why, cap, "layer %u's %s reads back different", i, what);
            bad = 1;
        }
    }
    ah_model_destroy(back);
    return bad ? -1 : 0;
}

ah_status ah_model_to_ini(const ah_model *m, char **text)
{
    return ah__model_to_ini(m, text, NULL, 0);
}

ah_status ah__model_to_ini(const ah_model *m, char **text, char *why, size_t cap)
{
    if (!text) return AH_ERR_INVALID_ARGUMENT;
    *text = NULL;
    if (!m || strpbrk(m->name, ";#")) return AH_ERR_INVALID_ARGUMENT;
    const uint32_t n = m->num_layers;
    layer_text *lt = ah__calloc(n, sizeof *lt);
    char **body = ah__calloc(n, sizeof *body);
    uint32_t *idx = ah__calloc(n, sizeof *idx);
    uint8_t *done = ah__calloc(n, 1);
    ah_strbuf b = {0};
    ah_status st = AH_ERR_OUT_OF_MEMORY;
    if (!lt || !body || !idx || !done) goto out;

    /* the model's kind: the most common one (attention on a tie) */
    uint32_t count[AH_LAYER_KIND_COUNT] = {0};
    for (uint32_t i = 0; i < n; i++) count[m->kinds[i]]++;
    ah_layer_kind mkind = AH_LAYER_ATTENTION;
    for (int k = 1; k < AH_LAYER_KIND_COUNT; k++)
        if (count[k] > count[mkind]) mkind = (ah_layer_kind)k;
    /* the base: the most common attention layer */
    for (uint32_t i = 0; i < n; i++)
        if (m->kinds[i] == AH_LAYER_ATTENTION) layer_render(&m->layers[i], &m->ragged[i], &lt[i]);
    int64_t base = -1;
    uint32_t best = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (m->kinds[i] != AH_LAYER_ATTENTION) continue;
        int seen = 0; /* counted with an earlier identical layer */
        for (uint32_t j = 0; j < i && !seen; j++)
            seen = m->kinds[j] == AH_LAYER_ATTENTION &&
                   !memcmp(&m->layers[i], &m->layers[j], sizeof m->layers[i]);
        if (seen) continue;
        uint32_t same = 0;
        for (uint32_t j = i; j < n; j++)
            same += m->kinds[j] == AH_LAYER_ATTENTION &&
                    !memcmp(&m->layers[i], &m->layers[j], sizeof m->layers[i]);
        if (same > best) {
            best = same;
            base = i;
        }
    }
    layer_text eff; /* what [model] gives every attention layer */
    defaults_render(&eff);
    ah__strbuf_printf(&b, "[model]\nname = %s\nnum_layers = %u\n", m->name, n);
    if (mkind != AH_LAYER_ATTENTION) ah__strbuf_printf(&b, "kind = %s\n", ah_layer_kind_str(mkind));
    if (base >= 0) {
        diff_lines(&b, &lt[base], &eff);
        for (int i = 0; i < V_COUNT; i++)
            if (lt[base].set[i]) {
                memcpy(eff.v[i], lt[base].v[i], sizeof eff.v[i]);
                eff.set[i] = 1;
            }
    }
    /* each layer's section body: what differs from [model] */
    for (uint32_t i = 0; i < n; i++) {
        ah_strbuf lb = {0};
        if (m->kinds[i] != mkind)
            ah__strbuf_printf(&lb, "kind = %s\n", ah_layer_kind_str(m->kinds[i]));
        if (m->kinds[i] == AH_LAYER_ATTENTION) diff_lines(&lb, &lt[i], &eff);
        if (!(body[i] = ah__strbuf_take(&lb))) goto out;
    }
    /* layers with the same body share a section, in order of first layer */
    for (uint32_t i = 0; i < n; i++) {
        if (done[i] || !*body[i]) continue;
        uint32_t k = 0;
        for (uint32_t j = i; j < n; j++)
            if (!done[j] && !strcmp(body[i], body[j])) {
                idx[k++] = j;
                done[j] = 1;
            }
        ah__strbuf_printf(&b, "\n[layers.");
        range_text(&b, idx, k);
        ah__strbuf_printf(&b, "]\n%s", body[i]);
    }
    if ((*text = ah__strbuf_take(&b))) st = AH_OK;
    /* nothing is handed out that would read back as another model */
    if (st == AH_OK && reads_back(m, *text, why, cap)) {
        ah__free(*text);
        *text = NULL;
        st = AH_ERR_INTERNAL;
    }
out:
    for (uint32_t i = 0; body && i < n; i++) ah__free(body[i]);
    ah__free(b.data);
    ah__free(lt);
    ah__free(body);
    ah__free(idx);
    ah__free(done);
    return st;
}
