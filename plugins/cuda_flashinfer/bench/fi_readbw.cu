/*
 * HBM read bandwidth, the ceiling the decode figures are quoted against: a
 * read-only kernel streams a buffer far larger than L2 (16-byte loads that
 * bypass L1, several in flight per thread, one XOR-folded word written per
 * CTA so the loads cannot be dropped) and reports the best of a few launch
 * shapes, each the median of many CUDA-event timings after a warm-up. The
 * device-to-device copy rate (read + write, counted as 2x the size) is
 * printed beside it for comparison with earlier figures.
 *
 * Then the decode's own read pattern without its arithmetic: the B64 x 16k,
 * 8 KV heads, d128 bf16 paged cache (page 16, NHD) streamed through the
 * decode kernel's cp.async pipeline (128-thread CTAs, 16 KiB stages), with
 * pages in order, shuffled, or shuffled but each request's visited in
 * address order ("sorted": attention does not care about key order, so a
 * plan could sort them), and with one KV head per CTA (the decode's grid)
 * or all eight (2 KiB contiguous per slot, keys split eight ways).
 * What this reaches is the ceiling of that access pattern; the gap from it
 * to the decode is the cost of the decode's arithmetic. On sm_90 the same
 * stages are also filled by the copy engine (one 256-byte bulk copy per
 * row, NHD and HND caches), the alternative to the 16-byte copies, and the
 * rows are loaded straight into registers (no shared memory), which tells
 * the copy mechanism's cost from the scattered pages' own. Last, the
 * one-head pattern's CTA end times, beside the same reads taken in dynamic
 * chunks by every resident CTA: whether the grid's spread of end times
 * costs bandwidth.
 *
 * Usage: fi_readbw [GiB] (default 4). Exits 77 without a CUDA device.
 */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#include "fi_common.cuh"

#define CK(x) \
    do { \
        cudaError_t e_ = (x); \
        if (e_ != cudaSuccess) { \
            fprintf(stderr, "fi_readbw: %s: %s\n", #x, cudaGetErrorString(e_)); \
            return 1; \
        } \
    } while (0)

/* U independent 16-byte loads per thread per trip, grid-stride. */
template <int U> __global__ void read_kernel(const uint4 *__restrict__ p, size_t n, uint32_t *out)
{
    uint32_t acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x * U;
    size_t i = ((size_t)blockIdx.x * blockDim.x) * U + threadIdx.x;
    for (; i + (U - 1) * blockDim.x < n; i += stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint4 *a = p + i + (size_t)u * blockDim.x;
            asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                         : "l"(a));
        }
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
#pragma unroll
    for (int u = 0; u < U; u++) /* this thread's part of the last, partial trip */
        if (i + (size_t)u * blockDim.x < n) acc ^= p[i + (size_t)u * blockDim.x].x;
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc; /* data-dependent, practically never */
}

__global__ void fill_kernel(uint4 *p, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = make_uint4((uint32_t)i * 2654435761u, (uint32_t)(i >> 7) + 1u,
                          (uint32_t)i ^ 0x5bd1e995u, 7u);
}

/* The paged decode geometry: R requests of CTX keys, HK heads of 256-byte
 * rows (d128 bf16), pages of 16 slots, K and V in two caches. */
struct paged_geom {
    const unsigned char *k, *v;
    const int32_t *pages;      /* [R][CTX / 16] */
    int ctx, hpc;              /* keys per request; KV heads per CTA */
    int hnd;                   /* page layout [head][slot] instead of [slot][head] */
    unsigned long long *trace; /* if set: [CTA][2] start and end times (ns) */
};
constexpr int PG_HK = 8, PG_ROWB = 256, PG_PAGE = 16;
constexpr int64_t PG_SLOT = PG_HK * PG_ROWB, PG_PAGEB = PG_PAGE * PG_SLOT;

