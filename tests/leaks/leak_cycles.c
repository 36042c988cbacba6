/*
 * The leak driver: N full cycles of an engine's life, each starting from
 * nothing: create a host (in-process scan, no cache) over the given plugin
 * directories, parse a model, and for every available CPU plugin select
 * it, bind, plan and run both layers of a step, then destroy everything
 * (unloading the plugins). Run under valgrind by run_leaks.sh, which
 * compares short and long runs, so memory kept per cycle shows up as
 * growth even when something still points at it.
 *
 *   leak_cycles CYCLES DIR...
 *
 * Prints the glibc heap in use (mallinfo2) after cycle 100 and after the
 * last cycle; a growing heap fails the run (exit 2) even without valgrind.
 * Run it with GLIBC_TUNABLES=glibc.malloc.tcache_count=0 (run_leaks.sh
 * does): glibc counts the chunks its per-thread caches keep as "in use",
 * which fills up over the first thousands of cycles and looks like growth.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/attnhost.h>

#define HQ 4
#define HK 2
#define D 64
#define BS 16
#define NBLK 8
#define REQS 2
#define TOK 4
#define STRIDE 3

static const char model_text[] = "[model]\nname = leak\nnum_layers = 2\nnum_q_heads = 4\n"
                                 "num_kv_heads = 2\nhead_size = 64\ndtype = fp32\n"
                                 "kv_dtype = fp32\nkv_layout = nhd\nblock_size = 16\n";

static DLTensor tensor(void *data, int ndim, int64_t *shape, uint8_t code, uint8_t bits)
{
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.ndim = ndim;
    t.shape = shape;
    t.dtype.code = code;
    t.dtype.bits = bits;
    t.dtype.lanes = 1;
    return t;
}

static float *floats(size_t n, unsigned seed)
{
    float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    if (!p) abort();
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 2654435761u + seed) % 2000u) / 1000.0f - 1.0f;
    return p;
}

/* One step through a binding; returns 0 on success. */
static int run_step(ah_binding *b)
{
    int32_t qsl[] = {0, 3, 4}, seq[] = {20, 22}, bt[] = {6, 2, 7, 1, 4, 0};
    int64_t slots[TOK];
    for (int r = 0; r < REQS; r++)
        for (int32_t t = qsl[r]; t < qsl[r + 1]; t++) {
            int32_t pos = seq[r] - (qsl[r + 1] - qsl[r]) + (t - qsl[r]);
            slots[t] = (int64_t)bt[r * STRIDE + pos / BS] * BS + pos % BS;
        }
    int64_t s_qsl[] = {REQS + 1}, s_seq[] = {REQS}, s_bt[] = {REQS, STRIDE}, s_sl[] = {TOK};
    DLTensor t_qsl = tensor(qsl, 1, s_qsl, kDLInt, 32), t_seq = tensor(seq, 1, s_seq, kDLInt, 32);
    DLTensor t_bt = tensor(bt, 2, s_bt, kDLInt, 32), t_sl = tensor(slots, 1, s_sl, kDLInt, 64);
    ah_batch batch = {sizeof batch, REQS, TOK,  3,    22,    NBLK,   &t_qsl, &t_seq, &t_bt,
                      &t_sl,        qsl,  seq,  bt,   slots, STRIDE, 0,      NULL,   NULL,
                      NULL,         NULL, NULL, NULL, 0,     0,      NULL};
    float *q = floats(TOK * HQ * D, 1), *k = floats(TOK * HK * D, 2), *v = floats(TOK * HK * D, 3);
    float *out = floats(TOK * HQ * D, 4), *kc = floats(NBLK * BS * HK * D, 5);
    float *vc = floats(NBLK * BS * HK * D, 6);
    int64_t s_q[] = {TOK, HQ, D}, s_kv[] = {TOK, HK, D}, s_c[] = {NBLK, BS, HK, D};
    DLTensor t_q = tensor(q, 3, s_q, kDLFloat, 32), t_k = tensor(k, 3, s_kv, kDLFloat, 32);
    DLTensor t_v = tensor(v, 3, s_kv, kDLFloat, 32), t_o = tensor(out, 3, s_q, kDLFloat, 32);
    DLTensor t_kc = tensor(kc, 4, s_c, kDLFloat, 32), t_vc = tensor(vc, 4, s_c, kDLFloat, 32);
    ah_forward_args a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.q = &t_q;
    a.key = &t_k;
    a.value = &t_v;
    a.key_cache = &t_kc;
    a.value_cache = &t_vc;
    a.out = &t_o;
    int rc = ah_binding_plan(b, &batch, AH_PLAN_EAGER, NULL) == AH_OK &&
                     ah_binding_forward(b, 0, &a) == AH_OK && ah_binding_forward(b, 1, &a) == AH_OK
                 ? 0
                 : -1;
    if (rc) fprintf(stderr, "step failed: %s\n", ah_binding_errmsg(b));
    free(q);
    free(k);
    free(v);
    free(out);
    free(kc);
    free(vc);
    return rc;
}

