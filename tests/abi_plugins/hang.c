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

static ah_plugin_ops ops;
__attribute__((constructor)) static void init(void)
{
    ops = abi_ops;
    ops.probe = probe;
}
static const ah_plugin_descriptor desc = ABI_DESC("abi_hang", &abi_caps, &ops);
ABI_ENTRY(desc)
