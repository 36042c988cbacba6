/* A probe that prints 8 MiB to stdout (more than any pipe buffer) and then
 * works: the host must neither block on it nor show it. */
#include <stdio.h>
#include <string.h>

#include "common.h"

static ah_status probe(const ah_host_services *host, ah_probe_info *info)
{
    char line[1024];
    memset(line, 'x', sizeof line - 1);
    line[sizeof line - 1] = '\n';
    for (int i = 0; i < 8192; i++) fwrite(line, 1, sizeof line, stdout);
    fflush(stdout);
    return abi_probe(host, info);
}

ABI_PROBE_PLUGIN("abi_noisy", probe)
