/*
 * What the two runtimes (rt_opencl.c, rt_ze.c) share: the kernels and
 * their modules, the tier names, the SPIR-V each module is built from, and
 * the words of a missing device.
 */
#include <stdio.h>
#include <stdlib.h>

#include "xpu.h"

const char *const xpu_kernel_names[XPU_K_COUNT] = {"xpu_attn",     "xpu_split_merge",
                                                   "xpu_write_kv", "xpu_merge_states",
                                                   "xpu_attn_mla", "xpu_attn_intel"};
const int xpu_kernel_module[XPU_K_COUNT] = {0, 0, 1, 2, 0, XPU_MOD_INTEL};
const char *const xpu_tier_names[3] = {"portable", "subgroup", "xmx"};

int xpu_modules_of(xpu_kernels kern)
{
    return kern.tier == XPU_TIER_PORTABLE ? XPU_N_MODULES : XPU_N_MODULES + 1;
}

int xpu_kernel_present(xpu_kernels kern, int k)
{
    return xpu_kernel_module[k] < xpu_modules_of(kern);
}

const xpu_blob *xpu_module_spirv(xpu_kernels kern, int m)
{
    return m < XPU_N_MODULES ? &xpu_spirv[m]
                             : &xpu_intel_spirv[xpu_intel_variant(kern.tier, kern.sg)];
}

ah_status xpu_no_device(char *err, size_t cap, const char *what, int index, uint32_t n)
{
    if (n) snprintf(err, cap, "%s %d does not exist (%u of them)", what, index, n);
    else snprintf(err, cap, "no %s", what);
    return AH_ERR_UNAVAILABLE;
}

void *xpu_open_begin(ah_status (*discover)(int, xpu_devinfo *, char *, size_t), int index,
                     size_t size, ah_status *st, char *err, size_t cap)
{
    xpu_devinfo info;
    if ((*st = discover(index, &info, err, cap)) != AH_OK) return NULL;
    void *d = calloc(1, size);
    if (!d) {
        snprintf(err, cap, "out of memory");
        *st = AH_ERR_OUT_OF_MEMORY;
    }
    return d;
}
