/*
 * Hardware facts: checked against an independent source, the kernel's own
 * view in /proc/cpuinfo (whose flags the kernel clears when it does not
 * enable a feature's state), plus the invariants between the usable and the
 * raw CPUID bits, the AMX note, and the ATTNHOST_CPU_ISA_MASK override.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "scan_int.h"

static const struct {
    uint32_t bit;
    const char *flag;
} flags[] = {
    {AH_ISA_SSE42, "sse4_2"},
    {AH_ISA_AVX, "avx"},
    {AH_ISA_AVX2, "avx2"},
    {AH_ISA_FMA, "fma"},
    {AH_ISA_F16C, "f16c"},
    {AH_ISA_AVX512F, "avx512f"},
    {AH_ISA_AVX512BW, "avx512bw"},
    {AH_ISA_AVX512VL, "avx512vl"},
    {AH_ISA_AVX512DQ, "avx512dq"},
    {AH_ISA_AVX512_VNNI, "avx512_vnni"},
    {AH_ISA_AVX512_BF16, "avx512_bf16"},
    {AH_ISA_AVX512_FP16, "avx512_fp16"},
    {AH_ISA_AMX_TILE, "amx_tile"},
    {AH_ISA_AMX_BF16, "amx_bf16"},
    {AH_ISA_AMX_INT8, "amx_int8"},
    {AH_ISA_AMX_FP16, "amx_fp16"},
};
#define N_FLAGS (sizeof flags / sizeof flags[0])
#define AMX_BITS (AH_ISA_AMX_TILE | AH_ISA_AMX_BF16 | AH_ISA_AMX_INT8 | AH_ISA_AMX_FP16)

/* The first "flags" line of /proc/cpuinfo, space-padded for word search;
 * NULL when there is none (not Linux, not x86). */
static char *cpuinfo_flags(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return NULL;
    static char line[8192];
    char *out = NULL;
    while (fgets(line + 1, sizeof line - 2, f)) {
        if (strncmp(line + 1, "flags", 5) == 0) {
            line[0] = ' ';
            size_t n = strlen(line);
            if (n && line[n - 1] == '\n') line[n - 1] = ' ';
            else strcat(line, " ");
            out = line;
            break;
        }
    }
    fclose(f);
    return out;
}

static int has_flag(const char *all, const char *flag)
{
    char word[64];
    snprintf(word, sizeof word, " %s ", flag);
    return strstr(all, word) != NULL;
}

static void test_against_kernel(const ah_hw_facts *hw)
{
    const char *all = cpuinfo_flags();
    if (!all) {
        printf("  no /proc/cpuinfo flags: kernel comparison skipped\n");
        return;
    }
    for (size_t i = 0; i < N_FLAGS; i++) {
        int kernel = has_flag(all, flags[i].flag);
        int usable = (hw->cpu_isa & flags[i].bit) != 0;
        if (flags[i].bit & AMX_BITS) {
            /* The kernel lists AMX when it enabled the state; using it
             * also needs this process's permission request. */
            CHECK_MSG(!usable || kernel, "%s usable but not in /proc/cpuinfo", flags[i].flag);
            if (kernel && !usable)
                printf("  note: %s listed by the kernel: %s\n", flags[i].flag, hw->amx_note);
        } else {
            CHECK_MSG(kernel == usable, "%s: kernel %d, attnhost %d", flags[i].flag, kernel,
                      usable);
        }
        if (kernel)
            CHECK_MSG(hw->cpu_isa_cpuid & flags[i].bit, "%s missing from CPUID view",
                      flags[i].flag);
    }
}

