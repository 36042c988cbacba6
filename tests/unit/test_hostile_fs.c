/*
 * Hostile plugins and file systems, end to end through the public API.
 * Each case puts the ABI test backend (abi_good) in a directory of its own
 * next to the hostile one, and must end with a clear recorded reason for
 * the hostile plugin AND a host that still selects, binds and runs
 * abi_good:
 *  - a descriptor that differs between scan and load (abi_flip);
 *  - a plugin file replaced on disk after the scan: the live host refuses
 *    to load it, and the scan cache notices the change even when the size
 *    and mtime are forged back (the content hash);
 *  - a probe that calls exit() (abi_exit), in a child-process scan;
 *  - symlinks leaving a trusted directory (directly and through a chain);
 *  - world-writable plugin directories, files and ancestors;
 *  - a directory where scans race with a thread copying, renaming and
 *    deleting plugin files: every scan yields a record per file, and once
 *    the writes stop the cached results match the files' real contents.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "reliability_fixture.h"

static char root[] = "/tmp/ah_test_hostile_XXXXXX";
static char good_dir[1024];

static const char *so(const char *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s/abi_%s.so", ATTNHOST_TEST_PLUGIN_DIR, c, c);
    return buf;
}

static char *path_in(char *buf, size_t cap, const char *a, const char *b)
{
    if (snprintf(buf, cap, "%s/%s", a, b) >= (int)cap) abort();
    return buf;
}

/* Copy from to `to` (through a temporary and a rename when atomic). */
static int copy_file(const char *from, const char *to, mode_t mode, int atomic)
{
    char tmp[1200];
    if (snprintf(tmp, sizeof tmp, "%s.part", to) >= (int)sizeof tmp) return -1;
    const char *dst = atomic ? tmp : to;
    int in = open(from, O_RDONLY | O_CLOEXEC);
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    int rc = in >= 0 && out >= 0 ? 0 : -1;
    char buf[8192];
    ssize_t n;
    while (rc == 0 && (n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n) rc = -1;
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    if (rc == 0) chmod(dst, mode);
    if (rc == 0 && atomic && rename(tmp, to) != 0) rc = -1;
    return rc;
}

static char *make_dir(char *buf, size_t cap, const char *name, mode_t mode)
{
    path_in(buf, cap, root, name);
    CHECK_MSG(mkdir(buf, 0755) == 0, "mkdir %s: %s", buf, strerror(errno));
    chmod(buf, mode);
    return buf;
}

static ah_host *host_over(const char *const *dirs, uint32_t n, ah_scan_mode mode, const char *cache,
                          const char *config)
{
    ah_host_options o = rel_host_options(dirs, n, config);
    o.scan_mode = mode;
    o.cache_path = cache;
    ah_host *h = NULL;
    ah_error err;
    ah_status s = ah_host_create(&o, &h, &err);
    CHECK_MSG(s == AH_OK, "host: %s", err.msg);
    return h;
}

/* The plugin record whose file is path (NULL: none). */
static const ah_plugin_info *by_path(const ah_host *h, const char *path)
{
    for (size_t i = 0; i < ah_host_plugin_count(h); i++)
        if (strcmp(ah_host_plugin(h, i)->path, path) == 0) return ah_host_plugin(h, i);
    return NULL;
}

static void expect_reason(const ah_host *h, const char *path, ah_plugin_state st, const char *want)
{
    const ah_plugin_info *p = by_path(h, path);
    CHECK_MSG(p != NULL, "no record for %s", path);
    if (!p) return;
    CHECK_MSG(p->state == st, "%s: state %s, expected %s (reason: %s)", path,
              ah_plugin_state_str(p->state), ah_plugin_state_str(st), p->reason);
    CHECK_MSG(strstr(p->reason, want) != NULL, "%s: reason '%s' lacks '%s'", path, p->reason, want);
}

/* The host still serves abi_good: select, bind, plan, run both layers. */
static int serves_good(ah_host *h)
{
    ah_model *m = NULL;
    ah_selection *sel = NULL;
    ah_binding *b = NULL;
    ah_error err;
    rel_step s;
    rel_step_init(&s, 5);
    ah_binding_options bo = rel_binding_options();
    int ok = ah_model_parse(rel_model_text, "<rel>", &m, &err) == AH_OK &&
             ah_host_select_forced(h, m, "abi_good", &sel, &err) == AH_OK &&
             ah_binding_create(h, sel, &bo, &b, &err) == AH_OK;
    CHECK_MSG(ok, "abi_good no longer served: %s", err.msg);
    if (ok) {
        ok = ah_binding_plan(b, &s.batch, AH_PLAN_EAGER, NULL) == AH_OK &&
             ah_binding_forward(b, 0, &s.args) == AH_OK &&
             ah_binding_forward(b, 1, &s.args) == AH_OK;
        CHECK_MSG(ok, "abi_good does not run: %s", ah_binding_errmsg(b));
    }
    ah_binding_destroy(b);
    ah_selection_destroy(sel);
    ah_model_destroy(m);
    rel_step_free(&s);
    return ok;
}

static int n_cases;

/* ---- a descriptor that differs between scan and load ------------------------- */

static void test_flip(void)
{
    char flip_dir[1024], p[1200], src[1200];
    make_dir(flip_dir, sizeof flip_dir, "flip", 0755);
    copy_file(so("flip", src, sizeof src), path_in(p, sizeof p, flip_dir, "abi_flip.so"), 0755, 1);
    const char *dirs[2] = {flip_dir, good_dir};
    unsetenv("ATTNHOST_TEST_FLIP");
    ah_host *h = host_over(dirs, 2, AH_SCAN_CHILD, "", "[select]\npriority = abi_flip, abi_good\n");
    if (!h) return;
    expect_reason(h, p, AH_PLUGIN_AVAILABLE, "");
    ah_model *m = NULL;
    ah_selection *sel = NULL;
    ah_binding *b = NULL;
    ah_error err;
    CHECK(ah_model_parse(rel_model_text, "<rel>", &m, &err) == AH_OK);
    CHECK(ah_host_select(h, m, &sel, &err) == AH_OK);
    CHECK(sel && strcmp(ah_selection_decision(sel, 0, AH_PHASE_PREFILL)->plugin, "abi_flip") == 0);
    setenv("ATTNHOST_TEST_FLIP", "1", 1); /* the plugin now claims fp16 too */
    ah_binding_options bo = rel_binding_options();
    ah_status st = ah_binding_create(h, sel, &bo, &b, &err);
    CHECK(st == AH_ERR_PLUGIN && b == NULL);
    CHECK_CONTAINS(err.msg, "descriptor differs between scan and load");
    CHECK_CONTAINS(err.msg, p);
    /* remembered: a second try gives the same reason without reloading */
    CHECK(ah_binding_create(h, sel, &bo, &b, &err) == AH_ERR_PLUGIN);
    CHECK_CONTAINS(err.msg, "descriptor differs");
    unsetenv("ATTNHOST_TEST_FLIP");
    serves_good(h);
    ah_selection_destroy(sel);
    ah_model_destroy(m);
    ah_host_destroy(h);
    n_cases++;
}

/* ---- a plugin file replaced on disk after the scan ----------------------------- */

static void set_mtime(const char *path, const struct timespec *t)
{
    struct timespec ts[2] = {*t, *t};
    CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
}

/* Overwrite one byte of "ABI 1.7 plugin" (abi_new_size's description) in
 * place: same inode, same size; the plugin stays valid. */
static int patch_description(const char *path)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return -1;
    char *buf = malloc((size_t)st.st_size);
    int rc = -1;
    if (buf && pread(fd, buf, (size_t)st.st_size, 0) == st.st_size) {
        static const char needle[] = "ABI 1.7 plugin";
        for (off_t i = 0; i + (off_t)sizeof needle <= st.st_size; i++)
            if (memcmp(buf + i, needle, sizeof needle) == 0) {
                rc = pwrite(fd, "a", 1, i) == 1 ? 0 : -1;
                break;
            }
    }
    free(buf);
    close(fd);
    return rc;
}

