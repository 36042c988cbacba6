/*
 * The scan record: ownership helpers and the one byte encoding used both by
 * the scan child (to report to its parent over a pipe) and by the scan cache
 * file. Having one code path means the cache can never hold something the
 * protocol could not carry, and the fuzzer covers both readers at once.
 *
 * Encoding (all integers little-endian):
 *   header  "AHRC" | u16 version (2) | u16 reserved (0) | u32 body length
 *   body    fields in a fixed order; strings are u32 length + bytes (no NUL
 *           inside; 0xffffffff means NULL); lists are u32 count + items.
 * The decoder checks every length against what is left and against fixed
 * bounds, refuses trailing bytes, and validates the decoded caps with the
 * same rules as a live descriptor, so a tampered cache cannot smuggle in
 * caps a plugin could not have passed with.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "scan_int.h"

#define REC_MAGIC "AHRC"
#define REC_VERSION 2u
#define REC_HEADER 12u
#define STR_NULL 0xffffffffu
#define MAX_STR 65536u /* longest string field */
#define MAX_LIST 4096u /* longest list (head sizes, gfx targets, config keys) */
#define MAX_BODY (64u << 20)

/* ---- buffer ----------------------------------------------------------------- */

void ah__buf_put(ah_buf *b, const void *data, size_t n)
{
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = ah__realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
}

void ah__buf_u32(ah_buf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    ah__buf_put(b, x, 4);
}

void ah__buf_u64(ah_buf *b, uint64_t v)
{
    ah__buf_u32(b, (uint32_t)v);
    ah__buf_u32(b, (uint32_t)(v >> 32));
}

void ah__buf_free(ah_buf *b)
{
    ah__free(b->p);
    memset(b, 0, sizeof *b);
}

static void buf_str(ah_buf *b, const char *s)
{
    if (!s) {
        ah__buf_u32(b, STR_NULL);
        return;
    }
    size_t n = strlen(s);
    if (n > MAX_STR) n = MAX_STR; /* longer text is truncated, never refused */
    ah__buf_u32(b, (uint32_t)n);
    ah__buf_put(b, s, n);
}

/* ---- records ------------------------------------------------------------------ */

ah_plugin_rec *ah__rec_new(void)
{
    ah_plugin_rec *r = ah__calloc(1, sizeof *r);
    if (r) r->info.struct_size = sizeof r->info;
    return r;
}

static void caps_free_lists(ah_caps *c)
{
    ah__free((void *)c->qk_head_sizes.values);
    ah__free((void *)c->v_head_sizes.values);
    ah__free((void *)c->block_sizes.values);
    for (uint32_t i = 0; c->gfx_targets && i < c->n_gfx_targets; i++)
        ah__free((void *)c->gfx_targets[i]);
    ah__free((void *)c->gfx_targets);
    for (uint32_t i = 0; c->config_keys && i < c->n_config_keys; i++) {
        ah__free((void *)c->config_keys[i].name);
        ah__free((void *)c->config_keys[i].default_value);
        ah__free((void *)c->config_keys[i].choices);
        ah__free((void *)c->config_keys[i].doc);
    }
    ah__free((void *)c->config_keys);
    memset(c, 0, sizeof *c);
}

void ah__rec_free(ah_plugin_rec *r)
{
    if (!r) return;
    ah__free((void *)r->info.name);
    ah__free((void *)r->info.path);
    ah__free((void *)r->info.version);
    ah__free((void *)r->info.vendor);
    ah__free((void *)r->info.license);
    ah__free((void *)r->info.description);
    ah__free((void *)r->info.reason);
    caps_free_lists(&r->caps);
    ah__free(r);
}

int ah__rec_set(ah_plugin_rec *r, const char **field, const char *value)
{
    char *s = NULL;
    if (value && !(s = ah__strdup(value))) return -1;
    (void)r;
    ah__free((void *)*field);
    *field = s;
    return 0;
}

int ah__rec_reason(ah_plugin_rec *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char tmp[2048];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return ah__rec_set(r, &r->info.reason, tmp);
}

