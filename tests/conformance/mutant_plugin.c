/*
 * conf_mutant: the test plugins' correct fp32 CPU backend (with sliding
 * window, LSE and emulated CUDA graphs at level ALWAYS) into which its config
 * key `bug` plants one defect of the kind real kernels have. test_mutants
 * runs the conformance suite against each defect and expects a failure, so
 * the suite is shown to catch them (and to pass the plugin with bug = none).
 * The defects themselves are the backend's hooks, described in
 * tests/abi_plugins/common.h. Its key `fp8 = allowed` makes it a correct
 * FP8 backend (FP8 math where the layer allows it), which must pass; the
 * defect `fp8_math` takes that math where the layer did not allow it.
 */
#include <string.h>

#include <attnhost/plugin_util.h>

#include "common.h"

/* `bug` values, in the order of the hooks' bits after "none". */
#define BUG_CHOICES \
    "none|skip_head|window|gqa|stray_write|drop_write|nan|lse|stale_replay|fp8_math|head0_scale|" \
    "scale_at_capture|q_descale|value_at_key"

static ah_status probe(const ah_host_services *host, ah_probe_info *info)
{
    (void)host;
    info->usable = 1;
    ah_strlcpy(info->device_name, "host CPU (conformance mutant)", sizeof info->device_name);
    return AH_OK;
}

static ah_status ctx_create(const ah_host_services *host, const ah_context_options *opts,
                            ah_context **out, const char **why)
{
    ah_status s = abi_ops.context_create(host, opts, out, why);
    int64_t bug = host->config_int(host, "bug"); /* index into BUG_CHOICES */
    if (s == AH_OK && bug > 0) *abi_bugs(*out) = 1u << (bug - 1);
    if (s == AH_OK && host->config_int(host, "fp8") == 1) *abi_bugs(*out) |= ABI_FP8_MATH_ALLOWED;
    return s;
}

static const ah_config_key keys[] = {
    AH_KEY_ENUM_ROW("bug", "none", BUG_CHOICES, "the defect to plant (see mutant_plugin.c)"),
    AH_KEY_ENUM_ROW(
        "fp8", "off", "off|allowed",
        "allowed: FP8 math (e4m3 queries and probabilities) where the layer allows it")};

static ah_caps caps;
static ah_plugin_ops ops;
__attribute__((constructor)) static void init(void)
{
    caps = abi_caps;
    caps.qk_head_sizes = caps.v_head_sizes = (ah_int_set)AH_INT_SET_RANGE(32, 128, 32);
    caps.block_sizes = (ah_int_set)AH_INT_SET_RANGE(8, 16, 8);
    caps.kv_dtypes = AH_BIT(AH_DTYPE_FP32) | AH_BIT(AH_DTYPE_FP8_E4M3);
    caps.features = AH_FEAT_SLIDING_WINDOW | AH_FEAT_LSE | AH_FEAT_KV_SCALE_PER_HEAD |
                    AH_FEAT_SCALE_TENSORS | AH_FEAT_Q_SCALE;
    caps.kv_layouts = AH_BIT(AH_KV_LAYOUT_NHD) | AH_BIT(AH_KV_LAYOUT_NHD_INTERLEAVED);
    caps.graph_level = AH_GRAPH_ALWAYS;
    caps.config_keys = keys;
    caps.n_config_keys = sizeof keys / sizeof keys[0];
    ops = abi_graph_ops;
    ops.probe = probe;
    ops.context_create = ctx_create;
}

AH_PLUGIN_DEFINE(conf_mutant, "1.0", "attnhost tests", "MIT",
                 "fp32 CPU backend with plantable defects (conformance self-test)", AH_DEVICE_CPU,
                 &caps, &ops)
