/*
 * Planning on the GPU: the host's batch (query_start_loc, seq_lens,
 * block_table on the device) becomes this plugin's CSR metadata, qo_indptr,
 * kv_indptr, kv_indices, kv_last_page_len, plus per-token request/position
 * and the tensor-core kernel's tile list. Two launches with a fixed shape for
 * a given (num_reqs, num_tokens) and state: a single-CTA scan, then one CTA
 * per request and run of FI_SORT_RUN pages filling its slices. Nothing is
 * read back to the host, so the same launches run inside a captured graph or
 * ahead of its replay, rewriting the buffers in place.
 *
 * Sorted pages: where no key's position matters (a request whose one query
 * is a decode token, which sees all its keys, in a plan with no sliding
 * window, no ALiBi and no cascade), the fill lists each run of the request's
 * full pages in address order and keeps the last (possibly partial) page
 * last, so a kernel's key count still ends inside it. The fill decides per
 * request from the query lengths it reads, so decode requests of a mixed
 * batch are sorted too, and a captured plan decides afresh on each replay.
 * Attention does not depend on the order of its keys, and a cache whose
 * pages were handed out in random order streams closer to one in
 * allocation order: B64 x 16k decode on the H100 1.397 ms against 1.410 in
 * table order (1.387 for pages in allocation order).
 */
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "fi_common.cuh"

namespace fi {

static constexpr int PLAN_THREADS = 512;
static constexpr int PLAN_TILE_ROWS = FI_TILE_ROWS;
static constexpr int FILL_THREADS = 128, SORT_ITEMS = 8;
static_assert(FILL_THREADS * SORT_ITEMS == FI_SORT_RUN, "one sort covers one run");

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

/* Pages [0, n <= FI_SORT_RUN) of a block-table row into out, sorted by
 * address. Sorts the bits up to the largest page number only. */
__device__ void fill_sorted(const int32_t *row, int n, int32_t *out)
{
    using sorter = cub::BlockRadixSort<uint32_t, FILL_THREADS, SORT_ITEMS>;
    using reducer = cub::BlockReduce<uint32_t, FILL_THREADS>;
    __shared__ union {
        typename sorter::TempStorage sort;
        typename reducer::TempStorage reduce;
    } tmp;
    __shared__ int end_bit;
    uint32_t key[SORT_ITEMS], top = 0;
#pragma unroll
    for (int i = 0; i < SORT_ITEMS; i++) { /* blocked: thread x holds items x * SORT_ITEMS + i */
        const int k = threadIdx.x * SORT_ITEMS + i;
        key[i] = k < n ? (uint32_t)row[k] : 0u;
        top = key[i] > top ? key[i] : top;
    }
    top = reducer(tmp.reduce).Reduce(top, [](uint32_t x, uint32_t y) { return x > y ? x : y; });
    if (threadIdx.x == 0) end_bit = 32 - __clz(top | 1u);
    __syncthreads(); /* end_bit seen; tmp free for the sort */
    const int bits = end_bit;
#pragma unroll
    for (int i = 0; i < SORT_ITEMS; i++) /* the tail past n sorts last and is not written */
        if (threadIdx.x * SORT_ITEMS + i >= n) key[i] = (uint32_t)((1ull << bits) - 1);
    sorter(tmp.sort).Sort(key, 0, bits);
#pragma unroll
    for (int i = 0; i < SORT_ITEMS; i++) {
        const int k = threadIdx.x * SORT_ITEMS + i;
        if (k < n) out[k] = (int32_t)key[i];
    }
}

/* CTA (r, y): pages y * FI_SORT_RUN onwards of request r, one run, sorted
 * where sort allows it and r is a decode request (all but the last page,
 * which stays last); CTA (r, 0) also the request's token and tile lists. */
__global__ void __launch_bounds__(FILL_THREADS)
    plan_fill_kernel(const int32_t *block_table, int64_t bt_stride, int group, int sort,
                     plan_bufs pb)
{
    const int r = blockIdx.x, p0 = blockIdx.y * FI_SORT_RUN;
    const int k0 = pb.kv_indptr[r], np = pb.kv_indptr[r + 1] - k0;
    const int32_t *row = block_table + (int64_t)r * bt_stride;
    int32_t *out = pb.kv_indices + k0;
    const int q0 = pb.qo_indptr[r], ql = pb.qo_indptr[r + 1] - q0, len = pb.seq_lens[r];
    const int end = min(np, p0 + FI_SORT_RUN), full = sort && ql == 1 && np > 2 ? np - 1 : 0;
    const int sorted_end = min(end, full); /* uniform over the CTA: fill_sorted syncs */
    if (p0 < sorted_end) fill_sorted(row + p0, sorted_end - p0, out + p0);
    for (int i = max(p0, sorted_end) + threadIdx.x; i < end; i += blockDim.x) out[i] = row[i];
    if (blockIdx.y) return;
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
                        const int32_t *block_table, int64_t bt_stride, int num_reqs, int num_tokens,
                        int page_shift, int group, int max_pages, int sort_pages,
                        const plan_bufs &pb, cudaStream_t st)
{
    (void)num_tokens;
    plan_scan_kernel<<<1, PLAN_THREADS, 0, st>>>(query_start_loc, seq_lens, num_reqs, page_shift,
                                                 group, pb);
    cudaError_t e = cudaPeekAtLastError();
    if (e != cudaSuccess || num_reqs == 0) return e;
    const dim3 grid(num_reqs,
                    max_pages > FI_SORT_RUN ? (max_pages + FI_SORT_RUN - 1) / FI_SORT_RUN : 1);
    plan_fill_kernel<<<grid, FILL_THREADS, 0, st>>>(block_table, bt_stride, group, sort_pages, pb);
    return cudaPeekAtLastError();
}

} // namespace fi
