/*
 * libattnhost: the public API an inference engine links.
 *
 * The life of an engine:
 *
 *   ah_host_create()        scan the plugin directories (crash-isolated, cached)
 *   ah_model_load()         describe the model's attention layers (INI)
 *   ah_host_select()        pick a backend per layer and phase, with reasons
 *   ah_binding_create()     open the winners' devices, size their states
 *   per step:
 *     ah_binding_plan()     validate the batch once, plan every bound state
 *     ah_binding_forward()  per layer: store new K/V, run attention
 *
 * Errors: fallible calls return ah_status. Calls on a handle leave the detail
 * in that handle's errmsg; constructors write it into an ah_error the caller
 * provides, and leave *out NULL, so a failed create leaves nothing to destroy.
 *
 * Thread safety: an ah_host may be used from many threads at once (select,
 * binding_create, plugin queries). An ah_selection is immutable once made and
 * may be read from any thread. An ah_binding is used by one thread at a time
 * (an engine worker's); different bindings on one host run concurrently.
 * ah_model is immutable after load.
 *
 * Per function, in the notes beside each declaration ("Thread safety: ..."):
 *  - "any thread": no restriction, including concurrent calls on the same
 *    object (pure functions, static text, immutable objects, the host's
 *    internally locked paths).
 *  - "owner thread": one call at a time on that object; calls on different
 *    objects of the same host may run concurrently.
 *  - destroy functions: no other call on the object may be in flight, and
 *    what depends on it must be gone first: bindings before their selection
 *    and host, selections before their host.
 * tests/unit/test_stress_threads.c checks this contract under
 * ThreadSanitizer (docs/reliability.md).
 */
#ifndef ATTNHOST_H
#define ATTNHOST_H

#include <stddef.h>
#include <stdint.h>

#include <attnhost/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AH_VERSION_STRING "0.2.0"

typedef struct ah_host ah_host;
typedef struct ah_model ah_model;
typedef struct ah_selection ah_selection;
typedef struct ah_binding ah_binding;
typedef struct ah_device ah_device;

/* Detail for a failed constructor. */
typedef struct ah_error {
    char msg[1024];
} ah_error;

/* The library's version ("0.2.0") and the plugin ABI it speaks
 * (AH_ABI_VERSION: major << 16 | minor), so a binding loaded with dlopen
 * can check it matches the headers it was built from.
 * Thread safety: any thread. */
const char *ah_version(void);
uint32_t ah_abi_version(void);

/* Static text for a status ("invalid argument", ...). Never NULL.
 * Thread safety: any thread (as are all the *_str functions). */
const char *ah_status_str(ah_status s);

/* ---------------------------------------------------------------------------
 * Host
 * ------------------------------------------------------------------------ */

typedef enum ah_scan_mode {
    AH_SCAN_DEFAULT = 0,   /* what the config says; child process if it says nothing */
    AH_SCAN_CHILD = 1,     /* probe new plugins in a child process with a time limit
                              (the spawned attnhost-plugin-scanner) */
    AH_SCAN_IN_PROCESS = 2 /* no child: for environments that cannot start one */
} ah_scan_mode;

typedef struct ah_host_options {
    uint32_t struct_size;
    const char *config_path;        /* INI file; NULL: config_text, or built-in defaults */
    const char *config_text;        /* INI text used when config_path is NULL */
    const char *const *plugin_dirs; /* searched before [search] paths; may be NULL */
    uint32_t n_plugin_dirs;
    int no_default_dirs; /* 1: skip the install dir and $ATTNHOST_PLUGIN_PATH */
    ah_scan_mode scan_mode;
    const char *cache_path;     /* NULL: [search] cache or the default; "": no cache */
    int ignore_require_checked; /* 1: [select] require_checked does not apply to this
                                   host (`attnhost check`, which earns the records,
                                   runs plugins not checked yet) */
} ah_host_options;

/* Create a host: load the configuration, gather hardware facts, scan the
 * plugin directories. A plugin that fails to scan does not fail the host: it
 * is listed with its cause. Fails only on a bad configuration or no memory.
 * Thread safety: any thread; hosts are independent of each other. The
 * child-process scan spawns a fresh scanner process, so a GPU runtime this
 * process initialised does not matter; only where the scanner is missing
 * does it fork, and then other threads must not hold locks a plugin's probe
 * needs (glibc resets its own in the child). */
ah_status ah_host_create(const ah_host_options *opts, ah_host **out, ah_error *err);
/* Thread safety: destroy function (see the top): every binding and
 * selection made from host is destroyed first. */
void ah_host_destroy(ah_host *host);

/* The last error on host, never NULL. Calls that fail report through their
 * ah_error or their binding, so this stays "" today. Thread safety: any
 * thread. */
const char *ah_host_errmsg(const ah_host *host);

/* Thread safety: any thread (fixed at creation), as are the plugin queries
 * below, ah_host_config_dump and ah_host_config_warnings. */
const ah_hw_facts *ah_host_hw_facts(const ah_host *host);

typedef enum ah_plugin_state {
    AH_PLUGIN_AVAILABLE = 0,   /* accepted, probe says usable */
    AH_PLUGIN_UNAVAILABLE = 1, /* accepted, probe says no device here */
    AH_PLUGIN_REJECTED = 2,    /* ABI mismatch, NULL required slot, nonsense caps */
    AH_PLUGIN_QUARANTINED = 3, /* crashed, hung, aborted, failed dlopen, garbage */
    AH_PLUGIN_STATE_COUNT
} ah_plugin_state;

const char *ah_plugin_state_str(ah_plugin_state s);

/* What the host knows of one plugin file. All pointers are host-owned and
 * live as long as the host. caps and probe are NULL for rejected and
 * quarantined plugins. */
typedef struct ah_plugin_info {
    uint32_t struct_size;
    const char *name; /* from the descriptor, or the file stem */
    const char *path;
    const char *version, *vendor, *license, *description;
    ah_device_kind device_kind;
    ah_plugin_state state;
    const char *reason;  /* why not available; "" when available */
    const ah_caps *caps; /* check_combination is NULL in this copy */
    const ah_probe_info *probe;
    int has_check_combination;
    int from_cache; /* 1: the scan result came from the cache */
    double scan_ms; /* cost of the scan that produced this result */
} ah_plugin_info;

size_t ah_host_plugin_count(const ah_host *host);
const ah_plugin_info *ah_host_plugin(const ah_host *host, size_t index);
/* NULL when no plugin has that name. */
const ah_plugin_info *ah_host_find_plugin(const ah_host *host, const char *name);

/* The config key table rendered as an INI with every key, its default and
 * its documentation; *text is malloc'ed, the caller frees it. With
 * effective=1 the values in force replace the defaults. With a host (it
 * may be NULL when effective=0) every accepted plugin's [plugin.<name>]
 * section follows, from the keys it declares: doc, type and range or
 * choices, default, and '#key = default'; with effective=1 only the values,
 * 'key = value' where the configuration sets it and '#key = default' where
 * not. Either dump reads back as the same configuration. */
