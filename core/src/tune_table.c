/*
 * The measured-speed table: what `attnhost tune` timed, per plugin file,
 * device and layer spec, so [select] policy = measured can order a
 * layer's valid candidates by speed on this machine.
 *
 * An entry is keyed like a check record (record_key.h), from the scan
 * cache's pieces: the plugin file's path, identity (device, inode, size,
 * mtime, ctime) and content hash as the scan took them, the plugin's name
 * and version, the config hash of its [plugin.<name>] keys, the host ABI,
 * the driver fingerprint, and the device the plugin probed (kind, name,
 * arch, compute capability, driver version; the CPU model for a CPU
 * plugin); then the layer spec as the model describes it (before the
 * backend resolves kv_dtype, layout and block size) and the phase. It
 * applies only when every part matches: an upgraded or touched plugin
 * file, another configuration of its keys, another device or driver is
 * "not tuned here".
 *
 * File format (little-endian), tune-table beside the scan cache:
 *   "AHTUNETB" | u32 format (1) | u32 count
 *   count x ( u32 length | entry )
 *   u64 FNV-1a of everything before
 * entry: path, plugin, plugin version (strings: u32 length + bytes), u64
 *   dev, ino, size, mtime_ns, ctime_ns, content hash, config hash, driver
 *   fingerprint, u32 abi, device kind, compute capability, device name,
 *   arch, driver version, host cpu, spec key, u32 phase, u64 ms (IEEE
 *   double bits), steps, u64 tuned_at, attnhost version
 * Any bytes are safe to read: a bad file is ignored as a whole, with a
 * warning, never partly believed. Written through the scan cache's atomic
 * writer (0600 temp file + rename). A file of another user (root's, shared
 * read-only) is read when nobody else may write it, and never written.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "alloc.h"
#include "error.h"
#include "record_file.h"
#include "record_key.h"
#include "scan_int.h"
#include "select_int.h"
#include "strbuf.h"
#include "tune_table.h"

#define TT_MAX_STR 4096u

typedef struct tt_entry {
    ah_record_key k; /* with the driver fingerprint */
    char *spec;
    uint32_t phase;
    double ms;
    char *steps;
    uint64_t tuned_at;
    char *version;
} tt_entry;

_Static_assert(sizeof(tt_entry) <= AH_RF_ENTRY_MAX && offsetof(tt_entry, k) == 0,
               "a tune entry is an entry of record_file.h");

struct ah_tune_table {
    ah_rf_entries a; /* tt_entry */
    char *path;      /* "" without a scan cache */
    char *note;      /* why the file was ignored, or NULL */
    int read_only;   /* another user's file: read, never written */
    char **why;      /* stale notes handed out by lookups, freed with the table */
    uint32_t n_why;
};

/* ---- entries ------------------------------------------------------------------ */

static const ah_rf_format tt_format;

void ah__tune_table_free(ah_tune_table *t)
{
    if (!t) return;
    ah__rf_clear(&tt_format, &t->a);
    for (uint32_t i = 0; i < t->n_why; i++) ah__free(t->why[i]);
    ah__free(t->why);
    ah__free(t->path);
    ah__free(t->note);
    ah__free(t);
}


static int streq(const char *a, const char *b) { return strcmp(a ? a : "", b ? b : "") == 0; }

/* The same file, and the same plugin version in it. */
static int same_file(const tt_entry *a, const tt_entry *b)
{
    return ah__record_key_same_file(&a->k, &b->k) &&
           streq(a->k.plugin_version, b->k.plugin_version);
}

/* Same path, plugin, configuration, ABI, device, spec and phase: a new
 * measurement replaces the old one. */
static int same_slot(const tt_entry *a, const tt_entry *b)
{
    return ah__record_key_same_slot(&a->k, &b->k) && streq(a->k.plugin, b->k.plugin) &&
           streq(a->spec, b->spec) && a->phase == b->phase;
}

static int same_slot_v(const void *a, const void *b) { return same_slot(a, b); }

char *ah__tune_spec_key(const ah_layer_spec *s)
{
    ah_strbuf k = {0};
    ah__strbuf_printf(&k, "%d/%u/%u/%u/%u/%d/%d/%u/%d/%u/%a/%a/%u/%u/%u/%u", s->attn_type,
                      s->num_q_heads, s->num_kv_heads, s->qk_head_size, s->v_head_size, s->q_dtype,
                      s->kv_dtype, s->block_size, s->kv_layout, s->sliding_window, s->softcap,
                      s->scale, s->use_mla, s->use_sinks, s->use_alibi,
                      s->struct_size > offsetof(ah_layer_spec, fp8_attention) ? s->fp8_attention
                                                                              : 0);
    return ah__strbuf_take(&k);
}

