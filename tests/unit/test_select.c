/*
 * Selection: priority lists at every level, reasons for every candidate,
 * force, disable, fallback, phases, check_combination, the decision cache
 * and the model's CUDA-graph level, over the test plugins sel_alpha (heads
 * 64/128, at most 4 KV heads), sel_beta (anything fp32, graphs) and
 * sel_gamma (never available); the default order by device kind, rank and
 * name over the rank plugins (rk_*: fake CUDA, HIP, Level Zero and CPU
 * plugins of chosen ranks, each in its own directory, put together into
 * "machines").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/attnhost.h>

#include "check.h"

static const char *const sel_dir[] = {ATTNHOST_SELECT_PLUGIN_DIR};

/* ah_host_create from ini over the n dirs alone (no default directories,
 * no scan cache). */
static ah_status create(const char *ini, const char *const *dirs, uint32_t n, ah_host **h,
                        ah_error *err)
{
    ah_host_options o = {.struct_size = sizeof o,
                         .config_text = ini,
                         .plugin_dirs = dirs,
                         .n_plugin_dirs = n,
                         .no_default_dirs = 1,
                         .cache_path = ""};
    *h = NULL;
    return ah_host_create(&o, h, err);
}

static ah_host *host_with(const char *ini)
{
    ah_host *h;
    ah_error err;
    ah_status s = create(ini, sel_dir, 1, &h, &err);
    CHECK_MSG(s == AH_OK, "%s", err.msg);
    return h;
}

static ah_model *model(const char *text)
{
    ah_model *m = NULL;
    ah_error err;
    CHECK_MSG(ah_model_parse(text, "<test model>", &m, &err) == AH_OK, "%s", err.msg);
    return m;
}

#define LLAMA_SMALL \
    "[model]\nname = t\nnum_layers = 4\nnum_q_heads = 8\nnum_kv_heads = 2\n" \
    "head_size = 64\ndtype = fp32\n"

static const ah_candidate *cand(const ah_decision *d, const char *name)
{
    for (uint32_t i = 0; i < d->n_candidates; i++)
        if (!strcmp(d->candidates[i].plugin, name)) return &d->candidates[i];
    return NULL;
}

static int has_reason(const ah_candidate *c, ah_reason_code code, const char *field,
                      const char *value)
{
    for (uint32_t i = 0; c && i < c->n_reasons; i++)
        if (c->reasons[i].code == code && (!field || !strcmp(c->reasons[i].field, field)) &&
            (!value || !strcmp(c->reasons[i].value, value)))
            return 1;
    return 0;
}

/* The candidates of d in order, as "a b c". */
static int order_is(const ah_decision *d, const char *names)
{
    char got[512] = "";
    size_t len = 0;
    for (uint32_t i = 0; i < d->n_candidates && len < sizeof got; i++)
        len += (size_t)snprintf(got + len, sizeof got - len, "%s%s", i ? " " : "",
                                d->candidates[i].plugin);
    if (strcmp(got, names) == 0) return 1;
    fprintf(stderr, "candidates: got '%s', want '%s'\n", got, names);
    return 0;
}

/* Select m on a host with ini: layer 0's prefill winner is winner, and
 * loser has a reason of code for field = value. */
static void expect_loser(const char *ini, const ah_model *m, const char *winner, const char *loser,
                         ah_reason_code code, const char *field, const char *value)
{
    ah_host *h = host_with(ini);
    ah_selection *s = NULL;
    ah_error err;
    CHECK_MSG(ah_host_select(h, m, &s, &err) == AH_OK, "%s", err.msg);
    const ah_decision *d = s ? ah_selection_decision(s, 0, AH_PHASE_PREFILL) : NULL;
    if (d) {
        CHECK_STREQ(d->plugin, winner);
        CHECK(has_reason(cand(d, loser), code, field, value));
    }
    ah_selection_destroy(s);
    ah_host_destroy(h);
}

