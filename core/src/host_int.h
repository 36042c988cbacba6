/*
 * The host object and what selection, binding and devices share of it.
 * Private to libattnhost.
 */
#ifndef AH_HOST_INT_H
#define AH_HOST_INT_H

#include <pthread.h>

#include <attnhost/attnhost.h>

#include "config.h"
#include "scan.h"

/* One device context of a plugin: opened the first time a binding needs
 * that device index, kept until the host goes. */
typedef struct ah_plugin_ctx {
    int32_t device_index;
    ah_context *ctx;
} ah_plugin_ctx;

/* One plugin loaded into this process: opened on first need (a
 * check_combination call or a binding), kept until the host goes. */
typedef struct ah_plugin_slot {
    ah_loaded_plugin *lp; /* NULL until loaded */
    ah_plugin_ctx *ctxs;  /* one per device index a binding asked for */
    uint32_t n_ctxs;
    char *load_error; /* why loading failed, remembered */
} ah_plugin_slot;

typedef struct ah_decision_cache ah_decision_cache;
typedef struct ah_tune_table ah_tune_table; /* tune_table.h */

/* The check record that applies to one scanned plugin (check_records.c). */
typedef struct ah_check_slot {
    int found; /* a record of this file, configuration and device */
    ah_check_record rec;
    char *stale; /* when none: why the file's nearest record does not
                    apply ("the plugin file changed since ..."), or NULL */
} ah_check_slot;

struct ah_host {
    ah_config config;
    ah_hw_facts hw;
    ah_scan_result scan;
    ah_plugin_slot *slots; /* parallel to scan.plugins */
    char *warnings;        /* configuration warnings, one per line */
    ah_decision_cache *decisions;
    ah_tune_table *tune;   /* the tune table, read on first need (tune_table.c) */
    ah_check_slot *checks; /* parallel to scan.plugins, read at creation */
    char *check_path;      /* check-records beside the scan cache; "": none */
    char *check_note;      /* why that file was ignored, or NULL */
    pthread_mutex_t lock;  /* slots, the decision cache and the tune table */
    char errmsg[1024];
};

/* Index of the plugin named name in host->scan, or -1. */
int ah__host_find(const ah_host *host, const char *name);

/* Load plugin i into the process (idempotent). Caller holds host->lock. */
ah_status ah__host_load(ah_host *host, int i, ah_error *err);

/* Load plugin i and open its context on device_index (once per plugin and
 * index; later calls return the same context). CPU plugins always get
 * index 0. Takes the lock. */
ah_status ah__host_open_context(ah_host *host, int i, int32_t device_index, ah_context **ctx,
                                ah_error *err);

/* Why a selection from ah_host_explain failed, or NULL for one that may
 * be bound. */
const char *ah__selection_error(const ah_selection *sel);

/* Read the check records beside cache_path for every scanned plugin. Fails
 * only on out-of-memory; a bad file is ignored with a warning. */
ah_status ah__host_checks_init(ah_host *host, const char *cache_path, ah_error *err);
void ah__host_checks_free(ah_host *host);
/* NULL when plugin i has a passing record here, else why not (in buf). */
const char *ah__host_not_checked(const ah_host *host, int i, char *buf, size_t cap);
/* The check-record file's format (record_file.h), for the record files' fuzzer. */
const struct ah_rf_format *ah__check_records_format(void);

/* Free the decision cache. */
void ah__decision_cache_free(ah_decision_cache *c);

#endif
