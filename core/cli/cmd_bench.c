/*
 * attnhost bench: time standard attention shapes through one plugin and
 * report the median time, TFLOP/s, GB/s, and the fraction of the device's
 * memory bandwidth measured in the same run (and of a compute peak given
 * with --peak-tflops, or ATTNHOST_PEAK_TFLOPS).
 *
 * Work counted: FLOPs = 2 * Hq * (qk + v) * (visible keys summed over query
 * tokens); bytes = the KV cache rows each request reads once, plus q and
 * out. Timing excludes planning and the KV write (the cache is prefilled).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "ceilings.h"
#include "cli.h"
#include "workload.h"
#include "zoo.h"

typedef struct shape {
    const char *phase; /* "decode" or "prefill" */
    uint32_t batch, context, query;
    uint32_t hq, hk, head;
    const char *dtype, *kv_dtype;
    uint32_t block;
    int causal;
} shape;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static char *model_text(const shape *s)
{
    static char text[1024];
    snprintf(text, sizeof text,
             "[model]\nname = bench\nnum_layers = 1\nattn_type = decoder\ncausal = %s\n"
             "num_q_heads = %u\nnum_kv_heads = %u\nhead_size = %u\ndtype = %s\nkv_dtype = %s\n"
             "block_size = %u\n",
             s->causal ? "true" : "false", s->hq, s->hk, s->head, s->dtype, s->kv_dtype, s->block);
    return text;
}

