/*
 * Shared pieces of the ABI test plugins: a small but correct CPU backend
 * (fp32 queries and KV cache, NHD layout, causal decoder attention over the
 * paged cache, separate write_kv) that each test case wraps in its own,
 * deliberately right or wrong, descriptor.
 */
#ifndef ABI_TEST_COMMON_H
#define ABI_TEST_COMMON_H

#include <attnhost/plugin.h>

/* The host services of the last entry call. */
extern const ah_host_services *abi_host;

extern const ah_caps abi_caps;
extern const ah_plugin_ops abi_ops;

ah_status abi_probe(const ah_host_services *host, ah_probe_info *info);



/* An entry that hands out DESC whatever the host is (cases that test the
 * host's own checks must not refuse first). */
#define ABI_ENTRY(DESC)                                                                  \
    AH_EXPORT const ah_plugin_descriptor *attnhost_plugin_entry(                         \
        uint32_t host_abi_version, const ah_host_services *host, const char **why);      \
    AH_EXPORT const ah_plugin_descriptor *attnhost_plugin_entry(                         \
        uint32_t host_abi_version, const ah_host_services *host, const char **why)       \
    {                                                                                    \
        (void)host_abi_version;                                                          \
        (void)why;                                                                       \
        abi_host = host;                                                                 \
        return (const ah_plugin_descriptor *)&(DESC);                                    \
    }

#define ABI_DESC(NAME, CAPS, OPS)                                                        \
    {sizeof(ah_plugin_descriptor), AH_ABI_VERSION, NAME, "1.0", "attnhost tests", "MIT", \
     "ABI test plugin", AH_DEVICE_CPU, CAPS, OPS}
#endif
