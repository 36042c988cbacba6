/*
 * Decisions: the full candidate table for one distinct (layer spec, pinned
 * KV layout, forced backend, priority list), computed once and cached in the
 * host for its lifetime, so binding an 80-layer model costs a handful of
 * evaluations. A decision is immutable once cached; selections point at it.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "select_int.h"
#include "strbuf.h"
#include "tune_table.h"

#include <attnhost/plugin_util.h>

typedef struct decision_entry {
    char *key;
    ah_decision d;
    ah_candidate *cands;
    ah_string_arena strings; /* every string the decision owns */
    double *ms;              /* [select] policy = measured: each candidate's time, < 0 none */
    struct decision_entry *next;
} decision_entry;

struct ah_decision_cache {
    decision_entry *head;
    uint32_t hits, misses;
};

static void entry_free(decision_entry *e)
{
    if (!e) return;
    for (uint32_t i = 0; i < e->d.n_candidates; i++) ah__free((void *)e->cands[i].reasons);
    ah__free(e->cands);
    ah__free(e->ms);
    ah__arena_free(&e->strings);
    ah__free(e->key);
    ah__free(e);
}

void ah__decision_cache_free(ah_decision_cache *c)
{
    if (!c) return;
    for (decision_entry *e = c->head, *n; e; e = n) {
        n = e->next;
        entry_free(e);
    }
    ah__free(c);
}

/* Keep s in the entry; NULL on out-of-memory. */
static char *decision_key(const ah_layer_spec *s, const ah_layer_spec *pin, const ah_layer_plan *p)
{
    ah_strbuf k = {0};
    /* causal and kv_group (ABI 2.1), ragged_kv and the scale forms (ABI
     * 2.3) travel in the decision's resolved spec, so layers that differ in
     * them need decisions of their own */
    ah__strbuf_printf(&k, "%d/%u/%u/%u/%u/%d/%d/%u/%d/%u/%a/%a/%u/%u/%u/%u/%u/%u/%u/%d/%d|",
                      s->attn_type, s->num_q_heads, s->num_kv_heads, s->qk_head_size,
                      s->v_head_size, s->q_dtype, s->kv_dtype, s->block_size, s->kv_layout,
                      s->sliding_window, s->softcap, s->scale, s->use_mla, s->use_sinks,
                      s->use_alibi, s->fp8_attention, ah_spec_causal(s) ? 1u : 0u,
                      ah_spec_kv_group(s), (uint32_t)ah_spec_ragged(s), (int)ah_spec_kv_scales(s),
                      ah_spec_q_scale(s));
    if (pin) ah__strbuf_printf(&k, "pin %d/%u|", pin->kv_layout, pin->block_size);
    ah__strbuf_printf(&k, "%d|%s|", (int)p->phase, p->forced ? p->forced : "");
    for (uint32_t i = 0; i < p->list.n; i++) ah__strbuf_printf(&k, "%s,", p->list.items[i]);
    return ah__strbuf_take(&k);
}

static int add_candidate(decision_entry *e, const char *name, ah_reason_list *r)
{
    ah_candidate *grown = ah__realloc(e->cands, (e->d.n_candidates + 1) * sizeof *grown);
    if (!grown) return -1;
    e->cands = grown;
    ah_candidate *c = &grown[e->d.n_candidates];
    memset(c, 0, sizeof *c);
    c->plugin = ah__arena_keep(&e->strings, name);
    if (!c->plugin) return -1;
    c->reasons = r->items;
    c->n_reasons = r->n;
    r->items = NULL;
    e->d.n_candidates++;
    e->d.candidates = e->cands;
    return 0;
}

/* Evaluate a list of candidates into e; returns the winner's index or -1. */
static int run_candidates(ah_host *h, decision_entry *e, const ah_name_list *names,
                          const ah_layer_spec *spec, const ah_layer_spec *pin, int *oom)
{
    int winner = -1;
    for (uint32_t k = 0; k < names->n; k++) {
        ah_reason_list r;
        ah__reason_list_init(&r, &e->strings);
        ah_layer_spec resolved;
        uint32_t kernel;
        ah__evaluate_candidate(h, names->items[k], spec, pin, &r, &resolved, &kernel);
        if (!r.n && !r.oom && winner >= 0)
            ah__reason_add(&r.sink, AH_REASON_LOST_ON_PRIORITY, "priority", e->cands[winner].plugin,
                           "a higher-priority candidate won");
        if (r.oom || add_candidate(e, names->items[k], &r)) {
            ah__free(r.items);
            *oom = 1;
            return -1;
        }
        if (!r.n && winner < 0) {
            winner = (int)e->d.n_candidates - 1;
            e->cands[winner].chosen = 1;
            e->d.plugin = e->cands[winner].plugin;
            e->d.spec = resolved;
            e->d.kernel_block_size = kernel;
        }
    }
    return winner;
}

