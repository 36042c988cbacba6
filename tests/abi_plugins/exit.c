/* A probe that calls exit(3), as a careless library might on a missing
 * driver. */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

static ah_status probe(const ah_host_services *host, ah_probe_info *info)
{
    (void)host;
    (void)info;
    fprintf(stderr, "abi_exit: no driver, exiting\n");
    exit(3);
}

ABI_PROBE_PLUGIN("abi_exit", probe)
