/*
 * The host services each plugin receives: logging tagged with the plugin's
 * name, the core allocator, typed values of its own [plugin.<name>]
 * configuration keys and the hardware facts. Each plugin gets its own table (host_data points at a
 * small per-plugin block) so the config getters need no name argument and a plugin
 * can never read another plugin's section.
 *
 * Logging: one line per call on stderr, "attnhost[<plugin>] <level>: msg",
 * filtered by ATTNHOST_LOG = error | warn | info | debug (default warn),
 * read with secure_getenv when the services are created.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "plugin_keys.h"
#include "scan_int.h"

typedef struct services_data {
    char name[64];
    const ah_config *config;
    const ah_config_key *keys; /* declared keys; NULL until bound */
    uint32_t n_keys;
    int bound; /* keys known: the getters answer only these */
    ah_log_level level;
} services_data;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static ah_log_level level_from_env(void)
{
    const char *v = secure_getenv("ATTNHOST_LOG");
    if (v)
        for (int i = 0; i < 4; i++)
            if (strcmp(v, level_names[i]) == 0) return (ah_log_level)i;
    return AH_LOG_WARN;
}

static void svc_log(const ah_host_services *host, ah_log_level level, const char *msg)
{
    const services_data *d = host ? host->host_data : NULL;
    ah_log_level max = d ? d->level : AH_LOG_WARN;
    if ((unsigned)level > AH_LOG_DEBUG) level = AH_LOG_DEBUG;
    if (level > max) return;
    /* One fprintf per line: stdio's stream lock keeps lines from
     * interleaving between threads. */
    fprintf(stderr, "attnhost[%s] %s: %s\n", d ? d->name : "?", level_names[level],
            msg ? msg : "(null)");
}

static void *svc_alloc(const ah_host_services *host, size_t size)
{
    (void)host;
    return ah__malloc(size);
}

static void svc_free(const ah_host_services *host, void *ptr)
{
    (void)host;
    ah__free(ptr);
}

/* The declared row and effective text of key, or NULL (logged) when the
 * plugin did not declare it or the value does not parse (the host refuses
 * such a configuration at creation; a scan child may ask before that). */
static const ah_config_key *effective(const ah_host_services *host, const char *key,
                                      ah_plugin_value *v, const char **text)
{
    const services_data *d = host ? host->host_data : NULL;
    if (!d || !d->bound || !key) return NULL;
    const ah_config_key *k = ah__plugin_key_find(d->keys, d->n_keys, key);
    if (!k) {
        ah__log(AH_LOG_ERROR, "plugin %s asked for undeclared config key '%s'", d->name, key);
        return NULL;
    }
    const char *t = ah__config_plugin_key(d->config, d->name, key);
    if (!t) t = k->default_value ? k->default_value : "";
    char msg[256];
    if (ah__plugin_key_parse(k, t, v, msg, sizeof msg) != 0) {
        ah__log(AH_LOG_ERROR, "[plugin.%s] %s: %s", d->name, key, msg);
        return NULL;
    }
    *text = t;
    return k;
}

static int64_t svc_config_int(const ah_host_services *host, const char *key)
{
    ah_plugin_value v;
    const char *t;
    const ah_config_key *k = effective(host, key, &v, &t);
    if (!k) return 0;
    if (k->type == AH_KEY_FLOAT || k->type == AH_KEY_STRING) {
        ah__log(AH_LOG_ERROR, "config key '%s' is %s: read it with config_%s", key,
                ah__plugin_key_type_str(k->type), k->type == AH_KEY_FLOAT ? "float" : "str");
        return 0;
    }
    return v.i;
}

static double svc_config_float(const ah_host_services *host, const char *key)
{
    ah_plugin_value v;
    const char *t;
    const ah_config_key *k = effective(host, key, &v, &t);
    if (!k) return 0;
    if (k->type != AH_KEY_FLOAT && k->type != AH_KEY_INT) {
        ah__log(AH_LOG_ERROR, "config key '%s' is %s: read it with config_%s", key,
                ah__plugin_key_type_str(k->type), k->type == AH_KEY_STRING ? "str" : "int");
        return 0;
    }
    return v.f;
}

static const char *svc_config_str(const ah_host_services *host, const char *key)
{
    ah_plugin_value v;
    const char *t;
    return effective(host, key, &v, &t) ? t : NULL;
}

int ah__services_init(ah_host_services *s, void **data, const char *plugin_name,
                      const ah_config *config, const ah_hw_facts *hw)
{
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    s->abi_version = AH_ABI_VERSION;
    s->log = svc_log;
    s->alloc = svc_alloc;
    s->free = svc_free;
    s->config_int = svc_config_int;
    s->config_float = svc_config_float;
    s->config_str = svc_config_str;
    s->hw = hw;
    /* Out of memory leaves host_data NULL: every service still works (the
     * log tag reads "?", the config getters answer 0 / NULL), but a plugin probed that
     * way would not see its [plugin.<name>] keys and its scan result would
     * be wrong (and cached), so the callers fail with out-of-memory. */
    services_data *d = ah__calloc(1, sizeof *d);
    if (d) {
        snprintf(d->name, sizeof d->name, "%s", plugin_name ? plugin_name : "?");
        d->config = config;
        d->level = level_from_env();
    }
    s->host_data = d;
    *data = d;
    return d ? 0 : -1;
}

void ah__services_bind(void *data, const char *plugin_name, const ah_caps *caps)
{
    services_data *d = data;
    if (!d) return;
    if (plugin_name) snprintf(d->name, sizeof d->name, "%s", plugin_name);
    d->keys = caps ? caps->config_keys : NULL;
    d->n_keys = caps ? caps->n_config_keys : 0;
    d->bound = caps != NULL;
}

void ah__services_free(void *data) { ah__free(data); }

void ah__log(ah_log_level level, const char *fmt, ...)
{
    if (level > level_from_env()) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "attnhost %s: %s\n", level_names[(unsigned)level <= AH_LOG_DEBUG ? level : 3],
            msg);
}
