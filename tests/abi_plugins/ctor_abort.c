/* A library constructor that aborts: dlopen itself never returns. */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

__attribute__((constructor)) static void boom(void)
{
    fprintf(stderr, "abi_ctor_abort: constructor cannot initialize, aborting\n");
    abort();
}

static const ah_plugin_descriptor desc = ABI_DESC("abi_ctor_abort", &abi_caps, &abi_ops);
ABI_ENTRY(desc)