static void test_replaced(void)
{
    char dir[1024], p[1200], src[1200], cache[1200];
    make_dir(dir, sizeof dir, "replaced", 0755);
    path_in(p, sizeof p, dir, "victim.so");
    path_in(cache, sizeof cache, root, "cache/scan-cache");
    copy_file(so("flip", src, sizeof src), p, 0755, 1);
    const char *dirs[2] = {dir, good_dir};
    ah_host *h = host_over(dirs, 2, AH_SCAN_CHILD, cache, NULL);
    if (!h) return;
    expect_reason(h, p, AH_PLUGIN_AVAILABLE, "");
    CHECK(by_path(h, p) && !by_path(h, p)->from_cache);

    /* replaced by another plugin (rename over it) */
    copy_file(so("new_size", src, sizeof src), p, 0755, 1);
    ah_model *m = NULL;
    ah_selection *sel = NULL;
    ah_binding *b = NULL;
    ah_error err;
    CHECK(ah_model_parse(rel_model_text, "<rel>", &m, &err) == AH_OK);
    CHECK(ah_host_select_forced(h, m, "abi_flip", &sel, &err) == AH_OK);
    ah_binding_options bo = rel_binding_options();
    CHECK(ah_binding_create(h, sel, &bo, &b, &err) != AH_OK && b == NULL);
    CHECK_CONTAINS(err.msg, "changed on disk since it was scanned");
    ah_selection_destroy(sel);
    ah_model_destroy(m);
    serves_good(h);
    ah_host_destroy(h);

    /* the cache notices: rescanned, now the other plugin */
    h = host_over(dirs, 2, AH_SCAN_CHILD, cache, NULL);
    if (!h) return;
    const ah_plugin_info *pi = by_path(h, p);
    CHECK(pi && !pi->from_cache && strcmp(pi->name, "abi_new_size") == 0);
    ah_host_destroy(h);
    h = host_over(dirs, 2, AH_SCAN_CHILD, cache, NULL); /* unchanged: from the cache */
    pi = h ? by_path(h, p) : NULL;
    CHECK(pi && pi->from_cache && strcmp(pi->name, "abi_new_size") == 0);
    CHECK(pi && strcmp(pi->description, "ABI 1.7 plugin") == 0);
    ah_host_destroy(h);

    /* modified in place with size and mtime forged back: only the content
     * hash can tell, and it must */
    struct stat before;
    CHECK(stat(p, &before) == 0);
    CHECK_MSG(patch_description(p) == 0, "cannot patch %s", p);
    set_mtime(p, &before.st_mtim);
    struct stat after;
    CHECK(stat(p, &after) == 0 && after.st_size == before.st_size && after.st_ino == before.st_ino);
    h = host_over(dirs, 2, AH_SCAN_CHILD, cache, NULL);
    pi = h ? by_path(h, p) : NULL;
    CHECK_MSG(pi && !pi->from_cache, "an in-place change with forged size and mtime came from "
                                     "the cache");
    if (h) serves_good(h);
    ah_host_destroy(h);
    n_cases += 3;
}

