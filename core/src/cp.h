/*
 * Context parallelism inside a binding (see "Context parallelism" in
 * attnhost.h): the rank's local batch, the step's check with every rank,
 * and the gather-and-merge around each layer's forward. The binding keeps
 * its own logic; it calls in here at creation, at plan and at forward.
 */
#ifndef AH_CP_H
#define AH_CP_H

#include <attnhost/attnhost.h>

typedef struct ah__cp ah__cp;

/* What the context-parallel step needs of one bound state. */
typedef struct ah__cp_state {
    const ah_layer_spec *spec; /* as the state was created (local window) */
    const ah_caps *caps;
    const ah_plugin_ops *ops;
    ah_context *ctx;
    const char *plugin;
    uint32_t layer; /* its first layer, for messages */
    ah_device *dev;
} ah__cp_state;

/* 1 when o asks for context parallelism (world_size > 1). */
int ah__cp_wanted(const ah_cp_options *o);

/* The spec a rank's state is created with: the layer's window divided by
 * the world size (a window of interleave * world_size positions holds
 * interleave of this rank's), and sinks on rank 0 only, after checking the
 * layer can be sharded.
 * AH_ERR_UNSUPPORTED with the reason in err otherwise. */
ah_status ah__cp_local_spec(const ah_cp_options *o, uint32_t layer, const char *plugin,
                            const ah_layer_spec *spec, ah_layer_spec *local, ah_error *err);

/* The limits a rank's states are created with: a step may plan one query
 * token per request, so max_num_reqs covers max_num_tokens. */
void ah__cp_state_limits(const ah_limits *engine, ah_limits *state);

/* Check every state serves context parallelism (LSE, empty requests,
 * merge_states, its own output buffer, one device), open the collective
 * and size the step's buffers on the states' device. validate 0 (a trusted
 * engine) skips the per-token checks of a step's slots and local lengths. */
ah_status ah__cp_create(const ah_cp_options *o, const ah_limits *engine_limits,
                        const ah__cp_state *states, uint32_t n_states, uint32_t n_groups,
                        int validate, ah__cp **out, ah_error *err);
void ah__cp_destroy(ah__cp *cp);

/* The rank's batch for the engine's: seq_lens the local lengths, and a
 * request per query token when a query spans several tokens. Checks what
 * context parallelism adds (global lengths, cp_local_seq_lens, which rank
 * stores each new token). *local stays valid until the next call. */
ah_status ah__cp_local_batch(ah__cp *cp, const ah_batch *engine, ah_plan_mode mode, void *stream,
                             const ah_batch **local, ah_error *err);

/* The step's check: every rank says whether its batch passed and what it
 * holds; mine is this rank's verdict. AH_OK only when every rank passed
 * with the same requests; otherwise an error (this rank's own message is
 * kept when mine failed). */
ah_status ah__cp_agree(ah__cp *cp, ah_status mine, const ah_batch *engine, void *stream,
                       ah_error *err);

/* Around one layer's forward: begin gives the arguments the plugin runs
 * with (out and lse into the rank's partial buffer, sinks only on rank 0);
 * end all-gathers the partials and merges them into a->out (and a->lse)
 * with the state's merge_states. */
ah_status ah__cp_forward_begin(ah__cp *cp, const ah__cp_state *st, const ah_forward_args *a,
                               ah_forward_args *local, ah_error *err);
ah_status ah__cp_forward_end(ah__cp *cp, const ah__cp_state *st, const ah_forward_args *a,
                             ah_error *err);
/* This rank failed a layer's forward after the step's check: tell the
 * group (ah__cp_comm_fail), so the other ranks do not wait for it. */
void ah__cp_fail(ah__cp *cp, const char *why);

#endif
