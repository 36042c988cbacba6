/*
 * The test backend behind every test plugin (the ABI cases, the selection
 * plugins and the conformance mutant): a small but correct CPU backend (fp32
 * queries and KV cache, NHD layout (dense, or K and V interleaved per block
 * where a plugin's caps claim it: rows are addressed through the cache
 * tensors' strides), causal decoder attention over the paged
 * cache with GQA, sliding window and LSE, separate write_kv, and over packed
 * K/V on ragged layers where a plugin's caps claim them), optional CPU
 * emulation of CUDA graphs, and defect hooks. Each plugin wraps it in its own,
 * deliberately right or wrong, descriptor.
 */
#ifndef ABI_TEST_COMMON_H
#define ABI_TEST_COMMON_H

#include <attnhost/plugin.h>

/* The host services of the last entry call. */
extern const ah_host_services *abi_host;

extern const ah_caps abi_caps;
extern const ah_plugin_ops abi_ops; /* no graph, memory or stream slots */

/* abi_ops with host memory as "device" memory, streams and emulated CUDA
 * graphs: capture records the forward calls made between graph_begin and
 * graph_end, launch replays them with the same pointers, reading whatever
 * plan(REPLAY) left in the state, which is what a device graph is to a
 * kernel. */
extern const ah_plugin_ops abi_graph_ops;

/* merge_states over fp32 parts (for a plugin that offers it: a ragged
 * step's context passes are merged with it). */
ah_status abi_merge_states(ah_context *ctx, const ah_merge_args *a);

ah_status abi_probe(const ah_host_services *host, ah_probe_info *info);

/* Defects a context can be told to have, for the conformance suite's
 * self-test; 0 (the default) is the correct backend. */
enum {
    ABI_BUG_SKIP_HEAD = 1u << 0,   /* the last query head's output is never written */
    ABI_BUG_WINDOW = 1u << 1,      /* the sliding window lets one key too many through */
    ABI_BUG_GQA = 1u << 2,         /* query head h reads KV head h % Hk, not h / (Hq/Hk) */
    ABI_BUG_STRAY = 1u << 3,       /* write_kv also writes the slot after each new token's */
    ABI_BUG_DROP = 1u << 4,        /* write_kv skips the last new token */
    ABI_BUG_NAN = 1u << 5,         /* one output element is NaN */
    ABI_BUG_LSE = 1u << 6,         /* the LSE is off by 0.01 */
    ABI_BUG_STALE = 1u << 7,       /* plan(REPLAY) keeps the captured batch, not the new one */
    ABI_BUG_FP8_MATH = 1u << 8,    /* FP8 math (below) on every FP8-cache layer, allowed or not */
    ABI_BUG_HEAD0_SCALE = 1u << 9, /* per-head scales: head 0's serves every head */
    ABI_BUG_SCALE_CAPTURE = 1u << 10, /* a captured forward keeps the scale tensors'
                                         values of its capture */
    ABI_BUG_Q_DESCALE = 1u << 11,     /* FP8 math quantises q with q_scale but leaves
                                         the products unscaled by it */
    ABI_BUG_VALUE_AT_KEY = 1u << 12,  /* forward reads each value at its key's element in the
                                         key cache tensor (right only when they coincide) */
    /* Not a defect: FP8 math where the layer's fp8_attention allows it, as
     * an FP8 backend does it (query rows and probabilities rounded to e4m3;
     * the query with the engine's q_scale where the layer gives one). */
    ABI_FP8_MATH_ALLOWED = 1u << 13,
};

/* The defect set of a context made by abi_ops.context_create. */
uint32_t *abi_bugs(ah_context *ctx);

/* The entry point's signature, declared before it is defined. */
#define ABI_ENTRY_SIGNATURE \
    AH_EXPORT const ah_plugin_descriptor *attnhost_plugin_entry( \
        uint32_t host_abi_version, const ah_host_services *host, const char **why)

/* An entry that hands out DESC whatever the host is (cases that test the
 * host's own checks must not refuse first). */
#define ABI_ENTRY(DESC) \
    ABI_ENTRY_SIGNATURE; \
    ABI_ENTRY_SIGNATURE \
    { \
        (void)host_abi_version; \
        (void)why; \
        abi_host = host; \
        return (const ah_plugin_descriptor *)&(DESC); \
    }

/* A plugin NAME that is the backend with abi_caps and its own PROBE. */
#define ABI_PROBE_PLUGIN(NAME, PROBE) \
    static ah_plugin_ops abi_probe_ops; \
    __attribute__((constructor)) static void abi_probe_init(void) \
    { \
        abi_probe_ops = abi_ops; \
        abi_probe_ops.probe = PROBE; \
    } \
    static const ah_plugin_descriptor abi_probe_desc = ABI_DESC(NAME, &abi_caps, &abi_probe_ops); \
    ABI_ENTRY(abi_probe_desc)

/* A descriptor of the tests' vendor and licence: NAME, its SUMMARY, device
 * KIND, CAPS and OPS. */
#define ABI_DESC_OF(NAME, SUMMARY, KIND, CAPS, OPS) \
    { \
        sizeof(ah_plugin_descriptor), AH_ABI_VERSION, NAME, "1.0", "attnhost tests", "MIT", \
            SUMMARY, KIND, CAPS, OPS \
    }
#define ABI_DESC(NAME, CAPS, OPS) ABI_DESC_OF(NAME, "ABI test plugin", AH_DEVICE_CPU, CAPS, OPS)

/* The caps fields every test plugin shares with the backend (abi_caps): fp32
 * queries and KV cache, decoder layers, NHD, preferred block size 16, caller
 * output. A plugin's initializer adds the fields it sets itself. */
#define ABI_CAPS_COMMON \
    .struct_size = sizeof(ah_caps), .q_dtypes = AH_BIT(AH_DTYPE_FP32), \
    .kv_dtypes = AH_BIT(AH_DTYPE_FP32), .preferred_block_size = 16, \
    .attn_types = AH_BIT(AH_ATTN_DECODER), .kv_layouts = AH_BIT(AH_KV_LAYOUT_NHD), \
    .preferred_kv_layout = AH_KV_LAYOUT_NHD, .caller_output = 1
#endif
