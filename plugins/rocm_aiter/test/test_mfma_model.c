/*
 * The rocm_aiter kernels' tile loops, run lane by lane on the CPU through
 * the MFMA instruction model (mfma_model.h) with the kernels' own index
 * functions (kernels/ra_layout.h), against a double-precision oracle:
 *   - the fragment layouts: the kernels' lane -> element maps invert the
 *     ISA's element -> lane maps, and the S^T accumulator is the P^T operand;
 *   - paged decode: 16x16x16 MFMAs, GQA heads sharing one K/V read,
 *     partitions of 256 keys merged by LSE;
 *   - prefill/extend over the paged cache: 32x32x8 MFMAs, FA2-style online
 *     softmax over 32-key steps;
 *   each with causal masks, sliding windows, sinks and soft-caps, bf16 and
 *   fp16, head sizes 64..256, shuffled block tables;
 *   - requests with no keys (AH_FEAT_EMPTY_KV: seq_len 0, query length 1),
 *   beside others in decode batches, alone, and in a mixed batch the
 *   prefill kernel takes whole; with finite and -inf sinks. Their rows
 *   must be exactly 0 with LSE exactly -inf (the sink's logit), and every
 *   table entry past a request's blocks (an empty request's whole row) is
 *   garbage far past the cache: every cache read is bounds-checked;
 *   - merge_states' weights and values, a part of LSE -inf holding NaN.
 * This is what can be verified without an AMD GPU; the HIP kernels mirror
 * these loops step for step (kernels/attn.hip).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "../kernels/ra_layout.h"
#include "check.h"
#include "mfma_model.h"


static unsigned g_rng = 12345;
static float frand(void)
{
    g_rng = g_rng * 1103515245u + 12345u;
    return (float)((g_rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* Round to the 16-bit type the kernels compute in (1: bf16, 0: fp16). */
static float round16(float x, int bf16)
{
    return bf16 ? ah_bf16_to_f32(ah_f32_to_bf16(x)) : ah_f16_to_f32(ah_f32_to_f16(x));
}

/* ---- layouts ------------------------------------------------------------- */

static void test_layouts(void)
{
    for (int lane = 0; lane < 64; lane++)
        for (int it = 0; it < 4; it++) {
            CHECK_MSG(ra_isa_m32_ab_lane(ra_m32_ab_mn(lane), ra_m32_ab_k(lane, it)) == lane &&
                          ra_m32_ab_k(lane, it) % 4 == it,
                      "32x32x8 A/B lane %d item %d", lane, it);
            CHECK_MSG(ra_isa_m16_ab_lane(ra_m16_ab_mn(lane), ra_m16_ab_k(lane, it)) == lane &&
                          ra_m16_ab_k(lane, it) % 4 == it,
                      "16x16x16 A/B lane %d item %d", lane, it);
            int i = ra_m16_c_m(lane, it), j = ra_m16_c_n(lane);
            CHECK_MSG(ra_isa_m16_c_lane(i, j) == lane && ra_isa_m16_c_item(i) == it,
                      "16x16 C %d %d", lane, it);
            /* S^T's accumulator is P^T's B operand, register for register */
            CHECK_MSG(ra_m16_c_m(lane, it) == ra_m16_ab_k(lane, it), "16x16 C->B %d %d", lane, it);
        }
    for (int lane = 0; lane < 64; lane++)
        for (int it = 0; it < 16; it++) {
            int i = ra_m32_c_m(lane, it), j = ra_m32_c_n(lane);
            CHECK_MSG(ra_isa_m32_c_lane(i, j) == lane && ra_isa_m32_c_item(i) == it,
                      "32x32 C %d %d", lane, it);
            CHECK_MSG(ra_m32_c_m(lane, it) == 8 * (it / 4) + ra_m32_ab_k(lane, it % 4),
                      "32x32 C->B %d %d", lane, it);
        }
    /* every element placed exactly once */
    int seen32[32][32] = {{0}}, seen16[16][16] = {{0}};
    for (int lane = 0; lane < 64; lane++) {
        for (int it = 0; it < 16; it++) seen32[ra_m32_c_m(lane, it)][ra_m32_c_n(lane)]++;
        for (int it = 0; it < 4; it++) seen16[ra_m16_c_m(lane, it)][ra_m16_c_n(lane)]++;
    }
    for (int i = 0; i < 32; i++)
        for (int j = 0; j < 32; j++) CHECK_MSG(seen32[i][j] == 1, "32x32 C element %d,%d", i, j);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) CHECK_MSG(seen16[i][j] == 1, "16x16 C element %d,%d", i, j);

    /* one product each, packed by the kernels' functions */
    float A[32][8], B[8][32], a[64][4], b[64][4], c[64][16] = {{0}};
    for (int i = 0; i < 32; i++)
        for (int k = 0; k < 8; k++) A[i][k] = round16(frand(), 1), B[k][i] = round16(frand(), 1);
    for (int lane = 0; lane < 64; lane++)
        for (int it = 0; it < 4; it++) {
            a[lane][it] = A[ra_m32_ab_mn(lane)][ra_m32_ab_k(lane, it)];
            b[lane][it] = B[ra_m32_ab_k(lane, it)][ra_m32_ab_mn(lane)];
        }
    ra_model_mfma_32x32x8(a, b, c);
    double err = 0;
    for (int lane = 0; lane < 64; lane++)
        for (int it = 0; it < 16; it++) {
            double ref = 0;
            for (int k = 0; k < 8; k++)
                ref += (double)A[ra_m32_c_m(lane, it)][k] * B[k][ra_m32_c_n(lane)];
            err = fmax(err, fabs(ref - c[lane][it]));
        }
    CHECK_MSG(err < 1e-5, "32x32x8 product error %g", err);
    float A16[16][16], B16[16][16], c16[64][4] = {{0}};
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 16; k++)
            A16[i][k] = round16(frand(), 0), B16[k][i] = round16(frand(), 0);
    for (int lane = 0; lane < 64; lane++)
        for (int it = 0; it < 4; it++) {
            a[lane][it] = A16[ra_m16_ab_mn(lane)][ra_m16_ab_k(lane, it)];
            b[lane][it] = B16[ra_m16_ab_k(lane, it)][ra_m16_ab_mn(lane)];
        }
    ra_model_mfma_16x16x16(a, b, c16);
    err = 0;
    for (int lane = 0; lane < 64; lane++)
        for (int it = 0; it < 4; it++) {
            double ref = 0;
            for (int k = 0; k < 16; k++)
                ref += (double)A16[ra_m16_c_m(lane, it)][k] * B16[k][ra_m16_c_n(lane)];
            err = fmax(err, fabs(ref - c16[lane][it]));
        }
    CHECK_MSG(err < 1e-5, "16x16x16 product error %g", err);
}

