/*
 * merge_states for CUDA plugins: the ABI's LSE merge of two partial
 * attention results (ah_merge_args), with its argument checks, kernel and
 * launch, so every CUDA plugin's merge_states slot is the same code:
 *
 *   out     = (e^la * a + e^lb * b) / (e^la + e^lb)
 *   lse_out = log(e^la + e^lb)                          (natural log)
 *
 * An LSE of -inf means "no keys" (AH_FEAT_EMPTY_KV: a context-parallel
 * rank that holds none of a request's keys): that side's values take no
 * part, whatever they hold, and two such sides give out 0 and lse_out
 * -inf. Values are fp16 or bf16 [T, H, D], LSEs float32 [T, H], all
 * densely packed; lse_out may be NULL. One warp owns a (token, head) row
 * and reads all of it before writing it, so out may alias v_a or v_b and
 * lse_out may alias lse_a or lse_b (a merge in place).
 *
 * Everything here has internal linkage (an unnamed namespace): each plugin
 * gets its own kernel, registered with its own statically linked CUDA
 * runtime, and two plugins loaded in one process share no symbol.
 *
 * Include from one CUDA translation unit (nvcc) of the plugin; its
 * merge_states slot makes the context's device current and calls
 * ah_cuda_merge::merge_states.
 */
#ifndef ATTNHOST_CUDA_MERGE_CUH
#define ATTNHOST_CUDA_MERGE_CUH

#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <attnhost/plugin.h>
#include <attnhost/plugin_util.h>

namespace ah_cuda_merge {
namespace {

/* Loads and stores of the value type through float. */
template <typename T> struct value;
template <> struct value<__half> {
    static __device__ __forceinline__ float load(const __half *p, int64_t i)
    {
        return __half2float(p[i]);
    }
    static __device__ __forceinline__ void store(__half *p, int64_t i, float v)
    {
        p[i] = __float2half_rn(v);
    }
};
template <> struct value<__nv_bfloat16> {
    static __device__ __forceinline__ float load(const __nv_bfloat16 *p, int64_t i)
    {
        return __bfloat162float(p[i]);
    }
    static __device__ __forceinline__ void store(__nv_bfloat16 *p, int64_t i, float v)
    {
        p[i] = __float2bfloat16_rn(v);
    }
};

constexpr int kRowsPerBlock = 8; /* one warp per row */
constexpr int kMaxBlocks = 8192; /* the grid strides over the rest */

template <typename T>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    merge_states_kernel(const T *va, const float *la, const T *vb, const float *lb, T *out,
                        float *lse_out, int64_t rows, int D)
{
    const int lane = threadIdx.x % 32;
    const int64_t stride = (int64_t)gridDim.x * kRowsPerBlock;
    for (int64_t r = (int64_t)blockIdx.x * kRowsPerBlock + threadIdx.x / 32; r < rows;
         r += stride) {
        const float a = la[r], b = lb[r], mx = fmaxf(a, b);
        float wa = 0.f, wb = 0.f, lse = -INFINITY;
        if (mx != -INFINITY) {
            const float ea = expf(a - mx), eb = expf(b - mx), sum = ea + eb;
            wa = ea / sum;
            wb = eb / sum;
            lse = mx + logf(sum);
        }
        /* A side of weight 0 is not read: an empty side's rows need not
         * hold zeros (0 * NaN would poison the sum). */
        const int64_t base = r * D;
        for (int c = lane; c < D; c += 32) {
            float o = 0.f;
            if (wa > 0.f) o += wa * value<T>::load(va, base + c);
            if (wb > 0.f) o += wb * value<T>::load(vb, base + c);
            value<T>::store(out, base + c, o);
        }
        __syncwarp(); /* every lane has read la[r] and lb[r], which lse_out may alias */
        if (lane == 0 && lse_out) lse_out[r] = lse;
    }
}

/* One tensor of the merge: present, of dtype dt, of the given shape and
 * densely packed. */
inline ah_status check_tensor(ah_errbuf *e, const char *name, const DLTensor *t, ah_dtype dt,
                              int ndim, const int64_t *shape)
{
    if (!t || !t->data)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "merge_states: %s is missing", name);
    if (!ah_dl_dtype_is(t, dt))
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "merge_states: %s must be %s", name,
                       ah_dtype_name(dt));
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        if (ndim == 3)
            return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                           "merge_states: %s must be [%lld, %lld, %lld]", name, (long long)shape[0],
                           (long long)shape[1], (long long)shape[2]);
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "merge_states: %s must be [%lld, %lld]", name,
                       (long long)shape[0], (long long)shape[1]);
    }
    if (!ah_dl_is_contiguous(t))
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "merge_states: %s must be densely packed", name);
    return AH_OK;
}

