/*
 * Benchmark driver for cuda_fa3: times forward() with the plugin's device
 * timer (CUDA events), three warm-ups then the median of 30 runs, on random
 * data, for the standard shapes:
 *   prefill: 16k query tokens split into sequences of 4k/8k/16k, head size
 *            64/128/256 (model width 2048), causal and not, KV read through
 *            a page table of consecutive 128-token blocks;
 *   decode:  batch 64, GQA 32/8, head 128, page 16 (shuffled), context
 *            4k/8k/16k.
 * Queries are bf16; the KV cache is bf16 or fp8 e4m3 (descale 0.25).
 * Prints one line per shape: time, TFLOP/s, GB/s of KV read.
 *
 *   fa3_bench [options] [plugin.so] [prefill|decode|fp8|final|all]
 *     prefill/decode: bf16 KV, every head size / the decode shapes
 *     fp8:   d128 prefill and decode with an fp8 KV cache
 *     final: prefill d128, d64, d256 (bf16 KV), decode, then d128 prefill
 *            and decode with fp8 KV (the device script)
 *     all:   prefill, decode and fp8
 *   fa3_bench plugin.so one D CAUSAL L KV8
 *     one prefill shape (head size D, causal 0/1, sequence length L, 16k
 *     tokens in all, KV8 1 = fp8 e4m3 cache): for a profiler that should
 *     see one kind of launch (ncu -k ... --launch-skip 3 --launch-count 1)
 * Options: --batch=N (forwards per timing), --zero-v (V all zeros), and
 * fa3_options.h's. The plugin gets the host's own services
 * (tests/helpers/ath.h). --fp8-attention gives the layers
 * fp8_attention, so fp8-KV d128 shapes run with e4m3 GEMMs; they print as
 * "f8c" instead of "kv8".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fa3_options.h"

static ath_host H;
static ath_args A;
static int bench_batch = 1, bench_zero_v = 0; /* --batch, --zero-v (bench_args) */

typedef struct shape {
    const char *kind;
    int d, hq, hk, bs, n, qlen, seqlen, causal, shuffled;
    int kv8; /* fp8 e4m3 KV cache */
} shape;

