/*
 * ISA paths: their names (the `isa` config key and probe's arch), the CPU
 * features each one needs from the host's hardware facts, and the automatic
 * choice, best first. Kernel tables live in the kern_*.c translation units,
 * each compiled with its own -m flags; nothing here runs a vector instruction.
 */
#include <string.h>

#include "cpu_amx.h"

static const char *const path_names[CPU_AMX_PATH_COUNT] = {"scalar", "avx2", "avx512", "avx512bf16",
                                                           "amx"};

const char *cpu_amx_path_name(cpu_amx_path p)
{
    return (unsigned)p < CPU_AMX_PATH_COUNT ? path_names[p] : "?";
}

uint32_t cpu_amx_path_needs(cpu_amx_path p)
{
    const uint32_t avx2 = AH_ISA_AVX | AH_ISA_AVX2 | AH_ISA_FMA | AH_ISA_F16C;
    const uint32_t avx512 =
        avx2 | AH_ISA_AVX512F | AH_ISA_AVX512BW | AH_ISA_AVX512VL | AH_ISA_AVX512DQ;
    switch (p) {
    case CPU_AMX_SCALAR: return 0;
    case CPU_AMX_AVX2: return avx2;
    case CPU_AMX_AVX512: return avx512;
    case CPU_AMX_AVX512BF16: return avx512 | AH_ISA_AVX512_BF16;
#ifdef AH_CPU_AMX_EMULATED /* test build: tile instructions emulated in C */
    case CPU_AMX_AMX: return avx512 | AH_ISA_AVX512_BF16;
#else
    case CPU_AMX_AMX: return avx512 | AH_ISA_AVX512_BF16 | AH_ISA_AMX_TILE | AH_ISA_AMX_BF16;
#endif
    default: return ~0u;
    }
}

cpu_amx_path cpu_amx_path_best(uint32_t isa)
{
    for (int p = CPU_AMX_PATH_COUNT - 1; p > 0; p--) {
        uint32_t need = cpu_amx_path_needs((cpu_amx_path)p);
        if ((isa & need) == need) return (cpu_amx_path)p;
    }
    return CPU_AMX_SCALAR;
}

const cpu_amx_kernels *cpu_amx_path_kernels(cpu_amx_path p)
{
    switch (p) {
    case CPU_AMX_AVX2: return &cpu_amx_kernels_avx2;
    case CPU_AMX_AVX512: return &cpu_amx_kernels_avx512;
    case CPU_AMX_AVX512BF16: return &cpu_amx_kernels_avx512bf16;
    case CPU_AMX_AMX: return &cpu_amx_kernels_amx;
    default: return &cpu_amx_kernels_scalar;
    }
}
