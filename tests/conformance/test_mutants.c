/*
 * The suite tested: run it over conf_mutant (mutant_plugin.c) once per
 * planted defect. bug = none must pass every case, also as an FP8 backend
 * (fp8 = allowed: FP8 math where the layer allows it); every defect must
 * fail at least one case. Usage: test_mutants <dir holding conf_mutant.so>
 */
#include <stdio.h>
#include <string.h>

#include "conformance.h"

static int run(const char *dir, const char *bug, const char *fp8, ah_conformance_summary *sum,
               char *first, size_t cap)
{
    char cfg[128];
    snprintf(cfg, sizeof cfg, "[plugin.conf_mutant]\nbug = %s\nfp8 = %s\n", bug, fp8);
    const char *dirs[1] = {dir};
    ah_host_options ho;
    memset(&ho, 0, sizeof ho);
    ho.struct_size = sizeof ho;
    ho.config_text = cfg;
    ho.plugin_dirs = dirs;
    ho.n_plugin_dirs = 1;
    ho.no_default_dirs = 1;
    ho.cache_path = "";
    ah_host *h = NULL;
    ah_error err;
    if (ah_host_create(&ho, &h, &err) != AH_OK) {
        fprintf(stderr, "host: %s\n", err.msg);
        return -1;
    }
    FILE *log = tmpfile();
    ah_conformance_options o = {"conf_mutant", 7, 1, 1, log ? log : stdout, 0, NULL};
    ah_status s = ah_conformance_run(h, &o, sum);
    if (log) { /* the clean run and surprising runs in full, else the first failure */
        int all = strcmp(bug, "none") == 0 || sum->failed == 0, shown = 0, after_fail = 0;
        rewind(log);
        char line[1024];
        while (fgets(line, sizeof line, log)) {
            if (all) fputs(line, stdout);
            else if (!shown && after_fail && strncmp(line, "      ", 6) == 0) {
                snprintf(first, cap, "%s", line);
                shown = 1;
            }
            after_fail = strstr(line, "  FAIL ") != NULL;
        }
    }
    if (log) fclose(log);
    ah_host_destroy(h);
    return s == AH_OK ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    /* The first two must pass: the correct backend, and it as an FP8 backend.
     * q_descale is a defect of FP8 math, so it runs as an FP8 backend. */
    const char *const bugs[][2] = {{"none", "off"},
                                   {"none", "allowed"},
                                   {"skip_head", "off"},
                                   {"window", "off"},
                                   {"gqa", "off"},
                                   {"stray_write", "off"},
                                   {"drop_write", "off"},
                                   {"nan", "off"},
                                   {"lse", "off"},
                                   {"stale_replay", "off"},
                                   {"fp8_math", "off"},
                                   {"head0_scale", "off"},
                                   {"scale_at_capture", "off"},
                                   {"q_descale", "allowed"},
                                   {"value_at_key", "off"}};
    int bad = 0;
    for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++) {
        ah_conformance_summary s;
        char first[1024] = "";
        const char *fp8 = bugs[i][1];
        if (run(argv[1], bugs[i][0], fp8, &s, first, sizeof first)) {
            printf("bug %-16s: the suite did not run\n", bugs[i][0]);
            bad++;
            continue;
        }
        int ok = i < 2 ? s.failed == 0 && s.passed > 0 : s.failed > 0;
        printf("bug %-16s fp8 %-7s: %u cases, %u passed, %u failed, %u skipped: %s\n", bugs[i][0],
               fp8, s.cases, s.passed, s.failed, s.skipped, ok ? "as expected" : "NOT AS EXPECTED");
        fputs(first, stdout);
        bad += !ok;
    }
    return bad ? 1 : 0;
}