static void test_default_order(void)
{
    ah_host *h = host_with("[select]\nfallback = error\n");
    ah_model *m = model(LLAMA_SMALL);
    ah_selection *s = NULL;
    ah_error err;
    CHECK_MSG(ah_host_select(h, m, &s, &err) == AH_OK, "%s", err.msg);
    const ah_decision *d = ah_selection_decision(s, 0, AH_PHASE_PREFILL);
    /* the default order: three CPU plugins of one rank, by name; the core
     * names no plugin of its own (no cpu_amx "not found" any more) */
    CHECK_STREQ(d->plugin, "sel_alpha");
    CHECK_STREQ(d->list_source, "default (ranks, GPU first: cpu)");
    CHECK(order_is(d, "sel_alpha sel_beta sel_gamma"));
    CHECK(!cand(d, "cpu_amx"));
    CHECK(cand(d, "sel_alpha")->chosen && cand(d, "sel_alpha")->n_reasons == 0);
    CHECK(has_reason(cand(d, "sel_beta"), AH_REASON_LOST_ON_PRIORITY, "priority", "sel_alpha"));
    CHECK(has_reason(cand(d, "sel_gamma"), AH_REASON_UNAVAILABLE, "probe",
                     "no gamma accelerator in this machine"));
    /* resolved spec: kv dtype and block size from the winner */
    CHECK(d->spec.kv_dtype == AH_DTYPE_FP32 && d->spec.block_size == 16);
    CHECK(d->spec.kv_layout == AH_KV_LAYOUT_NHD && d->spec.scale > 0.124f &&
          d->spec.scale < 0.126f);
    ah_selection_destroy(s);
    ah_model_destroy(m);
    ah_host_destroy(h);
}

static void test_reasons_and_priority(void)
{
    ah_host *h = host_with("[select]\npriority = sel_beta, sel_alpha\n");
    ah_model *m = model("[model]\nname = t\nnum_layers = 2\nnum_q_heads = 8\nnum_kv_heads = 8\n"
                        "head_size = 80\ndtype = fp32\n");
    ah_selection *s = NULL;
    ah_error err;
    CHECK_MSG(ah_host_select(h, m, &s, &err) == AH_OK, "%s", err.msg);
    const ah_decision *d = ah_selection_decision(s, 1, AH_PHASE_DECODE);
    CHECK_STREQ(d->plugin, "sel_beta");
    CHECK_STREQ(d->list_source, "[select] priority");
    const ah_candidate *a = cand(d, "sel_alpha");
    CHECK(has_reason(a, AH_REASON_HEAD_SIZE, "qk_head_size", "80"));
    CHECK(a && a->n_reasons >= 1 && !strcmp(a->reasons[0].supported, "{64, 128}"));
    /* check_combination is not consulted once a static check failed */
    CHECK(!has_reason(a, AH_REASON_COMBINATION, NULL, NULL));
    ah_selection_destroy(s);
    ah_model_destroy(m);
    ah_host_destroy(h);

    /* 8 KV heads at head 64: only the plugin's own rule says no */
    m = model(
        "[model]\nname = t\nnum_layers = 1\nnum_q_heads = 8\nnum_kv_heads = 8\nhead_size = 64\n"
        "dtype = fp32\n");
    expect_loser("[select]\npriority = sel_alpha, sel_beta\n", m, "sel_beta", "sel_alpha",
                 AH_REASON_COMBINATION, "num_kv_heads", "8");
    ah_model_destroy(m);
}

/* A fnuz FP8 cache (ABI 2.3) before a plugin that lists only OCP's or no
 * FP8 type: refused on kv_dtype, the reason naming the fnuz type and what
 * the plugin takes. */
static void test_fnuz_refused(void)
{
    ah_host *h = host_with("[select]\npriority = sel_beta\n");
    ah_model *m = model("[model]\nname = z\nnum_layers = 1\nnum_q_heads = 8\nnum_kv_heads = 2\n"
                        "head_size = 64\ndtype = fp32\nkv_dtype = fp8_e4m3fnuz\n");
    ah_selection *s = NULL;
    ah_error err;
    CHECK(ah_host_explain(h, m, NULL, &s, &err) != AH_OK);
    if (!s) goto out;
    const ah_candidate *c = cand(ah_selection_decision(s, 0, AH_PHASE_PREFILL), "sel_beta");
    CHECK(has_reason(c, AH_REASON_KV_DTYPE, "kv_dtype", "fp8_e4m3fnuz"));
    for (uint32_t i = 0; c && i < c->n_reasons; i++)
        if (c->reasons[i].code == AH_REASON_KV_DTYPE)
            CHECK_STREQ(c->reasons[i].supported, "{fp32}");
    ah_selection_destroy(s);
out:
    ah_model_destroy(m);
    ah_host_destroy(h);
}

