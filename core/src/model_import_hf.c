/*
 * Hugging Face config.json import: the attention layers (and, for hybrid
 * models, the other layers' kinds) a transformers config describes, as an
 * ah_model built by ah__model_create, so every layer passes the same check
 * as a model description's.
 *
 * Rules (docs/configuration.md, "Importing a Hugging Face config.json"):
 *  - model_type picks the family; an unknown one is refused.
 *  - Head sizes: head_dim, else hidden_size / num_attention_heads.
 *  - A field that changes attention and that the family's mapping does not
 *    use (ATTENTION_KEYS below) is refused, naming it: a guess would bind
 *    kernels that compute something else.
 *  - A missing required field, a value of the wrong type, a contradiction
 *    (heads not divisible) or an unknown layer_types entry is refused,
 *    naming the field and its value.
 *  - KV-cache groups (kv_groups = HYBRID): one group per class of cache
 *    layers, numbered in the order of their first layer (assign_groups).
 * Built only with json-c; without it the entry points say so.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "model.h"

#ifdef ATTNHOST_HAVE_JSONC
#include <json-c/json.h>

/* Fields that change what attention computes. A family lists those its
 * mapping reads; any other one set (not null, false, 0, "absolute", or a
 * layer_types of full attention only) is an error. */
static const char *const ATTENTION_KEYS[] = {"sliding_window",
                                             "use_sliding_window",
                                             "max_window_layers",
                                             "layer_types",
                                             "attn_logit_softcapping",
                                             "query_pre_attn_scalar",
                                             "sliding_window_pattern",
                                             "attention_chunk_size",
                                             "no_rope_layers",
                                             "attn_temperature_tuning",
                                             "alibi",
                                             "use_alibi",
                                             "position_embedding_type",
                                             "kv_lora_rank",
                                             "attn_layer_period",
                                             "attn_layer_offset",
                                             "full_attention_interval",
                                             "attention_multiplier",
                                             "attn_soft_cap",
                                             "logit_softcapping",
                                             NULL};

typedef struct hf {
    const char *source;
    json_object *root, *cfg; /* cfg: the text model's config (text_config or root) */
    const char *pre;         /* "text_config." when cfg is not root, else "" */
    const char *model_type;
    const ah_hf_import_options *o;
    ah_error *err;
    /* the model being built */
    uint32_t n;
    ah_layer_spec *specs;
    ah_layer_kind *kinds;
    uint8_t *chunked;      /* Llama 4: the layers of chunked local attention (NULL: none) */
    ah_layer_spec *ragged; /* per layer, its ragged prefill form (NULL: none) */
} hf;

static ah_status fail(hf *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ah_status fail(hf *h, const char *fmt, ...)
{
    if (h->err) {
        int n = snprintf(h->err->msg, sizeof h->err->msg, "%s: ", h->source);
        va_list ap;
        va_start(ap, fmt);
        if (n > 0 && (size_t)n < sizeof h->err->msg)
            vsnprintf(h->err->msg + n, sizeof h->err->msg - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return AH_ERR_CONFIG;
}

/* The value as JSON text, for messages. */
static const char *jtext(json_object *v)
{
    return v ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN) : "null";
}

/* The field of the text config, or NULL when absent or null. */
static json_object *field(const hf *h, const char *key)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(h->cfg, key, &v) || json_object_is_type(v, json_type_null))
        return NULL;
    return v;
}

enum { OPTIONAL = 0, REQUIRED = 1 };

/* What an absent field means: fine (the caller took its default) when
 * OPTIONAL, an error when REQUIRED. */
static ah_status absent(hf *h, const char *key, int required)
{
    if (!required) return AH_OK;
    return fail(h, "%s%s: not set (required for model_type %s)", h->pre, key, h->model_type);
}

/* A whole number field into *out; absent: def (OPTIONAL) or an error. */
static ah_status get_uint(hf *h, const char *key, int required, uint32_t def, uint32_t *out)
{
    json_object *v = field(h, key);
    if (!v) {
        *out = def;
        return absent(h, key, required);
    }
    double d;
    if (json_object_is_type(v, json_type_int)) d = (double)json_object_get_int64(v);
    else if (json_object_is_type(v, json_type_double)) d = json_object_get_double(v);
    else return fail(h, "%s%s = %s: not a whole number", h->pre, key, jtext(v));
    if (d < 0 || d > 4294967295.0 || d != floor(d))
        return fail(h, "%s%s = %s: not a whole number of 0 or more", h->pre, key, jtext(v));
    *out = (uint32_t)d;
    return AH_OK;
}

static ah_status get_double(hf *h, const char *key, int required, double def, double *out)
{
    json_object *v = field(h, key);
    if (!v) {
        *out = def;
        return absent(h, key, required);
    }
    if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
        return fail(h, "%s%s = %s: not a number", h->pre, key, jtext(v));
    *out = json_object_get_double(v);
    if (!isfinite(*out) || *out < 0)
        return fail(h, "%s%s = %s: not a finite number of 0 or more", h->pre, key, jtext(v));
    return AH_OK;
}