static int bench(const shape *s)
{
    const ah_plugin_ops *ops = H.ops;
    const ah_dtype dt = AH_DTYPE_BF16;
    int32_t qlen[64], seqlen[64];
    for (int r = 0; r < s->n; r++) qlen[r] = s->qlen, seqlen[r] = s->seqlen;
    const int T = s->n * s->qlen, width = (s->seqlen + s->bs - 1) / s->bs + 1;
    const int nb = s->n * (width - 1) + 2;
    ah_layer_spec sp = ath_spec(s->causal ? AH_ATTN_DECODER : AH_ATTN_ENCODER_ONLY, (uint32_t)s->hq,
                                (uint32_t)s->hk, (uint32_t)s->d, dt, (uint32_t)s->bs);
    if (s->kv8) sp.kv_dtype = AH_DTYPE_FP8_E4M3;
    const ah_dtype kdt = sp.kv_dtype;
    sp.fp8_attention =
        (uint32_t)fa3_fp8_attention(&A); /* --fp8-attention: the model allows FP8 math */
    ath_tensor q, out, kc, vc;
    int64_t s_q[3] = {T, s->hq, s->d}, s_c[4] = {nb, s->bs, s->hk, s->d};
    if (ath_tensor_new(&H, &q, dt, 3, s_q) || ath_tensor_new(&H, &out, dt, 3, s_q) ||
        ath_tensor_new(&H, &kc, kdt, 4, s_c) || ath_tensor_new(&H, &vc, kdt, 4, s_c))
        return 1;
    /* Random contents: fill a host chunk once and tile it over each buffer. */
    const size_t chunk = 1u << 24;
    void *hbuf = malloc(chunk * 2), *h8 = malloc(chunk * 2);
    uint64_t rng = ath_seed(99);
    ath_fill_uniform(hbuf, chunk, dt, 1.0f, 1.0f, &rng);
    ath_fill_uniform(h8, chunk * 2, AH_DTYPE_FP8_E4M3, 1.0f, 0.25f,
                     &rng); /* real = stored * 0.25 */
    ath_tensor *bufs[3] = {&q, &kc, &vc};
    /* --zero-v (power study): V all zeros. The tensor cores draw
     * less power on zeros, so a power-capped kernel runs faster on them:
     * timings depend on the data, not only on the work. */
    void *zeros = bench_zero_v ? calloc(chunk * 2, 1) : NULL;
    for (int i = 0; i < 3; i++) {
        const void *src = i == 2 && zeros ? zeros : i > 0 && s->kv8 ? h8 : hbuf;
        for (size_t off = 0; off < bufs[i]->bytes; off += chunk * 2) {
            size_t n = bufs[i]->bytes - off < chunk * 2 ? bufs[i]->bytes - off : chunk * 2;
            ops->mem_copy(H.ctx, (char *)bufs[i]->t.data + off, src, n, AH_COPY_HOST_TO_DEVICE,
                          H.stream);
        }
    }
    free(zeros);
    free(hbuf);
    free(h8);
    ath_batch B;
    const ath_batch_spec bsp = {.num_reqs = (uint32_t)s->n,
                                .qlens = qlen,
                                .seqlens = seqlen,
                                .block_size = (uint32_t)s->bs,
                                .table_width = (uint32_t)width,
                                .num_blocks = (uint32_t)nb,
                                .ordered = !s->shuffled};
    uint64_t brng = ath_seed(5);
    if (ath_batch_build(&H, &B, &bsp, &brng)) return 1;
    ah_limits lim = {sizeof lim,      (uint32_t)s->n,      (uint32_t)T,
                     (uint32_t)width, (uint32_t)s->seqlen, (uint32_t)nb};
    ah_state *st = NULL;
    if (ops->state_create(H.ctx, &sp, &lim, &st) != AH_OK) {
        fprintf(stderr, "state_create: %s\n", ops->context_error(H.ctx));
        return 1;
    }
    ah_forward_args fa = ath_forward_args(&q.t, &kc.t, &vc.t, &out.t, NULL, H.stream);
    fa.k_scale = fa.v_scale = s->kv8 ? 0.25f : 0.f;
    float ms[30];
    int rc = 0;
    if (ops->plan(st, &B.b, AH_PLAN_EAGER, H.stream) != AH_OK) {
        fprintf(stderr, "plan: %s\n", ops->state_error(st));
        rc = 1;
    }
    /* --batch=N: each timing spans N forwards back to back, divided by N.
     * One forward per timing starts on an idle GPU and so includes the
     * host's time to launch it; back to back, only the device's time is left. */
    const int batch = bench_batch;
    for (int i = 0; i < 33 && !rc; i++) {
        if (i >= 3) ops->timer_start(H.ctx, H.stream);
        for (int k = 0; k < (i >= 3 ? batch : 1) && !rc; k++)
            if (ops->forward(st, &fa) != AH_OK) {
                fprintf(stderr, "forward: %s\n", ops->state_error(st));
                rc = 1;
            }
        if (i >= 3 && ops->timer_stop(H.ctx, H.stream, &ms[i - 3]) != AH_OK) rc = 1;
        if (i >= 3) ms[i - 3] /= (float)batch;
    }
    if (!rc && ops->synchronize(H.ctx, H.stream) != AH_OK) {
        fprintf(stderr, "synchronize: %s\n", ops->context_error(H.ctx));
        rc = 1;
    }
    if (!rc) {
        ath_sort_f(ms, 30);
        const double med = ms[15];
        /* FLOPs: 2 GEMMs of 2*L*S*D per head; causal counts the visible half. */
        double flops = 0, kv_bytes = 0;
        for (int r = 0; r < s->n; r++) {
            double pairs = (double)s->qlen * s->seqlen;
            if (s->causal && s->qlen > 1)
                pairs =
                    (double)s->qlen * (s->qlen + 1) / 2 + (double)s->qlen * (s->seqlen - s->qlen);
            flops += 4.0 * pairs * s->d * s->hq;
            kv_bytes += 2.0 * s->seqlen * s->hk * s->d * (s->kv8 ? 1 : 2);
        }
        printf(
            "RESULT fa3 %-7s %-4s d%-3d hq%-2d hk%-2d bs%-3d batch %-2d q %-5d kv %-5d %-10s %8.3f ms %7.1f TFLOP/s "
            "%7.1f GB/s\n",
            s->kind, s->kv8 ? (fa3_fp8_attention(&A) ? "f8c" : "kv8") : "bf16", s->d, s->hq, s->hk,
            s->bs, s->n, s->qlen, s->seqlen, s->causal ? "causal" : "noncausal", med,
            flops / med / 1e9, kv_bytes / med / 1e6);
        fflush(stdout);
    }
    ops->state_destroy(st);
    ath_batch_free(&H, &B);
    ath_tensor_free(&H, &q), ath_tensor_free(&H, &out), ath_tensor_free(&H, &kc),
        ath_tensor_free(&H, &vc);
    return rc;
}

