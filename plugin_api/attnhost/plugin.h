/*
 * attnhost plugin ABI.
 *
 * This is the only header a backend author needs. A plugin is a shared object
 * that exports one function, attnhost_plugin_entry, which returns a static,
 * const descriptor: who the plugin is, what it can do (ah_caps, answerable
 * without touching a device) and a table of operations (ah_plugin_ops).
 *
 * Rules that keep the ABI stable across releases:
 *  - Every struct starts with uint32_t struct_size. Fields are only ever
 *    appended. A reader looks at a field only when struct_size covers it
 *    (AH_HAS_FIELD); the host treats a field it cannot see as absent.
 *  - The host refuses a plugin whose ABI major differs from its own; minor
 *    versions only add fields and optional slots.
 *  - Fallible calls return ah_status; the detail is a per-handle last-error
 *    string (context_error / state_error).
 *  - Whoever allocates frees. Nothing crosses the .so boundary to be freed on
 *    the other side.
 *  - Tensors are DLPack DLTensors. FP8 KV caches are described by the layer's
 *    kv_dtype (DLPack 0.6 has no FP8 codes); their DLTensor dtype is uint8.
 *
 * Slots marked "(optional)" may be NULL; the comment says what NULL means.
 * Required slots are checked for NULL when the host accepts a plugin.
 *
 * Threads. The host opens one context per plugin and device index and
 * shares it among every binding of the host on that device, and bindings
 * run on different threads. So the
 * context-level slots (state_create, merge_states, the mem_*, stream_*,
 * timer_* and graph_* slots) may be called concurrently on one context and
 * must be thread-safe; context_error is read right after a failing call on
 * the same thread, so keep it per thread or accept that a concurrent
 * failure may overwrite it. A state's slots (plan, forward, write_kv,
 * state_error, state_destroy) are called by one thread at a time. probe
 * and the entry may run in a short-lived child process.
 */
#ifndef ATTNHOST_PLUGIN_H
#define ATTNHOST_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------------------------
 * Versions
 * ------------------------------------------------------------------------- */

/* History of the major: ABI 2.0 added per-request phase splitting
 * (ah_caps.mixed_batch, decode_query_len_max), plugin ranks
 * (prefill_rank, decode_rank), typed plugin configuration keys
 * (ah_config_key, ah_host_services.config_int/float/str) and
 * ah_context_options. Fields a later minor appends say which minor.
 * ABI 2.1 added encoder and cross attention (cacheless encoder layers,
 * ah_batch.encoder_seq_lens), the decoder causal flag
 * (ah_layer_spec.causal), tree masks (ah_batch.custom_mask) and KV-cache
 * groups with released blocks (ah_layer_spec.kv_group, ah_batch.kv_groups,
 * AH_FEAT_RELEASED_BLOCKS), with the feature bits that claim them.
 * ABI 2.2 added context parallelism: AH_FEAT_EMPTY_KV and the host-only
 * ah_batch.cp_local_seq_lens.
 * ABI 2.3 added ragged K/V for decoder layers (AH_FEAT_RAGGED_KV,
 * ah_layer_spec.ragged_kv, ah_batch.cu_seqlens_k, num_k_tokens and
 * ragged_keys), FP8 scales per KV head and in tensors with the query scale
 * (see "FP8 scales" below ah_layer_spec), and the interleaved K/V cache
 * layouts (AH_KV_LAYOUT_NHD_INTERLEAVED, AH_KV_LAYOUT_HND_INTERLEAVED),
 * block_size = auto and kernel blocks (attnhost.h), and the fnuz FP8
 * element types (AH_DTYPE_FP8_E4M3_FNUZ, AH_DTYPE_FP8_E5M2_FNUZ).
 * ABI 2.4 added device events (ah_plugin_ops.event_create .. stream_wait),
 * with which a split step's two parts run at the same time. */
#define AH_ABI_VERSION_MAJOR 2
#define AH_ABI_VERSION_MINOR 4
#define AH_ABI_VERSION ((uint32_t)(AH_ABI_VERSION_MAJOR << 16 | AH_ABI_VERSION_MINOR))
#define AH_ABI_MAJOR(v) ((uint32_t)(v) >> 16)
#define AH_ABI_MINOR(v) ((uint32_t)(v)&0xffffu)

/* True when a struct of the given struct_size contains FIELD. */
#define AH_HAS_FIELD(ptr, type, field) \
    ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type *)0)->field))

#if defined(_WIN32)
#define AH_EXPORT __declspec(dllexport)
#else
#define AH_EXPORT __attribute__((visibility("default")))
#endif

/* ----------------------------------------------------------------------------
 * Status
 * ------------------------------------------------------------------------- */

typedef enum ah_status {
    AH_OK = 0,
    AH_ERR_INVALID_ARGUMENT = 1, /* bad input: shape, range, pointer */
    AH_ERR_UNSUPPORTED = 2,      /* valid request this backend cannot serve */
    AH_ERR_OUT_OF_MEMORY = 3,
    AH_ERR_DEVICE = 4,      /* driver or kernel failure */
    AH_ERR_UNAVAILABLE = 5, /* no usable device here */
    AH_ERR_ABI = 6,         /* version or struct-size mismatch */
    AH_ERR_CONFIG = 7,      /* bad configuration or model description */
    AH_ERR_IO = 8,          /* file system */
    AH_ERR_PLUGIN = 9,      /* a plugin misbehaved (crash, garbage) */
    AH_ERR_NOT_FOUND = 10,
    AH_ERR_INTERNAL = 11,
    AH_STATUS_COUNT
} ah_status;

/* ----------------------------------------------------------------------------
 * Enumerations and bit sets used by the capability model
 * ------------------------------------------------------------------------- */

typedef enum ah_device_kind {
    AH_DEVICE_CPU = 0,
    AH_DEVICE_CUDA = 1,
    AH_DEVICE_HIP = 2,
    AH_DEVICE_LEVEL_ZERO = 3,
    AH_DEVICE_KIND_COUNT
} ah_device_kind;

/* Element types. AUTO is only meaningful as a layer's kv_dtype ("same as the
 * query"); the host resolves it before any plugin sees a layer spec. */
typedef enum ah_dtype {
    AH_DTYPE_AUTO = 0,
    AH_DTYPE_FP32 = 1,
    AH_DTYPE_FP16 = 2,
    AH_DTYPE_BF16 = 3,
    AH_DTYPE_FP8_E4M3 = 4,
    AH_DTYPE_FP8_E5M2 = 5,
    /* ABI 2.3: the "fnuz" FP8 formats of AMD's MI300 (gfx942), which its
     * engines keep FP8 KV caches in (torch.float8_e4m3fnuz, _e5m2fnuz):
     * exponent bias one larger than the OCP format of the same shape, no
     * infinities, no negative zero, and 0x80 the only NaN. */
    AH_DTYPE_FP8_E4M3_FNUZ = 6, /* largest finite 240 */
    AH_DTYPE_FP8_E5M2_FNUZ = 7, /* largest finite 57344 */
    AH_DTYPE_COUNT
} ah_dtype;
#define AH_BIT(x) (1u << (x))

/* Attention types. Since ABI 2.1 (a layer of the last three types needs
 * the feature bit named beside it, which no 2.0 plugin can claim):
 *   DECODER: self-attention over the paged cache, causal unless the spec's
 *            causal flag says AH_CAUSAL_OFF.
 *   ENCODER, ENCODER_ONLY (AH_FEAT_CACHELESS): bidirectional self-attention
 *            without a cache (the encoder of an encoder-decoder model such as
 *            Whisper's; BERT, ViT). Request r's keys and values are its own
 *            new tokens, rows [query_start_loc[r], query_start_loc[r+1]) of
 *            forward's key/value tensors ([T, Hk, D], cu_seqlens-packed);
 *            nothing is read from or written to a cache, and the batch needs
 *            no block table, slot mapping or cache blocks for such a layer.
 *   ENCODER_DECODER (AH_FEAT_CROSS_ATTENTION): cross-attention. Queries are
 *            the decoder's new tokens; keys and values are request r's
 *            encoder K/V, ah_batch.encoder_seq_lens[r] tokens at positions
 *            0 .. encoder_seq_lens[r] - 1 of the request's block-table row
 *            in the layer's own cache tensors, all visible (non-causal).
 *            They are written once per request, by ah_binding_write_kv on
 *            the encoder pass's batch (slot_mapping gives the encoder tokens'
 *            slots); forward of a cross layer never writes (key/value must
 *            be NULL there). */
typedef enum ah_attn_type {
    AH_ATTN_DECODER = 0,         /* self-attention over the paged cache */
    AH_ATTN_ENCODER = 1,         /* bidirectional, cacheless (enc-dec encoder) */
    AH_ATTN_ENCODER_ONLY = 2,    /* bidirectional, cacheless (BERT-like) */
    AH_ATTN_ENCODER_DECODER = 3, /* cross-attention: decoder queries, encoder KV */
    AH_ATTN_TYPE_COUNT
} ah_attn_type;