/* The key of plugin rec as host h scanned it, for (spec, phase); strings
 * borrowed except spec (the caller frees it). */
static tt_entry key_of(const ah_host *h, const ah_plugin_rec *rec, char *spec, ah_phase phase)
{
    tt_entry k;
    memset(&k, 0, sizeof k);
    k.k = ah__record_key_of(h, rec);
    k.k.driver_fp = ah__driver_fingerprint(&h->hw);
    k.spec = spec;
    k.phase = (uint32_t)phase;
    return k;
}

/* ---- the file's entries --------------------------------------------------------- */

static const ah_rf_field tt_fields[] = {
    {AH_RF_STR, offsetof(tt_entry, spec)},     {AH_RF_U32, offsetof(tt_entry, phase)},
    {AH_RF_F64, offsetof(tt_entry, ms)},       {AH_RF_STR, offsetof(tt_entry, steps)},
    {AH_RF_U64, offsetof(tt_entry, tuned_at)}, {AH_RF_STR, offsetof(tt_entry, version)},
};

static int tt_valid(const void *entry)
{
    const tt_entry *e = entry;
    return e->phase < AH_PHASE_COUNT && isfinite(e->ms) && e->ms > 0;
}

static const ah_rf_format tt_format = {
    .magic = "AHTUNETB",
    .format = 1,
    .max_str = TT_MAX_STR,
    .max_file = 32u << 20,
    .max_entries = 65536,
    .label = "tune table",
    .not_this = "not a tune table",
    .entry_word = "entry",
    .large_is_foreign = 0,
    .entry_size = sizeof(tt_entry),
    .key_fp = 1,
    .field = tt_fields,
    .n_fields = sizeof tt_fields / sizeof tt_fields[0],
    .stamp_off = offsetof(tt_entry, tuned_at),
    .valid = tt_valid,
};

const ah_rf_format *ah__tune_table_format(void) { return &tt_format; }

/* Read t->path into t. A refused file leaves t empty with t->note set; a
 * file of another user is read-only to us. -1 on out-of-memory. */
static int load(ah_tune_table *t)
{
    if (!*t->path) return 0;
    ah_rf_outcome out;
    return ah__rf_load(&tt_format, t->path, &t->a, &out, &t->read_only, &t->note);
}

static char *table_path(const ah_host *h)
{
    /* check-records beside the scan cache; "": none */
    return ah__rf_beside(h->check_path, "tune-table");
}

static ah_tune_table *table_new(const ah_host *h)
{
    ah_tune_table *t = ah__calloc(1, sizeof *t);
    if (!t) return NULL;
    if (!(t->path = table_path(h)) || load(t) != 0) {
        ah__tune_table_free(t);
        return NULL;
    }
    return t;
}

ah_tune_table *ah__tune_table_get(ah_host *h)
{
    pthread_mutex_lock(&h->lock);
    ah_tune_table *t = h->tune;
    if (!t && (t = h->tune = table_new(h)) && t->note) ah__log(AH_LOG_WARN, "%s", t->note);
    pthread_mutex_unlock(&h->lock);
    return t;
}

/* Keep a stale note for the table's lifetime (under the lock). */
static const char *keep_why(ah_host *h, ah_tune_table *t, char *s)
{
    if (!s) return NULL;
    pthread_mutex_lock(&h->lock);
    char **g = ah__realloc(t->why, (t->n_why + 1) * sizeof *g);
    if (g) {
        t->why = g;
        g[t->n_why++] = s;
    }
    pthread_mutex_unlock(&h->lock);
    if (!g) ah__free(s);
    return g ? s : NULL;
}

/* The key text of an entry: its spec's (ah__tune_spec_key), and for a
 * mixed step's entry what ran the step: "|mixed whole", or "|mixed split "
 * and the decode plugin's name, version, file identity, content and
 * configuration hashes, so that a changed decode plugin file or
 * configuration leaves the entry untuned as the entry's own plugin's does.
 * NULL on out-of-memory or an unknown decode plugin. */
