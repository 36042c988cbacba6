/*
 * sel_gamma: a plugin whose device is never present.
 */
#include <attnhost/plugin_util.h>

#include "common.h"

static ah_status gamma_probe(const ah_host_services *host, ah_probe_info *info)
{
    (void)host;
    info->usable = 0;
    ah_strlcpy(info->reason, "no gamma accelerator in this machine", sizeof info->reason);
    return AH_OK;
}

ABI_PROBE_PLUGIN("sel_gamma", gamma_probe)
