/*
 * Selection: priority lists at every level, reasons for every candidate,
 * force, disable, fallback, phases, check_combination, the decision cache
 * and the model's CUDA-graph level, over the test plugins sel_alpha (heads
 * 64/128, at most 4 KV heads), sel_beta (anything fp32, graphs) and
 * sel_gamma (never available).
 */
#include <stdlib.h>
#include <string.h>

#include <attnhost/attnhost.h>

#include "check.h"

static ah_host *host_with(const char *ini)
{
    static const char *dirs[] = {ATTNHOST_SELECT_PLUGIN_DIR};
    ah_host_options o = {.struct_size = sizeof o, .config_text = ini};
    o.plugin_dirs = dirs;
    o.n_plugin_dirs = 1;
    o.no_default_dirs = 1;
    o.cache_path = "";
    ah_host *h = NULL;
    ah_error err;
    ah_status s = ah_host_create(&o, &h, &err);
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

#define LLAMA_SMALL "[model]\nname = t\nnum_layers = 4\nnum_q_heads = 8\nnum_kv_heads = 2\n" \
                    "head_size = 64\ndtype = fp32\n"

static const ah_candidate *cand(const ah_decision *d, const char *name)
{
    for (uint32_t i = 0; i < d->n_candidates; i++)
        if (!strcmp(d->candidates[i].plugin, name)) return &d->candidates[i];
    return NULL;
}

static int has_reason(const ah_candidate *c, ah_reason_code code, const char *field, const char *value)
{
    for (uint32_t i = 0; c && i < c->n_reasons; i++)
        if (c->reasons[i].code == code && (!field || !strcmp(c->reasons[i].field, field)) &&
            (!value || !strcmp(c->reasons[i].value, value)))
            return 1;
    return 0;
}

static void test_default_order(void)
{
    ah_host *h = host_with("[select]\nfallback = error\n");
    ah_model *m = model(LLAMA_SMALL);
    ah_selection *s = NULL;
    ah_error err;
    CHECK_MSG(ah_host_select(h, m, &s, &err) == AH_OK, "%s", err.msg);
    const ah_decision *d = ah_selection_decision(s, 0, AH_PHASE_PREFILL);
    /* default (cpu): cpu_amx (not here), then the others by name */
    CHECK_STREQ(d->plugin, "sel_alpha");
    CHECK_STREQ(d->list_source, "default (cpu)");
    CHECK(has_reason(cand(d, "cpu_amx"), AH_REASON_NOT_FOUND, "plugin", "cpu_amx"));
    CHECK(cand(d, "sel_alpha")->chosen && cand(d, "sel_alpha")->n_reasons == 0);
    CHECK(has_reason(cand(d, "sel_beta"), AH_REASON_LOST_ON_PRIORITY, "priority", "sel_alpha"));
    CHECK(has_reason(cand(d, "sel_gamma"), AH_REASON_UNAVAILABLE, "probe",
                     "no gamma accelerator in this machine"));
    /* resolved spec: kv dtype and block size from the winner */
    CHECK(d->spec.kv_dtype == AH_DTYPE_FP32 && d->spec.block_size == 16);
    CHECK(d->spec.kv_layout == AH_KV_LAYOUT_NHD && d->spec.scale > 0.124f && d->spec.scale < 0.126f);
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
    h = host_with("[select]\npriority = sel_alpha, sel_beta\n");
    m = model("[model]\nname = t\nnum_layers = 1\nnum_q_heads = 8\nnum_kv_heads = 8\nhead_size = 64\n"
              "dtype = fp32\n");
    CHECK(ah_host_select(h, m, &s, &err) == AH_OK);
    d = ah_selection_decision(s, 0, AH_PHASE_PREFILL);
    CHECK_STREQ(d->plugin, "sel_beta");
    CHECK(has_reason(cand(d, "sel_alpha"), AH_REASON_COMBINATION, "num_kv_heads", "8"));
    ah_selection_destroy(s);
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
    h = host_with("[select]\npriority = sel_beta, sel_alpha\ndisable = sel_beta\n");
    ah_model_destroy(m);
    m = model(LLAMA_SMALL);
    CHECK(ah_host_select(h, m, &s, &err) == AH_OK);
    d = ah_selection_decision(s, 0, AH_PHASE_PREFILL);
    CHECK_STREQ(d->plugin, "sel_alpha");
    CHECK(has_reason(cand(d, "sel_beta"), AH_REASON_DISABLED, "plugin", "sel_beta"));
    ah_selection_destroy(s);
    ah_host_destroy(h);
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
    CHECK_STREQ(ah_selection_decision(s, 0, AH_PHASE_PREFILL)->list_source, "[select] prefill_priority");
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
    ah_host *h = host_with("[select]\npriority = sel_beta, sel_alpha\n[layer.5]\nbackend = sel_alpha\n");
    ah_model *m = model("[model]\nname = t\nnum_layers = 80\nnum_q_heads = 8\nnum_kv_heads = 2\n"
                        "head_size = 128\ndtype = fp32\n");
    ah_selection *s = NULL;
    ah_error err;
    CHECK(ah_host_select(h, m, &s, &err) == AH_OK);
    /* identical layers share one cached decision */
    CHECK(ah_selection_decision(s, 0, AH_PHASE_PREFILL) == ah_selection_decision(s, 79, AH_PHASE_PREFILL));
    CHECK(ah_selection_decision(s, 0, AH_PHASE_PREFILL) != ah_selection_decision(s, 5, AH_PHASE_PREFILL));
    uint32_t layer = 99;
    CHECK(ah_selection_graph_level(s, &layer) == AH_GRAPH_NEVER && layer == 5);
    ah_selection *s2 = NULL;
    CHECK(ah_host_select(h, m, &s2, &err) == AH_OK);
    CHECK(ah_selection_decision(s2, 3, AH_PHASE_DECODE) == ah_selection_decision(s, 3, AH_PHASE_DECODE));
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
    static const char *dirs[] = {ATTNHOST_SELECT_PLUGIN_DIR};
    ah_host_options o = {.struct_size = sizeof o, .config_text = ini};
    o.plugin_dirs = dirs;
    o.n_plugin_dirs = 1;
    o.no_default_dirs = 1;
    o.cache_path = "";
    ah_host *h = NULL;
    ah_error err;
    CHECK_MSG(ah_host_create(&o, &h, &err) == AH_ERR_CONFIG && !h, "accepted: %s", ini);
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

int main(void)
{
    test_default_order();
    test_reasons_and_priority();
    test_force_disable_fallback();
    test_layers_and_phases();
    test_cache_and_graph_level();
    test_plugin_keys();
    return check_report("test_select");
}