static int int_set_copy(ah_int_set *dst, const ah_int_set *src)
{
    *dst = *src;
    dst->struct_size = sizeof *dst;
    dst->values = NULL;
    if (!src->n_values) return 0;
    uint32_t *v = ah__malloc((size_t)src->n_values * sizeof *v);
    if (!v) {
        dst->n_values = 0;
        return -1;
    }
    memcpy(v, src->values, (size_t)src->n_values * sizeof *v);
    dst->values = v;
    return 0;
}

int ah__rec_set_caps(ah_plugin_rec *r, const ah_caps *src)
{
    ah_caps *c = &r->caps;
    caps_free_lists(c);
    *c = *src;
    c->struct_size = sizeof *c;
    c->check_combination = NULL;
    c->qk_head_sizes.values = c->v_head_sizes.values = c->block_sizes.values = NULL;
    c->qk_head_sizes.n_values = c->v_head_sizes.n_values = c->block_sizes.n_values = 0;
    c->gfx_targets = NULL;
    c->n_gfx_targets = 0;
    c->config_keys = NULL;
    c->n_config_keys = 0;
    if (int_set_copy(&c->qk_head_sizes, &src->qk_head_sizes) ||
        int_set_copy(&c->v_head_sizes, &src->v_head_sizes) ||
        int_set_copy(&c->block_sizes, &src->block_sizes))
        goto oom;
    if (src->n_gfx_targets) {
        const char **g = ah__calloc(src->n_gfx_targets, sizeof *g);
        if (!g) goto oom;
        c->gfx_targets = g;
        c->n_gfx_targets = src->n_gfx_targets;
        for (uint32_t i = 0; i < src->n_gfx_targets; i++)
            if (!(g[i] = ah__strdup(src->gfx_targets[i]))) goto oom;
    }
    if (src->n_config_keys) {
        ah_config_key *k = ah__calloc(src->n_config_keys, sizeof *k);
        if (!k) goto oom;
        c->config_keys = k;
        c->n_config_keys = src->n_config_keys;
        for (uint32_t i = 0; i < src->n_config_keys; i++) {
            const ah_config_key *s = &src->config_keys[i];
            k[i] = *s;
            k[i].name = k[i].default_value = k[i].choices = k[i].doc = NULL;
            if (!(k[i].name = ah__strdup(s->name))) goto oom;
            if (s->choices && !(k[i].choices = ah__strdup(s->choices))) goto oom;
            if (s->default_value && !(k[i].default_value = ah__strdup(s->default_value))) goto oom;
            if (s->doc && !(k[i].doc = ah__strdup(s->doc))) goto oom;
        }
    }
    r->info.caps = c;
    return 0;
oom:
    caps_free_lists(c);
    r->info.caps = NULL;
    return -1;
}

ah_plugin_rec *ah__rec_dup(const ah_plugin_rec *src)
{
    /* Through the codec: one deep-copy path, already exercised by both the
     * protocol and the cache. */
    ah_buf b = {0};
    ah__rec_encode(src, &b);
    ah_plugin_rec *r = NULL;
    char why[256];
    if (!b.oom) (void)ah__rec_decode(b.p, b.len, &r, why, sizeof why);
    ah__buf_free(&b);
    return r;
}

/* ---- encoding ------------------------------------------------------------------ */

