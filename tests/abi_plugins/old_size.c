/*
 * A plugin from a hypothetical older 1.x header: its caps end after
 * preferred_kv_layout and its ops after write_kv. The fields past those
 * sizes hold nonsense on purpose: a host that read past struct_size would
 * reject this plugin (graph level 99, half a memory-slot group) or call a
 * slot that aborts.
 */
#include <stdlib.h>

#include "common.h"

static ah_status never_called(ah_context *ctx, const ah_merge_args *args)
{
    (void)ctx;
    (void)args;
    abort();
}

static ah_status never_alloc(ah_context *ctx, size_t bytes, void **ptr)
{
    (void)ctx;
    (void)bytes;
    (void)ptr;
    abort();
}

static const uint32_t blocks[] = {16, 32};
static ah_caps caps = {
    .struct_size = offsetof(ah_caps, min_compute_capability),
    .q_dtypes = AH_BIT(AH_DTYPE_FP32),
    .kv_dtypes = AH_BIT(AH_DTYPE_FP32),
    .qk_head_sizes = AH_INT_SET_RANGE(8, 256, 8),
    .v_head_sizes = AH_INT_SET_RANGE(8, 256, 8),
    .block_sizes = AH_INT_SET_LIST(blocks),
    .preferred_block_size = 16,
    .attn_types = AH_BIT(AH_ATTN_DECODER),
    .kv_layouts = AH_BIT(AH_KV_LAYOUT_NHD),
    .preferred_kv_layout = AH_KV_LAYOUT_NHD,
    /* beyond struct_size: */
    .min_compute_capability = 90,
    .max_compute_capability = 10,
    .cpu_isa_required = 0xffff0000u,
    .graph_level = (ah_graph_level)99,
    .forward_writes_kv = 7,
    .n_config_keys = 3,
};

static ah_plugin_ops ops;

__attribute__((constructor)) static void init(void)
{
    ops = abi_ops;
    ops.struct_size = offsetof(ah_plugin_ops, merge_states);
    /* beyond struct_size: */
    ops.merge_states = never_called;
    ops.mem_alloc = never_alloc;
}

static const ah_plugin_descriptor desc = ABI_DESC("abi_old_size", &caps, &ops);
ABI_ENTRY(desc)