template <typename T> cudaError_t launch(const ah_merge_args *a, int64_t rows, int D)
{
    int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
    if (blocks > kMaxBlocks) blocks = kMaxBlocks;
    merge_states_kernel<T><<<(unsigned)blocks, 32 * kRowsPerBlock, 0, (cudaStream_t)a->stream>>>(
        static_cast<const T *>(ah_dl_data(a->v_a)),
        static_cast<const float *>(ah_dl_data(a->lse_a)),
        static_cast<const T *>(ah_dl_data(a->v_b)),
        static_cast<const float *>(ah_dl_data(a->lse_b)), static_cast<T *>(ah_dl_data(a->out)),
        a->lse_out ? static_cast<float *>(ah_dl_data(a->lse_out)) : nullptr, rows, D);
    return cudaGetLastError();
}

/* The merge_states slot, less making the context's device current: checks
 * a (a failure names the tensor in e and launches nothing), then enqueues
 * the merge on a->stream. Returns AH_OK or the status it put in e. Holds no
 * state of its own: safe on any thread, as the slot must be. */
inline ah_status merge_states(const ah_merge_args *a, ah_errbuf *e)
{
    if (!a || !AH_HAS_FIELD(a, ah_merge_args, stream))
        return ah_fail(e, AH_ERR_ABI, "merge_states: args missing or too small");
    if (!a->v_a || !a->v_a->data)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "merge_states: v_a is missing");
    const ah_dtype dt = ah_dl_dtype_is(a->v_a, AH_DTYPE_BF16)   ? AH_DTYPE_BF16
                        : ah_dl_dtype_is(a->v_a, AH_DTYPE_FP16) ? AH_DTYPE_FP16
                                                                : AH_DTYPE_AUTO;
    if (dt == AH_DTYPE_AUTO)
        return ah_fail(e, AH_ERR_UNSUPPORTED, "merge_states: values must be fp16 or bf16");
    if (a->v_a->ndim != 3)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "merge_states: v_a must be [T, H, D]");
    const int64_t vshape[3] = {a->v_a->shape[0], a->v_a->shape[1], a->v_a->shape[2]};
    const int64_t lshape[2] = {vshape[0], vshape[1]};
    if (vshape[0] < 0 || vshape[1] < 0 || vshape[2] < 0 || vshape[2] > INT32_MAX)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "merge_states: v_a has a bad shape");
    ah_status s;
    if ((s = check_tensor(e, "v_a", a->v_a, dt, 3, vshape)) != AH_OK ||
        (s = check_tensor(e, "v_b", a->v_b, dt, 3, vshape)) != AH_OK ||
        (s = check_tensor(e, "out", a->out, dt, 3, vshape)) != AH_OK ||
        (s = check_tensor(e, "lse_a", a->lse_a, AH_DTYPE_FP32, 2, lshape)) != AH_OK ||
        (s = check_tensor(e, "lse_b", a->lse_b, AH_DTYPE_FP32, 2, lshape)) != AH_OK ||
        (a->lse_out &&
         (s = check_tensor(e, "lse_out", a->lse_out, AH_DTYPE_FP32, 2, lshape)) != AH_OK))
        return s;
    const int64_t rows = vshape[0] * vshape[1];
    if (rows == 0) return AH_OK;
    const cudaError_t ce = dt == AH_DTYPE_BF16 ? launch<__nv_bfloat16>(a, rows, (int)vshape[2])
                                               : launch<__half>(a, rows, (int)vshape[2]);
    if (ce != cudaSuccess)
        return ah_fail(e, AH_ERR_DEVICE, "merge_states: kernel launch: %s", cudaGetErrorString(ce));
    return AH_OK;
}

} // namespace
} // namespace ah_cuda_merge

#endif /* ATTNHOST_CUDA_MERGE_CUH */
