/*
 * sel_beta: any head size, decoder attention, and the test backend's
 * emulated "CUDA graphs" at UNIFORM_BATCH on the CPU: between graph_begin and
 * graph_end forward calls are recorded, not run; graph_launch runs them
 * against whatever the last plan (AH_PLAN_REPLAY) left in the state. That is
 * the contract a GPU graph follows, so the conformance suite's capture and
 * replay path runs in CI without a GPU.
 */
#include "common.h"

/* The backend's caps, with graphs and another preferred block size. */
static ah_caps caps;
__attribute__((constructor)) static void init(void)
{
    caps = abi_caps;
    caps.preferred_block_size = 32;
    caps.graph_level = AH_GRAPH_UNIFORM_BATCH;
    caps.config_keys = NULL;
    caps.n_config_keys = 0;
}
static const ah_plugin_descriptor desc = ABI_DESC("sel_beta", &caps, &abi_graph_ops);
ABI_ENTRY(desc)
