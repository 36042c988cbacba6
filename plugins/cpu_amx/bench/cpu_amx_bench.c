/*
 * cpu_amx benchmark driver (timing lives here, never in tests).
 *
 *   cpu_amx_bench [--isa P] [--threads N] [--reps N] [--peaks] [--bw-gib G]
 *                 [--decode B:CTX,...] [--prefill T,...] [--blas] [--set KEY=VALUE]
 *                 [--plugin PATH]
 *
 * Shapes follow the plugin's targets: bf16 queries and cache, 32 query heads
 * over 8 KV heads, head size 128, block size 16, NHD. Decode: B requests of
 * one token over CTX cached tokens each; its figure is KV bytes streamed per
 * second. Prefill: one causal request of T tokens over its own keys; its
 * figure is 4*Hq*d*T*(T+1)/2 flops per second. Each figure is the median of
 * --reps timed forwards after one warm-up. --peaks measures the ceilings the
 * figures are compared with (peaks.h); --blas times OpenBLAS sbgemm on the
 * prefill's two GEMM shapes, to decide whether a GEMM step should go to BLAS.
 * --set passes one more [plugin.cpu_amx] key (e.g. amx_decode=0); the figure
 * lines then carry it as set=KEY=VALUE. --plugin: another build of the
 * plugin (a baseline commit's, build_base.sh) instead of this tree's.
 * The plugin gets the host's own services (tests/helpers/ath.h).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <attnhost/plugin_util.h>

#include "ath.h"
#include "peaks.h"

static uint64_t rng = 88172645463325252ull;
static uint16_t rand_bf16_from(uint64_t *st)
{
    const uint64_t x = ath_rand_u64(st);
    /* Magnitudes in [1/16, 2), random sign: no zeros, no denormals. */
    return (uint16_t)(((x >> 8) & 0x8000) | (0x3d80 + ((x >> 20) % 0x280)));
}
static uint16_t rand_bf16(void) { return rand_bf16_from(&rng); }

/* Fill a large bf16 buffer in parallel (the decode caches are gigabytes). */
static void fill_bf16(uint16_t *p, size_t n, uint64_t seed)
{
#pragma omp parallel
    {
#ifdef _OPENMP
        int id = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        int id = 0, nt = 1;
#endif
        uint64_t st = seed * 0x9e3779b97f4a7c15ull + (uint64_t)id * 0xbf58476d1ce4e5b9ull + 1;
        size_t per = (n + (size_t)nt - 1) / (size_t)nt, lo = per * (size_t)id,
               hi = lo + per < n ? lo + per : n;
        for (size_t i = lo; i < hi; i++) p[i] = rand_bf16_from(&st);
    }
}

/* KV caches are large and read block by block in table order: back them
 * with transparent huge pages, as engines' cache allocators get, so the
 * figure is not a TLB-miss benchmark. */
static int use_thp = 1; /* --no-thp: plain pages, to see what huge pages bring */

static void *big_alloc(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    bytes = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, bytes);
    if (p && use_thp) madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

typedef struct shape {
    uint32_t nreq, qlen, ctx; /* decode: qlen 1; prefill: nreq 1, qlen = ctx */
} shape;

