/*
 * Per-machine record files beside the scan cache: the framing, reader and
 * writer that check_records.c and tune_table.c share (see record_file.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "record_file.h"
#include "record_key.h"

/* ---- decoding: any bytes in, values or r->bad out ---------------------------- */

uint32_t ah__rf_u32(ah_rf_reader *r)
{
    if (r->bad || r->n - r->off < 4) {
        r->bad = 1;
        return 0;
    }
    const uint8_t *p = r->p + r->off;
    r->off += 4;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t ah__rf_u64(ah_rf_reader *r)
{
    uint64_t lo = ah__rf_u32(r);
    return lo | (uint64_t)ah__rf_u32(r) << 32;
}

char *ah__rf_str(ah_rf_reader *r)
{
    uint32_t len = ah__rf_u32(r);
    if (r->bad || len > r->max_str || r->n - r->off < len || memchr(r->p + r->off, 0, len)) {
        r->bad = 1;
        return NULL;
    }
    char *s = ah__malloc((size_t)len + 1);
    if (!s) {
        r->oom = r->bad = 1;
        return NULL;
    }
    memcpy(s, r->p + r->off, len);
    s[len] = '\0';
    r->off += len;
    return s;
}

/* ---- encoding ------------------------------------------------------------------ */

void ah__rf_put_str(ah_buf *b, const char *s, uint32_t max)
{
    size_t n = s ? strnlen(s, max) : 0;
    ah__buf_u32(b, (uint32_t)n);
    ah__buf_put(b, s ? s : "", n);
}

static void put_u32_at(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16),
    p[3] = (uint8_t)(v >> 24);
}

/* The key's field f is in fmt's files (driver_fp only where key_fp says). */
static int key_field_held(const ah_rf_format *fmt, const ah_rf_field *f)
{
    return fmt->key_fp || f->off != offsetof(ah_record_key, driver_fp);
}

/* One field of an entry at entry + f->off (strings cut at max_str). Fields move through memcpy: a
 * double's bits travel as its u64. */
static void put_field(ah_buf *b, const ah_rf_field *f, const void *entry, uint32_t max_str)
{
    const char *at = (const char *)entry + f->off;
    uint32_t u32;
    uint64_t u64;
    const char *str;
    switch (f->kind) {
    case AH_RF_U32:
        memcpy(&u32, at, sizeof u32);
        ah__buf_u32(b, u32);
        break;
    case AH_RF_U64:
    case AH_RF_F64:
        memcpy(&u64, at, sizeof u64);
        ah__buf_u64(b, u64);
        break;
    case AH_RF_STR:
        memcpy(&str, at, sizeof str);
        ah__rf_put_str(b, str, max_str);
        break;
    }
}

/* What put_field wrote; r->bad on malformed bytes. */
static void read_field(ah_rf_reader *r, const ah_rf_field *f, void *entry)
{
    char *at = (char *)entry + f->off;
    uint32_t u32;
    uint64_t u64;
    char *str;
    switch (f->kind) {
    case AH_RF_U32:
        u32 = ah__rf_u32(r);
        memcpy(at, &u32, sizeof u32);
        break;
    case AH_RF_U64:
    case AH_RF_F64:
        u64 = ah__rf_u64(r);
        memcpy(at, &u64, sizeof u64);
        break;
    case AH_RF_STR:
        str = ah__rf_str(r);
        memcpy(at, &str, sizeof str);
        break;
    }
}

/* An entry: its key (the entry starts with an ah_record_key), then the
 * format's fields. */
static void put_entry(const ah_rf_format *fmt, ah_buf *b, const void *entry)
{
    for (const ah_rf_field *f = ah__record_key_fields;
         f < ah__record_key_fields + ah__record_key_n_fields; f++)
        if (key_field_held(fmt, f)) put_field(b, f, entry, fmt->max_str);
    for (const ah_rf_field *f = fmt->field; f < fmt->field + fmt->n_fields; f++)
        put_field(b, f, entry, fmt->max_str);
}

/* What put_entry wrote, into a zeroed entry; on malformed bytes r->bad,
 * the entry then to be freed all the same. */
