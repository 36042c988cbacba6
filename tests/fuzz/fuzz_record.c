/*
 * Fuzz target: the scan record decoder (ah__rec_decode in record_codec.c),
 * which reads both what a scan child sends its parent through the pipe and
 * what the scan cache file holds. A hostile plugin controls the first, and
 * anyone who can write the cache the second.
 *
 * Input starting with the record magic "AHRC" is one child-to-parent
 * message. Properties: the decoder accepts or refuses with a reason; an
 * accepted record is canonical (re-encoding gives back the exact input),
 * its deep copy (ah__rec_dup) equals it, and its caps pass validation.
 *
 * Input starting with "AHSQ" is a scan request (host to spawned scanner).
 *
 * Any other input is a scan-cache entry table: the harness writes a cache
 * file around it (header with this host's format, ABI and fingerprint, the
 * first byte as the entry count, and the checksum the loader verifies, so
 * the fuzzer gets past the checksum to the entries) and loads it with
 * ah__cache_load. Property: every outcome is a cache or a note, no crash.
 */
#include <fcntl.h>
#include <unistd.h>

#include "fuzz_common.h"

#include "alloc.h"
#include "scan_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_message(const uint8_t *data, size_t size)
{
    ah_plugin_rec *rec = (ah_plugin_rec *)1;
    char why[512];
    why[0] = '\0';
    int rc = ah__rec_decode(data, size, &rec, why, sizeof why);
    if (rc != 0) {
        FZ_ASSERT(rec == NULL && why[0], "refused without a reason or with a record");
        return;
    }
    FZ_ASSERT(ah__rec_encoded_size(data, size) == size, "framing disagrees with the decoder");
    ah_buf b = {0};
    ah__rec_encode(rec, &b);
    FZ_ASSERT(!b.oom && b.len == size && memcmp(b.p, data, size) == 0,
              "accepted record is not canonical (%zu bytes in, %zu out)", size, b.len);
    ah_plugin_rec *dup = ah__rec_dup(rec);
    FZ_ASSERT(dup != NULL, "deep copy failed");
    ah_buf c = {0};
    ah__rec_encode(dup, &c);
    FZ_ASSERT(c.len == b.len && memcmp(c.p, b.p, b.len) == 0, "deep copy differs");
    if (rec->info.caps) {
        char vwhy[512];
        FZ_ASSERT(ah__caps_validate(rec->info.caps, vwhy, sizeof vwhy) == 0,
                  "accepted caps fail validation: %s", vwhy);
    }
    ah__buf_free(&b);
    ah__buf_free(&c);
    ah__rec_free(dup);
    ah__rec_free(rec);
}

static char cache_path[64];
static const uint64_t fingerprint = 0x1234abcd5678ef00ull;

static void remove_cache(void) { unlink(cache_path); }

static void fuzz_cache(const uint8_t *data, size_t size)
{
    if (!cache_path[0]) {
        snprintf(cache_path, sizeof cache_path, "/tmp/ah_fuzz_cache_%d", (int)getpid());
        atexit(remove_cache);
    }
    ah_buf b = {0};
    ah__buf_put(&b, "AHSCACHE", 8);
    ah__buf_u32(&b, 1);
    ah__buf_u32(&b, AH_ABI_VERSION);
    ah__buf_u64(&b, fingerprint);
    ah__buf_u32(&b, size ? data[0] : 0);
    if (size > 1) ah__buf_put(&b, data + 1, size - 1);
    ah__buf_u64(&b, ah__hash_bytes(AH__HASH_SEED, b.p, b.len));
    if (b.oom) abort();
    int fd = open(cache_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, b.p, b.len) != (ssize_t)b.len) abort();
    close(fd);
    ah__buf_free(&b);
    ah_cache c;
    long live0 = ah__alloc_live();
    FZ_ASSERT(ah__cache_load(&c, cache_path, fingerprint) == 0, "cache load failed (OOM?)");
    for (uint32_t i = 0; i < c.n; i++)
        FZ_ASSERT(c.e[i].rec && c.e[i].rec->info.path, "cache entry %u without a path", i);
    ah__cache_free(&c);
    FZ_ASSERT(ah__alloc_live() == live0, "cache load leaked %ld blocks", ah__alloc_live() - live0);
}

/* The request a spawned scanner reads (magic "AHSQ"): a request that
 * re-encodes to the same bytes, or a reason. */
static void fuzz_request(const uint8_t *data, size_t size)
{
    ah_config cfg;
    ah_hw_facts hw;
    char why[512];
    why[0] = '\0';
    if (ah__scan_req_decode(data, size, &cfg, &hw, why, sizeof why) != 0) {
        FZ_ASSERT(why[0] && cfg.plugin_keys == NULL, "refused without a reason or with keys");
        return;
    }
    ah_buf b = {0};
    ah__scan_req_encode(&cfg, &hw, &b);
    FZ_ASSERT(b.oom || (b.len == size && memcmp(b.p, data, size) == 0), "request not canonical");
    ah__buf_free(&b);
    ah__config_free(&cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 4 && memcmp(data, "AHSQ", 4) == 0) fuzz_request(data, size);
    else if (size >= 4 && memcmp(data, "AHRC", 4) == 0) fuzz_message(data, size);
    else fuzz_cache(data, size);
    return 0;
}