static char *entry_key(const ah_host *h, const ah_layer_spec *spec, ah_mixed_steps mixed,
                       const char *decode_plugin)
{
    char *sk = ah__tune_spec_key(spec);
    if (!sk || mixed == AH_MIXED_STEPS_CONFIG) return sk;
    char *out = NULL;
    if (mixed == AH_MIXED_STEPS_WHOLE) out = ah__asprintf("%s|mixed whole", sk);
    else {
        const int i = decode_plugin ? ah__host_find(h, decode_plugin) : -1;
        if (i >= 0) {
            const ah_record_key d = ah__record_key_of(h, h->scan.plugins[i]);
            char *dt = ah__record_key_file_text(&d);
            if (dt) out = ah__asprintf("%s|mixed split %s", sk, dt);
            ah__free(dt);
        }
    }
    ah__free(sk);
    return out;
}

/* The entry of plugin under key text sk (freed here) and phase; why (may
 * be NULL: no note is made) as ah__tune_lookup's. */
static int lookup(ah_host *h, const char *plugin, char *sk, ah_phase phase, double *ms,
                  const char **steps, const char **why)
{
    if (why) *why = NULL;
    ah_tune_table *t = ah__tune_table_get(h);
    int i = ah__host_find(h, plugin);
    if (!sk || !t || i < 0 || !h->scan.plugins[i]->info.caps || !h->scan.plugins[i]->info.path) {
        ah__free(sk);
        return 0;
    }
    const ah_plugin_rec *rec = h->scan.plugins[i];
    tt_entry key = key_of(h, rec, sk, phase);
    int found = 0, stale = 0, other_device = 0;
    for (uint32_t k = 0; k < t->a.n && !found; k++) {
        const tt_entry *e = (const tt_entry *)t->a.e + k;
        if (!streq(e->spec, sk) || e->phase != (uint32_t)phase || !streq(e->k.path, key.k.path))
            continue;
        if (same_slot(e, &key) && same_file(e, &key)) {
            *ms = e->ms;
            *steps = e->steps;
            found = 1;
        } else if (same_slot(e, &key)) stale = 1;
        else other_device = 1;
    }
    ah__free(sk);
    if (!why) return found;
    if (!found && stale)
        *why = keep_why(h, t,
                        ah__asprintf("the plugin file of %s changed since it was tuned (run "
                                     "attnhost tune)",
                                     plugin));
    else if (!found && other_device)
        *why = keep_why(h, t,
                        ah__asprintf("%s was tuned on another device, driver or "
                                     "configuration (run attnhost tune)",
                                     plugin));
    return found;
}

int ah__tune_lookup(ah_host *h, const char *plugin, const ah_layer_spec *spec, ah_phase phase,
                    double *ms, const char **steps, const char **why)
{
    return lookup(h, plugin, entry_key(h, spec, AH_MIXED_STEPS_CONFIG, NULL), phase, ms, steps,
                  why);
}

int ah__tune_lookup_mixed(ah_host *h, const char *prefill_plugin, const char *decode_plugin,
                          const ah_layer_spec *spec, double *ms)
{
    /* no stale note: bindings look these up at every creation */
    const char *steps;
    const ah_mixed_steps how = decode_plugin ? AH_MIXED_STEPS_SPLIT : AH_MIXED_STEPS_WHOLE;
    return lookup(h, prefill_plugin, entry_key(h, spec, how, decode_plugin), AH_PHASE_PREFILL, ms,
                  &steps, NULL);
}

/* ---- public API ------------------------------------------------------------------ */

/* A caller's entry's kind: a mixed step's, or CONFIG (a phase entry) for
 * callers built before ah_tune_entry.mixed. */
static ah_mixed_steps mixed_of(const ah_tune_entry *x)
{
    return AH_HAS_FIELD(x, ah_tune_entry, decode_plugin) ? x->mixed : AH_MIXED_STEPS_CONFIG;
}

