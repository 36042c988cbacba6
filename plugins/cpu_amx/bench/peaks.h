/*
 * Machine ceilings for the cpu_amx bench: DRAM read bandwidth (a
 * multithreaded streaming read of a buffer far larger than the caches) and
 * the bf16 compute peaks (vdpbf16ps and AMX tdpbf16ps throughput loops on
 * every thread). Each returns the best of several timed repetitions.
 * The caller checks the CPU has the instructions before calling.
 */
#ifndef CPU_AMX_PEAKS_H
#define CPU_AMX_PEAKS_H

#include <stddef.h>

double peak_dram_read_gbs(size_t bytes, int threads); /* AVX-512F */
/* AVX-512-BF16; *per_cpu_s: flops per second of process CPU time, a
 * figure that holds up when other processes share the cores. */
double peak_avx512bf16_gflops(int threads, double *per_cpu_s);
double peak_amx_bf16_gflops(int threads); /* AMX-BF16 */
double bench_now(void);                   /* seconds, monotonic */
double bench_cpu_now(void);               /* process CPU seconds */

#endif
