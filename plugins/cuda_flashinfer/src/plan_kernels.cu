/*
 * Planning on the GPU: the host's batch (query_start_loc, seq_lens,
 * block_table on the device) becomes this plugin's CSR metadata, qo_indptr,
 * kv_indptr, kv_indices, kv_last_page_len, plus per-token request/position
 * and the tensor-core kernel's tile list. Two launches with a fixed shape for
 * a given (num_reqs, num_tokens): a single-CTA scan, then one CTA per request
 * filling its slices. Nothing is read back to the host, so the same launches
 * run inside a captured graph or ahead of its replay, rewriting the buffers
 * in place.
 */
#include <cub/block/block_scan.cuh>

#include "fi_common.cuh"

namespace fi {

static constexpr int PLAN_THREADS = 512;
static constexpr int PLAN_TILE_ROWS = FI_TILE_ROWS;

__global__ void __launch_bounds__(PLAN_THREADS)
plan_scan_kernel(const int32_t *qsl, const int32_t *seq_lens, int num_reqs, int page_shift,
                 int group, plan_bufs pb)
{
    using scan = cub::BlockScan<int2, PLAN_THREADS>;
    __shared__ typename scan::TempStorage tmp;
    __shared__ int2 carry;
    if (threadIdx.x == 0) carry = make_int2(0, 0);
    __syncthreads();
    const int page = 1 << page_shift;
    for (int base = 0; base < num_reqs; base += PLAN_THREADS) {
        const int r = base + threadIdx.x;
        int2 v = make_int2(0, 0);
        if (r < num_reqs) {
            const int qlen = qsl[r + 1] - qsl[r], len = seq_lens[r];
            const int npages = (len + page - 1) >> page_shift;
            v = make_int2(npages, (qlen * group + PLAN_TILE_ROWS - 1) / PLAN_TILE_ROWS);
            pb.qo_indptr[r] = qsl[r];
            pb.seq_lens[r] = len;
            pb.kv_last_page_len[r] = npages ? len - (npages - 1) * page : 0;
        }
        int2 excl, total;
        scan(tmp).ExclusiveScan(
            v, excl, make_int2(0, 0),
            [](const int2 &x, const int2 &y) { return make_int2(x.x + y.x, x.y + y.y); }, total);
        if (r < num_reqs) {
            pb.kv_indptr[r] = carry.x + excl.x;
            pb.tile_indptr[r] = carry.y + excl.y;
        }
        __syncthreads();
        if (threadIdx.x == 0) carry = make_int2(carry.x + total.x, carry.y + total.y);
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        pb.qo_indptr[num_reqs] = qsl[num_reqs];
        pb.kv_indptr[num_reqs] = carry.x;
        pb.tile_indptr[num_reqs] = carry.y;
        *pb.num_tiles = carry.y;
    }
}

__global__ void plan_fill_kernel(const int32_t *block_table, int64_t bt_stride, int group,
                                 plan_bufs pb)
{
    const int r = blockIdx.x;
    const int k0 = pb.kv_indptr[r], np = pb.kv_indptr[r + 1] - k0;
    const int32_t *row = block_table + (int64_t)r * bt_stride;
    for (int i = threadIdx.x; i < np; i += blockDim.x) pb.kv_indices[k0 + i] = row[i];
    const int q0 = pb.qo_indptr[r], ql = pb.qo_indptr[r + 1] - q0, len = pb.seq_lens[r];
    for (int i = threadIdx.x; i < ql; i += blockDim.x) {
        pb.token_req[q0 + i] = r;
        pb.token_pos[q0 + i] = len - ql + i;
    }
    const int t0 = pb.tile_indptr[r], nt = pb.tile_indptr[r + 1] - t0;
    for (int i = threadIdx.x; i < nt; i += blockDim.x) {
        pb.tile_req[t0 + i] = r;
        pb.tile_row0[t0 + i] = i * PLAN_TILE_ROWS;
    }
}

cudaError_t launch_plan(const int32_t *query_start_loc, const int32_t *seq_lens,
                        const int32_t *block_table, int64_t bt_stride, int num_reqs,
                        int num_tokens, int page_shift, int group, const plan_bufs &pb,
                        cudaStream_t st)
{
    (void)num_tokens;
    plan_scan_kernel<<<1, PLAN_THREADS, 0, st>>>(query_start_loc, seq_lens, num_reqs, page_shift,
                                                 group, pb);
    cudaError_t e = cudaPeekAtLastError();
    if (e != cudaSuccess || num_reqs == 0) return e;
    plan_fill_kernel<<<num_reqs, 128, 0, st>>>(block_table, bt_stride, group, pb);
    return cudaPeekAtLastError();
}

} // namespace fi
