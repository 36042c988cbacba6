/*
 * The CTest driver of the conformance suite: builds a host over the given
 * plugin directories only (no install dir, no cache), then runs the suite
 * over the available plugins of one device class. Exit 0: all passed;
 * 1: a case failed or the suite could not run; 77: no plugin of that class
 * is available here (CTest counts it as skipped).
 *
 *   run_conformance [--quick] [--verbose] [--seed N] [--class cpu|gpu] [--cp-devices N]
 *                   [--match TEXT]
 *                   [--plugin NAME] DIR...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"

static int in_class(const ah_plugin_info *p, int gpu)
{
    return gpu ? p->device_kind != AH_DEVICE_CPU : p->device_kind == AH_DEVICE_CPU;
}

int main(int argc, char **argv)
{
    ah_conformance_options o;
    memset(&o, 0, sizeof o);
    o.seed = 1;
    o.out = stdout;
    int gpu = 0;
    const char *dirs[16];
    uint32_t n_dirs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) o.quick = 1;
        else if (!strcmp(argv[i], "--verbose")) o.verbose = 1;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) o.seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--plugin") && i + 1 < argc) o.plugin = argv[++i];
        else if (!strcmp(argv[i], "--match") && i + 1 < argc) o.match = argv[++i];
        else if (!strcmp(argv[i], "--cp-devices") && i + 1 < argc)
            o.cp_devices = (uint32_t)strtoul(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--class") && i + 1 < argc) gpu = !strcmp(argv[++i], "gpu");
        else if (argv[i][0] != '-' && n_dirs < 16) dirs[n_dirs++] = argv[i];
        else {
            fprintf(stderr, "run_conformance: bad argument '%s'\n", argv[i]);
            return 2;
        }
    }
    ah_host_options ho;
    memset(&ho, 0, sizeof ho);
    ho.struct_size = sizeof ho;
    ho.config_text = "";
    ho.plugin_dirs = dirs;
    ho.n_plugin_dirs = n_dirs;
    ho.no_default_dirs = 1;
    ho.cache_path = "";
    ah_host *h = NULL;
    ah_error err;
    if (ah_host_create(&ho, &h, &err) != AH_OK) {
        fprintf(stderr, "run_conformance: %s\n", err.msg);
        return 1;
    }
    int rc = 0, ran = 0;
    ah_conformance_summary total;
    memset(&total, 0, sizeof total);
    for (size_t i = 0; i < ah_host_plugin_count(h); i++) {
        const ah_plugin_info *p = ah_host_plugin(h, i);
        if (!in_class(p, gpu) || (o.plugin && strcmp(o.plugin, p->name))) continue;
        if (p->state != AH_PLUGIN_AVAILABLE) {
            printf("%s: %s (%s), not tested\n", p->name, ah_plugin_state_str(p->state), p->reason);
            continue;
        }
        ah_conformance_options one = o;
        one.plugin = p->name;
        ah_conformance_summary s;
        ah_status st = ah_conformance_run(h, &one, &s);
        if (st != AH_OK) {
            fprintf(stderr, "run_conformance: %s: %s\n", p->name, ah_status_str(st));
            rc = 1;
        }
        ran++;
        total.cases += s.cases, total.passed += s.passed, total.failed += s.failed,
            total.skipped += s.skipped;
    }
    ah_host_destroy(h);
    if (!ran) {
        printf("skipped: no available %s plugin\n", gpu ? "GPU" : "CPU");
        return 77;
    }
    printf("conformance: %d plugins, %u cases: %u passed, %u failed, %u skipped\n", ran,
           total.cases, total.passed, total.failed, total.skipped);
    return rc || total.failed ? 1 : 0;
}