/* ABI 2.1: ah_layer_spec.causal. BY_TYPE (0, also what a spec too short to
 * hold the field means): decoder layers causal, every other type not.
 * ON: causal (decoder layers only). OFF: a decoder layer that attends
 * bidirectionally over its sequence (a multimodal prefix), which needs
 * AH_FEAT_CAUSAL_FLAG. Encoder and cross layers are never causal: ON is
 * refused for them. */
typedef enum ah_causal {
    AH_CAUSAL_BY_TYPE = 0,
    AH_CAUSAL_ON = 1,
    AH_CAUSAL_OFF = 2,
    AH_CAUSAL_COUNT
} ah_causal;

/* ABI 2.3: ah_layer_spec.kv_scales, how an FP8 layer's K and V scales are
 * handed over (see "FP8 scales" below ah_layer_spec). */
typedef enum ah_kv_scales {
    AH_KV_SCALES_HOST = 0,     /* per tensor, host floats k_scale / v_scale */
    AH_KV_SCALES_TENSOR = 1,   /* per tensor, [1] float32 tensors */
    AH_KV_SCALES_PER_HEAD = 2, /* per KV head, [Hk] float32 tensors */
    AH_KV_SCALES_COUNT
} ah_kv_scales;

/* Layout of one KV-cache tensor (keys or values), outermost first.
 *   NHD: [num_blocks, block_size, num_kv_heads, head_size]
 *   HND: [num_blocks, num_kv_heads, block_size, head_size]
 * Dense: block b of the key cache starts at element b * block_size *
 * num_kv_heads * head_size of its own allocation, and the value cache has
 * an allocation of its own. */
typedef enum ah_kv_layout {
    AH_KV_LAYOUT_AUTO = 0, /* layer spec only: take the backend's preferred */
    AH_KV_LAYOUT_NHD = 1,
    AH_KV_LAYOUT_HND = 2,
    /* ABI 2.3: KV-cache layout. K and V interleaved per block in one
     * allocation, vLLM's FlashInfer cache: NHD_INTERLEAVED is one tensor
     * [num_blocks, 2, block_size, num_kv_heads, head_size] (HND_INTERLEAVED:
     * [num_blocks, 2, num_kv_heads, block_size, head_size]); index 0 of dim
     * 1 holds the keys, index 1 the values. A plugin receives two 4-dim
     * views of it, in the NHD (HND) shape: key_cache = cache[:, 0] and
     * value_cache = cache[:, 1], whose block stride (strides[0]) is 2 *
     * block_size * num_kv_heads * head_size elements, and whose first
     * element (data + byte_offset) lies block_size * num_kv_heads *
     * head_size elements after the key view's. The engine may put that
     * offset into data (as PyTorch's DLPack export does) or into
     * byte_offset; a plugin reads data + byte_offset and the strides (see
     * ah_dl_data, ah_dl_stride). Layers whose qk and v head sizes differ,
     * and MLA layers (no value cache), cannot use these layouts. */
    AH_KV_LAYOUT_NHD_INTERLEAVED = 3,
    AH_KV_LAYOUT_HND_INTERLEAVED = 4,
    AH_KV_LAYOUT_COUNT
} ah_kv_layout;

/* ABI 2.3: KV-cache layout. 1 when a view of the layout orders a block
 * [num_kv_heads, block_size, head_size] (HND, HND_INTERLEAVED). */
static inline int ah_kv_layout_is_hnd(ah_kv_layout l)
{
    return l == AH_KV_LAYOUT_HND || l == AH_KV_LAYOUT_HND_INTERLEAVED;
}
/* 1 when K and V share one allocation, interleaved per block. */
static inline int ah_kv_layout_is_interleaved(ah_kv_layout l)
{
    return l == AH_KV_LAYOUT_NHD_INTERLEAVED || l == AH_KV_LAYOUT_HND_INTERLEAVED;
}

/* The two phases a layer is bound for. A batch's request is a decode
 * request when its query length is at most the decode winner's
 * decode_query_len_max (1 for most plugins); the rest are prefill. */
typedef enum ah_phase { AH_PHASE_PREFILL = 0, AH_PHASE_DECODE = 1, AH_PHASE_COUNT } ah_phase;

/* How much a plugin asks to be preferred (GStreamer's ranks). The host
 * orders a layer's default candidates GPU plugins first, then by rank
 * (higher first), then by name; [select] lists override the order. NONE:
 * never a default candidate, only when a list names the plugin. Any value
 * in between is allowed (PRIMARY + 32 to rank just above a peer). */
typedef enum ah_rank {
    AH_RANK_NONE = 0,
    AH_RANK_MARGINAL = 64,
    AH_RANK_SECONDARY = 128,
    AH_RANK_PRIMARY = 256
} ah_rank;

/* How a plugin takes a batch that mixes decode and prefill requests.
 *   WHOLE: its kernels serve any mix in one plan; when it wins both phases
 *          of a layer (one spec) one state serves both and the batch is
 *          planned on it whole.
 *   SPLIT: its decode and prefill paths are planned apart; it gets one
 *          state per phase, and a split step hands the decode requests to
 *          one and the rest to the other. A mixed batch the host cannot
 *          split (see ah_batch, Phases) goes whole to its prefill state. */
typedef enum ah_mixed_batch {
    AH_MIXED_WHOLE = 0,
    AH_MIXED_SPLIT = 1,
    AH_MIXED_BATCH_COUNT
} ah_mixed_batch;

/* CUDA-graph support level (vLLM's AttentionCGSupport): each level includes
 * the ones below it. */
typedef enum ah_graph_level {
    AH_GRAPH_NEVER = 0,
    AH_GRAPH_UNIFORM_SINGLE_TOKEN_DECODE = 1, /* pure decode, query_len 1 */
    AH_GRAPH_UNIFORM_BATCH = 2,               /* every request has one query_len */
    AH_GRAPH_ALWAYS = 3,                      /* mixed prefill/decode batches */
    AH_GRAPH_LEVEL_COUNT
} ah_graph_level;

/* Feature flags (ah_caps.features). A layer needing a feature the plugin does
 * not claim is rejected with a reason naming the feature. */
typedef enum ah_feature {
    AH_FEAT_MLA = 1u << 0,   /* absorbed MLA: one KV head, V = K[..., :v_head] */
    AH_FEAT_SINKS = 1u << 1, /* per-head attention-sink logits */
    AH_FEAT_SLIDING_WINDOW = 1u << 2,
    AH_FEAT_ALIBI = 1u << 3,
    AH_FEAT_SOFTCAP = 1u << 4,         /* logits soft-cap: c * tanh(s / c) */
    AH_FEAT_NON_CAUSAL = 1u << 5,      /* bidirectional attention */
    AH_FEAT_SPARSE = 1u << 6,          /* block-sparse attention */
    AH_FEAT_LSE = 1u << 7,             /* forward can return log-sum-exp */
    AH_FEAT_CASCADE = 1u << 8,         /* shared-prefix (cascade) attention */
    AH_FEAT_DIFF_HEAD_SIZES = 1u << 9, /* qk_head_size != v_head_size */
    /* ABI 2.1 */
    AH_FEAT_TREE_MASK = 1u << 10,       /* ah_batch.custom_mask on decoder layers
                                           (speculative tree verification); a
                                           batch with a mask is planned only on
                                           plugins claiming it */
    AH_FEAT_CACHELESS = 1u << 11,       /* ENCODER / ENCODER_ONLY layers without
                                           a cache (see ah_attn_type) */
    AH_FEAT_CROSS_ATTENTION = 1u << 12, /* ENCODER_DECODER layers over
                                          ah_batch.encoder_seq_lens */
    AH_FEAT_CAUSAL_FLAG = 1u << 13,     /* decoder layers with causal = OFF */
    AH_FEAT_RELEASED_BLOCKS = 1u << 14, /* ABI 2.1: the plugin never reads a
                                           block-table entry its layer's window
                                           hides from every query of the
                                           request, so released (negative)
                                           entries there are safe (see
                                           ah_kv_group); a batch with released
                                           entries is planned only on plugins
                                           claiming it */
    /* ABI 2.2 */
    AH_FEAT_EMPTY_KV = 1u << 15, /* decoder requests with seq_len 0 (query
                                   length 1): out 0 and lse -inf, no cache
                                   read, and merge_states takes lse -inf
                                   as "no keys". Only the host makes such
                                   requests: a context-parallel rank
                                   holding none of a request's keys yet
                                   (see ah_binding_options.cp) */
    /* ABI 2.3: ragged K/V */
    AH_FEAT_RAGGED_KV = 1u << 16, /* decoder layers whose spec says ragged_kv:
                                     keys and values come packed in forward's
                                     key/value by ah_batch.cu_seqlens_k, in
                                     either ah_ragged_keys placement, no
                                     cache (see ah_layer_spec.ragged_kv) */
    /* ABI 2.3: FP8 scales (see "FP8 scales" below ah_layer_spec) */
    AH_FEAT_KV_SCALE_PER_HEAD = 1u << 17, /* kv_scales = PER_HEAD: one K and one V
                                             scale per KV head, in [Hk] tensors
                                             (needs AH_FEAT_SCALE_TENSORS too) */
    AH_FEAT_SCALE_TENSORS = 1u << 18,     /* kv_scales = TENSOR (and PER_HEAD):
                                             scales, the query's too, in float32
                                             tensors on the plugin's device, read
                                             when the work runs (graph replay
                                             included) */
    AH_FEAT_Q_SCALE = 1u << 19            /* use_q_scale: FP8 attention with the
                                             engine's query scale */
} ah_feature;
#define AH_FEATURE_COUNT 20 /* bits 0 .. AH_FEATURE_COUNT - 1 */