/* Bench one shape; prints a line (or a JSON object). Returns -1 on error. */
static int bench_shape(ah_host *h, const char *plugin, const shape *s, int iters, int back_to_back,
                       double peak_tflops, double *bw_gbs, int json, int *first)
{
    ah_model *m = NULL;
    ah_selection *sel = NULL;
    ah_error err;
    workload w = {0};
    int rc = -1;
    if (ah_model_parse(model_text(s), "<bench shape>", &m, &err) != AH_OK ||
        ah_host_select_forced(h, m, plugin, &sel, &err) != AH_OK) {
        fprintf(stderr, "attnhost bench: %s\n", err.msg);
        goto out;
    }
    uint32_t tokens = s->batch * s->query;
    if (wl_create_sized(&w, h, m, sel, s->batch, s->context + s->query, tokens, NULL, WL_TIMING,
                        AH_MIXED_STEPS_CONFIG, 7)) {
        fprintf(stderr, "attnhost bench: %s\n", w.err);
        goto out;
    }
    for (uint32_t r = 0; r < s->batch; r++) w.context[r] = s->context;
    uint32_t *q = malloc(s->batch * sizeof *q);
    float *ms = malloc((size_t)iters * sizeof *ms);
    if (!q || !ms) goto out_free;
    for (uint32_t r = 0; r < s->batch; r++) q[r] = s->query;
    if (wl_step(&w, q)) {
        fprintf(stderr, "attnhost bench: %s\n", w.err);
        goto out_free;
    }
    ah_device *dev = w.meta_dev; /* its stream runs every layer */
    if (*bw_gbs == 0)
        *bw_gbs = ah_device_kind_of(dev) == AH_DEVICE_CPU
                      ? cpu_read_gbs(ah_host_hw_facts(h)->cpu_logical_cores)
                      : device_copy_gbs(dev);
    for (int i = 0; i < 3; i++)
        if (wl_forward_all(&w, 0)) goto fail;
    /* One forward per timing starts on an idle device, so the figure holds
     * the host's time to launch it; queued back to back, with no wait in
     * between, only the device's time. */
    for (int i = 0; i < iters; i++) {
        if (ah_device_timer_start(dev) != AH_OK) goto fail;
        for (int k = 0; k < back_to_back; k++)
            if (wl_enqueue_all(&w, 0)) goto fail;
        if (ah_device_timer_stop(dev, &ms[i]) != AH_OK || wl_sync(&w)) goto fail;
        ms[i] /= (float)back_to_back;
    }
    qsort(ms, (size_t)iters, sizeof *ms, cmp_float);
    double med = ms[iters / 2] * 1e-3;
    const ah_layer_spec *sp = &w.layers[0].spec;
    double keys = 0; /* visible keys summed over query tokens */
    for (uint32_t i = 0; i < s->query; i++)
        keys += s->causal ? (double)(s->context + i + 1) : (double)(s->context + s->query);
    keys *= s->batch;
    double flops = 2.0 * sp->num_q_heads * (sp->qk_head_size + sp->v_head_size) * keys;
    double kvb = (double)s->batch * (s->context + s->query) * sp->num_kv_heads *
                 (sp->qk_head_size + sp->v_head_size) * ah_dtype_size(sp->kv_dtype);
    double iob = (double)tokens * sp->num_q_heads * (sp->qk_head_size + sp->v_head_size) *
                 ah_dtype_size(sp->q_dtype);
    double tflops = flops / med / 1e12, gbs = (kvb + iob) / med / 1e9;
    if (json) {
        printf("%s\n  {\"plugin\": \"%s\", \"phase\": \"%s\", \"batch\": %u, \"context\": %u, "
               "\"query\": %u, \"heads\": \"%u/%u\", \"head_size\": %u, \"dtype\": \"%s\", "
               "\"kv_dtype\": \"%s\", \"block_size\": %u, \"causal\": %s, \"median_ms\": %.4f, "
               "\"tflops\": %.3f, \"gbs\": %.1f, \"bw_ceiling_gbs\": %.1f, \"bw_fraction\": %.3f",
               *first ? "" : ",", plugin, s->phase, s->batch, s->context, s->query, s->hq, s->hk,
               s->head, s->dtype, s->kv_dtype, s->block, s->causal ? "true" : "false", med * 1e3,
               tflops, gbs, *bw_gbs, *bw_gbs > 0 ? gbs / *bw_gbs : 0);
        if (peak_tflops > 0) printf(", \"compute_fraction\": %.3f", tflops / peak_tflops);
        printf(", \"back_to_back\": %d}", back_to_back);
    } else {
        printf(
            "%-8s b%-4u ctx%-6u q%-5u %2u/%-2u d%-3u %-5s kv %-8s %-10s %9.3f ms %8.2f TFLOP/s %8.1f GB/s "
            "%5.1f%% bw",
            s->phase, s->batch, s->context, s->query, s->hq, s->hk, s->head, s->dtype, s->kv_dtype,
            s->causal ? "causal" : "non-causal", med * 1e3, tflops, gbs,
            *bw_gbs > 0 ? 100 * gbs / *bw_gbs : 0);
        if (peak_tflops > 0) printf(" %5.1f%% peak", 100 * tflops / peak_tflops);
        printf("\n");
    }
    *first = 0;
    rc = 0;
    goto out_free;
fail:
    fprintf(stderr, "attnhost bench: %s\n", w.err[0] ? w.err : ah_device_errmsg(dev));
out_free:
    free(q);
    free(ms);
out:
    wl_destroy(&w);
    ah_selection_destroy(sel);
    ah_model_destroy(m);
    return rc;
}


/* ---- the zoo: bench --model and custom layer shapes ----------------------------- */

typedef struct zoo_opts {
    zoo_step steps[32];
    uint32_t n_steps, max_ctx, max_batch;
    int quick, iters, b2b;
    double peak;
} zoo_opts;

typedef struct zoo_row {
    const char *backend; /* "default" or a plugin */
    const char *prefill, *decode;
    const char *ragged; /* the plugin of the layer's ragged prefill form, or NULL */
    uint32_t block;     /* the cache's block size the selection resolved */
    zoo_timing t;
    int ok;
    char why[256];
} zoo_row;

static uint32_t sel_block(const ah_selection *sel)
{
    return sel ? ah_selection_decision(sel, 0, AH_PHASE_PREFILL)->spec.block_size : 0;
}

