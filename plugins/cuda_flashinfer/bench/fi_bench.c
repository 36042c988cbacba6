/*
 * Benchmark driver for cuda_flashinfer: times the plugin through its ABI
 * with device events (median of many repetitions after warm-up, random
 * data) on the standard shapes, and measures the machine's ceiling in the
 * same process: HBM bandwidth as a device-to-device copy (bytes read +
 * written per second). Prints one table row per shape:
 *   shape | median ms | GB/s of KV read | % of copy BW | TFLOP/s | plan us
 * (plan: the median time of one plan call on an idle GPU, host work and
 * plan kernels together, as an engine pays it once per step).
 *
 *   fi_bench [--plugin PATH] [--reps N] [--batch N] [--quick] [--tc] [--decode | --decode-all |
 * --mla]
 *            [--page N] [--layout nhd|hnd] [--order shuffled|ordered] [--ctx N] [--kv
 * bf16|e4m3|e5m2]
 *            [--mla-reqs N]
 * (--tc: cascade and prefill shapes only; --decode: the B64 4k-16k decode rows only; --decode-all:
 * every decode row; --mla: the MLA decode row only. --page, --layout, --order, --ctx and --kv
 * change the B64 4k-16k decode rows: page size (16), cache layout, page order (shuffled: a random
 * permutation of the cache's pages), one context only, an FP8 cache. --mla-reqs: requests of the
 * MLA row, 1-256 (32).)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "ath.h"

static int g_reps = 50;
/* --batch N: each timing spans N forwards back to back, divided by N.
 * A timing of one forward starts on an idle GPU and so includes the host's
 * time to launch it; back to back, only the device's time per call is left. */
static int g_batch = 1;
static double g_plan_us; /* the last time_forward's median plan time */

static double copy_bandwidth(ath_host *p)
{
    const size_t bytes = (size_t)2 << 30;
    void *a = NULL, *b = NULL;
    if (p->ops->mem_alloc(p->ctx, bytes, &a) || p->ops->mem_alloc(p->ctx, bytes, &b)) return 0;
    /* Non-zero source: fill with a host pattern once. */
    unsigned char *h = malloc(bytes / 64);
    for (size_t i = 0; i < bytes / 64; i++) h[i] = (unsigned char)(i * 131 + 7);
    for (int i = 0; i < 64; i++)
        p->ops->mem_copy(p->ctx, (char *)a + i * (bytes / 64), h, bytes / 64,
                         AH_COPY_HOST_TO_DEVICE, p->stream);
    free(h);
    float t[20];
    for (int i = 0; i < 23; i++) {
        p->ops->timer_start(p->ctx, p->stream);
        p->ops->mem_copy(p->ctx, b, a, bytes, AH_COPY_DEVICE_TO_DEVICE, p->stream);
        float ms = 0;
        p->ops->timer_stop(p->ctx, p->stream, &ms);
        if (i >= 3) t[i - 3] = ms;
    }
    p->ops->mem_free(p->ctx, a);
    p->ops->mem_free(p->ctx, b);
    const double ms = ath_median_f(t, 20);
    return 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
}

/* Median forward time in ms of shape s; with graph=1 the forward is
 * captured once and replayed (launch overhead excluded as engines do). */
