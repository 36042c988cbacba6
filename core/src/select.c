/*
 * Selection: for every layer and phase, the cached decision for that
 * layer's spec and priority list, the model's CUDA-graph level (the
 * minimum over its bound layers, overall and per phase) and the warnings
 * of fallback = warn.
 * Decode shares the KV cache with prefill, so its layout and block size are
 * pinned to the prefill winner's. A KV-cache group's layers share one block
 * table, so `block_size = auto` resolves per group, before the layers are
 * selected (resolve_group_sizes).
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
    char *warnings;             /* fallback = warn lines; "" when none */
    ah_graph_level graph_level; /* both phases */
    char *error;                /* ah_host_explain's selection that failed; NULL when none */
    uint32_t graph_layer;
    ah_graph_level phase_level[AH_PHASE_COUNT]; /* one phase's winners */
    uint32_t phase_layer[AH_PHASE_COUNT];
    ah_layer_kind *kinds; /* per layer, copied from the model */
    /* ABI 2.3: KV-cache layout. Per KV-cache group: the block size its
     * layers run with, 0 until known, and how it was chosen. */
    uint32_t n_groups;
    uint32_t *group_bs;
    char (*group_how)[256];
    /* ABI 2.3: per layer, the decision for its ragged prefill form (NULL:
     * none) and whether that form is bound (a winner on the device kind of
     * the layer's prefill winner, whose device holds the engine's tensors) */
    const ah_decision **ragged;
    uint8_t *ragged_bound;
};

/* Layer kinds: the decision of a non-attention layer, the same for every
 * such layer of its kind and both phases (plugin NULL, no candidates). */
static const ah_decision kind_decisions[AH_LAYER_KIND_COUNT] = {
    [AH_LAYER_MAMBA] = {.list_source = "mamba layer: not attention"},
    [AH_LAYER_LINEAR_ATTENTION] = {.list_source = "linear_attention layer: not attention"},
    [AH_LAYER_GDN] = {.list_source = "gdn layer: not attention"},
    [AH_LAYER_MLP_ONLY] = {.list_source = "mlp_only layer: not attention"},
    [AH_LAYER_OTHER] = {.list_source = "other layer: not attention"},
};

void ah_selection_destroy(ah_selection *s)
{
    if (!s) return;
    for (int p = 0; p < AH_PHASE_COUNT; p++) ah__free(s->dec[p]);
    ah__free(s->kinds);
    ah__free(s->group_bs);
    ah__free(s->group_how);
    ah__free(s->ragged);
    ah__free(s->ragged_bound);
    ah__free(s->warnings);
    ah__free(s->error);
    ah__free(s);
}

/* "layer 3 (prefill): no backend can serve it: gpu_a: head_size 80 not
 * in {64, 128, 256}; cpu_b: ..." */
static void explain_failure(const ah_decision *d, uint32_t layer, ah_phase phase,
                            const char *forced, ah_error *err)
{
    size_t len =
        (size_t)snprintf(err->msg, sizeof err->msg, "layer %u (%s): %s", layer,
                         phase == AH_PHASE_PREFILL ? "prefill" : "decode",
                         forced ? "the forced backend cannot serve it" : "no backend can serve it");
    if (forced && len < sizeof err->msg)
        len += (size_t)snprintf(err->msg + len, sizeof err->msg - len,
                                " (%s, never swapped silently)", d->list_source);
    for (uint32_t c = 0; c < d->n_candidates && len < sizeof err->msg; c++) {
        const ah_candidate *cd = &d->candidates[c];
        len += (size_t)snprintf(err->msg + len, sizeof err->msg - len, "%s %s:", c ? ";" : "",
                                cd->plugin);
        for (uint32_t r = 0; r < cd->n_reasons && len < sizeof err->msg; r++)
            len += (size_t)snprintf(err->msg + len, sizeof err->msg - len,
                                    "%s %s=%s (supported: %s)", r ? "," : "", cd->reasons[r].field,
                                    cd->reasons[r].value, cd->reasons[r].supported);
    }
    if (!d->n_candidates && len < sizeof err->msg)
        snprintf(err->msg + len, sizeof err->msg - len, ": the priority list (%s) is empty",
                 d->list_source);
}

