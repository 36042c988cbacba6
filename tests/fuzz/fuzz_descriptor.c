/*
 * Fuzz target: validation of plugin descriptors (ah__descriptor_validate),
 * over descriptors decoded from the fuzzer's bytes: arbitrary struct sizes
 * (smaller, equal or larger than this header's), ABI versions, names,
 * device kinds and enum values, integer sets with lists and ranges, gfx
 * targets, typed config keys (any type value, int and float ranges empty,
 * huge, NaN or infinite, choice lists empty, NULL or with empty entries,
 * defaults that may or may not parse, NULL entries), ranks, mixed-batch
 * declarations, and any pattern of NULL op slots.
 *
 * The structs themselves are always full-size allocations, so a struct_size
 * larger than sizeof is a "newer plugin" and one smaller an "older plugin";
 * a list is either exactly as long as its count or, with a count above the
 * ABI's bound of 4096, a one-element array: the validator must refuse the
 * count before it reads the elements.
 *
 * The property beyond "no crash": whatever the validator accepts survives
 * what the scan does with it next (normalize, deep-copy into a record,
 * encode, decode with the decoder's own caps check, re-encode to the same
 * bytes), so no descriptor can pass at load time and fail in the cache.
 */
#include "fuzz_common.h"

#include <math.h>

#include "alloc.h"
#include "plugin_keys.h"
#include "scan_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static ah_status dummy_op(void) { return AH_OK; }
static void dummy_combination(const ah_layer_spec *s, const ah_probe_info *p, ah_reason_sink *k)
{
    (void)s;
    (void)p;
    (void)k;
}

/* Keeps everything the decoded descriptor points to, for freeing. */
typedef struct arena {
    void *ptrs[64];
    int n;
} arena;

static void *keep(arena *a, void *p)
{
    if (!p || a->n == 64) abort();
    a->ptrs[a->n++] = p;
    return p;
}

static uint32_t pick_size(fz *f, size_t full, size_t min)
{
    switch (fz_u8(f) % 6) {
    case 0: return (uint32_t)min;
    case 1: return (uint32_t)min - 1;
    case 2: return (uint32_t)(full + fz_u8(f));
    case 3: return fz_u32(f);
    default: return (uint32_t)full;
    }
}

static void decode_int_set(fz *f, arena *a, ah_int_set *s)
{
    s->struct_size = pick_size(f, sizeof *s, AH__INT_SET_MIN_SIZE);
    uint8_t n = fz_u8(f);
    if (n == 0xff) { /* a count past the bound, with a tiny array */
        s->n_values = 4097 + fz_u16(f);
        s->values = keep(a, calloc(1, sizeof(uint32_t)));
    } else if (n == 0xfe) { /* count without values */
        s->n_values = 1 + fz_u8(f);
        s->values = NULL;
    } else {
        s->n_values = n % 16;
        uint32_t *v = keep(a, calloc(s->n_values ? s->n_values : 1, sizeof *v));
        for (uint32_t i = 0; i < s->n_values; i++) v[i] = fz_u8(f) & 1 ? fz_u32(f) : fz_u8(f);
        s->values = v;
    }
    uint8_t r = fz_u8(f);
    if (r & 1) {
        s->range_min = fz_u8(f) & 1 ? fz_u32(f) : fz_u8(f);
        s->range_max = fz_u8(f) & 1 ? fz_u32(f) : fz_u16(f);
        s->range_step = fz_u8(f) & 1 ? fz_u32(f) : fz_u8(f);
    }
}

static uint32_t mask(fz *f)
{
    uint8_t k = fz_u8(f);
    return k & 0x80 ? fz_u32(f) : k; /* mostly small masks, sometimes any bits */
}

static char *maybe_str(fz *f, arena *a) { return fz_u8(f) == 0xee ? NULL : keep(a, fz_str(f, 80)); }

/* Texts a key's parser has opinions about, for names, defaults and
 * choices: spellings of booleans, numbers at and past the int64 and double
 * limits, NaN and infinities, choice lists with empty entries. */
static const char *const key_texts[] = {"0",
                                        "1",
                                        "-1",
                                        "true",
                                        "false",
                                        "yes",
                                        "off",
                                        "on",
                                        "auto",
                                        "",
                                        " 1",
                                        "1 ",
                                        "+5",
                                        "0x10",
                                        "08",
                                        "9223372036854775807",
                                        "9223372036854775808",
                                        "-9223372036854775808",
                                        "-9223372036854775809",
                                        "1e308",
                                        "1e309",
                                        "-0",
                                        "0.5",
                                        "nan",
                                        "inf",
                                        "-inf",
                                        "1e-320",
                                        "a|b|c",
                                        "auto|on|off",
                                        "a||b",
                                        "|a",
                                        "a|",
                                        "|",
                                        "au",
                                        "a",
                                        "b",
                                        "threads",
                                        "x_1"};
#define N_KEY_TEXTS (sizeof key_texts / sizeof *key_texts)

