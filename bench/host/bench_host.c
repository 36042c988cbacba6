/*
 * The host's own costs, as medians:
 *   start-up      ah_host_create over the build's plugins plus the no-op
 *                 plugin, cold (every plugin scanned in a child) and warm
 *                 (every result from the cache)
 *   select/bind   an 80-layer model: ah_host_select on a fresh host and on
 *                 a warm decision cache, and ah_binding_create
 *   per step      ah_binding_plan (validation + dispatch) and one
 *                 ah_binding_forward (tensor checks + dispatch) through the
 *                 no-op plugin, decode at batch 256 with 1k- and 4k-token
 *                 contexts, validation on and off; and at 4k with cache
 *                 blocks of 256, which the no-op plugin (block sizes up to
 *                 16) runs as 16 kernel blocks of 16: the host's
 *                 kernel-block table translation per step; and a mixed
 *                 step (255 decodes, one 512-token chunk) split between two
 *                 no-op plugins
 * Usage: bench_host [--iters N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <attnhost/attnhost.h>

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

static const char *dirs[] = {ATTNHOST_BENCH_NOOP_DIR, ATTNHOST_BUILD_PLUGIN_DIR};

static ah_host *host(const char *cache, const char *ini)
{
    ah_host_options o = {.struct_size = sizeof o,
                         .config_text = ini,
                         .plugin_dirs = dirs,
                         .n_plugin_dirs = 2,
                         .no_default_dirs = 1,
                         .cache_path = cache};
    ah_host *h = NULL;
    ah_error err;
    if (ah_host_create(&o, &h, &err) != AH_OK) {
        fprintf(stderr, "bench_host: %s\n", err.msg);
        exit(1);
    }
    return h;
}

#define MODEL80 \
    "[model]\nname = m80\nnum_layers = 80\nnum_q_heads = 64\nnum_kv_heads = 8\n" \
    "head_size = 128\ndtype = bf16\n[layers.1-79/2]\nsliding_window = 4096\n"

/* Median plan and forward cost of a step at batch 256 with ctx tokens of
 * context, cache block BS (the model's), through the no-op plugins,
 * validation on and off: all decodes (chunk 0), or 255 decodes then one
 * prefill chunk of `chunk` new tokens (ending at ctx), which the host
 * splits where the configuration names two winners. */
