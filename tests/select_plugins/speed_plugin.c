/*
 * speed_plugin: the test backend (a CPU backend that really computes) that
 * also busy-waits in every forward, so `attnhost tune` and [select] policy
 * = measured can be tested on a machine without a GPU: two builds of
 * different speeds and ranks, and the slower one ranked higher. Compile
 * definitions: SPEED_NAME (a string), SPEED_RANK (both phases) and
 * SPEED_DELAY_US (the default of its [plugin.<name>] key delay_us, the
 * busy-wait per request of the planned batch in microseconds, so that a
 * mixed step split off a slow plugin's decodes is faster than whole; key
 * decode_delay_us, when set, is a decode request's, so one plugin can be
 * the faster at prefill and the other at decode). It serves ragged
 * prefill forms too (the backend's packed-K/V path).
 */
#include <time.h>

#include <attnhost/plugin_util.h>

#include "common.h"

#define STR2(x) #x
#define STR(x) STR2(x)

static int64_t delay_us, decode_delay_us;
static int64_t planned_us; /* the last plan's busy-wait (the states of one step share it) */

static ah_status speed_ctx_create(const ah_host_services *host, const ah_context_options *opts,
                                  ah_context **out, const char **why)
{
    const int64_t d = host->config_int(host, "delay_us"),
                  dd = host->config_int(host, "decode_delay_us");
    __atomic_store_n(&delay_us, d, __ATOMIC_SEQ_CST);
    __atomic_store_n(&decode_delay_us, dd < 0 ? d : dd, __ATOMIC_SEQ_CST);
    return abi_ops.context_create(host, opts, out, why);
}

static ah_status speed_plan(ah_state *s, const ah_batch *b, ah_plan_mode mode, void *stream)
{
    int64_t us = 0;
    for (uint32_t r = 0; b && r < b->num_reqs; r++) {
        const int decode = b->query_start_loc_host[r + 1] - b->query_start_loc_host[r] == 1;
        us += __atomic_load_n(decode ? &decode_delay_us : &delay_us, __ATOMIC_SEQ_CST);
    }
    __atomic_store_n(&planned_us, us, __ATOMIC_SEQ_CST);
    return abi_ops.plan(s, b, mode, stream);
}

static ah_status speed_forward(ah_state *s, const ah_forward_args *a)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const int64_t wait_ns = __atomic_load_n(&planned_us, __ATOMIC_SEQ_CST) * 1000;
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000ll + (t.tv_nsec - t0.tv_nsec) < wait_ns);
    return abi_ops.forward(s, a);
}

static const ah_config_key keys[] = {
    AH_KEY_BOOL_ROW("usable", "true", "false: the probe reports the device unusable (for tests)"),
    AH_KEY_INT_ROW("delay_us", STR(SPEED_DELAY_US), 0, 10000000,
                   "busy-wait per request of each forward, in microseconds (for the tune tests)"),
    AH_KEY_INT_ROW("decode_delay_us", "-1", -1, 10000000,
                   "busy-wait per decode request (query length 1); -1: delay_us")};

static ah_caps caps;
static ah_plugin_ops ops;

__attribute__((constructor)) static void init(void)
{
    caps = abi_caps;
    caps.features |= AH_FEAT_RAGGED_KV; /* the backend's ragged path: tune times ragged forms */
    caps.prefill_rank = SPEED_RANK;
    caps.decode_rank = SPEED_RANK;
    caps.config_keys = keys;
    caps.n_config_keys = 3;
    ops = abi_ops;
    ops.context_create = speed_ctx_create;
    ops.plan = speed_plan;
    ops.forward = speed_forward;
    ops.merge_states = abi_merge_states;
}

static const ah_plugin_descriptor desc =
    ABI_DESC_OF(SPEED_NAME, "speed test plugin", AH_DEVICE_CPU, &caps, &ops);
ABI_ENTRY(desc)
