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

/* The ragged prefill form rf of m1's layer on each plugin that serves it
 * beside the default paged forms (GPU before CPU stands, as for the
 * phases), at the prefill steps: a prefill entry of spec rf per plugin at
 * out[*n]. -1 when a timing failed. */
static int tune_ragged(const cli_common *c, ah_host *h, const ah_model *m1, const ah_layer_spec *rf,
                       const zoo_step *st, uint32_t n_steps, const char *steps_text, uint32_t iters,
                       ah_tune_entry *out, size_t *n)
{
    ah_selection *sels[64];
    const ah_plugin_info *cand[64];
    const uint32_t nc = zoo_ragged_candidates(h, m1, c->plugin, sels, cand, 64);
    /* only plugins of the default order: the measured order reorders it */
    int gpu = 0, rc = 0;
    for (uint32_t k = 0; k < nc; k++)
        gpu |= cand[k]->caps->prefill_rank != AH_RANK_NONE && cand[k]->device_kind != AH_DEVICE_CPU;
    const char *best_name = NULL;
    double best = -1;
    for (uint32_t k = 0; k < nc; k++) {
        double total;
        if (cand[k]->caps->prefill_rank == AH_RANK_NONE) {
            ah_selection_destroy(sels[k]);
            continue;
        }
        if (gpu && cand[k]->device_kind == AH_DEVICE_CPU) {
            printf("  %-8s %-18s skipped: a GPU plugin serves this form\n", "ragged",
                   cand[k]->name);
        } else {
            printf("  %-8s %-18s", "ragged", cand[k]->name);
            if (time_steps(h, m1, sels[k], st, n_steps, iters, 1, &total)) {
                rc = -1;
            } else if (total > 0) {
                printf("  = %.4g ms\n", total);
                out[(*n)++] = (ah_tune_entry){.struct_size = sizeof(ah_tune_entry),
                                              .plugin = cand[k]->name,
                                              .spec = rf,
                                              .phase = AH_PHASE_PREFILL,
                                              .ms = total,
                                              .steps = steps_text}; /* a phase entry */
                if (best < 0 || total < best) best = total, best_name = cand[k]->name;
            } else {
                printf("\n");
            }
        }
        ah_selection_destroy(sels[k]);
    }
    if (best_name) printf("  %-8s fastest: %s\n", "ragged", best_name);
    return rc;
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
        for (int p = 0; p < AH_PHASE_COUNT; p++) {
            const char *phase = p == AH_PHASE_PREFILL ? "prefill" : "decode";
            double best = -1;
            const char *best_name = NULL;
            /* the candidates: valid here, in the default order, and of the device
             * kind the default order puts first (policy measured reorders only those) */
            ah_selection *sels[64];
            const ah_plugin_info *cand[64];
            uint32_t nc = 0;
            int gpu = 0;
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
                gpu |= in->device_kind != AH_DEVICE_CPU;
            }
            for (uint32_t k = 0; k < nc; k++) {
                const ah_plugin_info *in = cand[k];
                ah_selection *sel = sels[k];
                if (gpu && in->device_kind == AH_DEVICE_CPU) { /* GPU before CPU stands */
                    printf("  %-8s %-18s skipped: a GPU plugin serves this spec\n", phase,
                           in->name);
                    ah_selection_destroy(sel);
                    continue;
                }
                double total = 0;
                printf("  %-8s %-18s", phase, in->name);
                const int ok = !time_steps(h, m1, sel, steps[p], n_steps[p], iters, 0, &total);
                ah_selection_destroy(sel);
                if (!ok) rc = 1;
                if (!ok || !(total > 0)) {
                    if (ok) printf("\n");
                    continue;
                }
                printf("  = %.4g ms\n", total);
                entries[n_entries++] = (ah_tune_entry){
                    sizeof(ah_tune_entry), in->name, sp, (ah_phase)p, total, steps_text[p],
                    AH_MIXED_STEPS_CONFIG, NULL};
                if (best < 0 || total < best) best = total, best_name = in->name;
            }
            if (best_name) printf("  %-8s fastest: %s\n", phase, best_name);
            fastest[p] = best_name;
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
        if (rf && tune_ragged(c, h, m1, rf, steps[AH_PHASE_PREFILL], n_steps[AH_PHASE_PREFILL],
                              steps_text[AH_PHASE_PREFILL], iters, entries, &n_entries))
            rc = 1;
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
