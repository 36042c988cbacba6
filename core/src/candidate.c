/*
 * Checking one candidate against a layer: the scan's verdict, [select]
 * disable, the device requirements, every capability the layer needs, and
 * last the plugin's own check_combination. Every failed check becomes a
 * structured reason (code, field, offending value, supported set).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "kv_split.h"
#include "select_int.h"

#include <attnhost/plugin_util.h>

const char *ah__arena_keep(ah_string_arena *a, const char *s)
{
    char *copy = ah__strdup(s ? s : "");
    char **grown = copy ? ah__realloc(a->items, (a->n + 1) * sizeof *grown) : NULL;
    if (!grown) {
        ah__free(copy);
        return NULL;
    }
    grown[a->n++] = copy;
    a->items = grown;
    return copy;
}

void ah__arena_free(ah_string_arena *a)
{
    for (uint32_t i = 0; i < a->n; i++) ah__free(a->items[i]);
    ah__free(a->items);
    a->items = NULL;
    a->n = 0;
}

void ah__reason_list_init(ah_reason_list *r, ah_string_arena *arena)
{
    memset(r, 0, sizeof *r);
    r->sink.struct_size = sizeof r->sink;
    r->sink.add = ah__reason_add;
    r->arena = arena;
}

void ah__reason_add(ah_reason_sink *sink, ah_reason_code code, const char *field, const char *value,
                    const char *supported)
{
    ah_reason_list *r = (ah_reason_list *)sink;
    ah_reason *grown = ah__realloc(r->items, (r->n + 1) * sizeof *grown);
    if (!grown) {
        r->oom = 1;
        return;
    }
    r->items = grown;
    ah_reason *x = &r->items[r->n];
    x->code = code;
    x->field = ah__arena_keep(r->arena, field);
    x->value = ah__arena_keep(r->arena, value);
    x->supported = ah__arena_keep(r->arena, supported);
    if (!x->field || !x->value || !x->supported) r->oom = 1;
    else r->n++;
}

static void reasonf(ah_reason_list *r, ah_reason_code code, const char *field,
                    const char *supported, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void reasonf(ah_reason_list *r, ah_reason_code code, const char *field,
                    const char *supported, const char *fmt, ...)
{
    char value[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
    ah__reason_add(&r->sink, code, field, value, supported);
}

/* Fill what the layer left to the backend: KV dtype, scale, layout and
 * block size (pinned by the other phase's winner when set). */
ah_layer_spec ah__resolve_spec(const ah_layer_spec *in, const ah_caps *caps,
                               const ah_layer_spec *pin)
{
    ah_layer_spec s = *in;
    s.struct_size = sizeof s;
    if (s.kv_dtype == AH_DTYPE_AUTO) s.kv_dtype = s.q_dtype;
    s.scale = ah_spec_scale(&s);
    if (s.kv_layout == AH_KV_LAYOUT_AUTO)
        s.kv_layout = pin ? pin->kv_layout : caps ? caps->preferred_kv_layout : AH_KV_LAYOUT_NHD;
    if (s.block_size == 0 || s.block_size == AH_BLOCK_SIZE_AUTO)
        s.block_size = pin ? pin->block_size : caps ? caps->preferred_block_size : 16;
    return s;
}

/* Check the resolved spec s against rec's caps; *kernel: the kernel
 * block size when the plugin lacks s's block size but takes a divisor of
 * it (else 0). */