/* ---- a probe that calls exit() ------------------------------------------------ */

static void test_exit(void)
{
    char dir[1024], p[1200], src[1200];
    make_dir(dir, sizeof dir, "exit", 0755);
    copy_file(so("exit", src, sizeof src), path_in(p, sizeof p, dir, "abi_exit.so"), 0755, 1);
    const char *dirs[2] = {dir, good_dir};
    ah_host *h = host_over(dirs, 2, AH_SCAN_CHILD, "", "[select]\npriority = abi_exit, abi_good\n");
    if (!h) return;
    expect_reason(h, p, AH_PLUGIN_QUARANTINED, "exited with status 3");
    expect_reason(h, p, AH_PLUGIN_QUARANTINED, "abi_exit: no driver, exiting");
    /* selection passes over it with the recorded reason, and abi_good wins */
    ah_model *m = NULL;
    ah_selection *sel = NULL;
    ah_error err;
    CHECK(ah_model_parse(rel_model_text, "<rel>", &m, &err) == AH_OK);
    CHECK_MSG(ah_host_select(h, m, &sel, &err) == AH_OK, "%s", err.msg);
    const ah_decision *d = sel ? ah_selection_decision(sel, 0, AH_PHASE_DECODE) : NULL;
    CHECK(d && d->plugin && strcmp(d->plugin, "abi_good") == 0);
    int quarantined_reason = 0;
    for (uint32_t i = 0; d && i < d->n_candidates; i++)
        for (uint32_t r = 0; r < d->candidates[i].n_reasons; r++)
            if (d->candidates[i].reasons[r].code == AH_REASON_QUARANTINED) quarantined_reason = 1;
    CHECK(quarantined_reason);
    ah_selection_destroy(sel);
    ah_model_destroy(m);
    serves_good(h);
    ah_host_destroy(h);
    n_cases++;
}

