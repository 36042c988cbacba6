/*
 * The plugin under test with the host's real services (see ath.h): the same
 * ah__services_init / ah__services_bind the host's loader uses
 * (core/src/plugin_load.c), a configuration parsed by the host's INI parser
 * (ah__config_load) and values checked by its key parser.
 */
#include "ath.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "plugin_keys.h"
#include "scan.h"
#include "scan_int.h"

/* The configuration text of the keys set so far, parsed into h->config
 * (which the services read through the pointer they were given). */
static int reload(ath_host *h)
{
    size_t cap = 64 + sizeof h->name;
    for (int i = 0; i < h->n_set; i++) cap += strlen(h->set[i].key) + strlen(h->set[i].val) + 8;
    char *text = malloc(cap);
    if (!text) return -1;
    size_t n = (size_t)snprintf(text, cap, "[plugin.%s]\n", h->name);
    for (int i = 0; i < h->n_set; i++)
        n += (size_t)snprintf(text + n, cap - n, "%s = %s\n", h->set[i].key, h->set[i].val);
    ah__config_free(h->config);
    ah_error err;
    ah_status st = ah__config_load(h->config, NULL, text, "<test driver>", &err);
    free(text);
    if (st != AH_OK) {
        fprintf(stderr, "test driver configuration: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* A load that failed frees what it took (a driver that skips then exits
 * clean under LeakSanitizer) and leaves h empty. */
static int load_failed(ath_host *h)
{
    ath_close(h);
    return -1;
}

int ath_load(ath_host *h, const char *path)
{
    memset(h, 0, sizeof *h);
    ah__hw_facts_gather(&h->hw);
    h->config = calloc(1, sizeof *h->config);
    const char *base = strrchr(path, '/');
    snprintf(h->name, sizeof h->name, "%s", base ? base + 1 : path);
    char *dot = strstr(h->name, ".so");
    if (dot) *dot = '\0';
    if (!h->config || reload(h) ||
        ah__services_init(&h->svc, &h->svc_data, h->name, h->config, &h->hw) != 0) {
        fprintf(stderr, "%s: out of memory\n", path);
        return load_failed(h);
    }
    /* RTLD_NODELETE, as the host loads plugins: a plugin's worker threads
     * (OpenMP) may outlive its dlclose at exit */
    h->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h->dl) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return load_failed(h);
    }
    ah_plugin_entry_fn entry;
    *(void **)&entry = dlsym(h->dl, AH_PLUGIN_ENTRY_SYMBOL);
    const char *why = NULL;
    h->desc = entry ? entry(AH_ABI_VERSION, &h->svc, &why) : NULL;
    if (!h->desc) {
        fprintf(stderr, "%s: plugin entry refused: %s\n", path,
                entry ? (why ? why : "?") : "no " AH_PLUGIN_ENTRY_SYMBOL);
        return load_failed(h);
    }
    char msg[512];
    if (ah__descriptor_validate(h->desc, msg, sizeof msg) != 0) {
        fprintf(stderr, "%s: descriptor refused: %s\n", path, msg);
        return load_failed(h);
    }
    h->ops = h->desc->ops;
    /* Its own name from now on: the [plugin.<name>] section and log tag. */
    snprintf(h->name, sizeof h->name, "%s", h->desc->name);
    ah__services_bind(h->svc_data, h->desc->name, h->desc->caps);
    return reload(h) ? load_failed(h) : 0;
}

int ath_set(ath_host *h, const char *key, const char *val)
{
    const ah_caps *c = h->desc ? h->desc->caps : NULL;
    const ah_config_key *k = c ? ah__plugin_key_find(c->config_keys, c->n_config_keys, key) : NULL;
    if (!k) {
        fprintf(stderr, "[plugin.%s] %s: not a key the plugin declares\n", h->name, key);
        return -1;
    }
    ah_plugin_value v;
    char msg[256];
    if (ah__plugin_key_parse(k, val, &v, msg, sizeof msg) != 0) {
        fprintf(stderr, "[plugin.%s] %s: %s\n", h->name, key, msg);
        return -1;
    }
    int i = 0;
    while (i < h->n_set && strcmp(h->set[i].key, key) != 0) i++;
    if (i == (int)(sizeof h->set / sizeof h->set[0]) || strlen(key) >= sizeof h->set[i].key ||
        strlen(val) >= sizeof h->set[i].val) {
        fprintf(stderr, "[plugin.%s] %s: too many keys or too long\n", h->name, key);
        return -1;
    }
    if (i == h->n_set) h->n_set++;
    snprintf(h->set[i].key, sizeof h->set[i].key, "%s", key);
    snprintf(h->set[i].val, sizeof h->set[i].val, "%s", val);
    return reload(h);
}

