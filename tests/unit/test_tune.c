/*
 * The tune table and [select] policy = measured (tune_table.c, decision.c)
 * through the public API, with recorded times (no timing here: the CLI test
 * tests/cli/tune.sh times the speed plugins for real). spd_slow ranks above
 * spd_fast; recording spd_fast faster makes it win under policy measured
 * and only there; a tie within 3% keeps the priority order; a spec with an
 * untuned valid candidate, candidates tuned on different steps, a forced
 * backend and an explicit list keep the priority order; a host without a
 * scan cache records nothing; bad entries are refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <attnhost/attnhost.h>

#include "check.h"
#include "reliability_fixture.h"

#define SPEED_DIR ATTNHOST_SELECT_PLUGIN_DIR "/speed"

static char root[] = "/tmp/ah_test_tune_XXXXXX";
static char cache[600];

static const char *model_text = "[model]\nname = t\nnum_layers = 1\nnum_q_heads = 2\n"
                                "num_kv_heads = 1\nhead_size = 16\ndtype = fp32\n";

static ah_host *host_with(const char *policy, const char *extra, const char *cache_path)
{
    char cfg[512];
    snprintf(cfg, sizeof cfg, "[select]\npolicy = %s\n%s", policy, extra ? extra : "");
    const char *dirs[1] = {SPEED_DIR};
    ah_host_options o = rel_host_options(dirs, 1, cfg);
    o.cache_path = cache_path;
    ah_host *h = NULL;
    ah_error err;
    CHECK_MSG(ah_host_create(&o, &h, &err) == AH_OK, "%s", err.msg);
    return h;
}

/* The decision for layer 0 in phase; *sel to destroy. */
static const ah_decision *decide(ah_host *h, const char *text, ah_phase phase, ah_selection **sel)
{
    ah_model *m = NULL;
    ah_error err;
    *sel = NULL;
    CHECK(ah_model_parse(text, "t", &m, &err) == AH_OK);
    CHECK_MSG(ah_host_select(h, m, sel, &err) == AH_OK, "%s", err.msg);
    const ah_decision *d = *sel ? ah_selection_decision(*sel, 0, phase) : NULL;
    ah_model_destroy(m);
    return d;
}

static const char *winner(const char *policy, const char *extra, const char *text, ah_phase phase,
                          char *buf, size_t cap)
{
    ah_host *h = host_with(policy, extra, cache);
    ah_selection *sel = NULL;
    const ah_decision *d = h ? decide(h, text, phase, &sel) : NULL;
    snprintf(buf, cap, "%s", d && d->plugin ? d->plugin : "(none)");
    ah_selection_destroy(sel);
    ah_host_destroy(h);
    return buf;
}

static void record(double fast_ms, double slow_ms, const char *fast_steps, ah_phase phase)
{
    ah_host *h = host_with("measured", NULL, cache);
    ah_model *m = NULL;
    ah_error err;
    CHECK(ah_model_parse(model_text, "t", &m, &err) == AH_OK);
    const ah_layer_spec *sp = ah_model_layer(m, 0);
    ah_tune_entry e[2] = {
        {sizeof e[0], "spd_fast", sp, phase, fast_ms, fast_steps, AH_MIXED_STEPS_CONFIG, NULL},
        {sizeof e[0], "spd_slow", sp, phase, slow_ms, "d16x4096", AH_MIXED_STEPS_CONFIG, NULL}};
    CHECK_MSG(ah_host_record_tune(h, e, 2, &err) == AH_OK, "%s", err.msg);
    ah_model_destroy(m);
    ah_host_destroy(h);
}