/* A required whole-number field and where it goes. */
typedef struct uint_field {
    const char *key;
    uint32_t *out;
} uint_field;

/* Each of n required whole-number fields, in turn; the first that is
 * missing or bad is the error. */
static ah_status get_uints(hf *h, const uint_field *f, size_t n)
{
    ah_status s = AH_OK;
    for (size_t i = 0; i < n && !s; i++) s = get_uint(h, f[i].key, REQUIRED, 0, f[i].out);
    return s;
}
#define GET_UINTS(h, ...) \
    get_uints((h), (const uint_field[]){__VA_ARGS__}, \
              sizeof((const uint_field[]){__VA_ARGS__}) / sizeof(uint_field))

static ah_status get_bool(hf *h, const char *key, int def, int *out)
{
    json_object *v = field(h, key);
    if (!v) {
        *out = def;
        return AH_OK;
    }
    if (!json_object_is_type(v, json_type_boolean))
        return fail(h, "%s%s = %s: not true or false", h->pre, key, jtext(v));
    *out = json_object_get_boolean(v);
    return AH_OK;
}

/* Is the field set to something that changes attention? */
static int truthy(json_object *v)
{
    if (!v) return 0;
    switch (json_object_get_type(v)) {
    case json_type_null: return 0;
    case json_type_boolean: return json_object_get_boolean(v);
    case json_type_int: return json_object_get_int64(v) != 0;
    case json_type_double: return json_object_get_double(v) != 0;
    case json_type_string:
        return *json_object_get_string(v) && strcmp(json_object_get_string(v), "absolute");
    case json_type_array: {
        size_t n = json_object_array_length(v);
        for (size_t i = 0; i < n; i++) {
            json_object *e = json_object_array_get_idx(v, i);
            if (!json_object_is_type(e, json_type_string) ||
                strcmp(json_object_get_string(e), "full_attention"))
                return 1;
        }
        return 0;
    }
    default: return 1;
    }
}

/* ---------------------------------------------------------------------------
 * Pieces the families share
 * ------------------------------------------------------------------------ */

static ah_status alloc_layers(hf *h, uint32_t n)
{
    if (n < 1 || n > 16384)
        return fail(h, "%snum_hidden_layers = %u: out of range 1..16384", h->pre, n);
    h->n = n;
    h->specs = ah__calloc(n, sizeof *h->specs);
    h->kinds = ah__calloc(n, sizeof *h->kinds);
    if (!h->specs || !h->kinds) {
        if (h->err) snprintf(h->err->msg, sizeof h->err->msg, "%s: out of memory", h->source);
        return AH_ERR_OUT_OF_MEMORY;
    }
    return AH_OK;
}

/* Query and KV heads of one tensor-parallel rank. */
static ah_status tp_heads(hf *h, const char *qkey, uint32_t q, const char *kvkey, uint32_t kv,
                          uint32_t *q_out, uint32_t *kv_out)
{
    uint32_t tp = h->o->tensor_parallel > 1 ? h->o->tensor_parallel : 1;
    if (q % tp)
        return fail(h, "%s%s = %u is not a multiple of tensor_parallel = %u", h->pre, qkey, q, tp);
    *q_out = q / tp;
    if (!kvkey) return AH_OK;
    if (kv >= tp ? kv % tp : tp % kv)
        return fail(h, "%s%s = %u: tensor_parallel = %u neither divides it nor is a multiple of it",
                    h->pre, kvkey, kv, tp);
    *kv_out = kv >= tp ? kv / tp : 1; /* fewer KV heads than ranks: each rank holds a replica */
    return AH_OK;
}

/* A decoder layer of q query heads over kv KV heads of head size hd, with
 * the import's dtypes and block size. */
static ah_layer_spec base_spec(const hf *h, ah_dtype dtype, ah_attn_type type, uint32_t q,
                               uint32_t kv, uint32_t hd)
{
    ah_layer_spec s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.attn_type = type;
    s.num_q_heads = q;
    s.num_kv_heads = kv;
    s.qk_head_size = s.v_head_size = hd;
    s.q_dtype = dtype;
    s.kv_dtype = h->o->kv_dtype;
    s.block_size = h->o->block_size ? h->o->block_size : 16;
    return s;
}

static ah_status get_dtype(hf *h, ah_dtype *out)
{
    if (h->o->dtype != AH_DTYPE_AUTO) {
        *out = h->o->dtype;
        return AH_OK;
    }
    const char *key = "torch_dtype";
    json_object *v = NULL;
    hf top = *h;
    top.cfg = h->root; /* the dtype of the checkpoint: the top level first */
    top.pre = "";
    if (!(v = field(&top, "torch_dtype")) && !(v = field(&top, key = "dtype")) &&
        !(v = field(h, key = "torch_dtype")) && !(v = field(h, key = "dtype"))) {
        *out = AH_DTYPE_FP32; /* what transformers loads a config without one as */
        return AH_OK;
    }
    const char *t = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
    if (!strcmp(t, "bfloat16") || !strcmp(t, "bf16")) *out = AH_DTYPE_BF16;
    else if (!strcmp(t, "float16") || !strcmp(t, "fp16") || !strcmp(t, "half"))
        *out = AH_DTYPE_FP16;
    else if (!strcmp(t, "float32") || !strcmp(t, "fp32") || !strcmp(t, "float"))
        *out = AH_DTYPE_FP32;
    else
        return fail(h,
                    "%s = %s: not a dtype the importer knows (bfloat16, float16, float32); "
                    "give one (--dtype)",
                    key, jtext(v));
    return AH_OK;
}

