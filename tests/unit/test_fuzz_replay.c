/*
 * Replays every committed fuzz input through the fuzz harnesses, compiled
 * here without libFuzzer: the seed corpora (tests/fuzz/corpus/<target>/)
 * and the inputs that once crashed (tests/fuzz/regressions/<target>/, one
 * file per fixed bug, named after it). This runs in every build, the
 * sanitizer builds included, so a fixed crash stays fixed even where clang
 * and libFuzzer are absent. A broken property aborts the process, which
 * CTest reports as a failure naming the harness's message.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LLVMFuzzerTestOneInput fuzz_config_one
#include "../fuzz/fuzz_config.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_model_one
#include "../fuzz/fuzz_model.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_hfconfig_one
#include "../fuzz/fuzz_hfconfig.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput fuzz_batch_one
#include "../fuzz/fuzz_batch.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_descriptor_one
#include "../fuzz/fuzz_descriptor.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_record_one
#include "../fuzz/fuzz_record.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_recfile_one
#include "../fuzz/fuzz_recfile.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput fuzz_scales_one
#include "../fuzz/fuzz_scales.c"
#undef LLVMFuzzerTestOneInput

typedef int (*one_fn)(const uint8_t *, size_t);

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Feed every file of dir to fn, in name order; returns how many. */
static int replay_dir(const char *dir, one_fn fn)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    char *names[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp);
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        if (!f) {
            fprintf(stderr, "cannot open %s\n", path);
            exit(1);
        }
        uint8_t *buf = malloc(1 << 20);
        size_t len = fread(buf, 1, 1 << 20, f);
        fclose(f);
        fprintf(stderr, "replay %s\n", path); /* shows which input broke, if one does */
        fn(buf, len);
        free(buf);
        free(names[i]);
    }
    return n;
}

/* Seeds that must be in the batch corpus: one per ABI 2.1/2.2 batch field
 * (tests/fuzz/make_seeds.py writes them), so a corpus that lost them fails
 * here instead of silently covering less. */
static const char *const batch_required[] = {"abi23_ragged_ok",
                                             "abi23_ragged_bidir_few_keys",
                                             "abi23_ragged_causal_few_keys",
                                             "abi23_ragged_context_ok",
                                             "abi21_enc_cross_ok",
                                             "abi21_mask_ok",
                                             "abi21_groups_entry_ok",
                                             "abi21_groups_null",
                                             "abi21_released_ok",
                                             "abi21_all_fields",
                                             "abi22_cp_local",
                                             "abi22_cp_local_released"};

static int require_batch_seeds(void)
{
    for (size_t i = 0; i < sizeof batch_required / sizeof *batch_required; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/fuzz/corpus/batch/%s", ATTNHOST_SOURCE_DIR,
                 batch_required[i]);
        FILE *f = fopen(path, "rb");
        if (!f) {
            fprintf(stderr, "%s is missing: rerun tests/fuzz/make_seeds.py\n", path);
            return 1;
        }
        fclose(f);
    }
    return 0;
}

int main(void)
{
    if (require_batch_seeds()) return 1;
    static const struct {
        const char *name;
        one_fn fn;
    } targets[] = {{"config", fuzz_config_one},         {"model", fuzz_model_one},
                   {"hfconfig", fuzz_hfconfig_one},     {"batch", fuzz_batch_one},
                   {"descriptor", fuzz_descriptor_one}, {"record", fuzz_record_one},
                   {"recfile", fuzz_recfile_one},       {"scales", fuzz_scales_one}};
    int total = 0;
    for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
        char dir[1024];
        int n = 0;
        snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%s", ATTNHOST_SOURCE_DIR, targets[t].name);
        n += replay_dir(dir, targets[t].fn);
        snprintf(dir, sizeof dir, "%s/tests/fuzz/regressions/%s", ATTNHOST_SOURCE_DIR,
                 targets[t].name);
        n += replay_dir(dir, targets[t].fn);
        printf("%s: %d inputs replayed\n", targets[t].name, n);
        if (n == 0) {
            fprintf(stderr, "no inputs for %s: the corpus is missing\n", targets[t].name);
            return 1;
        }
        total += n;
    }
    printf("test_fuzz_replay: %d inputs, every property held\n", total);
    return 0;
}
