/* A probe that never returns. */
#include <stdio.h>
#include <unistd.h>

#include "common.h"

static ah_status probe(const ah_host_services *host, ah_probe_info *info)
{
    (void)host;
    (void)info;
    fprintf(stderr, "abi_hang: waiting for a device that never answers\n");
    for (;;) pause();
    return AH_OK;
}

ABI_PROBE_PLUGIN("abi_hang", probe)