/* head_dim, else hidden_size / num_attention_heads. */
static ah_status head_dim(hf *h, const char *heads_key, uint32_t heads, const char *hidden_key,
                          uint32_t *hd)
{
    json_object *v = field(h, "head_dim");
    if (v) {
        ah_status s = get_uint(h, "head_dim", REQUIRED, 0, hd);
        if (s == AH_OK && !*hd) return fail(h, "%shead_dim = 0: not a head size", h->pre);
        return s;
    }
    uint32_t hidden;
    ah_status s = get_uint(h, hidden_key, REQUIRED, 0, &hidden);
    if (s != AH_OK) return s;
    if (!heads || hidden % heads)
        return fail(h, "%s%s = %u is not a multiple of %s = %u (and head_dim is not set)", h->pre,
                    hidden_key, hidden, heads_key, heads);
    *hd = hidden / heads;
    return AH_OK;
}

/* The usual decoder: num_hidden_layers layers of num_attention_heads over
 * num_key_value_heads (default: as many) heads of head_dim. */
static ah_status decoder_layers(hf *h, ah_layer_spec *proto)
{
    uint32_t n = 0, q = 0, kv = 0, hd = 0, qr = 0, kvr = 0;
    ah_dtype dt;
    ah_status s;
    if ((s = GET_UINTS(h, {"num_hidden_layers", &n}, {"num_attention_heads", &q}))) return s;
    if (!q) return fail(h, "%snum_attention_heads = 0: a layer needs heads", h->pre);
    if ((s = get_uint(h, "num_key_value_heads", OPTIONAL, q, &kv))) return s;
    if (!kv || q % kv)
        return fail(h, "%snum_attention_heads = %u is not a multiple of %snum_key_value_heads = %u",
                    h->pre, q, h->pre, kv);
    if ((s = head_dim(h, "num_attention_heads", q, "hidden_size", &hd)) ||
        (s = get_dtype(h, &dt)) ||
        (s = tp_heads(h, "num_attention_heads", q, "num_key_value_heads", kv, &qr, &kvr)) ||
        (s = alloc_layers(h, n)))
        return s;
    *proto = base_spec(h, dt, AH_ATTN_DECODER, qr, kvr, hd);
    for (uint32_t i = 0; i < n; i++) h->specs[i] = *proto;
    return AH_OK;
}

/* Window patterns of the families, when the config has no layer_types. */
enum { WIN_NONE, WIN_ALL, WIN_QWEN, WIN_EVEN, WIN_GEMMA3 };

/* What layer_types entries a family accepts beyond full/sliding. */
enum { LT_LINEAR_GDN = 1, LT_CHUNKED = 2 };

/* Windows (and, for hybrids, kinds) per layer from layer_types or the
 * family's pattern. chunked[i] (may be NULL) is set for chunked layers. */
static ah_status windows(hf *h, int pattern, int lt_extra, uint8_t *chunked)
{
    uint32_t w = 0;
    ah_status s;
    json_object *sw = field(h, "sliding_window");
    if (sw && (s = get_uint(h, "sliding_window", REQUIRED, 0, &w))) return s;
    json_object *lt = field(h, "layer_types");
    if (lt) {
        if (!json_object_is_type(lt, json_type_array))
            return fail(h, "%slayer_types = %s: not a list", h->pre, jtext(lt));
        if (json_object_array_length(lt) != h->n)
            return fail(h, "%slayer_types has %zu entries, %snum_hidden_layers = %u", h->pre,
                        json_object_array_length(lt), h->pre, h->n);
        for (uint32_t i = 0; i < h->n; i++) {
            json_object *e = json_object_array_get_idx(lt, i);
            const char *t =
                json_object_is_type(e, json_type_string) ? json_object_get_string(e) : "";
            if (!strcmp(t, "full_attention")) continue;
            if (!strcmp(t, "sliding_attention")) {
                if (!w)
                    return fail(
                        h,
                        "%slayer_types[%u] = \"sliding_attention\" but %ssliding_window is not set",
                        h->pre, i, h->pre);
                h->specs[i].sliding_window = w;
            } else if (!strcmp(t, "linear_attention") && (lt_extra & LT_LINEAR_GDN)) {
                h->kinds[i] = AH_LAYER_GDN;
            } else if (!strcmp(t, "chunked_attention") && (lt_extra & LT_CHUNKED) && chunked) {
                chunked[i] = 1;
            } else {
                return fail(h,
                            "%slayer_types[%u] = %s: not a layer type the importer knows for "
                            "model_type %s (full_attention, sliding_attention%s%s)",
                            h->pre, i, jtext(e), h->model_type,
                            lt_extra & LT_LINEAR_GDN ? ", linear_attention" : "",
                            lt_extra & LT_CHUNKED ? ", chunked_attention" : "");
            }
        }
        return AH_OK;
    }
    if (pattern == WIN_QWEN) {
        int use = 0;
        uint32_t from;
        if ((s = get_bool(h, "use_sliding_window", 0, &use))) return s;
        if (!use || !w) return AH_OK;
        if ((s = get_uint(h, "max_window_layers", REQUIRED, 0, &from))) return s;
        for (uint32_t i = from; i < h->n; i++) h->specs[i].sliding_window = w;
        return AH_OK;
    }
    if (pattern == WIN_GEMMA3) {
        uint32_t p;
        if ((s = get_uint(h, "sliding_window_pattern", OPTIONAL, 6, &p))) return s;
        if (!p) return fail(h, "%ssliding_window_pattern = 0: not a pattern", h->pre);
        if (!w) w = 4096; /* Gemma3TextConfig's default */
        for (uint32_t i = 0; i < h->n; i++)
            if ((i + 1) % p) h->specs[i].sliding_window = w;
        return AH_OK;
    }
    for (uint32_t i = 0; w && pattern != WIN_NONE && i < h->n; i++)
        if (pattern == WIN_ALL || (pattern == WIN_EVEN && i % 2 == 0))
            h->specs[i].sliding_window = w;
    return AH_OK;
}

