/* Decode kernel instantiations for head size 256 (all query/KV dtypes and
 * head-group blocks); one file per head size so builds compile in parallel. */
#include "decode_kernel.cuh"

namespace fi {
template cudaError_t decode_launch_hd<256, 256>(int, int, int, const attn_params &, cudaStream_t,
                                                int *);
}