static void check_caps(ah_reason_list *r, const ah_host *h, const ah_plugin_rec *rec,
                       const ah_layer_spec *s, uint32_t *kernel)
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
    if (s->qk_head_size != s->v_head_size && !s->use_mla &&
        !(c->features & AH_FEAT_DIFF_HEAD_SIZES))
        reasonf(r, AH_REASON_FEATURE, "diff_head_sizes", "qk_head_size == v_head_size",
                "qk %u, v %u", s->qk_head_size, s->v_head_size);
    *kernel = 0;
    if (!ah_int_set_contains(&c->block_sizes, s->block_size)) {
        /* a multiple of a size it takes: kernel blocks, where the layout
         * makes a cache block that many kernel blocks back to back */
        const uint32_t k = ah__kernel_block(&c->block_sizes, s->block_size);
        if (k && s->kv_layout == AH_KV_LAYOUT_NHD) {
            *kernel = k;
        } else {
            char set[160];
            ah_format_int_set(&c->block_sizes, set, sizeof set);
            if (k)
                snprintf(sup, sizeof sup,
                         "%s, or a multiple of one with kv_layout nhd (kernel blocks of %u)", set,
                         k);
            else snprintf(sup, sizeof sup, "%s or a multiple of one", set);
            reasonf(r, AH_REASON_BLOCK_SIZE, "block_size", sup, "%u%s%s", s->block_size,
                    k ? " with kv_layout " : "", k ? ah_kv_layout_str(s->kv_layout) : "");
        }
    }
    if (!(c->attn_types & AH_BIT(s->attn_type))) {
        ah_format_attn_types(c->attn_types, sup, sizeof sup);
        reasonf(r, AH_REASON_ATTN_TYPE, "attn_type", sup, "%s", ah_attn_type_str(s->attn_type));
    }
    if (!(c->kv_layouts & AH_BIT(s->kv_layout))) {
        ah_format_layouts(c->kv_layouts, sup, sizeof sup);
        reasonf(r, AH_REASON_KV_LAYOUT, "kv_layout", sup, "%s", ah_kv_layout_str(s->kv_layout));
    } else if (ah_kv_layout_is_interleaved(s->kv_layout) &&
               (s->use_mla || s->qk_head_size != s->v_head_size)) {
        reasonf(r, AH_REASON_KV_LAYOUT, "kv_layout",
                "nhd or hnd (an interleaved layout needs one K/V head size and a value cache)",
                "%s with %s", ah_kv_layout_str(s->kv_layout),
                s->use_mla ? "mla" : "qk_head_size != v_head_size");
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
    if (!ah_spec_causal(s)) need |= AH_FEAT_NON_CAUSAL;
    if (ah_spec_cacheless(s)) need |= AH_FEAT_CACHELESS; /* ABI 2.1 meanings */
    if (s->attn_type == AH_ATTN_ENCODER_DECODER) need |= AH_FEAT_CROSS_ATTENTION;
    if (s->attn_type == AH_ATTN_DECODER && !ah_spec_causal(s)) need |= AH_FEAT_CAUSAL_FLAG;
    if (ah_spec_ragged(s)) need |= AH_FEAT_RAGGED_KV;                             /* ABI 2.3 */
    if (ah_spec_kv_scales(s) != AH_KV_SCALES_HOST) need |= AH_FEAT_SCALE_TENSORS; /* ABI 2.3 */
    if (ah_spec_kv_scales(s) == AH_KV_SCALES_PER_HEAD) need |= AH_FEAT_KV_SCALE_PER_HEAD;
    if (ah_spec_q_scale(s)) need |= AH_FEAT_Q_SCALE;
    uint32_t missing = need & ~c->features;
    for (uint32_t bit = 1; missing; bit <<= 1)
        if (missing & bit) {
            ah_format_features(c->features, sup, sizeof sup);
            reasonf(r, AH_REASON_FEATURE, ah_feature_name(bit), sup, "needed");
            missing &= ~bit;
        }
}

/* Check one candidate; reasons go into r. Returns the spec as resolved for
 * this candidate in *resolved, and its kernel block size in *kernel. */
void ah__evaluate_candidate(ah_host *h, const char *name, const ah_layer_spec *spec,
                            const ah_layer_spec *pin, ah_reason_list *r, ah_layer_spec *resolved,
                            uint32_t *kernel)
{
    int i = ah__host_find(h, name);
    *kernel = 0;
    *resolved = ah__resolve_spec(spec, NULL, pin);
    if (i < 0) {
        char names[512];
        size_t len = 0;
        names[0] = '\0';
        for (uint32_t k = 0; k < h->scan.n && len < sizeof names; k++)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", k ? ", " : "",
                                    h->scan.plugins[k]->info.name);
        ah__reason_add(&r->sink, AH_REASON_NOT_FOUND, "plugin", name, len ? names : "none found");
        return;
    }
    const ah_plugin_rec *rec = h->scan.plugins[i];
    if (rec->info.state == AH_PLUGIN_REJECTED || rec->info.state == AH_PLUGIN_QUARANTINED) {
        ah__reason_add(&r->sink, AH_REASON_QUARANTINED, "plugin", rec->info.reason,
                       ah_plugin_state_str(rec->info.state));
        return;
    }
    if (rec->info.state == AH_PLUGIN_UNAVAILABLE) {
        ah__reason_add(&r->sink, AH_REASON_UNAVAILABLE, "probe", rec->info.reason,
                       "a usable device");
        return;
    }
    for (uint32_t k = 0; k < h->config.disable.n; k++)
        if (strcmp(h->config.disable.items[k], name) == 0) {
            ah__reason_add(&r->sink, AH_REASON_DISABLED, "plugin", name, "[select] disable");
            return;
        }
    char why[512];
    if (h->config.require_checked && ah__host_not_checked(h, i, why, sizeof why)) {
        ah__reason_add(&r->sink, AH_REASON_NOT_CHECKED, "check", why,
                       "a passing attnhost check on this device ([select] require_checked)");
        return;
    }
    *resolved = ah__resolve_spec(spec, &rec->caps, pin);
    check_caps(r, h, rec, resolved, kernel);
    if (r->n || r->oom || !rec->info.has_check_combination) return;

    ah_error err;
    pthread_mutex_lock(&h->lock);
    ah_status s = ah__host_load(h, i, &err);
    void (*cb)(const ah_layer_spec *, const ah_probe_info *, ah_reason_sink *) =
        s == AH_OK ? h->slots[i].lp->caps_live.check_combination : NULL;
    pthread_mutex_unlock(&h->lock);
    if (s != AH_OK)
        ah__reason_add(&r->sink, AH_REASON_UNAVAILABLE, "load", err.msg, "a loadable plugin");
    else if (cb) { /* the plugin judges the spec it would run: kernel blocks */
        ah_layer_spec as_run = *resolved;
        if (*kernel) as_run.block_size = *kernel;
        cb(&as_run, &rec->probe, &r->sink);
    }
}
