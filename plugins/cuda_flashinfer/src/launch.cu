/*
 * Head-size dispatch for the decode and tensor-core kernel families: the
 * instances are generated one file per head size (cmake/instances.cmake)
 * so a build compiles them in parallel; this file turns the runtime head
 * size into the matching instance and names an unsupported one.
 */
#include "fi_common.cuh"
#include "fi_dispatch.cuh"
#include "fi_instances.h"

namespace fi {

static cudaError_t decode_any(int q_dtype, int kv_dtype, int d, int dv, int gb, int hpc,
                              bool stream, const attn_params &p, cudaStream_t st, int *occ)
{
#ifdef FI_HAVE_SM90
    if (gb == FI_MLA_SM90_HEADS)
        return stream ? cudaErrorInvalidValue
                      : launch_decode_mla_sm90(q_dtype, kv_dtype, p, st, occ);
#endif
#define FI_DECODE_CASE(D_, DV_) \
    if (d == D_ && dv == DV_) \
        return decode_launch_hd<D_, DV_>(q_dtype, kv_dtype, gb, hpc, stream, p, st, occ);
    FI_DECODE_INSTANCES(FI_DECODE_CASE)
#undef FI_DECODE_CASE
    FI_UNSUPPORTED("decode qk head size", d, "the qk/v pairs of cmake/instances.cmake");
}

cudaError_t launch_decode(int q_dtype, int kv_dtype, int d, int dv, int gb, int hpc, bool stream,
                          const attn_params &p, cudaStream_t st)
{
    return decode_any(q_dtype, kv_dtype, d, dv, gb, hpc, stream, p, st, nullptr);
}

int decode_occupancy(int q_dtype, int kv_dtype, int d, int dv, int gb, bool stream)
{
    int n = 0;
    const attn_params p = {};
    if (decode_any(q_dtype, kv_dtype, d, dv, gb, 1, stream, p, 0, &n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

bool prefill_supported(int d, int dv)
{
#define FI_PREFILL_HAS(D_) || (d == D_ && dv == D_)
    return false FI_PREFILL_INSTANCES(FI_PREFILL_HAS);
#undef FI_PREFILL_HAS
}

cudaError_t launch_prefill(int q_dtype, int kv_dtype, int d, prefill_family family,
                           const attn_params &p, int grid_tiles, cudaStream_t st)
{
#define FI_PREFILL_CASE(D_) \
    if (d == D_) return prefill_launch_hd<D_>(q_dtype, kv_dtype, family, p, grid_tiles, st);
    FI_PREFILL_INSTANCES(FI_PREFILL_CASE)
#undef FI_PREFILL_CASE
    FI_UNSUPPORTED("prefill head size", d, "the head sizes of cmake/instances.cmake");
}

sched_device device_facts(int device)
{
    sched_device f = {};
    int maj = 0, min = 0;
    if (cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        (void)cudaGetLastError();
        f.sms = 0;
        return f;
    }
    f.cc = maj * 10 + min;
    /* the peak read rate: double data rate over the bus (kHz x bits x 2 / 8) */
    int mem_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess)
        f.hbm_tbps = (double)mem_khz * 1e3 * bus_bits * 2 / 8 / 1e12;
    else (void)cudaGetLastError();
#ifdef FI_HAVE_SM90
    f.sm90_built = true;
#endif
    return f;
}

} // namespace fi
