/*
 * Kernel table of the avx512bf16 path: AVX-512 fp32 kernel plus the bf16 tile kernel on vdpbf16ps
 * register blocks. This translation unit alone is compiled with the avx512bf16 -m flags (see
 * CMakeLists.txt); nothing in it runs unless the host's CPU facts allow it.
 */
#define AH_VEC_AVX512 1
#define AH_KERN_PREFIX cpu_amx_k_avx512bf16
#include "cpu_amx.h"
#include "kern_vec.h"
#include "kern_fp32.inc"
#include "kern_tile.inc"
#include "kern_dec.inc"

const cpu_amx_kernels cpu_amx_kernels_avx512bf16 = {"avx512bf16",
                                                    cpu_amx_k_avx512bf16_attend,
                                                    cpu_amx_k_avx512bf16_attend_bf16,
                                                    cpu_amx_k_avx512bf16_attend_dec,
                                                    NULL,
                                                    cpu_amx_k_avx512bf16_prepack};
