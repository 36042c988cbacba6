/*
 * Check records (check_records.c): the conformance suite run over the
 * conformance mutant (tests/conformance/mutant_plugin.c) is recorded beside
 * the scan cache; a later host finds it (what `attnhost list` shows) and
 * [select] require_checked selects the plugin. A touched or replaced file,
 * another configuration of its keys or another device makes it "not
 * checked"; a failed run is recorded and does not count; a corrupt file is
 * ignored with a warning; a read-only directory is used, not written.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <attnhost/attnhost.h>

#include "check.h"
#include "reliability_fixture.h"
#include "conformance.h"
#include "scan_int.h"

#define MUTANT_SO ATTNHOST_BUILD_DIR "/tests/conformance/mutant/conf_mutant.so"

static char root[] = "/tmp/ah_test_checks_XXXXXX";
static char plugin_dir[512], plugin_so[600], cache_dir[512], cache[600], records[600];

static const char *model_text = "[model]\nname = t\nnum_layers = 1\nnum_q_heads = 4\n"
                                "num_kv_heads = 2\nhead_size = 64\ndtype = fp32\nblock_size = 16\n";

static void copy_file(const char *from, const char *to)
{
    char buf[65536], tmp[700];
    snprintf(tmp, sizeof tmp, "%s.new", to);
    int in = open(from, O_RDONLY), out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    CHECK_MSG(in >= 0 && out >= 0, "copy %s -> %s: %s", from, tmp, strerror(errno));
    ssize_t r;
    while (in >= 0 && out >= 0 && (r = read(in, buf, sizeof buf)) > 0)
        CHECK(write(out, buf, (size_t)r) == r);
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    chmod(tmp, 0755);
    CHECK(rename(tmp, to) == 0); /* a new inode, as a package upgrade makes */
}

static ah_host *host_with(const char *cfg, const char *cache_path)
{
    const char *dirs[1] = {plugin_dir};
    ah_host_options o = rel_host_options(dirs, 1, cfg);
    o.cache_path = cache_path;
    ah_host *h = NULL;
    ah_error err;
    ah_status s = ah_host_create(&o, &h, &err);
    CHECK_MSG(s == AH_OK, "host: %s", err.msg);
    return s == AH_OK ? h : NULL;
}

static ah_host *host(const char *cfg) { return host_with(cfg, cache); }

/* Run the suite (quick) over conf_mutant and record it: the summary. */
static ah_conformance_summary check_and_record(ah_host *h, ah_status *rec_status, char *msg,
                                               size_t cap)
{
    ah_conformance_summary sum;
    FILE *log = tmpfile();
    ah_conformance_options o = {"conf_mutant", 7, 1, 0, log ? log : stdout, 0, NULL};
    CHECK(ah_conformance_run(h, &o, &sum) == AH_OK);
    if (log) fclose(log);
    ah_check_result r = {sizeof r, sum.passed, sum.failed, sum.skipped, sum.graph_level};
    ah_error err;
    *rec_status = ah_host_record_check(h, "conf_mutant", &r, &err);
    snprintf(msg, cap, "%s", *rec_status == AH_OK ? "" : err.msg);
    return sum;
}

static int has_record(const char *cfg, ah_check_record *out)
{
    ah_host *h = host(cfg);
    if (!h) return 0;
    int found = ah_host_plugin_check(h, "conf_mutant", out) == AH_OK;
    ah_host_destroy(h);
    return found;
}

/* Selection under require_checked: the winner, or NULL with the reason of
 * conf_mutant's refusal in why. */
static int selects(const char *plugin_cfg, char *why, size_t cap)
{
    char cfg[512];
    snprintf(cfg, sizeof cfg, "[select]\nrequire_checked = true\n%s", plugin_cfg);
    ah_host *h = host(cfg);
    ah_model *m = NULL;
    ah_error err;
    CHECK(ah_model_parse(model_text, "<t>", &m, &err) == AH_OK);
    ah_selection *sel = NULL;
    int chosen = 0;
    why[0] = '\0';
    if (h && m) {
        ah_host_explain(h, m, NULL, &sel, &err);
        const ah_decision *d = sel ? ah_selection_decision(sel, 0, AH_PHASE_DECODE) : NULL;
        chosen = d && d->plugin && !strcmp(d->plugin, "conf_mutant");
        for (uint32_t k = 0; d && k < d->n_candidates; k++)
            for (uint32_t r = 0; r < d->candidates[k].n_reasons; r++)
                if (d->candidates[k].reasons[r].code == AH_REASON_NOT_CHECKED)
                    snprintf(why, cap, "%s", d->candidates[k].reasons[r].value);
    }
    ah_selection_destroy(sel);
    ah_model_destroy(m);
    ah_host_destroy(h);
    return chosen;
}