/* A CPU fallback: the winner runs on the CPU while GPU plugins that are
 * available here came before it in the list and refused the layer (a
 * disabled one does not count: the configuration chose that). Writes
 * "fake_cuda_dev: head_size = 80 (supported: {64, 128}); ..." into why. */
static int cpu_fallback(const ah_host *h, const ah_decision *d, ah_strbuf *why)
{
    const ah_plugin_info *win = ah_host_find_plugin(h, d->plugin);
    if (!win || win->device_kind != AH_DEVICE_CPU) return 0;
    int found = 0;
    for (uint32_t c = 0; c < d->n_candidates && !d->candidates[c].chosen; c++) {
        const ah_candidate *cd = &d->candidates[c];
        const ah_plugin_info *in = ah_host_find_plugin(h, cd->plugin);
        if (!in || in->state != AH_PLUGIN_AVAILABLE || in->device_kind == AH_DEVICE_CPU) continue;
        int disabled = 0;
        for (uint32_t r = 0; r < cd->n_reasons; r++)
            disabled |= cd->reasons[r].code == AH_REASON_DISABLED;
        if (disabled || !cd->n_reasons) continue;
        ah__strbuf_printf(why, "%s%s:", found ? "; " : "", cd->plugin);
        for (uint32_t r = 0; r < cd->n_reasons; r++)
            ah__strbuf_printf(why, "%s %s = %s (supported: %s)", r ? "," : "", cd->reasons[r].field,
                              cd->reasons[r].value, cd->reasons[r].supported);
        found = 1;
    }
    return found;
}

/* The plugins a caller forces, per phase, and for the ragged prefill forms
 * (NULL: none; ragged NULL: the forms take the prefill phase's). */
typedef struct forcing {
    const char *by_phase[AH_PHASE_COUNT];
    const char *ragged;
} forcing;

/* The candidate list of layer l in phase p: the plugin forced, or the
 * most specific priority list. -1 on out-of-memory (lp freed). */
static int layer_plan(const ah_host *h, uint32_t l, ah_phase p, const forcing *f, ah_layer_plan *lp)
{
    const char *forced = f->by_phase[p];
    if (!forced) {
        if (!ah__plan_for_layer(h, l, p, lp)) return 0;
        ah__free(lp->list.items);
        return -1;
    }
    memset(lp, 0, sizeof *lp);
    lp->forced = forced;
    lp->phase = p;
    snprintf(lp->source, sizeof lp->source, "forced by the caller");
    return ah__names_push(&lp->list, forced);
}

/* Layer l's decision in phase p for spec (decode pinned to prefill), and
 * in *forced (may be NULL) the backend its list forces, or NULL; NULL on
 * out-of-memory. */
static const ah_decision *decide(ah_host *h, uint32_t l, ah_phase p, const forcing *f,
                                 const ah_layer_spec *spec, const ah_decision *prefill,
                                 const char **forced)
{
    ah_layer_plan lp;
    if (layer_plan(h, l, p, f, &lp)) return NULL;
    const ah_decision *d =
        ah__decision_for(h, spec, prefill && prefill->plugin ? &prefill->spec : NULL, &lp);
    if (forced) *forced = lp.forced;
    ah__free(lp.list.items);
    return d;
}

/* The layer's spec as selected: its group's block size for block_size =
 * auto, once the group's size is known. */
