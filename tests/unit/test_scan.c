/*
 * Discovery, scanning, the scan cache and loading, driven over the ABI test
 * plugins (tests/abi_plugins): every way a plugin can be wrong or die must
 * end as a record with the right state and a reason naming the cause, and
 * the host process must survive all of it.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc.h"
#include "check.h"
#include "scan_int.h"

#define TIMEOUT_MS 1500u

static ah_hw_facts hw;
/* The request's scanner: NULL the installed one (the build tree's), "" a
 * fork of this process, else that executable. */
static const char *scanner;
static char tmp_root[] = "/tmp/ah_test_scan_XXXXXX";

static const char *const cases[] = {"good",      "wrong_major", "old_size", "new_size",
                                    "null_slot", "no_entry",    "bad_caps", "segv",
                                    "hang",      "ctor_abort",  "noisy",    "exit",
                                    "flip",      "refuse",      "garbage",  "undefined"};
#define N_CASES (sizeof cases / sizeof cases[0])

static char *case_dir(const char *c)
{
    static char buf[N_CASES + 8][512];
    static unsigned next;
    char *b = buf[next++ % (N_CASES + 8)];
    snprintf(b, 512, "%s/%s", ATTNHOST_TEST_PLUGIN_DIR, c);
    return b;
}

static const char *case_so(const char *c)
{
    static char b[512];
    snprintf(b, sizeof b, "%s/%s/abi_%s.so", ATTNHOST_TEST_PLUGIN_DIR, c, c);
    return b;
}

static void copy_file(const char *from, const char *to, mode_t mode)
{
    char buf[65536];
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, mode);
    CHECK_MSG(in >= 0 && out >= 0, "copy %s -> %s: %s", from, to, strerror(errno));
    ssize_t r;
    while (in >= 0 && out >= 0 && (r = read(in, buf, sizeof buf)) > 0)
        CHECK(write(out, buf, (size_t)r) == r);
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    chmod(to, mode);
}

static char *mkpath(const char *fmt, const char *a)
{
    static char buf[64][1024];
    static unsigned next;
    char *b = buf[next++ % 64];
    snprintf(b, 1024, fmt, tmp_root, a);
    return b;
}

static ah_status scan(const char *const *dirs, uint32_t n, ah_scan_mode mode, const char *cache,
                      const ah_config *cfg, ah_scan_result *res)
{
    ah_scan_request req = {dirs, n, mode, TIMEOUT_MS, cache, cfg, &hw, scanner};
    ah_error err = {{0}};
    ah_status s = ah__scan(&req, res, &err);
    CHECK_MSG(s == AH_OK, "scan failed: %s", err.msg);
    return s;
}

/* The record whose path contains needle (a "/case/" or a file name). */
static const ah_plugin_rec *find(const ah_scan_result *r, const char *needle)
{
    for (uint32_t i = 0; i < r->n; i++)
        if (strstr(r->plugins[i]->info.path, needle)) return r->plugins[i];
    return NULL;
}

static void expect(const ah_scan_result *r, const char *c, ah_plugin_state st, const char *reason)
{
    char needle[128];
    /* a bare case name means its directory; anything else is matched as is */
    snprintf(needle, sizeof needle, strpbrk(c, "/.") ? "%s" : "/%s/", c);
    const ah_plugin_rec *p = find(r, needle);
    CHECK_MSG(p != NULL, "case %s", c);
    if (!p) return;
    CHECK_MSG(p->info.state == st, "case %s: state %d, expected %d (%s)", c, (int)p->info.state,
              (int)st, p->info.reason);
    if (reason && !*reason) CHECK_STREQ(p->info.reason, "");
    else if (reason) CHECK_CONTAINS(p->info.reason, reason);
    int accepted = st == AH_PLUGIN_AVAILABLE || st == AH_PLUGIN_UNAVAILABLE;
    CHECK_MSG((p->info.caps != NULL) == accepted && (p->info.probe != NULL) == accepted,
              "case %s: caps/probe presence", c);
}

/* ---- the crash matrix, child mode ------------------------------------------------ */

/* With the spawned scanner (the default), and with a fork of this process
 * (the fallback of an install without one; the hang left out there: the
 * deadline is the same code). */