static int step_overhead(const char *cache, const char *ini, const ah_model *m, int ctx, int BS,
                         int iters, int chunk)
{
    enum { B = 256, HQ = 64, HK = 8, D = 128 };
    const int mb = ctx / BS + 1, nblk = B * mb, T = chunk ? B - 1 + chunk : B;
    int32_t *qsl = malloc((B + 1) * sizeof *qsl), *seq = malloc(B * sizeof *seq);
    int32_t *tab = malloc((size_t)B * mb * sizeof *tab);
    int64_t *slots = malloc((size_t)T * sizeof *slots);
    uint16_t *q = malloc((size_t)T * HQ * D * 2), *o = malloc((size_t)T * HQ * D * 2);
    void *cache_mem = aligned_alloc(64, 64); /* never touched: the no-op plugin reads nothing */
    int rc = 1;
    if (!qsl || !seq || !tab || !slots || !q || !o || !cache_mem) goto out;
    for (int r = 0, t = 0; r < B; r++) {
        const int n = chunk && r == B - 1 ? chunk : 1;
        for (int j = 0; j < mb; j++) tab[r * mb + j] = r * mb + j;
        qsl[r] = t;
        seq[r] = ctx;
        for (int p = ctx - n; p < ctx; p++, t++)
            slots[t] = (int64_t)tab[r * mb + p / BS] * BS + p % BS;
    }
    qsl[B] = T;
    int64_t sq[1] = {B + 1}, ss[1] = {B}, st[2] = {B, mb}, sl[1] = {T};
    int64_t shq[3] = {T, HQ, D}, shc[4] = {nblk, BS, HK, D};
    DLTensor tq = {qsl, {kDLCPU, 0}, 1, {kDLInt, 32, 1}, sq, NULL, 0},
             tsq = {seq, {kDLCPU, 0}, 1, {kDLInt, 32, 1}, ss, NULL, 0},
             ttb = {tab, {kDLCPU, 0}, 2, {kDLInt, 32, 1}, st, NULL, 0},
             tsl = {slots, {kDLCPU, 0}, 1, {kDLInt, 64, 1}, sl, NULL, 0},
             Tq = {q, {kDLCPU, 0}, 3, {kDLBfloat, 16, 1}, shq, NULL, 0},
             To = {o, {kDLCPU, 0}, 3, {kDLBfloat, 16, 1}, shq, NULL, 0},
             Tk = {cache_mem, {kDLCPU, 0}, 4, {kDLBfloat, 16, 1}, shc, NULL, 0}, Tv = Tk;
    /* designated, so fields later ABI minors append start zero */
    ah_batch batch = {.struct_size = sizeof batch,
                      .num_reqs = B,
                      .num_tokens = (uint32_t)T,
                      .max_query_len = chunk ? (uint32_t)chunk : 1,
                      .max_seq_len = (uint32_t)ctx,
                      .num_blocks = (uint32_t)nblk,
                      .query_start_loc = &tq,
                      .seq_lens = &tsq,
                      .block_table = &ttb,
                      .slot_mapping = &tsl,
                      .query_start_loc_host = qsl,
                      .seq_lens_host = seq,
                      .block_table_host = tab,
                      .slot_mapping_host = slots,
                      .block_table_stride = (uint32_t)mb};
    for (int validate = 1; validate >= 0; validate--) {
        ah_host *h = host(cache, ini);
        ah_selection *s = NULL;
        ah_binding *b = NULL;
        ah_error err;
        ah_host_select(h, m, &s, &err);
        ah_binding_options bo = {
            sizeof bo,
            {sizeof(ah_limits), B, 8192, (uint32_t)mb, (uint32_t)ctx + 16, (uint32_t)nblk},
            !validate,
            0,
            NULL,
            AH_MIXED_STEPS_CONFIG};
        if (ah_binding_create(h, s, &bo, &b, &err) != AH_OK) {
            fprintf(stderr, "bench_host: %s\n", err.msg);
            ah_selection_destroy(s);
            ah_host_destroy(h);
            goto out;
        }
        ah_forward_args fa = {.struct_size = sizeof fa,
                              .q = &Tq,
                              .key_cache = &Tk,
                              .value_cache = &Tv,
                              .out = &To,
                              .k_scale = 1,
                              .v_scale = 1};
        static double tp[4096], tf[4096];
        int n = iters * 10 < 4096 ? iters * 10 : 4096, ok = 1;
        for (int i = 0; i < n && ok; i++) {
            double a = now_us();
            ok = ah_binding_plan(b, &batch, AH_PLAN_EAGER, NULL) == AH_OK;
            double c = now_us();
            ok = ok && ah_binding_forward(b, 0, &fa) == AH_OK;
            double d = now_us();
            tp[i] = c - a, tf[i] = d - c;
        }
        uint32_t kernel = 0;
        ah_binding_block_size(b, 0, AH_PHASE_DECODE, &kernel);
        char blocks[64] = "", split[64] = "";
        if (kernel != (uint32_t)BS)
            snprintf(blocks, sizeof blocks, ", block %d as %u x %u", BS, BS / kernel, kernel);
        const char *why = "";
        if (chunk && ah_binding_split(b, NULL, &why))
            snprintf(split, sizeof split, ", split between two plugins");
        else if (chunk) snprintf(split, sizeof split, ", whole (%.40s)", why);
        if (!ok) fprintf(stderr, "bench_host: %s\n", ah_binding_errmsg(b));
        else
            printf(
                "%s step, batch %d, ctx %5d, validation %-3s: plan %6.2f us, forward/layer %5.2f us%s%s\n",
                chunk ? "mixed " : "decode", B, ctx, validate ? "on" : "off", median(tp, n),
                median(tf, n), blocks, split);
        ah_binding_destroy(b);
        ah_selection_destroy(s);
        ah_host_destroy(h);
        if (!ok) goto out;
    }
    rc = 0;
out:
    free(qsl), free(seq), free(tab), free(slots), free(q), free(o), free(cache_mem);
    return rc;
}

