/*
 * attnhost check: the conformance suite against every available plugin or
 * one. Exits non-zero on any failure. Each plugin's outcome is recorded
 * beside the scan cache (ah_host_record_check), passed or failed, for
 * `attnhost list` and [select] require_checked; --no-record skips that.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "conformance.h"

static void record(ah_host *h, const char *plugin, const ah_conformance_summary *s)
{
    ah_check_result r = {sizeof r, s->passed, s->failed, s->skipped, s->graph_level};
    ah_error err;
    ah_status st = ah_host_record_check(h, plugin, &r, &err);
    if (st != AH_OK) {
        fprintf(stderr, "attnhost check: warning: %s\n", err.msg);
        return;
    }
    printf("recorded in %s: %s %s on this device: %u passed, %u failed, %u skipped, graph %s\n",
           ah_host_check_records_path(h), plugin, s->failed || !s->passed ? "FAILED" : "passed",
           s->passed, s->failed, s->skipped, ah_graph_level_str(s->graph_level));
}

int cmd_check(cli_common *c)
{
    ah_conformance_options o = {0};
    int no_record = 0;
    o.plugin = c->plugin;
    o.seed = 1;
    o.out = stdout;
    for (int i = 0; i < c->argc; i++) {
        if (!strcmp(c->argv[i], "--quick")) o.quick = 1;
        else if (!strcmp(c->argv[i], "--verbose")) o.verbose = 1;
        else if (!strcmp(c->argv[i], "--no-record")) no_record = 1;
        else if (!strcmp(c->argv[i], "--seed") && i + 1 < c->argc)
            o.seed = strtoull(c->argv[++i], NULL, 0);
        else {
            fprintf(stderr, "attnhost check: unknown option '%s'\n", c->argv[i]);
            return 2;
        }
    }
    c->ignore_require_checked = 1; /* a plugin not checked yet is what check runs */
    ah_host *h = cli_host(c);
    if (!h) return 1;
    if (c->plugin) {
        const ah_plugin_info *p = ah_host_find_plugin(h, c->plugin);
        if (!p || p->state != AH_PLUGIN_AVAILABLE) {
            fprintf(stderr, "attnhost check: plugin %s is %s%s%s\n", c->plugin,
                    p ? ah_plugin_state_str(p->state) : "not found", p && *p->reason ? ": " : "",
                    p ? p->reason : "");
            ah_host_destroy(h);
            return 1;
        }
    }
    /* One plugin at a time, so each outcome is recorded on its own. */
    ah_conformance_summary sum = {0};
    ah_status s = AH_OK;
    for (size_t i = 0; i < ah_host_plugin_count(h) && s == AH_OK; i++) {
        const ah_plugin_info *p = ah_host_plugin(h, i);
        if (p->state != AH_PLUGIN_AVAILABLE || (c->plugin && strcmp(c->plugin, p->name))) continue;
        if (ah_host_find_plugin(h, p->name) != p) continue; /* a name served by another file */
        ah_conformance_options one = o;
        one.plugin = p->name;
        ah_conformance_summary ps;
        s = ah_conformance_run(h, &one, &ps);
        if (s == AH_OK && !no_record) record(h, p->name, &ps);
        sum.plugins += ps.plugins;
        sum.cases += ps.cases;
        sum.passed += ps.passed;
        sum.failed += ps.failed;
        sum.skipped += ps.skipped;
    }
    printf("conformance: %u plugins, %u cases: %u passed, %u failed, %u skipped\n", sum.plugins,
           sum.cases, sum.passed, sum.failed, sum.skipped);
    if (s != AH_OK)
        fprintf(stderr, "attnhost check: %s: %s\n", ah_status_str(s), ah_host_errmsg(h));
    ah_host_destroy(h);
    return s != AH_OK || sum.failed ? 1 : 0;
}
