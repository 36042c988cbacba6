/*
 * ah_host: configuration, hardware facts, the plugin scan, and the plugins
 * loaded into this process. Everything else (selection, binding) hangs off
 * a host.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "plugin_keys.h"
#include "host_int.h"
#include "library_dir.h"
#include "strbuf.h"
#include "tune_table.h"

#include <attnhost/plugin_util.h>

/* The install's plugin directory, beside the library itself. */
static char *plugin_dir_beside_library(void)
{
    char *lib = ah__library_dir();
    char *dir = lib ? ah__asprintf("%s/attnhost/plugins", lib) : NULL;
    ah__free(lib);
    return dir;
}

/* A unit test links the core statically: the library is the executable,
 * so also look beside <exe>/../lib. */
static char *plugin_dir_beside_executable(void)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return NULL;
    *slash = '\0';
    return ah__asprintf("%s/../lib/attnhost/plugins", exe);
}

static int dirs_push(char ***dirs, uint32_t *n, char *dir)
{
    if (!dir) return -1;
    for (uint32_t i = 0; i < *n; i++)
        if (strcmp((*dirs)[i], dir) == 0) {
            ah__free(dir);
            return 0;
        }
    char **grown = ah__realloc(*dirs, (*n + 1) * sizeof *grown);
    if (!grown) {
        ah__free(dir);
        return -1;
    }
    grown[(*n)++] = dir;
    *dirs = grown;
    return 0;
}

static void dirs_free(char **dirs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) ah__free(dirs[i]);
    ah__free(dirs);
}

/* Search order: $ATTNHOST_PLUGIN_PATH (ignored for set-uid processes),
 * the caller's directories, [search] paths, then the install's directory. */
static int collect_dirs(const ah_host_options *o, const ah_config *cfg, char ***dirs, uint32_t *n)
{
    int use_defaults = !(o && o->no_default_dirs);
    if (use_defaults) {
        const char *env = secure_getenv("ATTNHOST_PLUGIN_PATH");
        if (env && *env) {
            char *copy = ah__strdup(env), *save = NULL;
            if (!copy) return -1;
            for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save))
                if (dirs_push(dirs, n, ah__strdup(d))) {
                    ah__free(copy);
                    return -1;
                }
            ah__free(copy);
        }
    }
    for (uint32_t i = 0; o && i < o->n_plugin_dirs; i++)
        if (dirs_push(dirs, n, ah__strdup(o->plugin_dirs[i]))) return -1;
    for (uint32_t i = 0; i < cfg->search_paths.n; i++)
        if (dirs_push(dirs, n, ah__strdup(cfg->search_paths.items[i]))) return -1;
    if (use_defaults) {
        struct stat st;
        char *beside = plugin_dir_beside_library();
        if (beside && stat(beside, &st) == 0) {
            if (dirs_push(dirs, n, beside)) return -1;
        } else {
            ah__free(beside);
            char *exe_dir = plugin_dir_beside_executable();
            if (exe_dir && stat(exe_dir, &st) == 0) {
                if (dirs_push(dirs, n, exe_dir)) return -1;
            } else {
                ah__free(exe_dir);
            }
        }
        if (stat(ATTNHOST_INSTALL_PLUGIN_DIR, &st) == 0 &&
            dirs_push(dirs, n, ah__strdup(ATTNHOST_INSTALL_PLUGIN_DIR)))
            return -1;
    }
    return 0;
}

static char *default_cache_path(void)
{
    const char *xdg = secure_getenv("XDG_CACHE_HOME");
    if (xdg && *xdg == '/') return ah__asprintf("%s/attnhost/scan-cache", xdg);
    const char *home = secure_getenv("HOME");
    if (home && *home == '/') return ah__asprintf("%s/.cache/attnhost/scan-cache", home);
    return ah__strdup("");
}


/* [plugin.<name>] keys against the plugins' declared key tables. A section
 * for a plugin that is not installed here is a warning (one configuration
 * serves machines with different plugins); a key the plugin does not
 * declare, or a value its declaration refuses, is an error naming file,
 * line, section and key. */
