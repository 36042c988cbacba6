/* Nonsense caps: a KV dtype bit no host knows. */
#include "common.h"

static ah_caps caps;
__attribute__((constructor)) static void init(void)
{
    caps = abi_caps;
    caps.kv_dtypes = AH_BIT(AH_DTYPE_FP16) | (1u << 12);
}
static const ah_plugin_descriptor desc = ABI_DESC("abi_bad_caps", &caps, &abi_ops);
ABI_ENTRY(desc)
