/*
 * attnhost list: every plugin found, its state, probe and capabilities.
 */
#include <stdio.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "cli.h"


static void caps_text(const ah_caps *c, FILE *f)
{
    char b[512];
    ah_format_dtype_mask(c->q_dtypes, b, sizeof b);
    fprintf(f, "    dtypes        %s\n", b);
    ah_format_dtype_mask(c->kv_dtypes, b, sizeof b);
    fprintf(f, "    kv_dtypes     %s\n", b);
    ah_format_int_set(&c->qk_head_sizes, b, sizeof b);
    fprintf(f, "    qk_head_sizes %s\n", b);
    ah_format_int_set(&c->v_head_sizes, b, sizeof b);
    fprintf(f, "    v_head_sizes  %s\n", b);
    ah_format_int_set(&c->block_sizes, b, sizeof b);
    fprintf(f, "    block_sizes   %s (preferred %u)\n", b, c->preferred_block_size);
    ah_format_features(c->features, b, sizeof b);
    fprintf(f, "    features      %s\n", b);
    ah_format_attn_types(c->attn_types, b, sizeof b);
    fprintf(f, "    attn_types    %s\n", b);
    ah_format_layouts(c->kv_layouts, b, sizeof b);
    fprintf(f, "    kv_layouts    %s (preferred %s)\n", b,
            ah_kv_layout_str(c->preferred_kv_layout));
    fprintf(f, "    cuda_graphs   %s (seq_len fill %d)\n", ah_graph_level_str(c->graph_level),
            c->graph_seq_len_fill);
    fprintf(f, "    execution     %s, %s output\n",
            c->forward_writes_kv ? "forward writes KV" : "separate KV write",
            c->caller_output ? "caller" : "plugin");
    if (c->min_compute_capability || c->max_compute_capability)
        fprintf(f, "    compute_cap   %u..%u\n", c->min_compute_capability,
                c->max_compute_capability ? c->max_compute_capability : 999);
    if (c->cpu_isa_required) {
        ah_format_isa(c->cpu_isa_required, b, sizeof b);
        fprintf(f, "    cpu_isa       %s\n", b);
    }
    for (uint32_t k = 0; k < c->n_config_keys; k++)
        fprintf(f, "    key %-10s = %-8s %s\n", c->config_keys[k].name,
                c->config_keys[k].default_value ? c->config_keys[k].default_value : "",
                c->config_keys[k].doc ? c->config_keys[k].doc : "");
}

static void caps_json(const ah_caps *c, FILE *f)
{
    char b[512];
    fprintf(f, "{\"q_dtypes\": ");
    ah_format_dtype_mask(c->q_dtypes, b, sizeof b);
    cli_json_str(f, b);
    ah_format_dtype_mask(c->kv_dtypes, b, sizeof b);
    fprintf(f, ", \"kv_dtypes\": ");
    cli_json_str(f, b);
    ah_format_int_set(&c->qk_head_sizes, b, sizeof b);
    fprintf(f, ", \"qk_head_sizes\": ");
    cli_json_str(f, b);
    ah_format_int_set(&c->v_head_sizes, b, sizeof b);
    fprintf(f, ", \"v_head_sizes\": ");
    cli_json_str(f, b);
    ah_format_int_set(&c->block_sizes, b, sizeof b);
    fprintf(f, ", \"block_sizes\": ");
    cli_json_str(f, b);
    fprintf(f, ", \"preferred_block_size\": %u, \"features\": ", c->preferred_block_size);
    ah_format_features(c->features, b, sizeof b);
    cli_json_str(f, b);
    ah_format_attn_types(c->attn_types, b, sizeof b);
    fprintf(f, ", \"attn_types\": ");
    cli_json_str(f, b);
    ah_format_layouts(c->kv_layouts, b, sizeof b);
    fprintf(f, ", \"kv_layouts\": ");
    cli_json_str(f, b);
    fprintf(f,
            ", \"cuda_graph_level\": \"%s\", \"graph_seq_len_fill\": %d, "
            "\"forward_writes_kv\": %s, \"caller_output\": %s}",
            ah_graph_level_str(c->graph_level), c->graph_seq_len_fill,
            c->forward_writes_kv ? "true" : "false", c->caller_output ? "true" : "false");
}

/* Whether the plugin passed the conformance suite here: "checked
 * 2026-11-27: 45 passed, graph ALWAYS", or why it does not count. */
static void check_text(ah_host *h, const ah_plugin_info *p, FILE *f)
{
    ah_check_record r;
    if (ah_host_plugin_check(h, p->name, &r) != AH_OK) {
        fprintf(f, "  check: not checked here\n");
        return;
    }
    fprintf(f, "  check: %s %s: %u passed, ", r.ok ? "checked" : "FAILED", r.date, r.passed);
    if (r.failed) fprintf(f, "%u failed, ", r.failed);
    if (r.skipped) fprintf(f, "%u skipped, ", r.skipped);
    fprintf(f, "graph %s (attnhost %s)%s\n", ah_graph_level_str(r.graph_level), r.attnhost_version,
            r.ok ? "" : "; does not count as checked");
}

