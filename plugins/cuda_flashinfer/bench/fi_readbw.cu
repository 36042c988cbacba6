/*
 * HBM read bandwidth, the ceiling the decode figures are quoted against: a
 * read-only kernel streams a buffer far larger than L2 (16-byte loads that
 * bypass L1, several in flight per thread, one XOR-folded word written per
 * CTA so the loads cannot be dropped) and reports the best of a few launch
 * shapes, each the median of many CUDA-event timings after a warm-up. The
 * device-to-device copy rate (read + write, counted as 2x the size) is
 * printed beside it for comparison with earlier figures.
 *
 * Usage: fi_readbw [GiB] (default 4). Exits 77 without a CUDA device.
 */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "fi_readbw: %s: %s\n", #x, cudaGetErrorString(e_));                    \
            return 1;                                                                              \
        }                                                                                          \
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
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = make_uint4((uint32_t)i * 2654435761u, (uint32_t)(i >> 7) + 1u, (uint32_t)i ^ 0x5bd1e995u, 7u);
}

template <int U>
static float time_read(const uint4 *p, size_t n, uint32_t *out, int blocks, int threads, int reps)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int w = 0; w < 3; w++) read_kernel<U><<<blocks, threads>>>(p, n, out);
    std::vector<float> t;
    for (int r = 0; r < reps; r++) {
        cudaEventRecord(a);
        read_kernel<U><<<blocks, threads>>>(p, n, out);
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
            const float ms = u == 4 ? time_read<4>(p, n, out, blocks, s[1], 30) : time_read<8>(p, n, out, blocks, s[1], 30);
            CK(cudaGetLastError());
            const double gbs = bytes / (ms * 1e-3) / 1e9;
            best = std::max(best, gbs);
            printf("read  %3d CTAs/SM x %4d threads, %d loads in flight: %.3f ms  %.0f GB/s\n", s[0], s[1], u,
                   ms, gbs);
        }
    }
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> t;
    for (int r = 0; r < 23; r++) {
        cudaEventRecord(a);
        cudaMemcpyAsync(q, p, bytes, cudaMemcpyDeviceToDevice);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        if (r >= 3) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    CK(cudaGetLastError());
    printf("copy  (read + write): %.3f ms  %.0f GB/s\n", t[t.size() / 2], 2.0 * bytes / (t[t.size() / 2] * 1e-3) / 1e9);
    printf("HBM read bandwidth (best read-only kernel): %.0f GB/s\n", best);
    cudaFree(p);
    cudaFree(q);
    cudaFree(out);
    return 0;
}