/* Byte offset of key j's row of head h in the cache. */
__device__ __forceinline__ int64_t pg_row(const paged_geom &g, const int32_t *pages, int j, int h)
{
    const int64_t page = (int64_t)__ldg(pages + j / PG_PAGE) * PG_PAGEB, slot = j % PG_PAGE;
    return page + (g.hnd ? (h * PG_PAGE + slot) * PG_ROWB : slot * PG_SLOT + h * PG_ROWB);
}

__device__ __forceinline__ unsigned long long globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Grid (HK / hpc head groups, R * hpc): a CTA streams hpc heads over ctx /
 * hpc keys, 32 rows (K) + 32 rows (V) a stage, ns stages, reading one word
 * per thread of each landed stage so nothing is dead. */
__global__ void __launch_bounds__(128) paged_read_kernel(paged_geom g, int ns, uint32_t *out)
{
    extern __shared__ __align__(16) unsigned char sm[];
    const int hpc = g.hpc, bn = 32 / hpc, per = g.ctx / hpc;
    const int r = blockIdx.y / hpc, j0 = (blockIdx.y % hpc) * per, ntiles = per / bn;
    const int32_t *pages = g.pages + (int64_t)r * (g.ctx / PG_PAGE);
    const int cc = threadIdx.x % 16, rr = threadIdx.x / 16;
    auto issue = [&](int it) {
        unsigned char *st = sm + (it % ns) * 16384;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = rr + 8 * i, j = j0 + it * bn + row / hpc,
                      h = blockIdx.x * hpc + row % hpc;
            const int64_t off = pg_row(g, pages, j, h) + cc * 16;
            fi::cp_async16(st + row * PG_ROWB + cc * 16, g.k + off, 16);
            fi::cp_async16(st + 8192 + row * PG_ROWB + cc * 16, g.v + off, 16);
        }
    };
    const int cta = blockIdx.y * gridDim.x + blockIdx.x;
    if (g.trace && threadIdx.x == 0) g.trace[2 * cta] = globaltimer();
    uint32_t acc = 0;
    fi::stage_pipeline(
        ns, ntiles, issue,
        [&](int it) { /* the decode's own pipeline */
                      const unsigned char *st = sm + (it % ns) * 16384;
                      acc ^= *reinterpret_cast<const uint32_t *>(st + threadIdx.x * 16) ^
                             *reinterpret_cast<const uint32_t *>(st + 8192 + threadIdx.x * 16);
        });
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;
    if (g.trace) {
        __syncthreads();
        if (threadIdx.x == 0) g.trace[2 * cta + 1] = globaltimer();
    }
}

/* Dynamic chunks of the same items (one KV head, ctx keys each): a 1-D grid
 * of every resident CTA takes chunks of `chunk` tiles from one counter (*cnt,
 * zero at launch), chunk id = k x items + item, so a CTA on a faster SM
 * takes more of them. Thread 0 asks for chunk q + 3 as the CTA starts
 * issuing chunk q and files the answer one chunk later, so the atomic's
 * latency is never waited on; the ids travel through `ring`. */