static ah_layer_spec layer_spec(const ah_selection *s, const ah_model *m, uint32_t l)
{
    ah_layer_spec sp = *ah_model_layer(m, l);
    const uint32_t g = ah_spec_kv_group(&sp);
    if (sp.block_size == AH_BLOCK_SIZE_AUTO && !ah_spec_cacheless(&sp) && g < s->n_groups &&
        s->group_bs[g])
        sp.block_size = s->group_bs[g];
    return sp;
}

static int cache_layer(const ah_model *m, uint32_t l, uint32_t g)
{
    const ah_layer_spec *sp = ah_model_layer(m, l);
    return ah_model_layer_kind(m, l) == AH_LAYER_ATTENTION && !ah_spec_cacheless(sp) &&
           ah_spec_kv_group(sp) == g;
}

/* 1 when every cache layer of group g has a winner in both phases with
 * block size bs; *bad (when 0) names the first layer that has none. -1 on
 * out-of-memory. */
static int group_served(ah_host *h, const ah_model *m, uint32_t g, uint32_t bs, const forcing *f,
                        uint32_t *bad)
{
    for (uint32_t l = 0; l < ah_model_num_layers(m); l++) {
        if (!cache_layer(m, l, g)) continue;
        ah_layer_spec sp = *ah_model_layer(m, l);
        sp.block_size = bs;
        const ah_decision *pre = decide(h, l, AH_PHASE_PREFILL, f, &sp, NULL, NULL);
        const ah_decision *dec =
            pre && pre->plugin ? decide(h, l, AH_PHASE_DECODE, f, &sp, pre, NULL) : pre;
        if (!dec) return -1;
        if (!pre->plugin || !dec->plugin) {
            *bad = l;
            return 0;
        }
    }
    return 1;
}

/* block_size = auto (ABI 2.3): each group whose layers say auto takes the
 * preferred size of its first layer's prefill winner when every layer of
 * the group can be served at it (a backend that lacks the size may still
 * win another layer: the kernel-block split, or a lower-priority backend),
 * else the next layer's winner's size, and so on. A group no such size
 * serves fails the selection, naming each size tried and the layer it
 * left unserved; its layers are then selected at their own preferred
 * sizes, so explain still shows every decision. -1 on out-of-memory. */
static int resolve_group_sizes(ah_host *h, const ah_model *m, ah_selection *s, const forcing *f,
                               ah_status *failed, ah_error *err)
{
    for (uint32_t g = 0; g < s->n_groups; g++) {
        uint32_t first = UINT32_MAX;
        for (uint32_t l = 0; l < ah_model_num_layers(m) && first == UINT32_MAX; l++)
            if (cache_layer(m, l, g)) first = l;
        if (first == UINT32_MAX) continue;
        if (ah_model_layer(m, first)->block_size != AH_BLOCK_SIZE_AUTO) {
            s->group_bs[g] = ah_model_layer(m, first)->block_size;
            snprintf(s->group_how[g], sizeof s->group_how[g], "set in the model");
            continue;
        }
        ah_strbuf tried = {0};
        uint32_t seen[16], n_seen = 0;
        for (uint32_t l = first; l < ah_model_num_layers(m) && !s->group_bs[g]; l++) {
            if (!cache_layer(m, l, g)) continue;
            const ah_decision *d =
                decide(h, l, AH_PHASE_PREFILL, f, ah_model_layer(m, l), NULL, NULL);
            if (!d) goto oom;
            if (!d->plugin) continue; /* the layer's own failure is reported later */
            const uint32_t bs = d->spec.block_size;
            int dup = 0;
            for (uint32_t i = 0; i < n_seen; i++) dup |= seen[i] == bs;
            if (dup) continue;
            if (n_seen < sizeof seen / sizeof *seen) seen[n_seen++] = bs;
            uint32_t bad = 0;
            int ok = group_served(h, m, g, bs, f, &bad);
            if (ok < 0) goto oom;
            if (ok) {
                s->group_bs[g] = bs;
                snprintf(s->group_how[g], sizeof s->group_how[g],
                         "auto: the preferred size of layer %u's prefill winner %s", l, d->plugin);
            } else {
                ah__strbuf_printf(&tried, "%s%u (layer %u's %s; layer %u has no backend at it)",
                                  n_seen > 1 ? ", " : "", bs, l, d->plugin, bad);
            }
        }
        if (!s->group_bs[g] && tried.data && !*failed) {
            snprintf(err->msg, sizeof err->msg,
                     "kv_group %u: block_size = auto, but no block size serves every layer of the "
                     "group (they share one block table); tried %s: set block_size in the model",
                     g, tried.data);
            *failed = AH_ERR_NOT_FOUND;
        }
        if (tried.failed) goto oom;
        ah__free(tried.data);
        continue;
    oom:
        ah__free(tried.data);
        return -1;
    }
    return 0;
}

