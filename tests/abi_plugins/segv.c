/* A probe that dereferences a NULL pointer (obtained at run time, so the
 * compiler cannot turn it into a trap instruction). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

static ah_status probe(const ah_host_services *host, ah_probe_info *info)
{
    (void)host;
    (void)info;
    fprintf(stderr, "abi_segv: probing the device\n");
    fprintf(stderr, "abi_segv: about to crash\n");
    volatile int *p = (volatile int *)(uintptr_t)getenv("ATTNHOST_TEST_UNSET_VARIABLE_X");
    *p = 1;
    return AH_OK;
}

ABI_PROBE_PLUGIN("abi_segv", probe)