/* CPU instruction-set facts (ah_hw_facts.cpu_isa). A bit is set only when
 * the CPU has it AND the OS enabled its state (XCR0) AND, for AMX, the Linux
 * permission request succeeded. */
typedef enum ah_cpu_isa {
    AH_ISA_SSE42 = 1u << 0,
    AH_ISA_AVX = 1u << 1,
    AH_ISA_AVX2 = 1u << 2,
    AH_ISA_FMA = 1u << 3,
    AH_ISA_F16C = 1u << 4,
    AH_ISA_AVX512F = 1u << 5,
    AH_ISA_AVX512BW = 1u << 6,
    AH_ISA_AVX512VL = 1u << 7,
    AH_ISA_AVX512DQ = 1u << 8,
    AH_ISA_AVX512_VNNI = 1u << 9,
    AH_ISA_AVX512_BF16 = 1u << 10,
    AH_ISA_AVX512_FP16 = 1u << 11,
    AH_ISA_AMX_TILE = 1u << 12,
    AH_ISA_AMX_BF16 = 1u << 13,
    AH_ISA_AMX_INT8 = 1u << 14,
    AH_ISA_AMX_FP16 = 1u << 15
} ah_cpu_isa;
#define AH_CPU_ISA_COUNT 16 /* bits 0 .. AH_CPU_ISA_COUNT - 1 */

/* ----------------------------------------------------------------------------
 * Integer sets: head sizes, block sizes.
 * x is a member when it is one of values[], or when range_step != 0 and
 * range_min <= x <= range_max and (x - range_min) % range_step == 0.
 * ------------------------------------------------------------------------- */

typedef struct ah_int_set {
    uint32_t struct_size;
    uint32_t n_values;
    const uint32_t *values;
    uint32_t range_min, range_max, range_step;
} ah_int_set;

#define AH_INT_SET_LIST(arr) \
    { \
        sizeof(ah_int_set), (uint32_t)(sizeof(arr) / sizeof((arr)[0])), (arr), 0, 0, 0 \
    }
#define AH_INT_SET_RANGE(lo, hi, step) \
    { \
        sizeof(ah_int_set), 0, NULL, (lo), (hi), (step) \
    }
#define AH_INT_SET_LIST_AND_RANGE(arr, lo, hi, step) \
    { \
        sizeof(ah_int_set), (uint32_t)(sizeof(arr) / sizeof((arr)[0])), (arr), (lo), (hi), (step) \
    }
#define AH_INT_SET_ANY AH_INT_SET_RANGE(1, UINT32_MAX, 1)

static inline int ah_int_set_contains(const ah_int_set *s, uint32_t x)
{
    for (uint32_t i = 0; i < s->n_values; i++)
        if (s->values[i] == x) return 1;
    return s->range_step != 0 && x >= s->range_min && x <= s->range_max &&
           (x - s->range_min) % s->range_step == 0;
}

/* ----------------------------------------------------------------------------
 * Hardware facts gathered by the host (CPUID, XCR0, AMX permission, memory)
 * and passed to every plugin. GPU facts come from the plugins' own probes.
 * ------------------------------------------------------------------------- */

typedef struct ah_hw_facts {
    uint32_t struct_size;
    uint32_t cpu_isa;       /* usable ah_cpu_isa bits */
    uint32_t cpu_isa_cpuid; /* what CPUID reports, before OS/permission checks */
    uint32_t cpu_logical_cores;
    uint64_t memory_bytes;
    char cpu_vendor[16];
    char cpu_model[64];
    char amx_note[96]; /* why AMX is not usable, or "" */
} ah_hw_facts;

/* ----------------------------------------------------------------------------
 * Host services: what a plugin may call back into.
 * ------------------------------------------------------------------------- */

typedef enum ah_log_level {
    AH_LOG_ERROR = 0,
    AH_LOG_WARN = 1,
    AH_LOG_INFO = 2,
    AH_LOG_DEBUG = 3
} ah_log_level;

typedef struct ah_host_services {
    uint32_t struct_size;
    uint32_t abi_version; /* AH_ABI_VERSION of the host */
    /* Log a line, tagged with the plugin's name by the host. Thread-safe. */
    void (*log)(const struct ah_host_services *host, ah_log_level level, const char *msg);
    /* Host memory for the plugin's own bookkeeping. Thread-safe. alloc
     * returns NULL on failure (and under fault injection); free(NULL) is a
     * no-op. Memory from alloc goes back through free, never libc free. */
    void *(*alloc)(const struct ah_host_services *host, size_t size);
    void (*free)(const struct ah_host_services *host, void *ptr);
    /* The effective value of a key the plugin declares in
     * ah_caps.config_keys: the [plugin.<name>] value when the INI sets it,
     * else the declared default, already validated against the key's type
     * and range. config_int serves BOOL (0/1), INT and ENUM (the index into
     * choices); config_float serves FLOAT and INT; config_str serves every
     * type (the value's text, living as long as the host). Asking for an
     * undeclared key, or with the wrong getter, returns 0 / NULL and logs
     * an error naming the key. Thread-safe. */
    int64_t (*config_int)(const struct ah_host_services *host, const char *key);
    double (*config_float)(const struct ah_host_services *host, const char *key);
    const char *(*config_str)(const struct ah_host_services *host, const char *key);
    const ah_hw_facts *hw;
    void *host_data; /* the host's; plugins never read it */
} ah_host_services;

/* ----------------------------------------------------------------------------
 * Probe: is the plugin's device usable here? Filled by the plugin into a
 * struct the host zeroes and sizes; the plugin writes only what struct_size
 * covers. Strings are NUL-terminated and truncated to fit.
 * ------------------------------------------------------------------------- */

typedef struct ah_probe_info {
    uint32_t struct_size;
    int32_t usable;   /* 1: can run here; 0: reason says why not */
    char reason[256]; /* "libcuda.so.1 not found", ... */
    char device_name[128];
    char arch[32];               /* "sm_90", "gfx942", "avx512bf16", ... */
    uint32_t compute_capability; /* CUDA major*10+minor, else 0 */
    uint32_t device_count;
    uint32_t multiprocessors; /* SMs, CUs, or CPU cores */
    uint64_t memory_bytes;
    char driver_version[64];
} ah_probe_info;

/* ----------------------------------------------------------------------------
 * Layer specification: what one attention layer needs. The host fills it
 * from the model description; kv_dtype and kv_layout are already resolved
 * (never AUTO) when a plugin sees it.
 * ------------------------------------------------------------------------- */

