/*
 * Decisions: the full candidate table for one distinct (layer spec, pinned
 * KV layout, forced backend, priority list), computed once and cached in the
 * host for its lifetime, so binding an 80-layer model costs a handful of
 * evaluations. A decision is immutable once cached; selections point at it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "select_int.h"
#include "strbuf.h"

#include <attnhost/plugin_util.h>

typedef struct decision_entry {
    char *key;
    ah_decision d;
    ah_candidate *cands;
    ah_string_arena strings; /* every string the decision owns */
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
    /* causal and kv_group (ABI 2.1) travel in the decision's resolved spec,
     * so layers that differ in them need decisions of their own */
    ah__strbuf_printf(&k, "%d/%u/%u/%u/%u/%d/%d/%u/%d/%u/%a/%a/%u/%u/%u/%u/%u/%u|", s->attn_type,
                      s->num_q_heads, s->num_kv_heads, s->qk_head_size, s->v_head_size, s->q_dtype,
                      s->kv_dtype, s->block_size, s->kv_layout, s->sliding_window, s->softcap,
                      s->scale, s->use_mla, s->use_sinks, s->use_alibi, s->fp8_attention,
                      ah_spec_causal(s) ? 1u : 0u, ah_spec_kv_group(s));
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
        ah__evaluate_candidate(h, names->items[k], spec, pin, &r, &resolved);
        if (!r.n && !r.oom && winner >= 0)
            ah__reason_add(&r.sink, AH_REASON_LOST_ON_PRIORITY, "priority",
                       e->cands[winner].plugin, "a higher-priority candidate won");
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
        }
    }
    return winner;
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
    if (winner < 0 && !p->forced && h->config.fallback != AH_FALLBACK_ERROR) {
        /* fallback: every other plugin, in the phase's default order */
        ah_name_list all = {0}, rest = {0};
        char src[128];
        if (ah__default_order(h, p->phase, &all, src, sizeof src)) oom = 1;
        for (uint32_t k = 0; !oom && k < all.n; k++)
            if (!ah__names_has(&p->list, all.items[k]) && ah__names_push(&rest, all.items[k])) oom = 1;
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
const ah_decision *ah__decision_for(ah_host *h, const ah_layer_spec *spec,
                                       const ah_layer_spec *pin, const ah_layer_plan *p)
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
