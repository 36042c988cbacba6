/*
 * A plugin built for plugin ABI 1.1, as an attnhost 0.x plugin package
 * would have shipped it: its descriptor says ABI 1.1 and its entry does not
 * refuse a newer host, so the host's own major-version check must reject it,
 * naming both versions. Built by tests/packaging/run.sh against the
 * libattnhost-dev headers; its caps and ops are never read.
 */
#include <stddef.h>

#include <attnhost/plugin.h>

static const ah_caps caps = {sizeof(ah_caps)};
static const ah_plugin_ops ops = {sizeof(ah_plugin_ops)};
static const ah_plugin_descriptor desc = {sizeof(ah_plugin_descriptor),
                                          1u << 16 | 1u,
                                          "old_abi1",
                                          "0.9.0",
                                          "attnhost tests",
                                          "Apache-2.0",
                                          "a plugin of the ABI 1 era",
                                          AH_DEVICE_CPU,
                                          &caps,
                                          &ops};

AH_EXPORT const ah_plugin_descriptor *
attnhost_plugin_entry(uint32_t host_abi_version, const ah_host_services *host, const char **why);
AH_EXPORT const ah_plugin_descriptor *
attnhost_plugin_entry(uint32_t host_abi_version, const ah_host_services *host, const char **why)
{
    (void)host_abi_version, (void)host, (void)why;
    return &desc;
}
