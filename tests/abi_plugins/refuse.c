/* An entry that declines with a reason. */
#include "common.h"

AH_EXPORT const ah_plugin_descriptor *attnhost_plugin_entry(uint32_t host_abi_version,
                                                            const ah_host_services *host,
                                                            const char **why);
AH_EXPORT const ah_plugin_descriptor *attnhost_plugin_entry(uint32_t host_abi_version,
                                                            const ah_host_services *host,
                                                            const char **why)
{
    (void)host_abi_version;
    (void)host;
    *why = "needs a frobnicator, none found";
    return NULL;
}