ah_status ah_host_config_dump(const ah_host *host, int effective, char **text);

/* The reference of every accepted plugin's keys in Markdown, a block per
 * plugin (by name) between <!-- plugin-keys:NAME --> and
 * <!-- /plugin-keys:NAME -->, as docs/configuration.md embeds it. *text is
 * malloc'ed. */
ah_status ah_host_plugin_keys_markdown(const ah_host *host, char **text);

/* The value in force of key in [plugin.<plugin>]: the configuration's text
 * when it sets the key, else the declared default; host-owned. NULL when
 * the plugin was not accepted or does not declare key. *is_default (may be
 * NULL) is 1 when the value means the same as the default ("on" for a
 * default "true" does). */
const char *ah_host_plugin_key_value(const ah_host *host, const char *plugin, const char *key,
                                     int *is_default);

/* Warnings the configuration produced (unknown plugin keys, ...), one per
 * line; "" when none. */
const char *ah_host_config_warnings(const ah_host *host);

/* ---------------------------------------------------------------------------
 * Model descriptions
 * ------------------------------------------------------------------------ */

/* Load a model description (INI, see README "Model descriptions").
 * Thread safety: any thread for load and parse; a model is immutable, so the
 * accessors below are any-thread too. ah_model_destroy is a destroy
 * function; selections do not keep pointers into the model (they copy the
 * specs), so a model may go once the selections are made. */
ah_status ah_model_load(const char *path, ah_model **out, ah_error *err);
/* The same from text; source names the text in error messages. */
ah_status ah_model_parse(const char *text, const char *source, ah_model **out, ah_error *err);
void ah_model_destroy(ah_model *model);

const char *ah_model_name(const ah_model *model);
uint32_t ah_model_num_layers(const ah_model *model);
/* ABI 2.3: KV-cache layout. A layer's block_size as the model describes
 * `block_size = auto` (ah_model_layer, ah_model_desc): selection resolves
 * it to the preferred size of the layer's prefill winner, one size per
 * KV-cache group (see ah_selection_kv_group_block_size). UINT32_MAX, so
 * that 0 keeps meaning 16 for ah_model_desc callers of ABI 2.2. */
#define AH_BLOCK_SIZE_AUTO UINT32_MAX

/* The layer's spec as described: kv_dtype and kv_layout may be AUTO here,
 * block_size AH_BLOCK_SIZE_AUTO. */
const ah_layer_spec *ah_model_layer(const ah_model *model, uint32_t layer);
/* ABI 2.3: ragged K/V. The layer's ragged prefill form (model key
 * ragged_prefill): the spec, with ragged_kv = 1, that the layer runs on a
 * ragged step (a batch with cu_seqlens_k), such as MLA's non-absorbed
 * prefill over decompressed K/V (DeepSeek V3: qk 192 / v 128, 128 KV heads
 * at TP 1) beside the absorbed paged form (576 / 512, one KV head) that
 * decodes. NULL for a layer without one (or out of range). */
const ah_layer_spec *ah_model_layer_ragged(const ah_model *model, uint32_t layer);
/* The model's KV-cache groups (ABI 2.1; ah_layer_spec.kv_group): 1 + the
 * largest kv_group of a layer with a KV cache, 1 for a model without
 * groups. An engine passes this many entries in ah_batch.kv_groups, or
 * none when it is 1. */
uint32_t ah_model_num_kv_groups(const ah_model *model);

/* The built-in demo model: global, sliding-window and MLA layers. */
const char *ah_demo_model_text(void);

/* ---------------------------------------------------------------------------
 * Selection: which plugin serves each layer, and why
 * ------------------------------------------------------------------------ */


typedef struct ah_reason {
    ah_reason_code code;
    const char *field;     /* "head_size", "kv_dtype", ... */
    const char *value;     /* the offending value */
    const char *supported; /* what the plugin supports */
} ah_reason;

typedef struct ah_candidate {
    const char *plugin;
    uint32_t n_reasons; /* 0: chosen; a valid candidate behind the winner
                           has one reason, AH_REASON_LOST_ON_PRIORITY */
    const ah_reason *reasons;
    int chosen;
} ah_candidate;

typedef struct ah_decision {
    const char *plugin;      /* the winner; NULL when none could serve */
    const char *list_source; /* where the priority list came from */
    uint32_t n_candidates;
    const ah_candidate *candidates;
    ah_layer_spec spec; /* resolved: kv_dtype, kv_layout, scale filled */
    int fallback;       /* 1: no listed candidate fit, another was taken */
    /* ABI 2.3: KV-cache layout. 0: the plugin runs on the cache's blocks
     * (spec.block_size). Else the plugin lacks spec.block_size and runs on
     * kernel blocks of this size, which divides it: the host plans it with
     * a block table in kernel blocks and views of the caches in them (see
     * ah_binding_plan). Only for the nhd layout. */
    uint32_t kernel_block_size;
} ah_decision;

/* Choose a plugin for every layer and phase. Fails when a layer cannot be
 * served under [select] fallback = error (no listed backend fits, or only
 * a CPU backend does while a GPU backend is available: see
 * ah_selection_warnings), or a forced backend does not fit: the message
 * then lists the reasons. Decisions are cached per distinct
 * layer spec inside the host. */
ah_status ah_host_select(ah_host *host, const ah_model *model, ah_selection **out, ah_error *err);
/* Thread safety: ah_host_select and ah_host_select_forced: any thread, many
 * at once on one host (the decision cache is locked; a check_combination
 * callback may run concurrently in several threads, so a plugin's callback
 * must be reentrant). The selection points into the host's decision cache:
 * it must not outlive the host. */
/* The same with every layer and phase forced to one plugin (the
 * conformance suite and bench use it): fails with the plugin's reasons when
 * it cannot serve a layer. */
ah_status ah_host_select_forced(ah_host *host, const ah_model *model, const char *plugin,
                                ah_selection **out, ah_error *err);
/* The same with the decode phase forced to decode_plugin and the prefill
 * phase (and the ragged prefill form) to prefill_plugin, so a tool can time
 * a pair of winners (attnhost tune times mixed steps split between them).
 * Thread safety: as ah_host_select. */
ah_status ah_host_select_pair(ah_host *host, const ah_model *model, const char *decode_plugin,
                              const char *prefill_plugin, ah_selection **out, ah_error *err);
/* The same as ah_host_select with only the layers' ragged prefill forms
 * forced to ragged_plugin (NULL: none; see ah_selection_ragged_decision), so a tool
 * can time a form's candidates beside the default paged forms (attnhost
 * tune does). A form the plugin cannot serve stays unbound with its
 * reasons, as under ah_host_select. Thread safety: as ah_host_select. */
ah_status ah_host_select_ragged(ah_host *host, const ah_model *model, const char *ragged_plugin,
                                ah_selection **out, ah_error *err);
