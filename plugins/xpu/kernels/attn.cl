/*
 * Paged attention, portable tier (OpenCL C 1.2, compiled to SPIR-V).
 *
 * xpu_attn: one work-item per (work item of the plan, query head). A work
 * item is one query token and a key range [k0, k1) of its request: the
 * whole visible range (prefill, extend, short decode) or one split-KV chunk
 * of a long decode. A decode request with no keys (seq_len 0, a
 * context-parallel rank holding none yet) has the empty range [0, 0): the
 * key loop never runs, so neither its block-table row nor the cache is
 * read, and it writes out 0 and LSE -inf (the sink's with a finite sink). Every query length runs through the same kernel, so a
 * plan serves any mix of decode and prefill requests. The work-item walks
 * its keys with an online softmax (scale, soft-cap, ALiBi, causal or
 * bidirectional visibility, sliding window) and either writes the output
 * row and log-sum-exp itself (dest < 0; sinks folded in) or writes a
 * normalised partial row and its LSE into the split workspace.
 *
 * xpu_attn_mla: xpu_attn for absorbed MLA's head sizes (576 / 512).
 *
 * xpu_split_merge: one work-item per (split token, head): the LSE merge of
 * a token's chunks, the sink folded into the denominator.
 *
 * Element types are masks, 1 << ah_dtype (common.clh); the parameters,
 * strides, visibility modes and flags are XPU_ATTN_PARAMS (common.clh).
 */
#include "common.clh"

/* One work-item's row over private arrays as long as the kernel's head
 * sizes: qv for d scaled query elements, acc for dv accumulators. */
static inline void xpu_attn_row(XPU_ATTN_PARAMS, __private float *qv, __private float *acc)
{
    const int it = (int)get_global_id(0), h = (int)get_global_id(1);
    if (it >= n_items || h >= hq) return;
    const int4 w = items[it];
    const int t = w.x, r = w.y;
    if (r < 0) return; /* a graph's padding token: no request */
    const int q0 = qsl[r], qlen = qsl[r + 1] - q0, len = seq_lens[r];
    const long p = (long)len - qlen + (t - q0);
    long lo = w.z, hi = w.w;
    xpu_visible(p, mode, window, &lo, &hi);
    const int kvh = h / group;
    const long qb = (long)t * q_ts + (long)h * q_hs;
    for (int c = 0; c < d; c++) qv[c] = xpu_load(q, qb + c, q_dt) * scale;
    for (int c = 0; c < dv; c++) acc[c] = 0.0f;
    const float slope = (flags & 4) ? alibi[h] : 0.0f;
    float m = XPU_NEG_INF, s = 0.0f;
    __global const int *row = bt + (long)r * bt_stride;
    for (long j = lo; j < hi; j++) {
        const uint ju = (uint)j, bsu = (uint)block_size, bi = ju / bsu;
        const long blk = row[bi], off = (long)(ju - bi * bsu);
        const long kb = blk * k_bs + off * k_ts + (long)kvh * k_hs;
        float dot = 0.0f;
        for (int c = 0; c < d; c++) dot += qv[c] * xpu_load(kc, kb + c, kv_dt);
        float sc = dot * k_scale;
        if (softcap > 0.0f) sc = softcap * tanh(sc / softcap);
        if (flags & 4) sc += slope * (float)(j - p);
        if (sc > m) {
            const float corr = exp(m - sc);
            s *= corr;
            for (int c = 0; c < dv; c++) acc[c] *= corr;
            m = sc;
        }
        const float e = exp(sc - m);
        s += e;
        const long vb = blk * v_bs + off * v_ts + (long)kvh * v_hs;
        const float ev = e * v_scale;
        for (int c = 0; c < dv; c++) acc[c] += ev * xpu_load(vc, vb + c, kv_dt);
    }
    const int dst = dest[it];
    if (dst >= 0) {
        __global float *po = part_o + ((long)dst * hq + h) * dv;
        const float inv = s > 0.0f ? 1.0f / s : 0.0f;
        for (int c = 0; c < dv; c++) po[c] = acc[c] * inv;
        part_lse[(long)dst * hq + h] = s > 0.0f ? m + log(s) : XPU_NEG_INF;
        return;
    }
    float row_lse;
    const float f = xpu_finish(m, s, flags, sinks, h, &row_lse);
    const long ob = (long)t * o_ts + (long)h * o_hs;
    for (int c = 0; c < dv; c++) xpu_store(out, ob + c, q_dt, acc[c] * f);
    if (flags & 1) lse[(long)t * l_ts + h] = row_lse;
}

__kernel void xpu_attn(XPU_ATTN_PARAMS)
{
    float qv[XPU_MAX_D], acc[XPU_MAX_D];
    xpu_attn_row(XPU_ATTN_ARGS, qv, acc);
}

/* Absorbed MLA (qk 576, v 512, one KV head): vc is the key cache and V a
 * key row's first dv channels. Its own kernel, so that the other layers'
 * work-items keep their smaller private arrays. */
__kernel void xpu_attn_mla(XPU_ATTN_PARAMS)
{
    float qv[XPU_MLA_D], acc[XPU_MLA_DV];
    xpu_attn_row(XPU_ATTN_ARGS, qv, acc);
}

/* splits[i] = (token, first partial, number of partials, 0). */
__kernel void xpu_split_merge(__global const int4 *splits, int n_splits,
                              __global const float *part_o, __global const float *part_lse,
                              __global uchar *out, long o_ts, long o_hs, int q_dt,
                              __global float *lse, long l_ts, __global const float *sinks,
                              int hq, int dv, int flags)
{
    const int i = (int)get_global_id(0), h = (int)get_global_id(1);
    if (i >= n_splits || h >= hq) return;
    const int4 sp = splits[i];
    float mm = XPU_NEG_INF;
    for (int k = 0; k < sp.z; k++) mm = fmax(mm, part_lse[(long)(sp.y + k) * hq + h]);
    const float sk = (flags & 2) ? sinks[h] : XPU_NEG_INF;
    mm = fmax(mm, sk);
    const long ob = (long)sp.x * o_ts + (long)h * o_hs;
    if (mm == XPU_NEG_INF) {
        for (int c = 0; c < dv; c++) xpu_store(out, ob + c, q_dt, 0.0f);
        if (flags & 1) lse[(long)sp.x * l_ts + h] = XPU_NEG_INF;
        return;
    }
    float tot = (flags & 2) ? exp(sk - mm) : 0.0f;
    for (int k = 0; k < sp.z; k++) {
        const float l = part_lse[(long)(sp.y + k) * hq + h];
        if (l != XPU_NEG_INF) tot += exp(l - mm);
    }
    for (int c = 0; c < dv; c++) {
        float a = 0.0f;
        for (int k = 0; k < sp.z; k++) {
            const float l = part_lse[(long)(sp.y + k) * hq + h];
            if (l != XPU_NEG_INF) a += exp(l - mm) * part_o[((long)(sp.y + k) * hq + h) * dv + c];
        }
        xpu_store(out, ob + c, q_dt, a / tot);
    }
    if (flags & 1) lse[(long)sp.x * l_ts + h] = mm + log(tot);
}
