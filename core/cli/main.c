/*
 * attnhost: choose and run attention backends from the command line.
 *
 * The commands and options are declared once, in cli_help.def: the dispatch
 * table below, `attnhost --help` and the man page attnhost(1) all come from
 * it. Every subcommand takes --config F (default: the installed INI when it
 * exists, else the embedded default).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static const struct cli_cmd_entry {
    const char *name;
    int (*fn)(cli_common *);
    const char *synopsis, *summary;
} cli_cmds[] = {
#define CLI_CMD(name, fn, synopsis, summary) {name, fn, synopsis, summary},
#define CLI_OPT(scope, flag, arg, doc)
#include "cli_help.def"
#undef CLI_CMD
#undef CLI_OPT
};

static const struct cli_opt_entry {
    const char *scope, *flag, *arg, *doc;
} cli_opts[] = {
#define CLI_CMD(name, fn, synopsis, summary)
#define CLI_OPT(scope, flag, arg, doc) {scope, flag, arg, doc},
#include "cli_help.def"
#undef CLI_CMD
#undef CLI_OPT
};

#define N_CMDS (sizeof cli_cmds / sizeof cli_cmds[0])
#define N_OPTS (sizeof cli_opts / sizeof cli_opts[0])

/* "term" in a column of width `col` after `indent` spaces, then text wrapped
 * at 79 columns, continuation lines indented to the text column. */
static void help_item(FILE *f, int indent, int col, const char *term, const char *text)
{
    int at = fprintf(f, "%*s%-*s", indent, "", col, term);
    if (at > indent + col) { /* the term overflows its column: text on the next line */
        fputc('\n', f);
        at = fprintf(f, "%*s", indent + col, "");
    }
    int start = at;
    while (*text) {
        size_t w = strcspn(text, " ");
        if (at > start && at + 1 + (int)w > 79) {
            fputc('\n', f);
            at = fprintf(f, "%*s", start, "");
        } else if (at > start) {
            fputc(' ', f);
            at++;
        }
        at += fprintf(f, "%.*s", (int)w, text);
        text += w;
        while (*text == ' ') text++;
    }
    fputc('\n', f);
}

static void usage(FILE *f)
{
    char term[128];
    fprintf(f, "usage: attnhost <command> [options]\n"
               "       attnhost --help | --version\n\ncommands:\n");
    for (size_t i = 0; i < N_CMDS; i++) {
        snprintf(term, sizeof term, "%s %s", cli_cmds[i].name, cli_cmds[i].synopsis);
        help_item(f, 2, 8, term, cli_cmds[i].summary);
    }
    /* the common options, then each command's own, in the table's order */
    for (size_t s = 0; s <= N_CMDS; s++) {
        const char *scope = s == 0 ? "" : cli_cmds[s - 1].name;
        int header = 0;
        for (size_t i = 0; i < N_OPTS; i++) {
            if (strcmp(cli_opts[i].scope, scope)) continue;
            if (!header) {
                if (*scope) fprintf(f, "\n%s options:\n", scope);
                else fprintf(f, "\ncommon options:\n");
                header = 1;
            }
            snprintf(term, sizeof term, "%s%s%s", cli_opts[i].flag, *cli_opts[i].arg ? " " : "",
                     cli_opts[i].arg);
            help_item(f, 2, 24, term, cli_opts[i].doc);
        }
    }
    fprintf(f, "\nFiles, environment and exit status: man attnhost.\n");
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

int cli_parse_count(const char *cmd, const char *opt, const char *v, uint32_t *out)
{
    char *end;
    unsigned long x = v ? strtoul(v, &end, 10) : 0;
    if (!v || *end || !x || x > 1u << 30) {
        fprintf(stderr, "attnhost %s: %s: '%s' is not a positive integer\n", cmd, opt, v ? v : "");
        return -1;
    }
    *out = (uint32_t)x;
    return 0;
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
        const char **val = !strcmp(a, "--config")   ? &c->config
                           : !strcmp(a, "--model")  ? &c->model
                           : !strcmp(a, "--plugin") ? &c->plugin
                                                    : NULL;
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
            } else {
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
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        /* the library's own answer: the CLI may run against another libattnhost */
        printf("attnhost %s (plugin ABI %u.%u)\n", ah_version(), AH_ABI_MAJOR(ah_abi_version()),
               AH_ABI_MINOR(ah_abi_version()));
        return 0;
    }
    for (size_t i = 0; i < N_CMDS; i++)
        if (!strcmp(argv[1], cli_cmds[i].name)) {
            cli_common c = {0};
            int rc = parse_common(argc - 2, argv + 2, &c) ? 2 : cli_cmds[i].fn(&c);
            for (unsigned d = 0; d < c.n_plugin_dirs; d++) free((char *)c.plugin_dirs[d]);
            return rc;
        }
    fprintf(stderr, "attnhost: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