__global__ void __launch_bounds__(128)
    paged_chunks_kernel(paged_geom g, int items, int ns, uint32_t *out, int *cnt, int chunk)
{
    extern __shared__ __align__(16) unsigned char sm[];
    __shared__ int ring[8];
    const int tpi = g.ctx / 32, cpi = tpi / chunk, total = cpi * items;
    const int cc = threadIdx.x % 16, rr = threadIdx.x / 16;
    int pend = 0; /* thread 0: the claim in flight */
    auto valid = [&](int id) { return id < total ? id : -1; };
    auto chunk_of = [&](int s) { return ring[(s / chunk) % 8]; };
    auto issue = [&](int s) {
        const int id = chunk_of(s);
        if (threadIdx.x == 0 && s % chunk == 0) {
            ring[(s / chunk + 2) % 8] = valid(pend);
            pend = atomicAdd(cnt, 1);
        }
        unsigned char *st = sm + (s % ns) * 16384;
        const int item = id % items, jb = (id / items * chunk + s % chunk) * 32;
        const int32_t *pages = g.pages + (int64_t)(item / PG_HK) * (g.ctx / PG_PAGE);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = rr + 8 * i;
            const int64_t off = pg_row(g, pages, jb + row, item % PG_HK) + cc * 16;
            fi::cp_async16(st + row * PG_ROWB + cc * 16, g.k + off, 16);
            fi::cp_async16(st + 8192 + row * PG_ROWB + cc * 16, g.v + off, 16);
        }
    };
    if (g.trace && threadIdx.x == 0) g.trace[2 * blockIdx.x] = globaltimer();
    if (threadIdx.x == 0) {
        ring[0] = valid(atomicAdd(cnt, 1));
        ring[1] = valid(atomicAdd(cnt, 1));
        pend = atomicAdd(cnt, 1);
    }
    __syncthreads();
    for (int s = 0; s < ns - 1; s++) {
        if (chunk_of(s) >= 0) issue(s);
        fi::cp_async_commit();
    }
    uint32_t acc = 0;
    for (int it = 0; chunk_of(it) >= 0; it++) {
        fi::cp_async_wait_n(ns - 2);
        __syncthreads();
        if (chunk_of(it + ns - 1) >= 0) issue(it + ns - 1);
        fi::cp_async_commit();
        const unsigned char *st = sm + (it % ns) * 16384;
        acc ^= *reinterpret_cast<const uint32_t *>(st + threadIdx.x * 16) ^
               *reinterpret_cast<const uint32_t *>(st + 8192 + threadIdx.x * 16);
    }
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;
    if (g.trace) {
        __syncthreads();
        if (threadIdx.x == 0) g.trace[2 * blockIdx.x + 1] = globaltimer();
    }
}

/* The same stages filled by the copy engine: warp w owns rows 8w..8w+7 of
 * K and V in every stage (272-byte padded rows, as a decode would lay them
 * out for conflict-free ldmatrix) and runs its own pipeline: 16 lanes issue
 * one 256-byte bulk copy each, completing on the warp's barrier of that
 * stage; the warp refills a stage as soon as it has read it. */
constexpr int BK_ROWS = 272, BK_STAGE = 2 * 32 * BK_ROWS;
__global__ void __launch_bounds__(128) paged_bulk_kernel(paged_geom g, int ns, uint32_t *out)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(16) unsigned char sm[];
    __shared__ __align__(8) uint64_t full[4][4]; /* [stage][warp] */
    const int hpc = g.hpc, bn = 32 / hpc, per = g.ctx / hpc;
    const int r = blockIdx.y / hpc, j0 = (blockIdx.y % hpc) * per, ntiles = per / bn;
    const int32_t *pages = g.pages + (int64_t)r * (g.ctx / PG_PAGE);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = warp * 8 + (lane & 7);
    const bool is_v = lane & 8;
    const uint32_t base = fi::smem_addr(sm);
    if (lane == 0)
        for (int s = 0; s < ns; s++) ah_sm90::mbar_init(fi::smem_addr(&full[s][warp]), 1);
    ah_sm90::mbar_fence_init();
    __syncwarp();
    auto issue = [&](int it) {
        const int s = it % ns;
        const uint32_t bar = fi::smem_addr(&full[s][warp]);
        if (lane == 0) ah_sm90::mbar_arrive_tx(bar, 16 * PG_ROWB);
        __syncwarp();
        if (lane < 16) {
            const int j = j0 + it * bn + row / hpc, h = blockIdx.x * hpc + row % hpc;
            ah_sm90::bulk_load(base + s * BK_STAGE + (is_v ? 32 * BK_ROWS : 0) + row * BK_ROWS,
                               (is_v ? g.v : g.k) + pg_row(g, pages, j, h), PG_ROWB, bar);
        }
    };
    for (int s = 0; s < ns - 1 && s < ntiles; s++) issue(s);
    uint32_t acc = 0;
    for (int it = 0; it < ntiles; it++) {
        __syncwarp();
        if (it + ns - 1 < ntiles) issue(it + ns - 1);
        ah_sm90::mbar_wait(fi::smem_addr(&full[it % ns][warp]), (it / ns) & 1);
        const unsigned char *st =
            sm + (it % ns) * BK_STAGE + (warp * 8 + lane / 4) * BK_ROWS + (lane % 4) * 64;
        acc ^= *reinterpret_cast<const uint32_t *>(st) ^
               *reinterpret_cast<const uint32_t *>(st + 32 * BK_ROWS);
    }
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;
#endif
}

