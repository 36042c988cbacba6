/*
 * Internals shared by the scanner's files (discovery.c, scan.c,
 * scan_child.c, scan_cache.c, record_codec.c, plugin_load.c,
 * descriptor_validate.c, services.c). Nothing outside them includes this.
 *
 * The record codec is the one serialization of an ah_plugin_rec: the scan
 * child sends it to the parent through a pipe, and the cache file stores it.
 * Both readers treat the bytes as hostile: any input decodes to a valid
 * record or to an error, never to a crash or an out-of-bounds read.
 */
#ifndef AH_SCAN_INT_H
#define AH_SCAN_INT_H

#include <stddef.h>
#include <stdint.h>

#include "scan.h"

/* ---- growable byte buffer (encoder output) ------------------------------ */

typedef struct ah_buf {
    uint8_t *p;
    size_t len, cap;
    int oom; /* sticky: a failed append makes every later one a no-op */
} ah_buf;

void ah__buf_put(ah_buf *b, const void *data, size_t n);
void ah__buf_u32(ah_buf *b, uint32_t v);
void ah__buf_u64(ah_buf *b, uint64_t v);
void ah__buf_free(ah_buf *b);

/* ---- records ------------------------------------------------------------- */

/* A zeroed record with info.struct_size set; NULL on out-of-memory. */
ah_plugin_rec *ah__rec_new(void);
/* Frees a record and every string and list it owns; NULL is a no-op. */
void ah__rec_free(ah_plugin_rec *rec);
/* A deep copy; NULL on out-of-memory. */
ah_plugin_rec *ah__rec_dup(const ah_plugin_rec *rec);
/* Replace one owned string of the record (info.name, info.reason, ...):
 * frees the old value. Returns -1 on out-of-memory (old value kept). */