ah_status ah_host_record_tune(ah_host *h, const ah_tune_entry *entries, size_t n, ah_error *err)
{
    if (err) err->msg[0] = '\0';
    if (!h || (!entries && n))
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "ah_host_record_tune: NULL argument");
    for (size_t k = 0; k < n; k++) {
        const ah_tune_entry *x = &entries[k];
        if (x->struct_size < offsetof(ah_tune_entry, mixed) || !x->plugin || !x->spec ||
            (unsigned)x->phase >= AH_PHASE_COUNT || !isfinite(x->ms) || x->ms <= 0)
            return ah__fail(
                err, AH_ERR_INVALID_ARGUMENT,
                "ah_host_record_tune: entry %zu: a short struct, a NULL plugin or spec, a "
                "bad phase or a time that is not positive",
                k);
        const ah_mixed_steps mixed = mixed_of(x);
        if (mixed != AH_MIXED_STEPS_CONFIG && mixed != AH_MIXED_STEPS_WHOLE &&
            mixed != AH_MIXED_STEPS_SPLIT)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "ah_host_record_tune: entry %zu: mixed is %d, not 0 (a phase), "
                            "WHOLE or SPLIT",
                            k, (int)mixed);
        const char *need[2] = {x->plugin, mixed == AH_MIXED_STEPS_SPLIT ? x->decode_plugin : ""};
        if (!need[1])
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "ah_host_record_tune: entry %zu: a split mixed step without its "
                            "decode_plugin",
                            k);
        for (int j = 0; j < 2 && *need[j]; j++) {
            int i = ah__host_find(h, need[j]);
            if (i < 0) return ah__fail(err, AH_ERR_NOT_FOUND, "no plugin named %s", need[j]);
            if (h->scan.plugins[i]->info.state != AH_PLUGIN_AVAILABLE)
                return ah__fail(err, AH_ERR_UNAVAILABLE, "plugin %s is not available here: %s",
                                need[j], h->scan.plugins[i]->info.reason);
        }
    }
    char *path = table_path(h);
    if (!path) goto oom;
    if (!*path) {
        ah__free(path);
        return ah__fail(err, AH_ERR_IO,
                        "tune table not written: no scan cache ([search] cache), so "
                        "no tune table");
    }
    /* Read the file afresh: another process may have written it since. */
    ah_tune_table *t = ah__calloc(1, sizeof *t);
    if (!t) {
        ah__free(path);
        goto oom;
    }
    t->path = path;
    if (load(t) != 0) {
        ah__tune_table_free(t);
        goto oom;
    }
    if (t->read_only) {
        char msg[700];
        snprintf(msg, sizeof msg, "%s is another user's (read-only here)%s%s", t->path,
                 t->note ? ": " : "", t->note ? t->note : "");
        ah__tune_table_free(t);
        return ah__fail(err, AH_ERR_IO, "tune table not written: %s", msg);
    }
    uint64_t now = (uint64_t)time(NULL);
    for (size_t k = 0; k < n; k++) {
        const ah_tune_entry *x = &entries[k];
        const ah_plugin_rec *rec = h->scan.plugins[ah__host_find(h, x->plugin)];
        const ah_mixed_steps mixed = mixed_of(x);
        char *sk = entry_key(h, x->spec, mixed, x->decode_plugin);
        if (!sk) goto oom_t;
        tt_entry key = key_of(h, rec, sk, mixed ? AH_PHASE_PREFILL : x->phase), e = key;
        /* replace the same slot; drop entries of vanished files */
        ah__rf_prune(&tt_format, &t->a, same_slot_v, &key);
        int copied = ah__record_key_dup(&e.k, &key.k);
        e.ms = x->ms;
        e.tuned_at = now;
        e.spec = sk;
        e.steps = ah__strdup(x->steps ? x->steps : "");
        e.version = ah__strdup(AH_VERSION_STRING);
        if (copied != 0 || !e.steps || !e.version || ah__rf_add(&tt_format, &t->a, &e) != 0) {
            ah__rf_entry_free(&tt_format, &e);
            goto oom_t;
        }
    }
    char why[900];
    int w = ah__rf_save(&tt_format, t->path, &t->a, why, sizeof why);
    if (w < 0) goto oom_t;
    ah__tune_table_free(t);
    if (w > 0) return ah__fail(err, AH_ERR_IO, "tune table not written: %s", why);
    return AH_OK;
oom_t:
    ah__tune_table_free(t);
oom:
    return ah__fail(err, AH_ERR_OUT_OF_MEMORY, "out of memory while writing the tune table");
}

ah_status ah_host_tuned(ah_host *h, const char *plugin, const ah_layer_spec *spec, ah_phase phase,
                        double *ms)
{
    if (!h || !plugin || !spec || !ms || (unsigned)phase >= AH_PHASE_COUNT)
        return AH_ERR_INVALID_ARGUMENT;
    const char *steps, *why;
    *ms = 0;
    return ah__tune_lookup(h, plugin, spec, phase, ms, &steps, &why) ? AH_OK : AH_ERR_NOT_FOUND;
}

const char *ah_host_tune_table_path(ah_host *h)
{
    ah_tune_table *t = h ? ah__tune_table_get(h) : NULL;
    return t ? t->path : "";
}

const char *ah_host_tune_table_note(ah_host *h)
{
    ah_tune_table *t = h ? ah__tune_table_get(h) : NULL;
    return t && t->note ? t->note : "";
}