/* The plugin that runs the layer's ragged prefill form in sel (names the
 * selection owns), or NULL where it has none bound. */
static const char *sel_ragged(const ah_selection *sel)
{
    return sel && ah_selection_ragged_bound(sel, 0) ? ah_selection_ragged_decision(sel, 0)->plugin
                                                    : NULL;
}

/* Both selections run the layer's ragged prefill form on the same plugin,
 * or neither binds one. */
static int same_ragged(const ah_selection *a, const ah_selection *b)
{
    int ra = ah_selection_ragged_bound(a, 0), rb = ah_selection_ragged_bound(b, 0);
    return ra == rb && (!ra || !strcmp(ah_selection_ragged_decision(a, 0)->plugin,
                                       ah_selection_ragged_decision(b, 0)->plugin));
}

static void print_row(const cli_common *c, const ah_model *m, const ah_layer_spec *sp,
                      uint32_t first_layer, uint32_t n_layers, const zoo_step *st, const zoo_row *r,
                      const zoo_opts *o, double bw, int *first)
{
    char label[160];
    zoo_layer_label(m, first_layer, label, sizeof label);
    if (!c->json) {
        if (!r->ok) {
            printf("  %-22s %-18s skipped: %s\n", st->name, r->backend, r->why);
            return;
        }
        printf("  %-22s %-18s %9.3f ms %8.2f TFLOP/s %8.1f GB/s %5.1f%% bw", st->name, r->backend,
               r->t.ms, r->t.tflops, r->t.gbs, bw > 0 ? 100 * r->t.gbs / bw : 0);
        if (o->peak > 0) printf(" %5.1f%% peak", 100 * r->t.tflops / o->peak);
        if (!strcmp(r->backend, "default")) printf("  (%s / %s)", r->prefill, r->decode);
        printf("  block %u%s%s%s%s\n", r->block, r->t.ragged ? ", ragged on " : "",
               r->t.ragged && r->ragged ? r->ragged : "", r->t.mixed ? ", " : "",
               r->t.mixed ? r->t.mixed : "");
        return;
    }
    printf("%s\n  {\"model\": ", *first ? "" : ",");
    cli_json_str(stdout, ah_model_name(m));
    printf(", \"spec\": \"%s\", \"first_layer\": %u, \"layers\": %u, \"heads\": \"%u/%u\", "
           "\"qk_head_size\": %u, \"v_head_size\": %u, \"dtype\": \"%s\", \"kv_dtype\": \"%s\", "
           "\"window\": %u, \"softcap\": %g, \"sinks\": %s, \"alibi\": %s, \"mla\": %s, "
           "\"causal\": %s, ",
           label, first_layer, n_layers, sp->num_q_heads, sp->num_kv_heads, sp->qk_head_size,
           sp->v_head_size, ah_dtype_name(sp->q_dtype), ah_dtype_name(sp->kv_dtype),
           sp->sliding_window, sp->softcap, sp->use_sinks ? "true" : "false",
           sp->use_alibi ? "true" : "false", sp->use_mla ? "true" : "false",
           ah_spec_causal(sp) ? "true" : "false");
    printf("\"step\": \"%s\", \"n_decode\": %u, \"decode_context\": %u, \"n_prefill\": %u, "
           "\"prefill_len\": %u, \"prefill_context\": %u, \"backend\": \"%s\", \"prefill_plugin\": "
           "\"%s\", \"decode_plugin\": \"%s\", \"block_size\": %u",
           st->name, st->n_dec, st->dec_ctx, st->n_pre, st->pre_len, st->pre_ctx, r->backend,
           r->prefill, r->decode, r->block);
    if (!r->ok) {
        printf(", \"skipped\": ");
        cli_json_str(stdout, r->why);
        printf("}");
    } else {
        printf(", \"median_ms\": %.4f, \"tflops\": %.3f, \"gbs\": %.1f, \"bw_fraction\": %.3f",
               r->t.ms, r->t.tflops, r->t.gbs, bw > 0 ? r->t.gbs / bw : 0);
        if (o->peak > 0) printf(", \"compute_fraction\": %.3f", r->t.tflops / o->peak);
        printf(", \"ragged\": %s", r->t.ragged ? "true" : "false");
        if (r->t.mixed) printf(", \"split\": %s", strcmp(r->t.mixed, "split") ? "false" : "true");
        if (r->t.ragged) {
            const ah_layer_spec *f = ah_model_layer_ragged(m, first_layer);
            printf(", \"ragged_heads\": \"%u/%u\", \"ragged_qk\": %u, \"ragged_v\": %u, "
                   "\"ragged_plugin\": \"%s\"",
                   f->num_q_heads, f->num_kv_heads, f->qk_head_size, f->v_head_size,
                   r->ragged ? r->ragged : "");
        }
        printf(", \"timer\": \"device\", \"back_to_back\": %d}", o->b2b);
    }
    *first = 0;
}

