/*
 * The zoo's steps, specs and timing (zoo.h), over the workloads of
 * workload.c: `attnhost bench --model` and `attnhost tune`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "ceilings.h"
#include "workload.h"
#include "zoo.h"

static void step_name(zoo_step *s)
{
    if (s->n_dec && s->n_pre)
        snprintf(s->name, sizeof s->name, "m%ux%u+%ux%u@%u", s->n_dec, s->dec_ctx, s->n_pre,
                 s->pre_len, s->pre_ctx);
    else if (s->n_dec) snprintf(s->name, sizeof s->name, "d%ux%u", s->n_dec, s->dec_ctx);
    else if (s->pre_ctx)
        snprintf(s->name, sizeof s->name, "p%ux%u@%u", s->n_pre, s->pre_len, s->pre_ctx);
    else snprintf(s->name, sizeof s->name, "p%ux%u", s->n_pre, s->pre_len);
}

static int num(const char **p, uint32_t *out)
{
    char *end;
    unsigned long v = strtoul(*p, &end, 10);
    if (end == *p || v > (1u << 24)) return -1;
    *out = (uint32_t)v;
    *p = end;
    return 0;
}

int zoo_parse_step(const char *t, zoo_step *s)
{
    memset(s, 0, sizeof *s);
    const char *p = t + 1;
    int ok = -1;
    if (t[0] == 'd') ok = num(&p, &s->n_dec) || *p++ != 'x' || num(&p, &s->dec_ctx) ? -1 : 0;
    else if (t[0] == 'p' || t[0] == 'm') {
        if (t[0] == 'm' &&
            (num(&p, &s->n_dec) || *p++ != 'x' || num(&p, &s->dec_ctx) || *p++ != '+'))
            return -1;
        ok = num(&p, &s->n_pre) || *p++ != 'x' || num(&p, &s->pre_len) ? -1 : 0;
        if (!ok && *p == '@') p++, ok = num(&p, &s->pre_ctx);
    }
    if (ok || *p || (t[0] == 'd' && (!s->n_dec || !s->dec_ctx)) ||
        (t[0] != 'd' && (!s->n_pre || !s->pre_len)) || (t[0] == 'm' && (!s->n_dec || !s->dec_ctx)))
        return -1;
    step_name(s);
    return 0;
}

void zoo_clamp(zoo_step *s, uint32_t max_ctx, uint32_t max_batch)
{
    uint32_t *ctx[] = {&s->dec_ctx, &s->pre_len, &s->pre_ctx}, *bat[] = {&s->n_dec, &s->n_pre};
    for (int i = 0; max_ctx && i < 3; i++)
        if (*ctx[i] > max_ctx) *ctx[i] = max_ctx;
    for (int i = 0; max_batch && i < 2; i++)
        if (*bat[i] > max_batch) *bat[i] = max_batch;
    step_name(s);
}

static uint32_t from_names(const char *const *names, uint32_t n, zoo_step *out, uint32_t cap)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n && k < cap; i++)
        if (!zoo_parse_step(names[i], &out[k])) k++;
    return k;
}

/* The zoo's mixed step: 30 decodes on 4k, then 2 chunks of 512 on 1k
 * cached (a chunked-prefill step). */
#define ZOO_MIXED_STEP "m30x4096+2x512@1024"

uint32_t zoo_standard_steps(int quick, zoo_step *out, uint32_t cap)
{
    /* decode B1/B16/B64/B256 over 4k..32k; prefill 1x8k, 4x2k; the mixed step */
    static const char *const full[] = {"d1x32768", "d16x4096",  "d16x16384",
                                       "d64x8192", "d64x32768", "d256x4096",
                                       "p1x8192",  "p4x2048",   ZOO_MIXED_STEP};
    static const char *const q[] = {"d16x4096", "d64x8192", "p4x2048", ZOO_MIXED_STEP};
    return quick ? from_names(q, 4, out, cap) : from_names(full, 9, out, cap);
}

uint32_t zoo_tune_steps(ah_phase phase, int quick, zoo_step *out, uint32_t cap)
{
    static const char *const dec[] = {"d16x4096", "d64x8192"}, *const pre[] = {"p1x8192",
                                                                               "p4x2048"};
    return from_names(phase == AH_PHASE_DECODE ? dec : pre, quick ? 1 : 2, out, cap);
}

int zoo_tune_mixed_step(zoo_step *out) { return zoo_parse_step(ZOO_MIXED_STEP, out); }

static int same_spec(const ah_layer_spec *a, const ah_layer_spec *b)
{
    return a->attn_type == b->attn_type && a->num_q_heads == b->num_q_heads &&
           a->num_kv_heads == b->num_kv_heads && a->qk_head_size == b->qk_head_size &&
           a->v_head_size == b->v_head_size && a->q_dtype == b->q_dtype &&
           a->kv_dtype == b->kv_dtype && a->block_size == b->block_size &&
           a->kv_layout == b->kv_layout && a->sliding_window == b->sliding_window &&
           a->softcap == b->softcap && a->scale == b->scale && a->use_mla == b->use_mla &&
           a->use_sinks == b->use_sinks && a->use_alibi == b->use_alibi &&
           ah_spec_causal(a) == ah_spec_causal(b) && a->fp8_attention == b->fp8_attention;
}

