/*
 * sel_alpha: head sizes 64 and 128 only, decoder only, and a cross-field
 * rule through check_combination (at most 4 KV heads).
 */
#include <stdio.h>

#include "common.h"

static const uint32_t heads[] = {64, 128};
static const ah_config_key keys[] = {
    AH_KEY_ENUM_ROW("mode", "fast", "fast|exact", "an example key")};

static void alpha_rules(const ah_layer_spec *spec, const ah_probe_info *probe, ah_reason_sink *sink)
{
    (void)probe;
    if (spec->num_kv_heads > 4) {
        char v[32];
        snprintf(v, sizeof v, "%u", spec->num_kv_heads);
        sink->add(sink, AH_REASON_COMBINATION, "num_kv_heads", v, "<= 4 with this kernel");
    }
}

static const ah_caps caps = {
    ABI_CAPS_COMMON,
    .qk_head_sizes = AH_INT_SET_LIST(heads),
    .v_head_sizes = AH_INT_SET_LIST(heads),
    .block_sizes = AH_INT_SET_RANGE(16, 1024, 16),
    .config_keys = keys,
    .n_config_keys = 1,
    .check_combination = alpha_rules,
    .prefill_rank = AH_RANK_SECONDARY,
    .decode_rank = AH_RANK_SECONDARY,
};

static const ah_plugin_descriptor desc = ABI_DESC("sel_alpha", &caps, &abi_ops);
ABI_ENTRY(desc)
