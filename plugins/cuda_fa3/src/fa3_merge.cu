/*
 * merge_states(): the LSE merge every CUDA plugin shares
 * (attnhost/cuda_merge.cuh: checks, kernel, launch), on the context's
 * device. A CUDA translation unit of its own because the rest of the host
 * side is plain C++.
 */
#include <attnhost/cuda_merge.cuh>

#include "fa3_state.h"

ah_status fa3_merge_states(ah_context *ctx, const ah_merge_args *a)
{
    ah_errbuf *e = &ctx->svc.err;
    AH_CUDA_TRY(e, fa3_use_device(ctx));
    return ah_cuda_merge::merge_states(a, e);
}