int main(int argc, char **argv)
{
    int iters = argc > 2 && !strcmp(argv[1], "--iters") ? atoi(argv[2]) : 200;
    if (iters < 5) iters = 5;
    double *t = calloc((size_t)iters, sizeof *t);
    char cache[] = "/tmp/attnhost-bench-cache-XXXXXX";
    int fd = mkstemp(cache);
    if (fd < 0 || !t) return 1;
    close(fd);

    /* start-up, cold: every plugin scanned in a child */
    int cold_n = iters < 20 ? iters : 20;
    for (int i = 0; i < cold_n; i++) {
        unlink(cache);
        double a = now_us();
        ah_host_destroy(host(cache, NULL));
        t[i] = now_us() - a;
    }
    double cold = median(t, cold_n);
    ah_host *h = host(cache, NULL);
    size_t n_plugins = ah_host_plugin_count(h);
    printf("plugins scanned: %zu\n", n_plugins);
    for (size_t i = 0; i < n_plugins; i++) {
        const ah_plugin_info *p = ah_host_plugin(h, i);
        printf("  %-16s %-11s cold scan %.2f ms\n", p->name, ah_plugin_state_str(p->state),
               p->scan_ms);
    }
    ah_host_destroy(h);
    for (int i = 0; i < iters; i++) {
        double a = now_us();
        ah_host_destroy(host(cache, NULL));
        t[i] = now_us() - a;
    }
    printf("start-up, cold scan:  %8.2f ms (median of %d)\n", cold / 1e3, cold_n);
    printf("start-up, warm cache: %8.3f ms (median of %d)\n", median(t, iters) / 1e3, iters);

    /* selecting and binding 80 layers */
    const char *ini = "[select]\npriority = bench_noop\nfallback = error\n";
    ah_model *m = NULL;
    ah_error err;
    if (ah_model_parse(MODEL80, "m80", &m, &err) != AH_OK) return 1;
    double ts[64], tw[64], tb[64];
    int nb = iters < 64 ? iters : 64;
    for (int i = 0; i < nb; i++) {
        h = host(cache, ini);
        ah_selection *s = NULL, *s2 = NULL;
        ah_binding *b = NULL;
        double a = now_us();
        ah_host_select(h, m, &s, &err);
        double c = now_us();
        ah_host_select(h, m, &s2, &err);
        double d = now_us();
        ah_binding_options bo = {sizeof bo, {sizeof(ah_limits), 256, 8192, 1024, 16384, 65536},
                                 0,         0,
                                 NULL,      AH_MIXED_STEPS_CONFIG};
        if (ah_binding_create(h, s, &bo, &b, &err) != AH_OK) {
            fprintf(stderr, "bench_host: %s\n", err.msg);
            return 1;
        }
        double e = now_us();
        ts[i] = c - a, tw[i] = d - c, tb[i] = e - d;
        ah_binding_destroy(b);
        ah_selection_destroy(s);
        ah_selection_destroy(s2);
        ah_host_destroy(h);
    }
    printf("select 80 layers, fresh host:      %8.1f us\n", median(ts, nb));
    printf("select 80 layers, warm decisions:  %8.1f us\n", median(tw, nb));
    printf("ah_binding_create, 80 layers:      %8.1f us\n", median(tb, nb));

    /* per-step overhead at batch 256, block 16, two context lengths */
    for (int ctx = 1024; ctx <= 4096; ctx *= 4)
        if (step_overhead(cache, ini, m, ctx, 16, iters, 0)) return 1;
    /* a chunked-prefill step split between a decode and a prefill winner */
    const char *split_ini = "[select]\ndecode_priority = bench_noop_decode\n"
                            "prefill_priority = bench_noop\nfallback = error\n";
    if (step_overhead(cache, split_ini, m, 4096, 16, iters, 512)) return 1;
    /* cache blocks of 256 (a hybrid model's alignment) on kernel blocks */
    ah_model *m256 = NULL;
    if (ah_model_parse(MODEL80 "[layers.*]\nblock_size = 256\n", "m256", &m256, &err) != AH_OK ||
        step_overhead(cache, ini, m256, 4096, 256, iters, 0))
        return 1;
    ah_model_destroy(m256);
    unlink(cache);
    ah_model_destroy(m);
    return 0;
}