/* ---- [select] policy = measured ------------------------------------------------
 * Only a default-order list is reordered, and only among the candidates that
 * passed every check and run on the device kind of the priority winner (the
 * default order's GPU-before-CPU stands; the measured time replaces the
 * rank): the fastest in the tune table wins, unless a candidate
 * earlier in the priority order is within MEASURED_TIE of it (a tie keeps
 * the priority order). Every valid candidate must be tuned, on the same
 * steps, or the priority order stands; the decision's list_source says
 * which happened and why. */
#define MEASURED_TIE 0.03

static int valid_candidate(const ah_candidate *c)
{
    return c->n_reasons == 0 ||
           (c->n_reasons == 1 && c->reasons[0].code == AH_REASON_LOST_ON_PRIORITY);
}

/* Set candidate k's only reason (a loser's). */
static int lost(decision_entry *e, uint32_t k, const char *field, const char *value,
                const char *supported)
{
    ah_candidate *c = &e->cands[k];
    ah__free((void *)c->reasons);
    c->reasons = NULL;
    c->n_reasons = 0;
    ah_reason_list r;
    ah__reason_list_init(&r, &e->strings);
    ah__reason_add(&r.sink, AH_REASON_LOST_ON_PRIORITY, field, value, supported);
    c->reasons = r.items;
    c->n_reasons = r.n;
    return r.oom ? -1 : 0;
}

static int measured_order(ah_host *h, decision_entry *e, const ah_layer_spec *spec,
                          const ah_layer_spec *pin, ah_phase phase, int winner)
{
    uint32_t n = e->d.n_candidates;
    if (!(e->ms = ah__malloc((n ? n : 1) * sizeof *e->ms))) return -1;
    int n_valid = 0, best = -1;
    const char *untuned = NULL, *why = NULL, *steps0 = NULL;
    int same_steps = 1;
    const ah_plugin_info *lead = ah_host_find_plugin(h, e->cands[winner].plugin);
    for (uint32_t k = 0; k < n; k++) {
        e->ms[k] = -1;
        if (!valid_candidate(&e->cands[k])) continue;
        /* GPU before CPU stays: only the priority winner's device kind is reordered */
        const ah_plugin_info *in = ah_host_find_plugin(h, e->cands[k].plugin);
        if (!in || !lead || in->device_kind != lead->device_kind) continue;
        n_valid++;
        const char *steps, *w;
        double ms;
        if (!ah__tune_lookup(h, e->cands[k].plugin, spec, phase, &ms, &steps, &w)) {
            if (!untuned) untuned = e->cands[k].plugin, why = w;
            continue;
        }
        e->ms[k] = ms;
        if (!steps0) steps0 = steps;
        else same_steps &= strcmp(steps0, steps) == 0;
        if (best < 0 || ms < e->ms[best]) best = (int)k;
    }
    char note[512];
    if (untuned)
        snprintf(note, sizeof note, "; policy measured: %s untuned (%s), priority order", untuned,
                 why ? why : "run attnhost tune");
    else if (!same_steps)
        snprintf(note, sizeof note,
                 "; policy measured: candidates tuned on different steps "
                 "(run attnhost tune again), priority order");
    else if (n_valid < 2) snprintf(note, sizeof note, "; policy measured: one valid candidate");
    else {
        int pick = best; /* the first in priority order within the tie margin */
        for (uint32_t k = 0; k < n; k++)
            if (e->ms[k] >= 0 && e->ms[k] <= e->ms[best] * (1 + MEASURED_TIE)) {
                pick = (int)k;
                break;
            }
        if (pick == winner)
            snprintf(note, sizeof note, "; policy measured: %s %s (%.4g ms)", e->cands[pick].plugin,
                     pick == best ? "fastest"
                                  : "within 3%% of the fastest, "
                                    "first by priority",
                     e->ms[pick]);
        else
            snprintf(note, sizeof note,
                     "; policy measured: %s fastest (%.4g ms; %s, first by "
                     "priority, %.4g ms)",
                     e->cands[pick].plugin, e->ms[pick], e->cands[winner].plugin, e->ms[winner]);
        char value[64], sup[256];
        for (uint32_t k = 0; k < n; k++) {
            if (e->ms[k] < 0 || (int)k == pick) continue;
            snprintf(value, sizeof value, "%.4g ms", e->ms[k]);
            snprintf(sup, sizeof sup, "%s won at %.4g ms ([select] policy = measured)",
                     e->cands[pick].plugin, e->ms[pick]);
            if (lost(e, k, "measured", value, sup)) return -1;
        }
        if (pick != winner) {
            ah_candidate *c = &e->cands[pick];
            ah__free((void *)c->reasons);
            c->reasons = NULL;
            c->n_reasons = 0;
            e->cands[winner].chosen = 0;
            c->chosen = 1;
            e->d.plugin = c->plugin;
            ah_reason_list r; /* the spec as the new winner runs it */
            ah__reason_list_init(&r, &e->strings);
            ah__evaluate_candidate(h, c->plugin, spec, pin, &r, &e->d.spec,
                                   &e->d.kernel_block_size);
            ah__free(r.items);
            if (r.oom) return -1;
        }
    }
    ah_strbuf src = {0};
    ah__strbuf_printf(&src, "%s%s", e->d.list_source, note);
    char *text = ah__strbuf_take(&src);
    const char *kept = text ? ah__arena_keep(&e->strings, text) : NULL;
    ah__free(text);
    if (!kept) return -1;
    e->d.list_source = kept;
    return 0;
}