/* Time one shape; returns the median seconds, or a negative value on error. */
static double last_cpu_s; /* median process CPU seconds of the last time_shape */
static double time_shape(ath_host *h, const shape *s, int reps)
{
    const uint32_t HQ = 32, HK = 8, D = 128, BS = 16;
    const ah_plugin_ops *ops = h->ops;
    const ah_context_options dev0 = {sizeof dev0, 0};
    ah_context *ctx;
    const char *why;
    if (ops->context_create(&h->svc, &dev0, &ctx, &why) != AH_OK) {
        fprintf(stderr, "context_create: %s\n", why);
        return -1;
    }
    const ah_layer_spec spec = ath_spec(AH_ATTN_DECODER, HQ, HK, D, AH_DTYPE_BF16, BS);
    const uint32_t bpr = (s->ctx + BS - 1) / BS, nblocks = bpr * s->nreq, T = s->nreq * s->qlen;
    ah_limits lim = {sizeof lim, s->nreq, T, bpr, s->ctx, nblocks};
    ah_state *st;
    if (ops->state_create(ctx, &spec, &lim, &st) != AH_OK) {
        fprintf(stderr, "state_create: %s\n", ops->context_error(ctx));
        return -1;
    }
    size_t cache_n = (size_t)nblocks * BS * HK * D;
    uint16_t *kc = big_alloc(cache_n * 2), *vc = big_alloc(cache_n * 2),
             *q = malloc((size_t)T * HQ * D * 2), *out = malloc((size_t)T * HQ * D * 2);
    float *lse = malloc((size_t)T * HQ * 4);
    fill_bf16(kc, cache_n, 1);
    fill_bf16(vc, cache_n, 2);
    fill_bf16(q, (size_t)T * HQ * D, 3);
    /* Blocks handed out in a shuffled order, as a long-running engine's
     * are; no new tokens (every slot -1). */
    int32_t *ql = malloc(s->nreq * 4), *sl = malloc(s->nreq * 4);
    for (uint32_t r = 0; r < s->nreq; r++) ql[r] = (int32_t)s->qlen, sl[r] = (int32_t)s->ctx;
    ath_batch_spec bsp = {
        .num_reqs = s->nreq, .qlens = ql, .seqlens = sl, .block_size = BS, .no_slots = 1};
    ath_batch B;
    double *t = malloc(sizeof(double) * (size_t)(reps + 1)), med = -1;
    double *tc = malloc(sizeof(double) * (size_t)(reps + 1));
    if (ath_batch_build(NULL, &B, &bsp, &rng)) goto done;
    const int64_t sq[3] = {T, HQ, D}, sc[4] = {nblocks, BS, HK, D}, sl2[2] = {T, HQ};
    const DLDataType bf = ah_dtype_to_dl(AH_DTYPE_BF16);
    ath_tensor tq, tkc, tvc, tout, tlse;
    ath_tensor_host(&tq, q, bf, 3, sq);
    ath_tensor_host(&tout, out, bf, 3, sq);
    ath_tensor_host(&tkc, kc, bf, 4, sc);
    ath_tensor_host(&tvc, vc, bf, 4, sc);
    ath_tensor_host(&tlse, lse, ath_f32, 2, sl2);
    ah_forward_args fa = ath_forward_args(&tq.t, &tkc.t, &tvc.t, &tout.t, &tlse.t, NULL);
    if (ops->plan(st, &B.b, AH_PLAN_EAGER, NULL) != AH_OK) {
        fprintf(stderr, "plan: %s\n", ops->state_error(st));
        goto done;
    }
    for (int r = -1; r < reps; r++) {
        double t0 = bench_now(), c0 = bench_cpu_now();
        if (ops->plan(st, &B.b, AH_PLAN_EAGER, NULL) != AH_OK || ops->forward(st, &fa) != AH_OK) {
            fprintf(stderr, "forward: %s\n", ops->state_error(st));
            goto done;
        }
        if (r >= 0) t[r] = bench_now() - t0, tc[r] = bench_cpu_now() - c0;
    }
    ath_sort_d(t, reps);
    ath_sort_d(tc, reps);
    med = t[reps / 2];
    last_cpu_s = tc[reps / 2];
done:
    free(t);
    free(tc);
    free(kc), free(vc), free(q), free(out), free(lse), free(ql), free(sl);
    ath_batch_free(NULL, &B);
    ops->state_destroy(st);
    ops->context_destroy(ctx);
    return med;
}

/* OpenBLAS (loaded at run time, so the bench needs no link-time BLAS): the
 * prefill's two GEMM shapes through sbgemm (bf16) where the build has it,
 * and through sgemm (fp32, what a bf16 cache would be converted to). */
typedef void (*sbgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                          const uint16_t *a, int lda, const uint16_t *b, int ldb, float beta,
                          float *c, int ldc);
typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta, float *c,
                         int ldc);
