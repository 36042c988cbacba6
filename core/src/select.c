/*
 * Selection: for every layer and phase, walk the most specific priority list
 * (layer, then phase, then global, then the built-in per-platform order),
 * check each candidate against its capabilities, its probe and its
 * check_combination, and keep every reason. The first candidate with no
 * reason wins; the valid ones behind it are recorded as lost on priority.
 *
 * Decisions are cached in the host per distinct (spec, list, force) key, so
 * binding an 80-layer model costs a handful of evaluations.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "host_int.h"
#include "strbuf.h"


#include <attnhost/plugin_util.h>

/* ---- built-in priority orders (vLLM's platform defaults) ---------------- */

static const char *const order_cuda_hopper[] = {"cuda_fa3", "cuda_flashinfer", "triton"};
static const char *const order_cuda_blackwell[] = {"cuda_flashinfer", "cuda_fa3", "triton"};
static const char *const order_hip[] = {"rocm_aiter", "triton"};
static const char *const order_level_zero[] = {"xpu"};
static const char *const order_cpu[] = {"cpu_amx"};

typedef struct name_list {
    const char **items; /* borrowed strings */
    uint32_t n;
} name_list;

static int list_has(const name_list *l, const char *name)
{
    for (uint32_t i = 0; i < l->n; i++)
        if (strcmp(l->items[i], name) == 0) return 1;
    return 0;
}

static int list_push(name_list *l, const char *name)
{
    if (list_has(l, name)) return 0;
    const char **grown = ah__realloc(l->items, (l->n + 1) * sizeof *grown);
    if (!grown) return -1;
    grown[l->n++] = name;
    l->items = grown;
    return 0;
}

static int list_push_all(name_list *l, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (list_push(l, names[i])) return -1;
    return 0;
}

/* The platform's default order: the GPU that is here first, the CPU last,
 * then plugins the built-in orders do not know (a vendor's .so), by name. */
static int default_order(const ah_host *h, name_list *out, char *source, size_t cap)
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
        rc |= list_push_all(out, order_cuda_blackwell, 3);
        snprintf(source, cap, "default (cuda sm_%u)", cuda_cc);
    } else if (cuda_cc) {
        rc |= list_push_all(out, order_cuda_hopper, 3);
        snprintf(source, cap, "default (cuda sm_%u)", cuda_cc);
    } else if (hip) {
        rc |= list_push_all(out, order_hip, 2);
        snprintf(source, cap, "default (hip)");
    } else if (ze) {
        rc |= list_push_all(out, order_level_zero, 1);
        snprintf(source, cap, "default (level zero)");
    } else {
        snprintf(source, cap, "default (cpu)");
    }
    rc |= list_push_all(out, order_cpu, 1);
    /* vendors' plugins, alphabetically */
    for (;;) {
        const char *next = NULL;
        for (uint32_t i = 0; i < h->scan.n; i++) {
            const ah_plugin_info *in = &h->scan.plugins[i]->info;
            if (in->state == AH_PLUGIN_REJECTED || list_has(out, in->name)) continue;
            if (!next || strcmp(in->name, next) < 0) next = in->name;
        }
        if (!next) break;
        rc |= list_push(out, next);
        if (rc) break;
    }
    return rc ? -1 : 0;
}

/* ---- decisions and their cache ------------------------------------------ */

