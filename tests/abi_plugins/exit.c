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

static ah_plugin_ops ops;
__attribute__((constructor)) static void init(void)
{
    ops = abi_ops;
    ops.probe = probe;
}
static const ah_plugin_descriptor desc = ABI_DESC("abi_exit", &abi_caps, &ops);
ABI_ENTRY(desc)