typedef struct ah_layer_spec {
    uint32_t struct_size;
    ah_attn_type attn_type; /* decoder layers are causal, others not */
    uint32_t num_q_heads;
    uint32_t num_kv_heads;
    uint32_t qk_head_size;
    uint32_t v_head_size; /* MLA absorbed: qk 576, v 512, kv_heads 1 */
    ah_dtype q_dtype;     /* also the output dtype */
    ah_dtype kv_dtype;
    uint32_t block_size; /* tokens per KV-cache block */
    ah_kv_layout kv_layout;
    uint32_t sliding_window; /* 0: none; else a query at position p sees
                                keys at positions > p - sliding_window */
    float softcap;           /* 0: none */
    float scale;             /* softmax scale; the host fills 1/sqrt(qk) if 0 */
    uint32_t use_mla;        /* absorbed MLA: V is the first v_head_size
                                channels of the key cache */
    uint32_t use_sinks;      /* forward receives per-head sink logits */
    uint32_t use_alibi;      /* forward receives per-head ALiBi slopes */
    /* ABI 1.1. With an FP8 kv_dtype: 1 lets the plugin compute attention in
     * FP8 (queries and probabilities rounded to the cache's 8-bit format for
     * FP8 tensor-core GEMMs, as FlashAttention-3 does for an FP8 cache);
     * 0 asks for at least the query dtype's precision in the math. Without
     * an FP8 kv_dtype it changes nothing. */
    uint32_t fp8_attention;
    /* ABI 2.1. An ah_causal: whether a decoder layer is causal, apart from
     * its attention type (see ah_causal; read it through ah_spec_causal,
     * which treats a spec too short to hold it as BY_TYPE). */
    uint32_t causal;
    /* ABI 2.1. The layer's KV-cache group (vLLM's kv_cache_groups): layers
     * of one group share a block size, KV dtype and layout, and read their
     * block table, slot mapping and num_blocks from the batch's group entry
     * (ah_batch.kv_groups). The host hands each state a batch whose
     * block_table, slot_mapping, host copies, stride and num_blocks are its
     * group's, so a plugin reads the usual fields and may ignore this one;
     * it makes the specs, hence the states, of different groups differ.
     * 0 for a model with one group (and for a spec too short to hold it:
     * read it through ah_spec_kv_group). */
    uint32_t kv_group;

    /* ABI 2.3: ragged K/V. 1: a decoder layer whose keys and values are not
     * in a cache but given to each forward as packed tensors, key [Tk, Hk,
     * qk_head] and value [Tk, Hk, v_head] in the query dtype, request r's
     * keys being rows [cu_seqlens_k[r], cu_seqlens_k[r+1]) (see
     * ah_batch.cu_seqlens_k; Tk = ah_batch.num_k_tokens, which may differ
     * from num_tokens). Keys sit at positions 0 .. k_len - 1, and the
     * step's ragged_keys (see ah_batch) places query i of q_len: at k_len -
     * q_len + i (bottom-right, the default), or at k_len + i (a chunk of
     * context the engine decompressed, every key before every query).
     * Causal, a query at p sees keys j <= p; with causal = OFF every key.
     * Windows, soft-cap, sinks, ALiBi and LSE apply as on the cache, at
     * those positions. Nothing is read from or written to a cache:
     * block_size, kv_dtype and kv_layout mean nothing here (kv_dtype
     * is the query dtype), and such a layer never takes write_kv. Needs
     * AH_FEAT_RAGGED_KV. The host makes these specs: a model layer's
     * ragged prefill form (MLA's non-absorbed prefill, qk 192 / v 128,
     * Hq = Hk, over decompressed K/V) is bound beside its paged form and
     * runs on steps whose batch carries cu_seqlens_k. 0 (and a spec too
     * short to hold it): the layer reads the paged cache as usual. Read it
     * through ah_spec_ragged. */
    uint32_t ragged_kv;
    /* ABI 2.3: FP8 scales (see "FP8 scales" below). kv_scales: an
     * ah_kv_scales, how the engine hands over the cache's K and V scales;
     * HOST (0) unless kv_dtype is FP8. use_q_scale: 1 when the engine gives
     * a query scale for FP8 attention (needs fp8_attention = 1). Read them
     * through ah_spec_kv_scales / ah_spec_q_scale (0 for a shorter spec). */
    uint32_t kv_scales;
    uint32_t use_q_scale;
} ah_layer_spec;

/* The layer's KV-cache group: 0 when the spec predates the field. */
static inline uint32_t ah_spec_kv_group(const ah_layer_spec *s)
{
    return s->struct_size >= offsetof(ah_layer_spec, kv_group) + sizeof s->kv_group ? s->kv_group
                                                                                    : 0;
}

/* ABI 2.3: how the layer's FP8 scales come (HOST for a spec too short to
 * say), and whether a query scale comes. */
static inline ah_kv_scales ah_spec_kv_scales(const ah_layer_spec *s)
{
    return s->struct_size >= offsetof(ah_layer_spec, kv_scales) + sizeof s->kv_scales
               ? (ah_kv_scales)s->kv_scales
               : AH_KV_SCALES_HOST;
}
static inline int ah_spec_q_scale(const ah_layer_spec *s)
{
    return s->struct_size >= offsetof(ah_layer_spec, use_q_scale) + sizeof s->use_q_scale &&
           s->use_q_scale;
}

/* ----------------------------------------------------------------------------
 * FP8 scales (ABI 2.3; ABI 2.2 had the per-tensor host floats only).
 *
 * An FP8 cache (kv_dtype FP8_E4M3 / FP8_E5M2, or their fnuz forms) holds
 * stored = real / scale,
 * rounded to nearest-even and saturated to the format's largest finite
 * value, and is read as real = stored * scale. A layer has one scale for
 * its keys and one for its values (per tensor), or one of each per KV head
 * (per head: head h of K is stored and read with k_scale[h]). MLA reads V
 * from the key cache, so its values take the K scale and no V scale.
 * The layer spec's kv_scales says how the engine hands the scales over, and
 * selection keeps plugins that claim the matching feature:
 *   HOST      host floats k_scale, v_scale in ah_forward_args and
 *             ah_kv_write_args, per tensor, 0 meaning 1 (ABI 2.2's form; a
 *             CUDA graph keeps the values it was captured with).
 *   TENSOR    k_scale_tensor, v_scale_tensor: float32 [1] (AH_FEAT_SCALE_TENSORS).
 *   PER_HEAD  the same tensors as float32 [Hk] (AH_FEAT_KV_SCALE_PER_HEAD and
 *             AH_FEAT_SCALE_TENSORS).
 * Scale tensors live where the cache does: on the plugin's device (host
 * memory for a CPU plugin), dense, 4-byte aligned, each value finite and
 * > 0 (no "0 means 1"). A plugin reads their values when its work runs on
 * the stream, never when it enqueues or captures it and never by copying
 * them to the host in forward or write_kv: a CUDA graph then replays with
 * the values the tensors hold at replay. The engine rewrites the values in
 * place between replays; the tensors' addresses stay those of the capture,
 * as every captured tensor's do. Their lifetime is that of the other
 * forward tensors: valid until the work that reads them has completed (for
 * a graph, until its last replay). With TENSOR or PER_HEAD the floats
 * k_scale and v_scale must be 0: giving both forms is refused.
 *
 * Query scale (use_q_scale = 1, AH_FEAT_Q_SCALE; the layer has an FP8
 * cache and fp8_attention = 1): the engine's calibrated scale for the
 * query, q_scale in ah_forward_args (HOST, > 0) or q_scale_tensor (TENSOR
 * and PER_HEAD; float32 [1], as above). A plugin that computes Q.K^T in FP8
 * quantises each query element as q8 = fp8(q / q_scale) in the cache's FP8
 * format (nearest-even, saturating) and multiplies the products by q_scale
 * (with the K scale, the descale of the FP8 GEMM), instead of deriving a
 * scale from the query itself. The result it approximates stays attention
 * of q as given: a plugin that keeps the query in higher precision reads q
 * and ignores q_scale, and so does the reference oracle (the conformance
 * suite allows FP8 attention's tolerance). A query element beyond q_scale
 * times the format's largest finite value (448 for e4m3, 57344 for e5m2)
 * saturates: fitting the query is the calibration's job.
 *
 * The host checks every scale before any plugin runs (unless validation is
 * off): the form against the spec, dtype, shape, device and alignment of
 * the tensors, and the values wherever the host can read them (the floats,
 * and tensors in host memory: kDLCPU, kDLCUDAHost). Values in device memory
 * are not read (that would take a device sync per call and break capture):
 * a non-finite or non-positive value there gives non-finite output.
 * ------------------------------------------------------------------------- */

/* 1 when a query at position p of this layer sees only keys j <= p. */
static inline int ah_spec_causal(const ah_layer_spec *s)
{
    uint32_t c = s->struct_size >= offsetof(ah_layer_spec, causal) + sizeof s->causal
                     ? s->causal
                     : (uint32_t)AH_CAUSAL_BY_TYPE;
    return s->attn_type == AH_ATTN_DECODER && c != AH_CAUSAL_OFF;
}
/* 1 for layers without a KV cache (ENCODER, ENCODER_ONLY). */
static inline int ah_spec_cacheless(const ah_layer_spec *s)
{
    return s->attn_type == AH_ATTN_ENCODER || s->attn_type == AH_ATTN_ENCODER_ONLY;
}
/* ABI 2.3: 1 for a decoder layer over ragged K/V (ah_layer_spec.ragged_kv);
 * 0 when the spec predates the field. */
static inline int ah_spec_ragged(const ah_layer_spec *s)
{
    return s->struct_size >= offsetof(ah_layer_spec, ragged_kv) + sizeof s->ragged_kv &&
           s->ragged_kv && s->attn_type == AH_ATTN_DECODER;
}

/* ----------------------------------------------------------------------------
 * Reasons: why a plugin cannot serve a layer. Every failed check produces one.
 * ------------------------------------------------------------------------- */

