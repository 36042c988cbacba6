/*
 * The measured-speed table (`attnhost tune`, [select] policy = measured):
 * per plugin file, device and layer spec, the time each phase's tuning
 * steps took. Private to libattnhost; the public side is the
 * ah_host_*tune* functions in attnhost.h.
 */
#ifndef AH_TUNE_TABLE_H
#define AH_TUNE_TABLE_H

#include "host_int.h"

typedef struct ah_tune_table ah_tune_table;

/* The table of host h, read from disk on the first call (under h->lock)
 * and kept until the host goes; never NULL except on out-of-memory. */
ah_tune_table *ah__tune_table_get(ah_host *h);
void ah__tune_table_free(ah_tune_table *t);

/* The measured time of plugin for (spec, phase) on this host: 1 with *ms
 * and *steps (table-owned); 0 when none applies, with *why (table-owned,
 * may be NULL) saying why the nearest entry does not. */
int ah__tune_lookup(ah_host *h, const char *plugin, const ah_layer_spec *spec, ah_phase phase,
                    double *ms, const char **steps, const char **why);

/* The mixed step's time on this host for spec as the selection resolved it
 * for prefill_plugin: whole on prefill_plugin (decode_plugin NULL), or
 * split with decode_plugin. 1 with *ms; 0 when untuned. */
int ah__tune_lookup_mixed(ah_host *h, const char *prefill_plugin, const char *decode_plugin,
                          const ah_layer_spec *spec, double *ms);

/* The table's file format (record_file.h), for the record files' fuzzer. */
const struct ah_rf_format *ah__tune_table_format(void);

/* The key text of an unresolved layer spec, as the table stores it; caller frees. */
char *ah__tune_spec_key(const ah_layer_spec *spec);

#endif