/* ---- FP8: the kernels' decoder and encoder against the host's ---------------- */

/* The host's dtype of an FP8 cache type (RA_KV_E4M3 .. _E5M2_FNUZ). */
static ah_dtype fp8_dtype(int kv)
{
    static const ah_dtype t[] = {AH_DTYPE_AUTO, AH_DTYPE_FP8_E4M3, AH_DTYPE_FP8_E5M2,
                                 AH_DTYPE_FP8_E4M3_FNUZ, AH_DTYPE_FP8_E5M2_FNUZ};
    return t[kv];
}

static void test_fp8_codec(void)
{
    for (int kv = RA_KV_E4M3; kv <= RA_KV_E5M2_FNUZ; kv++) {
        const ah_dtype t = fp8_dtype(kv);
        float pos[128];
        int npos = 0, bad = 0, inexact = 0, nenc = 0, badenc = 0;
        for (int byte = 0; byte < 256; byte++) {
            const uint8_t x = (uint8_t)byte;
            const float want = ah_load_f32(&x, 0, t), got = ra_fp8_to_f32(x, kv);
            if (isnan(want) ? !isnan(got) : memcmp(&want, &got, sizeof got) != 0) bad++;
            /* the query's 16-bit types hold every FP8 value exactly */
            if (!isnan(got) && (round16(got, 1) != got || round16(got, 0) != got)) inexact++;
            if (byte < 0x80 && isfinite(got)) pos[npos++] = got;
        }
        CHECK_MSG(bad == 0 && inexact == 0,
                  "%s: %d bytes decode differently, %d inexact in 16 bits", ah_dtype_name(t), bad,
                  inexact);
        /* the encoder: every value, each midpoint (a tie) and its neighbours,
         * both signs; random floats over the whole range; the specials */
        float f[2048];
        int n = 0;
        for (int i = 0; i < npos; i++) {
            f[n++] = pos[i];
            if (i + 1 < npos) {
                const float m = 0.5f * (pos[i] + pos[i + 1]);
                f[n++] = m, f[n++] = nextafterf(m, 0.0f), f[n++] = nextafterf(m, INFINITY);
            }
        }
        f[n++] = INFINITY, f[n++] = NAN, f[n++] = 1e30f, f[n++] = 65536.0f, f[n++] = 449.0f;
        f[n++] = 1e-30f, f[n++] = 1.0e-7f, f[n++] = 241.0f, f[n++] = 0.0f;
        for (int k = -24; k <= 20 && n < 1000; k++)
            for (int i = 0; i < 12; i++) f[n++] = ldexpf(frand(), k);
        for (int i = 0; i < n; i++)
            for (int sign = 0; sign < 2; sign++) {
                const float x = sign ? -f[i] : f[i];
                nenc++;
                badenc += ra_f32_to_fp8(x, kv) != ah_f32_to_fp8(x, t);
            }
        CHECK_MSG(badenc == 0, "%s: %d of %d floats encode differently", ah_dtype_name(t), badenc,
                  nenc);
        printf("fp8 %s: 256 bytes decode as the host's, exact in bf16/fp16; %d floats encode "
               "as the host's\n",
               ah_dtype_name(t), nenc);
    }
}

/* ---- a paged batch --------------------------------------------------------- */

enum { SINKS_NONE, SINKS_ON, SINKS_NEG_INF }; /* cfg.use_sinks; -inf: ranks after 0 under CP */

/* Block-table entries past a request's blocks: far past any cache. */
#define RA_GARBAGE_BLOCK 0x7ffffff0

typedef struct cfg {
    const char *name;
    int bf16, D, Hq, Hk, bs, window, use_sinks;
    float softcap;
    int nreq;
    int qlen[4], seqlen[4];
    int kv;                 /* RA_KV_*: 0, the query's 16-bit type */
    float k_scale, v_scale; /* FP8 caches: real = stored * scale */
    int flags;              /* F_* */
} cfg;
/* F_MLA: absorbed MLA, D the qk head size (576), V the first 512 channels
 * of the key cache (one KV head) */
enum { F_ALIBI = 1, F_NON_CAUSAL = 2, F_HND = 4, F_MLA = 8 };

typedef struct batch {
    cfg c;
    int T, nblk, tw, max_seq;
    int qsl[5];
    int32_t *table;       /* [nreq][tw] */
    float *q, *kc, *vc;   /* q [T][Hq][D]; 16-bit caches NHD [nblk][bs][Hk][D] */
    uint8_t *kraw, *vraw; /* FP8 caches: the stored bytes, same layout */
    float *sinks;         /* [Hq] */
    float *slopes;        /* [Hq] ALiBi slopes, all 0 without F_ALIBI */
    float scale;
    float lscale, vscale; /* the kernels' logit scale (scale * k_scale) and v_scale */
} batch;

/* The stored byte of real value x in an FP8 cache of scale s, by the
 * host's encoder (plugin_util.h), with 1 in 16 bytes a zero: in an OCP
 * cache of either sign (its -0, 0x80, is what a fnuz reader would take for
 * NaN), in a fnuz cache its one zero, 0x00. */
static uint8_t fp8_byte(float x, float s, int kv)
{
    g_rng = g_rng * 1103515245u + 12345u;
    if ((g_rng >> 20) % 16 == 0) return (g_rng >> 24) & 1 && !ra_kv_fnuz(kv) ? 0x80 : 0x00;
    return ah_f32_to_fp8(x / s, fp8_dtype(kv));
}