static void test_child_mode(int fork_child)
{
    const char *dirs[N_CASES];
    uint32_t n_dirs = 0;
    for (size_t i = 0; i < N_CASES; i++)
        if (!fork_child || strcmp(cases[i], "hang") != 0) dirs[n_dirs++] = case_dir(cases[i]);
    scanner = fork_child ? "" : NULL;
    printf("child mode, %s\n", fork_child ? "forked child" : "spawned scanner");
    /* A descriptor of the host's, inheritable: the garbage plugin writes to
     * every descriptor it finds, and must not reach this one. */
    char host_file[1100];
    snprintf(host_file, sizeof host_file, "%s/host-file", tmp_root);
    int host_fd = open(host_file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(host_fd >= 0 && dup2(host_fd, 100) == 100); /* above what the child reuses */
    close(host_fd);
    host_fd = 100;
    ah_scan_result r;
    ah_status s = scan(dirs, n_dirs, AH_SCAN_CHILD, NULL, NULL, &r);
    scanner = NULL;
    struct stat hst;
    CHECK(fstat(host_fd, &hst) == 0 && hst.st_size == 0);
    close(host_fd);
    if (s != AH_OK) return;
    CHECK(r.n == n_dirs);
    CHECK(r.n_scanned == n_dirs && r.n_cached == 0);

    expect(&r, "good", AH_PLUGIN_AVAILABLE, "");
    expect(&r, "wrong_major", AH_PLUGIN_REJECTED, "plugin ABI 3.3, host ABI " HOST_ABI);
    expect(&r, "old_size", AH_PLUGIN_AVAILABLE, "");
    expect(&r, "new_size", AH_PLUGIN_AVAILABLE, "");
    expect(&r, "null_slot", AH_PLUGIN_REJECTED, "required slot ops.plan is NULL");
    expect(&r, "no_entry", AH_PLUGIN_QUARANTINED, "no symbol attnhost_plugin_entry");
    expect(&r, "bad_caps", AH_PLUGIN_REJECTED, "caps.kv_dtypes 0x1004 has unknown bits 0x1000");
    expect(&r, "segv", AH_PLUGIN_QUARANTINED, "killed by SIGSEGV");
    expect(&r, "segv", AH_PLUGIN_QUARANTINED,
           "last stderr: abi_segv: probing the device | "
           "abi_segv: about to crash");
    if (!fork_child) {
        expect(&r, "hang", AH_PLUGIN_QUARANTINED, "timed out after 1500 ms");
        expect(&r, "hang", AH_PLUGIN_QUARANTINED, "abi_hang: waiting for a device");
    }
    expect(&r, "ctor_abort", AH_PLUGIN_QUARANTINED, "killed by SIGABRT");
    expect(&r, "ctor_abort", AH_PLUGIN_QUARANTINED, "constructor cannot initialize");
    expect(&r, "noisy", AH_PLUGIN_AVAILABLE, "");
    expect(&r, "exit", AH_PLUGIN_QUARANTINED, "exited with status 3 before reporting");
    expect(&r, "exit", AH_PLUGIN_QUARANTINED, "abi_exit: no driver, exiting");
    expect(&r, "flip", AH_PLUGIN_AVAILABLE, "");
    expect(&r, "refuse", AH_PLUGIN_REJECTED,
           "the plugin refused this host: needs a frobnicator, none found");
    expect(&r, "garbage", AH_PLUGIN_QUARANTINED, "garbage record from the scan child");
    expect(&r, "undefined", AH_PLUGIN_QUARANTINED, "dlopen failed: ");
    expect(&r, "undefined", AH_PLUGIN_QUARANTINED,
           "undefined symbol: attnhost_test_symbol_nobody_defines");

    const ah_plugin_rec *g = find(&r, "/good/");
    if (g && g->info.caps) {
        CHECK_STREQ(g->info.name, "abi_good");
        CHECK_STREQ(g->info.version, "1.0");
        CHECK_STREQ(g->info.vendor, "attnhost tests");
        CHECK(g->info.device_kind == AH_DEVICE_CPU);
        CHECK(g->probe.usable == 1);
        CHECK_STREQ(g->probe.device_name, "host CPU (ABI test plugin)");
        CHECK(g->probe.multiprocessors == hw.cpu_logical_cores);
        CHECK(g->caps.n_config_keys == 1 && strcmp(g->caps.config_keys[0].name, "usable") == 0);
        CHECK(g->caps.q_dtypes == AH_BIT(AH_DTYPE_FP32));
        CHECK(g->info.from_cache == 0 && g->info.scan_ms > 0);
        CHECK(g->size > 0 && g->content_hash != 0);
    }
    /* Older struct sizes: the nonsense beyond struct_size was never read. */
    const ah_plugin_rec *o = find(&r, "/old_size/");
    if (o && o->info.caps) {
        CHECK(o->caps.graph_level == AH_GRAPH_NEVER);
        CHECK(o->caps.cpu_isa_required == 0 && o->caps.n_config_keys == 0);
        CHECK(o->caps.min_compute_capability == 0 && o->caps.forward_writes_kv == 0);
        CHECK(o->caps.block_sizes.n_values == 2 && o->caps.block_sizes.values[1] == 32);
    }
    const ah_plugin_rec *n = find(&r, "/new_size/");
    if (n) CHECK_STREQ(n->info.version, "2.0");
    /* The hang ended at the time limit, not later. */
    const ah_plugin_rec *h = find(&r, "/hang/");
    if (h)
        CHECK_MSG(h->info.scan_ms >= TIMEOUT_MS && h->info.scan_ms < TIMEOUT_MS + 1000,
                  "hang took %.0f ms", h->info.scan_ms);
    ah__scan_result_free(&r);
}

/* ---- in-process mode gives the same records for plugins that do not die ---- */

static void test_in_process(void)
{
    static const char *const safe[] = {"good",      "wrong_major", "old_size", "new_size",
                                       "null_slot", "no_entry",    "bad_caps", "flip",
                                       "refuse",    "undefined"};
    const size_t n = sizeof safe / sizeof safe[0];
    const char *dirs[16];
    for (size_t i = 0; i < n; i++) dirs[i] = case_dir(safe[i]);
    ah_scan_result a, b;
    if (scan(dirs, (uint32_t)n, AH_SCAN_IN_PROCESS, NULL, NULL, &a) != AH_OK) return;
    if (scan(dirs, (uint32_t)n, AH_SCAN_CHILD, NULL, NULL, &b) != AH_OK) {
        ah__scan_result_free(&a);
        return;
    }
    CHECK(a.n == n && b.n == n);
    for (uint32_t i = 0; i < a.n && i < b.n; i++) {
        CHECK_STREQ(a.plugins[i]->info.path, b.plugins[i]->info.path);
        CHECK_MSG(a.plugins[i]->info.state == b.plugins[i]->info.state, "%s",
                  a.plugins[i]->info.path);
        CHECK_STREQ(a.plugins[i]->info.reason, b.plugins[i]->info.reason);
        CHECK_STREQ(a.plugins[i]->info.name, b.plugins[i]->info.name);
    }
    ah__scan_result_free(&a);
    ah__scan_result_free(&b);
}

/* ---- the cache ------------------------------------------------------------------ */

static void set_mtime(const char *path, long sec)
{
    struct timespec ts[2] = {{sec, 0}, {sec, 0}};
    CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
}

static void corrupt_byte(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    unsigned char c = 0;
    CHECK(pread(fd, &c, 1, at) == 1);
    c ^= 0x5a;
    CHECK(pwrite(fd, &c, 1, at) == 1);
    close(fd);
}

static void test_cache(void)
{
    char *dir = mkpath("%s/%s", "cached");
    mkdir(dir, 0755);
    char *good = mkpath("%s/cached/%s", "a_good.so");
    char *segv = mkpath("%s/cached/%s", "b_segv.so");
    copy_file(case_so("good"), good, 0755);
    copy_file(case_so("segv"), segv, 0755);
    char *cache = mkpath("%s/%s", "cachedir/sub/scan-cache");
    const char *dirs[] = {dir};
    ah_config cfg;
    memset(&cfg, 0, sizeof cfg);
    ah_scan_result r;

    /* First scan: both scanned, the crash included; the file is created 0600. */
    if (scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r) != AH_OK) return;
    CHECK(r.n == 2 && r.n_scanned == 2 && r.n_cached == 0);
    ah__scan_result_free(&r);
    struct stat st;
    CHECK(stat(cache, &st) == 0 && (st.st_mode & 0777) == 0600);

    /* Second scan: everything from the cache, the crash not re-run. */
    scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
    CHECK(r.n == 2 && r.n_cached == 2 && r.n_scanned == 0);
    expect(&r, "a_good.so", AH_PLUGIN_AVAILABLE, "");
    expect(&r, "b_segv.so", AH_PLUGIN_QUARANTINED, "killed by SIGSEGV");
    for (uint32_t i = 0; i < r.n; i++) CHECK(r.plugins[i]->info.from_cache == 1);
    const ah_plugin_rec *g = find(&r, "a_good");
    if (g && g->info.caps) {
        CHECK(g->caps.n_config_keys == 1);
        CHECK_STREQ(g->caps.config_keys[0].doc,
                    "false: the probe reports the device unusable (for tests)");
        CHECK_STREQ(g->probe.device_name, "host CPU (ABI test plugin)");
    }
    ah__scan_result_free(&r);

    /* A touched file is rescanned; the other stays cached. */
    set_mtime(good, 1000000);
    scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
    CHECK(r.n_scanned == 1 && r.n_cached == 1);
    expect(&r, "a_good.so", AH_PLUGIN_AVAILABLE, "");
    ah__scan_result_free(&r);

    /* Replaced by another plugin (same path): rescanned, new content seen. */
    copy_file(case_so("refuse"), good, 0755);
    set_mtime(good, 1000000); /* same mtime as cached: the inode/size/hash still differ */
    scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
    CHECK(r.n_scanned == 1 && r.n_cached == 1);
    expect(&r, "a_good.so", AH_PLUGIN_REJECTED, "needs a frobnicator");
    ah__scan_result_free(&r);
    copy_file(case_so("good"), good, 0755);
    scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
    ah__scan_result_free(&r);

    /* A plugin config key changed: that plugin is rescanned, its probe sees it. */
    ah_plugin_kv kv = {"abi_good", "usable", "0", 1};
    cfg.plugin_keys = &kv;
    cfg.n_plugin_keys = 1;
    scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
    CHECK(r.n_scanned == 1 && r.n_cached == 1);
    expect(&r, "a_good.so", AH_PLUGIN_UNAVAILABLE, "switched off by its config key usable");
    ah__scan_result_free(&r);
    /* Unusable is never cached: probed again (the crash stays cached). */
    scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
    CHECK(r.n_scanned == 1 && r.n_cached == 1);
    expect(&r, "a_good.so", AH_PLUGIN_UNAVAILABLE, "switched off");
    ah__scan_result_free(&r);
    /* Back on: re-probed. Then the cache keys on the value in force: the
     * default written out ("true"), another spelling of it, or left out is
     * the same configuration: cached. */
    kv.value = "yes";
    scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
    CHECK(r.n_scanned == 1 && r.n_cached == 1);
    expect(&r, "a_good.so", AH_PLUGIN_AVAILABLE, "");
    ah__scan_result_free(&r);
    kv.value = "true";
    scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
    CHECK(r.n_scanned == 0 && r.n_cached == 2);
    ah__scan_result_free(&r);
    cfg.n_plugin_keys = 0;
    scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
    CHECK(r.n_scanned == 0 && r.n_cached == 2);
    expect(&r, "a_good.so", AH_PLUGIN_AVAILABLE, "");
    ah__scan_result_free(&r);

    /* Other CPU facts (or drivers): everything is rescanned. */
    ah_hw_facts saved = hw;
    hw.cpu_isa &= ~AH_ISA_AVX2;
    scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
    CHECK(r.n_scanned == 2 && r.n_cached == 0);
    ah__scan_result_free(&r);
    hw = saved;
    scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
    CHECK(r.n_scanned == 2);
    ah__scan_result_free(&r);
    scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
    CHECK(r.n_cached == 2);
    ah__scan_result_free(&r);

    /* A corrupt cache is ignored (rescan) and rewritten. */
    CHECK(stat(cache, &st) == 0);
    for (off_t at = 0; at < st.st_size; at += st.st_size / 7 + 1) {
        corrupt_byte(cache, at);
        scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
        CHECK_MSG(r.n_scanned == 2 && r.n_cached == 0, "corrupt byte %ld", (long)at);
        ah__scan_result_free(&r);
        scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
        CHECK_MSG(r.n_cached == 2, "rewritten after corrupt byte %ld", (long)at);
        ah__scan_result_free(&r);
    }
    /* Truncated, or written by another version: the same. */
    CHECK(truncate(cache, st.st_size / 2) == 0);
    scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
    CHECK(r.n_scanned == 2);
    ah__scan_result_free(&r);
    int fd = open(cache, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, "\x63", 1, 8) == 1); /* format 1 -> 99 */
    close(fd);
    scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
    CHECK(r.n_scanned == 2);
    ah__scan_result_free(&r);
    /* A cache others can write is not trusted. */
    CHECK(chmod(cache, 0666) == 0);
    scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
    CHECK(r.n_scanned == 2);
    ah__scan_result_free(&r);
    CHECK(stat(cache, &st) == 0 && (st.st_mode & 0777) == 0600);

    /* A removed plugin leaves the cache at the next write. */
    unlink(segv);
    set_mtime(good, 2000000);
    scan(dirs, 1, AH_SCAN_CHILD, cache, &cfg, &r);
    CHECK(r.n == 1 && r.n_scanned == 1);
    ah__scan_result_free(&r);
    ah_cache c;
    CHECK(ah__cache_load(&c, cache, ah__driver_fingerprint(&hw)) == 0);
    CHECK(c.n == 1 && c.note == NULL);
    ah__cache_free(&c);
}