/* The selection for explaining it, even when it fails: like
 * ah_host_select (plugin NULL) or ah_host_select_forced (plugin set), with
 * the same status and message, but *out is set whatever the status (except
 * out of memory), so every layer's decision table can be shown. A layer
 * that could not be served has a decision with plugin NULL and every
 * candidate's reasons. Such a selection cannot be bound: ah_binding_create
 * refuses it, naming the layer. Thread safety: as ah_host_select. */
ah_status ah_host_explain(ah_host *host, const ah_model *model, const char *plugin,
                          ah_selection **out, ah_error *err);
/* Thread safety: destroy function: no binding made from sel may remain. */
void ah_selection_destroy(ah_selection *sel);
/* Thread safety: the accessors below: any thread (a selection is immutable). */

uint32_t ah_selection_num_layers(const ah_selection *sel);
const ah_decision *ah_selection_decision(const ah_selection *sel, uint32_t layer, ah_phase phase);
/* ABI 2.3: ragged K/V. The decision for the layer's ragged prefill form
 * (ah_model_layer_ragged), made from the layer's prefill candidates (or
 * the forced plugin) with the form's spec: NULL when the layer has no such
 * form. The form is optional: when no candidate serves it (a plugin
 * without AH_FEAT_RAGGED_KV is refused with the reason "ragged_kv"), or
 * its winner runs on another device kind than the layer's prefill winner
 * (which holds the engine's tensors), the selection still succeeds, the
 * form stays unbound, and ah_selection_warnings says so under [select]
 * fallback = warn (one line for all such layers). ah_binding_plan then
 * refuses a ragged step (a batch with cu_seqlens_k) naming the layer.
 * ah_selection_ragged_bound: 1 when the layer's ragged form is bound.
 * Thread safety: any thread. */
const ah_decision *ah_selection_ragged_decision(const ah_selection *sel, uint32_t layer);
int ah_selection_ragged_bound(const ah_selection *sel, uint32_t layer);
/* The model's CUDA-graph level: the minimum over its bound layers, both
 * phases; *layer (if not NULL) receives the layer that set it. */
ah_graph_level ah_selection_graph_level(const ah_selection *sel, uint32_t *layer);
/* The level for graphs of one phase's batches, vLLM-style: a captured
 * decode-only (uniform) batch runs on the decode winners, so DECODE is the
 * minimum over the decode winners alone; PREFILL, the minimum over the
 * prefill winners, bounds graphs of every other batch (a mixed batch is
 * captured whole on the prefill winners, see ah_binding_plan). *layer as
 * above; an unknown phase gives NEVER. */
ah_graph_level ah_selection_graph_level_for(const ah_selection *sel, ah_phase phase,
                                            uint32_t *layer);
/* Warnings from fallback = warn, one per line; "" when none. Two kinds of
 * fallback: no listed backend fits a layer and another is taken; and a CPU
 * fallback, where a layer is bound to a CPU backend while a GPU backend is
 * available here and refused it (the line names the layer, the phase and
 * each GPU backend's reasons). [select] fallback governs both: error fails
 * the selection, warn binds and warns, allow binds silently. A forced
 * backend is never a fallback. */
const char *ah_selection_warnings(const ah_selection *sel);
/* ABI 2.3: KV-cache layout. The block size the layers of KV-cache group
 * run with (ah_model_num_kv_groups): the model's, or for `block_size =
 * auto` the one selection chose, and in *how (may be NULL; static to the
 * selection) why: "set in the model" or "auto: the preferred size of layer
 * 3's prefill winner cpu_amx". 0 and "" for a group out of range, one
 * without a cache layer, or an auto group no size could serve (the
 * selection failed then, naming the sizes tried). */
uint32_t ah_selection_kv_group_block_size(const ah_selection *sel, uint32_t group,
                                          const char **how);

const char *ah_reason_code_str(ah_reason_code c);
const char *ah_graph_level_str(ah_graph_level g);
const char *ah_attn_type_str(ah_attn_type t);
const char *ah_kv_layout_str(ah_kv_layout l);
const char *ah_kv_scales_str(ah_kv_scales k); /* ABI 2.3: "host", "tensor", "per_head" */
const char *ah_device_kind_str(ah_device_kind k);
const char *ah_feature_name(uint32_t feature_bit);

/* Text for capability sets, as explain and list print them; each writes a
 * NUL-terminated string of at most cap bytes into buf. */
void ah_format_int_set(const ah_int_set *s, char *buf,
                       size_t cap); /* "{64, 128}", "16..256 step 16" */
void ah_format_dtype_mask(uint32_t mask, char *buf, size_t cap); /* "{bf16, fp16}" */
void ah_format_attn_types(uint32_t mask, char *buf, size_t cap); /* "{decoder, encoder}" */
void ah_format_layouts(uint32_t mask, char *buf, size_t cap);    /* "{nhd, hnd}" */
void ah_format_features(uint32_t mask, char *buf, size_t cap);   /* "mla, sinks" or "none" */
void ah_format_isa(uint32_t mask, char *buf, size_t cap);        /* "avx512f, amx_bf16" */

/* ---------------------------------------------------------------------------
 * Binding and execution
 * ------------------------------------------------------------------------ */

/* ---------------------------------------------------------------------------
 * Context parallelism (ABI 2.2): a request's KV cache sharded by position
 * over the ranks of a group, as vLLM's decode context parallel does.
 *
 * KV position p lives on rank (p / interleave) % world_size, at index
 * (p / (interleave * world_size)) * interleave + p % interleave of that
 * rank's shard (vLLM's cp_kv_cache_interleave_size). Each rank's engine
 * keeps its shard in its own paged cache: its block_table rows cover its
 * local lengths, and its slot_mapping gives a slot for each new token it
 * holds and a negative slot for the others. Every rank sees every query
 * token (q, key and value replicated, as under DCP).
 *
 * A step: each rank attends over its shard (its plugin's forward with LSE
 * into the binding's buffers), the partial outputs and LSEs are
 * all-gathered over the group, and each rank merges them into its out
 * with its plugin's merge_states, on the engine's stream (graph-capturable
 * over NCCL). Every rank ends with the whole result. A request whose query
 * spans several tokens (prefill, speculative verification) is planned as
 * one query token per request, each seeing the local keys at or before
 * its own global position, so the result is exact for any query length.
 * Sinks count once (rank 0's states use them, the others' do not); sliding windows are exact when
 * the window is a multiple of interleave * world_size (checked at binding creation).
 * ------------------------------------------------------------------------ */

/* Ranks emulated in one process (tests, CPU-only engines): an in-memory
 * all-gather between the bindings that share the group, one per rank and
 * each used from its own thread. A rank that does not arrive within the
 * time-out fails every waiting rank with a message, and the group stays
 * failed. Thread safety: create and destroy from one thread; the group is
 * used by its ranks' threads at once. */
typedef struct ah_cp_local_group ah_cp_local_group;
ah_status ah_cp_local_group_create(uint32_t world_size, ah_cp_local_group **out, ah_error *err);
void ah_cp_local_group_destroy(ah_cp_local_group *g);