static void test_pass_record_select(void)
{
    ah_check_record rec;
    char why[512], msg[1024];
    CHECK(!has_record("", &rec));
    CHECK(!selects("", why, sizeof why));
    CHECK_CONTAINS(why, "not checked on this device (run attnhost check --plugin conf_mutant)");
    CHECK(strcmp(ah_reason_code_str(AH_REASON_NOT_CHECKED), "not_checked") == 0);

    ah_host *h = host("[plugin.conf_mutant]\nbug = none\n");
    CHECK_STREQ(ah_host_check_records_path(h), records);
    ah_status rs;
    ah_conformance_summary s = check_and_record(h, &rs, msg, sizeof msg);
    CHECK_MSG(rs == AH_OK, "record: %s", msg);
    CHECK(s.failed == 0 && s.passed > 0);
    CHECK(s.graph_level == AH_GRAPH_ALWAYS);
    /* this host keeps what it found at creation */
    CHECK(ah_host_plugin_check(h, "conf_mutant", &rec) == AH_ERR_NOT_FOUND);
    ah_host_destroy(h);
    struct stat st;
    CHECK(stat(records, &st) == 0 && (st.st_mode & 0777) == 0600);

    /* A later host finds it, under the same keys written either way. */
    CHECK(has_record("", &rec));
    CHECK(has_record("[plugin.conf_mutant]\nbug = none\nfp8 = off\n", &rec));
    CHECK(rec.ok && rec.passed == s.passed && rec.failed == 0 && rec.skipped == s.skipped);
    CHECK(rec.graph_level == AH_GRAPH_ALWAYS);
    CHECK_STREQ(rec.attnhost_version, AH_VERSION_STRING);
    char today[16];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(today, sizeof today, "%Y-%m-%d", &tm);
    CHECK_STREQ(rec.date, today);
    CHECK(llabs((long long)(rec.checked_at - (int64_t)now)) < 600);
    CHECK(selects("", why, sizeof why));
    CHECK_STREQ(why, "");
    /* require_checked off: the reason never appears */
    ah_host *plain = host("");
    CHECK(plain != NULL);
    ah_host_destroy(plain);
}

static void test_other_config(void)
{
    ah_check_record rec;
    char why[512];
    const char *fp8 = "[plugin.conf_mutant]\nfp8 = allowed\n";
    CHECK(!has_record(fp8, &rec));
    CHECK(!selects(fp8, why, sizeof why));
    CHECK_CONTAINS(why, "not checked on this device (run attnhost check --plugin conf_mutant)");
    CHECK_CONTAINS(why, "[plugin.conf_mutant] keys changed");
    CHECK(has_record("", &rec) && rec.ok); /* the default's record stays */
}

static void test_failed_check(void)
{
    const char *bug = "[plugin.conf_mutant]\nbug = skip_head\n";
    ah_host *h = host(bug);
    ah_status rs;
    char msg[1024], why[512];
    ah_conformance_summary s = check_and_record(h, &rs, msg, sizeof msg);
    ah_host_destroy(h);
    CHECK_MSG(rs == AH_OK, "record: %s", msg);
    CHECK(s.failed > 0);
    ah_check_record rec;
    CHECK(has_record(bug, &rec));
    CHECK(!rec.ok && rec.failed == s.failed && rec.passed == s.passed);
    CHECK(!selects(bug, why, sizeof why));
    CHECK_CONTAINS(why, "failed on this device on ");
    CHECK_CONTAINS(why, "run attnhost check --plugin conf_mutant");
    CHECK(selects("", why, sizeof why)); /* the correct configuration still passes */
}

static void record_fake(const char *cfg, uint32_t passed, uint32_t failed)
{
    ah_host *h = host(cfg);
    ah_check_result r = {sizeof r, passed, failed, 0, AH_GRAPH_ALWAYS};
    ah_error err;
    ah_status s = h ? ah_host_record_check(h, "conf_mutant", &r, &err) : AH_ERR_INTERNAL;
    CHECK_MSG(s == AH_OK, "record: %s", err.msg);
    ah_host_destroy(h);
}

