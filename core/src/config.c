/*
 * The host configuration: [search], [select], [run], [layer.<range>] and
 * [plugin.<name>] sections read through the INI driver (inifile.c). The keys
 * come from config_keys.def, so parsing, defaults and the dump cannot drift
 * apart. A load either yields a complete configuration or an error naming
 * file, line, section and key, with nothing left to free.
 */
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "inifile.h"
#include "plugin_keys.h"

static const ah_key_choice scan_choices[] = {
    {"child", AH_SCAN_CHILD}, {"in_process", AH_SCAN_IN_PROCESS}, {NULL, 0}};
static const ah_key_arg arg_scan = {scan_choices, 0, 0};
static const ah_key_choice fallback_choices[] = {{"error", AH_FALLBACK_ERROR},
                                                 {"warn", AH_FALLBACK_WARN},
                                                 {"allow", AH_FALLBACK_ALLOW},
                                                 {NULL, 0}};
static const ah_key_arg arg_fallback = {fallback_choices, 0, 0};
static const ah_key_choice policy_choices[] = {
    {"priority", AH_POLICY_PRIORITY}, {"measured", AH_POLICY_MEASURED}, {NULL, 0}};
static const ah_key_arg arg_policy = {policy_choices, 0, 0};
static const ah_key_choice mixed_choices[] = {{"split", AH_MIXED_STEPS_SPLIT},
                                              {"whole", AH_MIXED_STEPS_WHOLE},
                                              {"measured", AH_MIXED_STEPS_MEASURED},
                                              {NULL, 0}};
static const ah_key_arg arg_mixed = {mixed_choices, 0, 0};
static const ah_key_arg arg_timeout = {NULL, 1, 3600000};

/* The struct each section's keys live in. */
#define AH_CFG_STRUCT_search ah_config
#define AH_CFG_STRUCT_select ah_config
#define AH_CFG_STRUCT_run ah_config
#define AH_CFG_STRUCT_layer ah_layer_rule

