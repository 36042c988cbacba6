/*
 * Priority lists: which plugins a layer's candidates are, in what order, and
 * where that order came from. The most specific list wins: a [layer.<range>]
 * rule (its phase list, then its priority; a backend there forces one
 * plugin), then [select] force, then [select] prefill_priority or
 * decode_priority, then [select] priority, then the built-in order for the
 * platform found here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "select_int.h"

#include <attnhost/plugin_util.h>

/* Built-in orders: vLLM's platform defaults. */
static const char *const order_cuda_hopper[] = {"cuda_fa3", "cuda_flashinfer", "triton"};
static const char *const order_cuda_blackwell[] = {"cuda_flashinfer", "cuda_fa3", "triton"};
static const char *const order_hip[] = {"rocm_aiter", "triton"};
static const char *const order_level_zero[] = {"xpu"};
static const char *const order_cpu[] = {"cpu_amx"};

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

static int names_push_all(ah_name_list *l, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ah__names_push(l, names[i])) return -1;
    return 0;
}

/* The platform's default order: the GPU that is here first, the CPU last,
 * then plugins the built-in orders do not know (a vendor's .so), by name. */
int ah__default_order(const ah_host *h, ah_name_list *out, char *source, size_t cap)
{
    uint32_t cuda_cc = 0;
    int hip = 0, ze = 0;
    for (uint32_t i = 0; i < h->scan.n; i++) {
        const ah_plugin_info *in = &h->scan.plugins[i]->info;
        if (in->state != AH_PLUGIN_AVAILABLE) continue;
        if (in->device_kind == AH_DEVICE_CUDA && !cuda_cc) cuda_cc = in->probe->compute_capability;
        hip |= in->device_kind == AH_DEVICE_HIP;
        ze |= in->device_kind == AH_DEVICE_LEVEL_ZERO;
    }
    int rc = 0;
    if (cuda_cc >= 100) {
        rc |= names_push_all(out, order_cuda_blackwell, 3);
        snprintf(source, cap, "default (cuda sm_%u)", cuda_cc);
    } else if (cuda_cc) {
        rc |= names_push_all(out, order_cuda_hopper, 3);
        snprintf(source, cap, "default (cuda sm_%u)", cuda_cc);
    } else if (hip) {
        rc |= names_push_all(out, order_hip, 2);
        snprintf(source, cap, "default (hip)");
    } else if (ze) {
        rc |= names_push_all(out, order_level_zero, 1);
        snprintf(source, cap, "default (level zero)");
    } else {
        snprintf(source, cap, "default (cpu)");
    }
    rc |= names_push_all(out, order_cpu, 1);
    /* vendors' plugins, alphabetically */
    for (;;) {
        const char *next = NULL;
        for (uint32_t i = 0; i < h->scan.n; i++) {
            const ah_plugin_info *in = &h->scan.plugins[i]->info;
            if (in->state == AH_PLUGIN_REJECTED || ah__names_has(out, in->name)) continue;
            if (!next || strcmp(in->name, next) < 0) next = in->name;
        }
        if (!next) break;
        rc |= ah__names_push(out, next);
        if (rc) break;
    }
    return rc ? -1 : 0;
}

int ah__plan_for_layer(const ah_host *h, uint32_t layer, ah_phase phase, ah_layer_plan *p)
{
    const ah_config *c = &h->config;
    const ah_strlist *chosen = NULL;
    memset(p, 0, sizeof *p);
    const char *phase_key = phase == AH_PHASE_PREFILL ? "prefill_priority" : "decode_priority";
    /* later rules win: walk backwards, stop at the first that says something */
    for (uint32_t k = c->n_layer_rules; k-- > 0;) {
        const ah_layer_rule *lr = &c->layer_rules[k];
        if (!ah__range_contains(&lr->range, layer)) continue;
        if (lr->backend && !p->forced) {
            p->forced = lr->backend;
            snprintf(p->source, sizeof p->source, "[%s] backend", lr->section);
        }
        const ah_strlist *ph = phase == AH_PHASE_PREFILL ? &lr->prefill_priority : &lr->decode_priority;
        if (!chosen && ph->n) {
            chosen = ph;
            if (!p->forced) snprintf(p->source, sizeof p->source, "[%s] %s", lr->section, phase_key);
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
        const ah_strlist *ph = phase == AH_PHASE_PREFILL ? &c->prefill_priority : &c->decode_priority;
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
    return ah__default_order(h, &p->list, p->source, sizeof p->source);
}

