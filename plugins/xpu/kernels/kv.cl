/*
 * KV-cache write, portable tier: one work-item per (new token, KV head)
 * stores the token's key and value rows at its slot, converting from the
 * query dtype to the cache dtype (FP8: divided by the scale first). A
 * negative slot is padding and is not written. Strides are in elements.
 */
#include "common.clh"

__kernel void xpu_write_kv(__global const uchar *key, long key_ts, long key_hs,
                           __global const uchar *val, long val_ts, long val_hs, int src_dt,
                           __global uchar *kc, long k_bs, long k_ts, long k_hs,
                           __global uchar *vc, long v_bs, long v_ts, long v_hs, int kv_dt,
                           float k_inv, float v_inv, __global const long *slots, int n_tokens,
                           int hk, int d, int dv, int block_size, int has_v)
{
    const int t = (int)get_global_id(0), h = (int)get_global_id(1);
    if (t >= n_tokens || h >= hk) return;
    const long slot = slots[t];
    if (slot < 0) return;
    /* a slot is below 2^63; its block index and offset by 64-bit division done once */
    const long blk = slot / block_size;
    const long off = slot - blk * block_size;
    const long ks = (long)t * key_ts + (long)h * key_hs, kd = blk * k_bs + off * k_ts + (long)h * k_hs;
    for (int c = 0; c < d; c++) xpu_store(kc, kd + c, kv_dt, xpu_load(key, ks + c, src_dt) * k_inv);
    if (!has_v) return;
    const long vs = (long)t * val_ts + (long)h * val_hs, vd = blk * v_bs + off * v_ts + (long)h * v_hs;
    for (int c = 0; c < dv; c++) xpu_store(vc, vd + c, kv_dt, xpu_load(val, vs + c, src_dt) * v_inv);
}
