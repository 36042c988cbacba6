/*
 * Kernel table of the amx path: AVX-512 fp32 kernel plus the bf16 tile kernel on AMX tiles
 * (tdpbf16ps). This translation unit alone is compiled with the amx -m flags (see CMakeLists.txt);
 * nothing in it runs unless the host's CPU facts allow it.
 */
#define AH_VEC_AVX512 1
#define AH_KERN_PREFIX cpu_amx_k_amx
#include "cpu_amx.h"
#include "kern_vec.h"
#include "kern_fp32.inc"
#define AH_TILE_AMX 1
#include "kern_tile.inc"
#include "kern_dec.inc"
#include "kern_dec_amx.inc"

const cpu_amx_kernels cpu_amx_kernels_amx = {"amx",
                                             cpu_amx_k_amx_attend,
                                             cpu_amx_k_amx_attend_bf16,
                                             cpu_amx_k_amx_attend_dec,
                                             cpu_amx_k_amx_attend_dec_amx,
                                             cpu_amx_k_amx_prepack};