typedef enum ah_reason_code {
    AH_REASON_NONE = 0,
    AH_REASON_UNAVAILABLE = 1, /* probe said not usable here */
    AH_REASON_QUARANTINED = 2, /* the scan recorded a crash or garbage */
    AH_REASON_DISABLED = 3,    /* [select] disable */
    AH_REASON_DEVICE = 4,      /* compute capability, gfx target, CPU ISA */
    AH_REASON_DTYPE = 5,
    AH_REASON_KV_DTYPE = 6,
    AH_REASON_HEAD_SIZE = 7,
    AH_REASON_BLOCK_SIZE = 8,
    AH_REASON_ATTN_TYPE = 9,
    AH_REASON_FEATURE = 10, /* MLA, sinks, window, ALiBi, soft-cap, ... */
    AH_REASON_KV_LAYOUT = 11,
    AH_REASON_COMBINATION = 12,      /* from check_combination */
    AH_REASON_LOST_ON_PRIORITY = 13, /* valid, but a higher-priority one won */
    AH_REASON_NOT_FOUND = 14,        /* named in a priority list, not installed */
    AH_REASON_NOT_CHECKED = 15,      /* [select] require_checked: no passing
                                        `attnhost check` on this device */
    AH_REASON_CODE_COUNT
} ah_reason_code;

/* A sink the host hands to check_combination. add() copies its strings. */
typedef struct ah_reason_sink {
    uint32_t struct_size;
    void (*add)(struct ah_reason_sink *sink, ah_reason_code code, const char *field,
                const char *value, const char *supported);
    void *host_data;
} ah_reason_sink;

/* ----------------------------------------------------------------------------
 * Plugin configuration keys ([plugin.<name>] in the INI), declared by the
 * plugin. The host parses and validates every value against this table
 * (an unknown key or a bad value is a configuration error naming file,
 * line, section and key), lists the keys in `attnhost config --dump`, puts
 * the effective values into the scan-cache key, and hands the plugin typed
 * values through ah_host_services.config_int / config_float / config_str.
 * A plugin never parses a string.
 *
 * The table is an array of this fixed layout for the whole of ABI 2.
 * ------------------------------------------------------------------------- */

typedef enum ah_key_type {
    AH_KEY_BOOL = 0,   /* true/false, yes/no, on/off, 1/0; config_int gives 0 or 1 */
    AH_KEY_INT = 1,    /* decimal integer in [int_min, int_max] */
    AH_KEY_FLOAT = 2,  /* decimal number in [float_min, float_max] */
    AH_KEY_ENUM = 3,   /* one of choices; config_int gives its index */
    AH_KEY_STRING = 4, /* any text up to 255 bytes */
    AH_KEY_TYPE_COUNT
} ah_key_type;

typedef struct ah_config_key {
    const char *name; /* [a-z0-9_]+ */
    ah_key_type type;
    const char *default_value;   /* written as in the INI; must itself be valid */
    int64_t int_min, int_max;    /* AH_KEY_INT: inclusive bounds */
    double float_min, float_max; /* AH_KEY_FLOAT: inclusive bounds */
    const char *choices;         /* AH_KEY_ENUM: "auto|on|off" */
    const char *doc;             /* one sentence for --dump and the docs */
} ah_config_key;

/* Table rows in a line each. */
#define AH_KEY_BOOL_ROW(name, def, doc) \
    { \
        name, AH_KEY_BOOL, def, 0, 1, 0, 0, NULL, doc \
    }
#define AH_KEY_INT_ROW(name, def, lo, hi, doc) \
    { \
        name, AH_KEY_INT, def, lo, hi, 0, 0, NULL, doc \
    }
#define AH_KEY_FLOAT_ROW(name, def, lo, hi, doc) \
    { \
        name, AH_KEY_FLOAT, def, 0, 0, lo, hi, NULL, doc \
    }
#define AH_KEY_ENUM_ROW(name, def, choices, doc) \
    { \
        name, AH_KEY_ENUM, def, 0, 0, 0, 0, choices, doc \
    }
#define AH_KEY_STRING_ROW(name, def, doc) \
    { \
        name, AH_KEY_STRING, def, 0, 0, 0, 0, NULL, doc \
    }

/* ----------------------------------------------------------------------------
 * Capability descriptor: static, const, answerable without a device.
 * ------------------------------------------------------------------------- */

typedef struct ah_caps {
    uint32_t struct_size;
    uint32_t q_dtypes;  /* AH_BIT(ah_dtype) mask */
    uint32_t kv_dtypes; /* AH_BIT(ah_dtype) mask of concrete KV dtypes */
    ah_int_set qk_head_sizes;
    ah_int_set v_head_sizes;
    ah_int_set block_sizes; /* a list and/or a multiple-of range. A
                               layer whose cache block is not in it but
                               is a multiple of a member runs on kernel
                               blocks of that member (ABI 2.3, nhd only):
                               the plugin sees only its own block size */
    uint32_t preferred_block_size;
    uint32_t features;   /* ah_feature mask */
    uint32_t attn_types; /* AH_BIT(ah_attn_type) mask */
    uint32_t kv_layouts; /* AH_BIT(ah_kv_layout) mask; an interleaved
                            layout's bit (ABI 2.3) promises that the plugin
                            takes K and V as the two views ah_kv_layout
                            describes (block stride twice a dense one,
                            value view offset from the key view) */
    ah_kv_layout preferred_kv_layout;
    /* Device requirements. */
    uint32_t min_compute_capability; /* CUDA major*10+minor; 0: no bound */
    uint32_t max_compute_capability; /* 0: no bound */
    const char *const *gfx_targets;  /* HIP targets served; NULL: any */
    uint32_t n_gfx_targets;
    uint32_t cpu_isa_required; /* ah_cpu_isa bits that must all be usable */
    /* CUDA graphs. */
    ah_graph_level graph_level;
    int32_t graph_seq_len_fill; /* seq_len the engine writes into padded slots */
    /* Execution properties. */
    uint32_t forward_writes_kv; /* 1: forward stores k/v itself; write_kv unused */
    uint32_t caller_output;     /* 1: writes into the caller's out tensor;
                                   0: see ah_forward_args.out */
    uint32_t max_head_groups;   /* largest num_q_heads/num_kv_heads; 0: any */
    /* Plugin config keys. */
    const ah_config_key *config_keys;
    uint32_t n_config_keys;
    /* (optional) Rules that span several fields. Append a reason for each
     * violated rule via sink->add; adding none means "fine". NULL: no such
     * rules. probe may be NULL when no probe ran. Must not touch a device. */
    void (*check_combination)(const ah_layer_spec *spec, const ah_probe_info *probe,
                              ah_reason_sink *sink);
    /* ABI 2.0. Ranks per phase (ah_rank values; see there). */
    uint32_t prefill_rank;
    uint32_t decode_rank;
    /* Mixed batches (see ah_mixed_batch) and the largest query length the
     * plugin's decode path serves: vLLM's reorder_batch_threshold, k + 1
     * for plugins that verify k speculative tokens as decode. 0 means 1.
     * Bound for decode, the plugin never plans a request longer than this;
     * a request it could take may still go to the prefill winner when
     * another layer's decode winner declares less (see ah_batch, Phases). */
    ah_mixed_batch mixed_batch;
    uint32_t decode_query_len_max;
} ah_caps;

/* ----------------------------------------------------------------------------
 * The batch: vLLM's CommonAttentionMetadata, backend-agnostic. Built once per
 * step by the engine; every bound plugin turns it into its own metadata in
 * plan(). Device tensors are int32 unless noted and live on the plugin's
 * device; the *_host arrays are host copies of the same values, for planning
 * without a device sync (on CPU plugins they may alias the tensors).
 *
 * Request r owns query tokens [query_start_loc[r], query_start_loc[r+1]) and
 * has seq_lens[r] tokens of KV in the cache, the new ones included, so its
 * query token i sits at position seq_lens[r] - query_len[r] + i. For
 * cross-attention seq_lens are the encoder lengths and positions don't matter.
 *
 * Lifetime: the host copies this struct, not the arrays it points to. Every
 * array, device tensor and host copy alike, must stay valid and unchanged
 * until the step's last forward has completed on its stream: plugins read
 * block_table and slot_mapping inside forward and write_kv, and CPU plugins
 * may read the host copies there.
 *
 * Streams: plan, write_kv and forward of one step take the same stream
 * (but a split step's decode part, see Phases below), the engine's (a CUstream / hipStream_t; NULL
 * is that runtime's default stream; CPU plugins ignore it). A plugin enqueues its work there and
 * never waits for it on the host, except where its docs say so.
 *
 * Phases: a batch may mix decode and prefill requests. A plugin bound for
 * decode sees only requests of query length <= its decode_query_len_max
 * (the host takes the smallest over a model's decode winners). When the
 * decode requests come first the host splits the batch and hands each
 * plugin the part it was chosen for: both parts are views into the
 * engine's arrays (same tensors with offset data pointers and shorter
 * shapes; host copies offset likewise), except the prefill part's
 * query_start_loc, rebased to 0 in a host-owned buffer and copied to the
 * device with mem_copy on the step's stream. max_query_len and
 * max_seq_len of a part bound its own requests. Otherwise (decodes not
 * first, plan mode CAPTURE/REPLAY, common_prefix_len set, a winner with
 * caller_output = 0) the prefill winner gets the whole batch. forward then
 * gets token-row views of q, key, value, out and lse for its part. ABI 2.4:
 * when the decode winner's device offers events (ah_plugin_ops.event_create
 * and the rest) and both winners are of the same device kind, the decode
 * part's write_kv and forward run on a stream the host created on that
 * device, after an event recorded on the engine's stream at the layer's
 * forward, and the engine's stream waits for them (a second event) before
 * its later work: the two parts attend at the same time, each plugin still
 * sees plan and forward of one part in stream order.
 * ------------------------------------------------------------------------- */

