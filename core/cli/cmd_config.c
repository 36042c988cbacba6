/*
 * attnhost config --dump [--effective]: every key, its default and doc.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cmd_config(cli_common *c)
{
    int dump = 0, effective = 0;
    for (int i = 0; i < c->argc; i++) {
        if (!strcmp(c->argv[i], "--dump")) dump = 1;
        else if (!strcmp(c->argv[i], "--effective")) effective = 1;
        else {
            fprintf(stderr, "attnhost config: unknown option '%s'\n", c->argv[i]);
            return 2;
        }
    }
    if (!dump) {
        fprintf(stderr, "usage: attnhost config --dump [--effective] [--config F]\n");
        return 2;
    }
    ah_host *h = effective ? cli_host(c) : NULL;
    if (effective && !h) return 1;
    char *text = NULL;
    ah_status s = ah_host_config_dump(h, effective, &text);
    if (s != AH_OK) {
        fprintf(stderr, "attnhost config: %s\n", ah_status_str(s));
        ah_host_destroy(h);
        return 1;
    }
    fputs(text, stdout);
    free(text);
    ah_host_destroy(h);
    return 0;
}