/* FP8 scales (ABI 2.3): a layer whose scales come per head, in tensors,
 * with a query scale needs a plugin claiming each; one that claims none
 * gets a reason per missing feature, and layers differing only in the
 * scale form get decisions of their own. */
static void test_scale_features(void)
{
    ah_host *h = host_with("[select]\npriority = sel_beta\n");
    ah_model *m = model("[model]\nname = t\nnum_layers = 2\nnum_q_heads = 8\nnum_kv_heads = 2\n"
                        "head_size = 64\ndtype = fp32\nkv_dtype = fp8_e4m3\n"
                        "fp8_attention = true\n[layers.1]\nkv_scales = per_head\nq_scale = true\n");
    ah_selection *s = NULL;
    ah_error err;
    CHECK(ah_host_explain(h, m, NULL, &s, &err) != AH_OK);
    if (!s) goto out;
    const ah_candidate *c0 = cand(ah_selection_decision(s, 0, AH_PHASE_PREFILL), "sel_beta");
    const ah_candidate *c1 = cand(ah_selection_decision(s, 1, AH_PHASE_PREFILL), "sel_beta");
    CHECK(has_reason(c0, AH_REASON_KV_DTYPE, NULL, NULL));
    CHECK(!has_reason(c0, AH_REASON_FEATURE, "scale_tensors", NULL));
    CHECK(has_reason(c1, AH_REASON_FEATURE, "kv_scale_per_head", "needed"));
    CHECK(has_reason(c1, AH_REASON_FEATURE, "scale_tensors", "needed"));
    CHECK(has_reason(c1, AH_REASON_FEATURE, "q_scale", "needed"));
    CHECK(ah_selection_decision(s, 1, AH_PHASE_PREFILL)->spec.kv_scales == AH_KV_SCALES_PER_HEAD);
    ah_selection_destroy(s);
out:
    ah_model_destroy(m);
    ah_host_destroy(h);
}

static void test_force_disable_fallback(void)
{
    ah_error err;
    ah_selection *s = NULL;
    ah_model *m = model("[model]\nname = t\nnum_layers = 1\nnum_q_heads = 4\nnum_kv_heads = 4\n"
                        "head_size = 80\ndtype = fp32\n");
    /* a forced backend that cannot serve is an error with its reasons */
    ah_host *h = host_with("[select]\nforce = sel_alpha\nfallback = allow\n");
    CHECK(ah_host_select(h, m, &s, &err) == AH_ERR_UNSUPPORTED && !s);
    CHECK_CONTAINS(err.msg, "layer 0 (prefill): the forced backend cannot serve it");
    CHECK_CONTAINS(err.msg, "qk_head_size=80 (supported: {64, 128})");
    ah_host_destroy(h);

    /* fallback = error: nothing listed fits */
    h = host_with("[select]\npriority = sel_gamma, sel_alpha\nfallback = error\n");
    CHECK(ah_host_select(h, m, &s, &err) == AH_ERR_NOT_FOUND && !s);
    CHECK_CONTAINS(err.msg, "no backend can serve it");
    CHECK_CONTAINS(err.msg, "sel_gamma: probe=no gamma accelerator in this machine");
    ah_host_destroy(h);

    /* fallback = warn: another plugin, with a warning */
    h = host_with("[select]\npriority = sel_gamma, sel_alpha\nfallback = warn\n");
    CHECK(ah_host_select(h, m, &s, &err) == AH_OK);
    const ah_decision *d = ah_selection_decision(s, 0, AH_PHASE_PREFILL);
    CHECK_STREQ(d->plugin, "sel_beta");
    CHECK(d->fallback == 1);
    CHECK_CONTAINS(ah_selection_warnings(s), "fell back to sel_beta");
    ah_selection_destroy(s);
    ah_host_destroy(h);

    /* disable */
    ah_model_destroy(m);
    m = model(LLAMA_SMALL);
    expect_loser("[select]\npriority = sel_beta, sel_alpha\ndisable = sel_beta\n", m, "sel_alpha",
                 "sel_beta", AH_REASON_DISABLED, "plugin", "sel_beta");
    ah_model_destroy(m);
}

