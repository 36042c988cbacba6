/*
 * Validation of what a plugin's entry returns, before the host believes any
 * of it. Each rule refuses with a sentence naming the field and the value,
 * so a plugin author can fix the descriptor from the message alone.
 *
 * Sizes: a struct_size below the ABI 1.0 minimum (the end of the last
 * required field, see AH__*_MIN_SIZE) is refused; a smaller-than-current but
 * large-enough one is an older plugin whose missing optional fields read as
 * zero; a larger one is a newer plugin whose extra fields the host ignores.
 * The host reads every table through a normalized full-size copy, so no
 * rule below ever looks past what struct_size covers.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "plugin_keys.h"
#include "scan_int.h"

static int fail(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (cap) vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return -1;
}

static void normalize(void *dst, size_t full, const void *src, uint32_t src_size)
{
    memset(dst, 0, full);
    memcpy(dst, src, src_size < full ? src_size : full);
    *(uint32_t *)dst = (uint32_t)full;
}

void ah__caps_normalize(ah_caps *dst, const ah_caps *src)
{
    normalize(dst, sizeof *dst, src, src->struct_size);
    /* A caps struct too short for the ranks (an older minor) asks for no
     * preference, which is MARGINAL, not NONE (that would hide it). */
    if (!AH_HAS_FIELD(src, ah_caps, prefill_rank)) dst->prefill_rank = AH_RANK_MARGINAL;
    if (!AH_HAS_FIELD(src, ah_caps, decode_rank)) dst->decode_rank = AH_RANK_MARGINAL;
}

void ah__ops_normalize(ah_plugin_ops *dst, const ah_plugin_ops *src)
{
    normalize(dst, sizeof *dst, src, src->struct_size);
}

static int name_ok(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return 0;
        if (n >= 63) return 0;
    }
    return n >= 1;
}

/* A dtype mask: non-empty when required, only concrete dtypes (no AUTO). */
static int dtype_mask_check(uint32_t mask, const char *field, char *why, size_t cap)
{
    uint32_t known = (AH_BIT(AH_DTYPE_COUNT) - 1u) & ~AH_BIT(AH_DTYPE_AUTO);
    if (mask == 0) return fail(why, cap, "caps.%s is empty: the plugin serves no dtype", field);
    if (mask & ~known)
        return fail(why, cap,
                    "caps.%s 0x%x has unknown bits 0x%x (known: fp32, fp16, bf16, "
                    "fp8_e4m3, fp8_e5m2, fp8_e4m3fnuz, fp8_e5m2fnuz)",
                    field, mask, mask & ~known);
    return 0;
}

static int int_set_check(const ah_int_set *s, const char *field, char *why, size_t cap)
{
    if (s->struct_size < AH__INT_SET_MIN_SIZE)
        return fail(why, cap,
                    "caps.%s.struct_size %u is smaller than the ABI 1.0 size %zu "
                    "(use the AH_INT_SET_* macros)",
                    field, s->struct_size, (size_t)AH__INT_SET_MIN_SIZE);
    if (s->n_values == 0 && s->range_step == 0)
        return fail(why, cap, "caps.%s is empty (no values and no range)", field);
    if (s->n_values > 4096)
        return fail(why, cap, "caps.%s lists %u values (at most 4096)", field, s->n_values);
    if (s->n_values && !s->values)
        return fail(why, cap, "caps.%s has n_values %u but values is NULL", field, s->n_values);
    for (uint32_t i = 0; i < s->n_values; i++)
        if (s->values[i] == 0) return fail(why, cap, "caps.%s lists 0", field);
    if (s->range_step != 0 && (s->range_min == 0 || s->range_min > s->range_max))
        return fail(why, cap, "caps.%s range %u..%u is empty or starts at 0", field, s->range_min,
                    s->range_max);
    return 0;
}

static int enum_mask_check(uint32_t mask, uint32_t count, int allow_empty, const char *field,
                           char *why, size_t cap)
{
    uint32_t known = count >= 32 ? 0xffffffffu : (1u << count) - 1u;
    if (!allow_empty && mask == 0) return fail(why, cap, "caps.%s is empty", field);
    if (mask & ~known)
        return fail(why, cap, "caps.%s 0x%x has unknown bits 0x%x", field, mask, mask & ~known);
    return 0;
}