/* ---------------------------------------------------------------------------
 * Families
 * ------------------------------------------------------------------------ */

static ah_status fam_plain(hf *h, int pattern)
{
    ah_layer_spec proto;
    ah_status s = decoder_layers(h, &proto);
    return s ? s : windows(h, pattern, 0, NULL);
}
static ah_status fam_llama(hf *h) { return fam_plain(h, WIN_NONE); }
static ah_status fam_mistral(hf *h) { return fam_plain(h, WIN_ALL); }
static ah_status fam_qwen(hf *h) { return fam_plain(h, WIN_QWEN); }

/* Gemma 2 and 3: query_pre_attn_scalar^-1/2, soft-cap, alternating windows. */
static ah_status fam_gemma(hf *h, int pattern)
{
    ah_layer_spec proto;
    double qpas, cap;
    ah_status s;
    int g3 = pattern == WIN_GEMMA3;
    /* Gemma 3 multimodal configs leave the text config's defaults out */
    if (g3 && !field(h, "head_dim")) {
        json_object_object_add(h->cfg, "head_dim", json_object_new_int(256));
    }
    if ((s = decoder_layers(h, &proto)) || (s = windows(h, pattern, 0, NULL)) ||
        (s = get_double(h, "query_pre_attn_scalar", g3 ? OPTIONAL : REQUIRED, 256, &qpas)) ||
        (s = get_double(h, "attn_logit_softcapping", OPTIONAL, 0, &cap)))
        return s;
    if (qpas <= 0)
        return fail(h, "%squery_pre_attn_scalar = %g: not a positive number", h->pre, qpas);
    for (uint32_t i = 0; i < h->n; i++) {
        h->specs[i].scale = (float)(1.0 / sqrt(qpas));
        h->specs[i].softcap = (float)cap;
    }
    return AH_OK;
}
static ah_status fam_gemma2(hf *h) { return fam_gemma(h, WIN_EVEN); }
static ah_status fam_gemma3(hf *h) { return fam_gemma(h, WIN_GEMMA3); }

/* gpt-oss: learned sinks in every layer; sliding/full from layer_types,
 * else alternating from a sliding layer 0 (GptOssConfig's default). */
static ah_status fam_gpt_oss(hf *h)
{
    ah_layer_spec proto;
    ah_status s = decoder_layers(h, &proto);
    if (!s) s = windows(h, WIN_EVEN, 0, NULL);
    for (uint32_t i = 0; !s && i < h->n; i++) h->specs[i].use_sinks = 1;
    return s;
}

/* DeepSeek V2/V3: absorbed MLA. qk = kv_lora_rank + qk_rope_head_dim, v =
 * kv_lora_rank, one KV head, for decode; beside it the ragged prefill form
 * over decompressed K/V (qk = qk_nope_head_dim + qk_rope_head_dim, v =
 * v_head_dim, a KV head per query head), as vLLM's MLA prefill runs it.
 * Scale as DeepSeek computes it:
 * (qk_nope_head_dim + qk_rope_head_dim)^-1/2, times mscale^2 with YaRN's
 * mscale = 0.1 * mscale_all_dim * ln(factor) + 1 when rope_scaling sets
 * mscale_all_dim (and factor > 1). transformers 5 writes rope_scaling as
 * rope_parameters (rope_theta and rope_type beside the YaRN fields): read
 * whichever the config has. */