static void bench_blas(int threads, uint32_t T, int reps)
{
    void *dl = dlopen("libopenblas.so.0", RTLD_NOW);
    if (!dl) {
        printf("blas: libopenblas.so.0 not found\n");
        return;
    }
    sbgemm_fn sb = (sbgemm_fn)dlsym(dl, "cblas_sbgemm");
    sgemm_fn sg = (sgemm_fn)dlsym(dl, "cblas_sgemm");
    void (*set_threads)(int) = (void (*)(int))dlsym(dl, "openblas_set_num_threads");
    if (set_threads) set_threads(threads);
    if (!sb) printf("blas: this OpenBLAS has no cblas_sbgemm (built without BFLOAT16)\n");
    const int D = 128;
    uint16_t *a = malloc((size_t)T * T * 2), *bm = malloc((size_t)T * D * 2);
    float *af = malloc((size_t)T * T * 4), *bf = malloc((size_t)T * D * 4),
          *c = malloc((size_t)T * T * 4);
    for (size_t i = 0; i < (size_t)T * T; i++) a[i] = rand_bf16(), af[i] = ah_bf16_to_f32(a[i]);
    for (size_t i = 0; i < (size_t)T * D; i++) bm[i] = rand_bf16(), bf[i] = ah_bf16_to_f32(bm[i]);
    /* S = Q K^T: [T x 128] x [128 x T]; O = P V: [T x T] x [T x 128]. */
    for (int kind = 0; kind < 2; kind++) {
        if (kind == 0 && !sb) continue;
        if (kind == 1 && !sg) continue;
        for (int which = 0; which < 2; which++) {
            double *ts = malloc(sizeof(double) * (size_t)reps);
            for (int r = -1; r < reps; r++) {
                double t0 = bench_now();
                if (kind == 0 && which == 0)
                    sb(101, 111, 112, (int)T, (int)T, D, 1.0f, bm, D, bm, D, 0.0f, c, (int)T);
                if (kind == 0 && which == 1)
                    sb(101, 111, 111, (int)T, D, (int)T, 1.0f, a, (int)T, bm, D, 0.0f, c, D);
                if (kind == 1 && which == 0)
                    sg(101, 111, 112, (int)T, (int)T, D, 1.0f, bf, D, bf, D, 0.0f, c, (int)T);
                if (kind == 1 && which == 1)
                    sg(101, 111, 111, (int)T, D, (int)T, 1.0f, af, (int)T, bf, D, 0.0f, c, D);
                if (r >= 0) ts[r] = bench_now() - t0;
            }
            ath_sort_d(ts, reps);
            double fl = 2.0 * T * T * D;
            printf("blas %s %s T=%u threads=%d median_ms=%.3f GFLOP/s=%.1f\n",
                   kind ? "sgemm" : "sbgemm", which ? "PV" : "QK^T", T, threads, ts[reps / 2] * 1e3,
                   fl / ts[reps / 2] / 1e9);
            free(ts);
        }
    }
    free(a), free(bm), free(af), free(bf), free(c);
}

