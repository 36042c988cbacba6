/*
 * Loading a scanned plugin into the host process for binding.
 *
 * The scan ran in another process, possibly at another time (the cache), so
 * nothing it learned is trusted blindly: the file must still be the one that
 * was scanned (device, inode, size, mtime), and the descriptor the entry
 * returns now must validate again and match the record (name, device kind,
 * the whole caps table through the record codec's caps encoding). A plugin
 * that answers differently now than when it was scanned is refused, never
 * half-used.
 *
 * The host then calls the plugin only through normalized copies: the ops
 * table and caps are copied into zeroed full-size structs, so slots a
 * smaller (older) struct_size does not cover read as NULL / 0 and the host
 * never reads past what the plugin declared.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "alloc.h"
#include "error.h"
#include "scan_int.h"

static const char *state_name(ah_plugin_state s)
{
    static const char *const n[] = {"available", "unavailable", "rejected", "quarantined"};
    return (unsigned)s <= AH_PLUGIN_QUARANTINED ? n[s] : "in an unknown state";
}

/* 0 when the live descriptor matches the record; else -1 and what differs. */
static int compare(const ah_plugin_rec *rec, const ah_plugin_descriptor *d, const ah_caps *live,
                   char *what, size_t cap)
{
    if (strcmp(d->name, rec->info.name) != 0) {
        snprintf(what, cap, "name '%s' now, '%s' when scanned", d->name, rec->info.name);
        return -1;
    }
    if (d->device_kind != rec->info.device_kind) {
        snprintf(what, cap, "device kind %d now, %d when scanned", (int)d->device_kind,
                 (int)rec->info.device_kind);
        return -1;
    }
    if ((live->check_combination != NULL) != (rec->info.has_check_combination != 0)) {
        snprintf(what, cap, "check_combination %s now", live->check_combination ? "set" : "NULL");
        return -1;
    }
    ah_buf a = {0}, b = {0};
    ah__caps_encode(live, &a);
    ah__caps_encode(&rec->caps, &b);
    int rc = 0;
    if (a.oom || b.oom) {
        snprintf(what, cap, "out of memory comparing caps");
        rc = -2;
    } else if (a.len != b.len || memcmp(a.p, b.p, a.len) != 0) {
        snprintf(what, cap, "caps differ");
        rc = -1;
    }
    ah__buf_free(&a);
    ah__buf_free(&b);
    return rc;
}

ah_status ah__plugin_load(const ah_plugin_rec *rec, const ah_config *config, const ah_hw_facts *hw,
                          ah_loaded_plugin **out, ah_error *err)
{
    *out = NULL;
    const char *path = rec->info.path ? rec->info.path : "?";
    if (rec->info.state != AH_PLUGIN_AVAILABLE && rec->info.state != AH_PLUGIN_UNAVAILABLE)
        return ah__fail(err, AH_ERR_PLUGIN, "%s: plugin %s is %s: %s", path, rec->info.name,
                        state_name(rec->info.state), rec->info.reason ? rec->info.reason : "");
    struct stat st;
    if (stat(path, &st) != 0)
        return ah__fail(err, AH_ERR_IO,
                        "%s: cannot stat the plugin file: %s (it was scanned; "
                        "rescan)",
                        path, strerror(errno));
    int64_t mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    int64_t ctime_ns = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
    if (st.st_dev != rec->dev || st.st_ino != rec->ino || st.st_size != rec->size ||
        mtime_ns != rec->mtime_ns || ctime_ns != rec->ctime_ns)
        return ah__fail(err, AH_ERR_PLUGIN,
                        "%s: the plugin file changed on disk since it was "
                        "scanned (%s differs); rescan to use it",
                        path,
                        st.st_ino != rec->ino || st.st_dev != rec->dev ? "inode"
                        : st.st_size != rec->size                      ? "size"
                        : mtime_ns != rec->mtime_ns                    ? "mtime"
                                                                       : "ctime");

    ah_loaded_plugin *p = ah__calloc(1, sizeof *p);
    if (!p) return ah__fail(err, AH_ERR_OUT_OF_MEMORY, "out of memory loading %s", path);
    ah_status status;
    char why[512];
    dlerror();
    /* NODELETE: a plugin may leave threads behind (an OpenMP pool parked in
     * its code); unmapping it under them would crash the host later. */
    p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!p->dl) {
        const char *e = dlerror();
        status =
            ah__fail(err, AH_ERR_PLUGIN, "%s: dlopen failed: %s", path, e ? e : "unknown error");
        goto fail;
    }
    void *sym = dlsym(p->dl, AH_PLUGIN_ENTRY_SYMBOL);
    if (!sym) {
        status = ah__fail(err, AH_ERR_PLUGIN, "%s: no symbol " AH_PLUGIN_ENTRY_SYMBOL, path);
        goto fail;
    }
    ah_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);
    if (ah__services_init(&p->services, &p->services_data, rec->info.name, config, hw) != 0) {
        status = ah__fail(err, AH_ERR_OUT_OF_MEMORY, "out of memory loading %s", path);
        goto fail;
    }
    const char *refusal = NULL;
    const ah_plugin_descriptor *d = entry(AH_ABI_VERSION, &p->services, &refusal);
    if (!d) {
        status = ah__fail(err, AH_ERR_ABI, "%s: the plugin refused this host: %.512s", path,
                          refusal ? refusal : "(no reason given)");
        goto fail;
    }
    if (ah__descriptor_validate(d, why, sizeof why) != 0) {
        status = ah__fail(err, AH_ERR_ABI, "%s: %s", path, why);
        goto fail;
    }
    ah__caps_normalize(&p->caps_live, d->caps);
    ah__ops_normalize(&p->ops, d->ops);
    int c = compare(rec, d, &p->caps_live, why, sizeof why);
    if (c == -2) {
        status = ah__fail(err, AH_ERR_OUT_OF_MEMORY, "out of memory loading %s", path);
        goto fail;
    }
    if (c != 0) {
        status = ah__fail(err, AH_ERR_PLUGIN,
                          "%s: descriptor differs between scan and load (%s); "
                          "rescan",
                          path, why);
        goto fail;
    }
    ah__services_bind(p->services_data, d->name, &p->caps_live);
    p->desc = d;
    *out = p;
    return AH_OK;
fail:
    ah__plugin_unload(p);
    return status;
}

void ah__plugin_unload(ah_loaded_plugin *p)
{
    if (!p) return;
    if (p->dl) dlclose(p->dl);
    ah__services_free(p->services_data);
    ah__free(p);
}
