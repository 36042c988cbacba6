/*
 * attnhost config --dump [--effective]: every key, its default and doc, the
 * host's and each installed plugin's ([plugin.<name>], from the keys the
 * plugin declares); with --effective the values in force.
 * attnhost config --plugin-keys-markdown: the plugins' keys as the Markdown
 * reference that docs/configuration.md embeds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cmd_config(cli_common *c)
{
    int dump = 0, effective = 0, markdown = 0;
    for (int i = 0; i < c->argc; i++) {
        if (!strcmp(c->argv[i], "--dump")) dump = 1;
        else if (!strcmp(c->argv[i], "--effective")) effective = 1;
        else if (!strcmp(c->argv[i], "--plugin-keys-markdown")) markdown = 1;
        else {
            fprintf(stderr, "attnhost config: unknown option '%s'\n", c->argv[i]);
            return 2;
        }
    }
    if (dump == markdown || (effective && !dump)) {
        fprintf(stderr, "usage: attnhost config --dump [--effective] [--config F]\n"
                        "       attnhost config --plugin-keys-markdown\n");
        return 2;
    }
    /* The plugins' keys need the plugins: the host scans them. */
    ah_host *h = cli_host(c);
    if (!h) return 1;
    char *text = NULL;
    ah_status s = markdown ? ah_host_plugin_keys_markdown(h, &text)
                           : ah_host_config_dump(h, effective, &text);
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