int main(int argc, char **argv)
{
    const char *plugin = CPU_AMX_SO, *isa = "auto", *threads = "0", *decode = NULL, *prefill = NULL,
               *set = NULL;
    int reps = 7, peaks = 0, blas = 0;
    double bw_gib = 2.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--isa")) isa = v, i++;
        else if (!strcmp(a, "--plugin")) plugin = v, i++;
        else if (!strcmp(a, "--threads")) threads = v, i++;
        else if (!strcmp(a, "--reps")) reps = atoi(v), i++;
        else if (!strcmp(a, "--decode")) decode = v, i++;
        else if (!strcmp(a, "--prefill")) prefill = v, i++;
        else if (!strcmp(a, "--bw-gib")) bw_gib = atof(v), i++;
        else if (!strcmp(a, "--peaks")) peaks = 1;
        else if (!strcmp(a, "--blas")) blas = 1;
        else if (!strcmp(a, "--no-thp")) use_thp = 0;
        else if (!strcmp(a, "--set") && strchr(v, '=')) set = v, i++;
        else {
            fprintf(
                stderr,
                "usage: %s [--isa P] [--threads N] [--reps N] [--peaks] [--bw-gib G] "
                "[--decode B:CTX,...] [--prefill T,...] [--blas] [--no-thp] [--set KEY=VALUE] [--plugin PATH]\n",
                argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    ath_host h;
    if (ath_load(&h, plugin) != 0 || ath_set(&h, "isa", isa) || ath_set(&h, "threads", threads))
        return 1;
    char setkey[64] = "", setnote[96] = "";
    if (set) {
        size_t kl = (size_t)(strchr(set, '=') - set);
        snprintf(setkey, sizeof setkey, "%.*s", (int)(kl < 63 ? kl : 63), set);
        if (ath_set(&h, setkey, strchr(set, '=') + 1)) return 1;
        snprintf(setnote, sizeof setnote, " set=%s", set);
    }
    ah_probe_info pi;
    memset(&pi, 0, sizeof pi);
    pi.struct_size = sizeof pi;
    h.ops->probe(&h.svc, &pi);
    if (!pi.usable) {
        fprintf(stderr, "cpu_amx not usable: %s\n", pi.reason);
        return 1;
    }
    const int nt = (int)pi.multiprocessors;
    printf("machine: %s, %u logical cores; path %s, %d threads\n", pi.device_name,
           h.hw.cpu_logical_cores, pi.arch, nt);
    double dram = 0, bf16peak = 0, amxpeak = 0, bf16cpu = 0;
    if (peaks && (h.hw.cpu_isa & AH_ISA_AVX512F)) {
        dram = peak_dram_read_gbs((size_t)(bw_gib * 1073741824.0), nt);
        printf("peak dram_read GB/s=%.1f (%d threads, %.1f GiB buffer)\n", dram, nt, bw_gib);
        if (h.hw.cpu_isa & AH_ISA_AVX512_BF16) {
            bf16peak = peak_avx512bf16_gflops(nt, &bf16cpu);
            printf("peak avx512bf16 GFLOP/s=%.1f GFLOP/cpu-s=%.1f (vdpbf16ps, %d threads)\n",
                   bf16peak, bf16cpu, nt);
        }
        if (h.hw.cpu_isa & AH_ISA_AMX_BF16) {
            amxpeak = peak_amx_bf16_gflops(nt);
            printf("peak amx_bf16 GFLOP/s=%.1f (tdpbf16ps, %d threads)\n", amxpeak, nt);
        }
    }
    char buf[512];
    if (decode) {
        snprintf(buf, sizeof buf, "%s", decode);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            shape s = {(uint32_t)atoi(tok), 1,
                       strchr(tok, ':') ? (uint32_t)atoi(strchr(tok, ':') + 1) : 4096};
            double sec = time_shape(&h, &s, reps);
            if (sec < 0) return 1;
            double bytes = (double)s.nreq * s.ctx * 8 * 128 * 2 * 2;
            printf("decode path=%s%s threads=%d B=%u ctx=%u median_ms=%.3f GB/s=%.1f GB/cpu-s=%.1f",
                   pi.arch, setnote, nt, s.nreq, s.ctx, sec * 1e3, bytes / sec / 1e9,
                   bytes / last_cpu_s / 1e9);
            if (dram > 0) printf(" frac_dram=%.2f", bytes / sec / 1e9 / dram);
            printf("\n");
            fflush(stdout);
        }
    }
    if (prefill) {
        snprintf(buf, sizeof buf, "%s", prefill);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            uint32_t T = (uint32_t)atoi(tok);
            shape s = {1, T, T};
            double sec = time_shape(&h, &s, reps);
            if (sec < 0) return 1;
            double fl = 4.0 * 32 * 128 * (double)T * (T + 1) / 2;
            printf("prefill path=%s%s threads=%d T=%u median_ms=%.3f GFLOP/s=%.1f GFLOP/cpu-s=%.1f",
                   pi.arch, setnote, nt, T, sec * 1e3, fl / sec / 1e9, fl / last_cpu_s / 1e9);
            if (bf16peak > 0)
                printf(" frac_avx512bf16_peak=%.2f (cpu-time basis %.2f)",
                       fl / sec / 1e9 / bf16peak, fl / last_cpu_s / 1e9 / bf16cpu);
            if (amxpeak > 0) printf(" frac_amx_peak=%.2f", fl / sec / 1e9 / amxpeak);
            printf("\n");
            fflush(stdout);
            if (blas) bench_blas(nt, T, reps);
        }
    }
    return 0;
}
