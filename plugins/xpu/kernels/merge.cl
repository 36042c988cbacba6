/*
 * merge_states, portable tier: one work-item per (token, head) combines two
 * partial results over disjoint key sets by their log-sum-exp:
 *   out = (e^la a + e^lb b) / (e^la + e^lb),  lse_out = log(e^la + e^lb);
 * both parts empty gives 0 and -inf. A part of weight 0 (lse -inf: a
 * context-parallel rank that held no key) is never read, so whatever its
 * rows hold, the other part passes through. out may alias a, lse_out
 * la or lb. Strides in elements.
 */
#include "common.clh"

__kernel void xpu_merge_states(__global const uchar *a, long a_ts, long a_hs,
                               __global const float *la, long la_ts,
                               __global const uchar *b, long b_ts, long b_hs,
                               __global const float *lb, long lb_ts,
                               __global uchar *out, long o_ts, long o_hs,
                               __global float *lo, long lo_ts, int has_lo,
                               int n_tokens, int heads, int dv, int dt)
{
    const int t = (int)get_global_id(0), h = (int)get_global_id(1);
    if (t >= n_tokens || h >= heads) return;
    const float xa = la[(long)t * la_ts + h], xb = lb[(long)t * lb_ts + h];
    const float m = fmax(xa, xb);
    const long ab = (long)t * a_ts + (long)h * a_hs, bb = (long)t * b_ts + (long)h * b_hs;
    const long ob = (long)t * o_ts + (long)h * o_hs;
    if (m == XPU_NEG_INF) {
        for (int c = 0; c < dv; c++) xpu_store(out, ob + c, dt, 0.0f);
        if (has_lo) lo[(long)t * lo_ts + h] = XPU_NEG_INF;
        return;
    }
    const float wa = exp(xa - m), wb = exp(xb - m), den = wa + wb;
    for (int c = 0; c < dv; c++) {
        float v = 0.0f;
        if (wa > 0.0f) v += wa * xpu_load(a, ab + c, dt);
        if (wb > 0.0f) v += wb * xpu_load(b, bb + c, dt);
        xpu_store(out, ob + c, dt, v / den);
    }
    if (has_lo) lo[(long)t * lo_ts + h] = m + log(den);
}
