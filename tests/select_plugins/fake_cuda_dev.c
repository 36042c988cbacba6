/*
 * fake_cuda_dev: a "CUDA" plugin that runs on the host, for the engine
 * contract tests on machines without a GPU. It declares device kind CUDA,
 * probes usable (sm_90, two devices), serves fp32 decoder layers of head
 * size 64 or 128 only (so a layer of another head size falls to a CPU
 * plugin), and opens device indices 0 and 1; any other index is refused
 * with a reason. Memory is host memory (no memory slots), so tensors carry
 * device type CUDA with host pointers. fake_cuda_contexts_opened() counts
 * context_create calls that succeeded, for the tests to read with dlsym.
 */
#include <string.h>

#include <attnhost/plugin_util.h>

#include "common.h"

static int opened;

AH_EXPORT int fake_cuda_contexts_opened(void);
AH_EXPORT int fake_cuda_contexts_opened(void) { return __atomic_load_n(&opened, __ATOMIC_SEQ_CST); }

static ah_status fake_probe(const ah_host_services *host, ah_probe_info *info)
{
    (void)host;
    info->usable = 1;
    ah_strlcpy(info->device_name, "fake CUDA device (host memory)", sizeof info->device_name);
    ah_strlcpy(info->arch, "sm_90", sizeof info->arch);
    info->compute_capability = 90;
    info->device_count = 2;
    info->multiprocessors = 1;
    return AH_OK;
}

static ah_status fake_ctx_create(const ah_host_services *host, const ah_context_options *opts,
                                 ah_context **out, const char **why)
{
    *out = NULL;
    if (opts->device_index < 0 || opts->device_index > 1) {
        *why = "fake_cuda_dev has devices 0 and 1 only";
        return AH_ERR_UNAVAILABLE;
    }
    ah_context_options zero = *opts;
    zero.device_index = 0; /* the test backend underneath is one host device */
    ah_status s = abi_ops.context_create(host, &zero, out, why);
    if (s == AH_OK) __atomic_add_fetch(&opened, 1, __ATOMIC_SEQ_CST);
    return s;
}

static ah_plugin_ops fake_ops;
__attribute__((constructor)) static void fake_init(void)
{
    fake_ops = abi_ops;
    fake_ops.probe = fake_probe;
    fake_ops.context_create = fake_ctx_create;
}

static const uint32_t heads[] = {64, 128};

static const ah_caps caps = {
    ABI_CAPS_COMMON,
    .qk_head_sizes = AH_INT_SET_LIST(heads),
    .v_head_sizes = AH_INT_SET_LIST(heads),
    .block_sizes = AH_INT_SET_RANGE(1, 1024, 1),
    .graph_level = AH_GRAPH_NEVER,
    .prefill_rank = AH_RANK_PRIMARY,
    .decode_rank = AH_RANK_PRIMARY,
    .mixed_batch = AH_MIXED_WHOLE,
    .decode_query_len_max = 1,
};

static const ah_plugin_descriptor desc = ABI_DESC_OF(
    "fake_cuda_dev", "fake CUDA plugin on host memory (tests)", AH_DEVICE_CUDA, &caps, &fake_ops);
ABI_ENTRY(desc)