/* ---- discovery's refusals ------------------------------------------------------ */

static void test_discovery(void)
{
    char *ww = mkpath("%s/%s", "ww");
    mkdir(ww, 0755);
    chmod(ww, 0777);
    copy_file(case_so("good"), mkpath("%s/ww/%s", "abi_good.so"), 0755);

    char *wf = mkpath("%s/%s", "wf");
    mkdir(wf, 0755);
    copy_file(case_so("good"), mkpath("%s/wf/%s", "abi_good.so"), 0666);

    char *ln = mkpath("%s/%s", "links");
    mkdir(ln, 0755);
    copy_file(case_so("good"), mkpath("%s/links/%s", "real.so"), 0755);
    CHECK(symlink("real.so", mkpath("%s/links/%s", "alias.so")) == 0);
    CHECK(symlink(case_so("good"), mkpath("%s/links/%s", "escape.so")) == 0);
    CHECK(symlink("../links/real.so", mkpath("%s/links/%s", "roundtrip.so")) == 0);
    CHECK(symlink("missing.so", mkpath("%s/links/%s", "dangling.so")) == 0);
    mkdir(mkpath("%s/links/%s", "subdir.so"), 0755);
    CHECK(mkfifo(mkpath("%s/links/%s", "fifo.so"), 0644) == 0);
    copy_file(case_so("good"), mkpath("%s/links/%s", ".hidden.so"), 0755);
    copy_file(case_so("good"), mkpath("%s/links/%s", "README"), 0644);
    copy_file(ATTNHOST_SOURCE_DIR "/tests/abi_plugins/common.h", mkpath("%s/links/%s", "text.so"),
              0644);

    char *open_parent = mkpath("%s/%s", "openparent");
    mkdir(open_parent, 0755);
    chmod(open_parent, 0777);
    mkdir(mkpath("%s/openparent/%s", "plugins"), 0755);
    copy_file(case_so("good"), mkpath("%s/openparent/plugins/%s", "abi_good.so"), 0755);

    const char *dirs[] = {ww,
                          wf,
                          ln,
                          mkpath("%s/%s", "openparent/plugins"),
                          "plugins",
                          "",
                          "./",
                          mkpath("%s/%s", "does-not-exist"),
                          case_dir("good")};
    ah_scan_result r;
    if (scan(dirs, sizeof dirs / sizeof dirs[0], AH_SCAN_CHILD, NULL, NULL, &r) != AH_OK) return;
    for (uint32_t i = 0; i < r.n; i++)
        printf("  %-60s %d %s\n", r.plugins[i]->info.path, r.plugins[i]->info.state,
               r.plugins[i]->info.reason);
    expect(&r, "/ww", AH_PLUGIN_REJECTED, "plugin directory");
    expect(&r, "/ww", AH_PLUGIN_REJECTED, "is world-writable");
    expect(&r, "wf/abi_good.so", AH_PLUGIN_REJECTED, "plugin file");
    expect(&r, "wf/abi_good.so", AH_PLUGIN_REJECTED, "is world-writable (mode 0666");
    const ah_plugin_rec *p;
    CHECK((p = find(&r, "links/alias.so")) && p->info.state == AH_PLUGIN_AVAILABLE);
    CHECK((p = find(&r, "links/real.so")) && p->info.state == AH_PLUGIN_REJECTED &&
          strstr(p->info.reason, "shadowed by") && strstr(p->info.reason, "alias.so"));
    CHECK((p = find(&r, "links/roundtrip.so")) && p->info.state == AH_PLUGIN_REJECTED &&
          strstr(p->info.reason, "shadowed by"));
    CHECK((p = find(&r, "links/escape.so")) && p->info.state == AH_PLUGIN_REJECTED &&
          strstr(p->info.reason, "outside"));
    CHECK((p = find(&r, "links/dangling.so")) && p->info.state == AH_PLUGIN_REJECTED &&
          strstr(p->info.reason, "does not resolve"));
    CHECK((p = find(&r, "links/subdir.so")) && strstr(p->info.reason, "not a regular file"));
    CHECK((p = find(&r, "links/fifo.so")) && strstr(p->info.reason, "not a regular file"));
    CHECK(find(&r, ".hidden.so") == NULL && find(&r, "README") == NULL);
    CHECK((p = find(&r, "links/text.so")) && p->info.state == AH_PLUGIN_QUARANTINED &&
          strstr(p->info.reason, "dlopen failed: ") && strstr(p->info.reason, "text.so"));
    CHECK((p = find(&r, "openparent")) && p->info.state == AH_PLUGIN_REJECTED &&
          strstr(p->info.reason, "world-writable without the sticky bit"));
    int relative = 0, empty = 0, dot = 0;
    for (uint32_t i = 0; i < r.n; i++) {
        const char *why = r.plugins[i]->info.reason;
        if (strstr(why, "'plugins' is relative")) relative++;
        if (strstr(why, "'./' is relative")) dot++;
        if (strstr(why, "empty search path entry")) empty++;
    }
    CHECK(relative == 1 && empty == 1 && dot == 1);
    CHECK(find(&r, "does-not-exist") == NULL);
    /* The same stem in a later directory is shadowed without being loaded. */
    expect(&r, "good", AH_PLUGIN_REJECTED, "shadowed by");
    /* Loaded: alias, real, roundtrip, text and good/abi_good.so (whose stem
     * was free, its earlier namesake being refused, but whose plugin name was
     * not). */
    CHECK(r.n_scanned == 5);
    ah__scan_result_free(&r);
}