/* ABI 2.1. One KV-cache group's paging of a step (vLLM's per-group
 * BlockTable in a hybrid KV-cache manager): the group's own block table,
 * slot mapping and cache size, for requests and tokens in the batch's order.
 * A group's layers share block size, KV dtype and layout, so one table
 * serves them all; groups differ in block size, in what they hold, and in
 * which blocks are still allocated.
 *
 * Released blocks. An entry block_table[r][k] < 0 says the engine released
 * that block (a sliding-window group frees the blocks its window no longer
 * sees, as vLLM's SlidingWindowManager does). The host accepts it only
 * where every layer of the group has a sliding window W that hides the
 * whole block from every query token of request r: with the request's
 * first query at position p0 = seq_lens[r] - query_len_r, the block's last
 * position (k + 1) * block_size - 1 must be <= p0 - W. Every other entry a
 * request's seq_len covers must lie inside the group's cache. Such a batch
 * is planned only on plugins that claim AH_FEAT_RELEASED_BLOCKS; they never
 * read a released entry (they read no key the window hides). Padded
 * requests and cross layers never have released entries.
 *
 * Lifetime: as the batch's own arrays (see ah_batch): the entry array and
 * everything it points to stay valid and unchanged until the step's last
 * forward has completed on its stream. */
#define AH_MAX_KV_GROUPS 64 /* kv_group values are 0 .. AH_MAX_KV_GROUPS - 1 */

typedef struct ah_kv_group {
    uint32_t struct_size;
    uint32_t num_blocks;             /* blocks in this group's KV cache (its
                                        layers' cache tensors' dim 0) */
    const DLTensor *block_table;     /* [num_reqs, >= blocks per request] int32,
                                        in the group's block size */
    const DLTensor *slot_mapping;    /* [num_tokens] int64: block * block_size
                                        + offset in this group's cache;
                                        negative: padding, not written */
    const int32_t *block_table_host; /* row-major, block_table_stride per row */
    const int64_t *slot_mapping_host;
    uint32_t block_table_stride; /* elements per row in block_table_host */
} ah_kv_group;

typedef struct ah_batch {
    uint32_t struct_size;
    uint32_t num_reqs;
    uint32_t num_tokens; /* query_start_loc[num_reqs] */
    uint32_t max_query_len;
    uint32_t max_seq_len;
    uint32_t num_blocks;             /* blocks in the KV cache, for bounds checks */
    const DLTensor *query_start_loc; /* [num_reqs + 1] */
    const DLTensor *seq_lens;        /* [num_reqs] */
    const DLTensor *block_table;     /* [num_reqs, >= max blocks per request] */
    const DLTensor *slot_mapping;    /* [num_tokens] int64: block * block_size + offset;
                                        negative: padding, not written */
    const int32_t *query_start_loc_host;
    const int32_t *seq_lens_host;
    const int32_t *block_table_host; /* row-major, block_table_stride per row */
    const int64_t *slot_mapping_host;
    uint32_t block_table_stride; /* elements per row in block_table_host */
    uint32_t common_prefix_len;  /* tokens every request shares (cascade), 0: none */

    /* ABI 2.1. Encoder lengths for cross layers (ENCODER_DECODER): request
     * r's cross keys are the encoder_seq_lens[r] tokens at positions 0 ..
     * encoder_seq_lens[r] - 1 of its block-table row, in each cross layer's
     * own cache tensors (so block_table row r must cover
     * max(seq_lens[r], encoder_seq_lens[r]) tokens; max_seq_len bounds
     * both). 0: the request has no encoder input (its cross rows are 0,
     * lse -inf). Required (tensor and host copy, [num_reqs] int32) when a
     * bound layer is a cross layer, ignored otherwise; seq_lens keep the
     * decoder's lengths, so one plan serves self and cross layers. */
    const DLTensor *encoder_seq_lens;
    const int32_t *encoder_seq_lens_host;

    /* ABI 2.1. Tree mask (speculative verification), SGLang's layout:
     * for request r a row-major [query_len_r x seq_len_r] block of bytes
     * starting at element mask_indptr[r] of custom_mask; byte (i, j) != 0:
     * query token i may see key position j. It covers the whole row (the
     * prefix and the draft tokens) and is applied on top of the layer's own
     * rule: a key is visible when causality (and a window) allow it AND
     * the mask byte is set. Decoder layers only; cross and cacheless layers
     * ignore it. custom_mask NULL (host copy NULL): no mask.
     * Bytes, not bits: the engines' tensors are torch.bool (a byte each),
     * every request's block starts at any element without bit offsets, and
     * a split part is a plain view; a plugin that wants bits packs them in
     * plan (FlashInfer's packbits). mask_indptr is int64 ([num_reqs + 1],
     * mask_indptr[r + 1] - mask_indptr[r] = query_len_r * seq_len_r, so
     * monotonic; a sum of [q x seq] blocks passes 2^31 at long contexts);
     * its first entry need not be 0 (a split part's view keeps the whole
     * batch's offsets). custom_mask_len: elements in custom_mask, which
     * must hold mask_indptr[num_reqs]. A batch with a mask is planned only
     * on plugins claiming AH_FEAT_TREE_MASK (see ah_binding_plan). */
    const DLTensor *custom_mask; /* [custom_mask_len] uint8 */
    const DLTensor *mask_indptr; /* [num_reqs + 1] int64 */
    const uint8_t *custom_mask_host;
    const int64_t *mask_indptr_host;
    uint64_t custom_mask_len;

    /* ABI 2.1. KV-cache groups (see ah_kv_group and ah_layer_spec.kv_group).
     * num_kv_groups 0 (or a struct_size that does not cover these fields):
     * one group, group 0, whose paging is this batch's own block_table,
     * slot_mapping, host copies, block_table_stride and num_blocks, so a
     * one-group model is unchanged. Otherwise num_kv_groups is the model's
     * number of groups (ah_model_num_kv_groups; any other count is refused)
     * and kv_groups[g] is group g's paging for g in 0 .. num_kv_groups - 1;
     * an entry whose block_table_host is NULL stands for this batch's own
     * fields (so an engine may keep group 0 where it always was). Each
     * group is checked against its own num_blocks; limits.num_blocks and
     * limits.max_blocks_per_req bound every group. Plugins never read these
     * fields: the host plans each state on a batch whose paging fields are
     * its layer's group's and whose num_kv_groups is 0. */
    uint32_t num_kv_groups;
    const ah_kv_group *kv_groups;

    /* ABI 2.2. Context parallelism (ah_binding_options.cp): seq_lens are
     * the requests' global lengths, block_table and slot_mapping this
     * rank's shard, and cp_local_seq_lens (tensor and host copy,
     * [num_reqs] int32; optional) this rank's share of each request's
     * keys, ah_cp_local_len(seq_lens[r]). Given, they are checked against
     * that and the device tensor is used as it is; NULL: the host computes
     * them. Plugins never read these fields: they see a batch whose
     * seq_lens are the local lengths. */
    const DLTensor *cp_local_seq_lens;
    const int32_t *cp_local_seq_lens_host;

    /* ABI 2.3: ragged K/V. Key offsets of a ragged step ([num_reqs + 1]
     * int32, tensor and host copy, cu_seqlens_k[0] = 0, monotonic, ending
     * at num_k_tokens): request r's keys and values are rows
     * [cu_seqlens_k[r], cu_seqlens_k[r+1]) of forward's key and value, k_len
     * = the difference, beside query_start_loc for the queries, which
     * ragged_keys places after them (see ah_ragged_keys, which says what
     * k_len a real request needs); a padded one (query_len 0) has k_len 0.
     * max_seq_len bounds every k_len too. NULL (or a struct_size that does
     * not cover them): no ragged keys. Set, the step is a ragged step: each
     * layer with a ragged prefill form runs that form (ah_layer_spec.
     * ragged_kv) on the whole batch, the others their prefill winner as
     * usual; the paging fields still describe the paged cache, which
     * write_kv fills (MLA's latent, for the decode steps that follow).
     * Plugins see these fields and ragged_keys only in a ragged form's
     * plan: every other state's batch has them zero. */
    const DLTensor *cu_seqlens_k;
    const int32_t *cu_seqlens_k_host;
    uint32_t num_k_tokens; /* Tk: cu_seqlens_k[num_reqs], the key tensor's rows */
    /* ABI 2.3: ragged K/V. An ah_ragged_keys: where a ragged step's queries
     * sit after its keys (read it through ah_batch_ragged_keys). */
    uint32_t ragged_keys;
} ah_batch;

