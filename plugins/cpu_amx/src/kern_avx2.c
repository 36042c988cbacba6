/*
 * Kernel table of the avx2 path: AVX2 + FMA + F16C, 8 fp32 lanes.
 * This translation unit alone is compiled with the avx2 -m flags (see
 * CMakeLists.txt); nothing in it runs unless the host's CPU facts allow it.
 */
#define AH_VEC_AVX2 1
#define AH_KERN_PREFIX cpu_amx_k_avx2
#include "cpu_amx.h"
#include "kern_vec.h"
#include "kern_fp32.inc"


const cpu_amx_kernels cpu_amx_kernels_avx2 = {"avx2", cpu_amx_k_avx2_attend, NULL, NULL, NULL,
                                              NULL};
