/*
 * The command-line options fa3_check and fa3_bench share (on top of the
 * shared test helpers, tests/helpers/ath.h), never environment variables:
 *   --max-splits=N       config key max_splits (1..64; default 64)
 *   --vt-scratch-mib=N   config key fp8_vt_scratch_mib (default 64)
 *   --vt-min-reads=N     config key fp8_vt_min_reads (default 4)
 *   --fp8-attention      the tools' layers allow FP8 math (fp8_attention),
 *                        so an fp8 e4m3 cache at head size 128 runs the
 *                        FP8-compute kernel
 *   --l2-section-mib=N   config key l2_section_mib (default 0: half the L2;
 *                        1 cuts the checker's small batches into several
 *                        sections, so their work order is the sectioned one)
 *   --device=N           the context's device_index (default 0)
 * The keys reach the plugin through the host's own services and parser: a
 * value the host would refuse is refused here (exit 2).
 */
#ifndef FA3_OPTIONS_H
#define FA3_OPTIONS_H

#include <stdio.h>

#include "ath.h"

static const ath_opt fa3_opts[] = {{"--max-splits", "max_splits"},
                                   {"--vt-scratch-mib", "fp8_vt_scratch_mib"},
                                   {"--vt-min-reads", "fp8_vt_min_reads"},
                                   {"--fp8-attention", NULL},
                                   {"--l2-section-mib", "l2_section_mib"}};
#define FA3_N_OPTS ((int)(sizeof fa3_opts / sizeof fa3_opts[0]))
#define FA3_OPT_VT_MIN_READS (1u << 2)

static inline int fa3_fp8_attention(const ath_args *a) { return (a->given >> 3) & 1; }

/* Load, set the options' keys, probe (the device line printed), open a
 * context and a stream: 0, 77 (no usable device), 2 (a refused option) or 1. */
static inline int fa3_open(ath_host *h, const char *path, const ath_args *a)
{
    if (ath_load(h, path)) return 1;
    if (ath_apply(h, a)) return 2;
    int rc = ath_probe(h);
    if (rc) return rc;
    printf("device: %s (%s, %u SMs), %s\n", h->probe.device_name, h->probe.arch,
           h->probe.multiprocessors, h->probe.driver_version);
    return ath_context(h, a->device, 1);
}

#endif
