/* Decode kernel instantiations for absorbed MLA (qk 576, v 512: V is the
 * first 512 channels of the key rows). */
#include "decode_kernel.cuh"

namespace fi {
template cudaError_t decode_launch_hd<576, 512>(int, int, int, const attn_params &, cudaStream_t,
                                                int *);
}
