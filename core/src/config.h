/*
 * The host configuration: the INI file's contents after parsing (inih) and
 * validation. Every key is declared once in config_keys.def, which drives
 * the parser, the defaults, the documentation and `attnhost config --dump`.
 */
#ifndef AH_CONFIG_H
#define AH_CONFIG_H

#include <stdint.h>

#include <attnhost/attnhost.h>
#include <attnhost/plugin.h>

#include "range.h"

typedef struct ah_strlist {
    char **items;
    uint32_t n;
} ah_strlist;

typedef enum ah_fallback {
    AH_FALLBACK_ERROR = 0, /* a layer no listed backend can serve is an error */
    AH_FALLBACK_WARN = 1,  /* take any available backend that fits, with a warning */
    AH_FALLBACK_ALLOW = 2  /* the same, silently */
} ah_fallback;

/* [select] policy: how the default order's valid candidates are ordered. */
typedef enum ah_policy {
    AH_POLICY_PRIORITY = 0, /* the first that fits */
    AH_POLICY_MEASURED = 1  /* the fastest in the tune table (tune_table.c) */
} ah_policy;

/* [select] mixed_steps is an ah_mixed_steps (attnhost.h), never CONFIG. */

/* One [layer.<range>] section. */
typedef struct ah_layer_rule {
    char *section; /* "layer.0-3", for messages */
    ah_range range;
    ah_strlist priority; /* empty: not set */
    ah_strlist prefill_priority;
    ah_strlist decode_priority;
    char *backend; /* forced backend for these layers, or NULL */
} ah_layer_rule;

/* One key of a [plugin.<name>] section. */
typedef struct ah_plugin_kv {
    char *plugin, *key, *value;
    int line;
} ah_plugin_kv;

typedef struct ah_config {
    char *source; /* file name, or "<embedded>" / "<text>" */
    /* [search] */
    ah_strlist search_paths;
    char *cache_path;       /* NULL: default location; "" (or "none"): no cache */
    ah_scan_mode scan_mode; /* AH_SCAN_DEFAULT when not set */
    uint32_t scan_timeout_ms;
    /* [select] */
    ah_strlist priority, prefill_priority, decode_priority, disable;
    char *force;
    ah_fallback fallback;
    int require_checked; /* only plugins with a passing check record here */
    ah_policy policy;    /* priority or measured */
    ah_mixed_steps mixed_steps;
    /* [run] */
    int validate;
    /* [layer.<range>] in file order; later rules win */
    ah_layer_rule *layer_rules;
    uint32_t n_layer_rules;
    /* [plugin.<name>] */
    ah_plugin_kv *plugin_keys;
    uint32_t n_plugin_keys;
} ah_config;

/* Parse a configuration from path, or from text when path is NULL (source
 * then names it in messages). Both NULL: the built-in defaults. Errors name
 * file, line and key: "f.ini:12: [select] fallback: 'maybe' is not one of
 * error, warn, allow". On error *cfg is left empty (nothing to free). */
ah_status ah__config_load(ah_config *cfg, const char *path, const char *text, const char *source,
                          ah_error *err);
void ah__config_free(ah_config *cfg);

/* The value of [plugin.<name>] key, or NULL. */
const char *ah__config_plugin_key(const ah_config *cfg, const char *plugin, const char *key);

/* Render every declared key with doc and default (effective=0), or with the
 * values of cfg (effective=1; cfg may be NULL for 0). *text is malloc'ed. */
ah_status ah__config_dump(const ah_config *cfg, int effective, char **text);

/* One plugin's declared [plugin.<name>] keys (ah_caps.config_keys). */
typedef struct ah_plugin_key_table {
    const char *plugin;
    const ah_config_key *keys;
    uint32_t n;
} ah_plugin_key_table;

/* ah__config_dump, then a [plugin.<name>] section for each table (in the
 * order given): every declared key with its doc, type and default, written
 * '#key = default' (effective=0); or only the values, 'key = value' where
 * cfg sets it and '#key = default' where it does not (effective=1). Sections
 * cfg sets for plugins not in tables follow as written. Reads back. */
ah_status ah__config_dump_plugins(const ah_config *cfg, int effective,
                                  const ah_plugin_key_table *tables, uint32_t n_tables,
                                  char **text);

/* The reference of the tables' keys in Markdown, one block per plugin
 * between <!-- plugin-keys:NAME --> and <!-- /plugin-keys:NAME --> (what
 * docs/configuration.md embeds; `attnhost config --plugin-keys-markdown`). */
ah_status ah__plugin_keys_markdown(const ah_plugin_key_table *tables, uint32_t n_tables,
                                   char **text);

/* The built-in configuration text, used when ah__config_load gets neither
 * a path nor text (source "<embedded>"). */
const char *ah__default_config_text(void);

/* Parsing helpers shared with the model parser. */
/* Splits value at commas and trims each item; items may be "" (callers
 * check), an all-blank value gives an empty list. */
int ah__parse_strlist(const char *value, ah_strlist *out); /* comma-separated; -1 on OOM */
void ah__strlist_free(ah_strlist *l);

#endif
