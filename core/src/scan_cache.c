/*
 * The scan cache: what each plugin file said (or how it died) the last time
 * it was scanned, so an unchanged machine starts without forking a child per
 * plugin, and a crashing plugin is not re-run on every start.
 *
 * An entry is reused only when everything it depends on is unchanged: the
 * file's path, device, inode, size and mtime (nanoseconds) and a 64-bit hash
 * of its contents (so an in-place rewrite that restores the mtime is still
 * seen), the plugin's [plugin.<name>] keys, and, for the whole file, the host
 * ABI version and a fingerprint of the GPU driver versions and the CPU facts.
 *
 * Only what the file itself did is kept: available, rejected (ABI, bad
 * descriptor, refused the host) or quarantined (crash, hang, exit, garbage,
 * dlopen failure). A probe that reported the plugin unusable is never kept
 * (nor read back from an older cache): its cause is the environment, such as
 * no device or a GPU runtime unusable in a forked child, so it is asked again
 * on the next start.
 *
 * File format (little-endian):
 *   "AHSCACHE" | u32 format (1) | u32 host ABI | u64 fingerprint | u32 count
 *   count x ( u64 config hash | u32 length | record, see record_codec.c )
 *   u64 FNV-1a of everything before
 * The cache is advisory: a missing, unreadable, corrupt, foreign-version or
 * untrusted file (not ours, or writable by others) is ignored and rebuilt,
 * never believed. Writes go to a 0600 temp file renamed over the old one.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "plugin_keys.h"
#include "scan_int.h"

#define CACHE_MAGIC "AHSCACHE"
#define CACHE_FORMAT 1u
#define CACHE_HEADER 28u
#define CACHE_MAX (64u << 20)
#define FNV_PRIME 0x100000001b3ull

double ah__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- hashing -------------------------------------------------------------- */

uint64_t ah__hash_bytes(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= FNV_PRIME;
    }
    return h;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Word-at-a-time, four independent lanes (so the multiplies overlap), then
 * folded; a change-detection hash, not a cryptographic one: the trust
 * decision rests on file ownership and modes, not on this. */
int ah__hash_fd(int fd, uint64_t *out)
{
    static const uint64_t K = 0x9e3779b97f4a7c15ull;
    uint64_t lane[4] = {AH__HASH_SEED, AH__HASH_SEED ^ K, AH__HASH_SEED + K, ~AH__HASH_SEED};
    uint64_t total = 0;
    uint64_t buf[8192]; /* 64 KiB */
    if (lseek(fd, 0, SEEK_SET) < 0) return -1;
    for (;;) {
        /* Fill the whole buffer (short reads are legal), so only the last
         * chunk can end in a partial word and the hash does not depend on
         * how read() split the file. */
        size_t got = 0;
        while (got < sizeof buf) {
            ssize_t r = read(fd, (uint8_t *)buf + got, sizeof buf - got);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return -1;
            if (r == 0) break;
            got += (size_t)r;
        }
        size_t words = got / 8, rest = got % 8;
        for (size_t i = 0; i < words; i++) {
            uint64_t *l = &lane[i & 3];
            *l = (*l ^ buf[i]) * K;
            *l ^= *l >> 29;
        }
        if (rest) {
            uint64_t w = 0;
            memcpy(&w, (uint8_t *)buf + words * 8, rest);
            lane[0] = (lane[0] ^ w ^ (uint64_t)rest << 56) * K;
        }
        total += got;
        if (got < sizeof buf) break;
    }
    uint64_t h = mix64(total);
    for (int i = 0; i < 4; i++) h = mix64(h ^ lane[i]);
    *out = h;
    return 0;
}

static uint64_t hash_file_text(uint64_t h, const char *path)
{
    char buf[4096];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ah__hash_bytes(h, "-", 1); /* absence is a state too */
    h = ah__hash_bytes(h, path, strlen(path) + 1);
    for (int i = 0; i < 16; i++) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r <= 0) break;
        h = ah__hash_bytes(h, buf, (size_t)r);
    }
    close(fd);
    return h;
}

