/*
 * Many threads on one host at once, as an engine's workers would use it:
 * each of 16 threads repeatedly selects (the shared model and a model of
 * its own, so the decision cache sees concurrent hits, misses and
 * inserts), binds (its own selection, or a selection shared by all
 * threads), plans and runs both layers of a step on a CPU plugin, checks
 * the output against a single-threaded run to the bit, reads the host's
 * plugin table, and destroys what it made. The contract under test is the
 * one at the top of attnhost.h: a host serves many threads, a selection is
 * immutable and readable anywhere, a binding belongs to one thread at a
 * time. The ThreadSanitizer build (build-tsan) runs this to find races.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "reliability_fixture.h"

#define THREADS 16
#ifndef ITERATIONS
#define ITERATIONS 40
#endif

static ah_host *host;
static ah_model *shared_model;
static ah_selection *shared_sel;
static float golden[2][REL_Q_ELEMS];
static pthread_barrier_t start;

typedef struct worker {
    int id;
    int failures;
    char first_failure[1400];
    int steps;
} worker;

static void fail_once(worker *w, const char *fmt, const char *a, const char *b)
{
    if (!w->failures++) snprintf(w->first_failure, sizeof w->first_failure, fmt, a, b);
}

/* One step on a binding made from sel; 0 when it ran and matched. */
static int run_step(worker *w, const ah_selection *sel, uint32_t seed_unused)
{
    (void)seed_unused;
    ah_binding *b = NULL;
    ah_error err;
    ah_binding_options bo = rel_binding_options();
    if (ah_binding_create(host, sel, &bo, &b, &err) != AH_OK) {
        fail_once(w, "binding_create: %s%s", err.msg, "");
        return -1;
    }
    rel_step s;
    rel_step_init(&s, 7); /* the golden run's inputs */
    int rc = 0;
    if (ah_binding_plan(b, &s.batch, AH_PLAN_EAGER, NULL) != AH_OK) {
        fail_once(w, "plan: %s%s", ah_binding_errmsg(b), "");
        rc = -1;
    }
    for (uint32_t l = 0; rc == 0 && l < 2; l++) {
        if (ah_binding_forward(b, l, &s.args) != AH_OK) {
            fail_once(w, "forward: %s%s", ah_binding_errmsg(b), "");
            rc = -1;
        } else if (memcmp(s.out, golden[l], sizeof golden[l]) != 0) {
            fail_once(w, "layer %s output differs from the single-threaded run%s", l ? "1" : "0",
                      "");
            rc = -1;
        }
    }
    /* the binding's device, through the public device API */
    ah_device *d = ah_binding_device(b, 0, ah_binding_phase(b));
    void *p = NULL;
    if (!d || ah_device_alloc(d, 4096, &p) != AH_OK || !p) {
        fail_once(w, "device alloc failed%s%s", "", "");
        rc = -1;
    } else {
        memset(p, 0x5a, 4096);
        ah_device_free(d, p);
    }
    rel_step_free(&s);
    ah_binding_destroy(b);
    return rc;
}