static const ah_key_def config_keys[] = {
#define AH_CONFIG_KEY(sec, key, type, arg, field, def, doc) \
    {#sec, #key, AH_INI_##type, arg, offsetof(AH_CFG_STRUCT_##sec, field), def, doc},
#include "config_keys.def"
#undef AH_CONFIG_KEY
};
#define N_KEYS (sizeof config_keys / sizeof config_keys[0])

/* Sections whose keys are fields of ah_config, in dump order. */
static const char *const global_sections[] = {"search", "select", "run"};

static const char *range_help = "a layer '7', a range '0-31', a stepped range '1-47/2', '*', "
                                "or a comma-separated list of these";

typedef struct parse_state {
    ah_config *cfg;
    const char *table_section; /* "search", "select", "run", "layer"; NULL: plugin */
    char plugin[AH_INI_MAX_LINE + 1];
    int key_line[N_KEYS];      /* where each [search]/[select]/[run] key was set */
    int rule_key_line[N_KEYS]; /* the same for the current [layer.<range>] */
} parse_state;

static void *section_base(parse_state *st)
{
    if (!strcmp(st->table_section, "layer"))
        return &st->cfg->layer_rules[st->cfg->n_layer_rules - 1];
    return st->cfg;
}

/* Sets every key of section that has a default. */
static ah_status apply_defaults(const char *section, void *base)
{
    char msg[256];
    for (size_t i = 0; i < N_KEYS; i++) {
        const ah_key_def *k = &config_keys[i];
        if (!k->def || strcmp(k->section, section)) continue;
        ah_status s = ah__key_set(k, base, k->def, msg, sizeof msg);
        if (s != AH_OK) return s;
    }
    return AH_OK;
}

static ah_status new_layer_rule(parse_state *st, const char *name, const char *range_text,
                                char *msg, size_t cap)
{
    ah_range range;
    char rmsg[256];
    if (!*range_text) {
        snprintf(msg, cap, "no layer range: write [layer.<range>] with %s", range_help);
        return AH_ERR_CONFIG;
    }
    if (ah__range_parse(range_text, &range, rmsg, sizeof rmsg)) {
        if (!strcmp(rmsg, "out of memory")) {
            snprintf(msg, cap, "out of memory");
            return AH_ERR_OUT_OF_MEMORY;
        }
        snprintf(msg, cap, "bad layer range: %s", rmsg);
        return AH_ERR_CONFIG;
    }
    ah_config *c = st->cfg;
    ah_layer_rule *rules = ah__realloc(c->layer_rules, (c->n_layer_rules + 1) * sizeof *rules);
    char *section = ah__strdup(name);
    if (!rules || !section) {
        if (rules) c->layer_rules = rules;
        ah__free(section);
        ah__range_free(&range);
        snprintf(msg, cap, "out of memory");
        return AH_ERR_OUT_OF_MEMORY;
    }
    c->layer_rules = rules;
    ah_layer_rule *r = &rules[c->n_layer_rules++];
    memset(r, 0, sizeof *r);
    r->section = section;
    r->range = range;
    memset(st->rule_key_line, 0, sizeof st->rule_key_line);
    ah_status s = apply_defaults("layer", r);
    if (s != AH_OK) snprintf(msg, cap, "out of memory");
    return s;
}

static int is_plugin_name(const char *s)
{
    if (!*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return 0;
    return 1;
}

static ah_status on_section(void *user, const char *name, int line, char *msg, size_t cap)
{
    parse_state *st = user;
    (void)line;
    for (size_t i = 0; i < sizeof global_sections / sizeof *global_sections; i++)
        if (!strcmp(name, global_sections[i])) {
            st->table_section = global_sections[i];
            return AH_OK;
        }
    if (!strncmp(name, "layer.", 6) || !strcmp(name, "layer")) {
        st->table_section = "layer";
        return new_layer_rule(st, name, name[5] ? name + 6 : "", msg, cap);
    }
    if (!strncmp(name, "plugin.", 7) || !strcmp(name, "plugin")) {
        const char *p = name[6] ? name + 7 : "";
        if (!is_plugin_name(p)) {
            if (*p) snprintf(msg, cap, "'%s' is not a plugin name (a-z, 0-9 and _ only)", p);
            else snprintf(msg, cap, "no plugin name: write [plugin.<name>]");
            return AH_ERR_CONFIG;
        }
        st->table_section = NULL;
        snprintf(st->plugin, sizeof st->plugin, "%s", p);
        return AH_OK;
    }
    snprintf(msg, cap,
             "unknown section; expected [search], [select], [run], [layer.<range>] or "
             "[plugin.<name>]");
    return AH_ERR_CONFIG;
}

static ah_status plugin_key(parse_state *st, const char *key, const char *value, int line,
                            char *msg, size_t cap)
{
    ah_config *c = st->cfg;
    for (uint32_t i = 0; i < c->n_plugin_keys; i++)
        if (!strcmp(c->plugin_keys[i].plugin, st->plugin) && !strcmp(c->plugin_keys[i].key, key)) {
            snprintf(msg, cap, "duplicate key (first set at line %d)", c->plugin_keys[i].line);
            return AH_ERR_CONFIG;
        }
    if (*value == ';' || *value == '#') { /* the dump would read back as a comment */
        snprintf(msg, cap, "'%s' starts with '%c', which reads as a comment", value, *value);
        return AH_ERR_CONFIG;
    }
    ah_plugin_kv *kvs = ah__realloc(c->plugin_keys, (c->n_plugin_keys + 1) * sizeof *kvs);
    if (kvs) c->plugin_keys = kvs;
    ah_plugin_kv kv = {ah__strdup(st->plugin), ah__strdup(key), ah__strdup(value), line};
    if (!kvs || !kv.plugin || !kv.key || !kv.value) {
        ah__free(kv.plugin);
        ah__free(kv.key);
        ah__free(kv.value);
        snprintf(msg, cap, "out of memory");
        return AH_ERR_OUT_OF_MEMORY;
    }
    c->plugin_keys[c->n_plugin_keys++] = kv;
    return AH_OK;
}

/* "priority, prefill_priority, ..." for a section, for unknown-key messages. */
static void section_keys(const char *section, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_KEYS && n < cap; i++)
        if (!strcmp(config_keys[i].section, section))
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", config_keys[i].name);
}

static ah_status on_key(void *user, const char *section, const char *key, const char *value,
                        int line, char *msg, size_t cap)
{
    parse_state *st = user;
    (void)section;
    if (!st->table_section) return plugin_key(st, key, value, line, msg, cap);
    int *lines = strcmp(st->table_section, "layer") ? st->key_line : st->rule_key_line;
    for (size_t i = 0; i < N_KEYS; i++) {
        const ah_key_def *k = &config_keys[i];
        if (strcmp(k->section, st->table_section) || strcmp(k->name, key)) continue;
        if (lines[i]) {
            snprintf(msg, cap, "duplicate key (first set at line %d)", lines[i]);
            return AH_ERR_CONFIG;
        }
        ah_status s = ah__key_set(k, section_base(st), value, msg, cap);
        if (s == AH_OK) lines[i] = line;
        return s;
    }
    char keys[512];
    section_keys(st->table_section, keys, sizeof keys);
    snprintf(msg, cap, "unknown key; this section takes %s", keys);
    return AH_ERR_CONFIG;
}

static size_t key_index(const char *section, const char *name)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (!strcmp(config_keys[i].section, section) && !strcmp(config_keys[i].name, name))
            return i;
    return N_KEYS;
}

