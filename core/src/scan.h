/*
 * Plugin discovery and scanning.
 *
 * Given the directories to search, find plugin files, refuse untrusted ones
 * (world-writable files or directories, symlinks leaving a trusted
 * directory), and learn each one's descriptor and probe result: from the
 * cache when the file, the host ABI and the drivers are unchanged, else by
 * loading it in a child process under a time limit (or in-process when
 * asked). A plugin that crashes, hangs, aborts, fails dlopen or returns
 * garbage is quarantined with its cause; it never takes the host down.
 */
#ifndef AH_SCAN_H
#define AH_SCAN_H

#include <stdint.h>
#include <sys/types.h>

#include <attnhost/attnhost.h>

#include "config.h"

/* Everything the host knows about one plugin file. info's pointers point
 * into this record (name, path, caps, probe); the record owns them all. */
typedef struct ah_plugin_rec {
    ah_plugin_info info;
    ah_caps caps; /* normalized deep copy: full size, lists owned,
                     check_combination NULL */
    ah_probe_info probe;
    /* file identity the scan result is keyed on */
    dev_t dev;
    ino_t ino;
    off_t size;
    int64_t mtime_ns;
    int64_t ctime_ns;      /* changes on every write, and cannot be set back */
    uint64_t content_hash; /* of the file as it was scanned */
} ah_plugin_rec;

typedef struct ah_scan_request {
    const char *const *dirs; /* in search order; a name found twice: the first wins,
                                the later ones are listed as shadowed (rejected) */
    uint32_t n_dirs;
    ah_scan_mode mode;       /* CHILD or IN_PROCESS (never DEFAULT here) */
    uint32_t timeout_ms;     /* per plugin, child mode */
    const char *cache_path;  /* NULL or "": no cache */
    const ah_config *config; /* for plugin keys given to probe */
    const ah_hw_facts *hw;
    /* child mode: the plugin scanner executable; NULL: the one installed
     * beside the library (ah__scanner_locate), "": none, fork this process
     * (what a broken install falls back to, with a warning). */
    const char *scanner;
} ah_scan_request;

typedef struct ah_scan_result {
    ah_plugin_rec **plugins;
    uint32_t n;
    double total_ms;
    uint32_t n_cached, n_scanned;
} ah_scan_result;

/* Scan. Fails only on out-of-memory; every per-plugin problem is recorded
 * in its record. */
ah_status ah__scan(const ah_scan_request *req, ah_scan_result *out, ah_error *err);
void ah__scan_result_free(ah_scan_result *r);

/* A plugin loaded into this process for binding. */
typedef struct ah_loaded_plugin {
    void *dl;
    const ah_plugin_descriptor *desc; /* the plugin's own */
    ah_plugin_ops ops;                /* normalized: full size, uncovered slots NULL */
    ah_caps caps_live;                /* normalized shallow copy, check_combination kept */
    ah_host_services services;        /* this plugin's services (config getters bound to it) */
    void *services_data;
} ah_loaded_plugin;

/* dlopen (RTLD_NOW|RTLD_LOCAL) the plugin of rec, call its entry, validate
 * the descriptor again and check it still matches what the scan recorded
 * (name, ABI, caps); re-checks the file identity first. On failure the
 * reason names the file. */
ah_status ah__plugin_load(const ah_plugin_rec *rec, const ah_config *config, const ah_hw_facts *hw,
                          ah_loaded_plugin **out, ah_error *err);
void ah__plugin_unload(ah_loaded_plugin *p);

/* Validate a descriptor a plugin returned: struct sizes, ABI major (the
 * message names both versions), name syntax, required slots, caps sanity
 * (known enum values, non-empty dtype sets, preferred sizes inside their
 * sets, ...). Returns 0 when fine, else -1 with the reason in why. */
int ah__descriptor_validate(const ah_plugin_descriptor *d, char *why, size_t cap);

/* Gather CPU facts: CPUID, XCR0, the Linux AMX permission request
 * (arch_prctl ARCH_REQ_XCOMP_PERM), core count, memory. */
void ah__hw_facts_gather(ah_hw_facts *hw);

/* Per-plugin host services (log, allocator, typed config getters for its section).
 * Returns -1 on out-of-memory: the table then works without config keys,
 * which callers must not hand to a plugin. */
int ah__services_init(ah_host_services *s, void **data, const char *plugin_name,
                      const ah_config *config, const ah_hw_facts *hw);
void ah__services_free(void *data);

#endif