/* Options of fa3_bench itself (the shared ones are in fa3_options.h):
 *   --batch=N   forwards per timing, 1..1000 (default 1)
 *   --zero-v    V all zeros */
static int bench_args(int *argc, char **argv)
{
    int o = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--zero-v")) {
            bench_zero_v = 1;
            continue;
        }
        if (!strncmp(a, "--batch=", 8)) {
            if (!ah_parse_int(a + 8, 1, 1000, &bench_batch)) {
                fprintf(stderr, "%s: want 1..1000\n", a);
                return 1;
            }
            continue;
        }
        argv[o++] = argv[i];
    }
    *argc = o;
    argv[o] = NULL;
    return 0;
}

int main(int argc, char **argv)
{
    if (bench_args(&argc, argv) || ath_take_options(&argc, argv, fa3_opts, FA3_N_OPTS, &A)) {
        fprintf(
            stderr,
            "usage: fa3_bench [--batch=N] [--zero-v] [options] [plugin.so [all|final|prefill|decode|fp8|one D CAUSAL L KV8]]\n");
        return 2;
    }
    const char *path = argc > 1 ? argv[1] : FA3_PLUGIN_PATH;
    const char *which = argc > 2 ? argv[2] : "all";
    int rc = fa3_open(&H, path, &A);
    if (rc) return rc;
    int failed = 0;
    if (!strcmp(which, "one")) {
        if (argc != 7) {
            fprintf(stderr, "usage: fa3_bench plugin.so one D CAUSAL L KV8\n");
            ath_close(&H);
            return 2;
        }
        const int d = atoi(argv[3]), causal = atoi(argv[4]), L = atoi(argv[5]), kv8 = atoi(argv[6]);
        if ((d != 64 && d != 128 && d != 256) || L < 256 || L > 16384 || 16384 % L) {
            fprintf(
                stderr,
                "one: D must be 64/128/256 and L a power of two in [256, 16384], not D %d L %d\n",
                d, L);
            ath_close(&H);
            return 2;
        }
        shape s = {"prefill", d, 2048 / d,    2048 / d, 128,     16384 / L,
                   L,         L, causal != 0, 0,        kv8 != 0};
        failed = bench(&s);
        ath_close(&H);
        return failed ? 1 : 0;
    }
    const int all = !strcmp(which, "all"), fin = !strcmp(which, "final");
    const int pre16 = all || !strcmp(which, "prefill"),
              dec16 = all || fin || !strcmp(which, "decode");
    const int fp8 = all || fin || !strcmp(which, "fp8");
    for (int kv8 = 0; kv8 <= 1; kv8++) {
        if (kv8 ? !fp8 : !(pre16 || fin)) continue;
        const int ds[3] = {128, 64, 256}, nd = kv8 ? 1 : 3; /* fp8: d128 only */
        for (int di = 0; di < nd; di++)
            for (int causal = 1; causal >= 0; causal--)
                for (int L = 4096; L <= 16384; L *= 2) {
                    const int d = ds[di];
                    shape s = {"prefill", d, 2048 / d, 2048 / d, 128, 16384 / L,
                               L,         L, causal,   0,        kv8};
                    failed += bench(&s);
                }
    }
    for (int kv8 = 0; kv8 <= 1; kv8++) {
        if (kv8 ? !fp8 : !dec16) continue;
        for (int L = 4096; L <= 16384; L *= 2) {
            shape s = {"decode", 128, 32, 8, 16, 64, 1, L, 1, 1, kv8};
            failed += bench(&s);
        }
    }
    ath_close(&H);
    return failed ? 1 : 0;
}
