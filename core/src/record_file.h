/*
 * Per-machine record files beside the scan cache (check-records,
 * tune-table): one framing, one reader with the ownership rules, one
 * writer. Private to libattnhost.
 *
 * Frame (little-endian):
 *   magic (8 bytes) | u32 format | u32 count
 *   count x ( u32 length | entry )
 *   u64 FNV-1a of everything before
 * Entries are the caller's: encoded with ah__rf_put_str / ah__buf_*,
 * decoded with an ah_rf_reader, which is safe on any bytes.
 */
#ifndef AH_RECORD_FILE_H
#define AH_RECORD_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "scan_int.h"

typedef struct ah_rf_format {
    const char *magic;               /* 8 bytes */
    uint32_t format;                 /* the version this build writes and reads */
    uint32_t max_str;                /* longest string an entry holds */
    size_t max_file;                 /* larger files are refused unread */
    uint32_t max_entries;            /* recording drops the oldest beyond this */
    const char *label;               /* "check records": the ignored note's subject */
    const char *not_this;            /* "not a check-record file" */
    const char *entry_word;          /* "record": in "malformed record 3 (corrupt)" */
    int large_is_foreign;            /* a too-large file of another user is read-only */
    size_t entry_size;               /* sizeof the caller's entry */
    size_t path_off;                 /* offsetof its char *path */
    size_t stamp_off;                /* offsetof its uint64_t time of recording */
    void (*entry_free)(void *entry); /* frees what an entry owns */
} ah_rf_format;

/* ---- entry decoding ---------------------------------------------------------- */

typedef struct ah_rf_reader {
    const uint8_t *p;
    size_t n, off;
    uint32_t max_str;
    int bad, oom;
} ah_rf_reader;

uint32_t ah__rf_u32(ah_rf_reader *r);
uint64_t ah__rf_u64(ah_rf_reader *r);
/* A new string (no NULs, at most max_str bytes); NULL with r->bad set. */
char *ah__rf_str(ah_rf_reader *r);

/* ---- entry encoding ---------------------------------------------------------- */

/* u32 length + bytes, cut at max bytes; NULL as "". */
void ah__rf_put_str(ah_buf *b, const char *s, uint32_t max);

/* ---- entry arrays ------------------------------------------------------------- */

/* Append a copy of *entry to *arr (fmt->entry_size each). -1 on out-of-memory. */
int ah__rf_push(const ah_rf_format *fmt, void **arr, uint32_t *n, uint32_t *cap, const void *entry);
/* Before recording key: free and drop the entries same(entry, key) says it
 * replaces and those whose file is gone, then the oldest while n is at
 * fmt->max_entries. */
void ah__rf_prune(const ah_rf_format *fmt, void *arr, uint32_t *n,
                  int (*same)(const void *entry, const void *key), const void *key);

/* ---- files -------------------------------------------------------------------- */

/* Read all n bytes of fd into a new buffer; *got says how many came
 * (fewer on a short read). NULL on out-of-memory. */
uint8_t *ah__rf_read_fd(int fd, size_t n, size_t *got);

/* Called per decoded frame entry: 0 taken, 1 malformed, -1 out of memory. */
typedef int (*ah_rf_take)(void *ctx, const uint8_t *p, size_t n);

typedef enum ah_rf_outcome {
    AH_RF_NONE = 0,   /* no file */
    AH_RF_OK = 1,     /* read: every entry went to take */
    AH_RF_IGNORED = 2 /* there, but refused: *note says why */
} ah_rf_outcome;

/* Read path, owned by this user or root and writable by nobody else,
 * handing each entry to take. *read_only: the file is another user's (or
 * not one we may replace). On anything but AH_RF_OK the caller drops what
 * take was given. -1 on out-of-memory. */
int ah__rf_load(const ah_rf_format *fmt, const char *path, ah_rf_take take, void *ctx,
                ah_rf_outcome *out, int *read_only, char **note);

/* Encode n entries through enc and write them atomically to path.
 * 0 written; 1 not written (why set); -1 out of memory. */
int ah__rf_save(const ah_rf_format *fmt, const char *path, uint32_t n,
                void (*enc)(ah_buf *b, const void *ctx, uint32_t i), const void *ctx, char *why,
                size_t cap);

/* path's directory with name in it: "" without a path, name without a '/'. */
char *ah__rf_beside(const char *path, const char *name);

#endif
