/*
 * Names of status codes, enums and sets.
 */
#include <stdio.h>
#include <string.h>

#include <attnhost/attnhost.h>
#include <attnhost/plugin_util.h>

#define NAME_OF(table, v) ((unsigned)(v) < sizeof(table) / sizeof(table[0]) ? table[v] : "?")

static const char *const status_names[] = {
    "ok",           "invalid argument", "unsupported",  "out of memory",
    "device error", "unavailable",      "ABI mismatch", "configuration error",
    "I/O error",    "plugin failure",   "not found",    "internal error"};
_Static_assert(sizeof status_names / sizeof status_names[0] == AH_STATUS_COUNT,
               "one name per value");

const char *ah_status_str(ah_status s) { return NAME_OF(status_names, s); }

static const char *const state_names[] = {"available", "unavailable", "rejected", "quarantined"};
_Static_assert(sizeof state_names / sizeof state_names[0] == AH_PLUGIN_STATE_COUNT,
               "one name per value");

const char *ah_plugin_state_str(ah_plugin_state s) { return NAME_OF(state_names, s); }

static const char *const reason_names[] = {
    "none",        "unavailable",      "quarantined", "disabled",   "device",  "dtype",
    "kv_dtype",    "head_size",        "block_size",  "attn_type",  "feature", "kv_layout",
    "combination", "lost_on_priority", "not_found",   "not_checked"};
_Static_assert(sizeof reason_names / sizeof reason_names[0] == AH_REASON_CODE_COUNT,
               "one name per value");

const char *ah_reason_code_str(ah_reason_code c) { return NAME_OF(reason_names, c); }

static const char *const graph_level_names[] = {"NEVER", "UNIFORM_SINGLE_TOKEN_DECODE",
                                                "UNIFORM_BATCH", "ALWAYS"};
_Static_assert(sizeof graph_level_names / sizeof graph_level_names[0] == AH_GRAPH_LEVEL_COUNT,
               "one name per value");

const char *ah_graph_level_str(ah_graph_level g) { return NAME_OF(graph_level_names, g); }

static const char *const attn_type_names[] = {"decoder", "encoder", "encoder_only",
                                              "encoder_decoder"};
_Static_assert(sizeof attn_type_names / sizeof attn_type_names[0] == AH_ATTN_TYPE_COUNT,
               "one name per value");

const char *ah_attn_type_str(ah_attn_type a) { return NAME_OF(attn_type_names, a); }

/* one table with the plugins' messages (plugin_util.h) */
const char *ah_kv_layout_str(ah_kv_layout l) { return ah_kv_layout_name(l); }

/* As the model key kv_scales spells them. */
static const char *const kv_scales_names[] = {"host", "tensor", "per_head"};
_Static_assert(sizeof kv_scales_names / sizeof kv_scales_names[0] == AH_KV_SCALES_COUNT,
               "one name per value");

const char *ah_kv_scales_str(ah_kv_scales k) { return NAME_OF(kv_scales_names, k); }

static const char *const layer_kind_names[] = {"attention", "mamba",    "linear_attention",
                                               "gdn",       "mlp_only", "other"};
_Static_assert(sizeof layer_kind_names / sizeof layer_kind_names[0] == AH_LAYER_KIND_COUNT,
               "one name per value");

const char *ah_layer_kind_str(ah_layer_kind k) { return NAME_OF(layer_kind_names, k); }

static const char *const device_kind_names[] = {"cpu", "cuda", "hip", "level_zero"};
_Static_assert(sizeof device_kind_names / sizeof device_kind_names[0] == AH_DEVICE_KIND_COUNT,
               "one name per value");

const char *ah_device_kind_str(ah_device_kind k) { return NAME_OF(device_kind_names, k); }

static const char *const feature_names[] = {"mla",
                                            "sinks",
                                            "sliding_window",
                                            "alibi",
                                            "softcap",
                                            "non_causal",
                                            "sparse",
                                            "lse",
                                            "cascade",
                                            "diff_head_sizes",
                                            "tree_mask",
                                            "cacheless",
                                            "cross_attention",
                                            "causal_flag",
                                            "released_blocks",
                                            "empty_kv",
                                            "ragged_kv",
                                            "kv_scale_per_head",
                                            "scale_tensors",
                                            "q_scale"};