int ath_set_kv(ath_host *h, const char *kv)
{
    const char *eq = strchr(kv, '=');
    char key[64];
    if (!eq || (size_t)(eq - kv) >= sizeof key) {
        fprintf(stderr, "'%s': want KEY=VALUE\n", kv);
        return -1;
    }
    snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
    return ath_set(h, key, eq + 1);
}

int ath_probe(ath_host *h)
{
    memset(&h->probe, 0, sizeof h->probe);
    h->probe.struct_size = sizeof h->probe;
    if (h->ops->probe(&h->svc, &h->probe) != AH_OK) {
        fprintf(stderr, "%s: probe failed: %s\n", h->name, h->probe.reason);
        return 1;
    }
    if (!h->probe.usable) {
        printf("skipped: %s\n", h->probe.reason);
        return 77;
    }
    return 0;
}

int ath_start(ath_host *h, const char *path)
{
    if (ath_load(h, path)) return 1;
    int rc = ath_probe(h);
    if (rc) {
        ath_close(h);
        return rc;
    }
    const ah_probe_info *pi = &h->probe;
    printf("device: %s (%s, %u SMs), %s\n", pi->device_name, pi->arch, pi->multiprocessors,
           pi->driver_version);
    return 0;
}

int ath_context(ath_host *h, int32_t device, int with_stream)
{
    const ah_context_options o = {sizeof(ah_context_options), device};
    const char *why = NULL;
    if (h->ops->context_create(&h->svc, &o, &h->ctx, &why) != AH_OK) {
        fprintf(stderr, "context_create: %s\n", why ? why : "?");
        h->ctx = NULL;
        return 1;
    }
    if (with_stream && h->ops->stream_create(h->ctx, &h->stream) != AH_OK) {
        fprintf(stderr, "stream_create: %s\n", h->ops->context_error(h->ctx));
        h->stream = NULL;
        return 1;
    }
    return 0;
}

int ath_open(ath_host *h, const char *path, int32_t device)
{
    if (ath_load(h, path)) return 1;
    int rc = ath_probe(h);
    if (!rc) rc = ath_context(h, device, 1);
    if (rc) ath_close(h);
    return rc;
}

void ath_close(ath_host *h)
{
    if (h->ctx) {
        if (h->stream) h->ops->stream_destroy(h->ctx, h->stream);
        h->ops->context_destroy(h->ctx);
    }
    if (h->dl) dlclose(h->dl);
    ah__services_free(h->svc_data);
    if (h->config) ah__config_free(h->config);
    free(h->config);
    memset(h, 0, sizeof *h);
}

const char *ath_arg_value(int argc, char **argv, int *i, const char *name)
{
    if (strcmp(argv[*i], name) != 0 || *i + 1 >= argc) return NULL;
    return argv[++*i];
}

int ath_usage(const char *prog, const char *synopsis)
{
    fprintf(stderr, "usage: %s %s\n", prog, synopsis);
    return 2;
}

int ath_take_options(int *argc, char **argv, const ath_opt *opts, int n_opts, ath_args *out)
{
    memset(out, 0, sizeof *out);
    int o = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        int k = 0;
        for (; k < n_opts; k++) {
            const size_t len = strlen(opts[k].name);
            if (strncmp(a, opts[k].name, len)) continue;
            if (!opts[k].key && !a[len]) break;
            if (opts[k].key && a[len] == '=' && a[len + 1]) break;
        }
        if (k < n_opts) {
            out->given |= 1u << k;
            if (opts[k].key && out->n < (int)(sizeof out->keys / sizeof out->keys[0])) {
                out->keys[out->n] = opts[k].key;
                out->vals[out->n++] = strchr(a, '=') + 1;
            }
            continue;
        }
        if (!strncmp(a, "--device=", 9)) {
            char *end = NULL;
            const long v = strtol(a + 9, &end, 10);
            if (!a[9] || *end || v < 0 || v > 65536) {
                fprintf(stderr, "%s: want an integer in 0..65536\n", a);
                return 1;
            }
            out->device = (int32_t)v;
            continue;
        }
        if (!strncmp(a, "--", 2) && a[2]) {
            fprintf(stderr, "unknown option %s\n", a);
            return 1;
        }
        argv[o++] = argv[i];
    }
    *argc = o;
    argv[o] = NULL;
    return 0;
}

int ath_apply(ath_host *h, const ath_args *a)
{
    for (int i = 0; i < a->n; i++)
        if (ath_set(h, a->keys[i], a->vals[i])) return -1;
    return 0;
}
