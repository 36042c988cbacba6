/*
 * Devices as bindings see them: a plugin's context plus a stream of the
 * binding's own. CPU plugins that leave the memory slots NULL get host
 * memory.
 */
#ifndef AH_DEVICE_INT_H
#define AH_DEVICE_INT_H

#include "host_int.h"

/* Open a device on plugin slot i of host over ctx, the plugin's context on
 * device_index (CPU plugins: always 0). */
ah_status ah__device_open(ah_host *host, int slot, ah_context *ctx, int32_t device_index,
                          ah_device **out, ah_error *err);
void ah__device_close(ah_device *d);
int ah__device_slot(const ah_device *d);
/* The plugin context the device runs on. */
ah_context *ah__device_context(const ah_device *d);

#endif
