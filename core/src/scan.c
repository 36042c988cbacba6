/*
 * ah__scan: from search directories to one record per plugin file.
 *
 * Discovery (discovery.c) lists the files and refuses untrusted ones. Each
 * trusted file is identified (fstat + content hash of the same open file)
 * and looked up in the cache; a miss is scanned in a child process
 * (scan_child.c: the spawned plugin scanner, or a fork when the install has
 * none) or, in the in-process mode, right here, through the very same
 * load-validate-probe-encode path, so all modes produce identical records.
 * A plugin name already claimed by an earlier file is recorded as shadowed.
 * What is cached is decided in ah__cache_put: never a probe that said
 * "unusable here", which depends on the environment, not on the file. The
 * cache is rewritten only when something was scanned or it could not be
 * trusted.
 *
 * In-process mode gives no protection: a plugin that crashes takes the host
 * with it, and one that hangs hangs the host. It exists for sandboxes that
 * forbid fork.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "scan_int.h"

static ah_plugin_rec *refused(const char *path, const char *name, const char *reason)
{
    ah_plugin_rec *r = ah__rec_new();
    if (!r) return NULL;
    r->info.state = AH_PLUGIN_REJECTED;
    if (ah__rec_set(r, &r->info.path, path) || ah__rec_set(r, &r->info.name, name) ||
        ah__rec_set(r, &r->info.reason, reason)) {
        ah__rec_free(r);
        return NULL;
    }
    return r;
}

/* The file's identity as it is now (fstat: device, inode, size, mtime,
 * ctime) and, when hash is set, a content hash of the same open file.
 * Returns 0, or -1 with errno set. */
static int identify(const char *path, ah_plugin_rec *id, int hash)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    int rc = fstat(fd, &st);
    if (rc == 0 && hash) rc = ah__hash_fd(fd, &id->content_hash);
    int e = errno;
    close(fd);
    errno = e;
    if (rc != 0) return -1;
    id->dev = st.st_dev;
    id->ino = st.st_ino;
    id->size = st.st_size;
    id->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    id->ctime_ns = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
    return 0;
}

static ah_plugin_rec *scan_in_process(const char *path, const char *stem,
                                      const ah_scan_request *req)
{
    ah_buf b = {0};
    ah__scan_one(path, stem, req->config, req->hw, 1, &b);
    ah_plugin_rec *rec = NULL;
    char why[512];
    if (!b.oom && ah__rec_decode(b.p, b.len, &rec, why, sizeof why) != 0) rec = NULL;
    ah__buf_free(&b);
    return rec;
}

/* The scanner this scan spawns: resolved once, dropped (with a warning)
 * the first time it cannot be started, after which the scan forks. */
typedef struct scanner_state {
    int resolved; /* at the first file that needs a child */
    char *path;   /* NULL: fork */
} scanner_state;

static void scanner_give_up(scanner_state *sc, const char *why)
{
    ah__log(AH_LOG_WARN,
            "%s; scanning plugins in a forked child instead, where a plugin "
            "cannot use a GPU runtime this process has initialised (reinstall attnhost)",
            why);
    ah__free(sc->path);
    sc->path = NULL;
}

static ah_plugin_rec *scan_out_of_process(const ah_found_file *f, const ah_scan_request *req,
                                          scanner_state *sc, int *cacheable)
{
    int flags = 0;
    if (!sc->resolved) {
        sc->resolved = 1;
        if (!req->scanner) {
            char tried[2048], why[2200];
            if (!(sc->path = ah__scanner_locate(tried, sizeof tried))) {
                snprintf(why, sizeof why, "the plugin scanner is not installed (not found at %s)",
                         tried);
                scanner_give_up(sc, why);
            }
        } else if (req->scanner[0] && !(sc->path = ah__strdup(req->scanner))) {
            return NULL;
        }
    }
    ah_plugin_rec *rec = ah__scan_in_child(f->path, f->stem, req, sc->path, &flags);
    if (rec && (flags & AH__SCAN_NO_SCANNER)) {
        scanner_give_up(sc, rec->info.reason);
        ah__rec_free(rec);
        rec = ah__scan_in_child(f->path, f->stem, req, NULL, &flags);
    }
    *cacheable = !(flags & AH__SCAN_HOST_FAILURE);
    return rec;
}

