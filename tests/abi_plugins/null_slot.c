/* A required slot (plan) left NULL. */
#include "common.h"

static ah_plugin_ops ops;
__attribute__((constructor)) static void init(void)
{
    ops = abi_ops;
    ops.plan = NULL;
}
static const ah_plugin_descriptor desc = ABI_DESC("abi_null_slot", &abi_caps, &ops);
ABI_ENTRY(desc)