uint64_t ah__driver_fingerprint(const ah_hw_facts *hw)
{
    uint64_t h = AH__HASH_SEED;
    h = hash_file_text(h, "/proc/driver/nvidia/version");
    h = hash_file_text(h, "/sys/module/nvidia/version");
    h = hash_file_text(h, "/sys/module/amdgpu/version");
    if (hw) {
        uint32_t u[4] = {hw->struct_size, hw->cpu_isa, hw->cpu_isa_cpuid, hw->cpu_logical_cores};
        h = ah__hash_bytes(h, u, sizeof u);
        h = ah__hash_bytes(h, &hw->memory_bytes, sizeof hw->memory_bytes);
        h = ah__hash_bytes(h, hw->cpu_vendor, strnlen(hw->cpu_vendor, sizeof hw->cpu_vendor));
        h = ah__hash_bytes(h, hw->cpu_model, strnlen(hw->cpu_model, sizeof hw->cpu_model));
        h = ah__hash_bytes(h, hw->amx_note, strnlen(hw->amx_note, sizeof hw->amx_note));
    }
    return h;
}

uint64_t ah__config_hash(const ah_config *config, const char *plugin, const ah_caps *caps)
{
    uint64_t h = AH__HASH_SEED;
    if (!config || !plugin) return h;
    for (uint32_t i = 0; caps && i < caps->n_config_keys; i++) {
        const ah_config_key *k = &caps->config_keys[i];
        if (!k->name) continue;
        const char *set = ah__config_plugin_key(config, plugin, k->name);
        const char *t = set ? set : k->default_value ? k->default_value : "";
        ah_plugin_value v;
        char msg[8];
        h = ah__hash_bytes(h, k->name, strlen(k->name) + 1);
        if (ah__plugin_key_parse(k, t, &v, msg, sizeof msg) != 0 || k->type == AH_KEY_STRING) {
            /* text: a string, or a value the host refuses at creation anyway */
            h = ah__hash_bytes(h, t, strlen(t) + 1);
        } else if (k->type == AH_KEY_FLOAT) {
            double f = v.f == 0 ? 0.0 : v.f; /* -0 and 0 mean the same */
            h = ah__hash_bytes(h, &f, sizeof f);
        } else {
            h = ah__hash_bytes(h, &v.i, sizeof v.i);
        }
    }
    if (caps) return h;
    for (uint32_t i = 0; i < config->n_plugin_keys; i++) {
        const ah_plugin_kv *kv = &config->plugin_keys[i];
        if (!kv->plugin || strcmp(kv->plugin, plugin) != 0) continue;
        h = ah__hash_bytes(h, kv->key ? kv->key : "", strlen(kv->key ? kv->key : "") + 1);
        h = ah__hash_bytes(h, kv->value ? kv->value : "", strlen(kv->value ? kv->value : "") + 1);
    }
    return h;
}

/* ---- in memory ------------------------------------------------------------ */

void ah__cache_free(ah_cache *c)
{
    for (uint32_t i = 0; i < c->n; i++) ah__rec_free(c->e[i].rec);
    ah__free(c->e);
    ah__free(c->note);
    memset(c, 0, sizeof *c);
}

static int append(ah_cache *c, uint64_t config_hash, ah_plugin_rec *rec)
{
    if (c->n == c->cap) {
        uint32_t cap = c->cap ? c->cap * 2 : 16;
        ah_cache_entry *e = ah__realloc(c->e, cap * sizeof *e);
        if (!e) return -1;
        c->e = e;
        c->cap = cap;
    }
    c->e[c->n++] = (ah_cache_entry){config_hash, rec, 0};
    return 0;
}

static int same_identity(const ah_plugin_rec *a, const ah_plugin_rec *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns;
}

ah_cache_entry *ah__cache_find(ah_cache *c, const ah_plugin_rec *id, const ah_config *config)
{
    for (uint32_t i = 0; i < c->n; i++) {
        ah_cache_entry *e = &c->e[i];
        if (!e->rec->info.path || strcmp(e->rec->info.path, id->info.path) != 0) continue;
        if (!same_identity(e->rec, id)) return NULL;
        if (e->config_hash != ah__config_hash(config, e->rec->info.name, e->rec->info.caps))
            return NULL;
        return e;
    }
    return NULL;
}

/* What a cache may hold: how the file itself behaved (available, or
 * rejected, or quarantined for crashing, hanging, sending garbage). Not a
 * probe that found the plugin unusable: that depends on the environment
 * (no device, a driver not loaded, a GPU runtime this process cannot use),
 * which the key does not capture, and is cheap to ask again. */
