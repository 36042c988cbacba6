/*
 * Selection: for every layer and phase, the cached decision for that
 * layer's spec and priority list, the model's CUDA-graph level (the
 * minimum over its bound layers, overall and per phase) and the warnings
 * of fallback = warn.
 * Decode shares the KV cache with prefill, so its layout and block size are
 * pinned to the prefill winner's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "select_int.h"
#include "strbuf.h"

#include <attnhost/plugin_util.h>

struct ah_selection {
    uint32_t num_layers;
    const ah_decision **dec[AH_PHASE_COUNT];
    char *warnings;     /* fallback = warn lines; "" when none */
    ah_graph_level graph_level;     /* both phases */
    uint32_t graph_layer;
    ah_graph_level phase_level[AH_PHASE_COUNT]; /* one phase's winners */
    uint32_t phase_layer[AH_PHASE_COUNT];
};

void ah_selection_destroy(ah_selection *s)
{
    if (!s) return;
    for (int p = 0; p < AH_PHASE_COUNT; p++) ah__free(s->dec[p]);
    ah__free(s->warnings);
    ah__free(s);
}

/* "layer 3 (prefill): no backend can serve it: gpu_a: head_size 80 not
 * in {64, 128, 256}; cpu_b: ..." */
static void explain_failure(const ah_decision *d, uint32_t layer, ah_phase phase, const char *forced,
                            ah_error *err)
{
    size_t len = (size_t)snprintf(err->msg, sizeof err->msg, "layer %u (%s): %s", layer,
                                  phase == AH_PHASE_PREFILL ? "prefill" : "decode",
                                  forced ? "the forced backend cannot serve it" : "no backend can serve it");
    if (forced && len < sizeof err->msg)
        len += (size_t)snprintf(err->msg + len, sizeof err->msg - len, " (%s, never swapped silently)",
                                d->list_source);
    for (uint32_t c = 0; c < d->n_candidates && len < sizeof err->msg; c++) {
        const ah_candidate *cd = &d->candidates[c];
        len += (size_t)snprintf(err->msg + len, sizeof err->msg - len, "%s %s:", c ? ";" : "",
                                cd->plugin);
        for (uint32_t r = 0; r < cd->n_reasons && len < sizeof err->msg; r++)
            len += (size_t)snprintf(err->msg + len, sizeof err->msg - len, "%s %s=%s (supported: %s)",
                                    r ? "," : "", cd->reasons[r].field, cd->reasons[r].value,
                                    cd->reasons[r].supported);
    }
    if (!d->n_candidates && len < sizeof err->msg)
        snprintf(err->msg + len, sizeof err->msg - len, ": the priority list (%s) is empty",
                 d->list_source);
}

static ah_status select_impl(ah_host *h, const ah_model *m, const char *forced_all,
                             ah_selection **out, ah_error *err)
{
    *out = NULL;
    err->msg[0] = '\0';
    uint32_t n = ah_model_num_layers(m);
    ah_strbuf warn = {0};
    ah_selection *s = ah__calloc(1, sizeof *s);
    if (!s) goto oom;
    s->num_layers = n;
    s->graph_level = AH_GRAPH_ALWAYS;
    for (int p = 0; p < AH_PHASE_COUNT; p++) s->phase_level[p] = AH_GRAPH_ALWAYS;
    for (int p = 0; p < AH_PHASE_COUNT; p++)
        if (!(s->dec[p] = ah__calloc(n ? n : 1, sizeof *s->dec[p]))) goto oom;

    for (uint32_t l = 0; l < n; l++) {
        const ah_layer_spec *spec = ah_model_layer(m, l);
        const ah_decision *prefill = NULL;
        for (int p = 0; p < AH_PHASE_COUNT; p++) {
            ah_layer_plan lp;
            if (forced_all) {
                memset(&lp, 0, sizeof lp);
                lp.forced = forced_all;
                lp.phase = (ah_phase)p;
                snprintf(lp.source, sizeof lp.source, "forced by the caller");
                if (ah__names_push(&lp.list, forced_all)) goto oom;
            } else if (ah__plan_for_layer(h, l, (ah_phase)p, &lp)) {
                ah__free(lp.list.items);
                goto oom;
            }
            /* decode shares the KV cache with prefill: pin its layout and block size */
            const ah_decision *d = ah__decision_for(h, spec, prefill && prefill->plugin ? &prefill->spec : NULL, &lp);
            ah__free(lp.list.items);
            if (!d) goto oom;
            if (!d->plugin) {
                explain_failure(d, l, (ah_phase)p, lp.forced, err);
                ah__free(warn.data);
                ah_selection_destroy(s);
                return lp.forced ? AH_ERR_UNSUPPORTED : AH_ERR_NOT_FOUND;
            }
            if (d->fallback && h->config.fallback == AH_FALLBACK_WARN)
                ah__strbuf_printf(&warn, "layer %u (%s): no listed backend fits (%s); fell back to %s\n",
                                  l, p == AH_PHASE_PREFILL ? "prefill" : "decode", d->list_source,
                                  d->plugin);
            s->dec[p][l] = d;
            if (p == AH_PHASE_PREFILL) prefill = d;
            const ah_plugin_info *in = ah_host_find_plugin(h, d->plugin);
            if (in->caps->graph_level < s->graph_level) {
                s->graph_level = in->caps->graph_level;
                s->graph_layer = l;
            }
            if (in->caps->graph_level < s->phase_level[p]) {
                s->phase_level[p] = in->caps->graph_level;
                s->phase_layer[p] = l;
            }
        }
    }
    if (!n) s->graph_level = s->phase_level[0] = s->phase_level[1] = AH_GRAPH_NEVER;
    if (!(s->warnings = ah__strbuf_take(&warn))) goto oom;
    *out = s;
    return AH_OK;
oom:
    ah__free(warn.data);
    ah_selection_destroy(s);
    snprintf(err->msg, sizeof err->msg, "out of memory while selecting backends");
    return AH_ERR_OUT_OF_MEMORY;
}

ah_status ah_host_select(ah_host *h, const ah_model *m, ah_selection **out, ah_error *err)
{
    return select_impl(h, m, NULL, out, err);
}

ah_status ah_host_select_forced(ah_host *h, const ah_model *m, const char *plugin,
                                ah_selection **out, ah_error *err)
{
    return select_impl(h, m, plugin, out, err);
}

uint32_t ah_selection_num_layers(const ah_selection *s) { return s->num_layers; }

const ah_decision *ah_selection_decision(const ah_selection *s, uint32_t layer, ah_phase phase)
{
    if (layer >= s->num_layers || (unsigned)phase >= AH_PHASE_COUNT) return NULL;
    return s->dec[phase][layer];
}

ah_graph_level ah_selection_graph_level(const ah_selection *s, uint32_t *layer)
{
    if (layer) *layer = s->graph_layer;
    return s->graph_level;
}

ah_graph_level ah_selection_graph_level_for(const ah_selection *s, ah_phase phase, uint32_t *layer)
{
    if ((unsigned)phase >= AH_PHASE_COUNT) {
        if (layer) *layer = 0;
        return AH_GRAPH_NEVER;
    }
    if (layer) *layer = s->phase_layer[phase];
    return s->phase_level[phase];
}

const char *ah_selection_warnings(const ah_selection *s) { return s->warnings; }