/* The same paged rows loaded straight into registers (no shared memory):
 * CTA (head, request), U 16-byte loads of K and U of V in flight per thread. */
template <int U>
__global__ void __launch_bounds__(128) paged_ldg_kernel(paged_geom g, uint32_t *out)
{
    const int r = blockIdx.y, h = blockIdx.x, nch = g.ctx * 16;
    const int32_t *pages = g.pages + (int64_t)r * (g.ctx / PG_PAGE);
    uint32_t acc = 0;
    for (int base = 0; base < nch; base += 128 * U) {
        uint4 k[U], v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = base + u * 128 + threadIdx.x, j = c / 16;
            const int64_t off = pg_row(g, pages, j, h) + (c % 16) * 16;
            asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(k[u].x), "=r"(k[u].y), "=r"(k[u].z), "=r"(k[u].w)
                         : "l"(g.k + off));
            asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                         : "l"(g.v + off));
        }
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= k[u].x ^ k[u].w ^ v[u].y ^ v[u].z;
    }
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;
}

/* Median ms of `reps` CUDA-event timings of launch() after 3 warm-up calls. */
template <typename F> static float median_ms(F launch, int reps)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int w = 0; w < 3; w++) launch();
    std::vector<float> t;
    for (int r = 0; r < reps; r++) {
        cudaEventRecord(a);
        launch();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        t.push_back(ms);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

/* CTAs of 128 threads with smem bytes that fit on the whole device at once. */
template <typename K> static int resident_ctas(K kern, int smem)
{
    int per_sm = 0, dev = 0, sms = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, 128, smem);
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return per_sm * sms;
}

/* Median ms of the paged pattern over the 4 GiB buffer (K its first half). */
static float time_paged(const unsigned char *buf, const int32_t *pages, int R, int ctx, int hpc,
                        int ns, int bulk, int hnd, uint32_t *out, int reps,
                        unsigned long long *trace = nullptr)
{
    const paged_geom g = {buf, buf + (size_t)R * ctx * PG_SLOT, pages, ctx, hpc, hnd, trace};
    const dim3 grid(PG_HK / hpc, R * hpc);
    const int smem = ns * (bulk ? BK_STAGE : 16384);
    auto kern = bulk ? paged_bulk_kernel : paged_read_kernel;
    cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    return median_ms([&] { kern<<<grid, 128, smem>>>(g, ns, out); }, reps);
}

/* The decode's pattern (one KV head per CTA, 3 stages, shuffled pages) as a
 * grid of items and in dynamic chunks of 4 / 8 / 16 tiles: the time, and
 * when the CTAs end. CTAs of the grid end up to 25% apart, as SMs stream at
 * different rates; the chunks end within a few microseconds of each other,
 * which tells whether the early finishers leave bandwidth unused. */