static int same_form(const ah_layer_spec *a, const ah_layer_spec *b)
{
    return !a || !b ? a == b : same_spec(a, b);
}

uint32_t zoo_distinct_specs(const ah_model *m, uint32_t *first, uint32_t *count, uint32_t cap)
{
    uint32_t n = 0;
    for (uint32_t l = 0; l < ah_model_num_layers(m); l++) {
        if (ah_model_layer_kind(m, l) != AH_LAYER_ATTENTION) continue;
        uint32_t i = 0;
        while (i < n &&
               !(same_spec(ah_model_layer(m, first[i]), ah_model_layer(m, l)) &&
                 same_form(ah_model_layer_ragged(m, first[i]), ah_model_layer_ragged(m, l))))
            i++;
        if (i < n) count[i]++;
        else if (n < cap) first[n] = l, count[n++] = 1;
    }
    return n;
}

ah_model *zoo_one_layer(const ah_model *m, uint32_t l, ah_error *err)
{
    ah_layer_spec s = *ah_model_layer(m, l), r = {0};
    s.struct_size = sizeof s;
    s.kv_group = 0; /* alone, the layer is its model's only group */
    const ah_layer_spec *form = ah_model_layer_ragged(m, l);
    if (form) r = *form;
    ah_model_desc d = {sizeof d, "zoo", 1, &s, NULL, form ? &r : NULL};
    ah_model *out = NULL;
    return ah_model_create(&d, &out, err) == AH_OK ? out : NULL;
}

void zoo_spec_label(const ah_layer_spec *s, char *b, size_t cap)
{
    size_t n =
        (size_t)snprintf(b, cap, "%u/%u d%u", s->num_q_heads, s->num_kv_heads, s->qk_head_size);
#define ADD(...) \
    if (n < cap) n += (size_t)snprintf(b + n, cap - n, __VA_ARGS__)
    if (s->v_head_size != s->qk_head_size) ADD("/%u", s->v_head_size);
    ADD(" %s", ah_dtype_name(s->q_dtype));
    if (s->kv_dtype != AH_DTYPE_AUTO && s->kv_dtype != s->q_dtype)
        ADD(" kv-%s", ah_dtype_name(s->kv_dtype));
    if (s->sliding_window) ADD(" w%u", s->sliding_window);
    if (s->softcap > 0) ADD(" cap%g", s->softcap);
    if (s->use_sinks) ADD(" sinks");
    if (s->use_mla) ADD(" mla");
    if (s->use_alibi) ADD(" alibi");
    if (!ah_spec_causal(s)) ADD(" non-causal");
    /* specs that differ only in their cache layout are distinct rows */
    if (s->kv_layout != AH_KV_LAYOUT_AUTO && s->kv_layout != AH_KV_LAYOUT_NHD)
        ADD(" %s", ah_kv_layout_str(s->kv_layout));
#undef ADD
}

void zoo_layer_label(const ah_model *m, uint32_t l, char *b, size_t cap)
{
    zoo_spec_label(ah_model_layer(m, l), b, cap);
    const ah_layer_spec *f = ah_model_layer_ragged(m, l);
    size_t n = strlen(b);
    if (f && n < cap)
        snprintf(b + n, cap - n, ", ragged %u/%u d%u/%u", f->num_q_heads, f->num_kv_heads,
                 f->qk_head_size, f->v_head_size);
}

/* Keys the new tokens of one request see, and the KV rows it reads. */
static void request_work(const ah_layer_spec *s, uint32_t c, uint32_t q, double *keys, double *rows)
{
    uint32_t w = s->sliding_window;
    if (!ah_spec_causal(s)) {
        *keys += (double)q * (c + q);
        *rows += c + q;
        return;
    }
    for (uint32_t i = 0; i < q; i++) {
        double vis = (double)c + i + 1;
        *keys += w && vis > w ? w : vis;
    }
    *rows += w && c + q > w + q - 1 ? (double)w + q - 1 : (double)c + q;
}