/* ---- loading for binding ---------------------------------------------------------- */

static const ah_plugin_rec *scan_one_case(ah_scan_result *r, const char *c)
{
    const char *dirs[] = {case_dir(c)};
    if (scan(dirs, 1, AH_SCAN_CHILD, NULL, NULL, r) != AH_OK || r->n != 1) return NULL;
    return r->plugins[0];
}

static DLTensor tensor(float *data, int ndim, int64_t *shape)
{
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.ndim = ndim;
    t.dtype = (DLDataType){kDLFloat, 32, 1};
    t.shape = shape;
    return t;
}

/* Drive the loaded test backend through one tiny batch: one request, two
 * tokens of KV, one query at position 1, head size 2. */
static void run_tiny_batch(ah_loaded_plugin *p)
{
    const ah_plugin_ops *o = &p->ops;
    ah_context *ctx = NULL;
    const char *why = NULL;
    ah_context_options co = {sizeof co, 0};
    CHECK(o->context_create(&p->services, &co, &ctx, &why) == AH_OK);
    ah_layer_spec spec = {.struct_size = sizeof spec,
                          .attn_type = AH_ATTN_DECODER,
                          .num_q_heads = 1,
                          .num_kv_heads = 1,
                          .qk_head_size = 2,
                          .v_head_size = 2,
                          .q_dtype = AH_DTYPE_FP32,
                          .kv_dtype = AH_DTYPE_FP32,
                          .block_size = 4,
                          .kv_layout = AH_KV_LAYOUT_NHD,
                          .scale = 1.0f};
    ah_limits lim = {sizeof lim, 1, 2, 1, 4, 1};
    ah_state *st = NULL;
    CHECK(o->state_create(ctx, &spec, &lim, &st) == AH_OK);
    if (!st) {
        o->context_destroy(ctx);
        return;
    }
    int32_t qsl[] = {0, 2}, seq[] = {2}, bt[] = {0};
    int64_t slots[] = {0, 1};
    ah_batch b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    b.num_reqs = 1;
    b.num_tokens = 2;
    b.max_query_len = 2;
    b.max_seq_len = 2;
    b.num_blocks = 1;
    b.query_start_loc_host = qsl;
    b.seq_lens_host = seq;
    b.block_table_host = bt;
    b.slot_mapping_host = slots;
    b.block_table_stride = 1;
    CHECK(o->plan(st, &b, AH_PLAN_EAGER, NULL) == AH_OK);
    float k[] = {1, 0, 0, 1}, v[] = {10, 20, 30, 40}, q[] = {1, 1, 2, 0}, out[4] = {0};
    float kc[8] = {0}, vc[8] = {0};
    int64_t s3[] = {2, 1, 2}, sc[] = {1, 4, 1, 2};
    DLTensor tk = tensor(k, 3, s3), tv = tensor(v, 3, s3), tq = tensor(q, 3, s3),
             to = tensor(out, 3, s3), tkc = tensor(kc, 4, sc), tvc = tensor(vc, 4, sc);
    ah_kv_write_args w = {.struct_size = sizeof w,
                          .key = &tk,
                          .value = &tv,
                          .key_cache = &tkc,
                          .value_cache = &tvc,
                          .k_scale = 1,
                          .v_scale = 1,
                          .stream = NULL};
    CHECK(o->write_kv(st, &w) == AH_OK);
    ah_forward_args f;
    memset(&f, 0, sizeof f);
    f.struct_size = sizeof f;
    f.q = &tq;
    f.key_cache = &tkc;
    f.value_cache = &tvc;
    f.out = &to;
    CHECK(o->forward(st, &f) == AH_OK);
    /* token 0 sees key 0 only: out = v0. token 1 (q = [2,0]) sees keys 0 and
     * 1 with scores 2 and 0. */
    double w0 = 1.0 / (1.0 + __builtin_exp(-2.0));
    CHECK(out[0] == 10 && out[1] == 20);
    CHECK(__builtin_fabs(out[2] - (w0 * 10 + (1 - w0) * 30)) < 1e-4);
    CHECK(__builtin_fabs(out[3] - (w0 * 20 + (1 - w0) * 40)) < 1e-4);
    o->state_destroy(st);
    o->context_destroy(ctx);
}