typedef struct ah_cp_options {
    uint32_t struct_size;
    uint32_t world_size; /* ranks in the group; 0 or 1: no context parallelism */
    uint32_t rank;       /* this binding's rank, 0 .. world_size - 1 */
    uint32_t interleave; /* consecutive KV positions per rank; 0: 1 */
    /* The collective, one of: */
    void *nccl_comm;                /* the engine's ncclComm_t (owned by the engine;
                                       libnccl.so.2 is loaded with dlopen) */
    ah_cp_local_group *local_group; /* ranks in this process */
    const char *nccl_library;       /* NULL: "libnccl.so.2" */
    uint32_t timeout_ms;            /* how long a rank waits for the others at a
                                       step's check (and, in a local group, at an
                                       all-gather); 0: 60000 */
} ah_cp_options;

/* Where KV position pos lives: the rank, and (local, may be NULL) its index
 * in that rank's shard. interleave 0 means 1. Thread safety: any thread. */
uint32_t ah_cp_rank_of(uint64_t pos, uint32_t world_size, uint32_t interleave, uint64_t *local);
/* How many of positions 0 .. n - 1 rank holds: its local length of a
 * request of n tokens. */
uint64_t ah_cp_local_len(uint64_t n, uint32_t world_size, uint32_t rank, uint32_t interleave);

/* NCCL communicators for n devices of this process (ncclCommInitAll), for
 * tools and tests that drive every rank from one process; comms[i] is rank
 * i on devices[i]. Destroy each with ah_cp_nccl_comm_destroy. */
ah_status ah_cp_nccl_comms_create(uint32_t n, const int32_t *devices, const char *nccl_library,
                                  void **comms, ah_error *err);
void ah_cp_nccl_comm_destroy(void *comm);

/* How a step with decode and prefill requests runs on layers whose two
 * winners differ ([select] mixed_steps; see ah_binding_plan). */
typedef enum ah_mixed_steps {
    AH_MIXED_STEPS_CONFIG = 0,  /* ah_binding_options: as [select] mixed_steps says */
    AH_MIXED_STEPS_SPLIT = 1,   /* the leading decode requests to the decode winners */
    AH_MIXED_STEPS_WHOLE = 2,   /* the whole step to the prefill winners */
    AH_MIXED_STEPS_MEASURED = 3 /* whichever `attnhost tune` measured faster for the
                                   binding's layers; split where any is untuned */
} ah_mixed_steps;

typedef struct ah_binding_options {
    uint32_t struct_size;
    ah_limits limits;
    int no_validation;          /* 1: skip batch and tensor checks (trusted engines) */
    int32_t device_index;       /* the device (of each bound plugin's kind) the
                                   binding runs on: CUDA device 1 for tensors on
                                   cuda:1. At least 0; CPU plugins always run on
                                   device 0 whatever this says */
    const ah_cp_options *cp;    /* ABI 2.2: context parallelism; NULL: none */
    ah_mixed_steps mixed_steps; /* this binding's mixed steps; CONFIG (0): [select] mixed_steps */
} ah_binding_options;

/* Open the selected plugins (dlopen, context, one state per distinct
 * plugin and layer spec; per phase too where a layer's two phases have
 * different winners, or one plugin with ah_caps.mixed_batch = SPLIT wins
 * both, so both plans of a split step coexist). Split steps' buffers are
 * allocated here (a query_start_loc of limits.max_num_reqs + 1 entries on
 * the host and on each prefill winner's device). sel must outlive the
 * binding.
 * Devices: the host opens one context per plugin and device index, the
 * first time a binding asks for that index (ah_context_options.device_index),
 * and keeps it until the host goes. A negative device_index is
 * AH_ERR_INVALID_ARGUMENT; an index a plugin refuses fails with the
 * plugin's reason ("cuda_fa3: opening device cuda:5 failed: ..."). The
 * binding's devices (ah_binding_device) report that index in ah_device_dl,
 * and the tensor checks refuse a tensor on another device or index, naming
 * the tensor and both devices.
 * Thread safety: any thread, many at once on one host and even on one
 * selection. Bindings of one plugin on one device index share that
 * context: a plugin's state_create and merge_states must accept concurrent
 * calls on it. */
ah_status ah_binding_create(ah_host *host, const ah_selection *sel, const ah_binding_options *opts,
                            ah_binding **out, ah_error *err);
/* Thread safety: destroy function. */
void ah_binding_destroy(ah_binding *b);
/* The message of the last failed call on b. Thread safety: owner thread, as
 * is every ah_binding_* call below: one call at a time per binding, any
 * number of bindings at once. */
const char *ah_binding_errmsg(const ah_binding *b);

/* Validate the batch (unless switched off), split it by phase and plan
 * every state that serves a part.
 *
 * A request is a decode request when its query length is at most the
 * binding's decode threshold: the smallest decode_query_len_max (0 counts
 * as 1) among the decode winners of all layers. One threshold holds for the
 * whole batch, so every decode winner sees only query lengths it declared;
 * a request between two winners' thresholds goes to the prefill winners,
 * which serve any length.
 *  - Every request decode: the decode winners plan the whole batch.
 *  - None: the prefill winners plan the whole batch.
 *  - Mixed, decode requests first (as vLLM and SGLang order them): split.
 *    The first nd requests form the decode part, the rest the prefill part;
 *    both are views into the engine's arrays (same tensors, offset data
 *    pointers and shorter shapes), except the prefill part's
 *    query_start_loc, rebased to 0 into a buffer the binding owns (sized
 *    from its limits at creation, copied to the prefill winner's device on
 *    `stream`). Each layer's decode winner plans the decode part and its
 *    prefill winner the prefill part; a layer whose two winners are one
 *    state (one plugin and spec, ah_caps.mixed_batch = WHOLE) plans the
 *    whole batch. ah_binding_forward then runs both parts into the caller's
 *    out tensor, so the output is in the engine's token order with no copy;
 *    where the decode winner's device offers events (ABI 2.4) and both
 *    winners are of one device kind, the decode part runs on a stream the
 *    binding created there, forked from `stream` and joined back into it
 *    within the layer's forward, at the same time as the prefill part.
 *  - Kernel blocks (ABI 2.3): a state whose plugin runs the layer's cache
 *    blocks as m smaller kernel blocks (ah_decision.kernel_block_size) is
 *    planned on the same batch with a block table in kernel blocks (entry
 *    e of a row becomes e * m .. e * m + m - 1; a released, negative entry
 *    stays negative m times; slot numbers are unchanged) and num_blocks
 *    times m. The binding builds that table from the host copy into a
 *    buffer sized at creation (limits.max_num_reqs x max_blocks_per_req x
 *    m), copies it to the plugin's device on `stream`, and hands the
 *    plugin views of the caches as [num_blocks * m, block / m, Hk, head];
 *    it costs one pass over the entries the step's sequences cover, and
 *    that copy. Rows are as wide as the step's widest (limits' widest in
 *    CAPTURE and REPLAY, so a graph keeps its shape).
 *  - Mixed but not splittable: the whole batch runs on the prefill winners,
 *    and ah_binding_split says why: decode requests not all first; a winner
 *    of a split layer with caller_output = 0; mode CAPTURE or REPLAY (a
 *    graph captures one plan per state); common_prefix_len set (cascade);
 *    a decode part whose token count would leave the prefill part's dense
 *    token rows off 16-byte alignment; no layer with two winners; or
 *    mixed steps whole (ah_binding_options.mixed_steps or [select]
 *    mixed_steps: whole, or measured where the tune table has the
 *    binding's split layers faster whole).
 * The split decision is O(num_reqs) on the host copies (free for a batch
 * whose max_query_len is within the threshold) and allocates nothing.
 * KV-cache groups (ABI 2.1): a model with G > 1 groups needs
 * batch->num_kv_groups = G and kv_groups (see ah_batch); each state is
 * planned on its layer's group view (ah_batch_group_view), each group is
 * validated against its own num_blocks, and a group with released blocks
 * is refused for a plugin without AH_FEAT_RELEASED_BLOCKS (naming the
 * layer and plugin).
 * On error nothing was planned. The batch's arrays must outlive the step
 * (see ah_batch). */