/* Rules that span keys, checked once the whole file is read. */
static ah_status check_config(const parse_state *st, ah_error *err)
{
    const ah_config *c = st->cfg;
    if (!c->force) return AH_OK;
    for (uint32_t i = 0; i < c->disable.n; i++)
        if (!strcmp(c->disable.items[i], c->force)) {
            if (err)
                snprintf(err->msg, sizeof err->msg,
                         "%s:%d: [select] force: '%s' is also in disable (line %d)", c->source,
                         st->key_line[key_index("select", "force")], c->force,
                         st->key_line[key_index("select", "disable")]);
            return AH_ERR_CONFIG;
        }
    return AH_OK;
}

ah_status ah__config_load(ah_config *cfg, const char *path, const char *text, const char *source,
                          ah_error *err)
{
    memset(cfg, 0, sizeof *cfg);
    if (!path && !text) {
        text = ah__default_config_text();
        if (!source) source = "<embedded>";
    }
    if (!source) source = path ? path : "<text>";
    ah_config c = {0};
    ah_status s = AH_ERR_OUT_OF_MEMORY;
    c.source = ah__strdup(source);
    if (!c.source || apply_defaults("search", &c) || apply_defaults("select", &c) ||
        apply_defaults("run", &c)) {
        if (err) snprintf(err->msg, sizeof err->msg, "%s: out of memory", source);
        goto fail;
    }
    parse_state *st = ah__calloc(1, sizeof *st);
    if (!st) {
        if (err) snprintf(err->msg, sizeof err->msg, "%s: out of memory", source);
        goto fail;
    }
    st->cfg = &c;
    ah_ini_callbacks cb = {st, on_section, on_key};
    s = ah__ini_parse(path, text, source, &cb, err);
    if (s == AH_OK) s = check_config(st, err);
    ah__free(st);
    if (s != AH_OK) goto fail;
    *cfg = c;
    return AH_OK;
fail:
    ah__config_free(&c);
    return s;
}

