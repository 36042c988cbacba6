/*
 * Kernel table of the avx512 path: AVX-512F/BW/VL/DQ, 16 fp32 lanes.
 * This translation unit alone is compiled with the avx512 -m flags (see
 * CMakeLists.txt); nothing in it runs unless the host's CPU facts allow it.
 */
#define AH_VEC_AVX512 1
#define AH_KERN_PREFIX cpu_amx_k_avx512
#include "cpu_amx.h"
#include "kern_vec.h"
#include "kern_fp32.inc"


const cpu_amx_kernels cpu_amx_kernels_avx512 = {"avx512", cpu_amx_k_avx512_attend, NULL, NULL, NULL,
                                                NULL};
