/*
 * attnhost tune: time every valid candidate of each distinct layer spec of
 * a model, per phase, at a few of the zoo's steps (zoo_tune_steps), and
 * record the times in the tune table beside the scan cache, for [select]
 * policy = measured. A candidate is a plugin available here that can serve
 * the spec in both phases (forced) and whose rank for the phase lets it
 * into the default order. The time of a (spec, phase) is the sum of its
 * steps' medians. The zoo's mixed step is timed too, for [select]
 * mixed_steps = measured: whole on each prefill candidate, and split
 * between each decode candidate and each other prefill candidate. A
 * layer's ragged prefill form (DeepSeek's) is timed on its own at the
 * prefill steps, on each plugin that serves it beside the default paged
 * forms, as a prefill entry of the form's spec.
 *
 *   attnhost tune [--model M] [--plugin P] [--quick] [--iters N]
 *                 [--max-context N] [--max-batch N] [--dry-run]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "cli.h"
#include "zoo.h"

/* The mixed step st of the one-layer model m1 whole on P (D NULL) or split
 * between D (its decodes) and P: an entry at *n when it ran so. -1 when
 * the timing failed. */
static int tune_mixed(ah_host *h, const ah_model *m1, const char *D, const char *P,
                      const zoo_step *st, uint32_t iters, ah_tune_entry *out, size_t *n)
{
    const ah_mixed_steps how = D ? AH_MIXED_STEPS_SPLIT : AH_MIXED_STEPS_WHOLE;
    ah_selection *sel = NULL;
    ah_error e;
    zoo_timing t;
    char why[512];
    int rc = 0;
    if (D) printf("  %-8s %-18s split with %s:", "mixed", P, D);
    else printf("  %-8s %-18s whole:", "mixed", P);
    ah_status s =
        D ? ah_host_select_pair(h, m1, D, P, &sel, &e) : ah_host_select_forced(h, m1, P, &sel, &e);
    if (s != AH_OK) printf(" not selectable: %s\n", e.msg);
    else if (zoo_time(h, m1, sel, st, how, (int)iters, 1, 0, &t, NULL, why, sizeof why)) {
        printf(" failed: %s\n", why);
        rc = -1;
    } else if (strcmp(t.mixed ? t.mixed : "", D ? "split" : "whole"))
        printf(" the binding ran it %s instead (attnhost explain says why)\n",
               D ? "whole" : "split");
    else {
        printf(" %s %.4g ms\n", st->name, t.ms);
        /* keyed on the layer as the selection resolved it for P, as bindings see it */
        const ah_layer_spec *rs = &ah_selection_decision(sel, 0, AH_PHASE_PREFILL)->spec;
        out[(*n)++] =
            (ah_tune_entry){sizeof(ah_tune_entry), P, rs, AH_PHASE_PREFILL, t.ms, st->name, how, D};
    }
    ah_selection_destroy(sel);
    return rc;
}

/* The steps st[0..n) of the one-layer model m1 through sel (ragged: as
 * ragged steps, each of which must run the form), each step's median
 * printed, their sum in *total; 0, or -1 when one failed (printed). */
static int time_steps(ah_host *h, const ah_model *m1, const ah_selection *sel, const zoo_step *st,
                      uint32_t n, uint32_t iters, int ragged, double *total)
{
    *total = 0;
    for (uint32_t s = 0; s < n; s++) {
        zoo_timing t;
        char why[512];
        if (zoo_time(h, m1, sel, &st[s], AH_MIXED_STEPS_CONFIG, (int)iters, 1, ragged, &t, NULL,
                     why, sizeof why)) {
            printf(" %s: failed: %s\n", st[s].name, why);
            return -1;
        }
        if (ragged && !t.ragged) {
            printf(" %s: failed: the step did not run the ragged form\n", st[s].name);
            return -1;
        }
        printf(" %s %.4g ms", st[s].name, t.ms);
        *total += t.ms;
    }
    return 0;
}

/* What one spec's timings share: its one-layer model, the runs per step,
 * the entries recorded so far (out[0..*n)), and whether one failed. */