/* ---- symlinks and permissions ------------------------------------------------------ */

static void test_trust(void)
{
    char links[1024], outside[1024], ww[1024], wwparent[1024], wwsub[1024], files[1024];
    char p[1200], q[1200], src[1200];
    make_dir(outside, sizeof outside, "outside", 0755);
    copy_file(so("flip", src, sizeof src), path_in(p, sizeof p, outside, "abi_flip.so"), 0755, 1);
    make_dir(links, sizeof links, "links", 0755);
    char direct[1200], chain1[1200], chain2[1200];
    path_in(direct, sizeof direct, links, "direct.so");
    path_in(chain1, sizeof chain1, links, "chain.so");
    path_in(chain2, sizeof chain2, links, "hop"); /* not *.so: only a hop */
    CHECK(symlink(p, direct) == 0);
    CHECK(symlink(p, chain2) == 0);
    CHECK(symlink("hop", chain1) == 0);

    make_dir(ww, sizeof ww, "world_writable", 0777);
    copy_file(so("flip", src, sizeof src), path_in(q, sizeof q, ww, "abi_flip.so"), 0755, 1);
    make_dir(wwparent, sizeof wwparent, "open_parent", 0777);
    path_in(wwsub, sizeof wwsub, wwparent, "plugins");
    CHECK(mkdir(wwsub, 0755) == 0);
    char sub_so[1200], ww_file[1200];
    copy_file(so("flip", src, sizeof src), path_in(sub_so, sizeof sub_so, wwsub, "abi_flip.so"),
              0755, 1);
    make_dir(files, sizeof files, "files", 0755);
    copy_file(so("flip", src, sizeof src), path_in(ww_file, sizeof ww_file, files, "abi_flip.so"),
              0757, 1);

    const char *dirs[6] = {links, ww, wwsub, files, good_dir, "relative/plugins"};
    ah_host *h = host_over(dirs, 6, AH_SCAN_CHILD, "", NULL);
    if (!h) return;
    expect_reason(h, direct, AH_PLUGIN_REJECTED, "outside");
    expect_reason(h, chain1, AH_PLUGIN_REJECTED, "outside");
    expect_reason(h, ww, AH_PLUGIN_REJECTED, "world-writable");
    expect_reason(h, wwsub, AH_PLUGIN_REJECTED, "world-writable without the sticky bit");
    expect_reason(h, ww_file, AH_PLUGIN_REJECTED, "world-writable");
    expect_reason(h, "relative/plugins", AH_PLUGIN_REJECTED, "relative");
    /* nothing behind a refusal was loaded: abi_flip is nowhere available */
    const ah_plugin_info *f = ah_host_find_plugin(h, "abi_flip");
    CHECK(f == NULL || f->state != AH_PLUGIN_AVAILABLE);
    serves_good(h);
    ah_host_destroy(h);
    n_cases += 6;
}

/* ---- scans racing with writes ----------------------------------------------------- */

#define RACE_FILES 6
typedef struct racer {
    const char *dir;
    atomic_int stop;
    int final_kind[RACE_FILES]; /* 0 absent, 1 abi_good copy, 2 abi_new_size copy */
    long writes;
} racer;

