/*
 * A minimal stand-in for the attnhost host, for the plugin's own test and
 * bench drivers: loads cpu_amx.so, gathers CPU facts with CPUID/XGETBV
 * (requesting AMX tile permission from Linux, as the host does), and serves
 * [plugin.cpu_amx] keys from a small table the driver sets (values the key
 * declarations accept; the host is what refuses the others).
 */
#ifndef CPU_AMX_HOST_STUB_H
#define CPU_AMX_HOST_STUB_H

#include <attnhost/plugin.h>

typedef struct stub_host {
    ah_host_services svc;
    ah_hw_facts hw;
    const char *keys[8];
    const char *vals[8];
    int n_keys;
    const ah_plugin_descriptor *desc;
    void *dl;
} stub_host;

/* What the drivers open: the CPU, device 0. */
static const ah_context_options stub_device0 = {sizeof(ah_context_options), 0};

/* Load the plugin and fill CPU facts. Returns 0 on success. */
int stub_host_init(stub_host *h, const char *so_path);
/* Set (or replace) a [plugin.cpu_amx] key; the strings must outlive h. */
void stub_host_set(stub_host *h, const char *key, const char *val);
/* A DLTensor over host memory. shape is copied into the given storage. */
void stub_tensor(DLTensor *t, void *data, ah_dtype dt, int ndim, int64_t *shape_storage,
                 const int64_t *shape);

#endif
