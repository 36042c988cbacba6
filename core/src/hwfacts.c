/*
 * CPU facts the host gathers once and hands to every plugin.
 *
 * An instruction set is usable only when three things agree: CPUID says the
 * CPU has it, XCR0 says the OS saves its register state (YMM for AVX,
 * opmask + ZMM for AVX-512, XTILECFG + XTILEDATA for AMX), and, for AMX on
 * Linux, the process was granted the tile-data state with
 * arch_prctl(ARCH_REQ_XCOMP_PERM). cpu_isa_cpuid keeps the raw CPUID view so
 * a tool can say "the CPU has AMX but ..."; amx_note says what.
 *
 * ATTNHOST_CPU_ISA_MASK (read with secure_getenv; a number, 0x... allowed)
 * masks usable bits off, so tests can pretend a smaller machine.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scan_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define AH_X86 1
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#endif

#define XFEATURE_XTILEDATA 18
#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023

#ifdef AH_X86
typedef struct regs {
    unsigned a, b, c, d;
} regs;

static regs cpuid(unsigned leaf, unsigned sub)
{
    regs r = {0, 0, 0, 0};
    if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) memset(&r, 0, sizeof r);
    return r;
}

static uint64_t xgetbv0(void)
{
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

#define BIT(x, n) (((x) >> (n)) & 1u)

/* Ask Linux for the AMX tile-data state. Returns 0 when granted; else -1
 * with the errno text in note. */
static int amx_request(char *note, size_t cap)
{
#if defined(__linux__) && defined(SYS_arch_prctl)
    unsigned long bits = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &bits) == 0 &&
        (bits & (1ul << XFEATURE_XTILEDATA)))
        return 0;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0) return 0;
    snprintf(note, cap, "AMX permission request refused by the kernel: %s", strerror(errno));
    return -1;
#else
    snprintf(note, cap, "AMX needs a Linux kernel permission request (not this OS)");
    return -1;
#endif
}

