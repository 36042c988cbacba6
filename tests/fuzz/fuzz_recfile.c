/*
 * Fuzz target: the per-machine record files (record_file.c), whose framing,
 * key coding and entry fields the check records and the tune table share.
 * They live beside the scan cache, which a shared cache directory may let
 * another user's bytes reach.
 *
 * The first input byte picks the format (odd: the tune table's, even: the
 * check records'), the second is the entry count; the rest is the entry
 * table. The harness frames it (magic, format, count, and the checksum the
 * loader verifies, so the fuzzer gets past it), writes it to a file and
 * loads it. Properties: the load gives a table or a note, never half (a
 * refused file leaves no entries and says why); every entry loaded has a
 * path and passes the format's own check; and the table saved, loaded and
 * saved again comes back byte for byte, so what a host writes it reads.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"

#include "alloc.h"
#include "host_int.h"
#include "record_file.h"
#include "record_key.h"
#include "scan_int.h"
#include "tune_table.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The files of one input, in a directory of their own (0700), removed
 * with it when the input is done. */
typedef struct rf_scratch {
    char dir[64], in[96], once[96], twice[96];
} rf_scratch;

static void rf_scratch_make(rf_scratch *s)
{
    snprintf(s->dir, sizeof s->dir, "/tmp/attnhost-fuzz-recfile-XXXXXX");
    if (!mkdtemp(s->dir)) abort();
    snprintf(s->in, sizeof s->in, "%s/in", s->dir);
    snprintf(s->once, sizeof s->once, "%s/once", s->dir);
    snprintf(s->twice, sizeof s->twice, "%s/twice", s->dir);
}

static void rf_scratch_remove(const rf_scratch *s)
{
    unlink(s->in);
    unlink(s->once);
    unlink(s->twice);
    rmdir(s->dir);
}

/* A saved file's bytes, through the reader the scan cache uses. */
static uint8_t *rf_slurp(const char *path, size_t *n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    FZ_ASSERT(fd >= 0 && fstat(fd, &st) == 0, "a saved file cannot be read back");
    uint8_t *p = ah__read_fd(fd, (size_t)st.st_size, n);
    close(fd);
    FZ_ASSERT(p && *n == (size_t)st.st_size, "a saved file cannot be read back whole");
    return p;
}

/* Load path with fmt into the empty a; the outcome, the note checked
 * against it (freed here). */
static ah_rf_outcome rf_load(const ah_rf_format *fmt, const char *path, ah_rf_entries *a)
{
    ah_rf_outcome out;
    int read_only;
    char *note;
    FZ_ASSERT(ah__rf_load(fmt, path, a, &out, &read_only, &note) == 0, "out of memory");
    FZ_ASSERT(out == AH_RF_OK ? note == NULL : note != NULL && *note && a->n == 0,
              "outcome %d with a note '%s' and %u entries", (int)out, note ? note : "(none)", a->n);
    FZ_ASSERT(!read_only, "our own file read as another user's");
    ah__free(note);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    const ah_rf_format *fmt = data[0] & 1 ? ah__tune_table_format() : ah__check_records_format();
    ah_buf b = {0};
    ah__buf_put(&b, fmt->magic, 8);
    ah__buf_u32(&b, fmt->format);
    ah__buf_u32(&b, data[1]);
    ah__buf_put(&b, data + 2, size - 2);
    ah__buf_u64(&b, ah__hash_bytes(AH__HASH_SEED, b.p, b.len));
    FZ_ASSERT(!b.oom, "out of memory");

    rf_scratch sc;
    rf_scratch_make(&sc);
    const char *in = sc.in, *once = sc.once, *twice = sc.twice;
    char why[512];
    FZ_ASSERT(ah__write_file_atomic(in, b.p, b.len, why, sizeof why) == 0, "write: %s", why);
    ah__buf_free(&b);

    ah_rf_entries a = {0};
    if (rf_load(fmt, in, &a) == AH_RF_OK) {
        for (uint32_t i = 0; i < a.n; i++) {
            const void *e = (const char *)a.e + (size_t)i * fmt->entry_size;
            const ah_record_key *k = e;
            FZ_ASSERT(k->path && *k->path, "entry %u loaded without a path", i);
            FZ_ASSERT(fmt->valid(e), "entry %u loaded though its values are out of range", i);
        }
        FZ_ASSERT(ah__rf_save(fmt, once, &a, why, sizeof why) == 0, "save: %s", why);
        ah_rf_entries c = {0};
        FZ_ASSERT(rf_load(fmt, once, &c) == AH_RF_OK && c.n == a.n,
                  "a saved table of %u entries does not load back whole", a.n);
        FZ_ASSERT(ah__rf_save(fmt, twice, &c, why, sizeof why) == 0, "save: %s", why);
        size_t n1, n2;
        uint8_t *p1 = rf_slurp(once, &n1), *p2 = rf_slurp(twice, &n2);
        FZ_ASSERT(n1 == n2 && memcmp(p1, p2, n1) == 0, "saved, loaded and saved: %zu and %zu bytes",
                  n1, n2);
        ah__free(p1);
        ah__free(p2);
        ah__rf_clear(fmt, &c);
    }
    ah__rf_clear(fmt, &a);
    rf_scratch_remove(&sc);
    return 0;
}