static double time_forward(ath_host *p, ath_shape *s, int cascade_off, double *kv_bytes,
                           double *flops)
{
    ath_work w;
    ah_state *st = NULL;
    double res = -1;
    uint64_t rng = ath_seed(99);
    s->batch.extra_blocks = 2;
    if (ath_work_build(p, &w, s, &rng)) goto out;
    if (cascade_off) w.B.b.common_prefix_len = 0;
    if (p->ops->state_create(p->ctx, &w.spec, &w.lim, &st) != AH_OK) {
        fprintf(stderr, "state_create: %s\n", p->ops->context_error(p->ctx));
        goto out;
    }
    if (p->ops->plan(st, &w.B.b, AH_PLAN_EAGER, p->stream) != AH_OK) {
        fprintf(stderr, "plan: %s\n", p->ops->state_error(st));
        goto out;
    }
    ah_forward_args a = ath_work_args(&w, p->stream, 0);
    float *t = malloc(sizeof(float) * (size_t)g_reps);
    for (int i = 0; i < 5; i++) p->ops->forward(st, &a);
    for (int i = 0; i < g_reps; i++) {
        p->ops->timer_start(p->ctx, p->stream);
        for (int k = 0; k < g_batch; k++)
            if (p->ops->forward(st, &a) != AH_OK) {
                fprintf(stderr, "forward: %s\n", p->ops->state_error(st));
                free(t);
                goto out;
            }
        p->ops->timer_stop(p->ctx, p->stream, &t[i]);
        t[i] /= (float)g_batch;
    }
    res = ath_median_f(t, g_reps);
    int planned = 0;
    for (; planned < g_reps; planned++) {
        p->ops->timer_start(p->ctx, p->stream);
        if (p->ops->plan(st, &w.B.b, AH_PLAN_EAGER, p->stream) != AH_OK) break;
        p->ops->timer_stop(p->ctx, p->stream, &t[planned]);
    }
    g_plan_us = planned == g_reps ? 1e3 * ath_median_f(t, g_reps) : -1;
    free(t);
    /* Bytes a perfect kernel reads: each request's visible KV once (shared
     * prefix once when cascading), plus q and out. */
    const double kv_row =
        (double)s->hk * (s->d + (s->mla ? 0 : s->dv)) * ah_dtype_size(s->kv_dtype);
    double rows = 0, fl = 0;
    const ath_batch_spec *b = &s->batch;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        double ctx = b->seqlens[r] - (cascade_off ? 0 : (double)w.B.b.common_prefix_len);
        rows += ctx;
        const int bidir = s->attn == AH_ATTN_ENCODER || s->attn == AH_ATTN_ENCODER_ONLY ||
                          s->attn == AH_ATTN_ENCODER_DECODER;
        for (int32_t i = 0; i < b->qlens[r]; i++)
            fl += bidir ? (double)b->seqlens[r] : (double)(b->seqlens[r] - b->qlens[r] + i + 1);
    }
    rows += cascade_off ? 0 : w.B.b.common_prefix_len;
    *kv_bytes =
        rows * kv_row + (double)w.B.num_tokens * s->hq * (s->d + s->dv) * ah_dtype_size(s->q_dtype);
    *flops = fl * 2.0 * s->hq * (s->d + s->dv);
out:
    if (st) p->ops->state_destroy(st);
    ath_work_free(p, &w);
    return res;
}

static ath_shape shape(uint32_t hq, uint32_t hk, uint32_t d, uint32_t bs, uint32_t R, int32_t *ql,
                       int32_t *sl)
{
    ath_shape s;
    memset(&s, 0, sizeof s);
    s.q_dtype = s.kv_dtype = AH_DTYPE_BF16;
    s.hq = hq, s.hk = hk, s.d = s.dv = d;
    s.layout = AH_KV_LAYOUT_NHD;
    s.attn = AH_ATTN_DECODER;
    s.batch = (ath_batch_spec){.num_reqs = R, .qlens = ql, .seqlens = sl, .block_size = bs};
    return s;
}

static void row(const char *name, double ms, double bytes, double flops, double bw)
{
    if (ms < 0) {
        printf("| %-46s | failed |\n", name);
        return;
    }
    const double gbs = bytes / (ms * 1e-3) / 1e9, tf = flops / (ms * 1e-3) / 1e12;
    printf("| %-46s | %8.3f | %7.0f | %5.1f%% | %6.1f | %6.1f |\n", name, ms, gbs, 100.0 * gbs / bw,
           tf, g_plan_us);
    fflush(stdout);
}

/* The absorbed-MLA decode row: B32 (--mla-reqs, 1-256) x 4k keys, 16
 * heads, page 64. */
static void mla_row(ath_host *p, double bw, int mr)
{
    static int32_t ql[256], sl[256];
    for (int r = 0; r < mr; r++) ql[r] = 1, sl[r] = 4096;
    ath_shape s = shape(16, 1, 576, 64, (uint32_t)mr, ql, sl);
    s.dv = 512;
    s.mla = 1;
    double bytes, flops;
    const double ms = time_forward(p, &s, 1, &bytes, &flops);
    char name[128];
    snprintf(name, sizeof name, "MLA decode B%d ctx4096 16 heads 576/512 page64", mr);
    row(name, ms, bytes, flops, bw);
}