static void test_changed_file(void)
{
    ah_check_record rec;
    char why[512];
    CHECK(has_record("", &rec));
    /* touch: a new mtime (and ctime) is another file identity */
    struct timespec ts[2] = {{0, UTIME_NOW}, {1000000000, 0}};
    CHECK(utimensat(AT_FDCWD, plugin_so, ts, 0) == 0);
    CHECK(!has_record("", &rec));
    CHECK(!selects("", why, sizeof why));
    CHECK_CONTAINS(why, "the plugin file changed since its check on");
    record_fake("", 14, 0);
    CHECK(has_record("", &rec) && rec.ok && rec.passed == 14);
    CHECK(selects("", why, sizeof why));
    /* replaced by a new copy (a package upgrade): not checked again */
    copy_file(MUTANT_SO, plugin_so);
    CHECK(!has_record("", &rec));
    CHECK(!selects("", why, sizeof why));
    record_fake("", 14, 0);
    CHECK(selects("", why, sizeof why));
}

/* Read the whole record file. */
static uint8_t *slurp(size_t *n)
{
    FILE *f = fopen(records, "rb");
    uint8_t *p = malloc(1 << 20);
    *n = f && p ? fread(p, 1, 1 << 20, f) : 0;
    if (f) fclose(f);
    return p;
}

static void spill(const uint8_t *p, size_t n)
{
    FILE *f = fopen(records, "wb");
    CHECK(f && fwrite(p, 1, n, f) == n);
    if (f) fclose(f);
    chmod(records, 0600);
}

/* Another device: the same file and keys, a record whose device name
 * differs (tampered, with its checksum fixed). */
static void test_other_device(void)
{
    size_t n;
    uint8_t *p = slurp(&n);
    const char *name = "host CPU (conformance mutant)";
    uint8_t *at = NULL; /* the last record written: the default configuration's */
    for (uint8_t *q = p; p && (q = memmem(q, n - (size_t)(q - p), name, strlen(name))); q++) at = q;
    CHECK(at != NULL);
    if (!at) {
        free(p);
        return;
    }
    at[strlen(name) - 2] = 'T'; /* "mutanT)" */
    uint64_t sum = ah__hash_bytes(AH__HASH_SEED, p, n - 8);
    for (int i = 0; i < 8; i++) p[n - 8 + i] = (uint8_t)(sum >> (8 * i));
    spill(p, n);
    ah_check_record rec;
    char why[512];
    ah_host *h = host("");
    CHECK_STREQ(ah_host_check_records_note(h), "");
    ah_host_destroy(h);
    CHECK(!has_record("", &rec));
    CHECK(!selects("", why, sizeof why));
    CHECK_CONTAINS(why, "was on another device (host CPU (conformance mutanT))");
    free(p);
    record_fake("", 14, 0);
    CHECK(has_record("", &rec));
}

static void test_corrupt(void)
{
    size_t n;
    uint8_t *p = slurp(&n);
    CHECK(n > 40);
    if (n > 40) {
        p[n / 2] ^= 0x5a; /* a flipped byte */
        spill(p, n);
        ah_host *h = host("");
        CHECK(h != NULL);
        if (h) {
            CHECK_CONTAINS(ah_host_check_records_note(h), "checksum mismatch (corrupt)");
            CHECK_CONTAINS(ah_host_check_records_note(h), records);
            ah_check_record rec;
            CHECK(ah_host_plugin_check(h, "conf_mutant", &rec) == AH_ERR_NOT_FOUND);
            ah_host_destroy(h);
        }
        spill((const uint8_t *)"hello", 5);
        h = host("");
        CHECK(h && strstr(ah_host_check_records_note(h), "not a check-record file"));
        ah_host_destroy(h);
        /* a truncated file: the checksum no longer matches either */
        spill(p, n / 3);
        h = host("");
        CHECK(h && strstr(ah_host_check_records_note(h), "ignored"));
        ah_host_destroy(h);
        /* the next record replaces the bad file */
        record_fake("", 14, 0);
        ah_check_record rec;
        CHECK(has_record("", &rec) && rec.ok);
        h = host("");
        CHECK(h && !strcmp(ah_host_check_records_note(h), ""));
        ah_host_destroy(h);
    }
    free(p);
}

/* Hostile bytes behind a valid checksum: every mutation of a good file
 * reads as records or is refused whole, never a crash (ASan runs this). */
