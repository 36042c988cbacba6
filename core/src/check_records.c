/*
 * Check records: what `attnhost check` found, per plugin file and device,
 * so [select] require_checked can keep a dropped-in plugin out of use until
 * the conformance suite has passed it on this machine.
 *
 * A record is keyed like the scan cache's entries: the plugin file's path,
 * identity (device, inode, size, mtime, ctime) and content hash as the scan
 * took them, the config hash of its [plugin.<name>] keys, the host ABI, and
 * the device the plugin probed (kind, name, arch, compute capability, driver
 * version; the CPU model for a CPU plugin). It applies only when every part
 * matches. Recording replaces the record of the same path, configuration
 * and device, so an upgraded file's old record goes when the new file is
 * checked; records of files gone from disk are dropped on write.
 *
 * File format (little-endian), check-records beside the scan cache:
 *   "AHCHECKR" | u32 format (1) | u32 count
 *   count x ( u32 length | entry )
 *   u64 FNV-1a of everything before
 * entry: strings are u32 length + bytes, in this order:
 *   path, plugin, plugin version, u64 dev, ino, size, mtime_ns, ctime_ns,
 *   content hash, config hash, u32 abi, device kind, compute capability,
 *   device name, arch, driver version, host cpu, u32 passed, failed,
 *   skipped, graph level, u64 checked_at, attnhost version
 * Any byte string is safe to read: a bad file is ignored as a whole, with a
 * note, never partly believed. Written through the scan cache's atomic
 * writer (0600 temp file + rename).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "error.h"
#include "host_int.h"
#include "record_file.h"
#include "record_key.h"
#include "scan_int.h"

#define CHK_MAX_STR 4096u

typedef struct chk_entry {
    ah_record_key k; /* no driver fingerprint */
    uint32_t passed, failed, skipped, graph_level;
    uint64_t checked_at;
    char *version;
} chk_entry;

_Static_assert(sizeof(chk_entry) <= AH_RF_ENTRY_MAX && offsetof(chk_entry, k) == 0,
               "a check record is an entry of record_file.h");

/* ---- entries ------------------------------------------------------------------ */

static const ah_rf_format chk_format;

static const chk_entry *rec_at(const ah_rf_entries *f, uint32_t k)
{
    return (const chk_entry *)f->e + k;
}

static int same_slot_v(const void *a, const void *b)
{
    return ah__record_key_same_slot(&((const chk_entry *)a)->k, &((const chk_entry *)b)->k);
}

static int applies(const chk_entry *e, const chk_entry *key)
{
    return ah__record_key_same_slot(&e->k, &key->k) && ah__record_key_same_file(&e->k, &key->k);
}