int main(int argc, char **argv)
{
    const char *path = FI_PLUGIN_PATH;
    int quick = 0, tc_only = 0, dec_only = 0;
    int page = 16, hnd = 0, ordered = 0, only_ctx = 0, mla_reqs = 32;
    const char *kv = NULL; /* "e4m3" / "e5m2": an FP8 cache in the B64 rows */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (!strcmp(a, "--plugin") && v) path = v, i++;
        else if (!strcmp(a, "--reps") && v) ok = ah_parse_int(v, 3, 1000000, &g_reps), i++;
        else if (!strcmp(a, "--batch") && v) ok = ah_parse_int(v, 1, 1000, &g_batch), i++;
        else if (!strcmp(a, "--page") && v) ok = ah_parse_int(v, 1, 128, &page), i++;
        else if (!strcmp(a, "--ctx") && v) ok = ah_parse_int(v, 1, 1 << 30, &only_ctx), i++;
        else if (!strcmp(a, "--mla-reqs") && v) ok = ah_parse_int(v, 1, 256, &mla_reqs), i++;
        else if (!strcmp(a, "--layout") && v)
            ok = (hnd = !strcmp(v, "hnd")) || !strcmp(v, "nhd"), i++;
        else if (!strcmp(a, "--order") && v)
            ok = (ordered = !strcmp(v, "ordered")) || !strcmp(v, "shuffled"), i++;
        else if (!strcmp(a, "--kv") && v) {
            ok = !strcmp(v, "e4m3") || !strcmp(v, "e5m2") || !strcmp(v, "bf16");
            kv = strcmp(v, "bf16") ? v : NULL;
            i++;
        } else if (!strcmp(a, "--quick")) quick = 1;
        else if (!strcmp(a, "--tc")) tc_only = 1;
        else if (!strcmp(a, "--decode")) dec_only = 1;
        else if (!strcmp(a, "--decode-all")) dec_only = 2;
        else if (!strcmp(a, "--mla")) dec_only = 3;
        else ok = 0;
        if (!ok) {
            fprintf(stderr,
                    "fi_bench: bad argument %s%s%s (see the comment at the top of fi_bench.c)\n", a,
                    v ? " " : "", v ? v : "");
            return 2;
        }
    }
    ath_host p;
    int rc = ath_open(&p, path, 0);
    if (rc) return rc;
    const double bw = copy_bandwidth(&p);
    printf("device: %s (%s), %u SMs; device-to-device copy: %.0f GB/s (read+write)\n",
           p.probe.device_name, p.probe.arch, p.probe.multiprocessors, bw);
    printf("| shape (bf16, Hq/Hk, head) | median ms | GB/s | %% copy BW | TFLOP/s | plan us |\n");
    printf("| --- | --- | --- | --- | --- | --- |\n");
    static int32_t ql[256], sl[256];
    double bytes, flops;
    char name[128];
    const int ctxs[3] = {4096, 8192, 16384};
    if (dec_only == 3) {
        mla_row(&p, bw, mla_reqs);
        ath_close(&p);
        return 0;
    }
    if (!tc_only) {
        for (int c = 0; c < 3; c++) {
            if (quick && c) break;
            /* --page, --layout, --order, --ctx, --kv: this row's cache geometry,
             * page order and type (how much the layout and the scattered pages
             * cost; one shape for a profiler). */
            if (only_ctx && only_ctx != ctxs[c]) continue;
            for (int r = 0; r < 64; r++) ql[r] = 1, sl[r] = ctxs[c];
            ath_shape s = shape(32, 8, 128, (uint32_t)page, 64, ql, sl);
            if (hnd) s.layout = AH_KV_LAYOUT_HND;
            s.batch.ordered = ordered;
            if (kv) {
                s.kv_dtype = kv[1] == '4' ? AH_DTYPE_FP8_E4M3 : AH_DTYPE_FP8_E5M2;
                s.k_scale = s.v_scale = 0.01f;
            }
            double ms = time_forward(&p, &s, 1, &bytes, &flops);
            snprintf(name, sizeof name, "decode B64 ctx%d 32/8 d128 page%d%s%s%s%s", ctxs[c], page,
                     hnd ? " hnd" : "", s.batch.ordered ? " ordered" : "", kv ? " kv " : "",
                     kv ? kv : "");
            row(name, ms, bytes, flops, bw);
        }
        if (dec_only == 1) {
            ath_close(&p);
            return 0;
        }
        for (int pg = 0; pg < 2; pg++) {
            for (int r = 0; r < 64; r++) ql[r] = 1, sl[r] = 4096;
            ath_shape s = shape(32, 8, 128, pg ? 16 : 1, 64, ql, sl);
            double ms = time_forward(&p, &s, 1, &bytes, &flops);
            snprintf(name, sizeof name, "decode B64 ctx4096 32/8 d128 page%d", pg ? 16 : 1);
            row(name, ms, bytes, flops, bw);
        }
        {
            const int Rs[3] = {1, 4, 16};
            for (int i = 0; i < 3; i++) {
                for (int r = 0; r < Rs[i]; r++) ql[r] = 1, sl[r] = 32768;
                ath_shape s = shape(32, 8, 128, 16, (uint32_t)Rs[i], ql, sl);
                double ms = time_forward(&p, &s, 1, &bytes, &flops);
                snprintf(name, sizeof name, "decode B%d ctx32768 32/8 d128 (split-KV)", Rs[i]);
                row(name, ms, bytes, flops, bw);
            }
        }
        {
            for (int r = 0; r < 64; r++) ql[r] = 1, sl[r] = 4096;
            ath_shape s = shape(32, 8, 128, 16, 64, ql, sl);
            s.kv_dtype = AH_DTYPE_FP8_E4M3;
            s.k_scale = s.v_scale = 0.01f;
            double ms = time_forward(&p, &s, 1, &bytes, &flops);
            row("decode B64 ctx4096 32/8 d128 kv fp8_e4m3", ms, bytes, flops, bw);
        }
        mla_row(&p, bw, mla_reqs);
        /* Page size 1 at a long context too (one page lookup per key). */
        for (int pg = 0; pg < 2; pg++) {
            for (int r = 0; r < 64; r++) ql[r] = 1, sl[r] = 16384;
            ath_shape s = shape(32, 8, 128, pg ? 16 : 1, 64, ql, sl);
            double ms = time_forward(&p, &s, 1, &bytes, &flops);
            snprintf(name, sizeof name, "decode B64 ctx16384 32/8 d128 page%d", pg ? 16 : 1);
            row(name, ms, bytes, flops, bw);
        }
    } /* decode shapes */
    if (dec_only) {
        ath_close(&p);
        return 0;
    }
    /* Cascade: decode requests sharing a prefix, each with a short suffix of
     * its own; on (common_prefix_len set) and off (the same batch without). */
    {
        const int R[2] = {64, 128}, P[2] = {4096, 32768}, S[2] = {256, 128};
        for (int c = 0; c < 2; c++) {
            if (quick && c) break;
            double on_ms = 0;
            for (int on = 1; on >= 0; on--) {
                for (int r = 0; r < R[c]; r++) ql[r] = 1, sl[r] = P[c] + S[c];
                ath_shape s = shape(32, 8, 128, 16, (uint32_t)R[c], ql, sl);
                s.batch.prefix_blocks = (uint32_t)P[c] / 16;
                double ms = time_forward(&p, &s, !on, &bytes, &flops);
                snprintf(name, sizeof name, "cascade B%d prefix%d+%d decode %s", R[c], P[c], S[c],
                         on ? "on" : "off");
                row(name, ms, bytes, flops, bw);
                if (on) on_ms = ms;
                else if (on_ms > 0 && ms > 0)
                    printf("|   cascade speed-up B%d prefix%d: %.2fx |\n", R[c], P[c], ms / on_ms);
            }
        }
    }
    /* Prefill (causal, no cache) and extend. */
    {
        ql[0] = sl[0] = 4096;
        ath_shape s = shape(32, 8, 128, 16, 1, ql, sl);
        /* Time first, then print: bytes/flops are outputs of time_forward
         * (argument evaluation order is unspecified in C). */
        double ms = time_forward(&p, &s, 1, &bytes, &flops);
        row("prefill B1 4096 causal 32/8 d128", ms, bytes, flops, bw);
        for (int r = 0; r < 4; r++) ql[r] = sl[r] = 1024;
        s = shape(32, 8, 128, 16, 4, ql, sl);
        ms = time_forward(&p, &s, 1, &bytes, &flops);
        row("prefill B4 1024 causal 32/8 d128", ms, bytes, flops, bw);
        for (int r = 0; r < 4; r++) ql[r] = 512, sl[r] = 4096;
        s = shape(32, 8, 128, 16, 4, ql, sl);
        ms = time_forward(&p, &s, 1, &bytes, &flops);
        row("extend B4 512 new on 3584 cached 32/8 d128", ms, bytes, flops, bw);
        ql[0] = sl[0] = 4096;
        s = shape(32, 32, 64, 16, 1, ql, sl);
        ms = time_forward(&p, &s, 1, &bytes, &flops);
        row("prefill B1 4096 causal 32/32 d64", ms, bytes, flops, bw);
        s = shape(16, 16, 256, 16, 1, ql, sl);
        ms = time_forward(&p, &s, 1, &bytes, &flops);
        row("prefill B1 4096 causal 16/16 d256", ms, bytes, flops, bw);
        /* The long prefills the issue names: 4k-16k, causal and not. */
        const int L[3] = {4096, 8192, 16384};
        for (int c = 0; c < 3 && !quick; c++)
            for (int bi = 0; bi < 2; bi++) {
                if (bi == 0 && c == 0) continue; /* B1 4096 causal: above */
                ql[0] = sl[0] = L[c];
                s = shape(32, 8, 128, 16, 1, ql, sl);
                if (bi) s.attn = AH_ATTN_ENCODER_ONLY;
                ms = time_forward(&p, &s, 1, &bytes, &flops);
                snprintf(name, sizeof name, "prefill B1 %d %s 32/8 d128", L[c],
                         bi ? "non-causal" : "causal");
                row(name, ms, bytes, flops, bw);
            }
    }
    ath_close(&p);
    return 0;
}
