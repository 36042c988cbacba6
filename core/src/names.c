/*
 * Names of status codes, enums and sets.
 */
#include <stdio.h>
#include <string.h>

#include <attnhost/attnhost.h>
#include <attnhost/plugin_util.h>

#define NAME_OF(table, v) ((unsigned)(v) < sizeof(table) / sizeof(table[0]) ? table[v] : "?")

const char *ah_status_str(ah_status s)
{
    static const char *const t[] = {"ok", "invalid argument", "unsupported", "out of memory",
                                    "device error", "unavailable", "ABI mismatch",
                                    "configuration error", "I/O error", "plugin failure",
                                    "not found", "internal error"};
    return NAME_OF(t, s);
}

const char *ah_plugin_state_str(ah_plugin_state s)
{
    static const char *const t[] = {"available", "unavailable", "rejected", "quarantined"};
    return NAME_OF(t, s);
}

const char *ah_reason_code_str(ah_reason_code c)
{
    static const char *const t[] = {"none", "unavailable", "quarantined", "disabled", "device",
                                    "dtype", "kv_dtype", "head_size", "block_size", "attn_type",
                                    "feature", "kv_layout", "combination", "lost_on_priority",
                                    "not_found"};
    return NAME_OF(t, c);
}

const char *ah_graph_level_str(ah_graph_level g)
{
    static const char *const t[] = {"NEVER", "UNIFORM_SINGLE_TOKEN_DECODE", "UNIFORM_BATCH",
                                    "ALWAYS"};
    return NAME_OF(t, g);
}

const char *ah_attn_type_str(ah_attn_type a)
{
    static const char *const t[] = {"decoder", "encoder", "encoder_only", "encoder_decoder"};
    return NAME_OF(t, a);
}

const char *ah_kv_layout_str(ah_kv_layout l)
{
    static const char *const t[] = {"auto", "nhd", "hnd"};
    return NAME_OF(t, l);
}

const char *ah_device_kind_str(ah_device_kind k)
{
    static const char *const t[] = {"cpu", "cuda", "hip", "level_zero"};
    return NAME_OF(t, k);
}

const char *ah_feature_name(uint32_t bit)
{
    static const char *const t[] = {"mla", "sinks", "sliding_window", "alibi", "softcap",
                                    "non_causal", "sparse", "lse", "cascade", "diff_head_sizes"};
    for (unsigned i = 0; i < sizeof t / sizeof t[0]; i++)
        if (bit == 1u << i) return t[i];
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
static const char *isa_i(unsigned i)
{
    static const char *const t[] = {"sse4.2", "avx", "avx2", "fma", "f16c", "avx512f",
                                    "avx512bw", "avx512vl", "avx512dq", "avx512_vnni",
                                    "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
                                    "amx_int8", "amx_fp16"};
    return i < 16 ? t[i] : "?";
}

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
    format_mask(m, 10, feature_i, "", "", "none", b, c);
}
void ah_format_isa(uint32_t m, char *b, size_t c) { format_mask(m, 16, isa_i, "", "", "none", b, c); }

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
