/*
 * attnhost: choose and run attention backends from the command line.
 *
 *   attnhost list [--json]                       plugins found, probes, capabilities
 *   attnhost explain [--model M] [--layer N]     the decision table with reasons
 *   attnhost bind [--model M]                    the per-layer binding, graph level
 *   attnhost check [--plugin NAME]               the conformance suite
 *   attnhost bench [--plugin NAME] [shape...]    standard shapes, TFLOP/s, GB/s
 *   attnhost config --dump [--effective]         every configuration key
 *   attnhost run [--model M] [--layers N] ...    run the model as its engine would, check, time
 *   attnhost model import config.json [-o F]     a Hugging Face config as a model description
 *
 * Every subcommand takes --config F (default: the installed INI when it
 * exists, else the embedded default).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: attnhost <command> [options]\n\n"
            "commands:\n"
            "  list      plugins found, their probe results and capabilities\n"
            "  explain   the selection decision table with every candidate's reasons\n"
            "  bind      the per-layer binding and the model's CUDA-graph level\n"
            "  check     run the conformance suite against every plugin or one\n"
            "  bench     time standard shapes through a plugin\n"
            "  config    --dump: every configuration key with its default and doc\n"
            "  run       run a model as its engine would (encoder pass, cross K/V, prefill,\n"
            "            decode steps), check every layer against the oracle, time\n"
            "  model     import a Hugging Face config.json (model import F [-o M]); show a model\n\n"
            "common options:\n"
            "  --config F       INI configuration (default: installed, else embedded)\n"
            "  --model M        model description INI (default: the built-in demo model)\n"
            "  --plugin NAME    restrict to one plugin (check, bench, list); force it on\n"
            "                   every layer (explain, bind, run)\n"
            "  --plugin-dir D   search D for plugins first (repeatable)\n"
            "  --layer N        explain one layer\n"
            "  --json           machine-readable output (list, bench)\n"
            "  --no-cache       scan every plugin afresh, write no cache\n"
            "  --in-process     scan in this process (no fork)\n\n"
            "run options (each layer of each pass is checked against the oracle):\n"
            "  --batch N        requests (default 4)\n"
            "  --prompt-len N   the longest prompt or encoder input (default 250; with sliding\n"
            "                   windows one prompt goes past the largest window)\n"
            "  --steps N        decode steps (default 8; none for encoder-only models)\n"
            "  --layers N|LIST  run the first N layers, or those listed (0-3,32-35)\n"
            "  --max-memory S   memory budget (512M, 2G; default half of MemAvailable): a run\n"
            "                   that needs more is refused before allocating\n"
            "  --seed S         random data seed\n"
            "  The default size shrinks for models whose check would take long, and says so.\n");
}

ah_host *cli_host(const cli_common *c)
{
    ah_host_options o = {.struct_size = sizeof o};
    struct stat st;
    if (c->config) o.config_path = c->config;
    else if (stat(ATTNHOST_INSTALL_CONFIG, &st) == 0) o.config_path = ATTNHOST_INSTALL_CONFIG;
    o.plugin_dirs = c->plugin_dirs;
    o.n_plugin_dirs = c->n_plugin_dirs;
    o.scan_mode = c->in_process ? AH_SCAN_IN_PROCESS : AH_SCAN_DEFAULT;
    o.cache_path = c->no_cache ? "" : NULL;
    o.ignore_require_checked = c->ignore_require_checked;
    ah_host *h = NULL;
    ah_error err;
    if (ah_host_create(&o, &h, &err) != AH_OK) {
        fprintf(stderr, "attnhost: %s\n", err.msg);
        return NULL;
    }
    const char *warn = ah_host_config_warnings(h);
    if (*warn) fprintf(stderr, "attnhost: warning: %s", warn);
    return h;
}

ah_model *cli_model(const cli_common *c)
{
    ah_model *m = NULL;
    ah_error err;
    ah_status s = c->model ? ah_model_load(c->model, &m, &err)
                           : ah_model_parse(ah_demo_model_text(), "<demo model>", &m, &err);
    if (s != AH_OK) {
        fprintf(stderr, "attnhost: %s\n", err.msg);
        return NULL;
    }
    return m;
}

void cli_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

/* Take the common options out of argv; leave the rest for the subcommand. */
static int parse_common(int argc, char **argv, cli_common *c)
{
    c->layer = -1;
    int out = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char **val = !strcmp(a, "--config") ? &c->config
                           : !strcmp(a, "--model") ? &c->model
                           : !strcmp(a, "--plugin") ? &c->plugin : NULL;
        if (val || !strcmp(a, "--plugin-dir") || !strcmp(a, "--layer")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "attnhost: %s needs a value\n", a);
                return -1;
            }
            const char *v = argv[++i];
            if (val) *val = v;
            else if (!strcmp(a, "--layer")) {
                char *end;
                long n = strtol(v, &end, 10);
                if (*end || n < 0) {
                    fprintf(stderr, "attnhost: --layer: '%s' is not a layer index\n", v);
                    return -1;
                }
                c->layer = (int)n;
            } else if (c->n_plugin_dirs < 64) {
                /* an explicit directory may be relative to where the user stands;
                 * the library itself never searches the current directory */
                char *abs = realpath(v, NULL);
                if (!abs) {
                    fprintf(stderr, "attnhost: --plugin-dir %s: %s\n", v, strerror(errno));
                    return -1;
                }
                c->plugin_dirs[c->n_plugin_dirs++] = abs; /* freed by main */
            }
            else {
                fprintf(stderr, "attnhost: at most 64 --plugin-dir options\n");
                return -1;
            }
        } else if (!strcmp(a, "--json")) c->json = 1;
        else if (!strcmp(a, "--no-cache")) c->no_cache = 1;
        else if (!strcmp(a, "--in-process")) c->in_process = 1;
        else argv[out++] = argv[i];
    }
    c->argc = out;
    c->argv = argv;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(cli_common *);
    } cmds[] = {{"list", cmd_list},   {"explain", cmd_explain}, {"bind", cmd_bind},
                {"check", cmd_check}, {"bench", cmd_bench},     {"config", cmd_config},
                {"run", cmd_run},     {"model", cmd_model}};
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        /* the library's own answer: the CLI may run against another libattnhost */
        printf("attnhost %s (plugin ABI %u.%u)\n", ah_version(), AH_ABI_MAJOR(ah_abi_version()),
               AH_ABI_MINOR(ah_abi_version()));
        return 0;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) {
            cli_common c = {0};
            int rc = parse_common(argc - 2, argv + 2, &c) ? 2 : cmds[i].fn(&c);
            for (unsigned d = 0; d < c.n_plugin_dirs; d++) free((char *)c.plugin_dirs[d]);
            return rc;
        }
    fprintf(stderr, "attnhost: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
