/* Tensor-core prefill/extend kernel instantiations for head size 128. */
#include "prefill_fast.cuh"

namespace fi {
template cudaError_t prefill_launch_hd<128>(int, int, const attn_params &, int, cudaStream_t);
}