static void *work(void *arg)
{
    worker *w = arg;
    char text[1024];
    /* a model of this thread's own: other head counts, so its decisions are
     * new entries in the shared cache */
    snprintf(text, sizeof text,
             "[model]\nname = t%d\nnum_layers = 3\nnum_q_heads = %d\nnum_kv_heads = 2\n"
             "head_size = %d\ndtype = fp32\nkv_dtype = fp32\nblock_size = 4\n",
             w->id, 2 * (1 + w->id % 5), 8 * (1 + w->id % 3));
    ah_model *own = NULL;
    ah_error err;
    if (ah_model_parse(text, "<thread>", &own, &err) != AH_OK) {
        fail_once(w, "own model: %s%s", err.msg, "");
        return NULL;
    }
    pthread_barrier_wait(&start);
    for (int it = 0; it < ITERATIONS; it++) {
        ah_selection *sel = NULL, *mine = NULL;
        if (ah_host_select(host, shared_model, &sel, &err) != AH_OK) {
            fail_once(w, "select: %s%s", err.msg, "");
            continue;
        }
        if (ah_host_select(host, own, &mine, &err) != AH_OK)
            fail_once(w, "select own: %s%s", err.msg, "");
        else {
            const ah_decision *d = ah_selection_decision(mine, 2, AH_PHASE_DECODE);
            if (!d || !d->plugin || strcmp(d->plugin, "abi_good") != 0)
                fail_once(w, "own model bound to %s%s", d && d->plugin ? d->plugin : "nothing", "");
            ah_selection_destroy(mine);
        }
        if (it % 5 == 0) { /* forced selection too */
            ah_selection *forced = NULL;
            if (ah_host_select_forced(host, shared_model, "abi_good", &forced, &err) != AH_OK)
                fail_once(w, "select_forced: %s%s", err.msg, "");
            ah_selection_destroy(forced);
        }
        /* reads of the host's plugin table */
        if (!ah_host_find_plugin(host, "abi_good") || ah_host_plugin_count(host) < 1)
            fail_once(w, "plugin table lost abi_good%s%s", "", "");
        /* alternate: a binding on this thread's selection, then on the shared one */
        if (run_step(w, (it & 1) ? shared_sel : sel, (uint32_t)it) == 0) w->steps++;
        ah_selection_destroy(sel);
    }
    ah_model_destroy(own);
    return NULL;
}

int main(void)
{
    char good[1024];
    const char *dirs[2] = {ATTNHOST_BUILD_DIR "/lib/attnhost/plugins",
                           rel_case_dir("good", good, sizeof good)};
    ah_host_options ho = rel_host_options(dirs, 2, "[select]\npriority = abi_good\n");
    ah_error err;
    CHECK_MSG(ah_host_create(&ho, &host, &err) == AH_OK, "host: %s", err.msg);
    CHECK_MSG(ah_model_parse(rel_model_text, "<rel>", &shared_model, &err) == AH_OK, "model: %s",
              err.msg);
    if (!host || !shared_model) return check_report("test_stress_threads");
    CHECK_MSG(ah_host_select(host, shared_model, &shared_sel, &err) == AH_OK, "select: %s",
              err.msg);
    if (!shared_sel) return check_report("test_stress_threads");

    /* the single-threaded answer */
    ah_binding *b = NULL;
    ah_binding_options bo = rel_binding_options();
    rel_step s;
    rel_step_init(&s, 7);
    CHECK(ah_binding_create(host, shared_sel, &bo, &b, &err) == AH_OK);
    CHECK(b && ah_binding_plan(b, &s.batch, AH_PLAN_EAGER, NULL) == AH_OK);
    for (uint32_t l = 0; b && l < 2; l++) {
        CHECK(ah_binding_forward(b, l, &s.args) == AH_OK);
        memcpy(golden[l], s.out, sizeof golden[l]);
    }
    ah_binding_destroy(b);
    rel_step_free(&s);

    pthread_t th[THREADS];
    static worker w[THREADS];
    pthread_barrier_init(&start, NULL, THREADS);
    for (int i = 0; i < THREADS; i++) {
        w[i].id = i;
        CHECK(pthread_create(&th[i], NULL, work, &w[i]) == 0);
    }
    int steps = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(w[i].failures == 0, "thread %d: %d failures, first: %s", i, w[i].failures,
                  w[i].first_failure);
        steps += w[i].steps;
    }
    pthread_barrier_destroy(&start);
    CHECK(steps == THREADS * ITERATIONS);
    printf("%d threads x %d iterations: %d bound steps ran and matched the single-threaded "
           "output\n",
           THREADS, ITERATIONS, steps);
    ah_selection_destroy(shared_sel);
    ah_model_destroy(shared_model);
    ah_host_destroy(host);
    return check_report("test_stress_threads");
}
