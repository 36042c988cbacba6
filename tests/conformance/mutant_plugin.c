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
static const char *const bug_names[] = {"none",       "skip_head", "window", "gqa",          "stray_write",
                                        "drop_write", "nan",       "lse",    "stale_replay", "fp8_math"};

static ah_status probe(const ah_host_services *host, ah_probe_info *info)
{
    (void)host;
    info->usable = 1;
    ah_strlcpy(info->device_name, "host CPU (conformance mutant)", sizeof info->device_name);
    return AH_OK;
}

static ah_status ctx_create(const ah_host_services *host, ah_context **out, const char **why)
{
    ah_status s = abi_ops.context_create(host, out, why);
    const char *b = host->config_get ? host->config_get(host, "bug") : NULL;
    for (unsigned i = 1; s == AH_OK && b && i < sizeof bug_names / sizeof bug_names[0]; i++)
        if (!strcmp(b, bug_names[i])) *abi_bugs(*out) = 1u << (i - 1);
    const char *f = host->config_get ? host->config_get(host, "fp8") : NULL;
    if (s == AH_OK && f && !strcmp(f, "allowed")) *abi_bugs(*out) |= ABI_FP8_MATH_ALLOWED;
    return s;
}

static const ah_config_key keys[] = {
    {"bug", "none", "the defect to plant (see mutant_plugin.c)"},
    {"fp8", "off", "allowed: FP8 math (e4m3 queries and probabilities) where the layer allows it"}};

static ah_caps caps;
static ah_plugin_ops ops;
__attribute__((constructor)) static void init(void)
{
    caps = abi_caps;
    caps.qk_head_sizes = caps.v_head_sizes = (ah_int_set)AH_INT_SET_RANGE(32, 128, 32);
    caps.block_sizes = (ah_int_set)AH_INT_SET_RANGE(8, 16, 8);
    caps.kv_dtypes = AH_BIT(AH_DTYPE_FP32) | AH_BIT(AH_DTYPE_FP8_E4M3);
    caps.features = AH_FEAT_SLIDING_WINDOW | AH_FEAT_LSE;
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
