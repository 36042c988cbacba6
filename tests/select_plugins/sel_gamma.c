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

static ah_plugin_ops ops;

static const ah_plugin_descriptor desc = ABI_DESC("sel_gamma", &abi_caps, &ops);

AH_EXPORT const ah_plugin_descriptor *attnhost_plugin_entry(uint32_t v, const ah_host_services *h,
                                                            const char **why);
AH_EXPORT const ah_plugin_descriptor *attnhost_plugin_entry(uint32_t v, const ah_host_services *h,
                                                            const char **why)
{
    (void)v;
    (void)why;
    abi_host = h;
    ops = abi_ops;
    ops.probe = gamma_probe;
    return &desc;
}
