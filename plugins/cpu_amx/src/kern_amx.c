/*
 * Kernel table of the amx path: AVX-512 fp32 kernel plus the bf16 tile kernel on AMX tiles
 * (tdpbf16ps). This translation unit alone is compiled with the amx -m flags (see CMakeLists.txt);
 * nothing in it runs unless the host's CPU facts allow it.
 */
#define AH_VEC_AVX512 1
#define AH_KERN_PREFIX cpu_amx_k_amx
#include "cpu_amx.h"
#include "kern_vec.h"
#include "kern_amx.inc"