static void read_entry(const ah_rf_format *fmt, ah_rf_reader *r, void *entry)
{
    for (const ah_rf_field *f = ah__record_key_fields;
         f < ah__record_key_fields + ah__record_key_n_fields; f++)
        if (key_field_held(fmt, f)) read_field(r, f, entry);
    for (const ah_rf_field *f = fmt->field; f < fmt->field + fmt->n_fields; f++)
        read_field(r, f, entry);
}

void ah__rf_entry_free(const ah_rf_format *fmt, void *entry)
{
    ah__record_key_free(entry);
    for (const ah_rf_field *f = fmt->field; f < fmt->field + fmt->n_fields; f++)
        if (f->kind == AH_RF_STR) {
            char *str, *none = NULL;
            memcpy(&str, (char *)entry + f->off, sizeof str);
            ah__free(str);
            memcpy((char *)entry + f->off, &none, sizeof none);
        }
}

static int encode(const ah_rf_format *fmt, const ah_rf_entries *a, ah_buf *b)
{
    ah__buf_put(b, fmt->magic, 8);
    ah__buf_u32(b, fmt->format);
    ah__buf_u32(b, a->n);
    for (uint32_t i = 0; i < a->n && !b->oom; i++) {
        size_t at = b->len;
        ah__buf_u32(b, 0);
        put_entry(fmt, b, (const char *)a->e + (size_t)i * fmt->entry_size);
        if (!b->oom) put_u32_at(b->p + at, (uint32_t)(b->len - at - 4));
    }
    if (!b->oom) ah__buf_u64(b, ah__hash_bytes(AH__HASH_SEED, b->p, b->len));
    return b->oom ? -1 : 0;
}

/* Decode one entry of n bytes and add it to a: 0 taken, 1 malformed, -1
 * out of memory. */
static int take(const ah_rf_format *fmt, ah_rf_entries *a, const uint8_t *p, size_t n)
{
    _Alignas(16) char entry[AH_RF_ENTRY_MAX];
    ah_rf_reader r = {p, n, 0, fmt->max_str, 0, 0};
    memset(entry, 0, fmt->entry_size);
    read_entry(fmt, &r, entry);
    const char *path = ((const ah_record_key *)(const void *)entry)->path;
    if (!r.bad && (r.off != n || !path || !*path || !fmt->valid(entry))) r.bad = 1;
    if (r.bad || ah__rf_add(fmt, a, entry) != 0) {
        ah__rf_entry_free(fmt, entry);
        return r.bad && !r.oom ? 1 : -1;
    }
    return 0;
}

/* Parse a whole image. 0 fine; 1 refused (*why set); -1 out of memory. */
static int parse(const ah_rf_format *fmt, const uint8_t *p, size_t n, ah_rf_entries *a, char *why,
                 size_t cap)
{
    if (n < 16 + 8 || memcmp(p, fmt->magic, 8) != 0) {
        snprintf(why, cap, "%s", fmt->not_this);
        return 1;
    }
    uint64_t sum = 0;
    for (int i = 7; i >= 0; i--) sum = sum << 8 | p[n - 8 + (size_t)i];
    if (ah__hash_bytes(AH__HASH_SEED, p, n - 8) != sum) {
        snprintf(why, cap, "checksum mismatch (corrupt)");
        return 1;
    }
    ah_rf_reader r = {p, n - 8, 8, fmt->max_str, 0, 0};
    uint32_t format = ah__rf_u32(&r), count = ah__rf_u32(&r);
    if (format != fmt->format) {
        snprintf(why, cap, "written by another attnhost version (format %u)", format);
        return 1;
    }
    for (uint32_t i = 0; i < count; i++) {
        uint32_t len = ah__rf_u32(&r);
        int d = r.bad || len > r.n - r.off ? 1 : take(fmt, a, r.p + r.off, len);
        if (d < 0) return -1;
        if (d > 0) {
            snprintf(why, cap, "malformed %s %u (corrupt)", fmt->entry_word, i);
            return 1;
        }
        r.off += len;
    }
    if (r.bad || r.off != r.n) {
        snprintf(why, cap, "malformed %s table (corrupt)", fmt->entry_word);
        return 1;
    }
    return 0;
}

/* ---- entry arrays ------------------------------------------------------------- */

