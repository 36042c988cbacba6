/*
 * mangen TEMPLATE OUT: the man page attnhost(1). Copies TEMPLATE (troff
 * prose) to OUT, replacing the lines @ATTNHOST_COMMANDS@ and
 * @ATTNHOST_OPTIONS@ with the commands and options of ../cli_help.def, the
 * table `attnhost --help` prints, so the page and the help cannot drift.
 */
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name, *synopsis, *summary;
} cmds[] = {
#define CLI_CMD(name, fn, synopsis, summary) {name, synopsis, summary},
#define CLI_OPT(scope, flag, arg, doc)
#include "../cli_help.def"
#undef CLI_CMD
#undef CLI_OPT
};

static const struct {
    const char *scope, *flag, *arg, *doc;
} opts[] = {
#define CLI_CMD(name, fn, synopsis, summary)
#define CLI_OPT(scope, flag, arg, doc) {scope, flag, arg, doc},
#include "../cli_help.def"
#undef CLI_CMD
#undef CLI_OPT
};

#define N(a) (sizeof a / sizeof a[0])

/* troff text: backslashes and dashes escaped, no line starting a request */
static void text(FILE *o, const char *s, int line_start)
{
    if (line_start && (*s == '.' || *s == '\'')) fputs("\\&", o);
    for (; *s; s++) {
        if (*s == '\\') fputs("\\e", o);
        else if (*s == '-') fputs("\\-", o);
        else fputc(*s, o);
    }
}

static void commands(FILE *o)
{
    for (size_t i = 0; i < N(cmds); i++) {
        fputs(".TP\n\\fB", o);
        text(o, cmds[i].name, 0);
        fputs("\\fR ", o);
        text(o, cmds[i].synopsis, 0);
        fputc('\n', o);
        text(o, cmds[i].summary, 1);
        fputc('\n', o);
    }
}

static void options(FILE *o)
{
    for (size_t s = 0; s <= N(cmds); s++) {
        const char *scope = s == 0 ? "" : cmds[s - 1].name;
        int header = 0;
        for (size_t i = 0; i < N(opts); i++) {
            if (strcmp(opts[i].scope, scope)) continue;
            if (!header) {
                if (*scope) fprintf(o, ".SS \"%s options\"\n", scope);
                else fputs(".SS \"Common options\"\n", o);
                header = 1;
            }
            fputs(".TP\n\\fB", o);
            text(o, opts[i].flag, 0);
            fputs("\\fR", o);
            if (*opts[i].arg) {
                fputs(" \\fI", o);
                text(o, opts[i].arg, 0);
                fputs("\\fR", o);
            }
            fputc('\n', o);
            text(o, opts[i].doc, 1);
            fputc('\n', o);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: mangen TEMPLATE OUT\n");
        return 2;
    }
    FILE *in = fopen(argv[1], "r");
    if (!in) {
        perror(argv[1]);
        return 1;
    }
    FILE *o = fopen(argv[2], "w");
    if (!o) {
        perror(argv[2]);
        fclose(in);
        return 1;
    }
    char line[4096];
    while (fgets(line, sizeof line, in)) {
        if (!strcmp(line, "@ATTNHOST_COMMANDS@\n")) commands(o);
        else if (!strcmp(line, "@ATTNHOST_OPTIONS@\n")) options(o);
        else fputs(line, o);
    }
    fclose(in);
    return fclose(o) ? 1 : 0;
}