void ah__config_free(ah_config *cfg)
{
    if (!cfg) return;
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(config_keys[i].section, "layer")) ah__key_clear(&config_keys[i], cfg);
    for (uint32_t r = 0; r < cfg->n_layer_rules; r++) {
        ah_layer_rule *rule = &cfg->layer_rules[r];
        for (size_t i = 0; i < N_KEYS; i++)
            if (!strcmp(config_keys[i].section, "layer")) ah__key_clear(&config_keys[i], rule);
        ah__free(rule->section);
        ah__range_free(&rule->range);
    }
    ah__free(cfg->layer_rules);
    for (uint32_t i = 0; i < cfg->n_plugin_keys; i++) {
        ah__free(cfg->plugin_keys[i].plugin);
        ah__free(cfg->plugin_keys[i].key);
        ah__free(cfg->plugin_keys[i].value);
    }
    ah__free(cfg->plugin_keys);
    ah__free(cfg->source);
    memset(cfg, 0, sizeof *cfg);
}

const char *ah__config_plugin_key(const ah_config *cfg, const char *plugin, const char *key)
{
    for (uint32_t i = 0; cfg && i < cfg->n_plugin_keys; i++)
        if (!strcmp(cfg->plugin_keys[i].plugin, plugin) && !strcmp(cfg->plugin_keys[i].key, key))
            return cfg->plugin_keys[i].value;
    return NULL;
}

/* ---------------------------------------------------------------------------
 * Dump
 * ------------------------------------------------------------------------ */

/* One key: its doc, its type and default, then "key = value" (commented out
 * when not set, so the dump reads back as the same configuration). */
/* "key = value", or "key=value" where the spaces would push the line past
 * what the reader takes: a dump must read back. */
static void dump_line(ah_strbuf *b, const char *prefix, const char *key, const char *value)
{
    int tight = strlen(prefix) + strlen(key) + strlen(value) + 3 > AH_INI_MAX_LINE;
    ah__strbuf_printf(b, "%s%s%s%s\n", prefix, key, tight ? "=" : " = ", value);
}

/* One key: its doc, its type and default, then "key = value" (commented out
 * when as_comment; "#key =" when there is no value). Host keys and plugin
 * keys both go through here, so the two read alike. */
static void dump_entry(ah_strbuf *b, const char *doc, const char *type, const char *def,
                       const char *key, const char *value, int documented, int as_comment)
{
    if (documented) {
        ah__strbuf_comment(b, doc ? doc : "");
        ah__strbuf_printf(b, "# Value: %s. Default: %s.\n", type, def ? def : "not set");
    }
    if (value) dump_line(b, as_comment ? "#" : "", key, value);
    else ah__strbuf_printf(b, "#%s =\n", key);
    if (documented) ah__strbuf_printf(b, "\n");
}

static void dump_key(ah_strbuf *b, const ah_key_def *k, const void *base, int documented,
                     int as_comment)
{
    char *value = NULL;
    if (base && ah__key_format(k, base, &value)) {
        b->failed = 1;
        return;
    }
    char type[300] = "";
    if (documented) ah__key_describe(k, type, sizeof type);
    dump_entry(b, k->doc, type, k->def, k->name, value, documented, as_comment);
    ah__free(value);
}

/* Default values of the layer keys, for the documented [layer.<range>]. */
static ah_status dump_layer_template(ah_strbuf *b)
{
    ah__strbuf_comment(b, "[layer.<range>] sections override the selection for some layers. "
                          "<range> is a layer '7', a range '0-31', a stepped range '1-47/2' "
                          "(every second layer), an open range '8-*', '*' for every layer, or a "
                          "comma-separated list of these. Sections apply in file order; a later "
                          "section wins where ranges overlap. For example:");
    ah__strbuf_printf(b, "#[layer.0-3]\n\n");
    ah_layer_rule rule;
    memset(&rule, 0, sizeof rule);
    ah_status s = apply_defaults("layer", &rule);
    for (size_t i = 0; s == AH_OK && i < N_KEYS; i++)
        if (!strcmp(config_keys[i].section, "layer")) dump_key(b, &config_keys[i], &rule, 1, 1);
    for (size_t i = 0; i < N_KEYS; i++)
        if (!strcmp(config_keys[i].section, "layer")) ah__key_clear(&config_keys[i], &rule);
    return s;
}

