/*
 * rank_plugin: one source, built once per fake "machine part" for the
 * default-order tests. Each build is the test backend (a CPU backend that
 * really computes) under a descriptor that claims another device kind and
 * other ranks, so selection can be shown choosing GPU plugins over CPU ones
 * and by rank, on a machine without a GPU. Compile definitions:
 *   RANK_NAME      the plugin's name (a string)
 *   RANK_KIND      its ah_device_kind
 *   RANK_PREFILL, RANK_DECODE   its ranks
 *   RANK_OLD_SIZE  1: caps from before the rank fields (an older minor);
 *                  the ranks written past struct_size must never be read
 * The probe says usable (with the architecture a real device of the kind
 * would report) unless [plugin.<name>] usable = false.
 */
#include <attnhost/plugin_util.h>

#include "common.h"

#ifndef RANK_OLD_SIZE
#define RANK_OLD_SIZE 0
#endif

static ah_status rank_probe(const ah_host_services *host, ah_probe_info *info)
{
    ah_status s = abi_probe(host, info);
    switch ((ah_device_kind)RANK_KIND) {
    case AH_DEVICE_CUDA:
        ah_strlcpy(info->device_name, "fake CUDA device (test plugin)", sizeof info->device_name);
        ah_strlcpy(info->arch, "sm_90", sizeof info->arch);
        info->compute_capability = 90;
        break;
    case AH_DEVICE_HIP:
        ah_strlcpy(info->device_name, "fake HIP device (test plugin)", sizeof info->device_name);
        ah_strlcpy(info->arch, "gfx942", sizeof info->arch);
        break;
    case AH_DEVICE_LEVEL_ZERO:
        ah_strlcpy(info->device_name, "fake Level Zero device (test plugin)",
                   sizeof info->device_name);
        ah_strlcpy(info->arch, "pvc", sizeof info->arch);
        break;
    default: break;
    }
    if (!info->usable && (ah_device_kind)RANK_KIND != AH_DEVICE_CPU)
        ah_strlcpy(info->reason, "no such device in this machine (switched off by usable)",
                   sizeof info->reason);
    return s;
}

static ah_caps caps;
static ah_plugin_ops ops;

__attribute__((constructor)) static void init(void)
{
    caps = abi_caps;
    caps.prefill_rank = RANK_PREFILL;
    caps.decode_rank = RANK_DECODE;
    if (RANK_OLD_SIZE) caps.struct_size = (uint32_t)offsetof(ah_caps, prefill_rank);
    ops = abi_ops;
    ops.probe = rank_probe;
}

static const ah_plugin_descriptor desc =
    ABI_DESC_OF(RANK_NAME, "rank test plugin", (ah_device_kind)RANK_KIND, &caps, &ops);
ABI_ENTRY(desc)