static int keep(const ah_plugin_rec *rec) { return rec->info.state != AH_PLUGIN_UNAVAILABLE; }

int ah__cache_put(ah_cache *c, const ah_plugin_rec *rec, const ah_config *config)
{
    if (!keep(rec)) {
        /* nor may an older entry for the path outlive this answer */
        for (uint32_t i = 0; i < c->n; i++)
            if (strcmp(c->e[i].rec->info.path, rec->info.path) == 0) {
                ah__rec_free(c->e[i].rec);
                c->e[i] = c->e[--c->n];
                return 0;
            }
        return 1;
    }
    ah_plugin_rec *copy = ah__rec_dup(rec);
    if (!copy) return -1;
    uint64_t h = ah__config_hash(config, rec->info.name, rec->info.caps);
    for (uint32_t i = 0; i < c->n; i++)
        if (strcmp(c->e[i].rec->info.path, rec->info.path) == 0) {
            ah__rec_free(c->e[i].rec);
            c->e[i] = (ah_cache_entry){h, copy, 1};
            return 0;
        }
    if (append(c, h, copy) != 0) {
        ah__rec_free(copy);
        return -1;
    }
    c->e[c->n - 1].used = 1;
    return 0;
}

/* ---- reading ---------------------------------------------------------------- */

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static int set_note(ah_cache *c, const char *fmt, const char *path, const char *detail)
{
    char buf[1024];
    snprintf(buf, sizeof buf, fmt, path, detail ? detail : "");
    ah__free(c->note);
    c->note = ah__strdup(buf);
    return c->note ? 0 : -1;
}

/* Parse a whole cache image; 0 fine, 1 corrupt (note set), -1 OOM. */
static int parse(ah_cache *c, const char *path, const uint8_t *p, size_t n)
{
    if (n < CACHE_HEADER + 8 || memcmp(p, CACHE_MAGIC, 8) != 0)
        return set_note(c, "scan cache %s ignored: not a scan cache%s", path, NULL) ? -1 : 1;
    if (ah__hash_bytes(AH__HASH_SEED, p, n - 8) != get64(p + n - 8))
        return set_note(c, "scan cache %s ignored: checksum mismatch (corrupt)%s", path, NULL) ? -1
                                                                                               : 1;
    if (get32(p + 8) != CACHE_FORMAT || get32(p + 12) != AH_ABI_VERSION)
        return set_note(c, "scan cache %s ignored: written by another attnhost version%s", path,
                        NULL)
                   ? -1
                   : 1;
    if (get64(p + 16) != c->fingerprint)
        return set_note(c, "scan cache %s ignored: drivers or CPU facts changed%s", path, NULL) ? -1
                                                                                                : 1;
    uint32_t count = get32(p + 24);
    size_t off = CACHE_HEADER, end = n - 8;
    for (uint32_t i = 0; i < count; i++) {
        if (end - off < 12) goto corrupt;
        uint64_t ch = get64(p + off);
        uint32_t len = get32(p + off + 8);
        off += 12;
        if (len > end - off) goto corrupt;
        ah_plugin_rec *rec;
        char why[512];
        if (ah__rec_decode(p + off, len, &rec, why, sizeof why) != 0) {
            if (strcmp(why, "out of memory") == 0) return -1;
            return set_note(c, "scan cache %s ignored: %s", path, why) ? -1 : 1;
        }
        if (rec->info.path && !keep(rec)) {
            /* written by an older attnhost, which kept these: not believed */
            ah__rec_free(rec);
            off += len;
            continue;
        }
        if (!rec->info.path || append(c, ch, rec) != 0) {
            int no_path = !rec->info.path; /* read before the free */
            ah__rec_free(rec);
            if (no_path) goto corrupt;
            return -1;
        }
        off += len;
    }
    if (off != end) goto corrupt;
    return 0;
corrupt:
    return set_note(c, "scan cache %s ignored: malformed entry table%s", path, NULL) ? -1 : 1;
}