ah_status ah_binding_plan(ah_binding *b, const ah_batch *batch, ah_plan_mode mode, void *stream);
/* DECODE when every request of the last planned batch was a decode
 * request, else PREFILL (mixed batches included, split or not). */
ah_phase ah_binding_phase(const ah_binding *b);
/* How the last planned batch was served: the number of leading requests
 * (and, in *decode_tokens, their tokens) planned on the decode winners:
 * num_reqs for an all-decode batch, nd for a split one, 0 when the prefill
 * winners took the whole batch. *why (static text, may be NULL) says why a
 * batch with decode requests was not split, or "" when it was split or had
 * none. 0 and "" before the first successful plan. */
uint32_t ah_binding_split(const ah_binding *b, uint32_t *decode_tokens, const char **why);
/* How a binding of sel (created with mixed_steps CONFIG) runs mixed steps:
 * WHOLE when no layer has two winners (*split_layers 0), else SPLIT or
 * WHOLE as [select] mixed_steps says; under measured, with the tune
 * table's sums over the split_layers layers in *whole_ms and *split_ms
 * (-1 when any is untuned, or not measured). Any pointer may be NULL. A
 * step may still run whole for reasons of its own (ah_binding_split).
 * Thread safety: as ah_host_select. */
ah_mixed_steps ah_selection_mixed_steps(ah_host *host, const ah_selection *sel,
                                        uint32_t *split_layers, double *whole_ms, double *split_ms);

/* Attention for one layer of the last planned batch. When args->key is not
 * NULL the new tokens' K/V are stored first (by forward itself, or by the
 * plugin's write_kv). Tensors are checked against the layer's spec first,
 * whole. In a split step a layer with two winners then runs as two calls
 * on token-row views of q, key, value, out and lse: K/V of both parts,
 * then the decode winner on the first decode_tokens rows and the prefill
 * winner on the rest, both into args->out.
 * Output: a plugin with caps.caller_output = 1 writes into args->out's
 * buffer. One with caller_output = 0 fills the args->out descriptor with a
 * buffer of its own, held by the layer's state; layers of one binding with
 * equal resolved specs and the same plugin share one state, so that buffer
 * is valid only until the next forward on any layer sharing the state
 * (typically the next layer): copy the output out, or consume it, first. */
ah_status ah_binding_forward(ah_binding *b, uint32_t layer, const ah_forward_args *args);
/* Store new K/V only (both parts in a split step). */
ah_status ah_binding_write_kv(ah_binding *b, uint32_t layer, const ah_kv_write_args *args);
/* LSE merge through the layer's plugin (AH_ERR_UNSUPPORTED if it has none).
 * Runs on the plugin's shared context; its failure detail comes from that
 * context and may be overwritten by another binding's concurrent failure. */
ah_status ah_binding_merge_states(ah_binding *b, uint32_t layer, const ah_merge_args *args);

/* One KV-cache tensor as a layer's plugins need it: shape and strides (in
 * elements, outermost first) and element type. FP8 caches are uint8 in
 * DLPack terms; kv_dtype says which FP8. */
typedef struct ah_kv_cache_desc {
    uint32_t struct_size;
    int32_t ndim; /* 0: no such tensor (MLA has no value cache) */
    int64_t shape[6];
    int64_t strides[6];
    ah_dtype kv_dtype;
    DLDataType dl_dtype;
    /* ABI 2.3: KV-cache layout. The memory the engine allocates and where
     * this tensor lies in it. alloc_shape (alloc_ndim dims) is a dense,
     * row-major tensor: the tensor's own shape for a dense layout;
     * [num_blocks, 2, block_size, Hk, head] (nhd_interleaved) or
     * [num_blocks, 2, Hk, block_size, head] (hnd_interleaved) for an
     * interleaved one, which key and value share. offset: elements from
     * the allocation's first element to this tensor's (0 for the key;
     * block_size * Hk * head for the value of an interleaved layout).
     * in_key_alloc: 1 when this tensor lies in the key's allocation (the
     * value of an interleaved layout): allocate once, for the key, and
     * make the value the view at offset with shape and strides as given. */
    int32_t alloc_ndim;
    int64_t alloc_shape[6];
    int64_t offset;
    uint32_t in_key_alloc;
} ah_kv_cache_desc;

/* The key and value cache tensors layer needs for num_blocks blocks (the
 * cache size of the layer's KV-cache group). The host writes as much of
 * each struct as its struct_size covers, which the caller sets to
 * sizeof(ah_kv_cache_desc) of its header; 0 stands for ABI 2.2's size
 * (the fields before alloc_ndim), so a caller that zeroes the structs and
 * predates 2.3 gets what it always got. A struct_size between 0 and that
 * size is AH_ERR_ABI. The block size is the layer's KV-cache block (the
 * model's, or the one selection resolved for block_size = auto), also when
 * the plugin runs on smaller kernel blocks (ah_decision.kernel_block_size).
 * AH_ERR_INVALID_ARGUMENT for a layer out of range (the message names it).
 * Thread safety: owner thread. */
ah_status ah_binding_kv_cache_desc(ah_binding *b, uint32_t layer, uint32_t num_blocks,
                                   ah_kv_cache_desc *key, ah_kv_cache_desc *value);
/* ABI 2.3: KV-cache layout. The block size of layer's KV cache, which its
 * block table and slot mapping count in (the model's, or what selection
 * resolved `block_size = auto` to), and in *kernel (may be NULL) the block
 * size the plugin bound for phase runs on: the same, or a divisor of it
 * when the host splits each cache block into kernel blocks for that
 * plugin (ah_decision.kernel_block_size). 0 (and *kernel 0) for a layer
 * out of range or not attention. Thread safety: owner thread. */
uint32_t ah_binding_block_size(const ah_binding *b, uint32_t layer, ah_phase phase,
                               uint32_t *kernel);
