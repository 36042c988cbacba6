/*
 * Ceilings for the bench (see peaks.h). Compiled with AVX-512, AVX-512-BF16
 * and AMX flags; only called where the CPU has them.
 */
#include "peaks.h"

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double bench_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile uint64_t sink_u64;
static volatile float sink_f;

double peak_dram_read_gbs(size_t bytes, int threads)
{
    bytes &= ~(size_t)4095;
    char *buf = aligned_alloc(4096, bytes);
    if (!buf) return 0;
        /* First touch from the reading threads (NUMA placement), non-zero data. */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < (long)(bytes / 8); i++)
        ((uint64_t *)buf)[i] = (uint64_t)i * 0x9e3779b97f4a7c15ull;
    double best = 0;
    for (int rep = 0; rep < 6; rep++) {
        double t0 = bench_now();
        uint64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(^ : total)
        {
#ifdef _OPENMP
            int id = omp_get_thread_num(), n = omp_get_num_threads();
#else
            int id = 0, n = 1;
#endif
            size_t per = bytes / (size_t)n / 256 * 256;
            const __m512i *p = (const __m512i *)(buf + per * (size_t)id);
            __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
            for (size_t i = 0; i < per / 64; i += 4) {
                a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
                a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 1));
                a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 2));
                a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 3));
            }
            __m512i x = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
            total ^= (uint64_t)_mm512_reduce_or_epi64(x);
        }
        double dt = bench_now() - t0;
        sink_u64 = total;
        if (rep > 0 && bytes / dt / 1e9 > best) best = bytes / dt / 1e9;
    }
    free(buf);
    return best;
}

double peak_avx512bf16_gflops(int threads, double *per_cpu_s)
{
    const long iters = 20000000;
    double best = 0;
    *per_cpu_s = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = bench_now(), cpu0 = bench_cpu_now();
        float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            /* 12 independent chains in named registers hide the latency
             * (an array here ends up in memory and measures the store
             * forwarding instead). */
            __m512 c0 = _mm512_set1_ps(0), c1 = _mm512_set1_ps(1), c2 = _mm512_set1_ps(2),
                   c3 = _mm512_set1_ps(3), c4 = _mm512_set1_ps(4), c5 = _mm512_set1_ps(5),
                   c6 = _mm512_set1_ps(6), c7 = _mm512_set1_ps(7), c8 = _mm512_set1_ps(8),
                   c9 = _mm512_set1_ps(9), c10 = _mm512_set1_ps(10), c11 = _mm512_set1_ps(11);
            __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80),
                     b = (__m512bh)_mm512_set1_epi32(0x3c003c00);
#define DP(c) _mm512_dpbf16_ps(c, a, b)
            for (long it = 0; it < iters / 12; it++) {
                c0 = DP(c0), c1 = DP(c1), c2 = DP(c2), c3 = DP(c3);
                c4 = DP(c4), c5 = DP(c5), c6 = DP(c6), c7 = DP(c7);
                c8 = DP(c8), c9 = DP(c9), c10 = DP(c10), c11 = DP(c11);
                __asm__ volatile("" : "+v"(a), "+v"(b));
            }
#undef DP
            __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                                       _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
            sum = _mm512_add_ps(sum, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
            total += _mm512_reduce_add_ps(sum);
        }
        double dt = bench_now() - t0, dc = bench_cpu_now() - cpu0;
        sink_f = total;
        double fl = (double)threads * (double)(iters / 12 * 12) * 64.0;
        if (fl / dt / 1e9 > best) best = fl / dt / 1e9;
        if (fl / dc / 1e9 > *per_cpu_s) *per_cpu_s = fl / dc / 1e9;
    }
    return best;
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

double peak_amx_bf16_gflops(int threads)
{
    const long iters = 2000000;
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = bench_now();
#pragma omp parallel num_threads(threads)
        {
            tilecfg cfg;
            memset(&cfg, 0, sizeof cfg);
            cfg.palette = 1;
            for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
            _tile_loadconfig(&cfg);
            static __thread uint16_t src[16 * 32] __attribute__((aligned(64)));
            for (int i = 0; i < 16 * 32; i++) src[i] = 0x3c00;
            _tile_loadd(4, src, 64);
            _tile_loadd(5, src, 64);
            _tile_loadd(6, src, 64);
            _tile_loadd(7, src, 64);
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (long it = 0; it < iters / 4; it++) {
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            float out[256];
            _tile_stored(0, out, 64);
            sink_f = out[0];
            _tile_release();
        }
        double dt = bench_now() - t0;
        /* One tdpbf16ps: 16 x 16 outputs x 32 products x 2 flops. */
        double fl = (double)threads * (double)(iters / 4 * 4) * 16 * 16 * 32 * 2;
        if (fl / dt / 1e9 > best) best = fl / dt / 1e9;
    }
    return best;
}
