/*
 * attnhost check: the conformance suite against every available plugin or
 * one. Exits non-zero on any failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "conformance.h"

int cmd_check(cli_common *c)
{
    ah_conformance_options o = {0};
    o.plugin = c->plugin;
    o.seed = 1;
    o.out = stdout;
    for (int i = 0; i < c->argc; i++) {
        if (!strcmp(c->argv[i], "--quick")) o.quick = 1;
        else if (!strcmp(c->argv[i], "--verbose")) o.verbose = 1;
        else if (!strcmp(c->argv[i], "--seed") && i + 1 < c->argc) o.seed = strtoull(c->argv[++i], NULL, 0);
        else {
            fprintf(stderr, "attnhost check: unknown option '%s'\n", c->argv[i]);
            return 2;
        }
    }
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
    ah_conformance_summary sum = {0};
    ah_status s = ah_conformance_run(h, &o, &sum);
    printf("conformance: %u plugins, %u cases: %u passed, %u failed, %u skipped\n", sum.plugins,
           sum.cases, sum.passed, sum.failed, sum.skipped);
    if (s != AH_OK) fprintf(stderr, "attnhost check: %s: %s\n", ah_status_str(s), ah_host_errmsg(h));
    ah_host_destroy(h);
    return s != AH_OK || sum.failed ? 1 : 0;
}
