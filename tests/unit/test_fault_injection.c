/*
 * Allocation-failure injection across a whole engine lifetime: create a
 * host (in-process scan of the build's plugin directory and the ABI test
 * backend), parse a model, select, bind, plan and run both layers, then
 * destroy everything. Run n fails the n-th allocation the core makes
 * (ah__fault_inject_after), for n = 1, 2, ... until a run completes without
 * reaching the n-th allocation: every allocation site of the path is
 * failed once.
 *
 * Each run must end one of two ways:
 *  - a call fails with AH_ERR_OUT_OF_MEMORY and a message saying so (no
 *    other status, no empty message, no crash), or
 *  - the failure was absorbed (an optional step such as a log line went
 *    without), and then the run's results must equal a fault-free run's
 *    to the bit: a swallowed failure may not change an answer.
 * And either way the core's live-allocation count returns to where it was
 * (ah__alloc_live), so no failure path leaks; the ASan build (CI) adds
 * LeakSanitizer's view of the libc allocations behind it.
 */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "reliability_fixture.h"

static const char *dirs[2];
static const char config_text[] = "[select]\npriority = abi_good\n";

typedef struct outcome {
    const char *step; /* the call that failed, NULL when all succeeded */
    ah_status status;
    char msg[1200];
    float out[2][REL_Q_ELEMS]; /* both layers' outputs, when all succeeded */
    uint64_t cache_hash;
    size_t n_plugins;
} outcome;

static int failed(outcome *o, const char *step, ah_status s, const char *msg)
{
    if (s == AH_OK) return 0;
    o->step = step;
    o->status = s;
    snprintf(o->msg, sizeof o->msg, "%s", msg);
    return 1;
}

/* One engine lifetime; every failure is recorded in o. */
static void run_once(outcome *o)
{
    memset(o, 0, sizeof *o);
    ah_host *h = NULL;
    ah_model *m = NULL;
    ah_selection *sel = NULL;
    ah_binding *b = NULL;
    ah_error err;
    memset(&err, 0, sizeof err);
    rel_step s;
    rel_step_init(&s, 7);
    ah_host_options ho = rel_host_options(dirs, 2, config_text);
    ah_binding_options bo = rel_binding_options();

    if (failed(o, "ah_host_create", ah_host_create(&ho, &h, &err), err.msg)) goto out;
    o->n_plugins = ah_host_plugin_count(h);
    if (failed(o, "ah_model_parse", ah_model_parse(rel_model_text, "<rel>", &m, &err), err.msg))
        goto out;
    if (failed(o, "ah_host_select", ah_host_select(h, m, &sel, &err), err.msg)) goto out;
    if (failed(o, "ah_binding_create", ah_binding_create(h, sel, &bo, &b, &err), err.msg)) goto out;
    if (failed(o, "ah_binding_plan", ah_binding_plan(b, &s.batch, AH_PLAN_EAGER, NULL),
               ah_binding_errmsg(b)))
        goto out;
    for (uint32_t l = 0; l < 2; l++) {
        if (failed(o, "ah_binding_forward", ah_binding_forward(b, l, &s.args),
                   ah_binding_errmsg(b)))
            goto out;
        memcpy(o->out[l], s.out, sizeof o->out[l]);
    }
    o->cache_hash = rel_hash(s.kc, REL_CACHE_ELEMS * sizeof(float)) ^
                    rel_hash(s.vc, REL_CACHE_ELEMS * sizeof(float));
out:
    ah_binding_destroy(b);
    ah_selection_destroy(sel);
    ah_model_destroy(m);
    ah_host_destroy(h);
    rel_step_free(&s);
}