/* The 2.1 fields of a batch, NULL when its struct_size does not cover them. */
static inline const int32_t *ah_batch_encoder_seq_lens(const ah_batch *b)
{
    return b->struct_size >= offsetof(ah_batch, encoder_seq_lens_host) + sizeof(void *)
               ? b->encoder_seq_lens_host
               : NULL;
}
static inline const uint8_t *ah_batch_custom_mask(const ah_batch *b)
{
    return b->struct_size >= offsetof(ah_batch, custom_mask_len) + sizeof(uint64_t)
               ? b->custom_mask_host
               : NULL;
}
static inline const int32_t *ah_batch_cp_local_seq_lens(const ah_batch *b)
{
    return b->struct_size >= offsetof(ah_batch, cp_local_seq_lens_host) + sizeof(void *)
               ? b->cp_local_seq_lens_host
               : NULL;
}
/* ABI 2.3: the batch's cu_seqlens_k host copy, NULL when its struct_size
 * does not cover num_k_tokens. */
static inline const int32_t *ah_batch_cu_seqlens_k(const ah_batch *b)
{
    return b->struct_size >= offsetof(ah_batch, num_k_tokens) + sizeof(uint32_t)
               ? b->cu_seqlens_k_host
               : NULL;
}
/* ABI 2.3: where a ragged step's keys lie relative to its queries
 * (ah_batch.ragged_keys). With k_len keys at positions 0 .. k_len - 1 and
 * q_len queries:
 *   BOTTOM_RIGHT  query i at k_len - q_len + i: the keys are the request's
 *                 sequence up to its last query (context, then the new
 *                 tokens), so a causal query sees keys 0 .. k_len - q_len
 *                 + i. A real request has k_len >= 1, and k_len >= q_len
 *                 on a causal layer.
 *   CONTEXT       query i at k_len + i: the keys are cached context that
 *                 precedes every query (vLLM's MLA context chunk), so every
 *                 key is visible, causal or not; a real request may have
 *                 k_len 0 (no context in this chunk: output 0, lse -inf,
 *                 which merge_states treats as empty). A window, and
 *                 ALiBi's distance, see these positions, so they hold for
 *                 a chunk that ends right before the queries (the whole
 *                 context, or its last chunk); chunks further back are
 *                 exact only on layers without them. With sinks, every
 *                 partial result counts the sink: an engine that merges
 *                 parts passes sinks of -inf to all but one of them. */
typedef enum ah_ragged_keys {
    AH_RAGGED_KEYS_BOTTOM_RIGHT = 0,
    AH_RAGGED_KEYS_CONTEXT = 1,
    AH_RAGGED_KEYS_COUNT
} ah_ragged_keys;
/* The batch's ragged_keys: BOTTOM_RIGHT when its struct_size does not
 * cover the field. */
static inline uint32_t ah_batch_ragged_keys(const ah_batch *b)
{
    return b->struct_size >= offsetof(ah_batch, ragged_keys) + sizeof(uint32_t)
               ? b->ragged_keys
               : (uint32_t)AH_RAGGED_KEYS_BOTTOM_RIGHT;
}
/* The batch's KV-cache group count as the host reads it: 0 when its
 * struct_size does not cover kv_groups. */
static inline uint32_t ah_batch_num_kv_groups(const ah_batch *b)
{
    return b->struct_size >= offsetof(ah_batch, kv_groups) + sizeof(void *) ? b->num_kv_groups : 0;
}

/* Sizes a state must accommodate: the engine's maxima, fixed at state
 * creation so that CUDA-graph replay never reallocates. */
typedef struct ah_limits {
    uint32_t struct_size;
    uint32_t max_num_reqs;
    uint32_t max_num_tokens;
    uint32_t max_blocks_per_req;
    uint32_t max_seq_len;
    uint32_t num_blocks; /* blocks in the KV cache */
} ah_limits;

/* plan() modes. */
typedef enum ah_plan_mode {
    AH_PLAN_EAGER = 0,   /* plan for an immediate forward */
    AH_PLAN_CAPTURE = 1, /* plan whose buffers a CUDA graph will capture */
    AH_PLAN_REPLAY = 2   /* rewrite the captured buffers in place, nothing else:
                            no allocation, no new launch configuration */
} ah_plan_mode;

/* Arguments of forward(). Shapes (T = num_tokens, Hq/Hk heads):
 *   q     [T, Hq, qk_head]      key/value new tokens [T, Hk, qk_head] / [T, Hk, v_head]
 *   out   [T, Hq, v_head] in q_dtype
 *   lse   [T, Hq] float32, natural log; NULL: not wanted
 *   key_cache/value_cache: one tensor each in the layer's kv_layout; for MLA
 *   value_cache is NULL and V is key_cache[..., :v_head].
 *   sinks, alibi_slopes: [Hq] float32, when the spec asks for them.
 * Cacheless layers (ENCODER, ENCODER_ONLY): key and value are required and
 * are the keys (packed by query_start_loc), key_cache/value_cache are
 * ignored (may be NULL). Cross layers: key and value must be NULL.
 * Ragged layers (ABI 2.3, ah_layer_spec.ragged_kv): key [Tk, Hk, qk_head]
 * and value [Tk, Hk, v_head] are required and are the keys, packed by the
 * batch's cu_seqlens_k (Tk = num_k_tokens); nothing is written, and
 * key_cache/value_cache are ignored (may be NULL). */
typedef struct ah_forward_args {
    uint32_t struct_size;
    const DLTensor *q;
    const DLTensor *key; /* new keys: used only when forward_writes_kv */
    const DLTensor *value;
    const DLTensor *key_cache;
    const DLTensor *value_cache;
    DLTensor *out; /* caller_output=1: write into out's buffer.
                      caller_output=0: the plugin fills this
                      descriptor (data, shape, strides, dtype,
                      device) with a buffer its state owns. It
                      is valid until the next forward on the
                      same state, and the host gives layers with
                      equal specs one state, so the engine sees
                      it overwritten by the next forward on any
                      layer sharing the state */
    DLTensor *lse;
    const DLTensor *sinks;
    const DLTensor *alibi_slopes;
    float k_scale; /* FP8 KV: stored = real / scale; 0 means 1 */
    float v_scale;
    void *stream; /* CUstream / hipStream_t / NULL */
    /* ABI 2.3: FP8 scales (see "FP8 scales" below ah_layer_spec). The host
     * hands plugins args whose struct_size covers these fields (zero for an
     * older engine's call). k_scale_tensor, v_scale_tensor: float32 [1]
     * (kv_scales TENSOR) or [Hk] (PER_HEAD), NULL otherwise; v_scale_tensor
     * is not read for MLA. q_scale (HOST) or q_scale_tensor (float32 [1],
     * TENSOR and PER_HEAD): the query scale of a layer with use_q_scale,
     * 0 / NULL otherwise. */
    const DLTensor *k_scale_tensor;
    const DLTensor *v_scale_tensor;
    float q_scale;
    const DLTensor *q_scale_tensor;
} ah_forward_args;

/* Arguments of write_kv(): store the new tokens' K and V at slot_mapping
 * of the last planned batch, converting (and scaling) to the KV dtype. */
typedef struct ah_kv_write_args {
    uint32_t struct_size;
    const DLTensor *key;   /* [T, Hk, qk_head] */
    const DLTensor *value; /* [T, Hk, v_head]; NULL for MLA */
    const DLTensor *key_cache;
    const DLTensor *value_cache;
    float k_scale, v_scale;
    void *stream;
    /* ABI 2.3: FP8 scales, as in ah_forward_args (the host hands plugins
     * args whose struct_size covers them). */
    const DLTensor *k_scale_tensor;
    const DLTensor *v_scale_tensor;
} ah_kv_write_args;

/* merge_states(): combine two partial attention results over disjoint key
 * sets by their log-sum-exp: out = (e^la * a + e^lb * b) / (e^la + e^lb),
 * lse_out = log(e^la + e^lb). v_*: [T, H, D] (q dtype), lse_*: [T, H] float32.
 * lse_out may be NULL. out may alias v_a. */
typedef struct ah_merge_args {
    uint32_t struct_size;
    const DLTensor *v_a, *lse_a;
    const DLTensor *v_b, *lse_b;
    DLTensor *out;
    DLTensor *lse_out;
    void *stream;
} ah_merge_args;

