// The V^T pre-pass of the FP8-compute forward (fa3_fwd_fp8c.cuh).
//
// PV's e4m3 wgmma reads V transposed. Transposing inside the forward kernel
// repeats the work for every query tile that reads a KV tile (NOTES: 5-14%
// of the kernel's time at the prefill shapes). For requests whose KV tiles
// are read many times, plan lists their 128-key tiles as jobs, and this
// kernel writes each tile's V^T once per KV head into the scratch as the
// exact image of a V^T ring stage (rows 0..D-1 of vt_layout<D, 128>:
// channel rows of 128 key positions in pi order, 128-byte swizzle). The
// forward's producer then fills a stage with one bulk copy.
//
// It moves twice the e4m3 V of the listed tiles (read V, write V^T; most of
// the writes stay in L2 until the forward has read them). Per slab a block
// puts the key rows into shared memory
// (8 threads per 128-byte row), transposes in registers (one channel quad
// x 16 key positions per thread, 16 LDS.32 and four byte-permute quads)
// and stores the 16 KiB image in coalesced 16-byte stores, with the next
// slab's rows already on their way. It reads at 1.2 TB/s, not at the
// HBM's 3 (ncu: half occupancy, warps waiting on the job, page-table and
// row loads in turn; NOTES v10). The job count is read from device
// memory, so a captured graph replays any planned batch.
#pragma once
#include "fa3_fwd_fp8c.cuh"

namespace fa3 {

// Key at V^T position j (0..15) of a 16-key group (pi, as pi_off gives it
// per half group).
__device__ __forceinline__ int pi_key(int j) { return 4 * (j >> 3) + pi_off(j & 7); }

constexpr int kVtThreads = 256;

// v_cache in bytes with byte strides of (block, slot, head); vt the scratch
// p.vt points at (written here, read by the forward).
template <int D>
__global__ void __launch_bounds__(kVtThreads) vt_prepass_kernel(const uint8_t *__restrict__ v_cache,
                                                                int64_t s_block, int64_t s_slot, int64_t s_head,
                                                                const fa3_params p,
                                                                const fa3_vt_job *__restrict__ jobs, uint8_t *vt)
{
    static_assert(D == 128 && FA3_VT_KEYS == 128,
                  "a block's 8 warps x 32 lanes are the 8 key groups x 32 channel quads of a 128 x 128 tile");
    constexpr int ROW16 = D / 16, TILE = FA3_VT_KEYS * D;
    __shared__ alignas(16) uint32_t in[FA3_VT_KEYS][D / 4]; // [key][channel quad]
    __shared__ alignas(16) uint8_t out[TILE];       // the stage image
    const int tid = threadIdx.x, q = tid & 31, g = tid >> 5;
    const int hk = p.num_kv_heads, total = p.counts->n_vt * hk;
    // Slab x's key rows, this thread's PER 16-byte pieces (piece tid % 8 of
    // key tid / 8 + 32 k); keys past the request's end are 0.
    constexpr int PER = FA3_VT_KEYS * ROW16 / kVtThreads;
    auto load = [&](int x, uint4(&v)[PER]) {
        const fa3_vt_job job = jobs[x / hk];
        const int h = x - (x / hk) * hk;
        const int32_t *table = p.block_table + (size_t)job.req * p.bt_stride;
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int i = tid + k * kVtThreads, key = i / ROW16, pos = job.tile * FA3_VT_KEYS + key;
            v[k] = make_uint4(0u, 0u, 0u, 0u);
            if (pos < job.keys_hi)
                v[k] = __ldg(reinterpret_cast<const uint4 *>(v_cache + table[pos / p.block_size] * s_block +
                                                             (pos % p.block_size) * s_slot + h * s_head) +
                             i % ROW16);
        }
    };
    // Grid-stride over the slabs, the next slab's loads in flight while
    // this one is transposed and stored.
    uint4 cur[PER], nxt[PER];
    if (blockIdx.x < total) load(blockIdx.x, cur);
    for (int x = blockIdx.x; x < total; x += gridDim.x) {
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int i = tid + k * kVtThreads;
            reinterpret_cast<uint4 *>(&in[i / ROW16][0])[i % ROW16] = cur[k];
        }
        __syncthreads();
        if (x + (int)gridDim.x < total) load(x + gridDim.x, nxt);
        // Thread (g, q): channels 4q..4q+3 at positions 16g..16g+15.
        uint32_t w[16];
#pragma unroll
        for (int j = 0; j < 16; j++) w[j] = in[16 * g + pi_key(j)][q];
        uint32_t o[4][4]; // o[ch][k]: channel 4q + ch, positions 16g + 4k..4k+3
#pragma unroll
        for (int k = 0; k < 4; k++) tr4(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3], o[0][k], o[1][k], o[2][k], o[3][k]);
#pragma unroll
        for (int ch = 0; ch < 4; ch++)
            *reinterpret_cast<uint4 *>(&out[sw128(4 * q + ch, 16 * g)]) = make_uint4(o[ch][0], o[ch][1], o[ch][2], o[ch][3]);
        __syncthreads();
        uint4 *dst = reinterpret_cast<uint4 *>(vt + (size_t)x * TILE);
        for (int i = tid; i < TILE / 16; i += kVtThreads) dst[i] = reinterpret_cast<const uint4 *>(out)[i];
#pragma unroll
        for (int k = 0; k < PER; k++) cur[k] = nxt[k];
    }
}

} // namespace fa3