int main(void)
{
    char good[1024];
    dirs[0] = ATTNHOST_BUILD_DIR "/lib/attnhost/plugins";
    dirs[1] = rel_case_dir("good", good, sizeof good);

    static outcome golden, o;
    long live0 = ah__alloc_live();
    ah__fault_inject_after(0);
    run_once(&golden);
    long total = ah__alloc_count();
    CHECK_MSG(golden.step == NULL, "fault-free run failed in %s: %s", golden.step, golden.msg);
    CHECK(ah__alloc_live() == live0);
    if (golden.step) return check_report("test_fault_injection");
    printf("fault-free run: %ld allocations, %zu plugins scanned\n", total, golden.n_plugins);

    long n, injected = 0, absorbed = 0, per_step[8] = {0};
    static const char *const steps[] = {"ah_host_create",  "ah_model_parse",
                                        "ah_host_select",  "ah_binding_create",
                                        "ah_binding_plan", "ah_binding_forward"};
    for (n = 1;; n++) {
        ah__fault_inject_after(n);
        run_once(&o);
        long count = ah__alloc_count();
        ah__fault_inject_after(0);
        long leaked = ah__alloc_live() - live0;
        CHECK_MSG(leaked == 0, "n=%ld (%s): %ld allocations leaked", n,
                  o.step ? o.step : "absorbed", leaked);
        if (count < n) { /* the n-th allocation never happened: every site was failed */
            CHECK_MSG(o.step == NULL, "n=%ld: no fault fired, yet %s failed: %s", n, o.step, o.msg);
            break;
        }
        injected++;
        if (o.step) {
            CHECK_MSG(o.status == AH_ERR_OUT_OF_MEMORY, "n=%ld: %s returned %s (%d): %s", n, o.step,
                      ah_status_str(o.status), (int)o.status, o.msg);
            CHECK_MSG(strstr(o.msg, "out of memory") != NULL,
                      "n=%ld: %s failed without saying out of memory: '%s'", n, o.step, o.msg);
            for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
                if (strcmp(o.step, steps[i]) == 0) per_step[i]++;
        } else {
            if (absorbed < 16) printf("  n=%ld: failure absorbed, results unchanged\n", n);
            absorbed++;
            CHECK_MSG(o.n_plugins == golden.n_plugins, "n=%ld: absorbed, but %zu plugins, not %zu",
                      n, o.n_plugins, golden.n_plugins);
            CHECK_MSG(memcmp(o.out, golden.out, sizeof o.out) == 0 &&
                          o.cache_hash == golden.cache_hash,
                      "n=%ld: absorbed, but the results differ from the fault-free run", n);
        }
        if (n > 100000) {
            CHECK_MSG(0, "more than 100000 allocations: the path does not terminate");
            break;
        }
    }
    printf("injected %ld allocation failures (every site of the path); %ld absorbed with "
           "identical results\n",
           injected, absorbed);
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        printf("  %-20s %ld failures ended in AH_ERR_OUT_OF_MEMORY\n", steps[i], per_step[i]);

    /* A plugin's own configuration must reach its probe or the scan must
     * fail: abi_good switched off by its key may never come out usable
     * because an allocation failed. */
    long cfg_runs = 0;
    for (n = 1;; n++) {
        ah_host_options ho = rel_host_options(dirs, 2, "[plugin.abi_good]\nusable = 0\n");
        ah_host *h = NULL;
        ah_error err;
        ah__fault_inject_after(n);
        ah_status st = ah_host_create(&ho, &h, &err);
        long count = ah__alloc_count();
        ah__fault_inject_after(0);
        if (st == AH_OK) {
            const ah_plugin_info *p = ah_host_find_plugin(h, "abi_good");
            CHECK_MSG(p && p->state == AH_PLUGIN_UNAVAILABLE &&
                          strstr(p->reason, "config key usable"),
                      "n=%ld: abi_good is %s (%s) although its config switches it off", n,
                      p ? ah_plugin_state_str(p->state) : "missing", p ? p->reason : "");
        } else {
            CHECK_MSG(st == AH_ERR_OUT_OF_MEMORY && strstr(err.msg, "out of memory"),
                      "n=%ld: %s: %s", n, ah_status_str(st), err.msg);
        }
        ah_host_destroy(h);
        CHECK(ah__alloc_live() == live0);
        if (count < n) break;
        cfg_runs++;
    }
    printf("host creation with plugin config keys: %ld failures injected, the keys never lost\n",
           cfg_runs);
    return check_report("test_fault_injection");
}