static ah_status check_plugin_keys(ah_host *h, ah_error *err)
{
    ah_strbuf w = {0};
    for (uint32_t i = 0; i < h->config.n_plugin_keys; i++) {
        const ah_plugin_kv *kv = &h->config.plugin_keys[i];
        int p = ah__host_find(h, kv->plugin);
        if (p < 0) {
            ah__strbuf_printf(&w, "%s:%d: [plugin.%s] %s: no plugin named '%s' was found\n",
                              h->config.source, kv->line, kv->plugin, kv->key, kv->plugin);
            continue;
        }
        const ah_caps *caps = h->scan.plugins[p]->info.caps;
        if (!caps) continue; /* rejected or quarantined: already reported */
        const ah_config_key *k =
            ah__plugin_key_find(caps->config_keys, caps->n_config_keys, kv->key);
        char msg[512];
        ah_plugin_value v;
        if (k && ah__plugin_key_parse(k, kv->value, &v, msg, sizeof msg) == 0) continue;
        if (!k) {
            ah_strbuf d = {0};
            for (uint32_t j = 0; j < caps->n_config_keys; j++)
                ah__strbuf_printf(&d, "%s%s", j ? ", " : "", caps->config_keys[j].name);
            char *names = ah__strbuf_take(&d);
            snprintf(msg, sizeof msg, "unknown key (the plugin declares: %s)",
                     names && *names ? names : "none");
            ah__free(names);
        }
        if (err)
            snprintf(err->msg, sizeof err->msg, "%s:%d: [plugin.%s] %s: %s", h->config.source,
                     kv->line, kv->plugin, kv->key, msg);
        ah__free(ah__strbuf_take(&w));
        return AH_ERR_CONFIG;
    }
    h->warnings = ah__strbuf_take(&w);
    return h->warnings ? AH_OK : AH_ERR_OUT_OF_MEMORY;
}

static ah_status oom(ah_error *err, const char *what)
{
    if (err) snprintf(err->msg, sizeof err->msg, "out of memory while %s", what);
    return AH_ERR_OUT_OF_MEMORY;
}

ah_status ah_host_create(const ah_host_options *o, ah_host **out, ah_error *err)
{
    *out = NULL;
    if (err) err->msg[0] = '\0';
    if (o && o->struct_size < offsetof(ah_host_options, cache_path) + sizeof o->cache_path) {
        if (err)
            snprintf(err->msg, sizeof err->msg, "ah_host_options.struct_size %u is too small",
                     o->struct_size);
        return AH_ERR_ABI;
    }
    ah_host *h = ah__calloc(1, sizeof *h);
    if (!h) return oom(err, "creating the host");
    pthread_mutex_init(&h->lock, NULL);

    const char *path = o ? o->config_path : NULL;
    const char *text = o && !path ? o->config_text : NULL;
    ah_status s = ah__config_load(&h->config, path, text, text ? "<text>" : NULL, err);
    if (s != AH_OK) {
        pthread_mutex_destroy(&h->lock);
        ah__free(h);
        return s;
    }
    ah__hw_facts_gather(&h->hw);
    if (o &&
        o->struct_size >=
            offsetof(ah_host_options, ignore_require_checked) + sizeof o->ignore_require_checked &&
        o->ignore_require_checked)
        h->config.require_checked = 0;

    char **dirs = NULL;
    uint32_t n_dirs = 0;
    char *cache = NULL;
    if (collect_dirs(o, &h->config, &dirs, &n_dirs)) {
        s = oom(err, "collecting plugin directories");
        goto fail;
    }
    if (o && o->cache_path) cache = ah__strdup(o->cache_path);
    else if (h->config.cache_path)
        cache = ah__strdup(strcmp(h->config.cache_path, "none") ? h->config.cache_path : "");
    else cache = default_cache_path();
    if (!cache) {
        s = oom(err, "naming the scan cache");
        goto fail;
    }

    ah_scan_request req = {0};
    req.dirs = (const char *const *)dirs;
    req.n_dirs = n_dirs;
    req.mode = o && o->scan_mode != AH_SCAN_DEFAULT     ? o->scan_mode
               : h->config.scan_mode != AH_SCAN_DEFAULT ? h->config.scan_mode
                                                        : AH_SCAN_CHILD;
    req.timeout_ms = h->config.scan_timeout_ms ? h->config.scan_timeout_ms : 10000;
    req.cache_path = cache;
    req.config = &h->config;
    req.hw = &h->hw;
    s = ah__scan(&req, &h->scan, err);
    if (s != AH_OK) goto fail;
    h->slots = ah__calloc(h->scan.n ? h->scan.n : 1, sizeof *h->slots);
    if (!h->slots) {
        s = oom(err, "recording the plugin scan");
        goto fail;
    }
    if ((s = check_plugin_keys(h, err)) != AH_OK) {
        if (s == AH_ERR_OUT_OF_MEMORY) oom(err, "checking plugin keys");
        goto fail;
    }
    if ((s = ah__host_checks_init(h, cache, err)) != AH_OK) goto fail;
    dirs_free(dirs, n_dirs);
    ah__free(cache);
    *out = h;
    return AH_OK;

fail:
    dirs_free(dirs, n_dirs);
    ah__free(cache);
    ah_host_destroy(h);
    return s;
}