static void batch_make(batch *b, const cfg *c)
{
    memset(b, 0, sizeof *b);
    b->c = *c;
    for (int r = 0; r < c->nreq; r++) {
        b->qsl[r + 1] = b->qsl[r] + c->qlen[r];
        int nb = (c->seqlen[r] + c->bs - 1) / c->bs;
        if (nb > b->tw) b->tw = nb;
        b->nblk += nb;
    }
    b->T = b->qsl[c->nreq];
    b->nblk += 3;
    if (b->tw < 1) b->tw = 1; /* a row even when every request is empty */
    b->table = malloc(sizeof *b->table * (size_t)c->nreq * b->tw);
    for (int i = 0; i < c->nreq * b->tw; i++) b->table[i] = RA_GARBAGE_BLOCK;
    for (int r = 0; r < c->nreq; r++)
        if (c->seqlen[r] > b->max_seq) b->max_seq = c->seqlen[r];
    /* blocks handed out in a shuffled order */
    int *perm = malloc(sizeof *perm * b->nblk);
    for (int i = 0; i < b->nblk; i++) perm[i] = i;
    for (int i = b->nblk - 1; i > 0; i--) {
        g_rng = g_rng * 1103515245u + 12345u;
        int j = (int)((g_rng >> 8) % (unsigned)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int next = 0;
    for (int r = 0; r < c->nreq; r++)
        for (int k = 0; k < (c->seqlen[r] + c->bs - 1) / c->bs; k++)
            b->table[r * b->tw + k] = perm[next++];
    free(perm);
    size_t nq = (size_t)b->T * c->Hq * c->D, nk = (size_t)b->nblk * c->bs * c->Hk * c->D;
    b->q = malloc(sizeof(float) * nq);
    b->kc = malloc(sizeof(float) * nk);
    b->vc = malloc(sizeof(float) * nk);
    for (size_t i = 0; i < nq; i++) b->q[i] = round16(frand(), c->bf16);
    for (size_t i = 0; i < nk; i++)
        b->kc[i] = round16(frand(), c->bf16), b->vc[i] = round16(frand(), c->bf16);
    const float ks = c->kv ? c->k_scale : 1.0f, vs = c->kv ? c->v_scale : 1.0f;
    b->lscale = 1.0f / sqrtf((float)c->D) * ks;
    b->vscale = c->flags & F_MLA ? ks : vs; /* MLA: V is the key cache, k_scale */
    if (c->kv) {
        b->kraw = malloc(nk);
        b->vraw = malloc(nk);
        for (size_t i = 0; i < nk; i++)
            b->kraw[i] = fp8_byte(b->kc[i], ks, c->kv), b->vraw[i] = fp8_byte(b->vc[i], vs, c->kv);
    }
    b->sinks = malloc(sizeof(float) * c->Hq);
    for (int h = 0; h < c->Hq; h++)
        b->sinks[h] = c->use_sinks == SINKS_NEG_INF ? -INFINITY : 2.0f * frand();
    b->scale = 1.0f / sqrtf((float)c->D);
    b->slopes = malloc(sizeof(float) * c->Hq);
    for (int h = 0; h < c->Hq; h++) /* the ALiBi paper's slopes 2^(-8 (h + 1) / Hq) */
        b->slopes[h] = c->flags & F_ALIBI ? exp2f(-8.0f * (float)(h + 1) / (float)c->Hq) : 0.0f;
}

static void batch_free(batch *b)
{
    free(b->table), free(b->q), free(b->kc), free(b->vc), free(b->sinks);
    free(b->kraw), free(b->vraw), free(b->slopes);
}

/* A cache element the models read, bounds-checked: a read through a
 * garbage table entry (past a request's blocks) is counted, not made. */
static long g_bad_reads;
static float kv_at(const batch *b, int v, int64_t off)
{
    const int64_t n = (int64_t)b->nblk * b->c.bs * b->c.Hk * b->c.D;
    if (off < 0 || off >= n) {
        g_bad_reads++;
        return NAN;
    }
    if (!b->c.kv) return (v ? b->vc : b->kc)[off];
    /* the kernels' FP8 read: the byte decoded, then the query's type */
    return round16(ra_fp8_to_f32((v ? b->vraw : b->kraw)[off], b->c.kv), b->c.bf16);
}

/* The real value of a cache element as the oracle defines it: the
 * host's decoding of the stored byte times the scale. */
static double kv_real(const batch *b, int v, int64_t off)
{
    if (!b->c.kv) return (v ? b->vc : b->kc)[off];
    const uint8_t x = (v ? b->vraw : b->kraw)[off];
    return (double)ah_load_f32(&x, 0, fp8_dtype(b->c.kv)) * (v ? b->c.v_scale : b->c.k_scale);
}

/* The oracle's cache offset (reference.h's ah_kv_offset, spelled out). */
static size_t oracle_offset(const batch *b, int r, int j, int hk, int e)
{
    const cfg *c = &b->c;
    const size_t blk = (size_t)b->table[r * b->tw + j / c->bs], slot = (size_t)(j % c->bs);
    const size_t per_block = (size_t)c->bs * c->Hk * c->D;
    if (c->flags & F_HND) return blk * per_block + ((size_t)hk * c->bs + slot) * c->D + e;
    return blk * per_block + (slot * c->Hk + hk) * c->D + e;
}

/* The oracle's visibility: causal, j <= p and j > p - window; not causal,
 * |j - p| < window; no window, every j < seq_len. */
static int oracle_visible(const cfg *c, int j, int p)
{
    if (!(c->flags & F_NON_CAUSAL) && j > p) return 0;
    return c->window <= 0 || abs(j - p) < c->window;
}

/* The oracle (core/include/attnhost/reference.h's definition), in double. */
static void oracle(const batch *b, int r, int i, int h, double *out, double *lse)
{
    const cfg *c = &b->c;
    const int t = b->qsl[r] + i, qp = c->seqlen[r] - c->qlen[r] + i, hk = h / (c->Hq / c->Hk);
    double mx = -INFINITY, den = 0;
    double *s = malloc(sizeof(double) * (size_t)c->seqlen[r]);
    for (int j = 0; j < c->seqlen[r]; j++) {
        s[j] = -INFINITY;
        if (!oracle_visible(c, j, qp)) continue;
        double d = 0;
        for (int e = 0; e < c->D; e++)
            d += (double)b->q[((size_t)t * c->Hq + h) * c->D + e] *
                 kv_real(b, 0, oracle_offset(b, r, j, hk, e));
        d *= b->scale;
        if (c->softcap > 0) d = c->softcap * tanh(d / c->softcap);
        d += (double)b->slopes[h] * (j - qp);
        s[j] = d;
        if (d > mx) mx = d;
    }
    if (c->use_sinks && b->sinks[h] > mx) mx = b->sinks[h];
    /* MLA: v_j = k_j[:v_head] */
    const int DV = c->flags & F_MLA ? 512 : c->D, vsrc = c->flags & F_MLA ? 0 : 1;
    for (int e = 0; e < DV; e++) out[e] = 0;
    for (int j = 0; j < c->seqlen[r]; j++) {
        if (s[j] == -INFINITY) continue;
        double p = exp(s[j] - mx);
        den += p;
        for (int e = 0; e < DV; e++) out[e] += p * kv_real(b, vsrc, oracle_offset(b, r, j, hk, e));
    }
    if (c->use_sinks && b->sinks[h] != -INFINITY) den += exp(b->sinks[h] - mx);
    for (int e = 0; e < DV; e++) out[e] = den > 0 ? out[e] / den : 0;
    *lse = den > 0 ? mx + log(den) : -INFINITY;
    free(s);
}

/* Wave-wide reductions as the kernels do them: xor shuffles over lanes. */
static void wave_max_xor(float v[64], int mask_lo, int mask_hi)
{
    for (int m = mask_lo; m <= mask_hi; m <<= 1) {
        float t[64];
        for (int l = 0; l < 64; l++) t[l] = fmaxf(v[l], v[l ^ m]);
        memcpy(v, t, sizeof t);
    }
}
static void wave_sum_xor(float v[64], int mask_lo, int mask_hi)
{
    for (int m = mask_lo; m <= mask_hi; m <<= 1) {
        float t[64];
        for (int l = 0; l < 64; l++) t[l] = v[l] + v[l ^ m];
        memcpy(v, t, sizeof t);
    }
}

/* ---- decode-kernel waves ---------------------------------------------------- */

/* The v head size: absorbed MLA reads V as the first 512 of the key
 * cache's 576 channels. */
static int dv_of(const cfg *c) { return c->flags & F_MLA ? 512 : c->D; }

/* One wave of the decode kernel: request r's query token t at position
 * qp, the 16 query heads g0.. of KV head hk, the keys of partition part
 * (-1: all the token sees). Leaves the lanes' O fragments in wave_o and
 * their running max and sum in m, l, as the kernel's registers hold them. */
static float wave_o[32][64][4]; /* [DV / 16][lane][item] */
static void decode_wave(const batch *b, int r, int t, int qp, int hk, int g0, int part, float m[64],
                        float l[64])
{
    static float bq[36][64][4]; /* [DQK / 16] */
    const cfg *c = &b->c;
    const int G = c->Hq / c->Hk, DQK = c->D, DV = dv_of(c), seq = c->seqlen[r];
    const int causal = !(c->flags & F_NON_CAUSAL), hnd = c->flags & F_HND;
    const int v = c->flags & F_MLA ? 0 : 1; /* MLA: V from the key cache */
    const int32_t *tab = b->table + r * b->tw;
    int kstart, k1;
    ra_row_keys(part, qp, seq, c->window, causal, &kstart, &k1);
    for (int lane = 0; lane < 64; lane++) {
        m[lane] = -INFINITY, l[lane] = 0;
        const int g = g0 + ra_m16_ab_mn(lane);
        for (int dt = 0; dt < DQK / 16; dt++)
            for (int it = 0; it < 4; it++)
                bq[dt][lane][it] = g < G ? b->q[((size_t)t * c->Hq + hk * G + g) * DQK + dt * 16 +
                                                ra_m16_ab_k(lane, it)]
                                         : 0.0f;
        for (int dt = 0; dt < DV / 16; dt++)
            for (int it = 0; it < 4; it++) wave_o[dt][lane][it] = 0;
    }
    for (int kc = kstart; kc < k1; kc += RA_DEC_KEYS) {
        float s[64][4] = {{0}}, a[64][4], mx[64], ps[64];
        for (int dt = 0; dt < DQK / 16; dt++) {
            for (int lane = 0; lane < 64; lane++)
                for (int it = 0; it < 4; it++) {
                    const int key = kc + ra_m16_ab_mn(lane);
                    a[lane][it] = key < k1
                                      ? kv_at(b, 0,
                                              ra_kv_offset(tab, key, c->bs, c->Hk, DQK, hk,
                                                           dt * 16 + ra_m16_ab_k(lane, it), hnd))
                                      : 0.0f;
                }
            ra_model_mfma_16x16x16(a, bq[dt], s);
        }
        for (int lane = 0; lane < 64; lane++) {
            mx[lane] = -INFINITY;
            const int g = g0 + ra_m16_c_n(lane);
            for (int it = 0; it < 4; it++) {
                const int key = kc + ra_m16_c_m(lane, it);
                s[lane][it] = key < k1 && ra_visible(key, qp, seq, c->window, causal)
                                  ? ra_logit(s[lane][it], b->lscale, c->softcap,
                                             g < G ? b->slopes[hk * G + g] : 0.0f, key, qp)
                                  : -INFINITY;
                mx[lane] = fmaxf(mx[lane], s[lane][it]);
            }
        }
        wave_max_xor(mx, 16, 32);
        for (int lane = 0; lane < 64; lane++) {
            const float mn = fmaxf(m[lane], mx[lane]), al = ra_rescale(m[lane], mn);
            ps[lane] = 0;
            for (int it = 0; it < 4; it++) {
                s[lane][it] = round16(ra_exp_shift(s[lane][it], mn), c->bf16); /* P, 16-bit */
                ps[lane] += s[lane][it];
            }
            for (int dt = 0; dt < DV / 16; dt++)
                for (int it = 0; it < 4; it++) wave_o[dt][lane][it] *= al;
            l[lane] *= al;
            m[lane] = mn;
        }
        wave_sum_xor(ps, 16, 32);
        for (int lane = 0; lane < 64; lane++) l[lane] += ps[lane];
        for (int dt = 0; dt < DV / 16; dt++) {
            for (int lane = 0; lane < 64; lane++)
                for (int it = 0; it < 4; it++) {
                    const int key = kc + ra_m16_ab_k(lane, it);
                    a[lane][it] = key < k1 ? kv_at(b, v,
                                                   ra_kv_offset(tab, key, c->bs, c->Hk, DQK, hk,
                                                                dt * 16 + ra_m16_ab_mn(lane), hnd))
                                           : 0.0f;
                }
            ra_model_mfma_16x16x16(a, s, wave_o[dt]);
        }
    }
}

/* Split decode of request r (its last query token): every partition of
 * the grid, which covers the batch's longest request, for every 16-head
 * group of every KV head, then the reduce kernel over the request's own
 * partitions; writes out [Hq][DV] and lse [Hq]. */
static void decode_model(const batch *b, int r, float *out, float *lse)
{
    const cfg *c = &b->c;
    const int G = c->Hq / c->Hk, DV = dv_of(c), seq = c->seqlen[r], t = b->qsl[r + 1] - 1;
    const int P = ra_num_partitions(b->max_seq);
    float *po = calloc((size_t)P * c->Hq * DV, sizeof(float)),
          *pm = malloc(sizeof(float) * P * c->Hq), *pl = malloc(sizeof(float) * P * c->Hq);
    for (int hk = 0; hk < c->Hk; hk++)
        for (int g0 = 0; g0 < G; g0 += RA_DEC_GROUP)
            for (int p = 0; p < P; p++) {
                float m[64], l[64];
                decode_wave(b, r, t, seq - 1, hk, g0, p, m, l);
                /* partials: normalised output, m, l (lanes of one query agree) */
                for (int lane = 0; lane < 64; lane++) {
                    const int g = g0 + ra_m16_c_n(lane);
                    if (g >= G) continue;
                    const int h = hk * G + g;
                    pm[p * c->Hq + h] = m[lane], pl[p * c->Hq + h] = l[lane];
                    for (int dt = 0; dt < DV / 16; dt++)
                        for (int it = 0; it < 4; it++)
                            po[((size_t)p * c->Hq + h) * DV + dt * 16 + ra_m16_c_m(lane, it)] =
                                l[lane] > 0 ? wave_o[dt][lane][it] / l[lane] : 0.0f;
                }
            }
    /* the reduce kernel: LSE merge of the partitions, then the sink */
    for (int h = 0; h < c->Hq; h++) {
        ra_lse_acc acc = ra_lse_init();
        float *o = out + (size_t)h * DV, os;
        for (int e = 0; e < DV; e++) o[e] = 0;
        for (int p = 0; p < ra_num_partitions(seq); p++) {
            const float w = ra_lse_add(&acc, pm[p * c->Hq + h], pl[p * c->Hq + h], &os);
            for (int e = 0; e < DV; e++)
                o[e] = o[e] * os + w * po[((size_t)p * c->Hq + h) * DV + e];
        }
        if (c->use_sinks) {
            ra_lse_add(&acc, b->sinks[h], 1.0f, &os);
            for (int e = 0; e < DV; e++) o[e] *= os;
        }
        for (int e = 0; e < DV; e++) o[e] = acc.l > 0 ? o[e] * (1.0f / acc.l) * b->vscale : 0.0f;
        lse[h] = ra_lse_value(acc);
    }
    free(po), free(pm), free(pl);
}

/* The decode kernel with token_rows (absorbed-MLA prefill/extend): a wave
 * per query token of the batch and 16-head group, over every key the token
 * sees, its request found by ra_request_of; writes out [qlen][Hq][DV] and
 * lse [qlen][Hq] of request r. */
static void token_model(const batch *b, int r, float *out, float *lse)
{
    const cfg *c = &b->c;
    const int G = c->Hq / c->Hk, DV = dv_of(c);
    for (int t = 0; t < b->T; t++) {
        if (ra_request_of(b->qsl, c->nreq, t) != r) continue;
        const int i = t - b->qsl[r], qp = c->seqlen[r] - c->qlen[r] + i;
        for (int hk = 0; hk < c->Hk; hk++)
            for (int g0 = 0; g0 < G; g0 += RA_DEC_GROUP) {
                float m[64], l[64];
                decode_wave(b, r, t, qp, hk, g0, -1, m, l);
                for (int lane = 0; lane < 64; lane++) {
                    const int g = g0 + ra_m16_c_n(lane), h = hk * G + g;
                    if (g >= G) continue;
                    ra_lse_acc acc;
                    acc.m = m[lane], acc.l = l[lane];
                    float os = 1.0f;
                    if (c->use_sinks) ra_lse_add(&acc, b->sinks[h], 1.0f, &os);
                    for (int dt = 0; dt < DV / 16; dt++)
                        for (int it = 0; it < 4; it++)
                            out[((size_t)i * c->Hq + h) * DV + dt * 16 + ra_m16_c_m(lane, it)] =
                                acc.l > 0 ? wave_o[dt][lane][it] * (os / acc.l * b->vscale) : 0.0f;
                    lse[(size_t)i * c->Hq + h] = ra_lse_value(acc);
                }
            }
    }
}

/* ---- prefill: one wave per (request, query head, 32-query tile) ------------ */

static void prefill_model(const batch *b, int r, float *out /* [qlen][Hq][D] */,
                          float *lse /* [qlen][Hq] */)
{
    const cfg *c = &b->c;
    const int G = c->Hq / c->Hk, D = c->D, seq = c->seqlen[r], ql = c->qlen[r], t0 = b->qsl[r];
    const int causal = !(c->flags & F_NON_CAUSAL);
    const int32_t *tab = b->table + r * b->tw;
    for (int h = 0; h < c->Hq; h++)
        for (int q0 = 0; q0 < ql; q0 += RA_PRE_QUERIES) {
            static float bq[32][64][4], o[8][64][16];
            float m[64], l[64];
            const int hk = h / G;
            int kstart, kend;
            ra_prefill_keys(q0, ql, seq, c->window, causal, &kstart, &kend);
            for (int lane = 0; lane < 64; lane++) {
                m[lane] = -INFINITY, l[lane] = 0;
                const int qi = q0 + ra_m32_ab_mn(lane);
                for (int dt = 0; dt < D / 8; dt++)
                    for (int it = 0; it < 4; it++)
                        bq[dt][lane][it] = qi < ql ? b->q[((size_t)(t0 + qi) * c->Hq + h) * D +
                                                          dt * 8 + ra_m32_ab_k(lane, it)]
                                                   : 0.0f;
                for (int dt = 0; dt < D / 32; dt++)
                    for (int it = 0; it < 16; it++) o[dt][lane][it] = 0;
            }
            for (int kc = kstart; kc < kend; kc += RA_PRE_KEYS) {
                float s[64][16] = {{0}}, a[64][4], mx[64], ps[64];
                for (int dt = 0; dt < D / 8; dt++) {
                    for (int lane = 0; lane < 64; lane++)
                        for (int it = 0; it < 4; it++) {
                            const int key = kc + ra_m32_ab_mn(lane);
                            a[lane][it] = key < kend
                                              ? kv_at(b, 0,
                                                      ra_kv_offset(tab, key, c->bs, c->Hk, D, hk,
                                                                   dt * 8 + ra_m32_ab_k(lane, it),
                                                                   c->flags & F_HND))
                                              : 0.0f;
                        }
                    ra_model_mfma_32x32x8(a, bq[dt], s);
                }
                for (int lane = 0; lane < 64; lane++) {
                    const int qp = seq - ql + q0 + ra_m32_c_n(lane);
                    mx[lane] = -INFINITY;
                    for (int it = 0; it < 16; it++) {
                        const int key = kc + ra_m32_c_m(lane, it);
                        s[lane][it] = key < kend && ra_visible(key, qp, seq, c->window, causal)
                                          ? ra_logit(s[lane][it], b->lscale, c->softcap,
                                                     b->slopes[h], key, qp)
                                          : -INFINITY;
                        mx[lane] = fmaxf(mx[lane], s[lane][it]);
                    }
                }
                wave_max_xor(mx, 32, 32);
                for (int lane = 0; lane < 64; lane++) {
                    const float mn = fmaxf(m[lane], mx[lane]), al = ra_rescale(m[lane], mn);
                    ps[lane] = 0;
                    for (int it = 0; it < 16; it++) {
                        s[lane][it] = round16(ra_exp_shift(s[lane][it], mn), c->bf16);
                        ps[lane] += s[lane][it];
                    }
                    for (int dt = 0; dt < D / 32; dt++)
                        for (int it = 0; it < 16; it++) o[dt][lane][it] *= al;
                    l[lane] *= al;
                    m[lane] = mn;
                }
                wave_sum_xor(ps, 32, 32);
                for (int lane = 0; lane < 64; lane++) l[lane] += ps[lane];
                for (int kk = 0; kk < 4; kk++) { /* 8 keys per 32x32x8 step */
                    float pb[64][4];
                    for (int lane = 0; lane < 64; lane++)
                        for (int it = 0; it < 4; it++) pb[lane][it] = s[lane][4 * kk + it];
                    for (int dt = 0; dt < D / 32; dt++) {
                        for (int lane = 0; lane < 64; lane++)
                            for (int it = 0; it < 4; it++) {
                                const int key = kc + 8 * kk + ra_m32_ab_k(lane, it);
                                a[lane][it] =
                                    key < kend ? kv_at(b, 1,
                                                       ra_kv_offset(tab, key, c->bs, c->Hk, D, hk,
                                                                    dt * 32 + ra_m32_ab_mn(lane),
                                                                    c->flags & F_HND))
                                               : 0.0f;
                            }
                        ra_model_mfma_32x32x8(a, pb, o[dt]);
                    }
                }
            }
            for (int lane = 0; lane < 64; lane++) {
                const int qi = q0 + ra_m32_c_n(lane);
                if (qi >= ql) continue;
                ra_lse_acc acc;
                acc.m = m[lane], acc.l = l[lane];
                float os = 1.0f;
                if (c->use_sinks) ra_lse_add(&acc, b->sinks[h], 1.0f, &os);
                for (int dt = 0; dt < D / 32; dt++)
                    for (int it = 0; it < 16; it++)
                        out[((size_t)qi * c->Hq + h) * D + dt * 32 + ra_m32_c_m(lane, it)] =
                            acc.l > 0 ? o[dt][lane][it] * (os / acc.l * b->vscale) : 0.0f;
                lse[(size_t)qi * c->Hq + h] = ra_lse_value(acc);
            }
        }
}

static void run_case(const cfg *c, int decode)
{
    batch b;
    batch_make(&b, c);
    g_bad_reads = 0;
    long empty_wrong = 0;
    const int DV = dv_of(c);
    double err = 0, lerr = 0, *ref = malloc(sizeof(double) * DV), rl;
    for (int r = 0; r < c->nreq; r++) {
        const int ql = c->qlen[r];
        float *out = malloc(sizeof(float) * (size_t)ql * c->Hq * DV),
              *lse = malloc(sizeof(float) * ql * c->Hq);
        if (decode) decode_model(&b, r, out, lse);
        else if (c->flags & F_MLA) token_model(&b, r, out, lse);
        else prefill_model(&b, r, out, lse);
        for (int i = decode ? ql - 1 : 0; i < ql; i++)
            for (int h = 0; h < c->Hq; h++) {
                oracle(&b, r, i, h, ref, &rl);
                const int row = decode ? 0 : i;
                for (int e = 0; e < DV; e++)
                    err = fmax(err, fabs(ref[e] - out[((size_t)row * c->Hq + h) * DV + e]));
                const float gl = lse[row * c->Hq + h];
                if (c->seqlen[r] == 0) { /* no keys: exactly 0, and the sink's logit or -inf */
                    const float want = c->use_sinks == SINKS_ON ? b.sinks[h] : -INFINITY;
                    for (int e = 0; e < DV; e++)
                        empty_wrong += out[((size_t)row * c->Hq + h) * DV + e] != 0.0f;
                    empty_wrong += !(gl == want);
                }
                if (rl == -INFINITY) lerr = fmax(lerr, gl == -INFINITY ? 0 : INFINITY);
                else lerr = fmax(lerr, fabs(rl - gl));
            }
        free(out), free(lse);
    }
    /* P is rounded to 16 bits before PV, as on the GPU; the output then
     * rounds to the q dtype. bf16 P: relative 2^-9 per term. */
    const double tol = c->bf16 ? 1.5e-2 : 4e-3, ltol = c->bf16 ? 4e-3 : 1e-3;
    CHECK_MSG(err < tol && lerr < ltol,
              "%s %s: max |out - oracle| %.3g (tol %.3g), max |lse - oracle| %.3g",
              decode ? "decode" : "prefill", c->name, err, tol, lerr);
    CHECK_MSG(g_bad_reads == 0, "%s %s: %ld cache reads through garbage table entries",
              decode ? "decode" : "prefill", c->name, g_bad_reads);
    CHECK_MSG(empty_wrong == 0,
              "%s %s: %ld values of requests without keys are not exactly 0 / -inf (sink)",
              decode ? "decode" : "prefill", c->name, empty_wrong);
    printf("%-7s %-42s max|out-oracle| %.2e  max|lse-oracle| %.2e\n", decode ? "decode" : "prefill",
           c->name, err, lerr);
    free(ref);
    batch_free(&b);
}

int main(void)
{
    test_layouts();
    printf("layouts: 32x32x8 and 16x16x16 A/B/C fragments, S^T accumulator = P^T operand\n");
    test_fp8_codec();
    /* Not reformatted: one configuration a row, fields in cfg's order. */
    // clang-format off
    static const cfg dec[] = {
        {"bf16 D128 GQA 8 seq 700/33/256", 1, 128, 16, 2, 16, 0, 0, 0, 3, {1, 1, 1}, {700, 33, 256}, RA_KV_16, 0, 0, 0},
        {"fp16 D64 GQA 4 seq 515", 0, 64, 8, 2, 32, 0, 0, 0, 2, {1, 1}, {515, 1}, RA_KV_16, 0, 0, 0},
        {"bf16 D256 MHA seq 300", 1, 256, 2, 2, 16, 0, 0, 0, 1, {1}, {300}, RA_KV_16, 0, 0, 0},
        {"bf16 D128 GQA 16 window 100 sinks", 1, 128, 16, 1, 16, 100, 1, 0, 2, {1, 1}, {900, 60}, RA_KV_16, 0, 0, 0},
        {"bf16 D64 GQA 6 softcap 30 sinks", 1, 64, 12, 2, 64, 0, 1, 30.0f, 2, {1, 1}, {520, 7}, RA_KV_16, 0, 0, 0},
        {"fp16 D128 window 300 softcap 5", 0, 128, 4, 1, 16, 300, 0, 5.0f, 1, {1}, {1000}, RA_KV_16, 0, 0, 0},
        /* requests without keys (AH_FEAT_EMPTY_KV) beside others, and alone */
        {"bf16 D128 GQA 8 seq 0/700/0/33", 1, 128, 16, 2, 16, 0, 0, 0, 4, {1, 1, 1, 1}, {0, 700, 0, 33}, RA_KV_16, 0, 0, 0},
        {"fp16 D64 GQA 4 seq 0/515 sinks", 0, 64, 8, 2, 32, 0, SINKS_ON, 0, 2, {1, 1}, {0, 515}, RA_KV_16, 0, 0, 0},
        {"bf16 D256 seq 300/0 sinks -inf", 1, 256, 2, 2, 16, 0, SINKS_NEG_INF, 0, 2, {1, 1}, {300, 0}, RA_KV_16, 0, 0, 0},
        {"bf16 D128 window 100 sinks seq 0/900", 1, 128, 16, 1, 16, 100, SINKS_ON, 0, 2, {1, 1}, {0, 900}, RA_KV_16, 0, 0, 0},
        {"fp16 D128 all empty", 0, 128, 4, 1, 16, 0, 0, 0, 3, {1, 1, 1}, {0, 0, 0}, RA_KV_16, 0, 0, 0},
        {"bf16 D64 all empty sinks", 1, 64, 8, 2, 16, 0, SINKS_ON, 0, 2, {1, 1}, {0, 0}, RA_KV_16, 0, 0, 0},
        {"fp16 D64 all empty sinks -inf", 0, 64, 8, 2, 16, 0, SINKS_NEG_INF, 0, 2, {1, 1}, {0, 0}, RA_KV_16, 0, 0, 0},
        /* FP8 caches (OCP bytes, 1 in 16 a signed zero), k/v scales */
        {"bf16 e4m3 D128 GQA 8 seq 700/33", 1, 128, 16, 2, 16, 0, 0, 0, 2, {1, 1}, {700, 33}, RA_KV_E4M3, 0.0125f, 0.02f, 0},
        {"fp16 e4m3 D64 window 100 sinks", 0, 64, 8, 2, 32, 100, 1, 0, 2, {1, 1}, {515, 0}, RA_KV_E4M3, 0.01f, 0.005f, 0},
        {"bf16 e5m2 D256 softcap 30", 1, 256, 4, 1, 16, 0, 0, 30.0f, 1, {1}, {300}, RA_KV_E5M2, 0.5f, 2.0f, 0},
        {"fp16 e5m2 D128 GQA 4", 0, 128, 8, 2, 16, 0, 0, 0, 2, {1, 1}, {260, 17}, RA_KV_E5M2, 0.25f, 1.0f, 0},
        /* the fnuz formats of MI300 engines' caches (1 in 16 bytes 0x00) */
        {"bf16 e4m3fnuz D128 GQA 8 seq 700/33", 1, 128, 16, 2, 16, 0, 0, 0, 2, {1, 1}, {700, 33}, RA_KV_E4M3_FNUZ, 0.0125f, 0.02f, 0},
        {"fp16 e5m2fnuz D64 window 100 sinks HND", 0, 64, 8, 2, 32, 100, 1, 0, 2, {1, 1}, {515, 0}, RA_KV_E5M2_FNUZ, 0.25f, 1.0f, F_HND},
        {"MLA bf16 e4m3fnuz 16 heads seq 300", 1, 576, 16, 1, 16, 0, 0, 0, 1, {1}, {300}, RA_KV_E4M3_FNUZ, 0.0125f, 0.02f, F_MLA},
        /* ALiBi, non-causal layers, HND caches */
        {"bf16 D128 GQA 4 ALiBi seq 600/40", 1, 128, 8, 2, 16, 0, 0, 0, 2, {1, 1}, {600, 40}, RA_KV_16, 0, 0, F_ALIBI},
        {"fp16 D64 HND GQA 4 window 90 sinks", 0, 64, 8, 2, 32, 90, 1, 0, 2, {1, 1}, {515, 0}, RA_KV_16, 0, 0, F_HND},
        {"bf16 e4m3 D256 HND ALiBi softcap 30", 1, 256, 4, 1, 16, 0, 0, 30.0f, 1, {1}, {300}, RA_KV_E4M3, 0.0125f, 0.02f, F_HND | F_ALIBI},
        {"bf16 D128 non-causal ALiBi HND", 1, 128, 8, 2, 16, 0, 0, 0, 2, {1, 1}, {290, 7}, RA_KV_16, 0, 0, F_NON_CAUSAL | F_ALIBI | F_HND},
        /* more than 16 query heads a KV head: 16-head groups */
        {"bf16 D128 GQA 40 ALiBi seq 300/0", 1, 128, 40, 1, 16, 0, SINKS_ON, 0, 2, {1, 1}, {300, 0}, RA_KV_16, 0, 0, F_ALIBI},
        /* absorbed MLA: qk 576, v 512 inside the key cache, one KV head */
        {"MLA bf16 16 heads seq 700/33", 1, 576, 16, 1, 64, 0, 0, 0, 2, {1, 1}, {700, 33}, RA_KV_16, 0, 0, F_MLA},
        {"MLA bf16 128 heads seq 300/0/20", 1, 576, 128, 1, 16, 0, 0, 0, 3, {1, 1, 1}, {300, 0, 20}, RA_KV_16, 0, 0, F_MLA},
        {"MLA bf16 e4m3 8 heads seq 520", 1, 576, 8, 1, 64, 0, 0, 0, 1, {1}, {520}, RA_KV_E4M3, 0.0125f, 0.02f, F_MLA},
        {"MLA fp16 e5m2 24 heads HND seq 260/9", 0, 576, 24, 1, 16, 0, 0, 0, 2, {1, 1}, {260, 9}, RA_KV_E5M2, 0.5f, 2.0f, F_MLA | F_HND},
    };
    // clang-format on
    /* Not reformatted: one configuration a row, fields in cfg's order. */
    // clang-format off
    static const cfg pre[] = {
        {"bf16 D64 chunk 77 of 300, 1 of 40", 1, 64, 4, 2, 16, 0, 0, 0, 2, {77, 1}, {300, 40}, RA_KV_16, 0, 0, 0},
        {"fp16 D128 prompt 100", 0, 128, 4, 4, 32, 0, 0, 0, 1, {100}, {100}, RA_KV_16, 0, 0, 0},
        {"bf16 D256 GQA 2 chunk 40 of 90", 1, 256, 2, 1, 16, 0, 0, 0, 1, {40}, {90}, RA_KV_16, 0, 0, 0},
        {"bf16 D128 window 50 sinks", 1, 128, 4, 2, 16, 50, 1, 0, 2, {70, 33}, {200, 33}, RA_KV_16, 0, 0, 0},
        {"bf16 D64 softcap 20 sinks window 7", 1, 64, 2, 1, 16, 7, 1, 20.0f, 1, {65}, {65}, RA_KV_16, 0, 0, 0},
        /* a mixed batch the host could not split goes whole to prefill */
        {"bf16 D64 chunk 77 of 300, seq 0, 1 of 40", 1, 64, 4, 2, 16, 0, 0, 0, 3, {77, 1, 1}, {300, 0, 40}, RA_KV_16, 0, 0, 0},
        {"fp16 D128 seq 0 sinks, prompt 40", 0, 128, 4, 2, 16, 0, SINKS_ON, 0, 2, {1, 40}, {0, 40}, RA_KV_16, 0, 0, 0},
        {"bf16 D64 seq 0 sinks -inf, chunk 5 of 9", 1, 64, 4, 4, 16, 0, SINKS_NEG_INF, 0, 2, {1, 5}, {0, 9}, RA_KV_16, 0, 0, 0},
        /* FP8 caches */
        {"bf16 e4m3 D128 chunk 70 of 200, window 50", 1, 128, 4, 2, 16, 50, 1, 0, 2, {70, 33}, {200, 33}, RA_KV_E4M3, 0.0125f, 0.02f, 0},
        {"fp16 e4m3 D256 prompt 45", 0, 256, 2, 1, 16, 0, 0, 0, 1, {45}, {45}, RA_KV_E4M3, 0.01f, 0.01f, 0},
        {"bf16 e5m2 D64 softcap 20 chunk 40 of 90", 1, 64, 4, 2, 32, 0, 0, 20.0f, 1, {40}, {90}, RA_KV_E5M2, 0.5f, 2.0f, 0},
        {"fp16 e5m2 D128 prompt 33", 0, 128, 2, 2, 16, 0, 0, 0, 1, {33}, {33}, RA_KV_E5M2, 0.25f, 0.5f, 0},
        {"bf16 e4m3fnuz D64 chunk 40 of 90 softcap 20", 1, 64, 4, 2, 32, 0, 0, 20.0f, 1, {40}, {90}, RA_KV_E4M3_FNUZ, 0.01f, 0.01f, 0},
        {"fp16 e5m2fnuz D128 chunk 70 of 200 window 50", 0, 128, 4, 2, 16, 50, 1, 0, 2, {70, 33}, {200, 33}, RA_KV_E5M2_FNUZ, 0.5f, 2.0f, 0},
        /* ALiBi, non-causal layers (a multimodal prefix), HND caches */
        {"bf16 D128 ALiBi chunk 70 of 200, 33", 1, 128, 8, 2, 16, 0, 0, 0, 2, {70, 33}, {200, 33}, RA_KV_16, 0, 0, F_ALIBI},
        {"fp16 D64 non-causal prompt 100", 0, 64, 4, 2, 16, 0, 0, 0, 1, {100}, {100}, RA_KV_16, 0, 0, F_NON_CAUSAL},
        {"bf16 D64 non-causal window 20 chunk 50 of 130", 1, 64, 4, 1, 16, 20, 1, 0, 2, {50, 9}, {130, 40}, RA_KV_16, 0, 0, F_NON_CAUSAL},
        {"bf16 D128 non-causal ALiBi HND sinks", 1, 128, 4, 2, 32, 0, 1, 0, 2, {45, 1}, {80, 0}, RA_KV_16, 0, 0, F_NON_CAUSAL | F_ALIBI | F_HND},
        {"fp16 e5m2 D256 HND window 40", 0, 256, 2, 1, 16, 40, 0, 0, 1, {77}, {150}, RA_KV_E5M2, 0.5f, 2.0f, F_HND},
        {"bf16 e4m3 D64 HND ALiBi softcap 20", 1, 64, 4, 4, 16, 0, 0, 20.0f, 1, {65}, {65}, RA_KV_E4M3, 0.01f, 0.01f, F_HND | F_ALIBI},
        /* absorbed MLA prefill/extend: the decode kernel a wave per query token */
        {"MLA bf16 16 heads chunk 20 of 300, 1 of 40", 1, 576, 16, 1, 64, 0, 0, 0, 2, {20, 1}, {300, 40}, RA_KV_16, 0, 0, F_MLA},
        {"MLA bf16 e4m3 32 heads prompt 17, seq 0", 1, 576, 32, 1, 16, 0, 0, 0, 3, {17, 0, 1}, {17, 0, 0}, RA_KV_E4M3, 0.0125f, 0.02f, F_MLA},
    };
    // clang-format on
    for (size_t i = 0; i < sizeof dec / sizeof *dec; i++) run_case(&dec[i], 1);
    for (size_t i = 0; i < sizeof pre / sizeof *pre; i++) run_case(&pre[i], 0);
    /* merge_states' weights */
    float wa, wb;
    const float lse = ra_merge2(1.0f, 2.0f, &wa, &wb);
    CHECK_MSG(fabs(lse - log(exp(1.0) + exp(2.0))) < 1e-6 &&
                  fabs(wa - 1.0 / (1.0 + exp(1.0))) < 1e-6 && fabs(wa + wb - 1.0) < 1e-6,
              "merge2 %g %g %g", lse, wa, wb);
    CHECK_MSG(ra_merge2(-INFINITY, -INFINITY, &wa, &wb) == -INFINITY && wa == 0 && wb == 0,
              "merge2 empty");
    CHECK_MSG(ra_merge2(-INFINITY, 3.0f, &wa, &wb) == 3.0f && wa == 0 && wb == 1,
              "merge2 one side");
    /* the merge kernel's element: a part of LSE -inf is not read, so its
     * NaN rows (anything an empty rank's rows hold) never reach the sum */
    const float nan = NAN;
    ra_merge2(-INFINITY, 3.0f, &wa, &wb);
    CHECK_MSG(RA_MERGE_VALUE(wa, nan, wb, 0.75f) == 0.75f, "merge of an empty a over NaN");
    ra_merge2(2.0f, -INFINITY, &wa, &wb);
    CHECK_MSG(RA_MERGE_VALUE(wa, -1.5f, wb, nan) == -1.5f, "merge of an empty b over NaN");
    ra_merge2(-INFINITY, -INFINITY, &wa, &wb);
    CHECK_MSG(RA_MERGE_VALUE(wa, nan, wb, nan) == 0.0f, "merge of two empty parts over NaN");
    return check_report("rocm_aiter_mfma_model");
}