static int in_tables(const ah_plugin_key_table *t, uint32_t n, const char *plugin)
{
    for (uint32_t i = 0; i < n; i++)
        if (t[i].plugin && !strcmp(t[i].plugin, plugin)) return 1;
    return 0;
}

/* One declared plugin's section (see ah__config_dump_plugins). */
static void dump_plugin(ah_strbuf *b, const ah_config *cfg, const ah_plugin_key_table *t,
                        int effective)
{
    ah__strbuf_printf(b, "[plugin.%s]\n", t->plugin);
    if (!effective) ah__strbuf_printf(b, "\n");
    for (uint32_t i = 0; i < t->n; i++) {
        const ah_config_key *k = &t->keys[i];
        if (!k->name) continue;
        const char *set = effective ? ah__config_plugin_key(cfg, t->plugin, k->name) : NULL;
        char type[300] = "";
        if (!effective) ah__plugin_key_describe(k, type, sizeof type);
        dump_entry(b, k->doc, type, k->default_value, k->name, set ? set : k->default_value,
                   !effective, !set);
    }
    if (effective) ah__strbuf_printf(b, "\n");
}

ah_status ah__config_dump(const ah_config *cfg, int effective, char **text)
{
    return ah__config_dump_plugins(cfg, effective, NULL, 0, text);
}

ah_status ah__config_dump_plugins(const ah_config *cfg, int effective,
                                  const ah_plugin_key_table *tables, uint32_t n_tables, char **text)
{
    *text = NULL;
    if (effective && !cfg) return AH_ERR_INVALID_ARGUMENT;
    ah_strbuf b = {0};
    ah_config defaults;
    memset(&defaults, 0, sizeof defaults);
    const ah_config *shown = cfg;
    ah_status s = AH_OK;
    if (!effective) {
        s = apply_defaults("search", &defaults);
        if (s == AH_OK) s = apply_defaults("select", &defaults);
        if (s == AH_OK) s = apply_defaults("run", &defaults);
        shown = &defaults;
    }
    if (effective)
        ah__strbuf_printf(&b, "# attnhost configuration in effect (from %s)\n\n", cfg->source);
    else
        ah__strbuf_printf(&b, "# attnhost configuration: every key, its documentation and its "
                              "default.\n# Lines starting with # are comments; a key written "
                              "as '#key =' is not set.\n\n");
    for (size_t g = 0; s == AH_OK && g < sizeof global_sections / sizeof *global_sections; g++) {
        ah__strbuf_printf(&b, "[%s]\n", global_sections[g]);
        if (!effective) ah__strbuf_printf(&b, "\n");
        for (size_t i = 0; i < N_KEYS; i++)
            if (!strcmp(config_keys[i].section, global_sections[g]))
                dump_key(&b, &config_keys[i], shown, !effective, 0);
        if (effective) ah__strbuf_printf(&b, "\n");
    }
    if (s == AH_OK && !effective) {
        s = dump_layer_template(&b);
        ah__strbuf_comment(&b, "[plugin.<name>] sections hold keys for one plugin, which "
                               "declares them with their types and defaults (`attnhost config "
                               "--dump` lists the installed plugins' keys below this line). A "
                               "key the plugin does not declare, or a value it refuses, is an "
                               "error; a section for a plugin that was not found is a warning.");
    }
    for (uint32_t r = 0; s == AH_OK && effective && r < cfg->n_layer_rules; r++) {
        ah__strbuf_printf(&b, "[%s]\n", cfg->layer_rules[r].section);
        for (size_t i = 0; i < N_KEYS; i++) {
            const ah_key_def *k = &config_keys[i];
            char *v = NULL;
            if (strcmp(k->section, "layer")) continue;
            if (ah__key_format(k, &cfg->layer_rules[r], &v)) b.failed = 1;
            if (v) ah__strbuf_printf(&b, "%s = %s\n", k->name, v);
            ah__free(v);
        }
        ah__strbuf_printf(&b, "\n");
    }
    if (s == AH_OK && n_tables && !effective) ah__strbuf_printf(&b, "\n");
    for (uint32_t t = 0; s == AH_OK && t < n_tables; t++)
        dump_plugin(&b, cfg, &tables[t], effective);
    /* Sections for plugins without a table (not found), as written: one
     * section per plugin even where the file splits it. */
    for (uint32_t i = 0; s == AH_OK && effective && i < cfg->n_plugin_keys; i++) {
        const char *plugin = cfg->plugin_keys[i].plugin;
        int seen = in_tables(tables, n_tables, plugin);
        for (uint32_t j = 0; j < i && !seen; j++)
            seen = !strcmp(cfg->plugin_keys[j].plugin, plugin);
        if (seen) continue;
        ah__strbuf_printf(&b, "[plugin.%s]\n", plugin);
        for (uint32_t j = i; j < cfg->n_plugin_keys; j++)
            if (!strcmp(cfg->plugin_keys[j].plugin, plugin))
                dump_line(&b, "", cfg->plugin_keys[j].key, cfg->plugin_keys[j].value);
        ah__strbuf_printf(&b, "\n");
    }
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(config_keys[i].section, "layer")) ah__key_clear(&config_keys[i], &defaults);
    char *out = ah__strbuf_take(&b);
    if (s != AH_OK || !out) {
        ah__free(out);
        return AH_ERR_OUT_OF_MEMORY;
    }
    *text = out;
    return AH_OK;
}