static void test_load(void)
{
    ah_scan_result r;
    ah_loaded_plugin *p = NULL;
    ah_error err = {{0}};
    ah_config cfg;
    memset(&cfg, 0, sizeof cfg);

    const ah_plugin_rec *rec = scan_one_case(&r, "good");
    CHECK(rec && ah__plugin_load(rec, &cfg, &hw, &p, &err) == AH_OK);
    if (p) {
        CHECK(p->ops.struct_size == sizeof(ah_plugin_ops) && p->ops.write_kv != NULL);
        CHECK(p->ops.merge_states == NULL && p->ops.mem_alloc == NULL);
        CHECK(p->caps_live.n_config_keys == 1);
        CHECK_STREQ(p->desc->name, "abi_good");
        run_tiny_batch(p);
        ah__plugin_unload(p);
        p = NULL;
    }
    ah__scan_result_free(&r);

    /* Older sizes: the uncovered slots and fields read as NULL / 0. */
    rec = scan_one_case(&r, "old_size");
    CHECK(rec && ah__plugin_load(rec, &cfg, &hw, &p, &err) == AH_OK);
    if (p) {
        CHECK(p->ops.merge_states == NULL && p->ops.mem_alloc == NULL);
        CHECK(p->ops.write_kv != NULL);
        CHECK(p->caps_live.graph_level == AH_GRAPH_NEVER && p->caps_live.n_config_keys == 0);
        CHECK(p->caps_live.struct_size == sizeof(ah_caps));
        ah__plugin_unload(p);
        p = NULL;
    }
    ah__scan_result_free(&r);

    rec = scan_one_case(&r, "new_size");
    CHECK(rec && ah__plugin_load(rec, &cfg, &hw, &p, &err) == AH_OK);
    ah__plugin_unload(p);
    p = NULL;
    ah__scan_result_free(&r);

    /* The descriptor changed between scan and load. */
    rec = scan_one_case(&r, "flip");
    setenv("ATTNHOST_TEST_FLIP", "1", 1);
    CHECK(rec && ah__plugin_load(rec, &cfg, &hw, &p, &err) == AH_ERR_PLUGIN && p == NULL);
    CHECK_CONTAINS(err.msg, "descriptor differs between scan and load (caps differ)");
    CHECK_CONTAINS(err.msg, "abi_flip.so");
    unsetenv("ATTNHOST_TEST_FLIP");
    ah__scan_result_free(&r);

    /* Quarantined: never loaded. */
    rec = scan_one_case(&r, "segv");
    CHECK(rec && ah__plugin_load(rec, &cfg, &hw, &p, &err) == AH_ERR_PLUGIN && p == NULL);
    CHECK_CONTAINS(err.msg, "quarantined: killed by SIGSEGV");
    ah__scan_result_free(&r);

    /* Replaced on disk after the scan. */
    char *dir = mkpath("%s/%s", "replaced");
    mkdir(dir, 0755);
    char *file = mkpath("%s/replaced/%s", "abi_good.so");
    copy_file(case_so("good"), file, 0755);
    const char *dirs[] = {dir};
    if (scan(dirs, 1, AH_SCAN_CHILD, NULL, NULL, &r) == AH_OK && r.n == 1) {
        unlink(file);
        copy_file(case_so("new_size"), file, 0755);
        CHECK(ah__plugin_load(r.plugins[0], &cfg, &hw, &p, &err) == AH_ERR_PLUGIN && !p);
        CHECK_CONTAINS(err.msg, "changed on disk since it was scanned");
        CHECK_CONTAINS(err.msg, "rescan");
        unlink(file);
        CHECK(ah__plugin_load(r.plugins[0], &cfg, &hw, &p, &err) == AH_ERR_IO && !p);
        CHECK_CONTAINS(err.msg, "cannot stat");
        ah__scan_result_free(&r);
    }
}