static void test_layers_and_phases(void)
{
    ah_host *h = host_with("[select]\nprefill_priority = sel_alpha\ndecode_priority = sel_beta\n"
                           "[layer.1]\nbackend = sel_beta\n"
                           "[layer.2-3]\npriority = sel_beta, sel_alpha\n");
    ah_model *m = model(LLAMA_SMALL);
    ah_selection *s = NULL;
    ah_error err;
    CHECK_MSG(ah_host_select(h, m, &s, &err) == AH_OK, "%s", err.msg);
    CHECK_STREQ(ah_selection_decision(s, 0, AH_PHASE_PREFILL)->plugin, "sel_alpha");
    CHECK_STREQ(ah_selection_decision(s, 0, AH_PHASE_PREFILL)->list_source,
                "[select] prefill_priority");
    CHECK_STREQ(ah_selection_decision(s, 0, AH_PHASE_DECODE)->plugin, "sel_beta");
    /* decode shares the prefill winner's KV cache: block size 16, not beta's 32 */
    CHECK(ah_selection_decision(s, 0, AH_PHASE_DECODE)->spec.block_size == 16);
    CHECK_STREQ(ah_selection_decision(s, 1, AH_PHASE_PREFILL)->plugin, "sel_beta");
    CHECK_STREQ(ah_selection_decision(s, 1, AH_PHASE_PREFILL)->list_source, "[layer.1] backend");
    CHECK_STREQ(ah_selection_decision(s, 3, AH_PHASE_DECODE)->plugin, "sel_beta");
    CHECK_STREQ(ah_selection_decision(s, 3, AH_PHASE_DECODE)->list_source, "[layer.2-3] priority");
    ah_selection_destroy(s);
    ah_model_destroy(m);
    ah_host_destroy(h);
}

static void test_cache_and_graph_level(void)
{
    ah_host *h =
        host_with("[select]\npriority = sel_beta, sel_alpha\n[layer.5]\nbackend = sel_alpha\n");
    ah_model *m = model("[model]\nname = t\nnum_layers = 80\nnum_q_heads = 8\nnum_kv_heads = 2\n"
                        "head_size = 128\ndtype = fp32\n");
    ah_selection *s = NULL;
    ah_error err;
    CHECK(ah_host_select(h, m, &s, &err) == AH_OK);
    /* identical layers share one cached decision */
    CHECK(ah_selection_decision(s, 0, AH_PHASE_PREFILL) ==
          ah_selection_decision(s, 79, AH_PHASE_PREFILL));
    CHECK(ah_selection_decision(s, 0, AH_PHASE_PREFILL) !=
          ah_selection_decision(s, 5, AH_PHASE_PREFILL));
    uint32_t layer = 99;
    CHECK(ah_selection_graph_level(s, &layer) == AH_GRAPH_NEVER && layer == 5);
    ah_selection *s2 = NULL;
    CHECK(ah_host_select(h, m, &s2, &err) == AH_OK);
    CHECK(ah_selection_decision(s2, 3, AH_PHASE_DECODE) ==
          ah_selection_decision(s, 3, AH_PHASE_DECODE));
    ah_selection_destroy(s2);
    ah_selection_destroy(s);
    ah_host_destroy(h);

    h = host_with("[select]\npriority = sel_beta\n");
    CHECK(ah_host_select(h, m, &s, &err) == AH_OK);
    CHECK(ah_selection_graph_level(s, NULL) == AH_GRAPH_UNIFORM_BATCH);
    ah_selection_destroy(s);
    /* forced selection for tools */
    CHECK(ah_host_select_forced(h, m, "sel_alpha", &s, &err) == AH_OK);
    CHECK_STREQ(ah_selection_decision(s, 7, AH_PHASE_DECODE)->plugin, "sel_alpha");
    ah_selection_destroy(s);
    CHECK(ah_host_select_forced(h, m, "nonesuch", &s, &err) == AH_ERR_UNSUPPORTED);
    CHECK_CONTAINS(err.msg, "plugin=nonesuch");
    ah_model_destroy(m);
    ah_host_destroy(h);
}

/* Creates a host from ini and expects it refused with msg. */
static void host_refused(const char *ini, const char *msg)
{
    ah_host *h;
    ah_error err;
    CHECK_MSG(create(ini, sel_dir, 1, &h, &err) == AH_ERR_CONFIG && !h, "accepted: %s", ini);
    CHECK_STREQ(err.msg, msg);
}

/* Declared plugin keys: a value the declaration refuses and an undeclared
 * key are errors naming file, line, section and key; a section for a plugin
 * that is not installed here is a warning. */