static void fill_record(const chk_entry *e, ah_check_record *r)
{
    memset(r, 0, sizeof *r);
    r->struct_size = sizeof *r;
    r->passed = e->passed;
    r->failed = e->failed;
    r->skipped = e->skipped;
    r->ok = e->failed == 0 && e->passed > 0;
    r->graph_level =
        e->graph_level < AH_GRAPH_LEVEL_COUNT ? (ah_graph_level)e->graph_level : AH_GRAPH_NEVER;
    r->checked_at = (int64_t)e->checked_at;
    time_t t = (time_t)e->checked_at;
    struct tm tm;
    if (gmtime_r(&t, &tm)) {
        strftime(r->date, sizeof r->date, "%Y-%m-%d", &tm);
        strftime(r->time_utc, sizeof r->time_utc, "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    snprintf(r->attnhost_version, sizeof r->attnhost_version, "%s", e->version ? e->version : "");
}

/* ---- the file's entries --------------------------------------------------------- */

static const ah_rf_field chk_fields[] = {
    {AH_RF_U32, offsetof(chk_entry, passed)},     {AH_RF_U32, offsetof(chk_entry, failed)},
    {AH_RF_U32, offsetof(chk_entry, skipped)},    {AH_RF_U32, offsetof(chk_entry, graph_level)},
    {AH_RF_U64, offsetof(chk_entry, checked_at)}, {AH_RF_STR, offsetof(chk_entry, version)},
};

static int chk_valid(const void *entry)
{
    return ((const chk_entry *)entry)->graph_level < AH_GRAPH_LEVEL_COUNT;
}

static const ah_rf_format chk_format = {
    .magic = "AHCHECKR",
    .format = 1,
    .max_str = CHK_MAX_STR,
    .max_file = 16u << 20,
    .max_entries = 4096,
    .label = "check records",
    .not_this = "not a check-record file",
    .entry_word = "record",
    .large_is_foreign = 1,
    .entry_size = sizeof(chk_entry),
    .key_fp = 0,
    .field = chk_fields,
    .n_fields = sizeof chk_fields / sizeof chk_fields[0],
    .stamp_off = offsetof(chk_entry, checked_at),
    .valid = chk_valid,
};

const ah_rf_format *ah__check_records_format(void) { return &chk_format; }

/* ---- the host's view ---------------------------------------------------------- */

/* Why the records of plugin rec's file do not apply, for the reason text:
 * the nearest record's difference, or NULL. */
static char *stale_note(const ah_rf_entries *f, const ah_record_key *key)
{
    for (uint32_t i = 0; i < f->n; i++) {
        const ah_record_key *e = &rec_at(f, i)->k;
        if (strcmp(e->path, key->path) != 0 || e->abi != key->abi) continue;
        ah_check_record r;
        fill_record(rec_at(f, i), &r);
        int device = ah__record_key_same_device(e, key);
        int file = ah__record_key_same_file(e, key);
        int config = e->config_hash == key->config_hash;
        if (device && config)
            return ah__asprintf("the plugin file changed since its check on %s", r.date);
        if (device && file)
            return ah__asprintf("its [plugin.%s] keys changed since its check on %s", key->plugin,
                                r.date);
        if (file && config)
            return ah__asprintf("its check on %s was on another device (%s)", r.date,
                                e->device_name ? e->device_name : "?");
    }
    return NULL;
}

static char *records_path(const char *cache) { return ah__rf_beside(cache, "check-records"); }

ah_status ah__host_checks_init(ah_host *h, const char *cache_path, ah_error *err)
{
    h->checks = ah__calloc(h->scan.n ? h->scan.n : 1, sizeof *h->checks);
    h->check_path = records_path(cache_path);
    if (!h->checks || !h->check_path) goto oom;
    if (!*h->check_path) return AH_OK;
    ah_rf_entries f = {0};
    ah_rf_outcome lo;
    int ro;
    if (ah__rf_load(&chk_format, h->check_path, &f, &lo, &ro, &h->check_note) != 0) goto oom;
    if (h->check_note) ah__log(AH_LOG_WARN, "%s", h->check_note);
    for (uint32_t i = 0; i < h->scan.n; i++) {
        const ah_plugin_rec *rec = h->scan.plugins[i];
        if (!rec->info.caps || !rec->info.path) continue;
        chk_entry key = {.k = ah__record_key_of(h, rec)};
        ah_check_slot *sl = &h->checks[i];
        for (uint32_t k = 0; k < f.n && !sl->found; k++)
            if (applies(rec_at(&f, k), &key)) {
                fill_record(rec_at(&f, k), &sl->rec);
                sl->found = 1;
            }
        if (!sl->found && f.n) sl->stale = stale_note(&f, &key.k); /* NULL: none (or no memory) */
    }
    ah__rf_clear(&chk_format, &f);
    return AH_OK;
oom:
    if (err) snprintf(err->msg, sizeof err->msg, "out of memory while reading check records");
    return AH_ERR_OUT_OF_MEMORY;
}

void ah__host_checks_free(ah_host *h)
{
    for (uint32_t i = 0; h->checks && i < h->scan.n; i++) ah__free(h->checks[i].stale);
    ah__free(h->checks);
    ah__free(h->check_path);
    ah__free(h->check_note);
    h->checks = NULL;
    h->check_path = h->check_note = NULL;
}

const char *ah__host_not_checked(const ah_host *h, int i, char *buf, size_t cap)
{
    const ah_check_slot *sl = h->checks ? &h->checks[i] : NULL;
    const char *name = h->scan.plugins[i]->info.name;
    if (sl && sl->found && sl->rec.ok) return NULL;
    if (sl && sl->found)
        snprintf(buf, cap,
                 "failed on this device on %s: %u of %u cases failed (run attnhost "
                 "check --plugin %s)",
                 sl->rec.date, sl->rec.failed, sl->rec.passed + sl->rec.failed + sl->rec.skipped,
                 name);
    else if (!h->check_path || !*h->check_path)
        snprintf(buf, cap, "not checked on this device: no scan cache, so no check records");
    else
        snprintf(buf, cap, "not checked on this device (run attnhost check --plugin %s)%s%s", name,
                 sl && sl->stale ? ": " : "", sl && sl->stale ? sl->stale : "");
    return buf;
}

/* ---- public API ------------------------------------------------------------------ */

ah_status ah_host_record_check(ah_host *h, const char *plugin, const ah_check_result *res,
                               ah_error *err)
{
    if (err) err->msg[0] = '\0';
    if (!h || !plugin || !res || res->struct_size < sizeof *res)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "ah_host_record_check: %s",
                        !h || !plugin || !res ? "NULL argument"
                                              : "ah_check_result.struct_size too small");
    int i = ah__host_find(h, plugin);
    if (i < 0) return ah__fail(err, AH_ERR_NOT_FOUND, "no plugin named %s", plugin);
    const ah_plugin_rec *rec = h->scan.plugins[i];
    if (rec->info.state != AH_PLUGIN_AVAILABLE)
        return ah__fail(err, AH_ERR_UNAVAILABLE, "plugin %s is not available here: %s", plugin,
                        rec->info.reason);
    if (!*h->check_path)
        return ah__fail(err, AH_ERR_IO,
                        "check record for %s not written: no scan cache ([search] "
                        "cache), so no check records",
                        plugin);
    ah_rf_entries f = {0};
    ah_rf_outcome lo;
    int ro;
    char *note = NULL;
    if (ah__rf_load(&chk_format, h->check_path, &f, &lo, &ro, &note) != 0) goto oom;
    if (ro && lo != AH_RF_OK) {
        char msg[900];
        snprintf(msg, sizeof msg, "%s (read-only here)", note ? note : h->check_path);
        ah__free(note);
        return ah__fail(err, AH_ERR_IO, "check record for %s not written: %s", plugin, msg);
    }
    ah__free(note);

    ah_record_key key = ah__record_key_of(h, rec);
    chk_entry e;
    memset(&e, 0, sizeof e);
    int copied = ah__record_key_dup(&e.k, &key);
    e.passed = res->passed;
    e.failed = res->failed;
    e.skipped = res->skipped;
    e.graph_level =
        (uint32_t)res->graph_level < AH_GRAPH_LEVEL_COUNT ? (uint32_t)res->graph_level : 0;
    e.checked_at = (uint64_t)time(NULL);
    e.version = ah__strdup(AH_VERSION_STRING);
    /* Replace the record of the same slot; drop those of vanished files. */
    if (copied == 0 && e.version) ah__rf_prune(&chk_format, &f, same_slot_v, &e);
    if (copied != 0 || !e.version || ah__rf_add(&chk_format, &f, &e) != 0) {
        ah__rf_entry_free(&chk_format, &e);
        ah__rf_clear(&chk_format, &f);
        goto oom;
    }
    char why[900];
    int w = ah__rf_save(&chk_format, h->check_path, &f, why, sizeof why);
    ah__rf_clear(&chk_format, &f);
    if (w < 0) goto oom;
    if (w > 0) return ah__fail(err, AH_ERR_IO, "check record for %s not written: %s", plugin, why);
    return AH_OK;
oom:
    return ah__fail(err, AH_ERR_OUT_OF_MEMORY, "out of memory while recording the check of %s",
                    plugin);
}

ah_status ah_host_plugin_check(const ah_host *h, const char *plugin, ah_check_record *out)
{
    if (!out) return AH_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    int i = h && plugin ? ah__host_find(h, plugin) : -1;
    if (i < 0 || !h->checks || !h->checks[i].found) return AH_ERR_NOT_FOUND;
    *out = h->checks[i].rec;
    return AH_OK;
}

const char *ah_host_check_records_path(const ah_host *h)
{
    return h && h->check_path ? h->check_path : "";
}

const char *ah_host_check_records_note(const ah_host *h)
{
    return h && h->check_note ? h->check_note : "";
}
