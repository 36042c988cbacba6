/* Tensor-core prefill/extend kernel instantiations for head size 256. */
#include "prefill_fast.cuh"

namespace fi {
template cudaError_t prefill_launch_hd<256>(int, int, const attn_params &, int, cudaStream_t);
}