int ah__rec_set(ah_plugin_rec *rec, const char **field, const char *value);
/* printf into info.reason; -1 on out-of-memory. */
int ah__rec_reason(ah_plugin_rec *rec, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Deep-copy a normalized caps into rec->caps (lists owned, check_combination
 * dropped) and point info.caps at it. -1 on out-of-memory. */
int ah__rec_set_caps(ah_plugin_rec *rec, const ah_caps *caps);

/* Serialize a record (versioned header + length-prefixed fields). The
 * result is in b; b->oom tells of an allocation failure. */
void ah__rec_encode(const ah_plugin_rec *rec, ah_buf *b);
/* Serialize just a caps table: used to compare the scanned descriptor with
 * the one seen at load time, field by field, in one place. */
void ah__caps_encode(const ah_caps *caps, ah_buf *b);
/* Parse n bytes into a new record. Returns 0 and *out, or -1 with the reason
 * in why (and *out NULL). Any byte string is safe to pass. */
int ah__rec_decode(const uint8_t *p, size_t n, ah_plugin_rec **out, char *why, size_t cap);
/* Bytes of one encoded record starting at p: the header's length plus the
 * header, or 0 when fewer than a header's bytes are available or the header
 * is not a record's. */
size_t ah__rec_encoded_size(const uint8_t *p, size_t n);

/* ---- descriptors ----------------------------------------------------------- */

/* The ABI 1.0 minimum struct sizes: everything up to the last required field.
 * Optional trailing fields may be missing (a plugin built against an older
 * header); the host then treats them as zero / NULL. */
#define AH__DESC_MIN_SIZE (offsetof(ah_plugin_descriptor, ops) + sizeof(void *))
#define AH__CAPS_MIN_SIZE (offsetof(ah_caps, preferred_kv_layout) + sizeof(ah_kv_layout))
#define AH__OPS_MIN_SIZE (offsetof(ah_plugin_ops, forward) + sizeof(void *))
#define AH__INT_SET_MIN_SIZE (offsetof(ah_int_set, range_step) + sizeof(uint32_t))

/* Copy min(struct_size, sizeof) bytes into a zeroed full-size struct and set
 * struct_size to the full size. The source must have passed validation (its
 * struct_size is at least the minimum). */
void ah__caps_normalize(ah_caps *dst, const ah_caps *src);
void ah__ops_normalize(ah_plugin_ops *dst, const ah_plugin_ops *src);
/* Validate a normalized caps table; 0 or -1 with the reason. */
int ah__caps_validate(const ah_caps *caps, char *why, size_t cap);

/* ---- services -------------------------------------------------------------- */

/* Rebind a plugin's services once its descriptor is known: the name that
 * prefixes its log lines and selects its [plugin.<name>] section, and the
 * keys it declared (the config getters answer only those). */
void ah__services_bind(void *data, const char *plugin_name, const ah_caps *caps);

/* The host's own log line on stderr, "attnhost <level>: msg", under the
 * same ATTNHOST_LOG filter as the plugins' lines. */
void ah__log(ah_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- discovery -------------------------------------------------------------- */

typedef struct ah_found_file {
    char *path;   /* as found: <dir>/<entry> */
    char *stem;   /* entry without ".so" */
    char *reason; /* NULL: trusted, go scan it; else why it is refused */
} ah_found_file;

typedef struct ah_found {
    ah_found_file *files;
    uint32_t n, cap;
} ah_found;

/* Enumerate *.so in each directory, in order (entries sorted by name),
 * refusing untrusted ones with a reason (see discovery.c for the rules). A
 * stem seen in an earlier directory makes the later file refused as shadowed.
 * Returns -1 only on out-of-memory. */
int ah__discover(const char *const *dirs, uint32_t n_dirs, ah_found *out);
void ah__found_free(ah_found *f);

/* ---- scanning one file -------------------------------------------------- */

/* Load, validate and probe one plugin file in this process and encode the
 * resulting record into b (the child's and the in-process mode's common
 * path). stem names the record when the plugin gives no name. unload: 1
 * dlcloses the plugin before returning (in-process); the child leaves it
 * loaded and exits. b->oom tells of an allocation failure. */
void ah__scan_one(const char *path, const char *stem, const ah_config *config,
                  const ah_hw_facts *hw, int unload, ah_buf *b);

/* Scan one file in a child process under timeout_ms: the plugin scanner
 * executable at scanner, spawned (posix_spawn, no shell) with the request
 * on its stdin, or, when scanner is NULL, a fork of this process. Always
 * returns a record (quarantined with the cause when the child misbehaved),
 * or NULL on out-of-memory in the parent. *flags: AH__SCAN_HOST_FAILURE
 * when the failure was the host's (no pipe, no fork), which must not be
 * remembered as the plugin's; AH__SCAN_NO_SCANNER too when the scanner
 * could not be started or refused the request (a broken install): the
 * caller scans again without it. */
#define AH__SCAN_HOST_FAILURE 1
#define AH__SCAN_NO_SCANNER 2
ah_plugin_rec *ah__scan_in_child(const char *path, const char *stem, const ah_scan_request *req,
                                 const char *scanner, int *flags);

/* The plugin scanner installed with this library:
 * <dir of libattnhost.so>/<libexecdir relative to libdir>/attnhost/attnhost-plugin-scanner
 * (the build tree mirrors it), else the configured install path. NULL
 * (allocated otherwise) when none is executable; tried lists the paths
 * looked at in vain. */
char *ah__scanner_locate(char *tried, size_t cap);

/* The scanner executable's main: argv is
 *   <scanner> --attnhost-scan-v1 <parent pid> <plugin path> <stem>
 * and stdin carries the request (ah__scan_req_encode); the record goes to
 * fd 3, exactly as the forked child sends it. Exit status 120: the request
 * was not understood (a library and a scanner from different builds). */
int ah__scanner_main(int argc, char **argv);
#define AH__SCANNER_ARG "--attnhost-scan-v1"
#define AH__SCANNER_BAD_REQUEST 120

/* The scan request the host sends a spawned scanner: the hardware facts it
 * gathered and every [plugin.<name>] key (the plugin's name is not known
 * before its descriptor is read). Same framing as a record, magic "AHSQ".
 * The decoder fills config's plugin keys only (free with ah__config_free);
 * -1 with why on any malformed input. */
void ah__scan_req_encode(const ah_config *config, const ah_hw_facts *hw, ah_buf *b);
int ah__scan_req_decode(const uint8_t *p, size_t n, ah_config *config, ah_hw_facts *hw, char *why,
                        size_t cap);

/* Ask this process's kernel for AMX again and take AMX off hw when
 * refused: a spawned scanner's permission is its own (hwfacts.c). */
void ah__hw_facts_claim(ah_hw_facts *hw);

/* "SIGSEGV", ..., or "signal N" in buf. */
const char *ah__signal_name(int sig, char *buf, size_t cap);

/* ---- identity, hashing and the cache ------------------------------------- */

/* Hash the contents of an open file (64-bit, streaming); -1 on read error. */
int ah__hash_fd(int fd, uint64_t *out);
uint64_t ah__hash_bytes(uint64_t h, const void *p, size_t n);
#define AH__HASH_SEED 0xcbf29ce484222325ull

/* A fingerprint of what makes scan results stale besides the file itself:
 * the driver version files and the hardware facts. */
uint64_t ah__driver_fingerprint(const ah_hw_facts *hw);
/* Hash of what the plugin's [plugin.<name>] section means to it. With caps
 * (the plugin's declared keys): the value in force of every declared key,
 * parsed, so a default written out, another spelling of a value ("on" for
 * "true") or another key order hash the same, and any changed value does
 * not. Without caps (rejected, quarantined): the keys and texts as set. */
uint64_t ah__config_hash(const ah_config *config, const char *plugin, const ah_caps *caps);

typedef struct ah_cache_entry {
    uint64_t config_hash;
    ah_plugin_rec *rec;
    int used; /* matched in this scan */
} ah_cache_entry;

typedef struct ah_cache {
    ah_cache_entry *e;
    uint32_t n, cap;
    uint64_t fingerprint;
    char *note; /* why an existing cache file was ignored, or NULL */
} ah_cache;

/* Read the cache; an absent, corrupt, foreign-version or untrusted file
 * gives an empty cache (note says why). -1 only on out-of-memory. */
int ah__cache_load(ah_cache *c, const char *path, uint64_t fingerprint);
/* The cached record for a file, or NULL: matches path, dev, ino, size,
 * mtime_ns, ctime_ns and the config hash of the record's plugin name. The
 * content hash stored with the record was taken when it was scanned. */
ah_cache_entry *ah__cache_find(ah_cache *c, const ah_plugin_rec *probe_identity,
                               const ah_config *config);
/* Add (or replace the entry of the same path) a copy of rec: 0. A record
 * the cache does not keep (probe said unusable) is not added, and removes
 * an entry of the same path: 0 when one was removed, else 1. -1 on OOM. */
int ah__cache_put(ah_cache *c, const ah_plugin_rec *rec, const ah_config *config);
/* Write atomically (temp file 0600 + rename), creating the directory 0700
 * when missing. Entries whose file no longer exists are dropped. Returns 0,
 * or -1 with why. */
int ah__cache_save(const ah_cache *c, const char *path, char *why, size_t cap);
void ah__cache_free(ah_cache *c);

/* The cache's writer, for any file kept beside it (check_records.c): len
 * bytes to a 0600 temp file in path's directory (created 0700 when
 * missing), fsync, rename over path. Returns 0, or -1 with why. */
int ah__write_file_atomic(const char *path, const void *data, size_t len, char *why, size_t cap);

/* Read all n bytes of fd into a new buffer; *got says how many came
 * (fewer on a short read). NULL on out-of-memory. */
uint8_t *ah__read_fd(int fd, size_t n, size_t *got);

/* Monotonic milliseconds. */
double ah__now_ms(void);

#endif