static ah_status fam_deepseek(hf *h)
{
    uint32_t n = 0, q = 0, qr = 0, rank = 0, rope = 0, nope = 0, vdim = 0;
    ah_dtype dt;
    ah_status s;
    if ((s = GET_UINTS(h, {"num_hidden_layers", &n}, {"num_attention_heads", &q},
                       {"kv_lora_rank", &rank}, {"qk_rope_head_dim", &rope},
                       {"qk_nope_head_dim", &nope}, {"v_head_dim", &vdim})) ||
        (s = get_dtype(h, &dt)))
        return s;
    if (!q) return fail(h, "%snum_attention_heads = 0: a layer needs heads", h->pre);
    if (!rank || !rope)
        return fail(h, "%s%s = 0: MLA needs it", h->pre,
                    rank ? "qk_rope_head_dim" : "kv_lora_rank");
    double scale = 1.0 / sqrt((double)nope + rope);
    const char *rname = field(h, "rope_scaling") ? "rope_scaling" : "rope_parameters";
    json_object *rs = field(h, rname);
    if (rs) {
        if (!json_object_is_type(rs, json_type_object))
            return fail(h, "%s%s = %s: not an object", h->pre, rname, jtext(rs));
        char pre[64];
        snprintf(pre, sizeof pre, "%s%s.", h->pre, rname);
        hf sub = *h;
        sub.cfg = rs;
        sub.pre = pre;
        double mall, factor;
        if ((s = get_double(&sub, "mscale_all_dim", OPTIONAL, 0, &mall))) return s;
        if (mall) {
            if ((s = get_double(&sub, "factor", REQUIRED, 0, &factor))) return s;
            double m = factor <= 1 ? 1.0 : 0.1 * mall * log(factor) + 1.0;
            scale *= m * m;
        }
    }
    if ((s = tp_heads(h, "num_attention_heads", q, NULL, 0, &qr, NULL)) || (s = alloc_layers(h, n)))
        return s;
    ah_layer_spec sp = base_spec(h, dt, AH_ATTN_DECODER, qr, 1, 0);
    sp.use_mla = 1;
    sp.qk_head_size = rank + rope;
    sp.v_head_size = rank;
    sp.scale = (float)scale;
    ah_layer_spec rf;
    ah__model_ragged_form(&sp, nope, vdim, &rf);
    if (nope && vdim && !(h->ragged = ah__calloc(n, sizeof *h->ragged)))
        return fail(h, "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        h->specs[i] = sp;
        if (h->ragged) h->ragged[i] = rf;
    }
    return AH_OK;
}

/* Whisper: encoder_layers bidirectional layers, then per decoder block a
 * causal self-attention layer and a cross-attention layer. */
static ah_status fam_whisper(hf *h)
{
    uint32_t ne = 0, nd = 0, he = 0, hdec = 0, d = 0, qe = 0, qd = 0;
    ah_dtype dt;
    ah_status s;
    if ((s = GET_UINTS(h, {"encoder_layers", &ne}, {"decoder_layers", &nd},
                       {"encoder_attention_heads", &he}, {"decoder_attention_heads", &hdec},
                       {"d_model", &d})) ||
        (s = get_dtype(h, &dt)))
        return s;
    if (!he || d % he)
        return fail(h, "d_model = %u is not a multiple of encoder_attention_heads = %u", d, he);
    if (!hdec || d % hdec)
        return fail(h, "d_model = %u is not a multiple of decoder_attention_heads = %u", d, hdec);
    if ((s = tp_heads(h, "encoder_attention_heads", he, NULL, 0, &qe, NULL)) ||
        (s = tp_heads(h, "decoder_attention_heads", hdec, NULL, 0, &qd, NULL)) ||
        (s = alloc_layers(h, ne + 2 * nd)))
        return s;
    for (uint32_t i = 0; i < ne; i++)
        h->specs[i] = base_spec(h, dt, AH_ATTN_ENCODER, qe, qe, d / he);
    for (uint32_t i = 0; i < nd; i++) {
        h->specs[ne + 2 * i] = base_spec(h, dt, AH_ATTN_DECODER, qd, qd, d / hdec);
        h->specs[ne + 2 * i + 1] = base_spec(h, dt, AH_ATTN_ENCODER_DECODER, qd, qd, d / hdec);
    }
    return AH_OK;
}

/* BERT-style encoders: encoder-only layers with absolute positions. */
static ah_status fam_bert(hf *h)
{
    json_object *pe = field(h, "position_embedding_type");
    if (truthy(pe))
        return fail(h,
                    "%sposition_embedding_type = %s: relative position scores are added inside "
                    "attention, which no layer spec describes (only \"absolute\")",
                    h->pre, jtext(pe));
    ah_layer_spec proto;
    ah_status s = decoder_layers(h, &proto);
    for (uint32_t i = 0; !s && i < h->n; i++) h->specs[i].attn_type = AH_ATTN_ENCODER_ONLY;
    return s;
}

/* Jamba: layer i is attention when i % attn_layer_period ==
 * attn_layer_offset, else a Mamba layer; sliding_window on the attention
 * layers. */