static decision_entry *decide(ah_host *h, const ah_layer_spec *spec, const ah_layer_spec *pin,
                              const ah_layer_plan *p)
{
    decision_entry *e = ah__calloc(1, sizeof *e);
    if (!e) return NULL;
    int oom = 0;
    e->d.list_source = ah__arena_keep(&e->strings, p->source);
    e->d.spec = ah__resolve_spec(spec, NULL, pin);
    if (!e->d.list_source) goto fail;
    int winner = run_candidates(h, e, &p->list, spec, pin, &oom);
    if (oom) goto fail;
    if (winner >= 0 && p->is_default && !p->forced && h->config.policy == AH_POLICY_MEASURED &&
        measured_order(h, e, spec, pin, p->phase, winner))
        goto fail;
    if (winner < 0 && !p->forced && h->config.fallback != AH_FALLBACK_ERROR) {
        /* fallback: every other plugin, in the phase's default order */
        ah_name_list all = {0}, rest = {0};
        char src[128];
        if (ah__default_order(h, p->phase, &all, src, sizeof src)) oom = 1;
        for (uint32_t k = 0; !oom && k < all.n; k++)
            if (!ah__names_has(&p->list, all.items[k]) && ah__names_push(&rest, all.items[k]))
                oom = 1;
        if (!oom) winner = run_candidates(h, e, &rest, spec, pin, &oom);
        ah__free(all.items);
        ah__free(rest.items);
        if (oom) goto fail;
        e->d.fallback = winner >= 0;
    }
    return e;
fail:
    entry_free(e);
    return NULL;
}

/* The cached decision for (spec, pin, plan), computing it on a miss. */
const ah_decision *ah__decision_for(ah_host *h, const ah_layer_spec *spec, const ah_layer_spec *pin,
                                    const ah_layer_plan *p)
{
    char *key = decision_key(spec, pin, p);
    if (!key) return NULL;
    pthread_mutex_lock(&h->lock);
    if (!h->decisions) h->decisions = ah__calloc(1, sizeof *h->decisions);
    ah_decision_cache *c = h->decisions;
    decision_entry *e = NULL;
    for (decision_entry *x = c ? c->head : NULL; x; x = x->next)
        if (strcmp(x->key, key) == 0) {
            e = x;
            c->hits++;
            break;
        }
    pthread_mutex_unlock(&h->lock);
    if (e || !c) {
        ah__free(key);
        return e ? &e->d : NULL;
    }
    /* evaluate outside the lock: check_combination may load a plugin */
    e = decide(h, spec, pin, p);
    if (!e) {
        ah__free(key);
        return NULL;
    }
    e->key = key;
    pthread_mutex_lock(&h->lock);
    decision_entry *raced = NULL;
    for (decision_entry *x = c->head; x; x = x->next)
        if (strcmp(x->key, key) == 0) raced = x;
    if (raced) {
        entry_free(e);
        e = raced;
    } else {
        e->next = c->head;
        c->head = e;
        c->misses++;
    }
    pthread_mutex_unlock(&h->lock);
    return &e->d;
}

double ah_decision_candidate_ms(const ah_decision *d, uint32_t k)
{
    if (!d || k >= d->n_candidates) return -1;
    const decision_entry *e =
        (const decision_entry *)(const void *)((const char *)d - offsetof(decision_entry, d));
    return e->ms ? e->ms[k] : -1;
}