/* Every distinct layer spec of m at every step: through the default
 * binding and through each plugin that can serve the spec, forced. */
static int bench_model(cli_common *c, ah_host *h, const ah_model *m, zoo_opts *o)
{
    uint32_t first_l[256], count[256];
    uint32_t ns = zoo_distinct_specs(m, first_l, count, 256);
    double bw = 0;
    int first = 1, rc = 0;
    if (c->json) {
        printf("{\"model\": ");
        cli_json_str(stdout, ah_model_name(m));
        printf(", \"results\": [");
    } else
        printf("model %s: %u distinct attention layer spec%s, %u steps, median of %d runs%s\n",
               ah_model_name(m), ns, ns == 1 ? "" : "s", o->n_steps, o->iters,
               o->b2b > 1 ? " of forwards back to back" : "");
    for (uint32_t i = 0; i < ns; i++) {
        const ah_layer_spec *sp = ah_model_layer(m, first_l[i]);
        ah_error err;
        ah_model *m1 = zoo_one_layer(m, first_l[i], &err);
        ah_selection *def = NULL;
        char label[160];
        zoo_layer_label(m, first_l[i], label, sizeof label);
        if (!m1) {
            fprintf(stderr, "attnhost bench: layer %u: %s\n", first_l[i], err.msg);
            rc = 1;
            continue;
        }
        const char *dp = NULL, *dd = NULL; /* the default winners (host-owned names) */
        if (ah_host_select(h, m1, &def, &err) == AH_OK) {
            dp = ah_host_find_plugin(h, ah_selection_decision(def, 0, AH_PHASE_PREFILL)->plugin)
                     ->name;
            dd = ah_host_find_plugin(h, ah_selection_decision(def, 0, AH_PHASE_DECODE)->plugin)
                     ->name;
        }
        /* the plugins that can serve it, forced */
        const char *plugs[64];
        ah_selection *psel[64];
        uint32_t np = 0;
        /* a CPU plugin at a GPU's steps takes minutes and says nothing: with the
         * default on a GPU, CPU plugins run only when --plugin names them */
        const ah_plugin_info *dpi = dp ? ah_host_find_plugin(h, dp) : NULL;
        int gpu_default = dpi && dpi->device_kind != AH_DEVICE_CPU;
        for (size_t k = 0; k < ah_host_plugin_count(h) && np < 64; k++) {
            const ah_plugin_info *in = ah_host_plugin(h, k);
            if (in->state != AH_PLUGIN_AVAILABLE || (c->plugin && strcmp(c->plugin, in->name)))
                continue;
            if (gpu_default && !c->plugin && in->device_kind == AH_DEVICE_CPU) continue;
            ah_error e2;
            if (ah_host_select_forced(h, m1, in->name, &psel[np], &e2) == AH_OK)
                plugs[np++] = in->name;
        }
        /* the plugins that can serve its ragged prefill form beside the
         * default paged forms (rows "ragged:P" at the steps that run it),
         * CPU plugins as above */
        char rnames[64][80];
        ah_selection *rsel[64];
        const ah_plugin_info *rinfo[64];
        uint32_t nr = 0;
        const uint32_t nrc = zoo_ragged_candidates(h, m1, c->plugin, rsel, rinfo, 64);
        for (uint32_t k = 0; k < nrc; k++) {
            if (gpu_default && !c->plugin && rinfo[k]->device_kind == AH_DEVICE_CPU) {
                ah_selection_destroy(rsel[k]);
                continue;
            }
            rsel[nr] = rsel[k];
            snprintf(rnames[nr++], sizeof rnames[0], "ragged:%s", rinfo[k]->name);
        }
        if (!c->json)
            printf("\nspec %s (layer %u, %u layer%s): default %s%s%s%s\n", label, first_l[i],
                   count[i], count[i] == 1 ? "" : "s",
                   dp ? "prefill " : "none: ", dp ? dp : err.msg, dp ? ", decode " : "",
                   dp ? dd : "");
        for (uint32_t k = 0; k < o->n_steps; k++) {
            const zoo_step *st = &o->steps[k];
            zoo_row def_row = {.backend = "default",
                               .prefill = dp ? dp : "",
                               .decode = dd ? dd : "",
                               .ragged = sel_ragged(def),
                               .block = sel_block(def),
                               .why = "no backend can serve it"};
            int def_done = !dp;
            for (uint32_t j = 0; j < np; j++) {
                zoo_row r = {.backend = plugs[j],
                             .prefill = plugs[j],
                             .decode = plugs[j],
                             .ragged = sel_ragged(psel[j]),
                             .block = sel_block(psel[j])};
                r.ok = !zoo_time(h, m1, psel[j], st, AH_MIXED_STEPS_CONFIG, o->iters, o->b2b, 1,
                                 &r.t, &bw, r.why, sizeof r.why);
                if (!r.ok) rc = 1;
                /* the default binding is this plugin in the step's phases: the same run */
                int dec_ok = !st->n_dec || (dd && !strcmp(dd, plugs[j]));
                int pre_ok = !st->n_pre || (dp && !strcmp(dp, plugs[j]));
                if (!def_done && dec_ok && pre_ok && r.block == def_row.block &&
                    (!st->n_pre || same_ragged(def, psel[j]))) {
                    def_row.t = r.t;
                    def_row.ok = r.ok;
                    snprintf(def_row.why, sizeof def_row.why, "%s", r.why);
                    def_done = 1;
                }
                if (j == 0 && !def_done) { /* run it first, so it prints first */
                    def_row.ok = !zoo_time(h, m1, def, st, AH_MIXED_STEPS_CONFIG, o->iters, o->b2b,
                                           1, &def_row.t, &bw, def_row.why, sizeof def_row.why);
                    if (!def_row.ok) rc = 1;
                    def_done = 1;
                }
                if (j == 0) print_row(c, m, sp, first_l[i], count[i], st, &def_row, o, bw, &first);
                print_row(c, m, sp, first_l[i], count[i], st, &r, o, bw, &first);
            }
            if (!np) {
                if (def) {
                    def_row.ok = !zoo_time(h, m1, def, st, AH_MIXED_STEPS_CONFIG, o->iters, o->b2b,
                                           1, &def_row.t, &bw, def_row.why, sizeof def_row.why);
                    if (!def_row.ok) rc = 1;
                }
                print_row(c, m, sp, first_l[i], count[i], st, &def_row, o, bw, &first);
            }
            /* the ragged form on each plugin, where the step runs it */
            for (uint32_t j = 0; j < nr && zoo_step_ragged(st); j++) {
                zoo_row r = {.backend = rnames[j],
                             .prefill = dp ? dp : "",
                             .decode = dd ? dd : "",
                             .ragged = sel_ragged(rsel[j]),
                             .block = sel_block(rsel[j])};
                r.ok = !zoo_time(h, m1, rsel[j], st, AH_MIXED_STEPS_CONFIG, o->iters, o->b2b, 1,
                                 &r.t, &bw, r.why, sizeof r.why);
                if (!r.ok) rc = 1;
                print_row(c, m, sp, first_l[i], count[i], st, &r, o, bw, &first);
            }
        }
        for (uint32_t j = 0; j < np; j++) ah_selection_destroy(psel[j]);
        for (uint32_t j = 0; j < nr; j++) ah_selection_destroy(rsel[j]);
        ah_selection_destroy(def);
        ah_model_destroy(m1);
    }
    if (c->json) {
        printf("\n], \"bw_ceiling_gbs\": %.1f", bw);
        if (o->peak > 0) printf(", \"peak_tflops\": %.1f", o->peak);
        printf("}\n");
    } else
        printf("\nbandwidth ceiling measured in this run: %.1f GB/s (the first device timed)%s\n",
               bw, o->peak > 0 ? "" : "; no compute peak given (--peak-tflops)");
    return rc;
}