static ah_status fam_jamba(hf *h)
{
    ah_layer_spec proto;
    uint32_t period, offset;
    ah_status s;
    if ((s = decoder_layers(h, &proto)) ||
        (s = GET_UINTS(h, {"attn_layer_period", &period}, {"attn_layer_offset", &offset})) ||
        (s = windows(h, WIN_ALL, 0, NULL)))
        return s;
    if (!period || offset >= period)
        return fail(h, "%sattn_layer_offset = %u must be below attn_layer_period = %u", h->pre,
                    offset, period);
    for (uint32_t i = 0; i < h->n; i++)
        if (i % period != offset) h->kinds[i] = AH_LAYER_MAMBA;
    return AH_OK;
}

/* Qwen3-Next: gated delta net layers ("linear_attention") and full
 * attention layers, from layer_types, else every full_attention_interval-th
 * layer is attention. (Its output gate and partial rotary embedding act
 * outside the attention kernel.) */
static ah_status fam_qwen3_next(hf *h)
{
    ah_layer_spec proto;
    ah_status s = decoder_layers(h, &proto);
    if (s) return s;
    if (field(h, "layer_types")) return windows(h, WIN_NONE, LT_LINEAR_GDN, NULL);
    uint32_t every;
    if ((s = get_uint(h, "full_attention_interval", OPTIONAL, 4, &every))) return s;
    if (!every) return fail(h, "%sfull_attention_interval = 0: not an interval", h->pre);
    for (uint32_t i = 0; i < h->n; i++)
        if ((i + 1) % every) h->kinds[i] = AH_LAYER_GDN;
    return AH_OK;
}

/* Llama 4 (its text config): RoPE layers use chunked local attention when
 * attention_chunk_size is set, NoPE layers (no_rope_layers[i] = 0, by
 * default every 4th) global attention. The NoPE layers' attention
 * temperature tuning scales the queries before attention (the engine's
 * part). A chunk is not a sliding window: chunked layers are refused
 * unless the engine runs them as one-chunk virtual batches (vLLM). */
static ah_status fam_llama4(hf *h)
{
    ah_layer_spec proto;
    uint32_t chunk;
    ah_status s;
    if ((s = decoder_layers(h, &proto)) ||
        (s = get_uint(h, "attention_chunk_size", OPTIONAL, 0, &chunk)))
        return s;
    uint8_t *chunked = h->chunked = ah__calloc(h->n, 1);
    if (!chunked) return fail(h, "out of memory");
    json_object *lt = field(h, "layer_types"), *nr = field(h, "no_rope_layers");
    if (nr && json_object_is_type(nr, json_type_array) && !json_object_array_length(nr))
        nr = NULL; /* [] means the default, as in Llama4TextConfig */
    if (lt) {
        s = windows(h, WIN_NONE, LT_CHUNKED, chunked);
    } else if (nr) {
        if (!json_object_is_type(nr, json_type_array) || json_object_array_length(nr) != h->n)
            s = fail(h, "%sno_rope_layers = %s: not a list of %u entries (num_hidden_layers)",
                     h->pre, jtext(nr), h->n);
        for (uint32_t i = 0; !s && i < h->n; i++) {
            json_object *e = json_object_array_get_idx(nr, i);
            if (!json_object_is_type(e, json_type_int) &&
                !json_object_is_type(e, json_type_boolean))
                s = fail(h, "%sno_rope_layers[%u] = %s: not 0 or 1", h->pre, i, jtext(e));
            else chunked[i] = chunk && json_object_get_int(e);
        }
    } else {
        for (uint32_t i = 0; i < h->n; i++)
            chunked[i] = chunk && (i + 1) % 4; /* every 4th is NoPE */
    }
    uint32_t first = h->n, count = 0;
    for (uint32_t i = 0; !s && i < h->n; i++)
        if (chunked[i]) {
            count++;
            if (first == h->n) first = i;
        }
    if (!s && count && !h->o->chunked_virtual_batches)
        s = fail(h,
                 "%sattention_chunk_size = %u: %u layers (the first is layer %u) use chunked local "
                 "attention, which no layer spec describes (a chunk is not a sliding window); an "
                 "engine that runs them as one-chunk virtual batches (vLLM) imports them as plain "
                 "causal layers with chunked_virtual_batches (--chunked-virtual-batches)",
                 h->pre, chunk, count, first);
    return s;
}

/* ---------------------------------------------------------------------------
 * KV-cache groups
 * ------------------------------------------------------------------------ */

/* What decides a cache layer's group under AH_HF_KV_GROUPS_HYBRID: the
 * fields vLLM's KV-cache specs differ in (a sliding window, a chunked
 * local layer, cross attention, the shape of one token's K/V). Dtype and
 * block size are the import's, the same for every layer. */
typedef struct kv_class {
    uint32_t window, kv_heads, qk, v, mla, cross, chunked;
} kv_class;

