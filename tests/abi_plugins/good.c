/* A valid plugin, defined the way plugin authors are told to. */
#include "common.h"

AH_PLUGIN_DEFINE(abi_good, "1.0", "attnhost tests", "MIT", "valid CPU test backend", AH_DEVICE_CPU,
                 &abi_caps, &abi_ops)