/* What context_create opens. */
typedef struct ah_context_options {
    uint32_t struct_size;
    int32_t device_index; /* among the devices of the plugin's kind, as its
                             runtime numbers them (CUDA_VISIBLE_DEVICES
                             applies); CPU plugins: always 0 */
} ah_context_options;

/* Opaque handles. The host never looks inside. */
typedef struct ah_context ah_context; /* one per plugin and device index per host */
typedef struct ah_state ah_state;     /* one per bound layer spec: plans, buffers */
typedef struct ah_graph ah_graph;     /* a captured, replayable graph */
typedef struct ah_event ah_event;     /* ABI 2.4: a point in a stream's work */

/* ----------------------------------------------------------------------------
 * The operations table.
 * ------------------------------------------------------------------------- */

typedef enum ah_copy_kind {
    AH_COPY_HOST_TO_DEVICE = 0,
    AH_COPY_DEVICE_TO_HOST = 1,
    AH_COPY_DEVICE_TO_DEVICE = 2
} ah_copy_kind;

typedef struct ah_plugin_ops {
    uint32_t struct_size;

    /* Is the device usable here? Fill *info (see ah_probe_info). Runs in the
     * scanner's child process and again before binding. Must not crash when
     * the device or its driver library is absent: say why in info->reason. */
    ah_status (*probe)(const ah_host_services *host, ah_probe_info *info);

    /* Open the device opts->device_index. *out is the plugin's; on failure
     * *out is NULL and *why (static or host-lifetime text) says why (an
     * index past the plugin's devices is AH_ERR_UNAVAILABLE). The host opens
     * one context per plugin and device index. */
    ah_status (*context_create)(const ah_host_services *host, const ah_context_options *opts,
                                ah_context **out, const char **why);
    void (*context_destroy)(ah_context *ctx);
    /* The last error on ctx, never NULL (may be ""). Valid until the next
     * call on ctx. */
    const char *(*context_error)(const ah_context *ctx);

    /* A state for one layer spec, sized for lim. On failure *out is NULL and
     * the detail is in context_error(ctx). */
    ah_status (*state_create)(ah_context *ctx, const ah_layer_spec *spec, const ah_limits *lim,
                              ah_state **out);
    void (*state_destroy)(ah_state *st);
    const char *(*state_error)(const ah_state *st);

    /* Turn the engine's batch into this backend's metadata. The batch has
     * been validated by the host unless validation is switched off. */
    ah_status (*plan)(ah_state *st, const ah_batch *batch, ah_plan_mode mode, void *stream);

    /* Attention for every query token of the last planned batch. */
    ah_status (*forward)(ah_state *st, const ah_forward_args *args);

    /* (optional) Store new K/V into the cache. NULL: forward_writes_kv must
     * be 1, else the host rejects the plugin. */
    ah_status (*write_kv)(ah_state *st, const ah_kv_write_args *args);

    /* (optional) LSE merge of partial results. NULL: not offered. */
    ah_status (*merge_states)(ah_context *ctx, const ah_merge_args *args);

    /* (optional) Device workspace the state will hold, in bytes, for the
     * given spec and limits. NULL: none, or not reported. */
    ah_status (*workspace_size)(const ah_layer_spec *spec, const ah_limits *lim, uint64_t *bytes);

    /* Device memory and streams, so the host's conformance suite, bench and
     * run drive any device through one interface. (optional) all together:
     * NULL on a CPU plugin means host memory (the host uses its allocator and
     * memcpy). */
    ah_status (*mem_alloc)(ah_context *ctx, size_t bytes, void **ptr);
    void (*mem_free)(ah_context *ctx, void *ptr);
    /* mem_copy runs in stream order. Host to device: src may be reused as
     * soon as it returns (the copy itself may still be queued, so the
     * host never waits for the stream's earlier work); device to host: dst
     * holds the data when it returns. */
    ah_status (*mem_copy)(ah_context *ctx, void *dst, const void *src, size_t bytes,
                          ah_copy_kind kind, void *stream);
    ah_status (*synchronize)(ah_context *ctx, void *stream);
    ah_status (*stream_create)(ah_context *ctx, void **stream);
    void (*stream_destroy)(ah_context *ctx, void *stream);
    /* (optional) Device timer: elapsed milliseconds of what runs on stream
     * between timer_start and timer_stop (events). NULL: host wall clock
     * after synchronize. */
    ah_status (*timer_start)(ah_context *ctx, void *stream);
    ah_status (*timer_stop)(ah_context *ctx, void *stream, float *ms);

    /* (optional, required when graph_level > NEVER) Stream capture into a
     * replayable graph. */
    ah_status (*graph_begin)(ah_context *ctx, void *stream);
    ah_status (*graph_end)(ah_context *ctx, void *stream, ah_graph **out);
    ah_status (*graph_launch)(ah_context *ctx, ah_graph *g, void *stream);
    void (*graph_destroy)(ah_context *ctx, ah_graph *g);

    /* ABI 2.4 (optional, all four together; with stream_create). Events
     * order the work of two streams of the device: event_record marks
     * what `stream` has queued so far, stream_wait makes later work on
     * `stream` wait for the last record of `e` made before the call,
     * without the host waiting. The host runs a split step's decode part
     * on a stream of its own beside the engine's, so a decode winner and
     * a prefill winner on one device attend at the same time (see
     * "Phases" above ah_kv_group). */
    ah_status (*event_create)(ah_context *ctx, ah_event **out);
    void (*event_destroy)(ah_context *ctx, ah_event *e);
    ah_status (*event_record)(ah_context *ctx, ah_event *e, void *stream);
    ah_status (*stream_wait)(ah_context *ctx, void *stream, ah_event *e);
} ah_plugin_ops;

/* ----------------------------------------------------------------------------
 * The descriptor and the entry point.
 * ------------------------------------------------------------------------- */

typedef struct ah_plugin_descriptor {
    uint32_t struct_size;
    uint32_t abi_version; /* AH_ABI_VERSION the plugin was built against */
    const char *name;     /* [a-z0-9_]+, unique; names its [plugin.<name>] */
    const char *version;
    const char *vendor;
    const char *license;
    const char *description;
    ah_device_kind device_kind;
    const ah_caps *caps;
    const ah_plugin_ops *ops;
} ah_plugin_descriptor;

#define AH_PLUGIN_ENTRY_SYMBOL "attnhost_plugin_entry"

/* The one exported symbol. host_abi_version is the host's AH_ABI_VERSION.
 * Returns the plugin's static descriptor, or NULL with *why set to a static
 * string when it cannot serve this host (a different ABI major, say). */
typedef const ah_plugin_descriptor *(*ah_plugin_entry_fn)(uint32_t host_abi_version,
                                                          const ah_host_services *host,
                                                          const char **why);

/* Define a plugin in a few lines:
 *
 *   static const ah_caps my_caps = { sizeof(ah_caps), ... };
 *   static const ah_plugin_ops my_ops = { sizeof(ah_plugin_ops), ... };
 *   AH_PLUGIN_DEFINE(my_backend, "1.0", "Acme", "MIT", "Acme attention",
 *                    AH_DEVICE_CPU, &my_caps, &my_ops)
 *
 * The entry refuses a host of another ABI major and remembers the host's
 * services in ah_plugin_host (static to the plugin). */
#define AH_PLUGIN_DEFINE(NAME, VERSION, VENDOR, LICENSE, DESCRIPTION, DEVICE, CAPS, OPS) \
    static const ah_host_services *ah_plugin_host; \
    static const ah_plugin_descriptor ah_plugin_descriptor_##NAME = {sizeof(ah_plugin_descriptor), \
                                                                     AH_ABI_VERSION, \
                                                                     #NAME, \
                                                                     VERSION, \
                                                                     VENDOR, \
                                                                     LICENSE, \
                                                                     DESCRIPTION, \
                                                                     DEVICE, \
                                                                     CAPS, \
                                                                     OPS}; \
    AH_EXPORT const ah_plugin_descriptor *attnhost_plugin_entry( \
        uint32_t host_abi_version, const ah_host_services *host, const char **why); \
    AH_EXPORT const ah_plugin_descriptor *attnhost_plugin_entry( \
        uint32_t host_abi_version, const ah_host_services *host, const char **why) \
    { \
        if (AH_ABI_MAJOR(host_abi_version) != AH_ABI_VERSION_MAJOR) { \
            if (why) \
                *why = "plugin " #NAME \
                       " needs attnhost ABI major " AH_PLUGIN_STR(AH_ABI_VERSION_MAJOR); \
            return NULL; \
        } \
        ah_plugin_host = host; \
        return &ah_plugin_descriptor_##NAME; \
    }
#define AH_PLUGIN_STR_(x) #x
#define AH_PLUGIN_STR(x) AH_PLUGIN_STR_(x)

#ifdef __cplusplus
}
#endif

#endif /* ATTNHOST_PLUGIN_H */