static const char *key_text(fz *f, arena *a)
{
    uint8_t k = fz_u8(f);
    if (k == 0xee) return NULL;
    if (k < 0x80) return key_texts[k % N_KEY_TEXTS];
    return keep(a, fz_str(f, k & 1 ? 300 : 40)); /* past the 255-byte string bound too */
}

static int64_t key_int(fz *f)
{
    static const int64_t edge[] = {0, 1, -1, 64, INT64_MAX, INT64_MIN, INT32_MAX, INT32_MIN};
    uint8_t k = fz_u8(f);
    if (k < 0x80) return edge[k % 8];
    return (int64_t)((uint64_t)fz_u32(f) << 32 | fz_u32(f));
}

static double key_float(fz *f)
{
    static const double edge[] = {0.0, -0.0, 1.0, -1.0, 0.5, 1e308, -1e308, 4.9e-324};
    uint8_t k = fz_u8(f);
    if (k < 0x60) return edge[k % 8];
    if (k < 0x70) return k & 1 ? INFINITY : -INFINITY;
    if (k < 0x78) return NAN;
    uint64_t bits = (uint64_t)fz_u32(f) << 32 | fz_u32(f);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

static void decode_key(fz *f, arena *a, ah_config_key *k)
{
    k->name = key_text(f, a);
    uint8_t t = fz_u8(f);
    k->type = (ah_key_type)(int32_t)(t & 0x80 ? fz_u32(f) : t % (AH_KEY_TYPE_COUNT + 1));
    k->default_value = key_text(f, a);
    k->int_min = key_int(f);
    k->int_max = key_int(f);
    k->float_min = key_float(f);
    k->float_max = key_float(f);
    k->choices = key_text(f, a);
    k->doc = key_text(f, a);
}

static void decode_caps(fz *f, arena *a, ah_caps *c)
{
    c->struct_size = pick_size(f, sizeof *c, AH__CAPS_MIN_SIZE);
    c->q_dtypes = mask(f);
    c->kv_dtypes = mask(f);
    decode_int_set(f, a, &c->qk_head_sizes);
    decode_int_set(f, a, &c->v_head_sizes);
    decode_int_set(f, a, &c->block_sizes);
    c->preferred_block_size = fz_u8(f) & 1 ? fz_u32(f) : fz_u8(f);
    c->features = mask(f);
    c->attn_types = mask(f);
    c->kv_layouts = mask(f);
    c->preferred_kv_layout = (ah_kv_layout)(int32_t)(fz_u8(f) & 0x80 ? fz_u32(f) : fz_u8(f) % 4);
    c->min_compute_capability = fz_u8(f);
    c->max_compute_capability = fz_u8(f);
    uint8_t ng = fz_u8(f);
    if (ng == 0xff) {
        c->n_gfx_targets = 4097 + fz_u16(f);
        c->gfx_targets = keep(a, calloc(1, sizeof(char *)));
    } else {
        c->n_gfx_targets = ng % 5;
        const char **g = keep(a, calloc(c->n_gfx_targets + 1u, sizeof *g));
        for (uint32_t i = 0; i < c->n_gfx_targets; i++) g[i] = maybe_str(f, a);
        c->gfx_targets = fz_u8(f) == 0xee ? NULL : g;
    }
    c->cpu_isa_required = mask(f);
    c->graph_level = (ah_graph_level)(int32_t)(fz_u8(f) & 0x80 ? fz_u32(f) : fz_u8(f) % 5);
    c->graph_seq_len_fill = (int32_t)fz_u32(f);
    c->forward_writes_kv = fz_u8(f) % 3;
    c->caller_output = fz_u8(f) % 3;
    c->max_head_groups = fz_u8(f);
    uint8_t nk = fz_u8(f);
    if (nk == 0xff) {
        c->n_config_keys = 4097 + fz_u16(f);
        c->config_keys = keep(a, calloc(1, sizeof(ah_config_key)));
    } else {
        c->n_config_keys = nk % 5;
        ah_config_key *k = keep(a, calloc(c->n_config_keys + 1u, sizeof *k));
        for (uint32_t i = 0; i < c->n_config_keys; i++) decode_key(f, a, &k[i]);
        c->config_keys = fz_u8(f) == 0xee ? NULL : k;
    }
    c->check_combination = fz_u8(f) & 1 ? dummy_combination : NULL;
    c->prefill_rank = fz_u8(f) & 1 ? fz_u32(f) : AH_RANK_SECONDARY;
    c->decode_rank = fz_u8(f) & 1 ? fz_u32(f) : AH_RANK_PRIMARY;
    c->mixed_batch = (ah_mixed_batch)(int32_t)(fz_u8(f) & 0x80 ? fz_u32(f) : fz_u8(f) % 3);
    c->decode_query_len_max = fz_u8(f) & 1 ? fz_u32(f) : fz_u8(f) % 4;
}

static void decode_ops(fz *f, ah_plugin_ops *o)
{
    o->struct_size = pick_size(f, sizeof *o, AH__OPS_MIN_SIZE);
    /* one bit per slot after struct_size: set = a (never called) function */
    uint32_t bits = fz_u8(f) & 1 ? fz_u32(f) : 0xffffffffu;
    void (*fn)(void) = (void (*)(void))dummy_op;
    size_t first = offsetof(ah_plugin_ops, probe);
    size_t n = (sizeof *o - first) / sizeof(void *);
    for (size_t i = 0; i < n && i < 32; i++) {
        void (*v)(void) = (bits >> i) & 1 ? fn : NULL;
        memcpy((char *)o + first + i * sizeof(void *), &v, sizeof v);
    }
}

/* An accepted key table is one the host can serve: each default parses
 * against its own row, as the getters will parse it, and survives the
 * record codec with the same meaning. */
static void check_keys(const ah_caps *c, const ah_caps *back)
{
    for (uint32_t i = 0; c && i < c->n_config_keys; i++) {
        const ah_config_key *k = &c->config_keys[i];
        ah_plugin_value v, w;
        char msg[256];
        FZ_ASSERT(ah__plugin_key_parse(k, k->default_value, &v, msg, sizeof msg) == 0,
                  "accepted key '%s' has a default its row refuses: %s", k->name, msg);
        const ah_config_key *kb =
            ah__plugin_key_find(back->config_keys, back->n_config_keys, k->name);
        FZ_ASSERT(kb && kb->type == k->type, "key '%s' lost in the record codec", k->name);
        FZ_ASSERT(ah__plugin_key_parse(kb, kb->default_value, &w, msg, sizeof msg) == 0 &&
                      ah__plugin_value_equal(k, &v, k->default_value, &w, kb->default_value),
                  "key '%s' means another default after the record codec", k->name);
    }
}

/* The accepted descriptor's journey through the scan record and codec. */
static void roundtrip(const ah_plugin_descriptor *d)
{
    ah_caps caps;
    ah__caps_normalize(&caps, d->caps);
    ah_plugin_rec *rec = ah__rec_new();
    if (!rec) abort();
    if (ah__rec_set(rec, &rec->info.name, d->name) || ah__rec_set(rec, &rec->info.path, "/x.so") ||
        ah__rec_set(rec, &rec->info.reason, "") || ah__rec_set_caps(rec, &caps))
        abort();
    rec->info.state = AH_PLUGIN_AVAILABLE;
    rec->info.device_kind = d->device_kind;
    rec->probe.struct_size = sizeof rec->probe;
    rec->probe.usable = 1;
    rec->info.probe = &rec->probe;
    ah_buf a = {0}, b = {0};
    ah__rec_encode(rec, &a);
    FZ_ASSERT(!a.oom, "encode failed");
    ah_plugin_rec *back = NULL;
    char why[512];
    FZ_ASSERT(ah__rec_decode(a.p, a.len, &back, why, sizeof why) == 0,
              "a descriptor that validated does not survive the record codec: %s", why);
    ah__rec_encode(back, &b);
    FZ_ASSERT(!b.oom && a.len == b.len && memcmp(a.p, b.p, a.len) == 0,
              "re-encoding a decoded record changed it");
    char vwhy[512];
    FZ_ASSERT(ah__caps_validate(&back->caps, vwhy, sizeof vwhy) == 0, "decoded caps: %s", vwhy);
    check_keys(&caps, &back->caps); /* the fields its struct_size covers */
    ah__buf_free(&a);
    ah__buf_free(&b);
    ah__rec_free(back);
    ah__rec_free(rec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f = {data, size, 0};
    arena a = {{0}, 0};
    ah_plugin_descriptor d;
    ah_caps caps;
    ah_plugin_ops ops;
    memset(&d, 0, sizeof d);
    memset(&caps, 0, sizeof caps);
    memset(&ops, 0, sizeof ops);
    d.struct_size = pick_size(&f, sizeof d, AH__DESC_MIN_SIZE);
    d.abi_version = fz_u8(&f) & 1 ? fz_u32(&f) : AH_ABI_VERSION;
    d.name = fz_u8(&f) == 0xee ? NULL : keep(&a, fz_str(&f, 100));
    d.version = maybe_str(&f, &a);
    d.vendor = maybe_str(&f, &a);
    d.license = maybe_str(&f, &a);
    d.description = maybe_str(&f, &a);
    d.device_kind = (ah_device_kind)(int32_t)(fz_u8(&f) & 0x80 ? fz_u32(&f) : fz_u8(&f) % 5);
    uint8_t present = fz_u8(&f);
    decode_caps(&f, &a, &caps);
    decode_ops(&f, &ops);
    d.caps = present == 0xe1 ? NULL : &caps;
    d.ops = present == 0xe2 ? NULL : &ops;
    char why[512];
    why[0] = '\0';
    int rc = ah__descriptor_validate(&d, why, sizeof why);
    if (rc != 0) FZ_ASSERT(why[0] != '\0', "refused without a reason");
    else roundtrip(&d);
    for (int i = 0; i < a.n; i++) free(a.ptrs[i]);
    return 0;
}