_Static_assert(sizeof feature_names / sizeof feature_names[0] == AH_FEATURE_COUNT,
               "one name per value");

const char *ah_feature_name(uint32_t bit)
{
    for (unsigned i = 0; i < sizeof feature_names / sizeof feature_names[0]; i++)
        if (bit == 1u << i && feature_names[i]) return feature_names[i];
    return "?";
}

/* Append "a, b, c" items chosen by mask to buf, wrapped in braces. */
static void format_mask(uint32_t mask, unsigned n, const char *(*name)(unsigned), const char *open,
                        const char *close, const char *empty, char *buf, size_t cap)
{
    size_t len = 0;
    int first = 1;
    if (!mask) {
        snprintf(buf, cap, "%s", empty);
        return;
    }
    len += (size_t)snprintf(buf, cap, "%s", open);
    for (unsigned i = 0; i < n && len < cap; i++)
        if (mask & (1u << i)) {
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", first ? "" : ", ", name(i));
            first = 0;
        }
    if (len < cap) snprintf(buf + len, cap - len, "%s", close);
}

static const char *dtype_i(unsigned i) { return ah_dtype_name((ah_dtype)i); }
static const char *attn_i(unsigned i) { return ah_attn_type_str((ah_attn_type)i); }
static const char *layout_i(unsigned i) { return ah_kv_layout_str((ah_kv_layout)i); }
static const char *feature_i(unsigned i) { return ah_feature_name(1u << i); }
static const char *const isa_names[] = {"sse4.2",   "avx",         "avx2",        "fma",
                                        "f16c",     "avx512f",     "avx512bw",    "avx512vl",
                                        "avx512dq", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                                        "amx_tile", "amx_bf16",    "amx_int8",    "amx_fp16"};
_Static_assert(sizeof isa_names / sizeof isa_names[0] == AH_CPU_ISA_COUNT, "one name per bit");
static const char *isa_i(unsigned i) { return i < AH_CPU_ISA_COUNT ? isa_names[i] : "?"; }

void ah_format_dtype_mask(uint32_t m, char *b, size_t c)
{
    format_mask(m, AH_DTYPE_COUNT, dtype_i, "{", "}", "{}", b, c);
}
void ah_format_attn_types(uint32_t m, char *b, size_t c)
{
    format_mask(m, AH_ATTN_TYPE_COUNT, attn_i, "{", "}", "{}", b, c);
}
void ah_format_layouts(uint32_t m, char *b, size_t c)
{
    format_mask(m, AH_KV_LAYOUT_COUNT, layout_i, "{", "}", "{}", b, c);
}
void ah_format_features(uint32_t m, char *b, size_t c)
{
    format_mask(m, AH_FEATURE_COUNT, feature_i, "", "", "none", b, c);
}
void ah_format_isa(uint32_t m, char *b, size_t c)
{
    format_mask(m, AH_CPU_ISA_COUNT, isa_i, "", "", "none", b, c);
}

void ah_format_int_set(const ah_int_set *s, char *buf, size_t cap)
{
    size_t len = 0;
    if (s->range_step == 1 && s->range_min <= 1 && s->range_max == UINT32_MAX && !s->n_values) {
        snprintf(buf, cap, "any");
        return;
    }
    buf[0] = '\0';
    if (s->n_values) {
        len += (size_t)snprintf(buf, cap, "{");
        for (uint32_t i = 0; i < s->n_values && len < cap; i++)
            len += (size_t)snprintf(buf + len, cap - len, "%s%u", i ? ", " : "", s->values[i]);
        if (len < cap) len += (size_t)snprintf(buf + len, cap - len, "}");
    }
    if (s->range_step && len < cap) {
        const char *sep = s->n_values ? " or " : "";
        if (s->range_max == UINT32_MAX)
            snprintf(buf + len, cap - len, "%smultiples of %u from %u", sep, s->range_step,
                     s->range_min);
        else if (s->range_step == 1)
            snprintf(buf + len, cap - len, "%s%u..%u", sep, s->range_min, s->range_max);
        else
            snprintf(buf + len, cap - len, "%s%u..%u step %u", sep, s->range_min, s->range_max,
                     s->range_step);
    }
    if (!s->n_values && !s->range_step) snprintf(buf, cap, "{}");
}

const char *ah_version(void) { return AH_VERSION_STRING; }
uint32_t ah_abi_version(void) { return AH_ABI_VERSION; }
