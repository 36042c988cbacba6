/*
 * Per-machine record files beside the scan cache (check-records,
 * tune-table): one framing, one reader with the ownership rules, one
 * writer. Private to libattnhost.
 *
 * Frame (little-endian):
 *   magic (8 bytes) | u32 format | u32 count
 *   count x ( u32 length | entry )
 *   u64 FNV-1a of everything before
 * An entry is the caller's struct: an ah_record_key at offset 0, then the
 * fields its format lists, written in that order (ah_record_key's encoding,
 * then u32, u64, a double's bits, or u32 length + bytes per field). This
 * module keeps the entries in an ah_rf_entries, encodes, decodes (safe on
 * any bytes) and frees them.
 */
#ifndef AH_RECORD_FILE_H
#define AH_RECORD_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "record_key.h" /* the key, and the field descriptions entries share with it */
#include "scan_int.h"

typedef struct ah_rf_reader ah_rf_reader;

/* The largest entry a format may have (decoding builds one on the stack). */
#define AH_RF_ENTRY_MAX 256

typedef struct ah_rf_format {
    const char *magic;        /* 8 bytes */
    uint32_t format;          /* the version this build writes and reads */
    uint32_t max_str;         /* longest string an entry holds */
    size_t max_file;          /* larger files are refused unread */
    uint32_t max_entries;     /* recording drops the oldest beyond this */
    const char *label;        /* "check records": the ignored note's subject */
    const char *not_this;     /* "not a check-record file" */
    const char *entry_word;   /* "record": in "malformed record 3 (corrupt)" */
    int large_is_foreign;     /* a too-large file of another user is read-only */
    size_t entry_size;        /* sizeof the caller's entry: AH_RF_ENTRY_MAX at most */
    int key_fp;               /* the entry's ah_record_key (at offset 0) holds driver_fp */
    const ah_rf_field *field; /* the fields after the key, in file order */
    uint32_t n_fields;
    size_t stamp_off;                /* offsetof its uint64_t time of recording */
    int (*valid)(const void *entry); /* the values read are in range */
} ah_rf_format;

/* ---- entry decoding ---------------------------------------------------------- */

struct ah_rf_reader {
    const uint8_t *p;
    size_t n, off;
    uint32_t max_str;
    int bad, oom;
};

uint32_t ah__rf_u32(ah_rf_reader *r);
uint64_t ah__rf_u64(ah_rf_reader *r);
/* A new string (no NULs, at most max_str bytes); NULL with r->bad set. */
char *ah__rf_str(ah_rf_reader *r);

/* ---- entry encoding ---------------------------------------------------------- */

/* u32 length + bytes, cut at max bytes; NULL as "". */
void ah__rf_put_str(ah_buf *b, const char *s, uint32_t max);

/* ---- entry arrays ------------------------------------------------------------- */

/* A file's entries, fmt->entry_size bytes each; zeroed is empty. */
typedef struct ah_rf_entries {
    void *e;
    uint32_t n, cap;
} ah_rf_entries;

/* Free what an entry owns (its key's strings and its string fields). */
void ah__rf_entry_free(const ah_rf_format *fmt, void *entry);
/* Append *entry (the array takes what it owns). -1 on out-of-memory, the
 * entry still the caller's. */
int ah__rf_add(const ah_rf_format *fmt, ah_rf_entries *a, const void *entry);
/* Free every entry and the array; a is empty after. */
void ah__rf_clear(const ah_rf_format *fmt, ah_rf_entries *a);
/* Before recording key: free and drop the entries same(entry, key) says it
 * replaces and those whose file is gone, then the oldest while n is at
 * fmt->max_entries. */
void ah__rf_prune(const ah_rf_format *fmt, ah_rf_entries *a,
                  int (*same)(const void *entry, const void *key), const void *key);

/* ---- files -------------------------------------------------------------------- */

typedef enum ah_rf_outcome {
    AH_RF_NONE = 0,   /* no file */
    AH_RF_OK = 1,     /* read: a holds every entry */
    AH_RF_IGNORED = 2 /* there, but refused: *note says why */
} ah_rf_outcome;

/* Read path, owned by this user or root and writable by nobody else, into
 * the empty a; a stays empty on anything but AH_RF_OK. *read_only: the
 * file is another user's (or not one we may replace). -1 on
 * out-of-memory. */
int ah__rf_load(const ah_rf_format *fmt, const char *path, ah_rf_entries *a, ah_rf_outcome *out,
                int *read_only, char **note);

/* Write a's entries atomically to path. 0 written; 1 not written (why
 * set); -1 out of memory. */
int ah__rf_save(const ah_rf_format *fmt, const char *path, const ah_rf_entries *a, char *why,
                size_t cap);

/* path's directory with name in it: "" without a path, name without a '/'. */
char *ah__rf_beside(const char *path, const char *name);

#endif