void ah_host_destroy(ah_host *h)
{
    if (!h) return;
    for (uint32_t i = 0; h->slots && i < h->scan.n; i++) {
        ah_plugin_slot *sl = &h->slots[i];
        for (uint32_t k = 0; k < sl->n_ctxs; k++) sl->lp->ops.context_destroy(sl->ctxs[k].ctx);
        ah__free(sl->ctxs);
        if (sl->lp) ah__plugin_unload(sl->lp);
        ah__free(sl->load_error);
    }
    ah__free(h->slots);
    ah__decision_cache_free(h->decisions);
    ah__tune_table_free(h->tune);
    ah__host_checks_free(h);
    ah__scan_result_free(&h->scan);
    ah__config_free(&h->config);
    ah__free(h->warnings);
    pthread_mutex_destroy(&h->lock);
    ah__free(h);
}

const char *ah_host_errmsg(const ah_host *h) { return h ? h->errmsg : "no host"; }
const ah_hw_facts *ah_host_hw_facts(const ah_host *h) { return &h->hw; }
size_t ah_host_plugin_count(const ah_host *h) { return h->scan.n; }

const ah_plugin_info *ah_host_plugin(const ah_host *h, size_t i)
{
    return i < h->scan.n ? &h->scan.plugins[i]->info : NULL;
}

const char *ah_host_config_warnings(const ah_host *h) { return h->warnings; }

static int table_cmp(const void *a, const void *b)
{
    return strcmp(((const ah_plugin_key_table *)a)->plugin,
                  ((const ah_plugin_key_table *)b)->plugin);
}

/* The declared key tables of the plugins the host accepted (available or
 * not; a shadowed file under a taken name is left out), by name. NULL with
 * *n = 0 when there are none; NULL with *n = 1 on out-of-memory. */
static ah_plugin_key_table *key_tables(const ah_host *h, uint32_t *n)
{
    *n = 0;
    if (!h || !h->scan.n) return NULL;
    ah_plugin_key_table *t = ah__calloc(h->scan.n, sizeof *t);
    if (!t) {
        *n = 1;
        return NULL;
    }
    for (uint32_t i = 0; i < h->scan.n; i++) {
        const ah_plugin_info *in = &h->scan.plugins[i]->info;
        if (!in->caps || ah__host_find(h, in->name) != (int)i) continue;
        t[(*n)++] = (ah_plugin_key_table){in->name, in->caps->config_keys, in->caps->n_config_keys};
    }
    qsort(t, *n, sizeof *t, table_cmp);
    return t;
}

ah_status ah_host_config_dump(const ah_host *h, int effective, char **text)
{
    *text = NULL;
    uint32_t n = 0;
    ah_plugin_key_table *t = key_tables(h, &n);
    if (!t && n) return AH_ERR_OUT_OF_MEMORY;
    ah_status s = ah__config_dump_plugins(h ? &h->config : NULL, effective, t, n, text);
    ah__free(t);
    return s;
}

ah_status ah_host_plugin_keys_markdown(const ah_host *h, char **text)
{
    *text = NULL;
    uint32_t n = 0;
    ah_plugin_key_table *t = key_tables(h, &n);
    if (!t && n) return AH_ERR_OUT_OF_MEMORY;
    ah_status s = ah__plugin_keys_markdown(t, n, text);
    ah__free(t);
    return s;
}

const char *ah_host_plugin_key_value(const ah_host *h, const char *plugin, const char *key,
                                     int *is_default)
{
    if (is_default) *is_default = 0;
    int i = h && plugin && key ? ah__host_find(h, plugin) : -1;
    const ah_caps *caps = i < 0 ? NULL : h->scan.plugins[i]->info.caps;
    const ah_config_key *k =
        caps ? ah__plugin_key_find(caps->config_keys, caps->n_config_keys, key) : NULL;
    if (!k) return NULL;
    const char *set = ah__config_plugin_key(&h->config, plugin, key);
    const char *def = k->default_value ? k->default_value : "";
    if (is_default) {
        /* The same value spelled differently ("on" for "true") is the default. */
        ah_plugin_value a, b;
        char msg[8];
        *is_default = !set || (ah__plugin_key_parse(k, set, &a, msg, sizeof msg) == 0 &&
                               ah__plugin_key_parse(k, def, &b, msg, sizeof msg) == 0 &&
                               ah__plugin_value_equal(k, &a, set, &b, def));
    }
    return set ? set : def;
}
