/* A plugin that needs a symbol nothing provides: dlopen with RTLD_NOW fails
 * and the host must report dlerror's text. */
#include "common.h"

extern int attnhost_test_symbol_nobody_defines(void);

static ah_status probe(const ah_host_services *host, ah_probe_info *info)
{
    info->usable = attnhost_test_symbol_nobody_defines();
    return abi_probe(host, info);
}

ABI_PROBE_PLUGIN("abi_undefined", probe)