/* ---- services ------------------------------------------------------------------ */

static void test_services(void)
{
    ah_plugin_kv kv[] = {{"abi_good", "usable", "0", 1},
                         {"abi_good", "secret", "x", 2},
                         {"other", "usable", "1", 3}};
    ah_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.plugin_keys = kv;
    cfg.n_plugin_keys = 3;
    ah_host_services s;
    void *data = NULL;
    ah__services_init(&s, &data, "abi_good", &cfg, &hw);
    CHECK(s.struct_size == sizeof s && s.abi_version == AH_ABI_VERSION && s.hw == &hw);
    CHECK(s.config_str(&s, "usable") == NULL); /* keys unknown until the descriptor is read */
    static const ah_config_key keys[] = {AH_KEY_BOOL_ROW("usable", "true", "doc"),
                                         AH_KEY_INT_ROW("threads", "4", 0, 64, "doc"),
                                         AH_KEY_FLOAT_ROW("ratio", "0.5", 0, 1, "doc"),
                                         AH_KEY_ENUM_ROW("mode", "b", "a|b|c", "doc")};
    ah_caps caps;
    memset(&caps, 0, sizeof caps);
    caps.config_keys = keys;
    caps.n_config_keys = 4;
    ah__services_bind(data, "abi_good", &caps);
    CHECK(s.config_int(&s, "usable") == 0 && strcmp(s.config_str(&s, "usable"), "0") == 0);
    CHECK(s.config_int(&s, "threads") == 4 && s.config_float(&s, "threads") == 4.0); /* defaults */
    CHECK(s.config_float(&s, "ratio") == 0.5 && s.config_int(&s, "ratio") == 0); /* wrong getter */
    CHECK(s.config_int(&s, "mode") == 1 && strcmp(s.config_str(&s, "mode"), "b") == 0);
    CHECK(s.config_str(&s, "secret") == NULL && s.config_int(&s, "secret") == 0); /* undeclared */
    void *m = s.alloc(&s, 64);
    CHECK(m != NULL);
    s.free(&s, m);
    s.free(&s, NULL);
    ah__services_free(data);
}

