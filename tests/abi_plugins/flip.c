/* A plugin whose descriptor depends on the environment: with
 * ATTNHOST_TEST_FLIP set it claims fp16 queries too. The test scans it
 * without the variable and loads it with it. */
#include <stdlib.h>

#include "common.h"

static ah_caps flipped;
static const ah_plugin_descriptor desc = ABI_DESC("abi_flip", &abi_caps, &abi_ops);
static const ah_plugin_descriptor desc_flipped = ABI_DESC("abi_flip", &flipped, &abi_ops);

ABI_ENTRY_SIGNATURE;
ABI_ENTRY_SIGNATURE
{
    (void)host_abi_version;
    (void)why;
    abi_host = host;
    flipped = abi_caps;
    flipped.q_dtypes |= AH_BIT(AH_DTYPE_FP16);
    return getenv("ATTNHOST_TEST_FLIP") ? &desc_flipped : &desc;
}
