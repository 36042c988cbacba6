/*
 * A CPU model of the two wave64 MFMA instructions rocm_aiter's kernels use,
 * written from the CDNA ISA's element placement (matrix element -> lane and
 * register item), independently of kernels/ra_layout.h's lane -> element
 * functions the kernels use:
 *
 *   v_mfma_f32_32x32x8bf16_1k / _f16:  D = A(32x8) B(8x32) + C(32x32)
 *     A[i][k] at lane i + 32*(k/4), item k%4; B[k][j] at lane j + 32*(k/4),
 *     item k%4; C/D[i][j] at lane j + 32*((i/4)%2), item 4*(i/8) + i%4.
 *   v_mfma_f32_16x16x16bf16_1k / _f16: D = A(16x16) B(16x16) + C(16x16)
 *     A[i][k] at lane i + 16*(k/4), item k%4; B likewise with column j;
 *     C/D[i][j] at lane j + 16*(i/4), item i%4.
 *
 * Operands are the 16-bit inputs already widened to float (bf16 and fp16
 * values are exact in float, and so are their products); each output
 * element is accumulated in float over k in order. The hardware's internal
 * summation order is not specified, so results agree to float rounding.
 */
#ifndef RA_MFMA_MODEL_H
#define RA_MFMA_MODEL_H

static inline int ra_isa_m32_ab_lane(int mn, int k) { return mn + 32 * (k / 4); }
static inline int ra_isa_m32_c_lane(int i, int j) { return j + 32 * ((i / 4) % 2); }
static inline int ra_isa_m32_c_item(int i) { return 4 * (i / 8) + i % 4; }
static inline int ra_isa_m16_ab_lane(int mn, int k) { return mn + 16 * (k / 4); }
static inline int ra_isa_m16_c_lane(int i, int j) { return j + 16 * (i / 4); }
static inline int ra_isa_m16_c_item(int i) { return i % 4; }

/* a, b: [64][4] per lane; c: [64][16] per lane, updated in place. */
static inline void ra_model_mfma_32x32x8(const float a[64][4], const float b[64][4],
                                         float c[64][16])
{
    float A[32][8], B[8][32];
    for (int i = 0; i < 32; i++)
        for (int k = 0; k < 8; k++) {
            A[i][k] = a[ra_isa_m32_ab_lane(i, k)][k % 4];
            B[k][i] = b[ra_isa_m32_ab_lane(i, k)][k % 4];
        }
    for (int i = 0; i < 32; i++)
        for (int j = 0; j < 32; j++) {
            float acc = c[ra_isa_m32_c_lane(i, j)][ra_isa_m32_c_item(i)];
            for (int k = 0; k < 8; k++) acc += A[i][k] * B[k][j];
            c[ra_isa_m32_c_lane(i, j)][ra_isa_m32_c_item(i)] = acc;
        }
}

/* a, b: [64][4]; c: [64][4]. */
static inline void ra_model_mfma_16x16x16(const float a[64][4], const float b[64][4],
                                          float c[64][4])
{
    float A[16][16], B[16][16];
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 16; k++) {
            A[i][k] = a[ra_isa_m16_ab_lane(i, k)][k % 4];
            B[k][i] = b[ra_isa_m16_ab_lane(i, k)][k % 4];
        }
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float acc = c[ra_isa_m16_c_lane(i, j)][ra_isa_m16_c_item(i)];
            for (int k = 0; k < 16; k++) acc += A[i][k] * B[k][j];
            c[ra_isa_m16_c_lane(i, j)][ra_isa_m16_c_item(i)] = acc;
        }
}

#endif
