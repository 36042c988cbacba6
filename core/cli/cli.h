/*
 * The attnhost command-line tool: shared pieces of its subcommands.
 */
#ifndef AH_CLI_H
#define AH_CLI_H

#include <stdio.h>

#include <attnhost/attnhost.h>

/* Options every subcommand understands. */
typedef struct cli_common {
    const char *config;          /* --config F */
    const char *model;           /* --model M */
    const char *plugin;          /* --plugin NAME */
    const char *plugin_dirs[64]; /* --plugin-dir D (repeatable) */
    unsigned n_plugin_dirs;
    int json;                   /* --json */
    int no_cache;               /* --no-cache */
    int in_process;             /* --in-process */
    int layer;                  /* --layer N, -1: all */
    int ignore_require_checked; /* set by check: the host it makes ignores
                                   [select] require_checked */
    int argc;                   /* what is left for the subcommand */
    char **argv;
} cli_common;

/* Create the host for a subcommand, printing the error on failure. With no
 * --config the installed INI is used when present, else the embedded one. */
ah_host *cli_host(const cli_common *c);
/* Load --model, or the built-in demo model when none is given. */
ah_model *cli_model(const cli_common *c);

/* The per-layer binding table, the model's CUDA-graph level and how its
 * mixed steps run. */
void cli_print_binding(ah_host *h, const ah_model *m, const ah_selection *sel);

/* Print s as a JSON string literal. */
void cli_json_str(FILE *f, const char *s);
/* A positive count (1 .. 2^30) from an option's value v (NULL: missing)
 * into *out: 0, or -1 after printing "attnhost CMD: OPT: 'V' is not a
 * positive integer". */
int cli_parse_count(const char *cmd, const char *opt, const char *v, uint32_t *out);

int cmd_list(cli_common *c);
int cmd_explain(cli_common *c);
int cmd_bind(cli_common *c);
int cmd_check(cli_common *c);
int cmd_bench(cli_common *c);
int cmd_config(cli_common *c);
int cmd_run(cli_common *c);
int cmd_doctor(cli_common *c);
int cmd_model(cli_common *c);
int cmd_tune(cli_common *c);
/* bench --cp N (bench_cp.c): cmd_bench hands over when --cp is given. */
int cmd_bench_cp(cli_common *c);

#endif