/* Why a ragged form with decision d is not bound beside the prefill
 * winner prefill (static or into buf), or NULL when it is bound. */
static const char *ragged_unbound(const ah_host *h, const ah_decision *d,
                                  const ah_decision *prefill, char *buf, size_t cap)
{
    if (!d->plugin) {
        const ah_candidate *c = d->n_candidates ? &d->candidates[0] : NULL;
        if (!c || !c->n_reasons) return "no backend can serve it (empty priority list)";
        snprintf(buf, cap, "no backend can serve it (%s: %s = %s, supported: %s)", c->plugin,
                 c->reasons[0].field, c->reasons[0].value, c->reasons[0].supported);
        return buf;
    }
    if (!prefill->plugin) return "the layer's paged form has no prefill winner";
    const ah_plugin_info *r = ah_host_find_plugin(h, d->plugin);
    const ah_plugin_info *p = ah_host_find_plugin(h, prefill->plugin);
    if (p->device_kind == r->device_kind) return NULL;
    snprintf(buf, cap,
             "its only backend %s runs on %s while the layer's prefill winner %s runs on %s, "
             "where the engine's tensors live",
             d->plugin, ah_device_kind_str(r->device_kind), prefill->plugin,
             ah_device_kind_str(p->device_kind));
    return buf;
}