/* The device of the plugin bound to layer in phase. */
ah_device *ah_binding_device(ah_binding *b, uint32_t layer, ah_phase phase);

/* ---------------------------------------------------------------------------
 * Devices: memory, copies, streams, timers and graphs of a plugin's device,
 * so tools and tests drive any backend through one interface.
 * Thread safety: a device belongs to its binding and follows its rule:
 * owner thread (its stream, timer and graph capture are per device);
 * ah_device_kind_of and ah_device_dl: any thread.
 * ------------------------------------------------------------------------ */

ah_device_kind ah_device_kind_of(const ah_device *d);
DLDevice ah_device_dl(const ah_device *d);
const char *ah_device_errmsg(const ah_device *d);
ah_status ah_device_alloc(ah_device *d, size_t bytes, void **ptr);
void ah_device_free(ah_device *d, void *ptr);
/* Complete when it returns (host to device too), whichever stream runs next. */
ah_status ah_device_copy(ah_device *d, void *dst, const void *src, size_t bytes, ah_copy_kind kind);
ah_status ah_device_sync(ah_device *d);
/* Stream for launches (NULL on CPU devices). Owned by the device. */
void *ah_device_stream(ah_device *d);
/* Time what runs between start and stop, in milliseconds. */
ah_status ah_device_timer_start(ah_device *d);
ah_status ah_device_timer_stop(ah_device *d, float *ms);
/* CUDA-graph capture on the device stream; AH_ERR_UNSUPPORTED without it. */
int ah_device_has_graphs(const ah_device *d);
ah_status ah_device_graph_begin(ah_device *d);
ah_status ah_device_graph_end(ah_device *d, ah_graph **g);
ah_status ah_device_graph_launch(ah_device *d, ah_graph *g);
void ah_device_graph_destroy(ah_device *d, ah_graph *g);

/* ---------------------------------------------------------------------------
 * Batch validation, on its own (ah_binding_plan calls it)
 * ------------------------------------------------------------------------ */

/* Check a batch against a layer spec and limits: monotonic query_start_loc,
 * 0 < query_len <= seq_len, block ids inside the cache, slots inside the
 * cache, table wide enough, counts and maxima consistent. Uses the host
 * copies only. Thread safety: any thread (pure: reads its arguments, writes
 * only *err).
 *
 * Padding. An engine that pads a batch up to a captured CUDA-graph size
 * (vLLM, SGLang) appends padded requests: query length 0
 * (query_start_loc[r + 1] == query_start_loc[r]), seq_len equal to the
 * backend's caps.graph_seq_len_fill, after every real request. They own no
 * query tokens, hence no slot_mapping entry, and nothing is written or
 * computed for them; the block-table entries their seq_len covers (entry 0
 * for a fill of 1) must lie inside the cache, since kernels may read them.
 * At least one request must be real. Anything else (query length 0 with
 * another seq_len, a real request after a padded one) is refused naming
 * the field, index and value. ah_batch_validate takes a fill of 0;
 * ah_batch_validate_fill takes the backend's (a negative fill refuses
 * every padded request). ah_binding_plan validates each bound plugin's
 * part with that plugin's graph_seq_len_fill. */
ah_status ah_batch_validate(const ah_batch *batch, const ah_layer_spec *spec,
                            const ah_limits *limits, ah_error *err);
ah_status ah_batch_validate_fill(const ah_batch *batch, const ah_layer_spec *spec,
                                 const ah_limits *limits, int32_t seq_len_fill, ah_error *err);

/* KV-cache groups (ABI 2.1). Validation reads the paging of the spec's
 * kv_group (ah_batch.kv_groups[g], or the batch's own fields for group 0
 * without groups) and checks it against that group's num_blocks: a batch
 * describing fewer groups than the spec's kv_group + 1 is refused. Released
 * entries (negative block-table entries, see ah_kv_group) are accepted only
 * where the spec's sliding window hides the whole block from every query
 * token of the request (ah_binding_plan uses the smallest window over the
 * group's layers, and refuses them for plugins without
 * AH_FEAT_RELEASED_BLOCKS); elsewhere the message names the group, row,
 * column and value and says which position still sees the block.
 *
 * The batch a plugin of group g sees: a copy of batch whose block_table,
 * slot_mapping, their host copies, block_table_stride and num_blocks are
 * group g's (pointers, not copies of the arrays) and whose num_kv_groups is
 * 0. AH_ERR_INVALID_ARGUMENT (message in err) when the batch describes no
 * group g. Thread safety: any thread (pure). */
ah_status ah_batch_group_view(const ah_batch *batch, uint32_t group, ah_batch *view, ah_error *err);

/* ---------------------------------------------------------------------------
 * Check records: trust earned on this machine
 *
 * `attnhost check --plugin P` runs the conformance suite (tests/conformance)
 * and records its outcome with ah_host_record_check. A record is kept per
 * plugin file and device, in the file check-records beside the scan cache
 * ([search] cache), keyed like the scan cache: the file's path, identity
 * (device, inode, size, mtime, ctime) and content hash as the scan took
 * them, the plugin's effective [plugin.<name>] keys, the host ABI, and the
 * device the plugin probed (kind, name, architecture and compute capability,
 * driver version; for a CPU plugin the CPU model too). A record made under
 * any other key does not apply: an upgraded or touched plugin file, another
 * configuration of its keys or another device is "not checked here".
 * [select] require_checked = true makes only plugins with a passing record
 * (no failed case, at least one passed) candidates; the others are refused
 * with AH_REASON_NOT_CHECKED.
 *
 * The file is written atomically (temp file + rename, as the scan cache) and
 * may be shared read-only: a file owned by this user or by root and
 * writable by no one else is read; a directory this process cannot write is
 * used as it is, and a new record is not written (ah_host_record_check says
 * why). A corrupt, foreign-version or untrusted file is ignored as a whole,
 * with a warning (ah_host_check_records_note), and replaced by the next
 * record written.
 * ------------------------------------------------------------------------ */

/* The outcome of one conformance run of one plugin. */
typedef struct ah_check_result {
    uint32_t struct_size;
    uint32_t passed, failed, skipped; /* cases */
    ah_graph_level graph_level;       /* the highest CUDA-graph level whose capture and
                                         replay cases ran and passed; NEVER when none did */
} ah_check_result;

/* A stored record, as ah_host_plugin_check returns it. */
typedef struct ah_check_record {
    uint32_t struct_size;
    int ok; /* 1: it passed (no failed case, at least one passed):
               it counts for [select] require_checked */
    uint32_t passed, failed, skipped;
    ah_graph_level graph_level;
    int64_t checked_at;        /* seconds since the epoch */
    char date[16];             /* checked_at as "2026-11-27" (UTC) */
    char time_utc[24];         /* "2026-11-27T09:14:03Z" */
    char attnhost_version[32]; /* the attnhost that ran the suite */
} ah_check_record;