static kv_class class_of(const hf *h, uint32_t i)
{
    const ah_layer_spec *s = &h->specs[i];
    return (kv_class){s->sliding_window,
                      s->num_kv_heads,
                      s->qk_head_size,
                      s->v_head_size,
                      s->use_mla,
                      s->attn_type == AH_ATTN_ENCODER_DECODER,
                      h->chunked ? h->chunked[i] : 0};
}

/* kv_group per cache layer: the class's number in order of first layer.
 * Non-attention and cacheless layers stay in group 0. */
static ah_status assign_groups(hf *h)
{
    if (h->o->kv_groups == AH_HF_KV_GROUPS_ONE) return AH_OK;
    kv_class seen[AH_MAX_KV_GROUPS];
    uint32_t n = 0;
    for (uint32_t i = 0; i < h->n; i++) {
        if (h->kinds[i] != AH_LAYER_ATTENTION || ah_spec_cacheless(&h->specs[i])) continue;
        kv_class c = class_of(h, i);
        uint32_t g = 0;
        while (g < n && memcmp(&seen[g], &c, sizeof c)) g++;
        if (g == n) {
            if (n == AH_MAX_KV_GROUPS)
                return fail(h,
                            "layer %u would open KV-cache group %u (kv_groups = hybrid); a "
                            "model has at most %u",
                            i, n, AH_MAX_KV_GROUPS);
            seen[n++] = c;
        }
        h->specs[i].kv_group = g;
    }
    return AH_OK;
}

typedef struct family {
    const char *model_type;
    const char *reads; /* the ATTENTION_KEYS its mapping uses, space separated */
    ah_status (*build)(hf *h);
} family;

static const family families[] = {
    {"llama", "", fam_llama},
    {"mistral", "sliding_window layer_types", fam_mistral},
    {"mixtral", "sliding_window layer_types", fam_mistral},
    {"phi3", "sliding_window layer_types", fam_mistral},
    {"qwen2", "sliding_window use_sliding_window max_window_layers layer_types", fam_qwen},
    {"qwen2_moe", "sliding_window use_sliding_window max_window_layers layer_types", fam_qwen},
    {"qwen3", "sliding_window use_sliding_window max_window_layers layer_types", fam_qwen},
    {"qwen3_moe", "sliding_window use_sliding_window max_window_layers layer_types", fam_qwen},
    {"gemma2", "sliding_window layer_types attn_logit_softcapping query_pre_attn_scalar",
     fam_gemma2},
    {"gemma3_text",
     "sliding_window layer_types attn_logit_softcapping query_pre_attn_scalar sliding_window_pattern",
     fam_gemma3},
    {"gpt_oss", "sliding_window layer_types", fam_gpt_oss},
    {"deepseek_v2", "kv_lora_rank", fam_deepseek},
    {"deepseek_v3", "kv_lora_rank", fam_deepseek},
    {"whisper", "", fam_whisper},
    {"bert", "position_embedding_type", fam_bert},
    {"roberta", "position_embedding_type", fam_bert},
    {"xlm-roberta", "position_embedding_type", fam_bert},
    {"jamba", "sliding_window attn_layer_period attn_layer_offset", fam_jamba},
    {"qwen3_next", "layer_types full_attention_interval", fam_qwen3_next},
    {"llama4_text", "attention_chunk_size no_rope_layers attn_temperature_tuning layer_types",
     fam_llama4},
};

/* A listed word of a space-separated list. */
static int has_word(const char *list, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = list; (p = strstr(p, w)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n])) return 1;
    return 0;
}

static ah_status import(hf *h, ah_model **out)
{
    json_object *mt = NULL;
    if (!json_object_object_get_ex(h->root, "model_type", &mt) ||
        !json_object_is_type(mt, json_type_string))
        return fail(h, "model_type%s%s: not set (required: it names the model family)",
                    mt ? " = " : "", mt ? jtext(mt) : "");
    h->model_type = json_object_get_string(mt);
    h->cfg = h->root;
    h->pre = "";
    /* multimodal wrappers: the text model's config */
    if (!strcmp(h->model_type, "llama4") || !strcmp(h->model_type, "gemma3")) {
        json_object *tc = NULL;
        if (!json_object_object_get_ex(h->root, "text_config", &tc) ||
            !json_object_is_type(tc, json_type_object))
            return fail(h, "text_config: not set (required for model_type %s)", h->model_type);
        h->cfg = tc;
        h->pre = "text_config.";
        h->model_type = !strcmp(h->model_type, "llama4") ? "llama4_text" : "gemma3_text";
    }
    const family *f = NULL;
    for (size_t i = 0; i < sizeof families / sizeof *families; i++)
        if (!strcmp(families[i].model_type, h->model_type)) f = &families[i];
    if (!f) {
        char known[512];
        size_t n = 0;
        for (size_t i = 0; i < sizeof families / sizeof *families && n < sizeof known; i++)
            n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "",
                                  families[i].model_type);
        return fail(h, "model_type = %s: not a model type the importer knows (%s, llama4, gemma3)",
                    jtext(mt), known);
    }
    for (const char *const *k = ATTENTION_KEYS; *k; k++) {
        json_object *v = field(h, *k);
        if (truthy(v) && !has_word(f->reads, *k))
            return fail(h,
                        "%s%s = %s changes attention, and the %s importer does not understand it",
                        h->pre, *k, jtext(v), f->model_type);
    }
    ah_status s = f->build(h);
    if (s == AH_OK) s = assign_groups(h);
    if (s != AH_OK) return s;
    /* the options' name, else the last part of _name_or_path where it
     * makes a model name, else model_type */
    const char *nm = h->o->name;
    json_object *np = NULL;
    if (!nm && json_object_object_get_ex(h->root, "_name_or_path", &np) &&
        json_object_is_type(np, json_type_string)) {
        const char *p = json_object_get_string(np), *slash = strrchr(p, '/');
        if (slash && slash[1]) p = slash + 1;
        if (!ah__model_name_problem(p)) nm = p;
    }
    if (!nm) nm = json_object_get_string(mt);
    ah_model_desc d = {sizeof d, nm, h->n, h->specs, h->kinds, h->ragged};
    return ah__model_create(&d, h->source, out, h->err);
}

