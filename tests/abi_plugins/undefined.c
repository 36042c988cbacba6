/* A plugin that needs a symbol nothing provides: dlopen with RTLD_NOW fails
 * and the host must report dlerror's text. */
#include "common.h"

extern int attnhost_test_symbol_nobody_defines(void);

static ah_status probe(const ah_host_services *host, ah_probe_info *info)
{
    info->usable = attnhost_test_symbol_nobody_defines();
    return abi_probe(host, info);
}

static ah_plugin_ops ops;
__attribute__((constructor)) static void init(void)
{
    ops = abi_ops;
    ops.probe = probe;
}
static const ah_plugin_descriptor desc = ABI_DESC("abi_undefined", &abi_caps, &ops);
ABI_ENTRY(desc)