/* Record a conformance run of plugin (by name: the file the host scanned
 * under that name, which must be available) on the device it probed.
 * Replaces the record of the same file path, configuration and device; the
 * others stay. The record is for hosts created afterwards: this host's
 * selections and ah_host_plugin_check keep what was found at its creation.
 * AH_ERR_NOT_FOUND: no such plugin; AH_ERR_UNAVAILABLE: not available here;
 * AH_ERR_IO: not written (no scan cache, a read-only directory, a file of
 * another user), the reason in err; AH_ERR_INVALID_ARGUMENT: a NULL or
 * short result. Thread safety: any thread (records written at once by two
 * processes: the last rename wins). */
ah_status ah_host_record_check(ah_host *host, const char *plugin, const ah_check_result *result,
                               ah_error *err);

/* The record that applies to plugin here (its file, configuration and
 * device as this host scanned them), passing or not: AH_OK and *out;
 * AH_ERR_NOT_FOUND when there is none (or no such plugin), *out zeroed
 * apart from struct_size. Thread safety: any thread. */
ah_status ah_host_plugin_check(const ah_host *host, const char *plugin, ah_check_record *out);

/* Where check records live for this host ("" without a scan cache), and
 * why the file was ignored when it was (corrupt, another version, not
 * trusted), else "". Host-owned. Thread safety: any thread. */
const char *ah_host_check_records_path(const ah_host *host);
const char *ah_host_check_records_note(const ah_host *host);

/* ---------------------------------------------------------------------------
 * Models without INI text: layer kinds, models built from per-layer specs,
 * a model written back as INI, and Hugging Face config.json import
 * (docs/configuration.md, "Layer kinds" and "Importing a Hugging Face
 * config.json").
 * Thread safety: any thread, as ah_model_parse; the result is an ordinary
 * immutable ah_model.
 * ------------------------------------------------------------------------ */

/* What a layer of a model is. A hybrid model (Jamba, Qwen3-Next, ...)
 * declares its non-attention layers so the model keeps the engine's layer
 * numbering. A non-attention layer is never selected or bound: its
 * decisions have plugin NULL, no candidates and the list_source
 * "<kind> layer: not attention"; the CUDA-graph levels ignore it; the
 * binding plans no state for it; ah_binding_forward, ah_binding_write_kv,
 * ah_binding_merge_states and ah_binding_kv_cache_desc on it return
 * AH_ERR_INVALID_ARGUMENT naming the layer and its kind; ah_binding_device
 * returns NULL for it. */
typedef enum ah_layer_kind {
    AH_LAYER_ATTENTION = 0,        /* softmax attention, described by its ah_layer_spec */
    AH_LAYER_MAMBA = 1,            /* a Mamba (selective state-space) mixer */
    AH_LAYER_LINEAR_ATTENTION = 2, /* linear attention (no softmax) */
    AH_LAYER_GDN = 3,              /* gated delta net (Qwen3-Next's linear attention) */
    AH_LAYER_MLP_ONLY = 4,         /* no token mixing at all */
    AH_LAYER_OTHER = 5,            /* any other non-attention mixer */
    AH_LAYER_KIND_COUNT
} ah_layer_kind;

/* "attention", "mamba", "linear_attention", "gdn", "mlp_only", "other";
 * "?" for anything else. Thread safety: any thread. */
const char *ah_layer_kind_str(ah_layer_kind k);

/* The kind of a model's layer; AH_LAYER_KIND_COUNT for a layer out of
 * range. ah_model_layer of a non-attention layer is a spec of zeros (only
 * struct_size set): check the kind first. */
ah_layer_kind ah_model_layer_kind(const ah_model *model, uint32_t layer);
/* The same for a selection's layer (a selection copies the kinds). */
ah_layer_kind ah_selection_layer_kind(const ah_selection *sel, uint32_t layer);

/* A model described in C. Every layer is checked by the same code as a
 * model description's (ah_model_parse): the same rules and messages,
 * prefixed "<name>: layer N: ". Zeros mean "not set", as a key left out of
 * the INI text: num_kv_heads 0 is num_q_heads (1 for MLA); qk_head_size and
 * v_head_size 0 under use_mla are 576 and 512 (kv_lora_rank 512 plus 64
 * rotary channels); v_head_size 0 is qk_head_size; q_dtype AUTO is bf16;
 * block_size 0 is 16, AH_BLOCK_SIZE_AUTO is `block_size = auto` (ABI 2.3);
 * scale 0 is 1/sqrt(qk_head_size). A spec's
 * struct_size may be that of ABI 1.0 (without fp8_attention). */
typedef struct ah_model_desc {
    uint32_t struct_size;
    const char *name;            /* required: 1-128 bytes, no control
                                    character, no space at either end, no
                                    ';' or '#' (so ah_model_to_ini writes
                                    it back) */
    uint32_t num_layers;         /* 1..16384 */
    const ah_layer_spec *layers; /* num_layers specs; a non-attention
                                    layer's entry is ignored (may be zeros).
                                    May be NULL when no layer is attention */
    const ah_layer_kind *kinds;  /* num_layers kinds; NULL: every layer is
                                    attention */
    /* ABI 2.3: ragged K/V. num_layers ragged prefill forms (see
     * ah_model_layer_ragged), an entry with struct_size 0 for a layer
     * without one; NULL: no layer has one. A form has ragged_kv = 1, the
     * layer's query heads, dtype (also as kv_dtype), window, soft-cap,
     * sinks, ALiBi and causal flag; the layer's heads and head sizes unless
     * the layer is MLA (then any non-absorbed sizes, qk above the rotary
     * part); scale 0 is the layer's resolved scale. */
    const ah_layer_spec *ragged_forms;
} ah_model_desc;

/* Build a model from desc. AH_ERR_CONFIG with the message in err for a
 * layer the INI path would refuse; AH_ERR_ABI for a desc or spec whose
 * struct_size is too small; AH_ERR_INVALID_ARGUMENT without desc or out. */
ah_status ah_model_create(const ah_model_desc *desc, ah_model **out, ah_error *err);

/* The model as a model description: ah_model_parse of *text gives the same
 * name, kinds, specs and ragged prefill forms, which this checks before it
 * hands the text out. Layers are grouped: the most common attention layer
 * goes in [model], the rest in [layers.<range>] sections of what differs.
 * *text is malloc'ed; the caller frees it. AH_ERR_INVALID_ARGUMENT when
 * the name cannot stand in INI text (';' or '#'); AH_ERR_INTERNAL (and no
 * text) when the text would not read back as the same model. */
ah_status ah_model_to_ini(const ah_model *model, char **text);

/* KV-cache groups of an imported model (ah_hf_import_options.kv_groups). */
typedef enum ah_hf_kv_groups {
    AH_HF_KV_GROUPS_ONE = 0,   /* every layer in group 0: one block table */
    AH_HF_KV_GROUPS_HYBRID = 1 /* one group per class of cache layers, as
                                  vLLM's hybrid KV-cache manager groups them:
                                  layers that agree in sliding window, KV
                                  heads, head sizes and MLA, self or cross
                                  attention, and (Llama 4 under
                                  chunked_virtual_batches) chunked or global
                                  share a group. Groups are numbered in the
                                  order of their first layer (group 0 is the
                                  first cache layer's); cacheless encoder
                                  layers stay in group 0 */
} ah_hf_kv_groups;

