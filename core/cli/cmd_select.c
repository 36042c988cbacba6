/*
 * attnhost explain / bind: the selection for a model, with reasons.
 */
#include <stdio.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "cli.h"

static const char *phase_name(int p) { return p == AH_PHASE_PREFILL ? "prefill" : "decode"; }

static void describe_spec(const ah_layer_spec *s, char *b, size_t cap)
{
    size_t n = (size_t)snprintf(
        b, cap, "%s %u/%u heads qk %u v %u %s kv %s block %u %s", ah_attn_type_str(s->attn_type),
        s->num_q_heads, s->num_kv_heads, s->qk_head_size, s->v_head_size, ah_dtype_name(s->q_dtype),
        ah_dtype_name(s->kv_dtype), s->block_size, ah_kv_layout_str(s->kv_layout));
    if (s->sliding_window && n < cap)
        n += (size_t)snprintf(b + n, cap - n, " window %u", s->sliding_window);
    if (s->softcap > 0 && n < cap) n += (size_t)snprintf(b + n, cap - n, " softcap %g", s->softcap);
    if (s->use_mla && n < cap) n += (size_t)snprintf(b + n, cap - n, " mla");
    if (s->use_sinks && n < cap) n += (size_t)snprintf(b + n, cap - n, " sinks");
    if (s->use_alibi && n < cap) n += (size_t)snprintf(b + n, cap - n, " alibi");
    if (s->fp8_attention && n < cap) n += (size_t)snprintf(b + n, cap - n, " fp8-attention");
    if (ah_spec_q_scale(s) && n < cap) n += (size_t)snprintf(b + n, cap - n, " q-scale");
    if (ah_spec_kv_scales(s) != AH_KV_SCALES_HOST && n < cap)
        n += (size_t)snprintf(b + n, cap - n, " scales %s", ah_kv_scales_str(ah_spec_kv_scales(s)));
    if (ah_spec_ragged(s) && n < cap) snprintf(b + n, cap - n, " ragged");
}

/* One decision's table: winner, spec, list and each candidate's reasons. */
static void print_decision(const ah_decision *d, uint32_t l, const char *what, const char *note)
{
    char spec[256];
    describe_spec(&d->spec, spec, sizeof spec);
    printf("\nlayer %u %s: %s%s%s\n  spec: %s\n  list: %s\n", l, what,
           d->plugin ? d->plugin : "NONE (no backend can serve it)",
           d->fallback ? " (fallback)" : "", note, spec, d->list_source);
    if (d->plugin && d->kernel_block_size)
        printf("  kernel blocks: %s runs each %u-token cache block as %u blocks of %u "
               "(the host translates the block table)\n",
               d->plugin, d->spec.block_size, d->spec.block_size / d->kernel_block_size,
               d->kernel_block_size);
    for (uint32_t k = 0; k < d->n_candidates; k++) {
        const ah_candidate *cd = &d->candidates[k];
        printf("  %-2s %-16s", cd->chosen ? "->" : "", cd->plugin);
        double ms = ah_decision_candidate_ms(d, k); /* [select] policy = measured */
        if (ms >= 0) printf(" [measured %.4g ms]", ms);
        if (!cd->n_reasons) printf(" ok\n");
        for (uint32_t r = 0; r < cd->n_reasons; r++) {
            const ah_reason *x = &cd->reasons[r];
            printf("%s%s: %s = %s; supported: %s\n", r ? "                     " : " ",
                   ah_reason_code_str(x->code), x->field, x->value, x->supported);
        }
    }
}

static int explain(cli_common *c, ah_host *h, const ah_model *m, const ah_selection *sel);

/* The block size of each KV-cache group whose layers say block_size = auto,
 * and where it came from. */
static void print_auto_block_sizes(const ah_model *m, const ah_selection *sel)
{
    for (uint32_t g = 0; g < ah_model_num_kv_groups(m); g++) {
        const char *how = "";
        uint32_t bs = ah_selection_kv_group_block_size(sel, g, &how);
        if (bs && strncmp(how, "auto", 4) == 0)
            printf("kv_group %u: block_size %u (%s)\n", g, bs, how);
    }
}