int ah__cache_load(ah_cache *c, const char *path, uint64_t fingerprint)
{
    memset(c, 0, sizeof *c);
    c->fingerprint = fingerprint;
    if (!path || !*path) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        return set_note(c, "scan cache %s ignored: %s", path, strerror(errno));
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = set_note(c, "scan cache %s ignored: not a regular file%s", path, NULL);
    } else if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        rc = set_note(c, "scan cache %s ignored: not owned by this user or writable by others%s",
                      path, NULL);
    } else if (st.st_size > (off_t)CACHE_MAX) {
        rc = set_note(c, "scan cache %s ignored: too large%s", path, NULL);
    } else {
        size_t got;
        uint8_t *p = ah__read_fd(fd, (size_t)st.st_size, &got);
        if (!p) {
            close(fd);
            return -1;
        }
        int pr = parse(c, path, p, got);
        ah__free(p);
        if (pr != 0) {
            /* Nothing from a bad file survives, not even the entries that
             * happened to parse before the damage. */
            char *note = c->note;
            c->note = NULL;
            ah__cache_free(c);
            c->fingerprint = fingerprint;
            c->note = note;
            rc = pr < 0 ? -1 : 0;
        }
    }
    close(fd);
    return rc;
}

/* ---- writing ------------------------------------------------------------------ */

static int mkdirs(const char *path)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST) return -1;
        *s = '/';
    }
    return 0;
}

int ah__cache_save(const ah_cache *c, const char *path, char *why, size_t cap)
{
    ah_buf b = {0};
    ah__buf_put(&b, CACHE_MAGIC, 8);
    ah__buf_u32(&b, CACHE_FORMAT);
    ah__buf_u32(&b, AH_ABI_VERSION);
    ah__buf_u64(&b, c->fingerprint);
    ah__buf_u32(&b, 0); /* count, patched */
    uint32_t count = 0;
    for (uint32_t i = 0; i < c->n; i++) {
        const ah_cache_entry *e = &c->e[i];
        struct stat st;
        if (!e->used && stat(e->rec->info.path, &st) != 0) continue;
        ah__buf_u64(&b, e->config_hash);
        size_t at = b.len;
        ah__buf_u32(&b, 0);
        ah__rec_encode(e->rec, &b);
        if (b.oom) break;
        uint32_t len = (uint32_t)(b.len - at - 4);
        memcpy(b.p + at,
               (uint8_t[4]){(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
                            (uint8_t)(len >> 24)},
               4);
        count++;
    }
    if (!b.oom)
        memcpy(b.p + 24,
               (uint8_t[4]){(uint8_t)count, (uint8_t)(count >> 8), (uint8_t)(count >> 16),
                            (uint8_t)(count >> 24)},
               4);
    if (!b.oom) ah__buf_u64(&b, ah__hash_bytes(AH__HASH_SEED, b.p, b.len));
    if (b.oom) {
        ah__buf_free(&b);
        snprintf(why, cap, "out of memory");
        return -1;
    }
    int rc = ah__write_file_atomic(path, b.p, b.len, why, cap);
    ah__buf_free(&b);
    return rc;
}

int ah__write_file_atomic(const char *path, const void *data, size_t len, char *why, size_t cap)
{
    const uint8_t *p = data;
    char tmp[PATH_MAX];
    int n = snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    int fd = -1, rc = -1, created = 0;
    if (n < 0 || (size_t)n >= sizeof tmp) {
        snprintf(why, cap, "path too long");
        goto out;
    }
    if (mkdirs(path) != 0) {
        snprintf(why, cap, "cannot create the directory of %s: %s", path, strerror(errno));
        goto out;
    }
    fd = mkstemp(tmp); /* mode 0600 */
    if (fd < 0) {
        snprintf(why, cap, "cannot create %s: %s", tmp, strerror(errno));
        goto out;
    }
    created = 1;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, p + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            snprintf(why, cap, "cannot write %s: %s", tmp, w < 0 ? strerror(errno) : "short write");
            goto out;
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        fd = -1;
        snprintf(why, cap, "cannot write %s: %s", tmp, strerror(errno));
        goto out;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        snprintf(why, cap, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0) close(fd);
    if (rc != 0 && created) unlink(tmp);
    return rc;
}

uint8_t *ah__read_fd(int fd, size_t n, size_t *got)
{
    uint8_t *p = ah__malloc(n ? n : 1);
    *got = 0;
    if (!p) return NULL;
    while (*got < n) {
        ssize_t r = read(fd, p + *got, n - *got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        *got += (size_t)r;
    }
    return p;
}