/* One declared config key: a name of [a-z0-9_], declared once, a known
 * type with a sane range or choice list, and a default its own
 * declaration accepts. */
static int key_check(const ah_config_key *keys, uint32_t i, char *why, size_t cap)
{
    const ah_config_key *k = &keys[i];
    if (!k->name) return fail(why, cap, "caps.config_keys[%u].name is NULL", i);
    if (!*k->name || strspn(k->name, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(k->name))
        return fail(why, cap, "caps.config_keys[%u].name '%.64s' is not [a-z0-9_]+", i, k->name);
    for (uint32_t j = 0; j < i; j++)
        if (strcmp(keys[j].name, k->name) == 0)
            return fail(why, cap, "caps.config_keys: '%.64s' is declared twice", k->name);
    if ((unsigned)k->type >= AH_KEY_TYPE_COUNT)
        return fail(why, cap, "caps.config_keys '%.64s': type %d is out of range (0..%d)", k->name,
                    (int)k->type, AH_KEY_TYPE_COUNT - 1);
    if (k->type == AH_KEY_INT && k->int_min > k->int_max)
        return fail(why, cap, "caps.config_keys '%.64s': int range %lld..%lld is empty", k->name,
                    (long long)k->int_min, (long long)k->int_max);
    if (k->type == AH_KEY_FLOAT && !(k->float_min <= k->float_max))
        return fail(why, cap, "caps.config_keys '%.64s': float range %g..%g is empty", k->name,
                    k->float_min, k->float_max);
    if (k->type == AH_KEY_ENUM && (!k->choices || !*k->choices))
        return fail(why, cap, "caps.config_keys '%.64s': an enum key needs choices", k->name);
    if (!k->default_value)
        return fail(why, cap, "caps.config_keys '%.64s': default_value is NULL", k->name);
    char msg[256];
    ah_plugin_value v;
    if (ah__plugin_key_parse(k, k->default_value, &v, msg, sizeof msg))
        return fail(why, cap, "caps.config_keys '%.64s': default %s", k->name, msg);
    return 0;
}

int ah__caps_validate(const ah_caps *c, char *why, size_t cap)
{
    if (dtype_mask_check(c->q_dtypes, "q_dtypes", why, cap)) return -1;
    if (dtype_mask_check(c->kv_dtypes, "kv_dtypes", why, cap)) return -1;
    if (int_set_check(&c->qk_head_sizes, "qk_head_sizes", why, cap)) return -1;
    if (int_set_check(&c->v_head_sizes, "v_head_sizes", why, cap)) return -1;
    if (int_set_check(&c->block_sizes, "block_sizes", why, cap)) return -1;
    if (!ah_int_set_contains(&c->block_sizes, c->preferred_block_size))
        return fail(why, cap, "caps.preferred_block_size %u is not in caps.block_sizes",
                    c->preferred_block_size);
    if (enum_mask_check(c->features, AH_FEATURE_COUNT, 1, "features", why, cap)) return -1;
    if ((c->features & AH_FEAT_KV_SCALE_PER_HEAD) && !(c->features & AH_FEAT_SCALE_TENSORS))
        return fail(why, cap,
                    "caps.features 0x%x claims kv_scale_per_head without scale_tensors: per-head "
                    "scales come only in tensors",
                    c->features);
    if (enum_mask_check(c->attn_types, AH_ATTN_TYPE_COUNT, 0, "attn_types", why, cap)) return -1;
    /* AUTO (bit 0) is a layer-spec wish, never a layout a plugin stores. */
    if (c->kv_layouts == 0) return fail(why, cap, "caps.kv_layouts is empty");
    const uint32_t known = (AH_BIT(AH_KV_LAYOUT_COUNT) - 1) & ~AH_BIT(AH_KV_LAYOUT_AUTO);
    if (c->kv_layouts & ~known)
        return fail(why, cap,
                    "caps.kv_layouts 0x%x has unknown bits (known: NHD 0x2, HND 0x4, "
                    "NHD_INTERLEAVED 0x8, HND_INTERLEAVED 0x10)",
                    c->kv_layouts);
    if ((unsigned)c->preferred_kv_layout >= AH_KV_LAYOUT_COUNT ||
        !(c->kv_layouts & AH_BIT(c->preferred_kv_layout)))
        return fail(why, cap, "caps.preferred_kv_layout %d is not in caps.kv_layouts 0x%x",
                    (int)c->preferred_kv_layout, c->kv_layouts);
    if (c->min_compute_capability && c->max_compute_capability &&
        c->min_compute_capability > c->max_compute_capability)
        return fail(why, cap, "caps compute-capability range %u..%u is empty",
                    c->min_compute_capability, c->max_compute_capability);
    if (c->n_gfx_targets > 4096)
        return fail(why, cap, "caps.n_gfx_targets %u (at most 4096)", c->n_gfx_targets);
    if (c->n_gfx_targets && !c->gfx_targets)
        return fail(why, cap, "caps.n_gfx_targets is %u but gfx_targets is NULL", c->n_gfx_targets);
    for (uint32_t i = 0; i < c->n_gfx_targets; i++)
        if (!c->gfx_targets[i]) return fail(why, cap, "caps.gfx_targets[%u] is NULL", i);
    if (enum_mask_check(c->cpu_isa_required, AH_CPU_ISA_COUNT, 1, "cpu_isa_required", why, cap))
        return -1;
    if ((unsigned)c->graph_level >= AH_GRAPH_LEVEL_COUNT)
        return fail(why, cap, "caps.graph_level %d is out of range (0..%d)", (int)c->graph_level,
                    AH_GRAPH_LEVEL_COUNT - 1);
    if (c->forward_writes_kv > 1 || c->caller_output > 1)
        return fail(why, cap, "caps.forward_writes_kv / caller_output must be 0 or 1");
    if (c->n_config_keys > 4096)
        return fail(why, cap, "caps.n_config_keys %u (at most 4096)", c->n_config_keys);
    if (c->n_config_keys && !c->config_keys)
        return fail(why, cap, "caps.n_config_keys is %u but config_keys is NULL", c->n_config_keys);
    for (uint32_t i = 0; i < c->n_config_keys; i++)
        if (key_check(c->config_keys, i, why, cap)) return -1;
    if ((unsigned)c->mixed_batch >= AH_MIXED_BATCH_COUNT)
        return fail(why, cap, "caps.mixed_batch %d is out of range (0..%d)", (int)c->mixed_batch,
                    AH_MIXED_BATCH_COUNT - 1);
    return 0;
}

/* Slots that must all be set, or (for the optional groups) all be NULL. */
#define OP(name) \
    { \
#name, offsetof(ah_plugin_ops, name) \
    }
typedef struct op_slot {
    const char *name;
    size_t off;
} op_slot;

static const op_slot required_ops[] = {OP(probe),         OP(context_create), OP(context_destroy),
                                       OP(context_error), OP(state_create),   OP(state_destroy),
                                       OP(state_error),   OP(plan),           OP(forward)};
static const op_slot mem_ops[] = {OP(mem_alloc),   OP(mem_free),      OP(mem_copy),
                                  OP(synchronize), OP(stream_create), OP(stream_destroy)};
static const op_slot timer_ops[] = {OP(timer_start), OP(timer_stop)};
static const op_slot graph_ops[] = {OP(graph_begin), OP(graph_end), OP(graph_launch),
                                    OP(graph_destroy)};

static const void *slot(const ah_plugin_ops *o, size_t off)
{
    const void *p;
    memcpy(&p, (const char *)o + off, sizeof p);
    return p;
}

/* Number of set slots in a group; *missing names the first NULL one. */
static size_t group_count(const ah_plugin_ops *o, const op_slot *g, size_t n, const char **missing)
{
    size_t set = 0;
    *missing = NULL;
    for (size_t i = 0; i < n; i++) {
        if (slot(o, g[i].off)) set++;
        else if (!*missing) *missing = g[i].name;
    }
    return set;
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

static int ops_validate(const ah_plugin_ops *o, const ah_caps *c, char *why, size_t cap)
{
    const char *missing;
    if (group_count(o, required_ops, N(required_ops), &missing) != N(required_ops))
        return fail(why, cap, "required slot ops.%s is NULL", missing);
    if (!o->write_kv && !c->forward_writes_kv)
        return fail(why, cap,
                    "ops.write_kv is NULL while caps.forward_writes_kv is 0: "
                    "nothing would store new K/V");
    const char *mem_missing;
    size_t m = group_count(o, mem_ops, N(mem_ops), &mem_missing);
    if (m != 0 && m != N(mem_ops))
        return fail(why, cap,
                    "ops.%s is NULL but other device-memory slots are set "
                    "(they are all set or all NULL)",
                    mem_missing);
    size_t t = group_count(o, timer_ops, N(timer_ops), &missing);
    if (t != 0 && t != N(timer_ops))
        return fail(why, cap, "ops.%s is NULL but the other timer slot is set", missing);
    if (c->graph_level > AH_GRAPH_NEVER) {
        if (group_count(o, graph_ops, N(graph_ops), &missing) != N(graph_ops))
            return fail(why, cap, "caps.graph_level is %d but ops.%s is NULL", (int)c->graph_level,
                        missing);
        if (m != N(mem_ops))
            return fail(why, cap,
                        "caps.graph_level is %d but ops.%s is NULL (graphs need the "
                        "device-memory slots)",
                        (int)c->graph_level, mem_missing);
    }
    return 0;
}

int ah__descriptor_validate(const ah_plugin_descriptor *d, char *why, size_t cap)
{
    if (!d) return fail(why, cap, "the entry returned a NULL descriptor");
    if (d->struct_size < AH__DESC_MIN_SIZE)
        return fail(why, cap, "descriptor struct_size %u is smaller than the ABI 1.0 minimum %zu",
                    d->struct_size, (size_t)AH__DESC_MIN_SIZE);
    if (AH_ABI_MAJOR(d->abi_version) != AH_ABI_VERSION_MAJOR)
        return fail(why, cap, "plugin ABI %u.%u, host ABI %u.%u", AH_ABI_MAJOR(d->abi_version),
                    AH_ABI_MINOR(d->abi_version), AH_ABI_VERSION_MAJOR, AH_ABI_VERSION_MINOR);
    if (!d->name) return fail(why, cap, "descriptor name is NULL");
    if (!name_ok(d->name)) {
        char shown[80];
        snprintf(shown, sizeof shown, "%.70s%s", d->name, strlen(d->name) > 70 ? "..." : "");
        return fail(why, cap, "descriptor name '%s' is not [a-z0-9_]{1,63}", shown);
    }
    if ((unsigned)d->device_kind >= AH_DEVICE_KIND_COUNT)
        return fail(why, cap, "device_kind %d is out of range (0..%d)", (int)d->device_kind,
                    AH_DEVICE_KIND_COUNT - 1);
    if (!d->caps) return fail(why, cap, "descriptor caps is NULL");
    if (!d->ops) return fail(why, cap, "descriptor ops is NULL");
    if (d->caps->struct_size < AH__CAPS_MIN_SIZE)
        return fail(why, cap, "caps struct_size %u is smaller than the ABI 1.0 minimum %zu",
                    d->caps->struct_size, (size_t)AH__CAPS_MIN_SIZE);
    if (d->ops->struct_size < AH__OPS_MIN_SIZE)
        return fail(why, cap, "ops struct_size %u is smaller than the ABI 1.0 minimum %zu",
                    d->ops->struct_size, (size_t)AH__OPS_MIN_SIZE);
    ah_caps c;
    ah_plugin_ops o;
    ah__caps_normalize(&c, d->caps);
    ah__ops_normalize(&o, d->ops);
    if (ah__caps_validate(&c, why, cap)) return -1;
    return ops_validate(&o, &c, why, cap);
}
