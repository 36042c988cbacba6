/*
 * The fake HIP runtime's view for tests (fake_hip.c): what was launched,
 * and the allocations it holds. A test reaches these through dlsym on the
 * libamdhip64.so the plugin loaded.
 */
#ifndef RA_FAKE_HIP_H
#define RA_FAKE_HIP_H

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>

#include "../kernels/ra_params.h"

#define FAKE_HIP_MAX_LAUNCHES 64

typedef struct fake_hip_launch {
    char kernel[64];
    unsigned grid[3], block[3];
    union { /* the kernel's parameter block, as it was at the launch or capture */
        ra_attn_params attn;
        ra_kv_params kv;
        ra_merge_params merge;
    } params;
} fake_hip_launch;

/* The device's gcnArchName ("gfx942:sramecc+:xnack-"). */
void fake_hip_set_arch(const char *gcn_arch);
/* Allocations not freed; hipMalloc calls so far. */
int fake_hip_live(void);
int fake_hip_mallocs(void);
/* The launches executed (eagerly or by a graph launch), oldest first. */
int fake_hip_executed(const fake_hip_launch **log);

#endif