int main(void)
{
    char buf[64];
    if (!mkdtemp(root)) return 1;
    snprintf(cache, sizeof cache, "%s/scan-cache", root);
    const ah_phase D = AH_PHASE_DECODE, P = AH_PHASE_PREFILL;

    /* nothing tuned: the priority order (spd_slow ranks higher) */
    CHECK_STREQ(winner("measured", NULL, model_text, D, buf, sizeof buf), "spd_slow");

    /* decode tuned, spd_fast faster: it wins decode under measured only */
    record(1.0, 5.0, "d16x4096", D);
    CHECK_STREQ(winner("measured", NULL, model_text, D, buf, sizeof buf), "spd_fast");
    CHECK_STREQ(winner("priority", NULL, model_text, D, buf, sizeof buf), "spd_slow");
    CHECK_STREQ(winner("measured", NULL, model_text, P, buf, sizeof buf),
                "spd_slow"); /* untuned phase */

    /* explain's view: times per candidate, the reason, the note */
    ah_host *h = host_with("measured", NULL, cache);
    ah_selection *sel;
    const ah_decision *d = decide(h, model_text, D, &sel);
    CHECK(d && d->n_candidates == 2);
    for (uint32_t k = 0; d && k < d->n_candidates; k++) {
        const ah_candidate *c = &d->candidates[k];
        int fast = !strcmp(c->plugin, "spd_fast");
        CHECK(ah_decision_candidate_ms(d, k) == (fast ? 1.0 : 5.0));
        CHECK(c->chosen == fast);
        CHECK(fast ? c->n_reasons == 0
                   : c->n_reasons == 1 && c->reasons[0].code == AH_REASON_LOST_ON_PRIORITY &&
                         !strcmp(c->reasons[0].field, "measured"));
    }
    if (d) CHECK_CONTAINS(d->list_source, "policy measured: spd_fast fastest");
    CHECK_CONTAINS(ah_host_tune_table_path(h), "/tune-table");
    CHECK_STREQ(ah_host_tune_table_note(h), "");
    ah_selection_destroy(sel);
    ah_host_destroy(h);

    /* the same spec through ah_host_tuned */
    double ms = 0;
    h = host_with("priority", NULL, cache);
    ah_model *m = NULL;
    ah_error err;
    CHECK(ah_model_parse(model_text, "t", &m, &err) == AH_OK);
    CHECK(ah_host_tuned(h, "spd_slow", ah_model_layer(m, 0), D, &ms) == AH_OK && ms == 5.0);
    CHECK(ah_host_tuned(h, "spd_slow", ah_model_layer(m, 0), P, &ms) == AH_ERR_NOT_FOUND);
    /* bad entries are refused */
    ah_tune_entry bad = {sizeof bad, "spd_fast", ah_model_layer(m, 0),  D,
                         -1,         "",         AH_MIXED_STEPS_CONFIG, NULL};
    CHECK(ah_host_record_tune(h, &bad, 1, &err) == AH_ERR_INVALID_ARGUMENT);
    bad.ms = 1, bad.plugin = "nope";
    CHECK(ah_host_record_tune(h, &bad, 1, &err) == AH_ERR_NOT_FOUND);
    ah_host_destroy(h);
    /* no scan cache: no table, nothing written */
    h = host_with("measured", NULL, "");
    bad.plugin = "spd_fast";
    CHECK(ah_host_record_tune(h, &bad, 1, &err) == AH_ERR_IO);
    CHECK_CONTAINS(err.msg, "no scan cache");
    ah_host_destroy(h);
    ah_model_destroy(m);

    /* forced and explicit lists are never reordered */
    CHECK_STREQ(winner("measured", "force = spd_slow\n", model_text, D, buf, sizeof buf),
                "spd_slow");
    CHECK_STREQ(
        winner("measured", "priority = spd_slow, spd_fast\n", model_text, D, buf, sizeof buf),
        "spd_slow");

    /* a tie within 3% keeps the priority order */
    record(1.0, 1.02, "d16x4096", D);
    CHECK_STREQ(winner("measured", NULL, model_text, D, buf, sizeof buf), "spd_slow");
    record(1.0, 1.05, "d16x4096", D);
    CHECK_STREQ(winner("measured", NULL, model_text, D, buf, sizeof buf), "spd_fast");

    /* tuned on different steps: not comparable, the priority order */
    record(1.0, 5.0, "d4x128", D);
    CHECK_STREQ(winner("measured", NULL, model_text, D, buf, sizeof buf), "spd_slow");

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return check_report("test_tune");
}
