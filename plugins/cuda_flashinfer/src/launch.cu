/*
 * Head-size dispatch for the decode and tensor-core kernel families: the
 * per-head-size instantiations live in decode_d*.cu / prefill_d*.cu so a
 * build compiles them in parallel; this file turns the runtime head size into
 * the matching instantiation and names an unsupported one.
 */
#include <atomic>

#include "fi_common.cuh"
#include "fi_dispatch.cuh"

namespace fi {

template <int D, int DV>
cudaError_t decode_launch_hd(int, int, int, const attn_params &, cudaStream_t, int *);
template <int D> cudaError_t prefill_launch_hd(int, int, const attn_params &, int, cudaStream_t);

extern template cudaError_t decode_launch_hd<64, 64>(int, int, int, const attn_params &,
                                                     cudaStream_t, int *);
extern template cudaError_t decode_launch_hd<128, 128>(int, int, int, const attn_params &,
                                                       cudaStream_t, int *);
extern template cudaError_t decode_launch_hd<256, 256>(int, int, int, const attn_params &,
                                                       cudaStream_t, int *);
extern template cudaError_t decode_launch_hd<576, 512>(int, int, int, const attn_params &,
                                                       cudaStream_t, int *);
extern template cudaError_t prefill_launch_hd<64>(int, int, const attn_params &, int, cudaStream_t);
extern template cudaError_t prefill_launch_hd<128>(int, int, const attn_params &, int,
                                                   cudaStream_t);
extern template cudaError_t prefill_launch_hd<256>(int, int, const attn_params &, int,
                                                   cudaStream_t);

static cudaError_t decode_any(int q_dtype, int kv_dtype, int d, int dv, int gb,
                              const attn_params *p, cudaStream_t st, int *occ)
{
    static const attn_params none = {};
    const attn_params &pp = p ? *p : none;
    if (d == 576 && dv == 512)
        return decode_launch_hd<576, 512>(q_dtype, kv_dtype, gb, pp, st, occ);
    if (d != dv) FI_UNSUPPORTED("qk/v head size pair with qk", d, "equal sizes, or MLA 576/512");
    FI_DISPATCH_HEAD_DIM(d, D,
                         { return decode_launch_hd<D, D>(q_dtype, kv_dtype, gb, pp, st, occ); })
    return cudaSuccess;
}

cudaError_t launch_decode(int q_dtype, int kv_dtype, int d, int dv, int gb, const attn_params &p,
                          cudaStream_t st)
{
    return decode_any(q_dtype, kv_dtype, d, dv, gb, &p, st, nullptr);
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
        const bool ok =
            cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess;
        if (!ok) (void)cudaGetLastError();
        c = ok ? maj * 10 + min : -1;
        cc[dev].store(c, std::memory_order_relaxed);
    }
    return c > 0 ? c : 0;
}

/* Programmatic dependent launch of the split merge on compute capability
 * 9.0 and up: its grid is scheduled while the decode kernel drains. */
bool merge_pdl(void) { return current_cc() >= 90; }

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

/* CTAs per SM the fast kernel's registers are fitted for: 2 (no spills),
 * 1 for the Hopper d128 kernel (160 KiB of shared memory per CTA). */
int prefill_fast_minb(int d) { return prefill_sm90_on(d) ? 1 : 2; }

bool prefill_sm90_on(int d)
{
#ifdef FI_HAVE_SM90
    /* sm_90a code runs on compute capability 9.0 only. */
    return d == 128 && current_cc() == 90;
#else
    (void)d;
    return false;
#endif
}

/* Rows per CTA of the fast kernel: 128 at d128 (4 warps of 32 rows), 64
 * elsewhere (4 warps of 16). */
int prefill_fast_rows(int d) { return d == 128 ? 128 : 64; }

bool prefill_supported(int d, int dv) { return d == dv && (d == 64 || d == 128 || d == 256); }

cudaError_t launch_prefill(int q_dtype, int kv_dtype, int d, const attn_params &p, int grid_tiles,
                           cudaStream_t st)
{
    FI_DISPATCH_HEAD_DIM(d, D,
                         { return prefill_launch_hd<D>(q_dtype, kv_dtype, p, grid_tiles, st); })
    return cudaSuccess;
}

} // namespace fi