typedef struct tune_set {
    ah_host *h;
    const ah_model *m1;
    uint32_t iters;
    ah_tune_entry *out;
    size_t *n;
    int failed;
} tune_set;

/* Time each candidate (plugin cand[k] through sels[k], destroyed here) at
 * the steps st[0..n_steps) named steps_text, the GPU plugins alone where
 * there are any (GPU before CPU stands in the default order, which the
 * measured order only reorders), as the ragged form when ragged: a phase
 * entry of spec per plugin timed, each printed under label. Returns the
 * fastest's name, or NULL. */
static const char *time_candidates(tune_set *t, const char *label, ah_selection **sels,
                                   const ah_plugin_info **cand, uint32_t nc, const zoo_step *st,
                                   uint32_t n_steps, const char *steps_text, int ragged,
                                   const ah_layer_spec *spec, ah_phase phase)
{
    int gpu = 0;
    for (uint32_t k = 0; k < nc; k++) gpu |= cand[k]->device_kind != AH_DEVICE_CPU;
    double best = -1;
    const char *best_name = NULL;
    for (uint32_t k = 0; k < nc; k++) {
        const ah_plugin_info *in = cand[k];
        double total = 0;
        if (gpu && in->device_kind == AH_DEVICE_CPU) {
            printf("  %-8s %-18s skipped: a GPU plugin serves this %s\n", label, in->name,
                   ragged ? "form" : "spec");
        } else {
            printf("  %-8s %-18s", label, in->name);
            if (time_steps(t->h, t->m1, sels[k], st, n_steps, t->iters, ragged, &total)) {
                t->failed = 1;
            } else if (!(total > 0)) {
                printf("\n");
            } else {
                printf("  = %.4g ms\n", total);
                t->out[(*t->n)++] =
                    (ah_tune_entry){sizeof(ah_tune_entry), in->name, spec, phase, total, steps_text,
                                    AH_MIXED_STEPS_CONFIG, NULL};
                if (best < 0 || total < best) best = total, best_name = in->name;
            }
        }
        ah_selection_destroy(sels[k]);
    }
    if (best_name) printf("  %-8s fastest: %s\n", label, best_name);
    return best_name;
}

/* The ragged prefill form rf of the spec's layer on each plugin of the
 * default prefill order that serves it beside the default paged forms, at
 * the prefill steps. */
static void tune_ragged(tune_set *t, const char *only, const ah_layer_spec *rf, const zoo_step *st,
                        uint32_t n_steps, const char *steps_text)
{
    ah_selection *sels[64];
    const ah_plugin_info *cand[64];
    uint32_t nc = zoo_ragged_candidates(t->h, t->m1, only, sels, cand, 64), kept = 0;
    for (uint32_t k = 0; k < nc; k++) {
        if (cand[k]->caps->prefill_rank == AH_RANK_NONE) { /* never in the default order */
            ah_selection_destroy(sels[k]);
            continue;
        }
        sels[kept] = sels[k], cand[kept++] = cand[k];
    }
    time_candidates(t, "ragged", sels, cand, kept, st, n_steps, steps_text, 1, rf,
                    AH_PHASE_PREFILL);
}

/* The mixed step's time among e[0..n): whole on P (D NULL) or split with
 * D; -1 when not there. */
static double mixed_ms(const ah_tune_entry *e, size_t n, const char *P, const char *D)
{
    for (size_t k = 0; k < n; k++)
        if (e[k].mixed != AH_MIXED_STEPS_CONFIG && !strcmp(e[k].plugin, P) &&
            (D ? e[k].decode_plugin && !strcmp(e[k].decode_plugin, D) : !e[k].decode_plugin))
            return e[k].ms;
    return -1;
}