/* Scan (or fetch from the cache) one trusted file. NULL: out of memory. */
static ah_plugin_rec *scan_file(const ah_found_file *f, const ah_scan_request *req, ah_cache *cache,
                                ah_scan_result *res, int *dirty, scanner_state *sc)
{
    double t0 = ah__now_ms();
    ah_plugin_rec id;
    memset(&id, 0, sizeof id);
    id.info.path = f->path;
    /* A warm start reads no plugin file: an unchanged identity (ctime
     * included, which no one can set back) trusts the hash stored with the
     * result, the way git trusts its index. Only a scan hashes the file. */
    int rc = identify(f->path, &id, 0);
    ah_cache_entry *e = rc == 0 && cache ? ah__cache_find(cache, &id, req->config) : NULL;
    if (rc == 0 && !e) rc = identify(f->path, &id, 1);
    if (rc != 0) {
        char reason[1024];
        snprintf(reason, sizeof reason, "refused: cannot read %s: %s", f->path, strerror(errno));
        return refused(f->path, f->stem, reason);
    }
    if (e) {
        ah_plugin_rec *rec = ah__rec_dup(e->rec);
        if (!rec) return NULL;
        e->used = 1;
        rec->info.from_cache = 1;
        res->n_cached++;
        return rec;
    }
    int cacheable = 1;
    ah_plugin_rec *rec = req->mode == AH_SCAN_IN_PROCESS
                             ? scan_in_process(f->path, f->stem, req)
                             : scan_out_of_process(f, req, sc, &cacheable);
    if (!rec) return NULL;
    /* The identity is the parent's view, taken before the child ran. */
    if (ah__rec_set(rec, &rec->info.path, f->path) != 0) {
        ah__rec_free(rec);
        return NULL;
    }
    rec->dev = id.dev;
    rec->ino = id.ino;
    rec->size = id.size;
    rec->mtime_ns = id.mtime_ns;
    rec->ctime_ns = id.ctime_ns;
    rec->content_hash = id.content_hash;
    rec->info.from_cache = 0;
    rec->info.scan_ms = ah__now_ms() - t0;
    res->n_scanned++;
    if (cache && cacheable) {
        /* Not every outcome is kept: see ah__cache_put. */
        int put = ah__cache_put(cache, rec, req->config);
        if (put < 0) {
            ah__rec_free(rec);
            return NULL;
        }
        if (put == 0) *dirty = 1;
    }
    return rec;
}

/* A descriptor name provided by an earlier accepted file wins; later ones
 * are listed as shadowed. */
static int mark_shadowed(ah_scan_result *res)
{
    for (uint32_t i = 0; i < res->n; i++) {
        ah_plugin_rec *r = res->plugins[i];
        if (r->info.state != AH_PLUGIN_AVAILABLE && r->info.state != AH_PLUGIN_UNAVAILABLE)
            continue;
        for (uint32_t j = 0; j < i; j++) {
            const ah_plugin_rec *w = res->plugins[j];
            if ((w->info.state == AH_PLUGIN_AVAILABLE || w->info.state == AH_PLUGIN_UNAVAILABLE) &&
                strcmp(w->info.name, r->info.name) == 0) {
                if (ah__rec_reason(r,
                                   "shadowed by %s (same plugin name '%s', earlier in the "
                                   "search path)",
                                   w->info.path, r->info.name) != 0)
                    return -1;
                r->info.state = AH_PLUGIN_REJECTED;
                r->info.caps = NULL;
                r->info.probe = NULL;
                break;
            }
        }
    }
    return 0;
}

void ah__scan_result_free(ah_scan_result *r)
{
    if (!r) return;
    for (uint32_t i = 0; i < r->n; i++) ah__rec_free(r->plugins[i]);
    ah__free(r->plugins);
    memset(r, 0, sizeof *r);
}

ah_status ah__scan(const ah_scan_request *req, ah_scan_result *out, ah_error *err)
{
    memset(out, 0, sizeof *out);
    double t0 = ah__now_ms();
    ah_found found;
    ah_cache cache;
    int use_cache = req->cache_path && req->cache_path[0];
    int dirty = 0;
    scanner_state sc = {0, NULL};
    memset(&cache, 0, sizeof cache);
    if (ah__discover(req->dirs, req->n_dirs, &found) != 0) goto oom_nofound;
    if (use_cache) {
        if (ah__cache_load(&cache, req->cache_path, ah__driver_fingerprint(req->hw)) != 0) goto oom;
        if (cache.note) {
            ah__log(AH_LOG_INFO, "%s", cache.note);
            dirty = 1; /* replace what could not be trusted */
        }
    }
    if (found.n && !(out->plugins = ah__calloc(found.n, sizeof *out->plugins))) goto oom;
    for (uint32_t i = 0; i < found.n; i++) {
        const ah_found_file *f = &found.files[i];
        ah_plugin_rec *rec = f->reason
                                 ? refused(f->path, f->stem, f->reason)
                                 : scan_file(f, req, use_cache ? &cache : NULL, out, &dirty, &sc);
        if (!rec) goto oom;
        out->plugins[out->n++] = rec;
    }
    if (mark_shadowed(out) != 0) goto oom;
    if (use_cache && dirty) {
        char why[1024];
        if (ah__cache_save(&cache, req->cache_path, why, sizeof why) != 0)
            ah__log(AH_LOG_WARN, "cannot write the scan cache: %s", why);
    }
    ah__free(sc.path);
    ah__cache_free(&cache);
    ah__found_free(&found);
    out->total_ms = ah__now_ms() - t0;
    return AH_OK;
oom:
    ah__free(sc.path);
    ah__cache_free(&cache);
    ah__found_free(&found);
oom_nofound:
    ah__scan_result_free(out);
    if (err) snprintf(err->msg, sizeof err->msg, "out of memory while scanning plugins");
    return AH_ERR_OUT_OF_MEMORY;
}
