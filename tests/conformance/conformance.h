/*
 * The conformance suite: drives any plugin through the public host API only
 * (attnhost.h and reference.h), generates cases covering every capability
 * the plugin claims, and compares each result with the double-precision
 * reference oracle. `attnhost check`, CTest and vendors run it.
 */
#ifndef ATTNHOST_CONFORMANCE_H
#define ATTNHOST_CONFORMANCE_H

#include <stdint.h>
#include <stdio.h>

#include <attnhost/attnhost.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ah_conformance_options {
    const char *plugin;  /* NULL: every available plugin */
    uint64_t seed;       /* cases are seeded from this and their index */
    int quick;           /* fewer cases, for CI */
    int verbose;         /* print the reason of every failure in detail */
    FILE *out;           /* one line per case and a summary; NULL: stdout */
    uint32_t cp_devices; /* context-parallel cases: 0 or 1: every rank on
                            device 0 (a local group); N: cases of up to N
                            ranks on devices 0 .. N - 1 over NCCL */
    const char *match;   /* run only the cases whose name contains it; NULL: all */
} ah_conformance_options;

typedef struct ah_conformance_summary {
    uint32_t plugins, cases, passed, failed, skipped;
    ah_graph_level graph_level; /* the highest CUDA-graph level whose capture and replay
                                   cases passed (NEVER when none did), what
                                   ah_host_record_check stores */
} ah_conformance_summary;

/* Run the suite over opts->plugin (which must exist and be available) or
 * every available plugin of host. Fills *sum (zeroed first). Returns AH_OK
 * when the suite ran, whatever its verdicts (read sum->failed);
 * AH_ERR_NOT_FOUND when the named plugin is not on the host,
 * AH_ERR_UNAVAILABLE when it is not usable here, and an error when the
 * suite itself could not run (out of memory). Not thread-safe with other
 * users of the same host's bindings. */
ah_status ah_conformance_run(ah_host *host, const ah_conformance_options *opts,
                             ah_conformance_summary *sum);

#ifdef __cplusplus
}
#endif

#endif