/* Text for a Markdown table cell: '|' escaped, newlines as spaces. */
static void md_cell(ah_strbuf *b, const char *text)
{
    for (const char *p = text ? text : ""; *p; p++) {
        if (*p == '|') ah__strbuf_printf(b, "\\|");
        else ah__strbuf_printf(b, "%c", *p == '\n' ? ' ' : *p);
    }
}

ah_status ah__plugin_keys_markdown(const ah_plugin_key_table *tables, uint32_t n_tables,
                                   char **text)
{
    *text = NULL;
    ah_strbuf b = {0};
    for (uint32_t t = 0; t < n_tables; t++) {
        const ah_plugin_key_table *pt = &tables[t];
        ah__strbuf_printf(&b, "<!-- plugin-keys:%s -->\n#### [plugin.%s]\n\n", pt->plugin,
                          pt->plugin);
        if (!pt->n) ah__strbuf_printf(&b, "No keys.\n");
        else
            ah__strbuf_printf(&b,
                              "| key | value | default | meaning |\n| --- | --- | --- | --- |\n");
        for (uint32_t i = 0; i < pt->n; i++) {
            const ah_config_key *k = &pt->keys[i];
            char type[300];
            ah__plugin_key_describe(k, type, sizeof type);
            ah__strbuf_printf(&b, "| `%s` | ", k->name ? k->name : "");
            md_cell(&b, type);
            if (k->default_value && *k->default_value) {
                ah__strbuf_printf(&b, " | `");
                md_cell(&b, k->default_value);
                ah__strbuf_printf(&b, "` | ");
            } else ah__strbuf_printf(&b, " | (empty) | ");
            md_cell(&b, k->doc);
            ah__strbuf_printf(&b, " |\n");
        }
        ah__strbuf_printf(&b, "<!-- /plugin-keys:%s -->\n", pt->plugin);
    }
    char *out = ah__strbuf_take(&b);
    if (!out) return AH_ERR_OUT_OF_MEMORY;
    *text = out;
    return AH_OK;
}