static ah_status select_impl(ah_host *h, const ah_model *m, const forcing *f, int keep_going,
                             ah_selection **out, ah_error *err)
{
    *out = NULL;
    err->msg[0] = '\0';
    ah_status failed = AH_OK; /* the first layer that could not be served */
    uint32_t n = ah_model_num_layers(m);
    ah_strbuf warn = {0};
    ah_selection *s = ah__calloc(1, sizeof *s);
    if (!s) goto oom;
    s->num_layers = n;
    s->graph_level = AH_GRAPH_ALWAYS;
    for (int p = 0; p < AH_PHASE_COUNT; p++) s->phase_level[p] = AH_GRAPH_ALWAYS;
    for (int p = 0; p < AH_PHASE_COUNT; p++)
        if (!(s->dec[p] = ah__calloc(n ? n : 1, sizeof *s->dec[p]))) goto oom;
    if (!(s->kinds = ah__calloc(n ? n : 1, sizeof *s->kinds)) ||
        !(s->ragged = ah__calloc(n ? n : 1, sizeof *s->ragged)) ||
        !(s->ragged_bound = ah__calloc(n ? n : 1, 1)))
        goto oom;
    s->n_groups = ah_model_num_kv_groups(m);
    if (!(s->group_bs = ah__calloc(s->n_groups ? s->n_groups : 1, sizeof *s->group_bs)) ||
        !(s->group_how = ah__calloc(s->n_groups ? s->n_groups : 1, sizeof *s->group_how)))
        goto oom;
    if (resolve_group_sizes(h, m, s, f, &failed, err)) goto oom;
    if (failed && !keep_going) goto failure;
    uint32_t n_attention = 0;
    uint32_t n_unbound = 0, first_unbound = 0; /* ragged forms left unbound */
    char unbound_why[512] = "";

    for (uint32_t l = 0; l < n; l++) {
        /* a non-attention layer of a hybrid model: never selected */
        const ah_layer_kind kind = ah_model_layer_kind(m, l);
        s->kinds[l] = kind;
        if (kind != AH_LAYER_ATTENTION) {
            for (int p = 0; p < AH_PHASE_COUNT; p++) s->dec[p][l] = &kind_decisions[kind];
            continue;
        }
        if (!n_attention++) /* the levels' layer until one lowers them */
            s->graph_layer = s->phase_layer[0] = s->phase_layer[1] = l;
        const ah_layer_spec spec = layer_spec(s, m, l);
        const ah_decision *prefill = NULL;
        for (int p = 0; p < AH_PHASE_COUNT; p++) {
            /* decode shares the KV cache with prefill: pin its layout and block size */
            const char *forced_by = NULL;
            const ah_decision *d = decide(h, l, (ah_phase)p, f, &spec, prefill, &forced_by);
            if (!d) goto oom;
            const int forced = forced_by != NULL;
            s->dec[p][l] = d;
            if (p == AH_PHASE_PREFILL) prefill = d;
            const char *phase = p == AH_PHASE_PREFILL ? "prefill" : "decode";
            if (!d->plugin) {
                if (!failed) {
                    explain_failure(d, l, (ah_phase)p, forced_by, err);
                    failed = forced ? AH_ERR_UNSUPPORTED : AH_ERR_NOT_FOUND;
                }
                if (!keep_going) goto failure;
                continue;
            }
            ah_strbuf why = {0};
            int cpu =
                !forced && h->config.fallback != AH_FALLBACK_ALLOW && cpu_fallback(h, d, &why);
            if (why.failed) {
                ah__free(why.data);
                goto oom;
            }
            if (cpu && h->config.fallback == AH_FALLBACK_ERROR) {
                if (!failed) {
                    snprintf(err->msg, sizeof err->msg,
                             "layer %u (%s): only the CPU backend %s can serve it and [select] "
                             "fallback = error; the GPU backends refused it: %s",
                             l, phase, d->plugin, why.data);
                    failed = AH_ERR_NOT_FOUND;
                }
                ah__free(why.data);
                if (!keep_going) goto failure;
                continue;
            }
            if (cpu)
                ah__strbuf_printf(&warn,
                                  "layer %u (%s): fell back to the CPU backend %s although a "
                                  "GPU backend is available; the GPU backends refused it: %s\n",
                                  l, phase, d->plugin, why.data);
            else if (d->fallback && h->config.fallback == AH_FALLBACK_WARN)
                ah__strbuf_printf(&warn,
                                  "layer %u (%s): no listed backend fits (%s); fell back to %s\n",
                                  l, phase, d->list_source, d->plugin);
            ah__free(why.data);
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
        /* The ragged prefill form, from the prefill list. Optional: left
         * unbound, it fails nothing (ragged steps are refused, prefill
         * runs on the paged form), and it bounds no CUDA-graph level (a
         * ragged step is planned eager). */
        const ah_layer_spec *rf = ah_model_layer_ragged(m, l);
        if (!rf || !prefill) continue;
        forcing fr = *f;
        if (f->ragged) fr.by_phase[AH_PHASE_PREFILL] = f->ragged;
        const ah_decision *rd = decide(h, l, AH_PHASE_PREFILL, &fr, rf, NULL, NULL);
        if (!rd) goto oom;
        s->ragged[l] = rd;
        char why[400];
        const char *no = ragged_unbound(h, rd, prefill, why, sizeof why);
        s->ragged_bound[l] = !no;
        if (no && !n_unbound++) {
            first_unbound = l;
            snprintf(unbound_why, sizeof unbound_why, "%s", no);
        }
    }
    if (n_unbound && h->config.fallback == AH_FALLBACK_WARN)
        ah__strbuf_printf(&warn,
                          "%u layer(s) keep their ragged prefill form unbound (first: layer %u: "
                          "%s): a batch with cu_seqlens_k is refused for them and prefill runs "
                          "on the paged form\n",
                          n_unbound, first_unbound, unbound_why);
    if (!n_attention) s->graph_level = s->phase_level[0] = s->phase_level[1] = AH_GRAPH_NEVER;
    if (!(s->warnings = ah__strbuf_take(&warn))) goto oom;
    if (failed && !keep_going) {
        ah_selection_destroy(s);
        return failed;
    }
    if (failed && !(s->error = ah__strdup(err->msg))) goto oom;
    *out = s;
    return failed;
failure:
    ah__free(warn.data);
    ah_selection_destroy(s);
    return failed;
oom:
    ah__free(warn.data);
    ah_selection_destroy(s);
    snprintf(err->msg, sizeof err->msg, "out of memory while selecting backends");
    return AH_ERR_OUT_OF_MEMORY;
}

ah_status ah_host_select(ah_host *h, const ah_model *m, ah_selection **out, ah_error *err)
{
    const forcing none = {{NULL, NULL}, NULL};
    return select_impl(h, m, &none, 0, out, err);
}

ah_status ah_host_select_forced(ah_host *h, const ah_model *m, const char *plugin,
                                ah_selection **out, ah_error *err)
{
    const forcing f = {{plugin, plugin}, NULL};
    return select_impl(h, m, &f, 0, out, err);
}

ah_status ah_host_select_pair(ah_host *h, const ah_model *m, const char *decode_plugin,
                              const char *prefill_plugin, ah_selection **out, ah_error *err)
{
    forcing f;
    f.by_phase[AH_PHASE_DECODE] = decode_plugin;
    f.by_phase[AH_PHASE_PREFILL] = prefill_plugin;
    f.ragged = NULL;
    return select_impl(h, m, &f, 0, out, err);
}

ah_status ah_host_select_ragged(ah_host *h, const ah_model *m, const char *ragged_plugin,
                                ah_selection **out, ah_error *err)
{
    const forcing f = {{NULL, NULL}, ragged_plugin};
    return select_impl(h, m, &f, 0, out, err);
}

ah_status ah_host_explain(ah_host *h, const ah_model *m, const char *plugin, ah_selection **out,
                          ah_error *err)
{
    const forcing f = {{plugin, plugin}, NULL};
    ah_status s = select_impl(h, m, &f, 1, out, err);
    if (s == AH_ERR_OUT_OF_MEMORY) *out = NULL;
    return s;
}

uint32_t ah_selection_num_layers(const ah_selection *s) { return s->num_layers; }

ah_layer_kind ah_selection_layer_kind(const ah_selection *s, uint32_t layer)
{
    return s && layer < s->num_layers ? s->kinds[layer] : AH_LAYER_KIND_COUNT;
}

const ah_decision *ah_selection_decision(const ah_selection *s, uint32_t layer, ah_phase phase)
{
    if (layer >= s->num_layers || (unsigned)phase >= AH_PHASE_COUNT) return NULL;
    return s->dec[phase][layer];
}

const ah_decision *ah_selection_ragged_decision(const ah_selection *s, uint32_t layer)
{
    return s && layer < s->num_layers ? s->ragged[layer] : NULL;
}

int ah_selection_ragged_bound(const ah_selection *s, uint32_t layer)
{
    return s && layer < s->num_layers && s->ragged_bound[layer];
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

uint32_t ah_selection_kv_group_block_size(const ah_selection *s, uint32_t group, const char **how)
{
    const int known = s && group < s->n_groups && s->group_bs[group];
    if (how) *how = known ? s->group_how[group] : "";
    return known ? s->group_bs[group] : 0;
}

const char *ah__selection_error(const ah_selection *s) { return s->error; }
