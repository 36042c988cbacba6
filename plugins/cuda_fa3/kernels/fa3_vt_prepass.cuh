// The V^T pre-pass of the FP8-compute forward (fa3_fwd_fp8c.cuh).
//
// PV's e4m3 wgmma reads V transposed. Transposing inside the forward kernel
// repeats the work for every query tile that reads a KV tile (NOTES: 5-14%
// of the kernel's time at the prefill shapes). For requests whose KV tiles
// are read many times, plan lists their 128-key tiles as jobs, and this
// kernel writes each tile's V^T once per KV head into the scratch as the
// exact image of a V^T ring stage (rows 0..D-1 of vt_layout<D, 128>). The
// forward's producer then fills a stage with one bulk copy.
//
// It is the forward's own V path pointed at memory: warp 0 copies each
// slab's V tile into a staging ring with the forward's descriptor and
// load_kv_tile (so boxes past the request's end are zero, exactly as the
// forward would see them), warps 1-3 transpose it with the forward's
// v_transposer into one of two out stages, and one thread bulk-stores the
// 16 KiB image to the scratch. Copies, transposes and stores of different
// slabs overlap. It runs at ~1.4 TB/s of V read (23 us for 32 MiB; NOTES
// v10), half the HBM's rate, and more transposing warps per SM barely
// moved it (6 -> 9: 24 -> 23.3 us). The job count is read from device
// memory.
#pragma once
#include "fa3_fwd_fp8c.cuh"

namespace fa3 {

constexpr int kVtStages = 2; // staged V tiles in flight per block (three blocks per SM)

template <int D> struct vt_prepass_smem {
    alignas(1024) uint8_t v8[kVtStages][FA3_VT_KEYS][D]; // staged V, 128-byte swizzled
    alignas(1024) uint8_t vt[2][D][FA3_VT_KEYS];         // V^T images on their way out
    uint64_t full[kVtStages], empty[kVtStages];
};

template <int D> constexpr size_t vt_prepass_smem_bytes() { return sizeof(vt_prepass_smem<D>) + 1024; }

// tv: the forward's V descriptor (e4m3, 128-byte swizzle, box_rows rows).
template <int D, int TR>
__global__ void __launch_bounds__(128) vt_prepass_kernel(const __grid_constant__ CUtensorMap tv, const fa3_params p,
                                                         const fa3_vt_job *__restrict__ jobs)
{
    static_assert(FA3_VT_KEYS == 128, "a slab is one 128-key V^T stage");
    constexpr int SLAB = D * FA3_VT_KEYS;
    extern __shared__ uint8_t smem_raw[];
    using S = vt_prepass_smem<D>;
    S &s = *reinterpret_cast<S *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    const int tid = threadIdx.x, lane = tid & 31;
    const int hk = p.num_kv_heads, total = p.counts->n_vt * hk;
    if (tid == 0) {
        for (int i = 0; i < kVtStages; i++) {
            mbar_init(&s.full[i], 1);
            mbar_init(&s.empty[i], 1);
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (tid < 32) { // slab x: job x / hk, KV head x % hk
        if (lane == 0) tma_prefetch_desc(&tv);
        int i = 0;
        for (int x = blockIdx.x; x < total; x += gridDim.x, i++) {
            const int si = i % kVtStages;
            mbar_wait(&s.empty[si], ((i / kVtStages) & 1) ^ 1);
            const fa3_vt_job job = jobs[x / hk];
            fa3_work it = {};
            it.req = job.req;
            it.kvh = x % hk;
            it.kv_lo = job.tile * FA3_VT_KEYS;
            it.kv_hi = min(job.keys_hi, it.kv_lo + FA3_VT_KEYS);
            load_kv_tile<FA3_VT_KEYS, 1, D, 0>(&s.v8[si][0][0], &tv, &s.full[si], SLAB, p, it, job.tile, lane);
        }
        return;
    }

    const v_transposer<D, FA3_VT_KEYS, TR> transpose(tid, lane);
    constexpr int kBarTranspose = 1; // the three transposing warps
    int i = 0;
    for (int x = blockIdx.x; x < total; x += gridDim.x, i++) {
        const int si = i % kVtStages, oi = i & 1;
        // Out stage oi is free once the store of two slabs ago has read it.
        if (tid == 32) bulk_wait_read<1>();
        named_sync(kBarTranspose, 96);
        mbar_wait(&s.full[si], (i / kVtStages) & 1);
        transpose(smem_addr(&s.v8[si][0][0]), smem_addr(&s.vt[oi][0][0]));
        fence_proxy_async(); // generic stores, then the copy engine reads them
        named_sync(kBarTranspose, 96);
        if (tid == 32) {
            mbar_arrive(&s.empty[si]);
            bulk_store(p.vt + (size_t)x * SLAB, &s.vt[oi][0][0], SLAB);
            bulk_commit();
        }
    }
    if (tid == 32) bulk_wait(); // the last images written before the block ends
}

} // namespace fa3