static int with_selection(cli_common *c, int (*fn)(cli_common *, ah_host *, const ah_model *,
                                                   const ah_selection *))
{
    ah_host *h = cli_host(c);
    if (!h) return 1;
    ah_model *m = cli_model(c);
    if (!m) {
        ah_host_destroy(h);
        return 1;
    }
    ah_selection *sel = NULL;
    ah_error err;
    /* explain shows the whole decision table even when a layer cannot be
     * served, then the error */
    if (fn == explain && *ah_host_tune_table_note(h))
        fprintf(stderr, "attnhost: warning: %s\n", ah_host_tune_table_note(h));
    ah_status s = fn == explain ? ah_host_explain(h, m, c->plugin, &sel, &err)
                  : c->plugin   ? ah_host_select_forced(h, m, c->plugin, &sel, &err)
                                : ah_host_select(h, m, &sel, &err);
    int rc;
    if (s != AH_OK && sel) {
        if (*ah_selection_warnings(sel))
            fprintf(stderr, "attnhost: warning: %s", ah_selection_warnings(sel));
        fn(c, h, m, sel);
        fflush(stdout);
        fprintf(stderr, "attnhost: %s\n", err.msg);
        rc = 1;
    } else if (s != AH_OK) {
        fprintf(stderr, "attnhost: %s\n", err.msg);
        rc = 1;
    } else {
        if (*ah_selection_warnings(sel))
            fprintf(stderr, "attnhost: warning: %s", ah_selection_warnings(sel));
        rc = fn(c, h, m, sel);
    }
    ah_selection_destroy(sel);
    ah_model_destroy(m);
    ah_host_destroy(h);
    return rc;
}

/* The keys of a bound plugin that are not at their default, "threads = 2,
 * isa = avx2", or "defaults" (the rest: `attnhost config --dump --effective`).
 * Only those: a plugin may declare many keys, and what explains a binding
 * is what was changed. */
static void print_plugin_keys(const ah_host *h, const char *plugin)
{
    const ah_plugin_info *in = ah_host_find_plugin(h, plugin);
    const ah_caps *caps = in ? in->caps : NULL;
    printf("  %-16s", plugin);
    int shown = 0;
    for (uint32_t i = 0; caps && i < caps->n_config_keys; i++) {
        int is_default = 1;
        const char *v = ah_host_plugin_key_value(h, plugin, caps->config_keys[i].name, &is_default);
        if (!v || is_default) continue;
        printf("%s%s = %s", shown++ ? ", " : " ", caps->config_keys[i].name, v);
    }
    printf("%s\n", shown                         ? ""
                   : caps && caps->n_config_keys ? " every key at its default"
                                                 : " no keys");
}

static int explain(cli_common *c, ah_host *h, const ah_model *m, const ah_selection *sel)
{
    uint32_t n = ah_selection_num_layers(sel);
    if (c->layer >= 0 && (uint32_t)c->layer >= n) {
        fprintf(stderr, "attnhost explain: --layer %d: the model has %u layers\n", c->layer, n);
        return 2;
    }
    printf("model %s: %u layers\n", ah_model_name(m), n);
    print_auto_block_sizes(m, sel);
    for (uint32_t l = 0; l < n; l++) {
        if (c->layer >= 0 && (uint32_t)c->layer != l) continue;
        if (ah_selection_layer_kind(sel, l) != AH_LAYER_ATTENTION) {
            printf("\nlayer %u: %s layer: not attention (never selected or bound)\n", l,
                   ah_layer_kind_str(ah_selection_layer_kind(sel, l)));
            continue;
        }
        for (int p = 0; p < AH_PHASE_COUNT; p++)
            print_decision(ah_selection_decision(sel, l, (ah_phase)p), l, phase_name(p), "");
        const ah_decision *rd = ah_selection_ragged_decision(sel, l); /* ABI 2.3 */
        if (rd)
            print_decision(
                rd, l, "ragged prefill form",
                ah_selection_ragged_bound(sel, l) ? "" : " (not bound: ragged steps refused)");
    }
    /* Each plugin bound above once, in order of first appearance. */
    printf(
        "\nplugin keys in force (not at their default; all: attnhost config --dump --effective)\n");
    const char *done[64];
    size_t n_done = 0;
    for (uint32_t l = 0; l < n; l++)
        for (int p = 0; c->layer < 0 || (uint32_t)c->layer == l ? p < AH_PHASE_COUNT : 0; p++) {
            const char *name = ah_selection_decision(sel, l, (ah_phase)p)->plugin;
            int seen = !name || !*name;
            for (size_t i = 0; i < n_done && !seen; i++) seen = !strcmp(done[i], name);
            if (seen || n_done == sizeof done / sizeof *done) continue;
            done[n_done++] = name;
            print_plugin_keys(h, name);
        }
    return 0;
}