static void test_plugin_keys(void)
{
    ah_host *h = host_with("[plugin.sel_alpha]\nmode = exact\n[plugin.nowhere]\nx = 1\n");
    const char *w = ah_host_config_warnings(h);
    CHECK_CONTAINS(w, "<text>:4: [plugin.nowhere] x: no plugin named 'nowhere' was found");
    CHECK(!strstr(w, "sel_alpha"));
    ah_host_destroy(h);
    host_refused("[plugin.sel_alpha]\nmode = slow\n",
                 "<text>:2: [plugin.sel_alpha] mode: 'slow' is not one of fast|exact");
    host_refused("[plugin.sel_alpha]\nmode = fast\nbogus = 1\n",
                 "<text>:3: [plugin.sel_alpha] bogus: unknown key (the plugin declares: mode)");
    host_refused("[plugin.sel_beta]\nmode = fast\n",
                 "<text>:2: [plugin.sel_beta] mode: unknown key (the plugin declares: none)");
}

/* ---- the default order: device kind, rank, name ---- */

/* A host over a "machine": the rank plugins named in plugins (space-
 * separated; "sel" adds the sel_* directory). */
static ah_host *machine(const char *plugins, const char *ini)
{
    static char paths[16][512];
    const char *dirs[16];
    uint32_t n = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", plugins);
    for (char *save = NULL, *w = strtok_r(list, " ", &save); w && n < 16;
         w = strtok_r(NULL, " ", &save)) {
        if (!strcmp(w, "sel"))
            snprintf(paths[n], sizeof paths[n], "%s", ATTNHOST_SELECT_PLUGIN_DIR);
        else snprintf(paths[n], sizeof paths[n], "%s/ranks/%s", ATTNHOST_SELECT_PLUGIN_DIR, w);
        dirs[n] = paths[n];
        n++;
    }
    ah_host *h;
    ah_error err;
    ah_status s = create(ini, dirs, n, &h, &err);
    CHECK_MSG(s == AH_OK, "%s: %s", plugins, err.msg);
    for (uint32_t i = 0; h && i < n; i++)
        if (strcmp(dirs[i], ATTNHOST_SELECT_PLUGIN_DIR) != 0)
            CHECK_MSG(ah_host_find_plugin(h, strrchr(dirs[i], '/') + 1) != NULL, "%s not found",
                      dirs[i]);
    return h;
}

/* Select LLAMA_SMALL on h; *s to destroy. */
static ah_selection *select_small(ah_host *h)
{
    ah_model *m = model(LLAMA_SMALL);
    ah_selection *s = NULL;
    ah_error err;
    CHECK_MSG(ah_host_select(h, m, &s, &err) == AH_OK, "%s", err.msg);
    ah_model_destroy(m);
    return s;
}

/* Every phase of layer 0 on a machine of plugins (with ini) goes to
 * winner; where not NULL, order is its candidates, source the list's
 * source, and loser a candidate that lost to winner on priority. */
static void expect_phases(const char *plugins, const char *ini, const char *winner,
                          const char *order, const char *source, const char *loser)
{
    ah_host *h = machine(plugins, ini);
    ah_selection *s = h ? select_small(h) : NULL;
    for (int p = 0; s && p < AH_PHASE_COUNT; p++) {
        const ah_decision *d = ah_selection_decision(s, 0, (ah_phase)p);
        CHECK_STREQ(d->plugin, winner);
        if (order) CHECK(order_is(d, order));
        if (source) CHECK_STREQ(d->list_source, source);
        if (loser)
            CHECK(has_reason(cand(d, loser), AH_REASON_LOST_ON_PRIORITY, "priority", winner));
    }
    ah_selection_destroy(s);
    ah_host_destroy(h);
}

/* On a machine of plugins (with ini) no backend serves LLAMA_SMALL: the
 * selection fails with AH_ERR_NOT_FOUND, its message in err. */
static void expect_no_backend(const char *plugins, const char *ini, ah_error *err)
{
    err->msg[0] = '\0';
    ah_host *h = machine(plugins, ini);
    if (!h) return;
    ah_model *m = model(LLAMA_SMALL);
    ah_selection *s = NULL;
    CHECK(ah_host_select(h, m, &s, err) == AH_ERR_NOT_FOUND && !s);
    ah_selection_destroy(s);
    ah_model_destroy(m);
    ah_host_destroy(h);
}

