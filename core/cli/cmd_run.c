/*
 * attnhost run: the main job. Bind every layer of a model (the built-in
 * demo model by default), run a prefill and several decode steps with
 * random data through the bound plugins, check every output against the
 * oracle, and print the binding and the throughput.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "workload.h"


static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One step: plan, forward (storing K/V), check. Returns -1 on error. */
static int step(workload *w, const uint32_t *qlens, double *ms, double *err, int *ok)
{
    if (wl_step(w, qlens)) return -1;
    double t0 = now_ms();
    if (wl_forward_all(w, 1)) return -1;
    *ms = now_ms() - t0;
    if (wl_check(w, err, ok)) return -1;
    wl_advance(w);
    return 0;
}

int cmd_run(cli_common *c)
{
    uint32_t steps = 8;
    uint64_t seed = 42;
    for (int i = 0; i < c->argc; i++) {
        if (!strcmp(c->argv[i], "--steps") && i + 1 < c->argc) steps = (uint32_t)strtoul(c->argv[++i], NULL, 10);
        else if (!strcmp(c->argv[i], "--seed") && i + 1 < c->argc) seed = strtoull(c->argv[++i], NULL, 0);
        else {
            fprintf(stderr, "attnhost run: unknown option '%s'\n", c->argv[i]);
            return 2;
        }
    }
    ah_host *h = cli_host(c);
    ah_model *m = h ? cli_model(c) : NULL;
    ah_selection *sel = NULL;
    ah_error err;
    int rc = 1;
    workload w = {0};
    if (!m) goto out;
    /* --plugin forces that backend on every layer, as check and bench do */
    ah_status st = c->plugin ? ah_host_select_forced(h, m, c->plugin, &sel, &err)
                             : ah_host_select(h, m, &sel, &err);
    if (st != AH_OK) {
        fprintf(stderr, "attnhost run: %s\n", err.msg);
        goto out;
    }
    if (*ah_selection_warnings(sel)) fprintf(stderr, "attnhost: warning: %s", ah_selection_warnings(sel));
    cli_print_binding(m, sel);

    /* four requests with prompts of different lengths, then decode steps */
    static const uint32_t prompts[] = {96, 160, 33, 250};
    const uint32_t nreq = 4;
    uint32_t total = 0, longest = 0;
    for (uint32_t r = 0; r < nreq; r++) {
        total += prompts[r];
        longest = prompts[r] > longest ? prompts[r] : longest;
    }
    if (wl_create(&w, h, m, sel, nreq, longest + steps + 1, total, seed)) {
        fprintf(stderr, "attnhost run: %s\n", w.err);
        goto out;
    }
    double ms, e, worst = 0, prefill_ms;
    int ok, all_ok = 1;
    if (step(&w, prompts, &prefill_ms, &e, &ok)) {
        fprintf(stderr, "attnhost run: prefill: %s\n", w.err);
        goto out;
    }
    worst = e;
    all_ok &= ok;
    printf("\nprefill: %u requests, %u tokens, %.2f ms, %.0f tokens/s, max rel error %.2e %s\n",
           nreq, total, prefill_ms, total / (prefill_ms / 1e3), e, ok ? "ok" : "FAIL");
    double *times = calloc(steps ? steps : 1, sizeof *times);
    uint32_t ones[4] = {1, 1, 1, 1};
    for (uint32_t s = 0; s < steps; s++) {
        if (step(&w, ones, &ms, &e, &ok)) {
            fprintf(stderr, "attnhost run: decode step %u: %s\n", s, w.err);
            free(times);
            goto out;
        }
        times[s] = ms;
        worst = e > worst ? e : worst;
        all_ok &= ok;
        if (!ok) printf("decode step %u: max rel error %.2e FAIL\n", s, e);
    }
    if (steps) {
        qsort(times, steps, sizeof *times, cmp_double);
        double med = times[steps / 2];
        printf("decode:  %u steps x %u requests, median %.3f ms/step, %.0f tokens/s, max rel error %.2e %s\n",
               steps, nreq, med, nreq / (med / 1e3), worst, all_ok ? "ok" : "FAIL");
    }
    free(times);
    printf("%s: every layer's output %s the double-precision oracle\n", all_ok ? "PASS" : "FAIL",
           all_ok ? "matches" : "does NOT match");
    rc = all_ok ? 0 : 1;
out:
    wl_destroy(&w);
    ah_selection_destroy(sel);
    ah_model_destroy(m);
    ah_host_destroy(h);
    return rc;
}
