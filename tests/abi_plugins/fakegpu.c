/* A "GPU" plugin over the fake runtime (fakert.c): its probe reports the
 * runtime's answer, usable only when the runtime works in this process and
 * sees a device. */
#include <attnhost/plugin_util.h>

#include "common.h"

int abi_fakert_device_count(const char **err);

static ah_status probe(const ah_host_services *host, ah_probe_info *info)
{
    ah_status s = abi_probe(host, info);
    const char *err = "";
    int n = abi_fakert_device_count(&err);
    if (s == AH_OK && n <= 0) {
        info->usable = 0;
        info->device_count = 0;
        ah_strlcpy(info->reason, err, sizeof info->reason);
    }
    return s;
}

ABI_PROBE_PLUGIN("abi_fakegpu", probe)