typedef struct decision_entry {
    char *key;
    ah_decision d;
    ah_candidate *cands;
    char **strings; /* every string the decision owns */
    uint32_t n_strings;
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
    for (uint32_t i = 0; i < e->n_strings; i++) ah__free(e->strings[i]);
    ah__free(e->strings);
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
static const char *keep(decision_entry *e, const char *s)
{
    char *copy = ah__strdup(s ? s : "");
    char **grown = copy ? ah__realloc(e->strings, (e->n_strings + 1) * sizeof *grown) : NULL;
    if (!grown) {
        ah__free(copy);
        return NULL;
    }
    grown[e->n_strings++] = copy;
    e->strings = grown;
    return copy;
}

/* Reasons gathered for one candidate. */
typedef struct reason_list {
    ah_reason_sink sink; /* first: check_combination receives &sink */
    decision_entry *e;
    ah_reason *items;
    uint32_t n;
    int oom;
} reason_list;

static void reason_add(ah_reason_sink *sink, ah_reason_code code, const char *field,
                       const char *value, const char *supported)
{
    reason_list *r = (reason_list *)sink;
    ah_reason *grown = ah__realloc(r->items, (r->n + 1) * sizeof *grown);
    if (!grown) {
        r->oom = 1;
        return;
    }
    r->items = grown;
    ah_reason *x = &r->items[r->n];
    x->code = code;
    x->field = keep(r->e, field);
    x->value = keep(r->e, value);
    x->supported = keep(r->e, supported);
    if (!x->field || !x->value || !x->supported) r->oom = 1;
    else r->n++;
}

static void reasonf(reason_list *r, ah_reason_code code, const char *field, const char *supported,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void reasonf(reason_list *r, ah_reason_code code, const char *field, const char *supported,
                    const char *fmt, ...)
{
    char value[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
    reason_add(&r->sink, code, field, value, supported);
}

/* Fill what the layer left to the backend: KV dtype, scale, layout and
 * block size (pinned by the other phase's winner when set). */
static ah_layer_spec resolve_spec(const ah_layer_spec *in, const ah_caps *caps,
                                  const ah_layer_spec *pin)
{
    ah_layer_spec s = *in;
    s.struct_size = sizeof s;
    if (s.kv_dtype == AH_DTYPE_AUTO) s.kv_dtype = s.q_dtype;
    if (s.scale == 0.0f) s.scale = (float)(1.0 / sqrt((double)s.qk_head_size));
    if (s.kv_layout == AH_KV_LAYOUT_AUTO)
        s.kv_layout = pin ? pin->kv_layout : caps ? caps->preferred_kv_layout : AH_KV_LAYOUT_NHD;
    if (s.block_size == 0)
        s.block_size = pin ? pin->block_size : caps ? caps->preferred_block_size : 16;
    return s;
}

static void check_caps(reason_list *r, const ah_host *h, const ah_plugin_rec *rec,
                       const ah_layer_spec *s)
{
    const ah_caps *c = &rec->caps;
    char sup[256];

    /* device requirements */
    if (rec->info.device_kind == AH_DEVICE_CUDA) {
        uint32_t cc = rec->probe.compute_capability;
        if ((c->min_compute_capability && cc < c->min_compute_capability) ||
            (c->max_compute_capability && cc > c->max_compute_capability)) {
            snprintf(sup, sizeof sup, "%u..%u", c->min_compute_capability,
                     c->max_compute_capability ? c->max_compute_capability : 999);
            reasonf(r, AH_REASON_DEVICE, "compute_capability", sup, "%u", cc);
        }
    }
    if (rec->info.device_kind == AH_DEVICE_HIP && c->n_gfx_targets) {
        int ok = 0;
        size_t len = 0;
        sup[0] = '\0';
        for (uint32_t i = 0; i < c->n_gfx_targets; i++) {
            ok |= strcmp(c->gfx_targets[i], rec->probe.arch) == 0;
            len += (size_t)snprintf(sup + len, len < sizeof sup ? sizeof sup - len : 0, "%s%s",
                                    i ? ", " : "", c->gfx_targets[i]);
        }
        if (!ok) reasonf(r, AH_REASON_DEVICE, "gfx_target", sup, "%s", rec->probe.arch);
    }
    if ((c->cpu_isa_required & h->hw.cpu_isa) != c->cpu_isa_required) {
        char have[256];
        ah_format_isa(c->cpu_isa_required, sup, sizeof sup);
        ah_format_isa(c->cpu_isa_required & ~h->hw.cpu_isa, have, sizeof have);
        reasonf(r, AH_REASON_DEVICE, "cpu_isa", sup, "missing %s", have);
    }

    /* types and sizes */
    if (!(c->q_dtypes & AH_BIT(s->q_dtype))) {
        ah_format_dtype_mask(c->q_dtypes, sup, sizeof sup);
        reasonf(r, AH_REASON_DTYPE, "dtype", sup, "%s", ah_dtype_name(s->q_dtype));
    }
    if (!(c->kv_dtypes & AH_BIT(s->kv_dtype))) {
        ah_format_dtype_mask(c->kv_dtypes, sup, sizeof sup);
        reasonf(r, AH_REASON_KV_DTYPE, "kv_dtype", sup, "%s", ah_dtype_name(s->kv_dtype));
    }
    if (!ah_int_set_contains(&c->qk_head_sizes, s->qk_head_size)) {
        ah_format_int_set(&c->qk_head_sizes, sup, sizeof sup);
        reasonf(r, AH_REASON_HEAD_SIZE, "qk_head_size", sup, "%u", s->qk_head_size);
    }
    if (!ah_int_set_contains(&c->v_head_sizes, s->v_head_size)) {
        ah_format_int_set(&c->v_head_sizes, sup, sizeof sup);
        reasonf(r, AH_REASON_HEAD_SIZE, "v_head_size", sup, "%u", s->v_head_size);
    }
    if (s->qk_head_size != s->v_head_size && !s->use_mla && !(c->features & AH_FEAT_DIFF_HEAD_SIZES))
        reasonf(r, AH_REASON_FEATURE, "diff_head_sizes", "qk_head_size == v_head_size",
                "qk %u, v %u", s->qk_head_size, s->v_head_size);
    if (!ah_int_set_contains(&c->block_sizes, s->block_size)) {
        ah_format_int_set(&c->block_sizes, sup, sizeof sup);
        reasonf(r, AH_REASON_BLOCK_SIZE, "block_size", sup, "%u", s->block_size);
    }
    if (!(c->attn_types & AH_BIT(s->attn_type))) {
        ah_format_attn_types(c->attn_types, sup, sizeof sup);
        reasonf(r, AH_REASON_ATTN_TYPE, "attn_type", sup, "%s", ah_attn_type_str(s->attn_type));
    }
    if (!(c->kv_layouts & AH_BIT(s->kv_layout))) {
        ah_format_layouts(c->kv_layouts, sup, sizeof sup);
        reasonf(r, AH_REASON_KV_LAYOUT, "kv_layout", sup, "%s", ah_kv_layout_str(s->kv_layout));
    }
    if (c->max_head_groups && s->num_q_heads / s->num_kv_heads > c->max_head_groups) {
        snprintf(sup, sizeof sup, "<= %u", c->max_head_groups);
        reasonf(r, AH_REASON_HEAD_SIZE, "head_groups", sup, "%u", s->num_q_heads / s->num_kv_heads);
    }

    /* features the layer needs */
    uint32_t need = 0;
    if (s->use_mla) need |= AH_FEAT_MLA;
    if (s->use_sinks) need |= AH_FEAT_SINKS;
    if (s->sliding_window) need |= AH_FEAT_SLIDING_WINDOW;
    if (s->use_alibi) need |= AH_FEAT_ALIBI;
    if (s->softcap > 0) need |= AH_FEAT_SOFTCAP;
    if (s->attn_type != AH_ATTN_DECODER) need |= AH_FEAT_NON_CAUSAL;
    uint32_t missing = need & ~c->features;
    for (uint32_t bit = 1; missing; bit <<= 1)
        if (missing & bit) {
            ah_format_features(c->features, sup, sizeof sup);
            reasonf(r, AH_REASON_FEATURE, ah_feature_name(bit), sup, "needed");
            missing &= ~bit;
        }
}

/* Check one candidate; reasons go into r. Returns the spec as resolved for
 * this candidate in *resolved. */
static void evaluate(ah_host *h, const char *name, const ah_layer_spec *spec,
                     const ah_layer_spec *pin, reason_list *r, ah_layer_spec *resolved)
{
    int i = ah__host_find(h, name);
    *resolved = resolve_spec(spec, NULL, pin);
    if (i < 0) {
        char names[512];
        size_t len = 0;
        names[0] = '\0';
        for (uint32_t k = 0; k < h->scan.n && len < sizeof names; k++)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", k ? ", " : "",
                                    h->scan.plugins[k]->info.name);
        reason_add(&r->sink, AH_REASON_NOT_FOUND, "plugin", name, len ? names : "none found");
        return;
    }
    const ah_plugin_rec *rec = h->scan.plugins[i];
    if (rec->info.state == AH_PLUGIN_REJECTED || rec->info.state == AH_PLUGIN_QUARANTINED) {
        reason_add(&r->sink, AH_REASON_QUARANTINED, "plugin", rec->info.reason,
                   ah_plugin_state_str(rec->info.state));
        return;
    }
    if (rec->info.state == AH_PLUGIN_UNAVAILABLE) {
        reason_add(&r->sink, AH_REASON_UNAVAILABLE, "probe", rec->info.reason, "a usable device");
        return;
    }
    for (uint32_t k = 0; k < h->config.disable.n; k++)
        if (strcmp(h->config.disable.items[k], name) == 0) {
            reason_add(&r->sink, AH_REASON_DISABLED, "plugin", name, "[select] disable");
            return;
        }
    *resolved = resolve_spec(spec, &rec->caps, pin);
    check_caps(r, h, rec, resolved);
    if (r->n || r->oom || !rec->info.has_check_combination) return;

    ah_error err;
    pthread_mutex_lock(&h->lock);
    ah_status s = ah__host_load(h, i, &err);
    void (*cb)(const ah_layer_spec *, const ah_probe_info *, ah_reason_sink *) =
        s == AH_OK ? h->slots[i].lp->caps_live.check_combination : NULL;
    pthread_mutex_unlock(&h->lock);
    if (s != AH_OK) reason_add(&r->sink, AH_REASON_UNAVAILABLE, "load", err.msg, "a loadable plugin");
    else if (cb) cb(resolved, &rec->probe, &r->sink);
}

/* ---- the priority list for one layer and phase -------------------------- */

typedef struct layer_plan {
    name_list list;
    const char *forced; /* borrowed */
    char source[96];
} layer_plan;

static int plan_for_layer(const ah_host *h, uint32_t layer, ah_phase phase, layer_plan *p)
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
    if (p->forced) return list_push(&p->list, p->forced);
    if (chosen) {
        for (uint32_t k = 0; k < chosen->n; k++)
            if (list_push(&p->list, chosen->items[k])) return -1;
        return 0;
    }
    return default_order(h, &p->list, p->source, sizeof p->source);
}

/* ---- deciding one layer ------------------------------------------------- */

static char *decision_key(const ah_layer_spec *s, const ah_layer_spec *pin, const layer_plan *p)
{
    ah_strbuf k = {0};
    ah__strbuf_printf(&k, "%d/%u/%u/%u/%u/%d/%d/%u/%d/%u/%a/%a/%u/%u/%u|", s->attn_type,
                      s->num_q_heads, s->num_kv_heads, s->qk_head_size, s->v_head_size, s->q_dtype,
                      s->kv_dtype, s->block_size, s->kv_layout, s->sliding_window, s->softcap,
                      s->scale, s->use_mla, s->use_sinks, s->use_alibi);
    if (pin) ah__strbuf_printf(&k, "pin %d/%u|", pin->kv_layout, pin->block_size);
    ah__strbuf_printf(&k, "%s|", p->forced ? p->forced : "");
    for (uint32_t i = 0; i < p->list.n; i++) ah__strbuf_printf(&k, "%s,", p->list.items[i]);
    return ah__strbuf_take(&k);
}

static int add_candidate(decision_entry *e, const char *name, reason_list *r)
{
    ah_candidate *grown = ah__realloc(e->cands, (e->d.n_candidates + 1) * sizeof *grown);
    if (!grown) return -1;
    e->cands = grown;
    ah_candidate *c = &grown[e->d.n_candidates];
    memset(c, 0, sizeof *c);
    c->plugin = keep(e, name);
    if (!c->plugin) return -1;
    c->reasons = r->items;
    c->n_reasons = r->n;
    r->items = NULL;
    e->d.n_candidates++;
    e->d.candidates = e->cands;
    return 0;
}

/* Evaluate a list of candidates into e; returns the winner's index or -1. */
static int run_candidates(ah_host *h, decision_entry *e, const name_list *names,
                          const ah_layer_spec *spec, const ah_layer_spec *pin, int *oom)
{
    int winner = -1;
    for (uint32_t k = 0; k < names->n; k++) {
        reason_list r = {{sizeof(ah_reason_sink), reason_add, NULL}, e, NULL, 0, 0};
        ah_layer_spec resolved;
        evaluate(h, names->items[k], spec, pin, &r, &resolved);
        if (!r.n && !r.oom && winner >= 0)
            reason_add(&r.sink, AH_REASON_LOST_ON_PRIORITY, "priority",
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
                              const layer_plan *p)
{
    decision_entry *e = ah__calloc(1, sizeof *e);
    if (!e) return NULL;
    int oom = 0;
    e->d.list_source = keep(e, p->source);
    e->d.spec = resolve_spec(spec, NULL, pin);
    if (!e->d.list_source) goto fail;
    int winner = run_candidates(h, e, &p->list, spec, pin, &oom);
    if (oom) goto fail;
    if (winner < 0 && !p->forced && h->config.fallback != AH_FALLBACK_ERROR) {
        /* fallback: every other plugin, in the platform's order */
        name_list all = {0}, rest = {0};
        char src[96];
        if (default_order(h, &all, src, sizeof src)) oom = 1;
        for (uint32_t k = 0; !oom && k < all.n; k++)
            if (!list_has(&p->list, all.items[k]) && list_push(&rest, all.items[k])) oom = 1;
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
static const ah_decision *decision_for(ah_host *h, const ah_layer_spec *spec,
                                       const ah_layer_spec *pin, const layer_plan *p)
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

/* ---- selections --------------------------------------------------------- */

struct ah_selection {
    uint32_t num_layers;
    const ah_decision **dec[AH_PHASE_COUNT];
    char *warnings;     /* fallback = warn lines; "" when none */
    ah_graph_level graph_level;
    uint32_t graph_layer;
};

void ah_selection_destroy(ah_selection *s)
{
    if (!s) return;
    for (int p = 0; p < AH_PHASE_COUNT; p++) ah__free(s->dec[p]);
    ah__free(s->warnings);
    ah__free(s);
}

/* "layer 3 (prefill): no backend can serve it: cuda_fa3: head_size 80 not
 * in {64, 128, 256}; cpu_amx: ..." */
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
    for (int p = 0; p < AH_PHASE_COUNT; p++)
        if (!(s->dec[p] = ah__calloc(n ? n : 1, sizeof *s->dec[p]))) goto oom;

    for (uint32_t l = 0; l < n; l++) {
        const ah_layer_spec *spec = ah_model_layer(m, l);
        const ah_decision *prefill = NULL;
        for (int p = 0; p < AH_PHASE_COUNT; p++) {
            layer_plan lp;
            if (forced_all) {
                memset(&lp, 0, sizeof lp);
                lp.forced = forced_all;
                snprintf(lp.source, sizeof lp.source, "forced by the caller");
                if (list_push(&lp.list, forced_all)) goto oom;
            } else if (plan_for_layer(h, l, (ah_phase)p, &lp)) {
                ah__free(lp.list.items);
                goto oom;
            }
            /* decode shares the KV cache with prefill: pin its layout and block size */
            const ah_decision *d = decision_for(h, spec, prefill && prefill->plugin ? &prefill->spec : NULL, &lp);
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
        }
    }
    if (!n) s->graph_level = AH_GRAPH_NEVER;
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

const char *ah_selection_warnings(const ah_selection *s) { return s->warnings; }
