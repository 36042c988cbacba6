/*
 * Priority lists: which plugins a layer's candidates are, in what order, and
 * where that order came from. The most specific list wins: a [layer.<range>]
 * rule (its phase list, then its priority; a backend there forces one
 * plugin), then [select] force, then [select] prefill_priority or
 * decode_priority, then [select] priority, then the default order computed
 * from what the plugins declare: GPU plugins before CPU ones, then the
 * phase's rank (higher first), then the name. The core knows no plugin by
 * name.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "select_int.h"

#include <attnhost/plugin_util.h>

int ah__names_has(const ah_name_list *l, const char *name)
{
    for (uint32_t i = 0; i < l->n; i++)
        if (strcmp(l->items[i], name) == 0) return 1;
    return 0;
}

int ah__names_push(ah_name_list *l, const char *name)
{
    if (ah__names_has(l, name)) return 0;
    const char **grown = ah__realloc(l->items, (l->n + 1) * sizeof *grown);
    if (!grown) return -1;
    grown[l->n++] = name;
    l->items = grown;
    return 0;
}

static uint32_t phase_rank(const ah_caps *caps, ah_phase phase)
{
    return phase == AH_PHASE_PREFILL ? caps->prefill_rank : caps->decode_rank;
}

/* One default candidate while sorting. */
typedef struct ranked {
    const ah_plugin_info *in;
    int gpu;
    uint32_t rank;
} ranked;

static int ranked_cmp(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->gpu != y->gpu) return x->gpu ? -1 : 1;
    if (x->rank != y->rank) return x->rank > y->rank ? -1 : 1;
    return strcmp(x->in->name, y->in->name);
}

static void add(char *s, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add(char *s, size_t cap, size_t *len, const char *fmt, ...)
{
    if (*len >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(s + *len, cap - *len, fmt, ap);
    va_end(ap);
    *len = n < 0 ? cap : *len + (size_t)n;
}

/* "default (ranks, GPU first: cuda sm_90, hip unusable, cpu)": each device
 * kind among the candidates once, in candidate order; a GPU kind with the
 * architecture its first usable plugin probed, and any kind "unusable" when
 * none of its plugins can run here. */
static void describe(const ranked *r, uint32_t n, char *source, size_t cap)
{
    size_t len = 0;
    int seen[AH_DEVICE_KIND_COUNT] = {0}, shown = 0;
    add(source, cap, &len, "default (ranks, GPU first%s", n ? "" : ": no plugin");
    for (uint32_t i = 0; i < n; i++) {
        ah_device_kind k = r[i].in->device_kind;
        if ((unsigned)k >= AH_DEVICE_KIND_COUNT || seen[k]) continue;
        seen[k] = 1;
        const ah_probe_info *usable = NULL;
        for (uint32_t j = i; j < n && !usable; j++)
            if (r[j].in->device_kind == k && r[j].in->state == AH_PLUGIN_AVAILABLE)
                usable = r[j].in->probe;
        add(source, cap, &len, "%s%s", shown++ ? ", " : ": ", ah_device_kind_str(k));
        if (!usable) add(source, cap, &len, " unusable");
        else if (k != AH_DEVICE_CPU && usable->arch[0]) add(source, cap, &len, " %s", usable->arch);
    }
    add(source, cap, &len, ")");
}

/* The default order for phase: every plugin the scan accepted (usable here
 * or not, so that explain shows why the unusable ones lost) whose rank for
 * the phase is not AH_RANK_NONE; GPU kinds first, then rank, then name. */
int ah__default_order(const ah_host *h, ah_phase phase, ah_name_list *out, char *source, size_t cap)
{
    ranked *r = ah__calloc(h->scan.n ? h->scan.n : 1, sizeof *r);
    if (!r) return -1;
    uint32_t n = 0;
    for (uint32_t i = 0; i < h->scan.n; i++) {
        const ah_plugin_info *in = &h->scan.plugins[i]->info;
        if (in->state != AH_PLUGIN_AVAILABLE && in->state != AH_PLUGIN_UNAVAILABLE) continue;
        if (!in->caps) continue;
        uint32_t rank = phase_rank(in->caps, phase);
        if (rank == AH_RANK_NONE) continue;
        r[n].in = in;
        r[n].gpu = in->device_kind != AH_DEVICE_CPU;
        r[n].rank = rank;
        n++;
    }
    qsort(r, n, sizeof *r, ranked_cmp);
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++) rc = ah__names_push(out, r[i].in->name);
    if (cap) describe(r, n, source, cap);
    ah__free(r);
    return rc ? -1 : 0;
}

int ah__plan_for_layer(const ah_host *h, uint32_t layer, ah_phase phase, ah_layer_plan *p)
{
    const ah_config *c = &h->config;
    const ah_strlist *chosen = NULL;
    memset(p, 0, sizeof *p);
    p->phase = phase;
    const char *phase_key = phase == AH_PHASE_PREFILL ? "prefill_priority" : "decode_priority";
    /* later rules win: walk backwards, stop at the first that says something */
    for (uint32_t k = c->n_layer_rules; k-- > 0;) {
        const ah_layer_rule *lr = &c->layer_rules[k];
        if (!ah__range_contains(&lr->range, layer)) continue;
        if (lr->backend && !p->forced) {
            p->forced = lr->backend;
            snprintf(p->source, sizeof p->source, "[%s] backend", lr->section);
        }
        const ah_strlist *ph =
            phase == AH_PHASE_PREFILL ? &lr->prefill_priority : &lr->decode_priority;
        if (!chosen && ph->n) {
            chosen = ph;
            if (!p->forced)
                snprintf(p->source, sizeof p->source, "[%s] %s", lr->section, phase_key);
        } else if (!chosen && lr->priority.n) {
            chosen = &lr->priority;
            if (!p->forced) snprintf(p->source, sizeof p->source, "[%s] priority", lr->section);
        }
    }
    if (!p->forced && c->force) {
        p->forced = c->force;
        snprintf(p->source, sizeof p->source, "[select] force");
    }
    if (!chosen) {
        const ah_strlist *ph =
            phase == AH_PHASE_PREFILL ? &c->prefill_priority : &c->decode_priority;
        if (ph->n) {
            chosen = ph;
            if (!p->forced) snprintf(p->source, sizeof p->source, "[select] %s", phase_key);
        } else if (c->priority.n) {
            chosen = &c->priority;
            if (!p->forced) snprintf(p->source, sizeof p->source, "[select] priority");
        }
    }
    if (p->forced) return ah__names_push(&p->list, p->forced);
    if (chosen) {
        for (uint32_t k = 0; k < chosen->n; k++)
            if (ah__names_push(&p->list, chosen->items[k])) return -1;
        return 0;
    }
    p->is_default = 1; /* [select] policy = measured may reorder it (decision.c) */
    return ah__default_order(h, phase, &p->list, p->source, sizeof p->source);
}