/* Options of a Hugging Face import; NULL options: every default. Fields
 * are appended; the importer reads a field only when struct_size covers
 * it, so a caller built against an older header gets its default. */
typedef struct ah_hf_import_options {
    uint32_t struct_size;
    ah_dtype dtype;              /* AUTO: torch_dtype (or dtype), fp32 when the
                                    config names none, as transformers does */
    ah_dtype kv_dtype;           /* AUTO: the same as dtype */
    uint32_t block_size;         /* 0: 16 */
    uint32_t tensor_parallel;    /* 0 or 1: whole heads; N: the heads of one of N
                                    ranks (query heads / N, KV heads / N, or 1
                                    KV head replicated when N exceeds them) */
    const char *name;            /* NULL: the config's _name_or_path (its last
                                    part) where it makes a model name
                                    (ah_model_desc.name), else its
                                    model_type */
    int chunked_virtual_batches; /* 1: the engine runs Llama 4's chunked
                                    local attention as virtual batches of
                                    one chunk (vLLM does), so those layers
                                    are plain causal layers here; 0: refuse
                                    them */
    uint32_t reserved;           /* never read: it fills what was the tail
                                    padding of the struct before kv_groups
                                    (sizeof 40 on 64-bit targets), so an
                                    older caller's struct_size never covers
                                    kv_groups */
    uint32_t kv_groups;          /* an ah_hf_kv_groups; default ONE */
} ah_hf_import_options;

/* A model from a Hugging Face config.json (its text); source names it in
 * messages. Families: see docs/configuration.md. A field the importer does
 * not understand and that changes attention, an unknown model_type or
 * layer_types entry, a missing required field or a contradiction is
 * AH_ERR_CONFIG with a message naming the field and its value; malformed
 * JSON is AH_ERR_CONFIG with json-c's reason and offset. A library built
 * without json-c returns AH_ERR_UNSUPPORTED and says so. */
ah_status ah_model_import_hf(const char *json_text, const char *source, ah_model **out,
                             ah_error *err);
ah_status ah_model_import_hf_opts(const char *json_text, const char *source,
                                  const ah_hf_import_options *opts, ah_model **out, ah_error *err);
/* 1 when this library was built with the importer (json-c). */
int ah_model_import_available(void);

/* ---------------------------------------------------------------------------
 * Measured speed: the tune table and [select] policy = measured
 *
 * `attnhost tune` times every valid candidate of each distinct layer spec
 * of a model, per phase, on a few standard steps, and records the times
 * with ah_host_record_tune in the file tune-table beside the scan cache.
 * An entry is keyed like a check record (above): the plugin file's path,
 * identity and content hash, its name and version, its [plugin.<name>]
 * keys, the host ABI, the driver fingerprint and the device it probed;
 * then the layer spec as the model describes it (ah_model_layer: before
 * kv_dtype, layout and block size are resolved) and the phase. Any other
 * key does not apply: a changed plugin file is untuned until tuned again.
 * The file is written atomically and may be shared read-only (another
 * user's file that nobody else can write is read, never written); a
 * corrupt or foreign-version file is ignored as a whole with a warning
 * (ah_host_tune_table_note).
 *
 * With [select] policy = measured, a layer whose candidates come from the
 * default order (no [select] or [layer.<range>] list, nothing forced)
 * takes, among the candidates that pass every check, the fastest in the
 * table; an earlier candidate in the priority order within 3% of it keeps
 * the win. When a valid candidate is untuned, or candidates were tuned on
 * different steps, the priority order stands. The decision's list_source
 * ends in "; policy measured: ..." saying what happened, and each valid
 * loser's reason is AH_REASON_LOST_ON_PRIORITY with field "measured".
 * The table is read once per host, at the first selection under policy
 * measured or the first call below; records made afterwards are for
 * hosts created later.
 * Mixed steps: under [select] mixed_steps = measured, a binding whose
 * layers have two winners runs mixed steps whole when the table holds,
 * for each such layer, the mixed step whole on its prefill winner and
 * split with its decode winner (the tune entries with mixed set), and the
 * whole times sum lower; otherwise split. ah_binding_split's reason then
 * gives both sums.
 * ------------------------------------------------------------------------ */

typedef struct ah_tune_entry {
    uint32_t struct_size;
    const char *plugin;        /* a plugin available on this host */
    const ah_layer_spec *spec; /* as the model describes the layer (ah_model_layer) */
    ah_phase phase;
    double ms;         /* the phase's time: the sum of the step medians, > 0 */
    const char *steps; /* the steps timed ("d16x4096,d64x8192"); candidates are
                          compared only when tuned on the same steps */
    /* A mixed step's entry, for [select] mixed_steps = measured: mixed is
     * AH_MIXED_STEPS_WHOLE (plugin ran the step alone) or
     * AH_MIXED_STEPS_SPLIT (decode_plugin ran its decode requests, plugin
     * the rest); spec is then the layer as the selection resolved it for
     * plugin (ah_selection_decision(sel, l, AH_PHASE_PREFILL)->spec), and
     * phase is ignored. CONFIG (0): a phase entry, as above. A split entry
     * applies while both plugin files are the ones tuned. */
    ah_mixed_steps mixed;
    const char *decode_plugin;
} ah_tune_entry;

/* Record n measurements (one atomic write). Replaces the entries of the
 * same plugin path, configuration, device, spec and phase; drops entries
 * of files gone from disk. AH_ERR_NOT_FOUND / AH_ERR_UNAVAILABLE: no such
 * plugin or not available here; AH_ERR_IO: not written (no scan cache, a
 * read-only directory, another user's file), the reason in err;
 * AH_ERR_INVALID_ARGUMENT: a bad entry. Thread safety: any thread (two
 * processes at once: the last rename wins). */
ah_status ah_host_record_tune(ah_host *host, const ah_tune_entry *entries, size_t n, ah_error *err);
/* The measured time of plugin for (spec, phase) on this host: AH_OK and
 * *ms, or AH_ERR_NOT_FOUND. Thread safety: any thread. */
ah_status ah_host_tuned(ah_host *host, const char *plugin, const ah_layer_spec *spec,
                        ah_phase phase, double *ms);
/* Where the tune table lives for this host ("" without a scan cache), and
 * why it was ignored when it was, else "". Host-owned. Thread safety: any
 * thread. */
const char *ah_host_tune_table_path(ah_host *host);
const char *ah_host_tune_table_note(ah_host *host);
/* The measured time (ms) [select] policy = measured used for candidate k of
 * a decision; negative when none (untuned, not valid, or policy priority).
 * Thread safety: any thread. */
double ah_decision_candidate_ms(const ah_decision *d, uint32_t k);

#ifdef __cplusplus
}
#endif

#endif /* ATTNHOST_H */