static int trace_ctas(const unsigned char *buf, const int32_t *pages, int R, int ctx, uint32_t *out)
{
    const int items = R * PG_HK, smem = 3 * 16384;
    cudaFuncSetAttribute(paged_chunks_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    const int resident = resident_ctas(paged_chunks_kernel, smem), nmax = std::max(items, resident);
    unsigned long long *d = nullptr;
    int *cnt = nullptr;
    CK(cudaMalloc(&d, sizeof(unsigned long long) * 2 * nmax));
    CK(cudaMalloc(&cnt, sizeof(int)));
    std::vector<unsigned long long> h(2 * nmax);
    for (int chunk : {0, 4, 8, 16}) {
        float ms;
        if (chunk) {
            const paged_geom g = {buf, buf + (size_t)R * ctx * PG_SLOT, pages, ctx, 1, 0, d};
            ms = median_ms(
                [&] {
                    cudaMemsetAsync(cnt, 0, sizeof(int));
                    paged_chunks_kernel<<<resident, 128, smem>>>(g, items, 3, out, cnt, chunk);
                },
                20);
        } else {
            ms = time_paged(buf, pages, R, ctx, 1, 3, 0, 0, out, 20, d);
        }
        CK(cudaGetLastError());
        const int n = chunk ? resident : items;
        CK(cudaMemcpy(h.data(), d, sizeof(unsigned long long) * 2 * n, cudaMemcpyDeviceToHost));
        std::vector<double> en(n);
        const unsigned long long t0 = *std::min_element(h.begin(), h.begin() + 2 * n);
        for (int i = 0; i < n; i++) en[i] = (h[2 * i + 1] - t0) * 1e-3;
        std::sort(en.begin(), en.end());
        auto q = [&](double f) { return en[(size_t)(f * (n - 1))]; };
        char how[32];
        snprintf(how, sizeof how, chunk ? "chunks of %2d tiles" : "grid of items     ", chunk);
        printf(
            "paged B64x16k shuffled, %s, %3d CTAs: %.3f ms; CTA ends, us: min %.1f p10 %.1f p50 %.1f "
            "p90 %.1f max %.1f\n",
            how, n, ms, q(0.0), q(0.1), q(0.5), q(0.9), q(1.0));
    }
    cudaFree(d);
    cudaFree(cnt);
    return 0;
}

template <int U>
static float time_read(const uint4 *p, size_t n, uint32_t *out, int blocks, int threads, int reps)
{
    return median_ms([&] { read_kernel<U><<<blocks, threads>>>(p, n, out); }, reps);
}

int main(int argc, char **argv)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("fi_readbw: skipped: no CUDA device\n");
        return 77;
    }
    const double gib = argc > 1 ? atof(argv[1]) : 4.0;
    if (!(gib > 0.0 && gib <= 64.0)) {
        fprintf(stderr, "fi_readbw: size %s GiB out of range (0, 64]\n", argv[1]);
        return 2;
    }
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, 0));
    const size_t bytes = (size_t)(gib * (1 << 30)) / 65536 * 65536, n = bytes / 16;
    uint4 *p = nullptr, *q = nullptr;
    uint32_t *out = nullptr;
    CK(cudaMalloc(&p, bytes));
    CK(cudaMalloc(&q, bytes));
    CK(cudaMalloc(&out, 1 << 20));
    fill_kernel<<<pr.multiProcessorCount * 8, 256>>>(p, n);
    CK(cudaDeviceSynchronize());
    printf("device %s, %d SMs, L2 %d MiB, buffer %.2f GiB\n", pr.name, pr.multiProcessorCount,
           pr.l2CacheSize >> 20, bytes / 1073741824.0);
    double best = 0;
    const int sms = pr.multiProcessorCount;
    const int shapes[][2] = {{2, 1024}, {4, 512}, {8, 256}, {16, 256}, {32, 256}};
    for (auto &s : shapes) {
        for (int u : {4, 8}) {
            const int blocks = sms * s[0];
            const float ms = u == 4 ? time_read<4>(p, n, out, blocks, s[1], 30)
                                    : time_read<8>(p, n, out, blocks, s[1], 30);
            CK(cudaGetLastError());
            const double gbs = bytes / (ms * 1e-3) / 1e9;
            best = std::max(best, gbs);
            printf("read  %3d CTAs/SM x %4d threads, %d loads in flight: %.3f ms  %.0f GB/s\n",
                   s[0], s[1], u, ms, gbs);
        }
    }
    const float cms =
        median_ms([&] { cudaMemcpyAsync(q, p, bytes, cudaMemcpyDeviceToDevice); }, 20);
    CK(cudaGetLastError());
    printf("copy  (read + write): %.3f ms  %.0f GB/s\n", cms, 2.0 * bytes / (cms * 1e-3) / 1e9);
    printf("HBM read bandwidth (best read-only kernel): %.0f GB/s\n", best);

    /* The decode's pattern: B64 x 16k when the buffer holds it (4 GiB). */
    const int R = 64, ctx = 16384, np = R * ctx / PG_PAGE;
    const size_t kv_bytes = (size_t)2 * R * ctx * PG_SLOT;
    if (kv_bytes <= bytes) {
        std::vector<int32_t> perm(np);
        int32_t *d_pages = nullptr;
        CK(cudaMalloc(&d_pages, sizeof(int32_t) * np));
        for (int order = 0; order < 3; order++) {
            const int shuffled = order > 0;
            const char *order_name = order == 2 ? "sorted  " : shuffled ? "shuffled" : "ordered ";
            for (int i = 0; i < np; i++) perm[i] = i;
            uint64_t st = 0x243f6a8885a308d3ull;
            for (int i = np - 1; shuffled && i > 0; i--) {
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                std::swap(perm[i], perm[(int)((st >> 33) % (uint64_t)(i + 1))]);
            }
            if (order == 2)
                for (int r = 0; r < R; r++)
                    std::sort(perm.begin() + r * (ctx / PG_PAGE),
                              perm.begin() + (r + 1) * (ctx / PG_PAGE));
            CK(cudaMemcpy(d_pages, perm.data(), sizeof(int32_t) * np, cudaMemcpyHostToDevice));
            /* copy: 0 cp.async, 1 bulk copies (sm_90), 2 bulk copies into an HND cache */
            for (int copy = 0; copy < (pr.major >= 9 ? 3 : 1); copy++)
                for (int hpc : {1, 8})
                    for (int ns : {3, 4}) {
                        const float ms =
                            time_paged(reinterpret_cast<const unsigned char *>(p), d_pages, R, ctx,
                                       hpc, ns, copy > 0, copy == 2, out, 20);
                        CK(cudaGetLastError());
                        const double gbs = kv_bytes / (ms * 1e-3) / 1e9;
                        printf(
                            "paged%s B64x16k %s pages, %d KV head%s per CTA, %d stages: %.3f ms  %.0f GB/s "
                            "(%.1f%% of read)\n",
                            copy == 0   ? "     "
                            : copy == 1 ? " bulk"
                                        : " bulk hnd",
                            order_name, hpc, hpc > 1 ? "s" : " ", ns, ms, gbs, 100.0 * gbs / best);
                    }
            {
                const paged_geom g = {reinterpret_cast<const unsigned char *>(p),
                                      reinterpret_cast<const unsigned char *>(p) +
                                          (size_t)R * ctx * PG_SLOT,
                                      d_pages,
                                      ctx,
                                      1,
                                      0,
                                      nullptr};
                for (int u : {4, 8, 16}) {
                    const float ms = median_ms(
                        [&] {
                            if (u == 4) paged_ldg_kernel<4><<<dim3(PG_HK, R), 128>>>(g, out);
                            else if (u == 8) paged_ldg_kernel<8><<<dim3(PG_HK, R), 128>>>(g, out);
                            else paged_ldg_kernel<16><<<dim3(PG_HK, R), 128>>>(g, out);
                        },
                        20);
                    CK(cudaGetLastError());
                    const double gbs = kv_bytes / (ms * 1e-3) / 1e9;
                    printf(
                        "paged ldg B64x16k %s pages, %2d loads in flight: %.3f ms  %.0f GB/s (%.1f%% of read)\n",
                        order_name, 2 * u, ms, gbs, 100.0 * gbs / best);
                }
            }
            if (order == 1 &&
                trace_ctas(reinterpret_cast<const unsigned char *>(p), d_pages, R, ctx, out))
                return 1;
        }
        cudaFree(d_pages);
    }
    cudaFree(p);
    cudaFree(q);
    cudaFree(out);
    return 0;
}
