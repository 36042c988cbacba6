/*
 * ah_conformance_run: for each available plugin (or the one asked for),
 * generate the cases its capabilities call for, run each, print one line
 * per case and a summary per plugin.
 */
#include <string.h>
#include <time.h>

#include "suite.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static ah_status run_plugin(ah_host *host, const ah_plugin_info *info,
                            const ah_conformance_options *opts, FILE *out,
                            ah_conformance_summary *sum)
{
    ah__conf_case_list cases;
    ah_status s = ah__conf_make_cases(info, opts, &cases);
    if (s == AH_ERR_OUT_OF_MEMORY) return s;
    sum->plugins++;
    if (s != AH_OK) {
        fprintf(out, "%s: no configuration its capabilities allow could be formed (head sizes?)\n",
                info->name);
        sum->cases++;
        sum->failed++;
        return AH_OK;
    }
    fprintf(out, "== %s %s (%s): %u cases%s\n", info->name, info->version ? info->version : "",
            ah_device_kind_str(info->device_kind), cases.n, opts->quick ? ", quick" : "");
    uint32_t pass = 0, fail = 0, skip = 0;
    double t0 = now_s();
    for (uint32_t i = 0; i < cases.n; i++) {
        ah__conf_result res;
        double t = now_s();
        ah__conf_run_case(host, info->name, info, &cases.v[i], opts->cp_devices, &res);
        const char *v = res.verdict == AH__CONF_PASS   ? "PASS"
                        : res.verdict == AH__CONF_FAIL ? "FAIL"
                                                       : "SKIP";
        fprintf(out, "%s  %-4s %-80s rel_l2 %.2e max_abs %.2e  %5.0f ms\n", info->name, v,
                cases.v[i].name, res.rel_l2, res.max_abs, (now_s() - t) * 1e3);
        if (res.verdict != AH__CONF_PASS && (res.verdict == AH__CONF_FAIL || opts->verbose))
            fprintf(out, "      %s\n", res.detail);
        if (res.verdict == AH__CONF_FAIL && opts->verbose)
            fprintf(out, "      (seed %llu)\n", (unsigned long long)cases.v[i].seed);
        pass += res.verdict == AH__CONF_PASS;
        fail += res.verdict == AH__CONF_FAIL;
        skip += res.verdict == AH__CONF_SKIP;
        if (cases.v[i].kind == AH__CONF_GRAPH && res.verdict == AH__CONF_PASS &&
            cases.v[i].graph > sum->graph_level)
            sum->graph_level = cases.v[i].graph;
        fflush(out);
    }
    fprintf(out, "== %s: %u passed, %u failed, %u skipped in %.1f s\n", info->name, pass, fail,
            skip, now_s() - t0);
    sum->cases += cases.n;
    sum->passed += pass;
    sum->failed += fail;
    sum->skipped += skip;
    ah__conf_case_list_free(&cases);
    return AH_OK;
}

ah_status ah_conformance_run(ah_host *host, const ah_conformance_options *opts,
                             ah_conformance_summary *sum)
{
    memset(sum, 0, sizeof *sum);
    if (!host || !opts) return AH_ERR_INVALID_ARGUMENT;
    FILE *out = opts->out ? opts->out : stdout;
    if (opts->plugin) {
        const ah_plugin_info *p = ah_host_find_plugin(host, opts->plugin);
        if (!p) {
            fprintf(out, "conformance: no plugin named %s\n", opts->plugin);
            return AH_ERR_NOT_FOUND;
        }
        if (p->state != AH_PLUGIN_AVAILABLE) {
            fprintf(out, "conformance: plugin %s is %s: %s\n", p->name,
                    ah_plugin_state_str(p->state), p->reason);
            return AH_ERR_UNAVAILABLE;
        }
        return run_plugin(host, p, opts, out, sum);
    }
    for (size_t i = 0; i < ah_host_plugin_count(host); i++) {
        const ah_plugin_info *p = ah_host_plugin(host, i);
        if (p->state != AH_PLUGIN_AVAILABLE) continue;
        ah_status s = run_plugin(host, p, opts, out, sum);
        if (s != AH_OK) return s;
    }
    return AH_OK;
}
