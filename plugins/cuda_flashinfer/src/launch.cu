/*
 * Head-size dispatch for the decode and tensor-core kernel families: the
 * per-head-size instantiations live in decode_d*.cu / prefill_d*.cu so a
 * build compiles them in parallel; this file turns the runtime head size into
 * the matching instantiation and names an unsupported one.
 */
#include <stdlib.h>

#include <atomic>

#include "fi_common.cuh"
#include "fi_dispatch.cuh"

namespace fi {

template <int D, int DV>
cudaError_t decode_launch_hd(int, int, int, const attn_params &, cudaStream_t, int *);
template <int D>
cudaError_t prefill_launch_hd(int, int, const attn_params &, int, cudaStream_t);

extern template cudaError_t decode_launch_hd<64, 64>(int, int, int, const attn_params &,
                                                     cudaStream_t, int *);
extern template cudaError_t decode_launch_hd<128, 128>(int, int, int, const attn_params &,
                                                       cudaStream_t, int *);
extern template cudaError_t decode_launch_hd<256, 256>(int, int, int, const attn_params &,
                                                       cudaStream_t, int *);
extern template cudaError_t decode_launch_hd<576, 512>(int, int, int, const attn_params &,
                                                       cudaStream_t, int *);
extern template cudaError_t prefill_launch_hd<64>(int, int, const attn_params &, int, cudaStream_t);
extern template cudaError_t prefill_launch_hd<128>(int, int, const attn_params &, int, cudaStream_t);
extern template cudaError_t prefill_launch_hd<256>(int, int, const attn_params &, int, cudaStream_t);

static cudaError_t decode_any(int q_dtype, int kv_dtype, int d, int dv, int gb,
                              const attn_params *p, cudaStream_t st, int *occ)
{
    static const attn_params none = {};
    const attn_params &pp = p ? *p : none;
    if (d == 576 && dv == 512) return decode_launch_hd<576, 512>(q_dtype, kv_dtype, gb, pp, st, occ);
    if (d != dv) FI_UNSUPPORTED("qk/v head size pair with qk", d, "equal sizes, or MLA 576/512");
    FI_DISPATCH_HEAD_DIM(d, D, { return decode_launch_hd<D, D>(q_dtype, kv_dtype, gb, pp, st, occ); })
    return cudaSuccess;
}

cudaError_t launch_decode(int q_dtype, int kv_dtype, int d, int dv, int gb, const attn_params &p,
                          cudaStream_t st)
{
    return decode_any(q_dtype, kv_dtype, d, dv, gb, &p, st, nullptr);
}

/* An integer measurement knob from the environment (fallback when unset or
 * empty). Callers keep it in a function-local static, read once. */
int env_knob(const char *name, int fallback)
{
    const char *e = getenv(name);
    return e && *e ? atoi(e) : fallback;
}

/* Compute capability (major * 10 + minor) of the current device, asked
 * once per device; 0 when it cannot be told. */
int current_cc(void)
{
    static std::atomic<int> cc[64]; /* 0: not asked yet; -1: unknown */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
        (void)cudaGetLastError();
        return 0;
    }
    int c = cc[dev].load(std::memory_order_relaxed);
    if (c == 0) {
        int maj = 0, min = 0;
        const bool ok = cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                        cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess;
        if (!ok) (void)cudaGetLastError();
        c = ok ? maj * 10 + min : -1;
        cc[dev].store(c, std::memory_order_relaxed);
    }
    return c > 0 ? c : 0;
}

/* Programmatic dependent launch of the split merge on compute capability
 * 9.0 and up (H100, split-KV B1-B16 32k: 1-2% faster); AH_FI_MERGE_PDL=0
 * turns it off (a measurement knob). */
bool merge_pdl(void)
{
    static const bool on = env_knob("AH_FI_MERGE_PDL", 1) != 0;
    return on && current_cc() >= 90;
}

/* AH_FI_DECODE_STAGES (2-4) fixes the streaming decode kernel's pipeline
 * depth (a measurement knob); 0 when unset: plan chooses. */
int decode_stages_forced(void)
{
    static const int k = env_knob("AH_FI_DECODE_STAGES", 0);
    return k >= 2 && k <= 4 ? k : 0;
}

bool decode_tc_on(void)
{
    static const bool on = env_knob("AH_FI_DECODE_TC", 1) != 0;
    return on;
}

int decode_regs_shape(void)
{
    static const int k = env_knob("AH_FI_DECODE_REGS", 1);
    return k >= 0 && k <= 2 ? k : 1;
}

int decode_occupancy(int q_dtype, int kv_dtype, int d, int dv, int gb, int stages)
{
    int n = 0;
    attn_params p = {};
    p.stages = stages;
    if (decode_any(q_dtype, kv_dtype, d, dv, gb, &p, 0, &n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

/* Register fit of the fast kernel: 2 CTAs per SM (no spills; at d128 the
 * 64-row build was measured 4-7% faster on the H100 than a 3-CTA fit, which
 * spilled at its 168-register cap; the 128-row d128 build has only the
 * 2-CTA fit). AH_FI_PREFILL_CTAS=3 selects the 3-CTA build at d64 (a
 * measurement knob). */
int prefill_fast_minb(int d)
{
    static const int ctas = env_knob("AH_FI_PREFILL_CTAS", 2) == 3 ? 3 : 2;
    if (prefill_sm90_on(d)) return 1; /* 160 KiB of shared memory per CTA */
    return d <= 64 ? ctas : 2;         /* d128 runs 128-row CTAs, fitted for 2 only */
}

bool prefill_sm90_on(int d)
{
#ifdef FI_HAVE_SM90
    static const bool on = env_knob("AH_FI_PREFILL_SM90", 1) != 0;
    /* sm_90a code runs on compute capability 9.0 only. */
    return on && d == 128 && prefill_fast_rows(d) == 128 && current_cc() == 90;
#else
    (void)d;
    return false;
#endif
}

/* Rows per CTA of the fast kernel: 128 at d128 (4 warps of 32 rows), 64
 * elsewhere. AH_FI_PREFILL_ROWS=64 selects the 64-row d128 build (16 rows
 * per warp, Q in registers; a measurement knob). */
int prefill_fast_rows(int d)
{
    static const int rows = env_knob("AH_FI_PREFILL_ROWS", 128) == 64 ? 64 : 128;
    return d == 128 ? rows : 64;
}

bool prefill_supported(int d, int dv) { return d == dv && (d == 64 || d == 128 || d == 256); }

cudaError_t launch_prefill(int q_dtype, int kv_dtype, int d, const attn_params &p, int grid_tiles,
                           cudaStream_t st)
{
    FI_DISPATCH_HEAD_DIM(d, D, { return prefill_launch_hd<D>(q_dtype, kv_dtype, p, grid_tiles, st); })
    return cudaSuccess;
}

int decode_group_block(int group, bool mla, bool kv16, int d)
{
    /* AH_FI_MLA_TC=0 keeps MLA on the CUDA-core kernel (a measurement knob). */
    static const bool mla_tc = env_knob("AH_FI_MLA_TC", 1) != 0;
    if (mla && kv16 && (group % 16 == 0 || group < 16) && mla_tc) return 16; /* decode_mla_tc.cuh */
    const int cap = mla ? 2 : d >= 256 ? 4 : 8;
    for (int gb = cap; gb > 1; gb >>= 1)
        if (group % gb == 0) return gb;
    return 1;
}

} // namespace fi
