/*
 * The key of a per-machine record (check records, tune table): the plugin
 * file as the scan took it (path, identity, content hash), its name and
 * version, the config hash of its [plugin.<name>] keys, the host ABI, and
 * the device the plugin probed (kind, name, arch, compute capability,
 * driver version; the CPU model for a CPU plugin). A record applies only
 * while every part still matches. Private to libattnhost.
 */
#ifndef AH_RECORD_KEY_H
#define AH_RECORD_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "host_int.h"
#include "scan_int.h"

typedef struct ah_record_key {
    char *path, *plugin, *plugin_version;
    uint64_t dev, ino, size, mtime_ns, ctime_ns, content_hash, config_hash;
    uint64_t driver_fp; /* the driver fingerprint: keyed by the tune table only, else 0 */
    uint32_t abi, device_kind, compute_capability;
    char *device_name, *arch, *driver_version, *host_cpu;
} ah_record_key;

/* A field of a record: its kind and offset in the record's struct (the
 * key's, below; an entry's after its key, record_file.h). */
typedef enum ah_rf_kind {
    AH_RF_U32 = 0, /* uint32_t */
    AH_RF_U64 = 1, /* uint64_t */
    AH_RF_F64 = 2, /* double, stored as its bits */
    AH_RF_STR = 3  /* char *, owned by the record */
} ah_rf_kind;

typedef struct ah_rf_field {
    ah_rf_kind kind;
    size_t off;
} ah_rf_field;

/* The key's fields, in the order the record files code them (driver_fp
 * only in formats that hold it, ah_rf_format.key_fp). */
extern const ah_rf_field ah__record_key_fields[];
extern const size_t ah__record_key_n_fields;

/* The key of plugin rec as host h scanned it, driver_fp 0; its strings are
 * borrowed from rec and h. */
ah_record_key ah__record_key_of(const ah_host *h, const ah_plugin_rec *rec);

/* *dst = src with its own copies of the strings (a NULL one as ""). -1 on
 * out-of-memory, *dst then owning nothing. */
int ah__record_key_dup(ah_record_key *dst, const ah_record_key *src);
/* Free the strings a decoded or duplicated key owns; NULL them. */
void ah__record_key_free(ah_record_key *k);

/* The same device: kind, name, arch, compute capability, driver version
 * and fingerprint, CPU. */
int ah__record_key_same_device(const ah_record_key *a, const ah_record_key *b);
/* The same file: device, inode, size, mtime, ctime and content hash. */
int ah__record_key_same_file(const ah_record_key *a, const ah_record_key *b);
/* The plugin's name and version, its file's identity and content hash and
 * its configuration hash as one line of text (what same_file and the
 * configuration part of same_slot compare), for a key that names a second
 * plugin (a mixed step's decode plugin in the tune table). NULL on
 * out-of-memory. */
char *ah__record_key_file_text(const ah_record_key *k);
/* The slot a new record replaces: same path, configuration, ABI and device. */
int ah__record_key_same_slot(const ah_record_key *a, const ah_record_key *b);

#endif