int cmd_tune(cli_common *c)
{
    uint32_t iters = 10, max_ctx = 0, max_batch = 0;
    int quick = 0, dry = 0;
    for (int i = 0; i < c->argc; i++) {
        const char *a = c->argv[i], *v = i + 1 < c->argc ? c->argv[i + 1] : NULL;
        if (!strcmp(a, "--quick")) quick = 1;
        else if (!strcmp(a, "--dry-run")) dry = 1;
        else if (!strcmp(a, "--iters")) {
            if (cli_parse_count("tune", a, v, &iters)) return 2;
            i++;
        } else if (!strcmp(a, "--max-context")) {
            if (cli_parse_count("tune", a, v, &max_ctx)) return 2;
            i++;
        } else if (!strcmp(a, "--max-batch")) {
            if (cli_parse_count("tune", a, v, &max_batch)) return 2;
            i++;
        } else {
            fprintf(stderr, "attnhost tune: bad option '%s'\n", a);
            return 2;
        }
    }
    ah_host *h = cli_host(c);
    if (!h) return 1;
    ah_model *m = cli_model(c);
    if (!m) {
        ah_host_destroy(h);
        return 1;
    }
    if (*ah_host_tune_table_note(h))
        fprintf(stderr, "attnhost tune: warning: %s\n", ah_host_tune_table_note(h));
    uint32_t first_l[256], count[256];
    uint32_t ns = zoo_distinct_specs(m, first_l, count, 256);
    /* per spec: a phase entry per plugin and phase, one per plugin for the
     * ragged prefill form, a mixed-step entry per prefill plugin whole and
     * per pair split */
    const size_t np = ah_host_plugin_count(h);
    ah_tune_entry *entries =
        calloc((size_t)ns * (AH_PHASE_COUNT * np + np + np + np * np) + 1, sizeof *entries);
    char(*steps_text)[256] = calloc(AH_PHASE_COUNT, sizeof *steps_text);
    size_t n_entries = 0;
    int rc = 0;
    if (!entries || !steps_text) {
        fprintf(stderr, "attnhost tune: out of memory\n");
        rc = 1;
        goto out;
    }
    zoo_step steps[AH_PHASE_COUNT][8];
    uint32_t n_steps[AH_PHASE_COUNT];
    for (int p = 0; p < AH_PHASE_COUNT; p++) {
        n_steps[p] = zoo_tune_steps((ah_phase)p, quick, steps[p], 8);
        size_t len = 0;
        uint32_t kept = 0; /* clamped steps that became the same run once */
        for (uint32_t k = 0; k < n_steps[p]; k++) {
            zoo_clamp(&steps[p][k], max_ctx, max_batch);
            int dup = 0;
            for (uint32_t j = 0; j < kept && !dup; j++)
                dup = !strcmp(steps[p][j].name, steps[p][k].name);
            if (dup) continue;
            steps[p][kept] = steps[p][k];
            len += (size_t)snprintf(steps_text[p] + len, len < 256 ? 256 - len : 0, "%s%s",
                                    kept ? "," : "", steps[p][kept].name);
            kept++;
        }
        n_steps[p] = kept;
    }
    /* the mixed step (its name outlives the loop: the entries point at it) */
    zoo_step mixed;
    const int have_mixed = !zoo_tune_mixed_step(&mixed);
    if (have_mixed) zoo_clamp(&mixed, max_ctx, max_batch);
    printf("tune %s: %u distinct attention layer spec%s; decode steps %s, prefill steps %s, "
           "mixed step %s; median of %u runs each\n",
           ah_model_name(m), ns, ns == 1 ? "" : "s", steps_text[AH_PHASE_DECODE],
           steps_text[AH_PHASE_PREFILL], have_mixed ? mixed.name : "none", iters);
    for (uint32_t i = 0; i < ns; i++) {
        const ah_layer_spec *sp = ah_model_layer(m, first_l[i]);
        char label[160];
        zoo_layer_label(m, first_l[i], label, sizeof label);
        ah_error err;
        ah_model *m1 = zoo_one_layer(m, first_l[i], &err);
        if (!m1) {
            fprintf(stderr, "attnhost tune: layer %u: %s\n", first_l[i], err.msg);
            rc = 1;
            continue;
        }
        printf("\nspec %s (layer %u, %u layer%s)\n", label, first_l[i], count[i],
               count[i] == 1 ? "" : "s");
        const char *fastest[AH_PHASE_COUNT] = {NULL, NULL};
        const size_t n0 = n_entries; /* this spec's entries start here */
        tune_set ts = {h, m1, iters, entries, &n_entries, 0};
        for (int p = 0; p < AH_PHASE_COUNT; p++) {
            const char *phase = p == AH_PHASE_PREFILL ? "prefill" : "decode";
            /* the candidates: valid here, in the default order, and of the device
             * kind the default order puts first (policy measured reorders only those) */
            ah_selection *sels[64];
            const ah_plugin_info *cand[64];
            uint32_t nc = 0;
            for (size_t k = 0; k < ah_host_plugin_count(h) && nc < 64; k++) {
                const ah_plugin_info *in = ah_host_plugin(h, k);
                if (in->state != AH_PLUGIN_AVAILABLE || (c->plugin && strcmp(c->plugin, in->name)))
                    continue;
                uint32_t rank =
                    p == AH_PHASE_PREFILL ? in->caps->prefill_rank : in->caps->decode_rank;
                if (rank == AH_RANK_NONE) continue; /* never in the default order */
                ah_error e2;
                if (ah_host_select_forced(h, m1, in->name, &sels[nc], &e2) != AH_OK) continue;
                cand[nc++] = in;
            }
            fastest[p] = time_candidates(&ts, phase, sels, cand, nc, steps[p], n_steps[p],
                                         steps_text[p], 0, sp, (ah_phase)p);
        }
        /* the mixed step, wherever a decode candidate differs from a prefill
         * one: the candidates are this spec's phase entries, [n0, n1) */
        const size_t n1 = n_entries;
        int pairs = 0;
        for (size_t a = n0; a < n1; a++)
            for (size_t b = n0; b < n1; b++)
                pairs |= entries[a].phase == AH_PHASE_DECODE &&
                         entries[b].phase == AH_PHASE_PREFILL &&
                         strcmp(entries[a].plugin, entries[b].plugin);
        for (size_t b = n0; b < n1 && pairs && have_mixed; b++) {
            if (entries[b].phase != AH_PHASE_PREFILL) continue;
            const char *pre = entries[b].plugin;
            if (tune_mixed(h, m1, NULL, pre, &mixed, iters, entries, &n_entries)) rc = 1;
            for (size_t a = n0; a < n1; a++)
                if (entries[a].phase == AH_PHASE_DECODE && strcmp(entries[a].plugin, pre) &&
                    tune_mixed(h, m1, entries[a].plugin, pre, &mixed, iters, entries, &n_entries))
                    rc = 1;
        }
        const ah_layer_spec *rf = ah_model_layer_ragged(m, first_l[i]);
        if (rf)
            tune_ragged(&ts, c->plugin, rf, steps[AH_PHASE_PREFILL], n_steps[AH_PHASE_PREFILL],
                        steps_text[AH_PHASE_PREFILL]);
        if (ts.failed) rc = 1;
        const char *P = fastest[AH_PHASE_PREFILL], *D = fastest[AH_PHASE_DECODE];
        if (P && D && strcmp(P, D)) {
            const double w = mixed_ms(entries + n0, n_entries - n0, P, NULL),
                         split = mixed_ms(entries + n0, n_entries - n0, P, D);
            if (w > 0 && split > 0)
                printf("  %-8s the fastest pair (%s prefill, %s decode) runs it %s: %.4g ms "
                       "whole, %.4g ms split\n",
                       "mixed", P, D, w < split ? "whole" : "split", w, split);
        }
        /* the entries point at sp, which lives in m: record before m goes */
        ah_model_destroy(m1);
    }
    if (dry) printf("\n--dry-run: %zu measurements not recorded\n", n_entries);
    else if (n_entries) {
        ah_error err;
        if (ah_host_record_tune(h, entries, n_entries, &err) != AH_OK) {
            fprintf(stderr, "attnhost tune: warning: %s\n", err.msg);
            rc = 1;
        } else
            printf("\nrecorded %zu measurement%s in %s ([select] policy = measured uses them)\n",
                   n_entries, n_entries == 1 ? "" : "s", ah_host_tune_table_path(h));
    }
out:
    free(entries);
    free(steps_text);
    ah_model_destroy(m);
    ah_host_destroy(h);
    return rc;
}