/* Log lines: tagged with the plugin, filtered by ATTNHOST_LOG. */
static void test_log(void)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/log.txt", tmp_root);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    ah_host_services s;
    void *data;
    setenv("ATTNHOST_LOG", "info", 1);
    ah__services_init(&s, &data, "cuda_fa3", NULL, &hw);
    s.log(&s, AH_LOG_ERROR, "no device");
    s.log(&s, AH_LOG_INFO, "three GPUs");
    s.log(&s, AH_LOG_DEBUG, "hidden at info");
    ah__services_free(data);
    unsetenv("ATTNHOST_LOG"); /* default: warn */
    ah__services_init(&s, &data, "cpu_amx", NULL, &hw);
    s.log(&s, AH_LOG_WARN, "slow path");
    s.log(&s, AH_LOG_INFO, "hidden at warn");
    CHECK(s.config_str(&s, "anything") == NULL); /* no config at all */
    ah__services_free(data);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char buf[512] = "";
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
    CHECK_STREQ(buf, "attnhost[cuda_fa3] error: no device\n"
                     "attnhost[cuda_fa3] info: three GPUs\n"
                     "attnhost[cpu_amx] warn: slow path\n");
}

/* ---- the poisoned parent ----------------------------------------------------------- */

/* A process that initialised a GPU runtime (a Python engine: torch.zeros(1,
 * device="cuda") before ah_host_create) cannot use it in a forked child:
 * the GPU plugins probe unusable there. The fake runtime (fakert.c) behaves
 * the same way; the spawned scanner starts fresh and finds the device, and
 * the fork's wrong answer never reaches the cache. */
static void test_poisoned_parent(void)
{
    const char *dirs[] = {case_dir("fakegpu")};
    char rt_path[600];
    snprintf(rt_path, sizeof rt_path, "%s/fakert/libabi_fakert.so", ATTNHOST_TEST_PLUGIN_DIR);
    void *rt = dlopen(rt_path, RTLD_NOW | RTLD_GLOBAL);
    CHECK_MSG(rt != NULL, "dlopen %s: %s", rt_path, dlerror());
    if (!rt) return;
    int (*rt_init)(void) = (int (*)(void))(uintptr_t)dlsym(rt, "abi_fakert_init");
    CHECK(rt_init != NULL);
    if (!rt_init) return;
    ah_scan_result r;

    /* Not yet initialised here: even a fork finds the device. */
    scanner = "";
    if (scan(dirs, 1, AH_SCAN_CHILD, NULL, NULL, &r) == AH_OK) {
        expect(&r, "fakegpu", AH_PLUGIN_AVAILABLE, "");
        ah__scan_result_free(&r);
    }
    CHECK(rt_init() == 0); /* the engine initialises the runtime */

    /* The bug, reproduced: the forked child cannot use the runtime. */
    if (scan(dirs, 1, AH_SCAN_CHILD, NULL, NULL, &r) == AH_OK) {
        expect(&r, "fakegpu", AH_PLUGIN_UNAVAILABLE, "initialization error");
        ah__scan_result_free(&r);
    }
    /* The spawned scanner is a fresh process: the device is there. */
    scanner = NULL;
    if (scan(dirs, 1, AH_SCAN_CHILD, NULL, NULL, &r) == AH_OK) {
        expect(&r, "fakegpu", AH_PLUGIN_AVAILABLE, "");
        CHECK(r.plugins[0]->probe.device_count == 1);
        ah__scan_result_free(&r);
    }
    /* So is this process itself, in-process. */
    if (scan(dirs, 1, AH_SCAN_IN_PROCESS, NULL, NULL, &r) == AH_OK) {
        expect(&r, "fakegpu", AH_PLUGIN_AVAILABLE, "");
        ah__scan_result_free(&r);
    }

    /* The fork's answer is not cached: the next process (here the next
     * scan, with the scanner) probes again, and keeps the right answer. */
    char *cache = mkpath("%s/%s", "poisoned-cache");
    scanner = "";
    if (scan(dirs, 1, AH_SCAN_CHILD, cache, NULL, &r) == AH_OK) {
        CHECK(r.n_scanned == 1);
        expect(&r, "fakegpu", AH_PLUGIN_UNAVAILABLE, "initialization error");
        ah__scan_result_free(&r);
    }
    scanner = NULL;
    if (scan(dirs, 1, AH_SCAN_CHILD, cache, NULL, &r) == AH_OK) {
        CHECK(r.n_scanned == 1 && r.n_cached == 0);
        expect(&r, "fakegpu", AH_PLUGIN_AVAILABLE, "");
        ah__scan_result_free(&r);
    }
    if (scan(dirs, 1, AH_SCAN_CHILD, cache, NULL, &r) == AH_OK) {
        CHECK(r.n_scanned == 0 && r.n_cached == 1);
        expect(&r, "fakegpu", AH_PLUGIN_AVAILABLE, "");
        ah__scan_result_free(&r);
    }
    /* dlclose would not unload it (the scanned plugin's copy may be
     * loaded in-process): leave it. */
}

/* An unusable answer is asked again, with the same file and configuration
 * (the cache key unchanged): the device appears between two scans. */