/* One cycle; returns the number of plugins that ran, or -1. */
static int cycle(const char *const *dirs, uint32_t n_dirs)
{
    ah_host_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.plugin_dirs = dirs;
    o.n_plugin_dirs = n_dirs;
    o.no_default_dirs = 1;
    o.scan_mode = AH_SCAN_IN_PROCESS;
    o.cache_path = "";
    ah_host *h = NULL;
    ah_model *m = NULL;
    ah_error err;
    if (ah_host_create(&o, &h, &err) != AH_OK ||
        ah_model_parse(model_text, "<leak>", &m, &err) != AH_OK) {
        fprintf(stderr, "cycle: %s\n", err.msg);
        ah_host_destroy(h);
        return -1;
    }
    int ran = 0;
    for (size_t i = 0; i < ah_host_plugin_count(h); i++) {
        const ah_plugin_info *p = ah_host_plugin(h, i);
        if (p->state != AH_PLUGIN_AVAILABLE || p->device_kind != AH_DEVICE_CPU) continue;
        ah_selection *sel = NULL;
        ah_binding *b = NULL;
        ah_binding_options bo;
        memset(&bo, 0, sizeof bo);
        bo.struct_size = sizeof bo;
        bo.limits = (ah_limits){sizeof bo.limits, 8, 64, STRIDE, STRIDE * BS, NBLK};
        if (ah_host_select_forced(h, m, p->name, &sel, &err) != AH_OK)
            continue; /* cannot serve it */
        if (ah_binding_create(h, sel, &bo, &b, &err) == AH_OK) {
            if (run_step(b) == 0) ran++;
            ah_binding_destroy(b);
        } else {
            fprintf(stderr, "%s: %s\n", p->name, err.msg);
        }
        ah_selection_destroy(sel);
    }
    ah_model_destroy(m);
    ah_host_destroy(h);
    return ran;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s CYCLES DIR...\n", argv[0]);
        return 64;
    }
    long n = strtol(argv[1], NULL, 10);
    size_t heap10 = 0, heap_end = 0;
    int ran = -1;
    for (long c = 1; c <= n; c++) {
        int r = cycle((const char *const *)argv + 2, (uint32_t)(argc - 2));
        if (r < 1 || (ran >= 0 && r != ran)) {
            fprintf(stderr, "cycle %ld: %d plugins ran (first cycle: %d)\n", c, r, ran);
            return 1;
        }
        ran = r;
        struct mallinfo2 mi = mallinfo2();
        if (c == 100 || (n < 100 && c == n)) heap10 = mi.uordblks;
        if (c == n) heap_end = mi.uordblks;
    }
    printf("cycles: %ld, plugins bound and run per cycle: %d\n", n, ran);
    printf("heap in use after cycle %ld: %zu bytes; after cycle %ld: %zu bytes\n",
           n < 100 ? n : 100, heap10, n, heap_end);
    if (heap_end > heap10) {
        printf("heap grew by %zu bytes\n", heap_end - heap10);
        return 2;
    }
    return 0;
}
