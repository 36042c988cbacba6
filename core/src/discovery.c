/*
 * Finding plugin files, and refusing the ones nobody should trust.
 *
 * A plugin runs with the host's privileges, so whoever can write a plugin
 * file, or the directory it sits in, can run code in the host. The rules,
 * each refusal recorded with the reason:
 *  - A search entry must be an absolute path: an empty or relative entry
 *    would mean the current directory (or one below it), which is never
 *    searched.
 *  - The directory must be owned by root or by the effective user, not be
 *    world-writable, and be group-writable only when its group is root's
 *    or the process's own (the per-user-group convention); every ancestor
 *    of its real path must not be world-writable unless sticky (/tmp), since
 *    a writable ancestor lets anyone swap the directory itself.
 *  - The same owner and mode rules hold for each plugin file, which must be
 *    a regular file. A symlink is followed only when its target lies in the
 *    same directory as the link.
 * Only names ending in ".so" (and not starting with '.') are considered;
 * within a directory they are taken in name order. A missing directory is
 * skipped silently (the install directory need not exist). A stem already
 * provided by a trusted file of an earlier directory makes a later file
 * "shadowed".
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "scan_int.h"

/* Append a file; reason (printf) may be NULL for a trusted file. */
static int add(ah_found *f, const char *path, const char *stem, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int add(ah_found *f, const char *path, const char *stem, const char *fmt, ...)
{
    if (f->n == f->cap) {
        uint32_t cap = f->cap ? f->cap * 2 : 16;
        ah_found_file *p = ah__realloc(f->files, cap * sizeof *p);
        if (!p) return -1;
        f->files = p;
        f->cap = cap;
    }
    ah_found_file *x = &f->files[f->n];
    memset(x, 0, sizeof *x);
    x->path = ah__strdup(path);
    x->stem = ah__strdup(stem);
    if (fmt) {
        char buf[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        x->reason = ah__strdup(buf);
    }
    if (!x->path || !x->stem || (fmt && !x->reason)) {
        ah__free(x->path);
        ah__free(x->stem);
        ah__free(x->reason);
        return -1;
    }
    f->n++;
    return 0;
}

void ah__found_free(ah_found *f)
{
    for (uint32_t i = 0; i < f->n; i++) {
        ah__free(f->files[i].path);
        ah__free(f->files[i].stem);
        ah__free(f->files[i].reason);
    }
    ah__free(f->files);
    memset(f, 0, sizeof *f);
}

/* Owner and permission rules shared by directories and files. Returns NULL
 * when fine, else a static description of the problem. */
static const char *mode_problem(const struct stat *st)
{
    if (st->st_mode & S_IWOTH) return "is world-writable";
    if (st->st_uid != 0 && st->st_uid != geteuid()) return "is owned by another user";
    if ((st->st_mode & S_IWGRP) && st->st_gid != 0 && st->st_gid != getegid())
        return "is writable by a group other than root's or the process's";
    return NULL;
}

/* Every proper ancestor of an absolute real path: not world-writable unless
 * sticky. Returns 0, or -1 with the offending ancestor in bad. */
static int ancestors_ok(const char *real, char *bad, size_t cap)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", real);
    for (;;) {
        char *slash = strrchr(p, '/');
        if (!slash) return 0;
        if (slash == p) {
            if (p[1] == '\0') return 0; /* just checked "/" */
            p[1] = '\0';
        } else {
            *slash = '\0';
        }
        struct stat st;
        if (stat(p, &st) != 0) return 0; /* raced away: the directory check itself decides */
        if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
            snprintf(bad, cap, "%s", p);
            return -1;
        }
    }
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_plugin_name(const char *n)
{
    size_t len = strlen(n);
    return n[0] != '.' && len > 3 && strcmp(n + len - 3, ".so") == 0;
}

/* Check one entry of a trusted directory and append it. */
static int add_entry(ah_found *f, const char *dir, const char *realdir, const char *name)
{
    char path[PATH_MAX + 256], stem[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(stem, sizeof stem, "%.*s", (int)(strlen(name) - 3), name);
    struct stat st;
    if (lstat(path, &st) != 0)
        return add(f, path, stem, "refused: cannot stat %s: %s", path, strerror(errno));
    if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        if (!realpath(path, target))
            return add(f, path, stem, "refused: symlink %s does not resolve: %s", path,
                       strerror(errno));
        char *slash = strrchr(target, '/');
        size_t dlen = (size_t)(slash - target);
        if (dlen == 0) dlen = 1; /* target in "/" */
        if (strlen(realdir) != dlen || strncmp(target, realdir, dlen) != 0)
            return add(f, path, stem, "refused: symlink %s points to %s, outside %s", path, target,
                       realdir);
        if (stat(path, &st) != 0)
            return add(f, path, stem, "refused: cannot stat %s: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) return add(f, path, stem, "refused: %s is not a regular file", path);
    const char *why = mode_problem(&st);
    if (why)
        return add(f, path, stem, "refused: plugin file %s %s (mode %04o, uid %u)", path, why,
                   (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
    for (uint32_t i = 0; i < f->n; i++)
        if (!f->files[i].reason && strcmp(f->files[i].stem, stem) == 0)
            return add(f, path, stem, "shadowed by %s (same name, earlier in the search path)",
                       f->files[i].path);
    return add(f, path, stem, NULL);
}

static int scan_dir(ah_found *f, const char *entry)
{
    if (!entry || entry[0] == '\0')
        return add(f, "", "(empty)",
                   "refused: empty search path entry (the current directory is never searched)");
    if (entry[0] != '/')
        return add(f, entry, entry,
                   "refused: search path entry '%s' is relative (the current directory is "
                   "never searched; give an absolute path)",
                   entry);
    char dir[PATH_MAX];
    size_t len = strlen(entry);
    while (len > 1 && entry[len - 1] == '/') len--;
    if (len >= sizeof dir) return add(f, entry, entry, "refused: search path entry is too long");
    memcpy(dir, entry, len);
    dir[len] = '\0';

    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno == ENOENT) return 0;
        return add(f, dir, dir, "refused: cannot open plugin directory %s: %s", dir,
                   strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) return add(f, dir, dir, "refused: %s is not a directory", dir);
    const char *why = mode_problem(&st);
    if (why)
        return add(f, dir, dir, "refused: plugin directory %s %s (mode %04o, uid %u)", dir, why,
                   (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
    char real[PATH_MAX], bad[PATH_MAX];
    if (!realpath(dir, real))
        return add(f, dir, dir, "refused: cannot resolve %s: %s", dir, strerror(errno));
    if (ancestors_ok(real, bad, sizeof bad) != 0)
        return add(f, dir, dir,
                   "refused: plugin directory %s sits in %s, which is "
                   "world-writable without the sticky bit",
                   dir, bad);

    DIR *d = opendir(dir);
    if (!d)
        return add(f, dir, dir, "refused: cannot read plugin directory %s: %s", dir,
                   strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!is_plugin_name(de->d_name) || strlen(de->d_name) >= 256) continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **p = ah__realloc(names, nc * sizeof *p);
            if (!p) {
                rc = -1;
                break;
            }
            names = p;
            cap = nc;
        }
        if (!(names[n] = ah__strdup(de->d_name))) {
            rc = -1;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc == 0 && n) qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n; i++) {
        if (rc == 0) rc = add_entry(f, dir, real, names[i]);
        ah__free(names[i]);
    }
    ah__free(names);
    return rc;
}

int ah__discover(const char *const *dirs, uint32_t n_dirs, ah_found *out)
{
    memset(out, 0, sizeof *out);
    for (uint32_t i = 0; i < n_dirs; i++)
        if (scan_dir(out, dirs[i]) != 0) {
            ah__found_free(out);
            return -1;
        }
    return 0;
}