static void gather_x86(ah_hw_facts *hw, uint32_t env_mask)
{
    regs r0 = cpuid(0, 0);
    unsigned max_leaf = r0.a;
    memcpy(hw->cpu_vendor, &r0.b, 4);
    memcpy(hw->cpu_vendor + 4, &r0.d, 4);
    memcpy(hw->cpu_vendor + 8, &r0.c, 4);
    hw->cpu_vendor[12] = '\0';

    regs ext = cpuid(0x80000000u, 0);
    if (ext.a >= 0x80000004u) {
        char brand[49];
        for (unsigned i = 0; i < 3; i++) {
            regs b = cpuid(0x80000002u + i, 0);
            memcpy(brand + 16 * i, &b, 16);
        }
        brand[48] = '\0';
        const char *s = brand;
        while (*s == ' ') s++;
        snprintf(hw->cpu_model, sizeof hw->cpu_model, "%s", s);
        for (size_t n = strlen(hw->cpu_model); n && hw->cpu_model[n - 1] == ' '; n--)
            hw->cpu_model[n - 1] = '\0';
    }

    regs l1 = cpuid(1, 0);
    regs l7 = max_leaf >= 7 ? cpuid(7, 0) : (regs){0, 0, 0, 0};
    regs l71 = max_leaf >= 7 && l7.a >= 1 ? cpuid(7, 1) : (regs){0, 0, 0, 0};
    regs ld = max_leaf >= 0xd ? cpuid(0xd, 0) : (regs){0, 0, 0, 0};

    uint32_t raw = 0;
    if (BIT(l1.c, 20)) raw |= AH_ISA_SSE42;
    if (BIT(l1.c, 28)) raw |= AH_ISA_AVX;
    if (BIT(l7.b, 5)) raw |= AH_ISA_AVX2;
    if (BIT(l1.c, 12)) raw |= AH_ISA_FMA;
    if (BIT(l1.c, 29)) raw |= AH_ISA_F16C;
    if (BIT(l7.b, 16)) raw |= AH_ISA_AVX512F;
    if (BIT(l7.b, 30)) raw |= AH_ISA_AVX512BW;
    if (BIT(l7.b, 31)) raw |= AH_ISA_AVX512VL;
    if (BIT(l7.b, 17)) raw |= AH_ISA_AVX512DQ;
    if (BIT(l7.c, 11)) raw |= AH_ISA_AVX512_VNNI;
    if (BIT(l71.a, 5)) raw |= AH_ISA_AVX512_BF16;
    if (BIT(l7.d, 23)) raw |= AH_ISA_AVX512_FP16;
    if (BIT(l7.d, 24)) raw |= AH_ISA_AMX_TILE;
    if (BIT(l7.d, 22)) raw |= AH_ISA_AMX_BF16;
    if (BIT(l7.d, 25)) raw |= AH_ISA_AMX_INT8;
    if (BIT(l71.a, 21)) raw |= AH_ISA_AMX_FP16;
    hw->cpu_isa_cpuid = raw;

    /* XCR0 is readable only when the OS set CR4.OSXSAVE (CPUID.1:ECX[27]). */
    uint64_t xcr0 = BIT(l1.c, 27) ? xgetbv0() : 0;
    int avx_state = (xcr0 & 0x6) == 0x6;                   /* SSE + YMM */
    int avx512_state = avx_state && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    int amx_state = (xcr0 & 0x60000) == 0x60000;           /* XTILECFG, XTILEDATA */

    const uint32_t avx_bits = AH_ISA_AVX | AH_ISA_AVX2 | AH_ISA_FMA | AH_ISA_F16C;
    const uint32_t avx512_bits = AH_ISA_AVX512F | AH_ISA_AVX512BW | AH_ISA_AVX512VL |
                                 AH_ISA_AVX512DQ | AH_ISA_AVX512_VNNI | AH_ISA_AVX512_BF16 |
                                 AH_ISA_AVX512_FP16;
    const uint32_t amx_bits = AH_ISA_AMX_TILE | AH_ISA_AMX_BF16 | AH_ISA_AMX_INT8 | AH_ISA_AMX_FP16;

    uint32_t usable = raw & AH_ISA_SSE42; /* legacy SSE state is always saved */
    if (avx_state) usable |= raw & avx_bits;
    if (avx512_state) usable |= raw & avx512_bits;
    usable &= env_mask;

    hw->amx_note[0] = '\0';
    if (!(raw & AH_ISA_AMX_TILE)) {
        snprintf(hw->amx_note, sizeof hw->amx_note, "CPU has no AMX");
    } else if (!(env_mask & AH_ISA_AMX_TILE)) {
        snprintf(hw->amx_note, sizeof hw->amx_note, "AMX masked off by ATTNHOST_CPU_ISA_MASK");
    } else if (!(ld.a & (1u << 17)) || !(ld.a & (1u << 18))) {
        snprintf(hw->amx_note, sizeof hw->amx_note,
                 "CPU reports AMX but no tile state in CPUID leaf 0xD");
    } else if (!amx_state) {
        snprintf(hw->amx_note, sizeof hw->amx_note,
                 "AMX tiles not enabled by the kernel (XCR0 lacks XTILECFG/XTILEDATA)");
    } else if (amx_request(hw->amx_note, sizeof hw->amx_note) == 0) {
        usable |= raw & amx_bits & env_mask;
    }
    hw->cpu_isa = usable;
}
#endif

/* The AMX permission is per process (kept across fork, cleared by execve):
 * a spawned scanner given the host's facts asks again before any plugin
 * code runs, and takes AMX off its copy of the facts when refused. */
void ah__hw_facts_claim(ah_hw_facts *hw)
{
#ifdef AH_X86
    const uint32_t amx_bits = AH_ISA_AMX_TILE | AH_ISA_AMX_BF16 | AH_ISA_AMX_INT8 | AH_ISA_AMX_FP16;
    if ((hw->cpu_isa & amx_bits) && amx_request(hw->amx_note, sizeof hw->amx_note) != 0)
        hw->cpu_isa &= ~amx_bits;
#else
    (void)hw;
#endif
}

void ah__hw_facts_gather(ah_hw_facts *hw)
{
    memset(hw, 0, sizeof *hw);
    hw->struct_size = sizeof *hw;

    uint32_t env_mask = 0xffffffffu;
    const char *m = secure_getenv("ATTNHOST_CPU_ISA_MASK");
    if (m && *m) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(m, &end, 0);
        if (errno || *end || v > 0xffffffffu)
            fprintf(stderr, "attnhost: ignoring ATTNHOST_CPU_ISA_MASK='%s': not a 32-bit number\n",
                    m);
        else env_mask = (uint32_t)v;
    }

#ifdef AH_X86
    gather_x86(hw, env_mask);
#else
    snprintf(hw->cpu_vendor, sizeof hw->cpu_vendor, "unknown");
    snprintf(hw->amx_note, sizeof hw->amx_note, "CPU has no AMX (not x86)");
    (void)env_mask;
#endif

    long n = sysconf(_SC_NPROCESSORS_ONLN);
    hw->cpu_logical_cores = n > 0 ? (uint32_t)n : 1;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) hw->memory_bytes = (uint64_t)pages * (uint64_t)page;
}