int cmd_bench(cli_common *c)
{
    shape custom = {"decode", 16, 4096, 1, 32, 8, 128, "bf16", "auto", 16, 1};
    int have_custom = 0, iters = 20, quick = 0, batch_given = 0, zoo = c->model != NULL;
    zoo_opts zo = {0};
    uint32_t window = 0;
    double softcap = 0;
    int sinks = 0, mla = 0, alibi = 0;
    uint32_t back_to_back = 1;
    for (int i = 0; i < c->argc; i++)
        if (!strcmp(c->argv[i], "--cp")) return cmd_bench_cp(c);
    const char *peak_env = secure_getenv("ATTNHOST_PEAK_TFLOPS");
    double peak = peak_env ? atof(peak_env) : 0;
    for (int i = 0; i < c->argc; i++) {
        const char *a = c->argv[i], *v = i + 1 < c->argc ? c->argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--quick")) quick = 1;
        else if (!strcmp(a, "--non-causal")) custom.causal = 0, have_custom = 1;
        else if (!strcmp(a, "--sinks")) sinks = zoo = 1;
        else if (!strcmp(a, "--alibi")) alibi = zoo = 1;
        else if (!strcmp(a, "--mla")) mla = zoo = 1;
        else if (!v) bad = 1;
        else if (!strcmp(a, "--step")) {
            if (zo.n_steps == 32 || zoo_parse_step(v, &zo.steps[zo.n_steps])) {
                fprintf(stderr,
                        "attnhost bench: --step: '%s' is not dBxC, pBxL[@C] or "
                        "mDxC+PxL[@K] (or more than 32 steps)\n",
                        v);
                return 2;
            }
            zo.n_steps++, zoo = 1, i++;
        } else if (!strcmp(a, "--window"))
            bad = cli_parse_count("bench", a, v, &window), zoo = 1, i++;
        else if (!strcmp(a, "--softcap")) softcap = atof(v), zoo = 1, bad = !(softcap > 0), i++;
        else if (!strcmp(a, "--max-context"))
            bad = cli_parse_count("bench", a, v, &zo.max_ctx), i++;
        else if (!strcmp(a, "--max-batch"))
            bad = cli_parse_count("bench", a, v, &zo.max_batch), i++;
        else if (!strcmp(a, "--phase")) custom.phase = v, have_custom = 1, i++;
        else if (!strcmp(a, "--batch"))
            bad = cli_parse_count("bench", a, v, &custom.batch), have_custom = batch_given = 1, i++;
        else if (!strcmp(a, "--context"))
            bad = cli_parse_count("bench", a, v, &custom.context), have_custom = 1, i++;
        else if (!strcmp(a, "--query"))
            bad = cli_parse_count("bench", a, v, &custom.query), have_custom = 1, i++;
        else if (!strcmp(a, "--head-size"))
            bad = cli_parse_count("bench", a, v, &custom.head), have_custom = 1, i++;
        else if (!strcmp(a, "--block-size"))
            bad = cli_parse_count("bench", a, v, &custom.block), have_custom = 1, i++;
        else if (!strcmp(a, "--dtype")) custom.dtype = v, have_custom = 1, i++;
        else if (!strcmp(a, "--kv-dtype")) custom.kv_dtype = v, have_custom = 1, i++;
        else if (!strcmp(a, "--iters"))
            bad = cli_parse_count("bench", a, v, (uint32_t *)&iters), i++;
        else if (!strcmp(a, "--back-to-back"))
            bad = cli_parse_count("bench", a, v, &back_to_back), i++;
        else if (!strcmp(a, "--peak-tflops")) peak = atof(v), i++;
        else if (!strcmp(a, "--heads")) {
            if (sscanf(v, "%u/%u", &custom.hq, &custom.hk) != 2 || !custom.hq || !custom.hk) {
                fprintf(stderr, "attnhost bench: --heads: '%s' is not Q/KV, e.g. 32/8\n", v);
                return 2;
            }
            have_custom = 1, i++;
        } else bad = 1;
        if (bad) {
            fprintf(stderr, "attnhost bench: bad option '%s'%s\n", a, v ? "" : " (missing value)");
            return 2;
        }
    }
    if (back_to_back > 1000) {
        fprintf(stderr, "attnhost bench: --back-to-back: %u is more than 1000\n", back_to_back);
        return 2;
    }
    if (zoo) {
        if (c->model && (have_custom || window || softcap > 0 || sinks || alibi || mla)) {
            fprintf(stderr,
                    "attnhost bench: --model takes its shapes from the model; shape "
                    "options (--heads, --window, --mla, ...) are for a custom layer without it\n");
            return 2;
        }
        ah_host *h = cli_host(c);
        if (!h) return 1;
        ah_model *m = NULL;
        ah_error err;
        if (c->model) m = cli_model(c);
        else {
            char text[1536];
            int n = snprintf(text, sizeof text,
                             "[model]\nname = custom\nnum_layers = 1\n"
                             "num_q_heads = %u\ndtype = %s\nkv_dtype = %s\n",
                             custom.hq, custom.dtype, custom.kv_dtype);
            if (mla)
                n += snprintf(text + n, sizeof text - (size_t)n,
                              "mla = true\nkv_lora_rank = 512\n"
                              "qk_rope_head_dim = 64\nblock_size = %u\n",
                              custom.block == 16 ? 64u : custom.block);
            else
                n += snprintf(text + n, sizeof text - (size_t)n,
                              "num_kv_heads = %u\nhead_size = %u\n"
                              "block_size = %u\ncausal = %s\n",
                              custom.hk, custom.head, custom.block,
                              custom.causal ? "true" : "false");
            if (window)
                n += snprintf(text + n, sizeof text - (size_t)n, "sliding_window = %u\n", window);
            if (softcap > 0)
                n += snprintf(text + n, sizeof text - (size_t)n, "softcap = %g\n", softcap);
            if (sinks) n += snprintf(text + n, sizeof text - (size_t)n, "sinks = true\n");
            if (alibi) snprintf(text + n, sizeof text - (size_t)n, "alibi = true\n");
            if (ah_model_parse(text, "<bench custom layer>", &m, &err) != AH_OK) {
                fprintf(stderr, "attnhost bench: %s\n", err.msg);
                m = NULL;
            }
        }
        int rc = 1;
        if (m) {
            if (!zo.n_steps) zo.n_steps = zoo_standard_steps(quick, zo.steps, 32);
            uint32_t kept = 0; /* clamped steps that became the same run once */
            for (uint32_t k = 0; k < zo.n_steps; k++) {
                zoo_clamp(&zo.steps[k], zo.max_ctx, zo.max_batch);
                int dup = 0;
                for (uint32_t j = 0; j < kept && !dup; j++)
                    dup = !strcmp(zo.steps[j].name, zo.steps[k].name);
                if (!dup) zo.steps[kept++] = zo.steps[k];
            }
            zo.n_steps = kept;
            zo.quick = quick, zo.iters = iters, zo.b2b = (int)back_to_back, zo.peak = peak;
            rc = bench_model(c, h, m, &zo);
        }
        ah_model_destroy(m);
        ah_host_destroy(h);
        return rc;
    }
    if (!strcmp(custom.phase, "prefill")) { /* one long prompt unless told otherwise */
        if (custom.query == 1) custom.query = custom.context, custom.context = 0;
        if (!batch_given) custom.batch = 1;
    } else if (strcmp(custom.phase, "decode")) {
        fprintf(stderr, "attnhost bench: --phase: '%s' is not decode or prefill\n", custom.phase);
        return 2;
    }
    ah_host *h = cli_host(c);
    if (!h) return 1;
    const char *plugin = c->plugin;
    if (!plugin) { /* the first available plugin in the host's default order */
        ah_model *m = NULL;
        ah_selection *sel = NULL;
        ah_error err;
        if (ah_model_parse(model_text(&custom), "<bench shape>", &m, &err) == AH_OK &&
            ah_host_select(h, m, &sel, &err) == AH_OK) {
            const ah_plugin_info *p =
                ah_host_find_plugin(h, ah_selection_decision(sel, 0, AH_PHASE_DECODE)->plugin);
            plugin = p->name; /* host-owned: outlives sel */
        }
        ah_selection_destroy(sel);
        ah_model_destroy(m);
        if (!plugin) {
            fprintf(stderr, "attnhost bench: no plugin can serve the shape: %s\n", err.msg);
            ah_host_destroy(h);
            return 1;
        }
    }
    /* the standard shapes of bench/RESULTS.md */
    const ah_plugin_info *pi = ah_host_find_plugin(h, plugin);
    int cpu = pi && pi->device_kind == AH_DEVICE_CPU;
    shape std[12];
    int n = 0;
    uint32_t dec_b[2] = {16, 64}, dec_ctx[2] = {4096, 16384};
    uint32_t pre_len[2] = {cpu ? 2048u : 4096u, cpu ? 8192u : 16384u};
    if (have_custom) std[n++] = custom;
    else {
        for (int b = 0; b < 2; b++)
            for (int k = 0; k < 2; k++)
                if (!quick || (b == 0 && k == 0))
                    std[n++] = (shape){"decode", dec_b[b], dec_ctx[k], 1,  32, 8,
                                       128,      "bf16",   "auto",     16, 1};
        for (int k = 0; k < 2; k++)
            for (int causal = 1; causal >= (cpu ? 1 : 0); causal--)
                if (!quick || k == 0)
                    std[n++] = (shape){"prefill", 1,      0,      pre_len[k], 32,    8,
                                       128,       "bf16", "auto", 16,         causal};
    }
    double bw = 0;
    int first = 1, rc = 0;
    if (c->json) printf("{\"plugin\": \"%s\", \"results\": [", plugin);
    else if (back_to_back > 1)
        printf("plugin %s, median of %d runs of %u forwards back to back\n", plugin, iters,
               back_to_back);
    else printf("plugin %s, median of %d runs\n", plugin, iters);
    for (int i = 0; i < n; i++)
        if (bench_shape(h, plugin, &std[i], iters, (int)back_to_back, peak, &bw, c->json, &first))
            rc = 1;
    if (c->json) printf("\n], \"bw_ceiling_gbs\": %.1f}\n", bw);
    else
        printf("bandwidth ceiling measured in this run: %.1f GB/s%s\n", bw,
               cpu ? " (all cores reading)" : " (device copy, read + write)");
    ah_host_destroy(h);
    return rc;
}