static void test_invariants(const ah_hw_facts *hw)
{
    CHECK(hw->struct_size == sizeof *hw);
    CHECK((hw->cpu_isa & ~hw->cpu_isa_cpuid) == 0);
    CHECK((long)hw->cpu_logical_cores == sysconf(_SC_NPROCESSORS_ONLN));
    CHECK(hw->memory_bytes > (64ull << 20));
    CHECK(memchr(hw->cpu_vendor, 0, sizeof hw->cpu_vendor) != NULL);
    CHECK(memchr(hw->cpu_model, 0, sizeof hw->cpu_model) != NULL);
    CHECK(memchr(hw->amx_note, 0, sizeof hw->amx_note) != NULL);
#if defined(__x86_64__)
    CHECK(strcmp(hw->cpu_vendor, "GenuineIntel") == 0 ||
          strcmp(hw->cpu_vendor, "AuthenticAMD") == 0 || hw->cpu_vendor[0] != '\0');
    CHECK(hw->cpu_model[0] != '\0' && hw->cpu_model[0] != ' ');
    CHECK(hw->cpu_isa & AH_ISA_SSE42); /* every x86-64 machine this targets */
#endif
    /* Usable AVX-512 implies usable AVX (both need the YMM state). */
    if (hw->cpu_isa & AH_ISA_AVX512F) CHECK(hw->cpu_isa & AH_ISA_AVX);
    if (hw->cpu_isa & AH_ISA_AVX2) CHECK(hw->cpu_isa & AH_ISA_AVX);
    /* AMX: usable exactly when there is no note saying why not. */
    int amx = (hw->cpu_isa & AH_ISA_AMX_TILE) != 0;
    CHECK_MSG(amx == (hw->amx_note[0] == '\0'), "amx %d note '%s'", amx, hw->amx_note);
    if (!(hw->cpu_isa_cpuid & AH_ISA_AMX_TILE)) CHECK_STREQ(hw->amx_note, "CPU has no AMX");
    printf("  %s | %s | isa 0x%x (cpuid 0x%x) | %u cores | %llu MiB | amx: %s\n", hw->cpu_vendor,
           hw->cpu_model, hw->cpu_isa, hw->cpu_isa_cpuid, hw->cpu_logical_cores,
           (unsigned long long)(hw->memory_bytes >> 20), hw->amx_note[0] ? hw->amx_note : "usable");
}

static void test_mask(const ah_hw_facts *full)
{
    ah_hw_facts hw;
    char v[32];
    snprintf(v, sizeof v, "0x%x", ~(unsigned)AH_ISA_AVX512F);
    setenv("ATTNHOST_CPU_ISA_MASK", v, 1);
    ah__hw_facts_gather(&hw);
    CHECK(hw.cpu_isa == (full->cpu_isa & ~(uint32_t)AH_ISA_AVX512F));
    CHECK(hw.cpu_isa_cpuid == full->cpu_isa_cpuid);

    setenv("ATTNHOST_CPU_ISA_MASK", "0", 1);
    ah__hw_facts_gather(&hw);
    CHECK(hw.cpu_isa == 0 && hw.cpu_isa_cpuid == full->cpu_isa_cpuid);
    if (full->cpu_isa_cpuid & AH_ISA_AMX_TILE)
        CHECK_STREQ(hw.amx_note, "AMX masked off by ATTNHOST_CPU_ISA_MASK");

    /* Not a number: ignored (with a warning on stderr), nothing masked. */
    setenv("ATTNHOST_CPU_ISA_MASK", "avx2", 1);
    ah__hw_facts_gather(&hw);
    CHECK(hw.cpu_isa == full->cpu_isa);
    setenv("ATTNHOST_CPU_ISA_MASK", "0x1ffffffff", 1);
    ah__hw_facts_gather(&hw);
    CHECK(hw.cpu_isa == full->cpu_isa);
    unsetenv("ATTNHOST_CPU_ISA_MASK");

    /* Gathering twice gives the same facts (the AMX request is idempotent). */
    ah__hw_facts_gather(&hw);
    CHECK(memcmp(&hw, full, sizeof hw) == 0);
}

int main(void)
{
    unsetenv("ATTNHOST_CPU_ISA_MASK");
    ah_hw_facts hw;
    ah__hw_facts_gather(&hw);
    test_invariants(&hw);
    test_against_kernel(&hw);
    test_mask(&hw);
    return check_report("test_hwfacts");
}
