/*
 * Paged attention, Intel tier: one sub-group of XPU_SG lanes (16 or 8,
 * intel_reqd_sub_group_size) per (row block, KV head, head chunk), its
 * products through xpu_mma (mma.clh: XMX dpas, or sub-group shuffles).
 *
 * A row block is up to 8 query rows that read the same keys: up to 8 / hpr
 * consecutive work items of one request times hpr query heads of one KV
 * head (hpr = min(group, 8)), so a GQA decode puts the group's heads in the
 * matrix rows and a prefill its consecutive tokens. The plan's blocks[b] =
 * (first work item, number of items); a split-KV item (dest >= 0) is a
 * block of its own. Work items and everything else are xpu_attn's
 * (attn.cl): this kernel takes the same arguments, then the blocks.
 *
 * Per tile of 16 keys of the block's key range (the union of its rows'
 * visible ranges): S = Q K^T (8 x 16) in d / 16 products, each lane one
 * key (two with 8 lanes); masking and the online softmax per row, the row
 * maxima and sums by sub-group reductions; then O += P V in dv / XPU_SG
 * products, each lane one output column, V's rows read with sub-group
 * block reads where the host says they are aligned (flags & 8). Queries,
 * keys, values and P are fp16 or bf16 operands (the query's type);
 * accumulation is fp32; v_scale applies to the finished rows. A key outside a row's range scores -inf; a key
 * past the block's range is loaded as zeros, so nothing past a request's
 * keys (nor its block-table row) is read.
 *
 */
#include "common.clh"
#include "mma.clh"

#define XPU_KT 16 /* keys per tile: the product's k dimension */
#define XPU_MAX_KS (XPU_MAX_D / 16)
#define XPU_MAX_NT (XPU_MAX_D / XPU_SG)

/* 16 elements of one key's row from element i as packed operand bits;
 * zeros where the key is not valid (nothing is read). */
static inline void xpu_load_row16(__global const uchar *base, long i, int dt, int bf, int valid,
                                  uint b[8])
{
    for (int e = 0; e < 8; e++) {
        uint lo = 0, hi = 0;
        if (!valid) {
        } else if (dt & (bf ? XPU_BF16 : XPU_FP16)) {
            lo = ((__global const ushort *)base)[i + 2 * e];
            hi = ((__global const ushort *)base)[i + 2 * e + 1];
        } else {
            lo = xpu_f32_to_bits(xpu_load(base, i + 2 * e, dt), bf);
            hi = xpu_f32_to_bits(xpu_load(base, i + 2 * e + 1, dt), bf);
        }
        b[e] = lo | (hi << 16);
    }
}

/* This lane's element of V row vb's columns [c0, c0 + XPU_SG) as operand bits. */
static inline uint xpu_load_vcol(__global const uchar *vc, long vb, int c0, int dt, int bf,
                                 int aligned)
{
    const uint l = get_sub_group_local_id();
    if (dt & (bf ? XPU_BF16 : XPU_FP16)) {
        __global const ushort *p = (__global const ushort *)vc + vb + c0;
        return aligned ? intel_sub_group_block_read_us(p) : p[l];
    }
    return xpu_f32_to_bits(xpu_load(vc, vb + c0 + l, dt), bf);
}