static void test_mutated(void)
{
    size_t n;
    uint8_t *good = slurp(&n), *p = malloc(n ? n : 1);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int refused = 0;
    for (int round = 0; p && n > 40 && round < 300; round++) {
        memcpy(p, good, n);
        size_t m = n;
        for (int k = 0; k < 1 + round % 4; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t at = 8 + (size_t)(x % (n - 16));
            p[at] = (uint8_t)(x >> 32);
        }
        if (round % 5 == 4) m = 24 + (size_t)(x % (n - 24)); /* truncated too */
        uint64_t sum = ah__hash_bytes(AH__HASH_SEED, p, m - 8);
        for (int i = 0; i < 8; i++) p[m - 8 + i] = (uint8_t)(sum >> (8 * i));
        spill(p, m);
        ah_host *h = host("");
        CHECK(h != NULL);
        if (h) refused += *ah_host_check_records_note(h) != 0;
        ah_host_destroy(h);
    }
    CHECK(refused > 0);
    spill(good, n);
    free(p);
    free(good);
}

/* The read-only part, in this process or (as root, whom modes do not stop)
 * in a child running as nobody over root's files. Returns the failures. */
static int read_only_checks(void)
{
    int before = check_failures;
    ah_check_record rec;
    ah_host *h = host("");
    CHECK(h != NULL);
    if (h) {
        CHECK(ah_host_plugin_check(h, "conf_mutant", &rec) == AH_OK && rec.ok); /* used */
        CHECK_STREQ(ah_host_check_records_note(h), "");
        ah_check_result r = {sizeof r, 1, 0, 0, AH_GRAPH_NEVER};
        ah_error err;
        CHECK(ah_host_record_check(h, "conf_mutant", &r, &err) == AH_ERR_IO); /* not written */
        CHECK_CONTAINS(err.msg, "check record for conf_mutant not written");
        ah_host_destroy(h);
    }
    return check_failures - before;
}

static void test_read_only(void)
{
    struct stat before, after;
    CHECK(stat(records, &before) == 0);
    if (geteuid() != 0) {
        chmod(cache_dir, 0555);
        read_only_checks();
        chmod(cache_dir, 0700);
    } else {
        /* A file root wrote and shared read-only (0644 in a 0755 directory). */
        chmod(records, 0644);
        chmod(cache_dir, 0755);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
            _exit(read_only_checks() ? 1 : 0);
        }
        int st = 0;
        CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "read-only child: status %d", st);
        chmod(records, 0600);
    }
    CHECK(stat(records, &after) == 0);
    CHECK(before.st_ino == after.st_ino && before.st_mtim.tv_nsec == after.st_mtim.tv_nsec &&
          before.st_mtim.tv_sec == after.st_mtim.tv_sec);
}

static void test_no_cache(void)
{
    ah_host *h = host_with("[select]\nrequire_checked = true\n", "");
    CHECK(h != NULL);
    if (!h) return;
    CHECK_STREQ(ah_host_check_records_path(h), "");
    ah_check_result r = {sizeof r, 1, 0, 0, AH_GRAPH_NEVER};
    ah_error err;
    CHECK(ah_host_record_check(h, "conf_mutant", &r, &err) == AH_ERR_IO);
    CHECK_CONTAINS(err.msg, "no scan cache");
    CHECK(ah_host_record_check(h, "nope", &r, &err) == AH_ERR_NOT_FOUND);
    r.struct_size = 4;
    CHECK(ah_host_record_check(h, "conf_mutant", &r, &err) == AH_ERR_INVALID_ARGUMENT);
    ah_model *m = NULL;
    ah_selection *sel = NULL;
    CHECK(ah_model_parse(model_text, "<t>", &m, &err) == AH_OK);
    CHECK(ah_host_select(h, m, &sel, &err) != AH_OK);
    CHECK_CONTAINS(err.msg, "conf_mutant: check=not checked on this device: no scan cache");
    ah_selection_destroy(sel);
    ah_model_destroy(m);
    ah_host_destroy(h);
}

int main(void)
{
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    chmod(root, 0755);
    snprintf(plugin_dir, sizeof plugin_dir, "%s/plugins", root);
    snprintf(plugin_so, sizeof plugin_so, "%s/conf_mutant.so", plugin_dir);
    snprintf(cache_dir, sizeof cache_dir, "%s/cache", root);
    snprintf(cache, sizeof cache, "%s/scan-cache", cache_dir);
    snprintf(records, sizeof records, "%s/check-records", cache_dir);
    CHECK(mkdir(plugin_dir, 0755) == 0);
    copy_file(MUTANT_SO, plugin_so);

    test_pass_record_select();
    test_other_config();
    test_failed_check();
    test_changed_file();
    test_other_device();
    test_mutated();
    test_corrupt();
    test_read_only();
    test_no_cache();

    char cmd[700];
    snprintf(cmd, sizeof cmd, "chmod -R u+w %s && rm -rf %s", root, root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return check_report("test_check_records");
}
