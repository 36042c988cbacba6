/*
 * The key that check records and tune-table entries share (see
 * record_key.h): taking it from a scanned plugin, comparing and copying
 * it (record_file.c codes it).
 */
#include <stddef.h>
#include <string.h>

#include "alloc.h"
#include "record_key.h"

static int streq(const char *a, const char *b) { return strcmp(a ? a : "", b ? b : "") == 0; }

ah_record_key ah__record_key_of(const ah_host *h, const ah_plugin_rec *rec)
{
    ah_record_key k;
    memset(&k, 0, sizeof k);
    k.path = (char *)rec->info.path;
    k.plugin = (char *)rec->info.name;
    k.plugin_version = (char *)rec->info.version;
    k.dev = (uint64_t)rec->dev;
    k.ino = (uint64_t)rec->ino;
    k.size = (uint64_t)rec->size;
    k.mtime_ns = (uint64_t)rec->mtime_ns;
    k.ctime_ns = (uint64_t)rec->ctime_ns;
    k.content_hash = rec->content_hash;
    k.config_hash = ah__config_hash(&h->config, rec->info.name, rec->info.caps);
    k.abi = AH_ABI_VERSION;
    k.device_kind = (uint32_t)rec->info.device_kind;
    k.compute_capability = rec->probe.compute_capability;
    k.device_name = (char *)rec->probe.device_name;
    k.arch = (char *)rec->probe.arch;
    k.driver_version = (char *)rec->probe.driver_version;
    k.host_cpu = rec->info.device_kind == AH_DEVICE_CPU ? (char *)h->hw.cpu_model : (char *)"";
    return k;
}

const ah_rf_field ah__record_key_fields[] = {
    {AH_RF_STR, offsetof(ah_record_key, path)},
    {AH_RF_STR, offsetof(ah_record_key, plugin)},
    {AH_RF_STR, offsetof(ah_record_key, plugin_version)},
    {AH_RF_U64, offsetof(ah_record_key, dev)},
    {AH_RF_U64, offsetof(ah_record_key, ino)},
    {AH_RF_U64, offsetof(ah_record_key, size)},
    {AH_RF_U64, offsetof(ah_record_key, mtime_ns)},
    {AH_RF_U64, offsetof(ah_record_key, ctime_ns)},
    {AH_RF_U64, offsetof(ah_record_key, content_hash)},
    {AH_RF_U64, offsetof(ah_record_key, config_hash)},
    {AH_RF_U64, offsetof(ah_record_key, driver_fp)},
    {AH_RF_U32, offsetof(ah_record_key, abi)},
    {AH_RF_U32, offsetof(ah_record_key, device_kind)},
    {AH_RF_U32, offsetof(ah_record_key, compute_capability)},
    {AH_RF_STR, offsetof(ah_record_key, device_name)},
    {AH_RF_STR, offsetof(ah_record_key, arch)},
    {AH_RF_STR, offsetof(ah_record_key, driver_version)},
    {AH_RF_STR, offsetof(ah_record_key, host_cpu)},
};
const size_t ah__record_key_n_fields =
    sizeof ah__record_key_fields / sizeof ah__record_key_fields[0];

/* The key's string field f. */
static char **key_str(ah_record_key *k, const ah_rf_field *f)
{
    return (char **)((char *)k + f->off);
}

int ah__record_key_dup(ah_record_key *dst, const ah_record_key *src)
{
    *dst = *src;
    int ok = 1;
    for (const ah_rf_field *f = ah__record_key_fields;
         f < ah__record_key_fields + ah__record_key_n_fields; f++) {
        if (f->kind != AH_RF_STR) continue;
        const char *s = *key_str((ah_record_key *)src, f);
        ok &= (*key_str(dst, f) = ah__strdup(s ? s : "")) != NULL;
    }
    if (ok) return 0;
    ah__record_key_free(dst);
    return -1;
}

void ah__record_key_free(ah_record_key *k)
{
    for (const ah_rf_field *f = ah__record_key_fields;
         f < ah__record_key_fields + ah__record_key_n_fields; f++)
        if (f->kind == AH_RF_STR) {
            ah__free(*key_str(k, f));
            *key_str(k, f) = NULL;
        }
}

int ah__record_key_same_device(const ah_record_key *a, const ah_record_key *b)
{
    return a->device_kind == b->device_kind && a->compute_capability == b->compute_capability &&
           a->driver_fp == b->driver_fp && streq(a->device_name, b->device_name) &&
           streq(a->arch, b->arch) && streq(a->driver_version, b->driver_version) &&
           streq(a->host_cpu, b->host_cpu);
}

int ah__record_key_same_file(const ah_record_key *a, const ah_record_key *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns &&
           a->content_hash == b->content_hash;
}

char *ah__record_key_file_text(const ah_record_key *k)
{
    return ah__asprintf("%s %s %llx %llx %llx %llx %llx %016llx %016llx",
                        k->plugin ? k->plugin : "", k->plugin_version ? k->plugin_version : "",
                        (unsigned long long)k->dev, (unsigned long long)k->ino,
                        (unsigned long long)k->size, (unsigned long long)k->mtime_ns,
                        (unsigned long long)k->ctime_ns, (unsigned long long)k->content_hash,
                        (unsigned long long)k->config_hash);
}

int ah__record_key_same_slot(const ah_record_key *a, const ah_record_key *b)
{
    return streq(a->path, b->path) && a->config_hash == b->config_hash && a->abi == b->abi &&
           ah__record_key_same_device(a, b);
}