static uint64_t double_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double bits_double(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static void enc_int_set(ah_buf *b, const ah_int_set *s)
{
    ah__buf_u32(b, s->n_values);
    for (uint32_t i = 0; i < s->n_values; i++) ah__buf_u32(b, s->values[i]);
    ah__buf_u32(b, s->range_min);
    ah__buf_u32(b, s->range_max);
    ah__buf_u32(b, s->range_step);
}

void ah__caps_encode(const ah_caps *c, ah_buf *b)
{
    ah__buf_u32(b, c->q_dtypes);
    ah__buf_u32(b, c->kv_dtypes);
    enc_int_set(b, &c->qk_head_sizes);
    enc_int_set(b, &c->v_head_sizes);
    enc_int_set(b, &c->block_sizes);
    ah__buf_u32(b, c->preferred_block_size);
    ah__buf_u32(b, c->features);
    ah__buf_u32(b, c->attn_types);
    ah__buf_u32(b, c->kv_layouts);
    ah__buf_u32(b, (uint32_t)c->preferred_kv_layout);
    ah__buf_u32(b, c->min_compute_capability);
    ah__buf_u32(b, c->max_compute_capability);
    ah__buf_u32(b, c->n_gfx_targets);
    for (uint32_t i = 0; i < c->n_gfx_targets; i++) buf_str(b, c->gfx_targets[i]);
    ah__buf_u32(b, c->cpu_isa_required);
    ah__buf_u32(b, (uint32_t)c->graph_level);
    ah__buf_u32(b, (uint32_t)c->graph_seq_len_fill);
    ah__buf_u32(b, c->forward_writes_kv);
    ah__buf_u32(b, c->caller_output);
    ah__buf_u32(b, c->max_head_groups);
    ah__buf_u32(b, c->n_config_keys);
    for (uint32_t i = 0; i < c->n_config_keys; i++) {
        const ah_config_key *k = &c->config_keys[i];
        buf_str(b, k->name);
        ah__buf_u32(b, (uint32_t)k->type);
        buf_str(b, k->default_value);
        ah__buf_u64(b, (uint64_t)k->int_min);
        ah__buf_u64(b, (uint64_t)k->int_max);
        ah__buf_u64(b, double_bits(k->float_min));
        ah__buf_u64(b, double_bits(k->float_max));
        buf_str(b, k->choices);
        buf_str(b, k->doc);
    }
    ah__buf_u32(b, c->prefill_rank);
    ah__buf_u32(b, c->decode_rank);
    ah__buf_u32(b, (uint32_t)c->mixed_batch);
    ah__buf_u32(b, c->decode_query_len_max);
}

static void enc_probe(ah_buf *b, const ah_probe_info *p)
{
    ah__buf_u32(b, (uint32_t)p->usable);
    buf_str(b, p->reason);
    buf_str(b, p->device_name);
    buf_str(b, p->arch);
    ah__buf_u32(b, p->compute_capability);
    ah__buf_u32(b, p->device_count);
    ah__buf_u32(b, p->multiprocessors);
    ah__buf_u64(b, p->memory_bytes);
    buf_str(b, p->driver_version);
}

void ah__rec_encode(const ah_plugin_rec *r, ah_buf *b)
{
    size_t start = b->len;
    ah__buf_put(b, REC_MAGIC, 4);
    ah__buf_u32(b, REC_VERSION); /* u16 version + u16 reserved */
    ah__buf_u32(b, 0);           /* body length, patched below */
    const ah_plugin_info *i = &r->info;
    buf_str(b, i->path);
    buf_str(b, i->name);
    buf_str(b, i->version);
    buf_str(b, i->vendor);
    buf_str(b, i->license);
    buf_str(b, i->description);
    ah__buf_u32(b, (uint32_t)i->device_kind);
    ah__buf_u32(b, (uint32_t)i->state);
    buf_str(b, i->reason);
    ah__buf_u32(b, (uint32_t)i->has_check_combination);
    uint64_t ms;
    double scan_ms = i->scan_ms;
    memcpy(&ms, &scan_ms, sizeof ms);
    ah__buf_u64(b, ms);
    ah__buf_u64(b, (uint64_t)r->dev);
    ah__buf_u64(b, (uint64_t)r->ino);
    ah__buf_u64(b, (uint64_t)r->size);
    ah__buf_u64(b, (uint64_t)r->mtime_ns);
    ah__buf_u64(b, (uint64_t)r->ctime_ns);
    ah__buf_u64(b, r->content_hash);
    ah__buf_u32(b, i->caps ? 1u : 0u);
    if (i->caps) ah__caps_encode(&r->caps, b);
    ah__buf_u32(b, i->probe ? 1u : 0u);
    if (i->probe) enc_probe(b, &r->probe);
    if (b->oom) return;
    size_t body = b->len - start - REC_HEADER;
    if (body > MAX_BODY) {
        b->oom = 1; /* cannot happen with bounded fields; refuse rather than emit garbage */
        return;
    }
    uint8_t *h = b->p + start + 8;
    h[0] = (uint8_t)body;
    h[1] = (uint8_t)(body >> 8);
    h[2] = (uint8_t)(body >> 16);
    h[3] = (uint8_t)(body >> 24);
}

/* ---- decoding ------------------------------------------------------------------ */

typedef struct rd {
    const uint8_t *p;
    size_t n, off;
    const char *err; /* first failure; later reads are no-ops */
    int oom;
} rd;

static int rd_fail(rd *r, const char *what)
{
    if (!r->err) r->err = what;
    return -1;
}

static uint32_t rd_u32(rd *r, const char *what)
{
    if (r->err) return 0;
    if (r->n - r->off < 4) {
        rd_fail(r, what);
        return 0;
    }
    const uint8_t *x = r->p + r->off;
    r->off += 4;
    return (uint32_t)x[0] | (uint32_t)x[1] << 8 | (uint32_t)x[2] << 16 | (uint32_t)x[3] << 24;
}

static uint64_t rd_u64(rd *r, const char *what)
{
    uint64_t lo = rd_u32(r, what);
    uint64_t hi = rd_u32(r, what);
    return lo | hi << 32;
}

/* A string field: *out is NULL for the NULL marker (allowed only when
 * nullable), else a fresh NUL-terminated copy. */
static void rd_str(rd *r, const char **out, int nullable, const char *what)
{
    *out = NULL;
    uint32_t len = rd_u32(r, what);
    if (r->err) return;
    if (len == STR_NULL) {
        if (!nullable) rd_fail(r, what);
        return;
    }
    if (len > MAX_STR || len > r->n - r->off) {
        rd_fail(r, what);
        return;
    }
    if (memchr(r->p + r->off, 0, len)) {
        rd_fail(r, what);
        return;
    }
    char *s = ah__malloc((size_t)len + 1);
    if (!s) {
        r->oom = 1;
        rd_fail(r, "out of memory");
        return;
    }
    memcpy(s, r->p + r->off, len);
    s[len] = '\0';
    r->off += len;
    *out = s;
}

/* A string into a fixed char array: must fit with its NUL. */
static void rd_fixed(rd *r, char *dst, size_t cap, const char *what)
{
    const char *s = NULL;
    rd_str(r, &s, 0, what);
    if (s && strlen(s) >= cap) rd_fail(r, what);
    if (!r->err && s) memcpy(dst, s, strlen(s) + 1);
    ah__free((void *)s);
}

static uint32_t rd_count(rd *r, size_t min_item_bytes, const char *what)
{
    uint32_t n = rd_u32(r, what);
    /* Each item takes at least min_item_bytes, so a count larger than what
     * is left cannot be honest; checking here bounds every allocation. */
    if (!r->err && (n > MAX_LIST || (size_t)n * min_item_bytes > r->n - r->off)) rd_fail(r, what);
    return r->err ? 0 : n;
}

static void rd_int_set(rd *r, ah_int_set *s, const char *what)
{
    s->struct_size = sizeof *s;
    uint32_t n = rd_count(r, 4, what);
    if (n) {
        uint32_t *v = ah__malloc((size_t)n * sizeof *v);
        if (!v) {
            r->oom = 1;
            rd_fail(r, "out of memory");
            return;
        }
        for (uint32_t i = 0; i < n; i++) v[i] = rd_u32(r, what);
        s->values = v;
        s->n_values = n;
    }
    s->range_min = rd_u32(r, what);
    s->range_max = rd_u32(r, what);
    s->range_step = rd_u32(r, what);
}

static void rd_caps(rd *r, ah_caps *c)
{
    c->struct_size = sizeof *c;
    c->q_dtypes = rd_u32(r, "caps.q_dtypes");
    c->kv_dtypes = rd_u32(r, "caps.kv_dtypes");
    rd_int_set(r, &c->qk_head_sizes, "caps.qk_head_sizes");
    rd_int_set(r, &c->v_head_sizes, "caps.v_head_sizes");
    rd_int_set(r, &c->block_sizes, "caps.block_sizes");
    c->preferred_block_size = rd_u32(r, "caps.preferred_block_size");
    c->features = rd_u32(r, "caps.features");
    c->attn_types = rd_u32(r, "caps.attn_types");
    c->kv_layouts = rd_u32(r, "caps.kv_layouts");
    uint32_t pl = rd_u32(r, "caps.preferred_kv_layout");
    if (pl >= AH_KV_LAYOUT_COUNT) rd_fail(r, "caps.preferred_kv_layout");
    c->preferred_kv_layout = (ah_kv_layout)(r->err ? 0 : pl);
    c->min_compute_capability = rd_u32(r, "caps.min_compute_capability");
    c->max_compute_capability = rd_u32(r, "caps.max_compute_capability");
    uint32_t ng = rd_count(r, 4, "caps.gfx_targets");
    if (ng) {
        const char **g = ah__calloc(ng, sizeof *g);
        if (!g) {
            r->oom = 1;
            rd_fail(r, "out of memory");
            return;
        }
        c->gfx_targets = g;
        c->n_gfx_targets = ng;
        for (uint32_t i = 0; i < ng; i++) rd_str(r, &g[i], 0, "caps.gfx_targets");
    }
    c->cpu_isa_required = rd_u32(r, "caps.cpu_isa_required");
    uint32_t gl = rd_u32(r, "caps.graph_level");
    if (gl >= AH_GRAPH_LEVEL_COUNT) rd_fail(r, "caps.graph_level");
    c->graph_level = (ah_graph_level)(r->err ? 0 : gl);
    c->graph_seq_len_fill = (int32_t)rd_u32(r, "caps.graph_seq_len_fill");
    c->forward_writes_kv = rd_u32(r, "caps.forward_writes_kv");
    c->caller_output = rd_u32(r, "caps.caller_output");
    c->max_head_groups = rd_u32(r, "caps.max_head_groups");
    uint32_t nk = rd_count(r, 52, "caps.config_keys");
    if (nk) {
        ah_config_key *k = ah__calloc(nk, sizeof *k);
        if (!k) {
            r->oom = 1;
            rd_fail(r, "out of memory");
            return;
        }
        c->config_keys = k;
        c->n_config_keys = nk;
        for (uint32_t i = 0; i < nk; i++) {
            rd_str(r, &k[i].name, 0, "caps.config_keys");
            uint32_t t = rd_u32(r, "caps.config_keys.type");
            if (!r->err && t >= AH_KEY_TYPE_COUNT) rd_fail(r, "caps.config_keys.type");
            k[i].type = (ah_key_type)(r->err ? 0 : t);
            rd_str(r, &k[i].default_value, 1, "caps.config_keys");
            k[i].int_min = (int64_t)rd_u64(r, "caps.config_keys.int_min");
            k[i].int_max = (int64_t)rd_u64(r, "caps.config_keys.int_max");
            k[i].float_min = bits_double(rd_u64(r, "caps.config_keys.float_min"));
            k[i].float_max = bits_double(rd_u64(r, "caps.config_keys.float_max"));
            rd_str(r, &k[i].choices, 1, "caps.config_keys");
            rd_str(r, &k[i].doc, 1, "caps.config_keys");
        }
    }
    c->prefill_rank = rd_u32(r, "caps.prefill_rank");
    c->decode_rank = rd_u32(r, "caps.decode_rank");
    uint32_t mb = rd_u32(r, "caps.mixed_batch");
    if (!r->err && mb >= AH_MIXED_BATCH_COUNT) rd_fail(r, "caps.mixed_batch");
    c->mixed_batch = (ah_mixed_batch)(r->err ? 0 : mb);
    c->decode_query_len_max = rd_u32(r, "caps.decode_query_len_max");
}

static void rd_probe(rd *r, ah_probe_info *p)
{
    p->struct_size = sizeof *p;
    p->usable = (int32_t)rd_u32(r, "probe.usable");
    if (!r->err && p->usable != 0 && p->usable != 1) rd_fail(r, "probe.usable");
    rd_fixed(r, p->reason, sizeof p->reason, "probe.reason");
    rd_fixed(r, p->device_name, sizeof p->device_name, "probe.device_name");
    rd_fixed(r, p->arch, sizeof p->arch, "probe.arch");
    p->compute_capability = rd_u32(r, "probe.compute_capability");
    p->device_count = rd_u32(r, "probe.device_count");
    p->multiprocessors = rd_u32(r, "probe.multiprocessors");
    p->memory_bytes = rd_u64(r, "probe.memory_bytes");
    rd_fixed(r, p->driver_version, sizeof p->driver_version, "probe.driver_version");
}

size_t ah__rec_encoded_size(const uint8_t *p, size_t n)
{
    if (n < REC_HEADER || memcmp(p, REC_MAGIC, 4) != 0) return 0;
    uint32_t body =
        (uint32_t)p[8] | (uint32_t)p[9] << 8 | (uint32_t)p[10] << 16 | (uint32_t)p[11] << 24;
    if (body > MAX_BODY) return 0;
    return REC_HEADER + (size_t)body;
}

int ah__rec_decode(const uint8_t *p, size_t n, ah_plugin_rec **out, char *why, size_t cap)
{
    *out = NULL;
    if (!p || n < REC_HEADER) {
        snprintf(why, cap, "record truncated: %zu bytes, the header alone is %u", n, REC_HEADER);
        return -1;
    }
    if (memcmp(p, REC_MAGIC, 4) != 0) {
        snprintf(why, cap, "not a scan record (bad magic)");
        return -1;
    }
    uint32_t version = (uint32_t)p[4] | (uint32_t)p[5] << 8;
    uint32_t reserved = (uint32_t)p[6] | (uint32_t)p[7] << 8;
    if (version != REC_VERSION || reserved != 0) {
        snprintf(why, cap, "scan record version %u, this host reads version %u", version,
                 REC_VERSION);
        return -1;
    }
    size_t total = ah__rec_encoded_size(p, n);
    if (total == 0 || total != n) {
        snprintf(why, cap, "record length mismatch: header says %zu bytes, got %zu",
                 total ? total : (size_t)0, n);
        return -1;
    }
    ah_plugin_rec *rec = ah__rec_new();
    if (!rec) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    rd r = {p, n, REC_HEADER, NULL, 0};
    ah_plugin_info *i = &rec->info;
    rd_str(&r, &i->path, 1, "path");
    rd_str(&r, &i->name, 0, "name");
    rd_str(&r, &i->version, 1, "version");
    rd_str(&r, &i->vendor, 1, "vendor");
    rd_str(&r, &i->license, 1, "license");
    rd_str(&r, &i->description, 1, "description");
    uint32_t dk = rd_u32(&r, "device_kind");
    if (dk >= AH_DEVICE_KIND_COUNT) rd_fail(&r, "device_kind");
    i->device_kind = (ah_device_kind)(r.err ? 0 : dk);
    uint32_t st = rd_u32(&r, "state");
    if (st > AH_PLUGIN_QUARANTINED) rd_fail(&r, "state");
    i->state = (ah_plugin_state)(r.err ? 0 : st);
    rd_str(&r, &i->reason, 0, "reason");
    uint32_t hcc = rd_u32(&r, "has_check_combination");
    if (hcc > 1) rd_fail(&r, "has_check_combination");
    i->has_check_combination = (int)hcc;
    uint64_t msbits = rd_u64(&r, "scan_ms");
    memcpy(&i->scan_ms, &msbits, sizeof msbits);
    if (!r.err && !(isfinite(i->scan_ms) && i->scan_ms >= 0)) rd_fail(&r, "scan_ms");
    rec->dev = (dev_t)rd_u64(&r, "dev");
    rec->ino = (ino_t)rd_u64(&r, "ino");
    rec->size = (off_t)rd_u64(&r, "size");
    rec->mtime_ns = (int64_t)rd_u64(&r, "mtime_ns");
    rec->ctime_ns = (int64_t)rd_u64(&r, "ctime_ns");
    rec->content_hash = rd_u64(&r, "content_hash");
    uint32_t has_caps = rd_u32(&r, "caps flag");
    if (has_caps > 1) rd_fail(&r, "caps flag");
    if (has_caps && !r.err) {
        rd_caps(&r, &rec->caps);
        i->caps = &rec->caps;
    }
    uint32_t has_probe = rd_u32(&r, "probe flag");
    if (has_probe > 1) rd_fail(&r, "probe flag");
    if (has_probe && !r.err) {
        rd_probe(&r, &rec->probe);
        i->probe = &rec->probe;
    }
    if (!r.err && r.off != r.n) rd_fail(&r, "trailing bytes");
    if (!r.err) {
        /* Accepted plugins carry caps and a probe; the others neither. */
        int accepted = i->state == AH_PLUGIN_AVAILABLE || i->state == AH_PLUGIN_UNAVAILABLE;
        if (accepted != (int)has_caps || accepted != (int)has_probe)
            rd_fail(&r, "state does not match the caps/probe presence");
        else if (accepted && (i->state == AH_PLUGIN_AVAILABLE) != (rec->probe.usable == 1))
            rd_fail(&r, "state does not match probe.usable");
    }
    if (r.err) {
        if (r.oom) snprintf(why, cap, "out of memory");
        else
            snprintf(why, cap, "malformed record: bad or truncated field '%s' at byte %zu", r.err,
                     r.off);
        ah__rec_free(rec);
        return -1;
    }
    if (has_caps) {
        char vwhy[512];
        if (ah__caps_validate(&rec->caps, vwhy, sizeof vwhy) != 0) {
            snprintf(why, cap, "malformed record: invalid caps: %s", vwhy);
            ah__rec_free(rec);
            return -1;
        }
    }
    *out = rec;
    return 0;
}

/* ---- the scan request (host to spawned scanner) ------------------------------ */

#define REQ_MAGIC "AHSQ"
#define REQ_VERSION 1u
#define MAX_REQ_KEYS 65536u

void ah__scan_req_encode(const ah_config *config, const ah_hw_facts *hw, ah_buf *b)
{
    size_t start = b->len;
    ah__buf_put(b, REQ_MAGIC, 4);
    ah__buf_u32(b, REQ_VERSION);
    ah__buf_u32(b, 0); /* body length, patched below */
    ah_hw_facts none;
    memset(&none, 0, sizeof none);
    if (!hw) hw = &none;
    ah__buf_u32(b, hw->cpu_isa);
    ah__buf_u32(b, hw->cpu_isa_cpuid);
    ah__buf_u32(b, hw->cpu_logical_cores);
    ah__buf_u64(b, hw->memory_bytes);
    char s[sizeof hw->cpu_model + 1];
    snprintf(s, sizeof s, "%.*s", (int)sizeof hw->cpu_vendor - 1, hw->cpu_vendor);
    buf_str(b, s);
    snprintf(s, sizeof s, "%.*s", (int)sizeof hw->cpu_model - 1, hw->cpu_model);
    buf_str(b, s);
    char note[sizeof hw->amx_note + 1];
    snprintf(note, sizeof note, "%.*s", (int)sizeof hw->amx_note - 1, hw->amx_note);
    buf_str(b, note);
    uint32_t n = config ? config->n_plugin_keys : 0;
    ah__buf_u32(b, n);
    for (uint32_t i = 0; i < n; i++) {
        const ah_plugin_kv *kv = &config->plugin_keys[i];
        buf_str(b, kv->plugin ? kv->plugin : "");
        buf_str(b, kv->key ? kv->key : "");
        buf_str(b, kv->value ? kv->value : "");
        ah__buf_u32(b, (uint32_t)kv->line);
    }
    if (b->oom) return;
    size_t body = b->len - start - REC_HEADER;
    if (body > MAX_BODY) {
        b->oom = 1;
        return;
    }
    uint8_t *h = b->p + start + 8;
    h[0] = (uint8_t)body;
    h[1] = (uint8_t)(body >> 8);
    h[2] = (uint8_t)(body >> 16);
    h[3] = (uint8_t)(body >> 24);
}

int ah__scan_req_decode(const uint8_t *p, size_t n, ah_config *config, ah_hw_facts *hw, char *why,
                        size_t cap)
{
    memset(config, 0, sizeof *config);
    memset(hw, 0, sizeof *hw);
    hw->struct_size = sizeof *hw;
    if (!p || n < REC_HEADER || memcmp(p, REQ_MAGIC, 4) != 0) {
        snprintf(why, cap, "not a scan request (bad magic or truncated)");
        return -1;
    }
    uint32_t version =
        (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
    if (version != REQ_VERSION) {
        snprintf(why, cap, "scan request version %u, this scanner reads version %u", version,
                 REQ_VERSION);
        return -1;
    }
    uint32_t body =
        (uint32_t)p[8] | (uint32_t)p[9] << 8 | (uint32_t)p[10] << 16 | (uint32_t)p[11] << 24;
    if (body > MAX_BODY || REC_HEADER + (size_t)body != n) {
        snprintf(why, cap, "scan request length mismatch: header says %u body bytes, got %zu", body,
                 n - REC_HEADER);
        return -1;
    }
    rd r = {p, n, REC_HEADER, NULL, 0};
    hw->cpu_isa = rd_u32(&r, "hw.cpu_isa");
    hw->cpu_isa_cpuid = rd_u32(&r, "hw.cpu_isa_cpuid");
    hw->cpu_logical_cores = rd_u32(&r, "hw.cpu_logical_cores");
    hw->memory_bytes = rd_u64(&r, "hw.memory_bytes");
    rd_fixed(&r, hw->cpu_vendor, sizeof hw->cpu_vendor, "hw.cpu_vendor");
    rd_fixed(&r, hw->cpu_model, sizeof hw->cpu_model, "hw.cpu_model");
    rd_fixed(&r, hw->amx_note, sizeof hw->amx_note, "hw.amx_note");
    uint32_t nk = rd_u32(&r, "plugin keys");
    /* each key takes at least three string lengths and a line number */
    if (!r.err && (nk > MAX_REQ_KEYS || (size_t)nk * 16 > r.n - r.off)) rd_fail(&r, "plugin keys");
    if (!r.err && nk) {
        config->plugin_keys = ah__calloc(nk, sizeof *config->plugin_keys);
        if (!config->plugin_keys) {
            r.oom = 1;
            rd_fail(&r, "out of memory");
        } else {
            config->n_plugin_keys = nk;
        }
    }
    for (uint32_t i = 0; !r.err && i < nk; i++) {
        ah_plugin_kv *kv = &config->plugin_keys[i];
        rd_str(&r, (const char **)&kv->plugin, 0, "plugin key section");
        rd_str(&r, (const char **)&kv->key, 0, "plugin key name");
        rd_str(&r, (const char **)&kv->value, 0, "plugin key value");
        kv->line = (int)rd_u32(&r, "plugin key line");
    }
    if (!r.err && r.off != r.n) rd_fail(&r, "trailing bytes");
    if (r.err) {
        if (r.oom) snprintf(why, cap, "out of memory");
        else
            snprintf(why, cap, "malformed scan request: bad or truncated field '%s' at byte %zu",
                     r.err, r.off);
        for (uint32_t i = 0; i < config->n_plugin_keys; i++) {
            ah__free(config->plugin_keys[i].plugin);
            ah__free(config->plugin_keys[i].key);
            ah__free(config->plugin_keys[i].value);
        }
        ah__free(config->plugin_keys);
        memset(config, 0, sizeof *config);
        return -1;
    }
    return 0;
}
