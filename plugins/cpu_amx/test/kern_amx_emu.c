/*
 * Test-only: the AMX kernel table built over a C emulation of the AMX tile
 * instructions, so the tile kernel's layouts (K^T pair-interleave, V token
 * pairs, accumulator tiles over O) are checked on CPUs without AMX. Linked
 * into cpu_amx_amxemu.so, a copy of the plugin whose "amx" path needs only
 * AVX-512-BF16 (AH_CPU_AMX_EMULATED). Semantics follow the instruction
 * reference: tiles of up to 16 rows x 64 bytes, tdpbf16ps C[m][n] +=
 * sum_k A[m][2k] B[k][2n] + A[m][2k+1] B[k][2n+1] in fp32.
 */
#define AH_VEC_AVX512 1
#define AH_KERN_PREFIX cpu_amx_k_amx
#include "../src/cpu_amx.h"
#include "../src/kern_vec.h"

#undef _tile_loadconfig
#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbf16ps
#undef _tile_release

typedef struct emu_tiles {
    uint8_t rows[8];
    uint16_t colsb[8];
    uint8_t data[8][16][64];
} emu_tiles;
static _Thread_local emu_tiles emu;

static void emu_loadconfig(const void *cfg)
{
    const uint8_t *c = cfg;
    for (int t = 0; t < 8; t++) {
        memcpy(&emu.colsb[t], c + 16 + 2 * t, 2);
        emu.rows[t] = c[48 + t];
    }
}
static void emu_loadd(int t, const void *base, long stride)
{
    for (int r = 0; r < emu.rows[t]; r++)
        memcpy(emu.data[t][r], (const char *)base + r * stride, emu.colsb[t]);
}
static void emu_stored(int t, void *base, long stride)
{
    for (int r = 0; r < emu.rows[t]; r++)
        memcpy((char *)base + r * stride, emu.data[t][r], emu.colsb[t]);
}
static void emu_zero(int t) { memset(emu.data[t], 0, sizeof emu.data[t]); }
static float bf(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return ah_bf16_to_f32(h);
}
static void emu_dpbf16ps(int c, int a, int b)
{
    for (int m = 0; m < emu.rows[a]; m++)
        for (int n = 0; n < emu.colsb[c] / 4; n++) {
            float acc;
            memcpy(&acc, &emu.data[c][m][4 * n], 4);
            for (int k = 0; k < emu.colsb[a] / 4; k++) {
                acc += bf(&emu.data[a][m][4 * k]) * bf(&emu.data[b][k][4 * n]);
                acc += bf(&emu.data[a][m][4 * k + 2]) * bf(&emu.data[b][k][4 * n + 2]);
            }
            memcpy(&emu.data[c][m][4 * n], &acc, 4);
        }
}

#define _tile_loadconfig(cfg) emu_loadconfig(cfg)
#define _tile_loadd(t, base, stride) emu_loadd((t), (base), (long)(stride))
#define _tile_stored(t, base, stride) emu_stored((t), (base), (long)(stride))
#define _tile_zero(t) emu_zero(t)
#define _tile_dpbf16ps(c, a, b) emu_dpbf16ps((c), (a), (b))
#define _tile_release() ((void)0)

#include "../src/kern_amx.inc"
