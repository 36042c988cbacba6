/*
 * ISA paths: their names (the `isa` config key and probe's arch), the CPU
 * features each one needs from the host's hardware facts, and the automatic
 * choice, best first. Kernel tables live in the kern_*.c translation units,
 * each compiled with its own -m flags; nothing here runs a vector instruction.
 */
#include <string.h>

#include "cpu_amx.h"

static const char *const path_names[AH__CPU_PATH_COUNT] = {"scalar", "avx2", "avx512",
                                                           "avx512bf16", "amx"};

const char *ah__cpu_path_name(ah__cpu_path p)
{
    return (unsigned)p < AH__CPU_PATH_COUNT ? path_names[p] : "?";
}

int ah__cpu_path_parse(const char *s, int *is_auto, ah__cpu_path *p)
{
    *is_auto = 0;
    if (!s || !*s || strcmp(s, "auto") == 0) {
        *is_auto = 1;
        return 1;
    }
    for (int i = 0; i < AH__CPU_PATH_COUNT; i++)
        if (strcmp(s, path_names[i]) == 0) {
            *p = (ah__cpu_path)i;
            return 1;
        }
    return 0;
}

uint32_t ah__cpu_path_needs(ah__cpu_path p)
{
    const uint32_t avx2 = AH_ISA_AVX | AH_ISA_AVX2 | AH_ISA_FMA | AH_ISA_F16C;
    const uint32_t avx512 = avx2 | AH_ISA_AVX512F | AH_ISA_AVX512BW | AH_ISA_AVX512VL |
                            AH_ISA_AVX512DQ;
    switch (p) {
    case AH__CPU_SCALAR: return 0;
    case AH__CPU_AVX2: return avx2;
    case AH__CPU_AVX512: return avx512;
    case AH__CPU_AVX512BF16: return avx512 | AH_ISA_AVX512_BF16;
#ifdef AH_CPU_AMX_EMULATED /* test build: tile instructions emulated in C */
    case AH__CPU_AMX: return avx512 | AH_ISA_AVX512_BF16;
#else
    case AH__CPU_AMX: return avx512 | AH_ISA_AVX512_BF16 | AH_ISA_AMX_TILE | AH_ISA_AMX_BF16;
#endif
    default: return ~0u;
    }
}

ah__cpu_path ah__cpu_path_best(uint32_t isa)
{
    for (int p = AH__CPU_PATH_COUNT - 1; p > 0; p--) {
        uint32_t need = ah__cpu_path_needs((ah__cpu_path)p);
        if ((isa & need) == need) return (ah__cpu_path)p;
    }
    return AH__CPU_SCALAR;
}

const ah__cpu_kernels *ah__cpu_path_kernels(ah__cpu_path p)
{
    switch (p) {
    case AH__CPU_AVX2: return &ah__cpu_kernels_avx2;
    case AH__CPU_AVX512: return &ah__cpu_kernels_avx512;
    case AH__CPU_AVX512BF16: return &ah__cpu_kernels_avx512bf16;
    case AH__CPU_AMX: return &ah__cpu_kernels_amx;
    default: return &ah__cpu_kernels_scalar;
    }
}