static void test_unusable_not_cached(void)
{
    const char *dirs[] = {case_dir("fakegpu")};
    char *device = mkpath("%s/%s", "fake-device");
    char *cache = mkpath("%s/%s", "unusable-cache");
    setenv("ATTNHOST_TEST_FAKE_DEVICE", device, 1);
    ah_scan_result r;
    ah_plugin_rec *unusable = NULL;
    for (int i = 0; i < 2; i++)
        if (scan(dirs, 1, AH_SCAN_CHILD, cache, NULL, &r) == AH_OK) {
            CHECK_MSG(r.n_scanned == 1 && r.n_cached == 0, "scan %d", i);
            expect(&r, "fakegpu", AH_PLUGIN_UNAVAILABLE, "fake runtime: no device");
            if (!unusable && r.n == 1) unusable = ah__rec_dup(r.plugins[0]);
            ah__scan_result_free(&r);
        }
    int fd = open(device, O_WRONLY | O_CREAT, 0600);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    if (scan(dirs, 1, AH_SCAN_CHILD, cache, NULL, &r) == AH_OK) {
        CHECK(r.n_scanned == 1 && r.n_cached == 0);
        expect(&r, "fakegpu", AH_PLUGIN_AVAILABLE, "");
        ah__scan_result_free(&r);
    }
    if (scan(dirs, 1, AH_SCAN_CHILD, cache, NULL, &r) == AH_OK) {
        CHECK(r.n_scanned == 0 && r.n_cached == 1);
        ah__scan_result_free(&r);
    }
    /* A cache written by an older attnhost, which kept unusable answers
     * (the poisoned caches of issue 23): such an entry is not believed. */
    if (unusable) {
        ah_cache c;
        memset(&c, 0, sizeof c);
        ah_cache_entry e = {ah__config_hash(NULL, "abi_fakegpu", unusable->info.caps), unusable, 1};
        c.e = &e;
        c.n = c.cap = 1;
        c.fingerprint = ah__driver_fingerprint(&hw);
        char why[256];
        CHECK(ah__cache_save(&c, cache, why, sizeof why) == 0);
        if (scan(dirs, 1, AH_SCAN_CHILD, cache, NULL, &r) == AH_OK) {
            CHECK(r.n_scanned == 1 && r.n_cached == 0);
            expect(&r, "fakegpu", AH_PLUGIN_AVAILABLE, "");
            ah__scan_result_free(&r);
        }
        ah__rec_free(unusable);
    }
    unsetenv("ATTNHOST_TEST_FAKE_DEVICE");
}

/* ---- the scanner executable ------------------------------------------------------- */

static void write_text(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    CHECK(fd >= 0);
    if (fd < 0) return;
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    chmod(path, mode);
}

static char *read_text(const char *path)
{
    static char buf[8192];
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
    return buf;
}

/* Scan good and segv with stderr captured; the records must be right
 * whatever happened to the scanner. Returns the captured text. */
static const char *scan_capturing(const char *with_scanner)
{
    const char *dirs[] = {case_dir("good"), case_dir("segv")};
    char *log = mkpath("%s/%s", "scanner-log.txt");
    fflush(stderr);
    int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    scanner = with_scanner;
    ah_scan_result r;
    ah_status s = scan(dirs, 2, AH_SCAN_CHILD, NULL, NULL, &r);
    scanner = NULL;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    if (s == AH_OK) {
        expect(&r, "good", AH_PLUGIN_AVAILABLE, "");
        expect(&r, "segv", AH_PLUGIN_QUARANTINED, "killed by SIGSEGV");
        ah__scan_result_free(&r);
    }
    return read_text(log);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void test_scanner(void)
{
    /* The build tree's scanner is found beside the (here static) core. */
    char tried[2048];
    char *found = ah__scanner_locate(tried, sizeof tried);
    CHECK_MSG(found && strstr(found, "/libexec/attnhost/attnhost-plugin-scanner"), "%s",
              found ? found : "(none)");
    /* Run by hand, it says what it is and exits 120. */
    if (found) {
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "'%s' </dev/null >/dev/null 2>'%s'", found,
                 mkpath("%s/%s", "usage.txt"));
        int st = system(cmd);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 120);
        CHECK_CONTAINS(read_text(mkpath("%s/%s", "usage.txt")), "not meant to be run by hand");
    }
    ah__free(found);

    /* Quiet when the scanner works. */
    const char *log = scan_capturing(NULL);
    CHECK_MSG(count(log, "forked child instead") == 0, "%s", log);

    /* Missing (a broken install): one warning, then a fork per plugin. */
    log = scan_capturing("/nonexistent/attnhost-plugin-scanner");
    CHECK_MSG(count(log, "forked child instead") == 1, "%s", log);
    CHECK_CONTAINS(log, "cannot start the plugin scanner /nonexistent/attnhost-plugin-scanner");

    /* From another build: refuses the request; the same fallback. */
    char *other = mkpath("%s/%s", "other-scanner");
    write_text(other,
               "#!/bin/sh\necho 'attnhost-plugin-scanner: scan request version 1, this scanner "
               "reads version 9' >&2\nexit 120\n",
               0755);
    log = scan_capturing(other);
    CHECK_MSG(count(log, "forked child instead") == 1, "%s", log);
    CHECK_CONTAINS(log, "this scanner reads version 9");
}

/* What a scan costs per plugin: spawned scanner against forked child. */
static void test_cost(void)
{
    static const char *const quick[] = {"good", "old_size", "new_size", "flip", "refuse"};
    const char *dirs[5];
    for (size_t i = 0; i < 5; i++) dirs[i] = case_dir(quick[i]);
    const int rounds = 4;
    double ms[2] = {0, 0};
    for (int k = 0; k < rounds; k++)
        for (int f = 0; f < 2; f++) {
            scanner = f ? "" : NULL;
            ah_scan_result r;
            double t0 = ah__now_ms();
            if (scan(dirs, 5, AH_SCAN_CHILD, NULL, NULL, &r) == AH_OK) ah__scan_result_free(&r);
            ms[f] += ah__now_ms() - t0;
        }
    scanner = NULL;
    printf("scan cost per plugin: spawned scanner %.2f ms, forked child %.2f ms\n",
           ms[0] / (rounds * 5), ms[1] / (rounds * 5));
}

int main(void)
{
    ah__hw_facts_gather(&hw);
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    chmod(tmp_root, 0755);
    test_child_mode(0);
    test_child_mode(1);
    test_in_process();
    test_cache();
    test_discovery();
    test_load();
    test_services();
    test_log();
    test_scanner();
    test_unusable_not_cached();
    test_poisoned_parent();
    test_cost();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "chmod -R u+w %s && rm -rf %s", tmp_root, tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    return check_report("test_scan");
}