/* How a step of decode and prefill requests runs: whole or split, and
 * under [select] mixed_steps = measured the tune table's sums. */
static void print_mixed_steps(ah_host *h, const ah_selection *sel)
{
    uint32_t n;
    double whole, split;
    const ah_mixed_steps how = ah_selection_mixed_steps(h, sel, &n, &whole, &split);
    const char *way = how == AH_MIXED_STEPS_WHOLE ? "whole" : "split";
    if (!n) printf("mixed steps: whole (every layer has one winner)\n");
    else if (whole >= 0)
        printf("mixed steps: %s (mixed_steps = measured: tuned %.4g ms whole, %.4g ms split, over "
               "the %u layers with two winners)\n",
               way, whole, split, n);
    else printf("mixed steps: %s (%u layers with two winners)\n", way, n);
}

void cli_print_binding(ah_host *h, const ah_model *m, const ah_selection *sel)
{
    uint32_t n = ah_selection_num_layers(sel), glayer;
    printf("model %s: %u layers\n", ah_model_name(m), n);
    printf("%-6s %-18s %-18s %s\n", "layer", "prefill", "decode", "spec");
    for (uint32_t l = 0; l < n; l++) {
        const ah_decision *pd = ah_selection_decision(sel, l, AH_PHASE_PREFILL);
        const ah_decision *dd = ah_selection_decision(sel, l, AH_PHASE_DECODE);
        if (ah_selection_layer_kind(sel, l) != AH_LAYER_ATTENTION) {
            char what[64];
            snprintf(what, sizeof what, "%s layer: not attention",
                     ah_layer_kind_str(ah_selection_layer_kind(sel, l)));
            printf("%-6u %-37s -\n", l, what);
            continue;
        }
        char spec[256];
        describe_spec(&pd->spec, spec, sizeof spec);
        printf("%-6u %-18s %-18s %s", l, pd->plugin, dd->plugin, spec);
        if (pd->kernel_block_size == dd->kernel_block_size && pd->kernel_block_size)
            printf(" (kernel blocks of %u)", pd->kernel_block_size);
        for (int p = 0; p < AH_PHASE_COUNT && pd->kernel_block_size != dd->kernel_block_size; p++) {
            const ah_decision *d = p ? dd : pd;
            if (d->kernel_block_size)
                printf(" (%s: kernel blocks of %u)", phase_name(p), d->kernel_block_size);
        }
        printf("\n");
    }
    ah_graph_level g = ah_selection_graph_level(sel, &glayer);
    printf("cuda graph level: %s", ah_graph_level_str(g));
    if (n) printf(" (set by layer %u)", glayer);
    printf("\n");
    print_auto_block_sizes(m, sel);
    print_mixed_steps(h, sel);
}

static int bind(cli_common *c, ah_host *h, const ah_model *m, const ah_selection *sel)
{
    (void)c;
    cli_print_binding(h, m, sel);
    return 0;
}

int cmd_explain(cli_common *c) { return with_selection(c, explain); }
int cmd_bind(cli_common *c) { return with_selection(c, bind); }