__attribute__((intel_reqd_sub_group_size(XPU_SG))) __attribute__((reqd_work_group_size(XPU_SG, 1, 1)))
__kernel void xpu_attn_intel(XPU_ATTN_PARAMS, __global const int2 *blocks, int n_blocks, int hpr,
                             int n_hchunks)
{
    const int b = (int)get_group_id(0), y = (int)get_global_id(1);
    /* a remainder is taken by subtraction: LLVM pairs a division with its
     * remainder through a freeze, which SPIR-V cannot express */
    const int kvh = y / n_hchunks, hc = y - kvh * n_hchunks;
    const uint l = get_sub_group_local_id();
    if (b >= n_blocks || kvh * group >= hq) return;
    const int2 blk = blocks[b];
    const int bf = (q_dt & XPU_BF16) != 0, aligned = (flags & 8) != 0;
    const int r = items[blk.x].y;
    if (r < 0) return; /* a graph's padding token (a block of its own) */
    const int q0 = qsl[r], qlen = qsl[r + 1] - q0, len = seq_lens[r];
    __global const int *row = bt + (long)r * bt_stride;

    /* the rows: work item, head, position and visible range */
    int rt[8], rh[8], rit[8], rvalid[8];
    long rp[8], rlo[8], rhi[8];
    long blo = LONG_MAX, bhi = 0;
    for (int m = 0; m < 8; m++) {
        const int ti = m / hpr, hi = hc * hpr + (m - ti * hpr);
        rvalid[m] = ti < blk.y && hi < group;
        rit[m] = blk.x + (rvalid[m] ? ti : 0);
        rh[m] = kvh * group + (rvalid[m] ? hi : 0);
        const int4 w = items[rit[m]];
        rt[m] = w.x;
        const long p = (long)len - qlen + (w.x - q0);
        long lo = w.z, hi2 = w.w;
        xpu_visible(p, mode, window, &lo, &hi2);
        if (!rvalid[m] || hi2 < lo) hi2 = lo;
        rp[m] = p, rlo[m] = lo, rhi[m] = hi2;
        if (hi2 > lo) {
            blo = min(blo, lo);
            bhi = max(bhi, hi2);
        }
    }

    /* Q as the A operand: qa[ks][m], this lane's elements of columns ks * 16 + l * XPU_NH + e */
    const int nks = d / 16, nnt = dv / XPU_SG;
    uint qa[XPU_MAX_KS][8];
    for (int ks = 0; ks < nks; ks++)
        for (int m = 0; m < 8; m++) {
            const long qb = (long)rt[m] * q_ts + (long)rh[m] * q_hs + ks * 16 + l * XPU_NH;
            uint v = 0;
            for (int e = 0; e < XPU_NH; e++)
                v |= (rvalid[m] ? xpu_f32_to_bits(xpu_load(q, qb + e, q_dt), bf) : 0u) << (16 * e);
            qa[ks][m] = v;
        }
    float acc[XPU_MAX_NT][8], mrow[8], srow[8], slope[8];
    for (int m = 0; m < 8; m++) {
        mrow[m] = XPU_NEG_INF, srow[m] = 0.0f;
        slope[m] = (flags & 4) && rvalid[m] ? alibi[rh[m]] : 0.0f;
        for (int nt = 0; nt < nnt; nt++) acc[nt][m] = 0.0f;
    }

    for (long j0 = blo; j0 < bhi; j0 += XPU_KT) {
        /* this lane's keys j0 + e * XPU_SG + l, e < XPU_NH: block ids and scores */
        int kblk[XPU_NH];
        float s[XPU_NH][8];
        for (int e = 0; e < XPU_NH; e++) {
            const long j = j0 + e * XPU_SG + l;
            const uint ju = (uint)j, bsu = (uint)block_size, bi = ju / bsu;
            kblk[e] = j < bhi ? row[bi] : 0;
            for (int m = 0; m < 8; m++) s[e][m] = 0.0f;
            const long kb = (long)kblk[e] * k_bs + (long)(ju - bi * bsu) * k_ts + (long)kvh * k_hs;
            for (int ks = 0; ks < nks; ks++) {
                uint kbits[8];
                xpu_load_row16(kc, kb + ks * 16, kv_dt, bf, j < bhi, kbits);
                xpu_mma(s[e], qa[ks], kbits, bf);
            }
        }
        /* masks, soft-cap, ALiBi; the online softmax per row */
        uint pa[8];
        for (int m = 0; m < 8; m++) {
            float tmax = XPU_NEG_INF;
            for (int e = 0; e < XPU_NH; e++) {
                const long j = j0 + e * XPU_SG + l;
                float sc = s[e][m] * scale * k_scale;
                if (softcap > 0.0f) sc = softcap * tanh(sc / softcap);
                sc += slope[m] * (float)(j - rp[m]);
                s[e][m] = j >= rlo[m] && j < rhi[m] ? sc : XPU_NEG_INF;
                tmax = fmax(tmax, s[e][m]);
            }
            const float mnew = fmax(mrow[m], sub_group_reduce_max(tmax));
            float psum = 0.0f;
            uint bits = 0;
            for (int e = 0; e < XPU_NH; e++) {
                const float pe = mnew == XPU_NEG_INF ? 0.0f : exp(s[e][m] - mnew);
                psum += pe;
                bits |= xpu_f32_to_bits(pe, bf) << (16 * e);
            }
            pa[m] = bits;
            const float corr = mnew == XPU_NEG_INF ? 1.0f : exp(mrow[m] - mnew);
            srow[m] = srow[m] * corr + sub_group_reduce_add(psum);
            mrow[m] = mnew;
            for (int nt = 0; nt < nnt; nt++) acc[nt][m] *= corr;
        }
        /* O += P V: row k of the product is key j0 + (k % XPU_NH) * XPU_SG + k / XPU_NH,
         * the key whose P this tile's A operand holds at (lane k / XPU_NH, element k % XPU_NH) */
        for (int nt = 0; nt < nnt; nt++) {
            uint vb[8];
            for (int i = 0; i < 8; i++) {
                uint two = 0;
                for (int h2 = 0; h2 < 2; h2++) {
                    const int k = 2 * i + h2, e = k % XPU_NH, src = k / XPU_NH;
                    const long j = j0 + e * XPU_SG + src;
                    const int kb = intel_sub_group_shuffle(kblk[e], (uint)src);
                    const uint ju = (uint)j, bsu = (uint)block_size;
                    const long vrow =
                        (long)kb * v_bs + (long)(ju - (ju / bsu) * bsu) * v_ts + (long)kvh * v_hs;
                    if (j < bhi) /* uniform: past the block's keys stays zero */
                        two |= xpu_load_vcol(vc, vrow, nt * XPU_SG, kv_dt, bf, aligned)
                               << (16 * h2);
                }
                vb[i] = two;
            }
            xpu_mma(acc[nt], pa, vb, bf);
        }
    }

    /* per row: a split partial, or the output with the sink folded in (as xpu_attn) */
    for (int m = 0; m < 8; m++) {
        if (!rvalid[m]) continue;
        const int h = rh[m], dst = dest[rit[m]];
        const float mm0 = mrow[m], s0 = srow[m];
        if (dst >= 0) {
            __global float *po = part_o + ((long)dst * hq + h) * dv;
            const float inv = s0 > 0.0f ? v_scale / s0 : 0.0f;
            for (int nt = 0; nt < nnt; nt++) po[nt * XPU_SG + l] = acc[nt][m] * inv;
            if (l == 0) part_lse[(long)dst * hq + h] = s0 > 0.0f ? mm0 + log(s0) : XPU_NEG_INF;
            continue;
        }
        float row_lse;
        const float f = v_scale * xpu_finish(mm0, s0, flags, sinks, h, &row_lse);
        const long ob = (long)rt[m] * o_ts + (long)h * o_hs;
        for (int nt = 0; nt < nnt; nt++) xpu_store(out, ob + nt * XPU_SG + l, q_dt, acc[nt][m] * f);
        if ((flags & 1) && l == 0) lse[(long)rt[m] * l_ts + h] = row_lse;
    }
}