ah_status ah_model_import_hf_opts(const char *text, const char *source,
                                  const ah_hf_import_options *opts, ah_model **out, ah_error *err)
{
    if (!out) return AH_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!source) source = "<config.json>";
    ah_hf_import_options o = {sizeof o, AH_DTYPE_AUTO, AH_DTYPE_AUTO, 0, 0, NULL, 0, 0, 0};
    if (opts) {
        /* the first version ended with chunked_virtual_batches; later
         * fields keep their defaults unless struct_size covers them */
        const size_t first = offsetof(ah_hf_import_options, chunked_virtual_batches) + sizeof(int);
        if (opts->struct_size < first) {
            if (err)
                snprintf(err->msg, sizeof err->msg,
                         "ah_hf_import_options.struct_size %u is too small (at least %zu)",
                         opts->struct_size, first);
            return AH_ERR_ABI;
        }
        memcpy(&o, opts, opts->struct_size < sizeof o ? opts->struct_size : sizeof o);
        o.struct_size = sizeof o;
    }
    if (!text) {
        if (err) snprintf(err->msg, sizeof err->msg, "%s: no JSON text given", source);
        return AH_ERR_INVALID_ARGUMENT;
    }
    if ((unsigned)o.dtype > AH_DTYPE_BF16 || (unsigned)o.kv_dtype >= AH_DTYPE_COUNT) {
        if (err) snprintf(err->msg, sizeof err->msg, "%s: dtype or kv_dtype out of range", source);
        return AH_ERR_INVALID_ARGUMENT;
    }
    if (o.kv_groups > AH_HF_KV_GROUPS_HYBRID) {
        if (err)
            snprintf(err->msg, sizeof err->msg,
                     "%s: kv_groups = %u is not an ah_hf_kv_groups (0 one, 1 hybrid)", source,
                     o.kv_groups);
        return AH_ERR_INVALID_ARGUMENT;
    }
    hf h = {.source = source, .o = &o, .err = err};
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        if (err) snprintf(err->msg, sizeof err->msg, "%s: out of memory", source);
        return AH_ERR_OUT_OF_MEMORY;
    }
    size_t len = strlen(text);
    h.root = len <= 0x7fffffff ? json_tokener_parse_ex(tok, text, (int)len) : NULL;
    enum json_tokener_error je = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    ah_status s = AH_OK;
    if (!h.root || je != json_tokener_success) {
        if (je == json_tokener_continue) s = fail(&h, "not valid JSON: the text ends early");
        else s = fail(&h, "not valid JSON at offset %zu: %s", end, json_tokener_error_desc(je));
    } else {
        while (end < len && strchr(" \t\r\n", text[end])) end++;
        if (end < len) s = fail(&h, "not valid JSON: text after the object at offset %zu", end);
        else if (!json_object_is_type(h.root, json_type_object))
            s = fail(&h, "not a config.json: the top level is %s, not an object", jtext(h.root));
    }
    if (s == AH_OK) s = import(&h, out);
    json_object_put(h.root);
    ah__free(h.specs);
    ah__free(h.kinds);
    ah__free(h.chunked);
    ah__free(h.ragged);
    return s;
}

int ah_model_import_available(void) { return 1; }

#else /* !ATTNHOST_HAVE_JSONC */

ah_status ah_model_import_hf_opts(const char *text, const char *source,
                                  const ah_hf_import_options *opts, ah_model **out, ah_error *err)
{
    (void)text;
    (void)opts;
    if (out) *out = NULL;
    if (err)
        snprintf(err->msg, sizeof err->msg,
                 "%s: this libattnhost was built without json-c, so it "
                 "cannot import a config.json (install libjson-c-dev and rebuild)",
                 source ? source : "<config.json>");
    return AH_ERR_UNSUPPORTED;
}

int ah_model_import_available(void) { return 0; }

#endif

ah_status ah_model_import_hf(const char *json_text, const char *source, ah_model **out,
                             ah_error *err)
{
    return ah_model_import_hf_opts(json_text, source, NULL, out, err);
}