void zoo_work(const ah_layer_spec *s, const zoo_step *st, double *flops, double *bytes)
{
    double keys = 0, rows = 0, k1 = 0, r1 = 0;
    request_work(s, st->dec_ctx, 1, &k1, &r1);
    keys += k1 * st->n_dec, rows += r1 * st->n_dec;
    k1 = r1 = 0;
    if (st->n_pre) request_work(s, st->pre_ctx, st->pre_len, &k1, &r1);
    keys += k1 * st->n_pre, rows += r1 * st->n_pre;
    double tokens = (double)st->n_dec + (double)st->n_pre * st->pre_len;
    double row = s->use_mla ? (double)s->qk_head_size * ah_dtype_size(s->kv_dtype)
                            : (double)s->num_kv_heads * (s->qk_head_size + s->v_head_size) *
                                  ah_dtype_size(s->kv_dtype);
    *flops = 2.0 * s->num_q_heads * (s->qk_head_size + s->v_head_size) * keys;
    *bytes = rows * row + tokens * s->num_q_heads * (s->qk_head_size + s->v_head_size) *
                              ah_dtype_size(s->q_dtype);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int zoo_step_ragged(const zoo_step *st) { return st->n_pre && !st->n_dec && !st->pre_ctx; }

uint32_t zoo_ragged_candidates(ah_host *h, const ah_model *m1, const char *only,
                               ah_selection **sels, const ah_plugin_info **infos, uint32_t cap)
{
    uint32_t n = 0;
    for (size_t k = 0; ah_model_layer_ragged(m1, 0) && k < ah_host_plugin_count(h) && n < cap;
         k++) {
        const ah_plugin_info *in = ah_host_plugin(h, k);
        if (in->state != AH_PLUGIN_AVAILABLE || (only && strcmp(only, in->name))) continue;
        ah_error e;
        ah_selection *sel = NULL;
        if (ah_host_select_ragged(h, m1, in->name, &sel, &e) != AH_OK) continue;
        if (ah_selection_ragged_bound(sel, 0) &&
            !strcmp(ah_selection_ragged_decision(sel, 0)->plugin, in->name)) {
            sels[n] = sel;
            infos[n++] = in;
        } else {
            ah_selection_destroy(sel);
        }
    }
    return n;
}

int zoo_time(ah_host *h, const ah_model *m, const ah_selection *sel, const zoo_step *st,
             ah_mixed_steps mixed, int iters, int b2b, int ragged, zoo_timing *out, double *bw_gbs,
             char *err, size_t cap)
{
    workload w = {0};
    int rc = -1;
    uint32_t R = st->n_dec + st->n_pre, T = st->n_dec + st->n_pre * st->pre_len;
    uint32_t max_seq =
        st->dec_ctx + 1 > st->pre_ctx + st->pre_len ? st->dec_ctx + 1 : st->pre_ctx + st->pre_len;
    uint32_t *q = malloc(R * sizeof *q);
    double *ms = malloc((size_t)iters * sizeof *ms);
    memset(out, 0, sizeof *out);
    if (!q || !ms) {
        snprintf(err, cap, "out of host memory");
        goto out;
    }
    out->ragged = ragged && zoo_step_ragged(st) && ah_selection_ragged_bound(sel, 0);
    out->mixed = NULL;
    if (wl_create_sized(&w, h, m, sel, R, max_seq, T, NULL,
                        WL_TIMING | (out->ragged ? WL_RAGGED : 0), mixed, 7)) {
        snprintf(err, cap, "%s", w.err);
        goto out;
    }
    w.ragged_step = out->ragged;
    for (uint32_t r = 0; r < R; r++) {
        w.context[r] = r < st->n_dec ? st->dec_ctx : st->pre_ctx;
        q[r] = r < st->n_dec ? 1 : st->pre_len;
    }
    if (wl_step(&w, q)) {
        snprintf(err, cap, "%s", w.err);
        goto out;
    }
    out->mixed = !st->n_dec || !st->n_pre                ? NULL
                 : ah_binding_split(w.b, NULL, NULL) > 0 ? "split"
                                                         : "whole";
    /* every part of the step runs on the workload's one stream, a mixed step
     * split between two plugins too, so its device's timer sees them all */
    ah_device *dev = w.meta_dev;
    out->kind = ah_device_kind_of(dev);
    if (bw_gbs && *bw_gbs == 0)
        *bw_gbs = out->kind == AH_DEVICE_CPU ? cpu_read_gbs(ah_host_hw_facts(h)->cpu_logical_cores)
                                             : device_copy_gbs(dev);
    for (int i = 0; i < 3; i++)
        if (wl_forward_all(&w, 0)) goto fail;
    for (int i = 0; i < iters; i++) {
        float dms = 0;
        if (ah_device_timer_start(dev) != AH_OK) goto fail;
        for (int k = 0; k < b2b; k++)
            if (wl_enqueue_all(&w, 0)) goto fail;
        if (ah_device_timer_stop(dev, &dms) != AH_OK) goto fail;
        if (wl_sync(&w)) goto fail;
        ms[i] = (double)dms / b2b;
    }
    qsort(ms, (size_t)iters, sizeof *ms, cmp_double);
    double flops, bytes;
    zoo_work(out->ragged ? &w.layers[0].rspec : &w.layers[0].spec, st, &flops, &bytes);
    out->ms = ms[iters / 2];
    out->tflops = flops / (out->ms * 1e-3) / 1e12;
    out->gbs = bytes / (out->ms * 1e-3) / 1e9;
    rc = 0;
    goto out;
fail:
    snprintf(err, cap, "%s", w.err[0] ? w.err : ah_device_errmsg(w.layers[0].dev));
out:
    wl_destroy(&w);
    free(q);
    free(ms);
    return rc;
}
