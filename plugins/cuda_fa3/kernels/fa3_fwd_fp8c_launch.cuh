// Host-side launch of the FP8-compute kernel (fa3_fwd_fp8c.cuh): Q keeps
// its 16-bit descriptor; K and V get UINT8 descriptors with one 128-byte
// swizzled box per row block, so K lands in the layout QK^T reads and V in
// the staging layout the transposing warps read.
#pragma once
#include "fa3_fwd_fp8c.cuh"
#include "fa3_fwd_launch.cuh"
#include <stdlib.h>

namespace fa3 {

// 4 K / V^T stages (16 and 17 KiB per tile) and 3 V staging stages: 32
// KiB of Q + 64 + 68 + 48 KiB = 212 KiB; up to 4 K and 3 V tiles in flight
// per SM, which decode needs to keep HBM busy. Prefill (fa3_fwd_launch's
// stage_out) gives up a K / V^T stage for the epilogue's output staging
// (34 KiB, out_stage): compute-bound, it loses 1-2% to the shallower ring
// and gains 1-6% from the staged stores (NOTES v11). STAGES_OS: its ring.
// EMU: column groups (of 16) whose exp2 runs on the FMA pipe (exp2_fma;
// 4 measured best of 0-8 with V transposed in every item, NOTES v5).
// EMU_SHARED: the same for a prefill whose V^T is shared (vt_source): with
// the transposers mostly idle, the MIO queue has room for more MUFU work,
// and under the 700 W cap that sustained prefill hits, the seven FMA-pipe
// instructions of exp2_fma cost more than they save (2 measured level with
// 0 and 1 and 2-6% over 4; NOTES v13). TR: 2 = transpose_v3 (ldmatrix.trans
// / stmatrix; measured level with 1, NOTES v8), 1 = transpose_v2 (LDS/STS.64,
// addresses hoisted), 0 = transpose_v. PP: 1 = ping-pong between the consumer
// warpgroups. LS: 1 = LSE from fp32 sums of the unrounded P (more exact,
// 5-9% slower: NOTES v6), 0 = from PV's e4m3-rounded sums.
struct cfg8 {
    static constexpr int BN = 128, STAGES = 4, STAGES_OS = 3, SST = 3, EMU = 4, EMU_SHARED = 2, TR = 1, PP = 1,
                         LS = 0;
};

// Wide key tiles (FA3_F8C_BN = 160, measurement): fewer tiles per item, so
// the fixed part of each tile (barriers, ping-pong turn, O rescale, waits,
// descriptors, ring bookkeeping) is paid fewer times. BN 160 takes 20 + 22
// + 20 KiB per K / V^T / staging stage: 3 / 3 / 2 stages, 214 KiB with Q
// and Q8. (BN 192 is not launched: its consumers need 240 registers, which
// setmaxnreg can only reach with a 24-register producer warpgroup; with 32
// it deadlocked on the device, with 232 ptxas serialises its wgmma. NOTES v9.)
// EMU scales with the column groups (a quarter of the exp2 on the FMA
// pipe, as at 128); the transpose is ldmatrix / stmatrix (TR 2).
template <int BN> struct cfg8w;
template <> struct cfg8w<160> { static constexpr int STAGES = 3, SST = 2, EMU = 5; };

template <typename T, int BN = cfg8::BN, int STAGES = cfg8::STAGES, int SST = cfg8::SST, bool OS = false>
constexpr size_t smem_bytes_fp8c()
{
    return sizeof(fp8c_smem<128, BN, STAGES, SST, T, OS>) + 1024;
}

template <typename T>
int launch_fwd_fp8c(const fa3_fwd_launch *L, char *err, size_t errlen)
{
    constexpr int D = 128, BN = cfg8::BN, STAGES = cfg8::STAGES, SST = cfg8::SST;
    // state_create checks the device against the widening d128 instance's
    // figure (fa3_fwd_smem_bytes), which must cover this kernel too.
    static_assert(smem_bytes_fp8c<T>() <= smem_bytes<128, T, __nv_fp8_e4m3>(), "FP8 compute needs more shared memory");
    static_assert(smem_bytes_fp8c<T, 160, cfg8w<160>::STAGES, cfg8w<160>::SST>() <= smem_bytes<128, T, __nv_fp8_e4m3>(),
                  "FP8 compute with wide key tiles needs more shared memory");
    static_assert(smem_bytes_fp8c<T, BN, cfg8::STAGES_OS, SST, true>() <= smem_bytes<128, T, __nv_fp8_e4m3>(),
                  "FP8 compute with output staging needs more shared memory");
    if (L->head_dim != D) {
        snprintf(err, errlen, "forward: the FP8-compute kernel has head size 128 only, not %d", L->head_dim);
        return (int)cudaErrorInvalidValue;
    }
    // Q as for every instance; K and V as stored bytes, one 128-byte
    // swizzled box of all D bytes per row.
    auto env = [](const char *n, int d) { const char *v = getenv(n); return v ? atoi(v) : d; };
    // Key tile width (FA3_F8C_BN, measurement): a TMA box must not cross a
    // tile, so box_rows (a power of two dividing the page size) is halved
    // until it divides the tile too (BN 160: <= 32 rows).
    const int bn = env("FA3_F8C_BN", BN);
    fa3_fwd_launch Lw = *L;
    if (bn == 160) {
        while (bn % Lw.p.box_rows) Lw.p.box_rows /= 2;
        Lw.p.vt = nullptr; // the scratch holds 128-key tiles
        Lw.p.vt_flags = nullptr;
    }
    CUtensorMap tq, tk, tv;
    const int de = encode_descs<D, T>(&Lw, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, D, CU_TENSOR_MAP_SWIZZLE_128B, &tq, &tk,
                                      &tv, err, errlen);
    if (de) return de;
    constexpr int EMU = cfg8::EMU, TR = cfg8::TR, PP = cfg8::PP, LS = cfg8::LS;
    constexpr int STAGES_OS = cfg8::STAGES_OS;
    auto kern = fwd_fp8c_kernel<D, BN, STAGES, SST, T, 0, EMU, TR, PP, LS>;
    const bool os = L->stage_out && env("FA3_F8C_OS", 1);
    size_t smem = smem_bytes_fp8c<T>();
    if (bn == 160) {
        using W = cfg8w<160>;
        kern = fwd_fp8c_kernel<D, 160, W::STAGES, W::SST, T, 0, W::EMU, 2, PP, LS>;
        smem = smem_bytes_fp8c<T, 160, W::STAGES, W::SST>();
    } else if (os) {
        // FA3_F8C_EMU=4 / 2 (measurement) forces either split.
        const int e = env("FA3_F8C_EMU", Lw.p.vt ? cfg8::EMU_SHARED : EMU);
        kern = e == cfg8::EMU_SHARED ? fwd_fp8c_kernel<D, BN, STAGES_OS, SST, T, 0, cfg8::EMU_SHARED, TR, PP, LS, true>
                                     : fwd_fp8c_kernel<D, BN, STAGES_OS, SST, T, 0, EMU, TR, PP, LS, true>;
        smem = smem_bytes_fp8c<T, BN, STAGES_OS, SST, true>();
    }
    // Measurement variants (see the kernel, tools/profile_f8c.sh and
    // tools/compare_f8c.sh), each one switch away from the 4-stage kernel
    // without output staging or shared V^T (FA3_F8C_OS=0 times that one for
    // prefill);
    // never set in production. FA3_F8C_ABL 1/2/4 (wrong results),
    // FA3_F8C_TR 0/1/2, FA3_F8C_PP and FA3_F8C_LS 0/1, FA3_F8C_EMU 2/6
    // (bf16 queries only; with output staging, the prefill instances above).
    if (bn != 160) {
        const int a = env("FA3_F8C_ABL", 0), r = env("FA3_F8C_TR", TR), pp = env("FA3_F8C_PP", PP);
        const int ls = env("FA3_F8C_LS", LS), e = env("FA3_F8C_EMU", EMU);
        constexpr int TR_ALT = TR == 1 ? 2 : 1; // the other of TR 1 / 2
        auto variant = [&](auto k) {
            kern = k;
            smem = smem_bytes_fp8c<T>();
        };
        if (a == 1) variant(fwd_fp8c_kernel<D, BN, STAGES, SST, T, 1, EMU, TR, PP, LS>);
        else if (a == 2) variant(fwd_fp8c_kernel<D, BN, STAGES, SST, T, 2, EMU, TR, PP, LS>);
        else if (a == 4) variant(fwd_fp8c_kernel<D, BN, STAGES, SST, T, 4, EMU, TR, PP, LS>);
        else if (r == TR_ALT) variant(fwd_fp8c_kernel<D, BN, STAGES, SST, T, 0, EMU, TR_ALT, PP, LS>);
        else if (r == 0) variant(fwd_fp8c_kernel<D, BN, STAGES, SST, T, 0, EMU, 0, PP, LS>);
        else if (pp != PP) variant(fwd_fp8c_kernel<D, BN, STAGES, SST, T, 0, EMU, TR, 1 - PP, LS>);
        else if (ls != LS) variant(fwd_fp8c_kernel<D, BN, STAGES, SST, T, 0, EMU, TR, PP, 1 - LS>);
        else if constexpr (std::is_same<T, __nv_bfloat16>::value) {
            if (!os && e == 2) variant(fwd_fp8c_kernel<D, BN, STAGES, SST, T, 0, 2, TR, PP, LS>);
            else if (!os && e == 6) variant(fwd_fp8c_kernel<D, BN, STAGES, SST, T, 0, 6, TR, PP, LS>);
        }
    }
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e == cudaSuccess) {
        kern<<<L->grid, 384, smem, (cudaStream_t)L->stream>>>(tq, tk, tv, Lw.p);
        e = cudaGetLastError();
    }
    if (e != cudaSuccess) snprintf(err, errlen, "FP8-compute forward kernel launch: %s", cudaGetErrorString(e));
    return (int)e;
}

} // namespace fa3

#define FA3_FWD_INSTANCE_FP8C(T, NAME) \
    extern "C" int NAME(const fa3_fwd_launch *L, char *err, size_t errlen) { return fa3::launch_fwd_fp8c<T>(L, err, errlen); }