/* One GPU plugin of each kind beside a PRIMARY CPU plugin: the GPU wins
 * both phases whatever its rank (rk_hip is SECONDARY) and its name
 * ("rk_cpu" sorts first). */
static void test_ranks_gpu_first(void)
{
    static const struct {
        const char *gpu, *source;
    } cases[] = {
        {"rk_cuda", "default (ranks, GPU first: cuda sm_90, cpu)"},
        {"rk_hip", "default (ranks, GPU first: hip gfx942, cpu)"},
        {"rk_ze", "default (ranks, GPU first: level_zero pvc, cpu)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char plugins[64];
        snprintf(plugins, sizeof plugins, "%s rk_cpu", cases[i].gpu);
        expect_phases(plugins, NULL, cases[i].gpu, plugins, cases[i].source, "rk_cpu");
    }
    /* the HIP plugin's rank really is below the CPU plugin's */
    ah_host *h = machine("rk_hip rk_cpu", NULL);
    if (h) {
        CHECK(ah_host_find_plugin(h, "rk_hip")->caps->prefill_rank == AH_RANK_SECONDARY);
        CHECK(ah_host_find_plugin(h, "rk_cpu")->caps->prefill_rank == AH_RANK_PRIMARY);
        CHECK(ah_host_find_plugin(h, "rk_hip")->device_kind == AH_DEVICE_HIP);
    }
    ah_host_destroy(h);

    /* a GPU plugin that cannot run here keeps its place, so the table shows
     * why it lost; the source says its kind is unusable */
    h = machine("rk_cuda rk_cpu", "[plugin.rk_cuda]\nusable = false\n");
    if (h) {
        ah_selection *s = select_small(h);
        const ah_decision *d = s ? ah_selection_decision(s, 0, AH_PHASE_PREFILL) : NULL;
        if (d) {
            CHECK_STREQ(d->plugin, "rk_cpu");
            CHECK(order_is(d, "rk_cuda rk_cpu"));
            CHECK(has_reason(cand(d, "rk_cuda"), AH_REASON_UNAVAILABLE, "probe", NULL));
            CHECK_STREQ(d->list_source, "default (ranks, GPU first: cuda unusable, cpu)");
        }
        ah_selection_destroy(s);
    }
    ah_host_destroy(h);
}

/* A vendor's plugin that asks for a higher rank beats the built-in-like one
 * of its kind, though its name sorts after it. */
static void test_ranks_vendor(void)
{
    expect_phases("rk_cuda rk_vendor rk_cpu", NULL, "rk_vendor", "rk_vendor rk_cuda rk_cpu", NULL,
                  "rk_cuda");
    /* a list still overrides the ranks */
    expect_phases("rk_cuda rk_vendor rk_cpu", "[select]\npriority = rk_cuda, rk_vendor\n",
                  "rk_cuda", NULL, "[select] priority", NULL);
}

/* Rank NONE: out of the default order (and so of the fallback), used where
 * a list names it. */
static void test_ranks_none(void)
{
    expect_phases("rk_hidden rk_cpu", NULL, "rk_cpu", "rk_cpu", "default (ranks, GPU first: cpu)",
                  NULL);
    expect_phases("rk_hidden rk_cpu", "[select]\npriority = rk_hidden\n", "rk_hidden", NULL,
                  "[select] priority", NULL);

    /* named for decode only: prefill takes the default order */
    ah_host *h = machine("rk_hidden rk_cpu", "[select]\ndecode_priority = rk_hidden\n");
    if (!h) return;
    ah_selection *s = select_small(h);
    if (s) {
        CHECK_STREQ(ah_selection_decision(s, 0, AH_PHASE_PREFILL)->plugin, "rk_cpu");
        CHECK_STREQ(ah_selection_decision(s, 0, AH_PHASE_DECODE)->plugin, "rk_hidden");
    }
    ah_selection_destroy(s);
    ah_host_destroy(h);

    /* nothing listed fits and the fallback does not reach for it */
    ah_error err;
    expect_no_backend("rk_hidden rk_cpu",
                      "[select]\npriority = rk_cpu\ndisable = rk_cpu\nfallback = allow\n", &err);
    CHECK_CONTAINS(err.msg, "rk_cpu: plugin=rk_cpu");
    CHECK(!strstr(err.msg, "rk_hidden"));
}

/* Ranks are per phase: rk_cdecode (MARGINAL for prefill, PRIMARY + 96 for
 * decode) wins decode only, though its name sorts before rk_cuda's. */
static void test_ranks_per_phase(void)
{
    ah_host *h = machine("rk_cuda rk_cdecode rk_cpu", NULL);
    if (!h) return;
    ah_selection *s = select_small(h);
    if (s) {
        const ah_decision *pre = ah_selection_decision(s, 0, AH_PHASE_PREFILL);
        const ah_decision *dec = ah_selection_decision(s, 0, AH_PHASE_DECODE);
        CHECK_STREQ(pre->plugin, "rk_cuda");
        CHECK(order_is(pre, "rk_cuda rk_cdecode rk_cpu"));
        CHECK_STREQ(dec->plugin, "rk_cdecode");
        CHECK(order_is(dec, "rk_cdecode rk_cuda rk_cpu"));
        CHECK(
            has_reason(cand(dec, "rk_cuda"), AH_REASON_LOST_ON_PRIORITY, "priority", "rk_cdecode"));
    }
    ah_selection_destroy(s);
    ah_host_destroy(h);
}

/* Caps too short for the rank fields (an older minor) rank MARGINAL: after
 * every CPU plugin that declares more, though "rk_old" sorts first; what
 * lies past its struct_size (9999) is never read. */
static void test_ranks_older_minor(void)
{
    ah_host *h = machine("rk_old rk_cpu sel", NULL);
    if (!h) return;
    const ah_plugin_info *old = ah_host_find_plugin(h, "rk_old");
    CHECK(old && old->caps && old->caps->prefill_rank == AH_RANK_MARGINAL &&
          old->caps->decode_rank == AH_RANK_MARGINAL);
    ah_selection *s = select_small(h);
    for (int p = 0; s && p < AH_PHASE_COUNT; p++) {
        const ah_decision *d = ah_selection_decision(s, 0, (ah_phase)p);
        CHECK(order_is(d, "rk_cpu sel_alpha sel_beta sel_gamma rk_old"));
    }
    ah_selection_destroy(s);
    ah_host_destroy(h);
}

/* Everything at once: the whole order per phase, and a source naming every
 * device kind among the candidates. */
static void test_ranks_whole_machine(void)
{
    ah_host *h =
        machine("rk_cuda rk_hip rk_ze rk_cpu rk_vendor rk_hidden rk_cdecode rk_old sel", NULL);
    if (!h) return;
    ah_selection *s = select_small(h);
    if (s) {
        const ah_decision *pre = ah_selection_decision(s, 0, AH_PHASE_PREFILL);
        const ah_decision *dec = ah_selection_decision(s, 0, AH_PHASE_DECODE);
        CHECK(order_is(pre, "rk_vendor rk_cuda rk_ze rk_hip rk_cdecode "
                            "rk_cpu sel_alpha sel_beta sel_gamma rk_old"));
        CHECK(order_is(dec, "rk_cdecode rk_vendor rk_cuda rk_ze rk_hip "
                            "rk_cpu sel_alpha sel_beta sel_gamma rk_old"));
        CHECK_STREQ(pre->list_source,
                    "default (ranks, GPU first: cuda sm_90, level_zero pvc, hip gfx942, cpu)");
        CHECK_STREQ(pre->plugin, "rk_vendor");
        CHECK_STREQ(dec->plugin, "rk_cdecode");
    }
    ah_selection_destroy(s);
    ah_host_destroy(h);

    /* no default candidate at all: the error says the list is empty */
    ah_error err;
    expect_no_backend("rk_hidden", NULL, &err);
    CHECK_STREQ(err.msg, "layer 0 (prefill): no backend can serve it: the priority list "
                         "(default (ranks, GPU first: no plugin)) is empty");
}

int main(void)
{
    test_default_order();
    test_reasons_and_priority();
    test_scale_features();
    test_fnuz_refused();
    test_force_disable_fallback();
    test_layers_and_phases();
    test_cache_and_graph_level();
    test_plugin_keys();
    test_ranks_gpu_first();
    test_ranks_vendor();
    test_ranks_none();
    test_ranks_per_phase();
    test_ranks_older_minor();
    test_ranks_whole_machine();
    return check_report("test_select");
}
