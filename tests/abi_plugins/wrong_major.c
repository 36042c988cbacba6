/* Built against a future ABI 3.x; does not refuse the host itself, so the
 * host's own major-version check must. */
#include "common.h"

static const ah_plugin_descriptor desc = {sizeof(ah_plugin_descriptor),
                                          3u << 16 | 3u,
                                          "abi_wrong_major",
                                          "1.0",
                                          "attnhost tests",
                                          "MIT",
                                          "ABI 3.3 plugin",
                                          AH_DEVICE_CPU,
                                          &abi_caps,
                                          &abi_ops};
ABI_ENTRY(desc)