static void check_json(ah_host *h, const ah_plugin_info *p, FILE *f)
{
    ah_check_record r;
    fprintf(f, ", \"check\": ");
    if (ah_host_plugin_check(h, p->name, &r) != AH_OK) {
        fprintf(f, "null");
        return;
    }
    fprintf(f,
            "{\"ok\": %s, \"date\": \"%s\", \"checked_at\": \"%s\", \"passed\": %u, "
            "\"failed\": %u, \"skipped\": %u, \"graph_level\": \"%s\", \"attnhost_version\": ",
            r.ok ? "true" : "false", r.date, r.time_utc, r.passed, r.failed, r.skipped,
            ah_graph_level_str(r.graph_level));
    cli_json_str(f, r.attnhost_version);
    fprintf(f, "}");
}

static void list_json(ah_host *h, const char *only)
{
    FILE *f = stdout;
    fprintf(f, "{\"plugins\": [");
    int first = 1;
    for (size_t i = 0; i < ah_host_plugin_count(h); i++) {
        const ah_plugin_info *p = ah_host_plugin(h, i);
        if (only && strcmp(only, p->name)) continue;
        fprintf(f, "%s\n  {\"name\": ", first ? "" : ",");
        first = 0;
        cli_json_str(f, p->name);
        fprintf(f, ", \"path\": ");
        cli_json_str(f, p->path);
        fprintf(f, ", \"version\": ");
        cli_json_str(f, p->version ? p->version : "");
        fprintf(f, ", \"vendor\": ");
        cli_json_str(f, p->vendor ? p->vendor : "");
        fprintf(f, ", \"device\": \"%s\", \"state\": \"%s\", \"reason\": ",
                ah_device_kind_str(p->device_kind), ah_plugin_state_str(p->state));
        cli_json_str(f, p->reason);
        fprintf(f, ", \"from_cache\": %s, \"scan_ms\": %.3f", p->from_cache ? "true" : "false",
                p->scan_ms);
        if (p->probe) {
            fprintf(f, ", \"probe\": {\"usable\": %s, \"device_name\": ",
                    p->probe->usable ? "true" : "false");
            cli_json_str(f, p->probe->device_name);
            fprintf(f, ", \"arch\": ");
            cli_json_str(f, p->probe->arch);
            fprintf(
                f,
                ", \"compute_capability\": %u, \"multiprocessors\": %u, \"memory_bytes\": %llu, "
                "\"driver_version\": ",
                p->probe->compute_capability, p->probe->multiprocessors,
                (unsigned long long)p->probe->memory_bytes);
            cli_json_str(f, p->probe->driver_version);
            fprintf(f, "}");
        }
        if (p->state == AH_PLUGIN_AVAILABLE) check_json(h, p, f);
        if (p->caps) {
            fprintf(f, ", \"caps\": ");
            caps_json(p->caps, f);
        }
        fprintf(f, "}");
    }
    fprintf(f, "\n], \"check_records\": ");
    cli_json_str(f, ah_host_check_records_path(h));
    fprintf(f, ", \"check_records_note\": ");
    cli_json_str(f, ah_host_check_records_note(h));
    fprintf(f, "}\n");
}

int cmd_list(cli_common *c)
{
    ah_host *h = cli_host(c);
    if (!h) return 1;
    if (c->json) {
        list_json(h, c->plugin);
        ah_host_destroy(h);
        return 0;
    }
    const ah_hw_facts *hw = ah_host_hw_facts(h);
    char isa[512];
    ah_format_isa(hw->cpu_isa, isa, sizeof isa);
    printf("host: %s, %u logical cores; usable ISA: %s%s%s\n", hw->cpu_model, hw->cpu_logical_cores,
           isa, *hw->amx_note ? "; AMX: " : "", hw->amx_note);
    if (!ah_host_plugin_count(h)) printf("no plugins found\n");
    for (size_t i = 0; i < ah_host_plugin_count(h); i++) {
        const ah_plugin_info *p = ah_host_plugin(h, i);
        if (c->plugin && strcmp(c->plugin, p->name)) continue;
        printf("\n%s %s (%s, %s) [%s]%s\n  %s\n", p->name, p->version ? p->version : "",
               p->vendor ? p->vendor : "?", ah_device_kind_str(p->device_kind),
               ah_plugin_state_str(p->state), p->from_cache ? " (cached)" : "", p->path);
        if (*p->reason) printf("  reason: %s\n", p->reason);
        if (p->probe && p->probe->usable)
            printf("  device: %s, arch %s, %u units, %.1f GiB, driver %s\n", p->probe->device_name,
                   p->probe->arch, p->probe->multiprocessors,
                   (double)p->probe->memory_bytes / (1u << 30), p->probe->driver_version);
        if (p->state == AH_PLUGIN_AVAILABLE) check_text(h, p, stdout);
        if (p->caps) caps_text(p->caps, stdout);
    }
    ah_host_destroy(h);
    return 0;
}
