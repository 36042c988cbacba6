/*
 * Kernel table of the scalar path: portable C, no vector extensions: the fallback that runs on any
 * x86-64. This translation unit alone is compiled with the scalar -m flags (see CMakeLists.txt);
 * nothing in it runs unless the host's CPU facts allow it.
 */
#define AH_VEC_SCALAR 1
#define AH_KERN_PREFIX cpu_amx_k_scalar
#include "cpu_amx.h"
#include "kern_vec.h"
#include "kern_fp32.inc"


const cpu_amx_kernels cpu_amx_kernels_scalar = {"scalar", cpu_amx_k_scalar_attend, NULL, NULL, NULL,
                                                NULL};