int ah__rf_add(const ah_rf_format *fmt, ah_rf_entries *a, const void *entry)
{
    if (a->n == a->cap) {
        uint32_t c = a->cap ? a->cap * 2 : 16;
        void *g = ah__realloc(a->e, c * fmt->entry_size);
        if (!g) return -1;
        a->e = g;
        a->cap = c;
    }
    memcpy((char *)a->e + (size_t)a->n++ * fmt->entry_size, entry, fmt->entry_size);
    return 0;
}

void ah__rf_clear(const ah_rf_format *fmt, ah_rf_entries *a)
{
    for (uint32_t i = 0; i < a->n; i++)
        ah__rf_entry_free(fmt, (char *)a->e + (size_t)i * fmt->entry_size);
    ah__free(a->e);
    memset(a, 0, sizeof *a);
}

void ah__rf_prune(const ah_rf_format *fmt, ah_rf_entries *a,
                  int (*same)(const void *entry, const void *key), const void *key)
{
    size_t sz = fmt->entry_size;
    char *e = a->e;
    uint32_t *n = &a->n;
#define AT(k) (e + (size_t)(k)*sz)
#define STAMP(k) (*(const uint64_t *)(const void *)(AT(k) + fmt->stamp_off))
    uint32_t kept = 0;
    for (uint32_t k = 0; k < *n; k++) {
        struct stat st;
        const char *path = ((const ah_record_key *)(const void *)AT(k))->path;
        if (same(AT(k), key) || stat(path, &st) != 0) ah__rf_entry_free(fmt, AT(k));
        else memmove(AT(kept++), AT(k), sz);
    }
    *n = kept;
    while (*n >= fmt->max_entries) { /* the oldest goes */
        uint32_t old = 0;
        for (uint32_t k = 1; k < *n; k++)
            if (STAMP(k) < STAMP(old)) old = k;
        ah__rf_entry_free(fmt, AT(old));
        memmove(AT(old), AT(--*n), sz);
    }
#undef STAMP
#undef AT
}

/* ---- files -------------------------------------------------------------------- */

int ah__rf_load(const ah_rf_format *fmt, const char *path, ah_rf_entries *a, ah_rf_outcome *out,
                int *read_only, char **note)
{
    char why[512] = "";
    *out = AH_RF_NONE;
    *read_only = 0;
    *note = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        snprintf(why, sizeof why, "%s", strerror(errno));
        *out = AH_RF_IGNORED;
    } else {
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            snprintf(why, sizeof why, "not a regular file");
            *out = AH_RF_IGNORED;
            *read_only = 1;
        } else if ((st.st_uid != geteuid() && st.st_uid != 0) ||
                   (st.st_mode & (S_IWGRP | S_IWOTH))) {
            snprintf(why, sizeof why, "not owned by this user or root, or writable by others");
            *out = AH_RF_IGNORED;
            *read_only = 1;
        } else if (st.st_size > (off_t)fmt->max_file) {
            snprintf(why, sizeof why, "too large");
            *out = AH_RF_IGNORED;
            *read_only = fmt->large_is_foreign && st.st_uid != geteuid();
        } else {
            *read_only = st.st_uid != geteuid();
            size_t got;
            uint8_t *p = ah__read_fd(fd, (size_t)st.st_size, &got);
            if (!p) {
                close(fd);
                return -1;
            }
            int pr = parse(fmt, p, got, a, why, sizeof why);
            ah__free(p);
            if (pr != 0) ah__rf_clear(fmt, a);
            if (pr < 0) {
                close(fd);
                return -1;
            }
            *out = pr ? AH_RF_IGNORED : AH_RF_OK;
        }
        close(fd);
    }
    if (*out != AH_RF_OK && !(*note = ah__asprintf("%s %s ignored: %s", fmt->label, path, why)))
        return -1;
    return 0;
}

int ah__rf_save(const ah_rf_format *fmt, const char *path, const ah_rf_entries *a, char *why,
                size_t cap)
{
    ah_buf b = {0};
    if (encode(fmt, a, &b) != 0) {
        ah__buf_free(&b);
        return -1;
    }
    int w = ah__write_file_atomic(path, b.p, b.len, why, cap);
    ah__buf_free(&b);
    return w != 0 ? 1 : 0;
}

char *ah__rf_beside(const char *path, const char *name)
{
    if (!path || !*path) return ah__strdup("");
    const char *slash = strrchr(path, '/');
    if (!slash) return ah__strdup(name);
    return ah__asprintf("%.*s/%s", (int)(slash - path), path, name);
}