static void *race_writer(void *arg)
{
    racer *r = arg;
    char good[1200], other[1200], p[1200];
    so("good", good, sizeof good);
    so("new_size", other, sizeof other);
    uint32_t x = 12345;
    while (!atomic_load(&r->stop)) {
        x = x * 1103515245u + 12345u;
        int i = (int)((x >> 8) % RACE_FILES);
        int op = (int)((x >> 16) % 4);
        char name[32];
        snprintf(name, sizeof name, "p%d.so", i);
        path_in(p, sizeof p, r->dir, name);
        if (op == 0) { /* delete */
            unlink(p);
            r->final_kind[i] = 0;
        } else { /* write one of two plugins: in place (torn) or by rename */
            int kind = (x >> 20) & 1 ? 1 : 2;
            if (copy_file(kind == 1 ? good : other, p, 0755, op == 1 ? 0 : 1) == 0)
                r->final_kind[i] = kind;
        }
        r->writes++;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void test_race(void)
{
    char dir[1024], cache[1200];
    make_dir(dir, sizeof dir, "race", 0755);
    path_in(cache, sizeof cache, root, "race-cache");
    racer r;
    memset(&r, 0, sizeof r);
    r.dir = dir;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, race_writer, &r) == 0);
    const char *dirs[2] = {good_dir, dir};
    int scans = 0, records = 0, served = 0;
    for (int round = 0; round < 25; round++) {
        ah_host *h = host_over(dirs, 2, AH_SCAN_CHILD, cache, NULL);
        if (!h) continue;
        scans++;
        for (size_t i = 0; i < ah_host_plugin_count(h); i++) {
            const ah_plugin_info *p = ah_host_plugin(h, i);
            records++;
            CHECK_MSG(p->state == AH_PLUGIN_AVAILABLE || p->reason[0],
                      "%s: state %s without a reason", p->path, ah_plugin_state_str(p->state));
        }
        served += serves_good(h);
        ah_host_destroy(h);
    }
    atomic_store(&r.stop, 1);
    pthread_join(th, NULL);
    CHECK(served == scans);

    /* The writes stopped: a scan (cached where unchanged) must describe each
     * file as it really is now. */
    ah_host *h = host_over(dirs, 2, AH_SCAN_CHILD, cache, NULL);
    int seen_other = 0;
    if (h) {
        for (int i = 0; i < RACE_FILES; i++) {
            char p[1200], name[32];
            snprintf(name, sizeof name, "p%d.so", i);
            path_in(p, sizeof p, dir, name);
            const ah_plugin_info *pi = by_path(h, p);
            if (r.final_kind[i] == 0) {
                CHECK_MSG(pi == NULL, "%s was deleted but has a record", p);
                continue;
            }
            CHECK_MSG(pi != NULL, "%s has no record", p);
            if (!pi) continue;
            /* the record names what the file really holds; the first
             * abi_new_size copy is available, every later copy of a name
             * is shadowed (abi_good by the real one in good_dir) */
            const char *want = r.final_kind[i] == 1 ? "abi_good" : "abi_new_size";
            int first = r.final_kind[i] == 2 && !seen_other;
            if (r.final_kind[i] == 2) seen_other = 1;
            CHECK_MSG(strcmp(pi->name, want) == 0 && (first ? pi->state == AH_PLUGIN_AVAILABLE
                                                            : pi->state == AH_PLUGIN_REJECTED &&
                                                                  strstr(pi->reason, "shadowed")),
                      "%s holds %s, but its record says %s, %s: %s%s", p, want, pi->name,
                      ah_plugin_state_str(pi->state), pi->reason,
                      pi->from_cache ? " (from the cache)" : "");
        }
        serves_good(h);
        ah_host_destroy(h);
    }
    printf("race: %d scans (%d records) against %ld concurrent writes, abi_good served in "
           "every one\n",
           scans, records, r.writes);
    n_cases++;
}

static void rm_rf(const char *path)
{
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", path);
}

int main(void)
{
    CHECK(mkdtemp(root) != NULL);
    chmod(root, 0755);
    char src[1200], p[1200];
    make_dir(good_dir, sizeof good_dir, "good", 0755);
    copy_file(so("good", src, sizeof src), path_in(p, sizeof p, good_dir, "abi_good.so"), 0755, 1);
    test_flip();
    test_replaced();
    test_exit();
    test_trust();
    test_race();
    printf("%d hostile cases ended in a recorded reason with abi_good still served\n", n_cases);
    rm_rf(root);
    return check_report("test_hostile_fs");
}
