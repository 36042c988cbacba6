/* A plugin from a hypothetical newer 1.x header: descriptor, caps and ops
 * each carry trailing fields this host does not know. Accepted; the host
 * reads what it knows. */
#include "common.h"

typedef struct caps_v2 {
    ah_caps base;
    uint32_t future_flags;
    const char *future_text;
} caps_v2;

typedef struct ops_v2 {
    ah_plugin_ops base;
    ah_status (*future_slot)(ah_context *ctx);
} ops_v2;

typedef struct desc_v2 {
    ah_plugin_descriptor base;
    const char *future_homepage;
} desc_v2;

static ah_status future(ah_context *ctx)
{
    (void)ctx;
    return AH_OK;
}

static caps_v2 caps;
static ops_v2 ops;
static desc_v2 desc = {{sizeof(desc_v2), AH_ABI_VERSION | 7u, "abi_new_size", "2.0",
                        "attnhost tests", "MIT", "ABI 1.7 plugin", AH_DEVICE_CPU, &caps.base,
                        &ops.base},
                       "https://example.invalid"};

__attribute__((constructor)) static void init(void)
{
    caps.base = abi_caps;
    caps.base.struct_size = sizeof caps;
    caps.future_flags = 0xffffffffu;
    caps.future_text = "future";
    ops.base = abi_ops;
    ops.base.struct_size = sizeof ops;
    ops.future_slot = future;
}

ABI_ENTRY(desc)
