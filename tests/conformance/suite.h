/*
 * Private pieces of the conformance suite shared between its files: the
 * seeded generator, what one case is, the case generator (cases.c), the
 * runner of one case (run_case.c) and its CUDA-graph and merge variants.
 */
#ifndef AH_CONFORMANCE_SUITE_H
#define AH_CONFORMANCE_SUITE_H

#include <stdint.h>
#include <stdio.h>

#include <attnhost/attnhost.h>

#include "conformance.h"

/* ---- a seeded generator (xoshiro-style xorshift*; quality is plenty) ---- */

typedef struct ah__conf_rng {
    uint64_t s;
} ah__conf_rng;

static inline void ah__conf_rng_seed(ah__conf_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + stream * 0xbf58476d1ce4e5b9ull + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    r->s = (z ^ (z >> 31)) | 1;
}
static inline uint64_t ah__conf_next(ah__conf_rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545f4914f6cdd1dull;
}
/* Uniform in [lo, hi] (inclusive). */
static inline uint32_t ah__conf_range(ah__conf_rng *r, uint32_t lo, uint32_t hi)
{
    return hi <= lo ? lo : lo + (uint32_t)(ah__conf_next(r) % ((uint64_t)hi - lo + 1));
}
/* Uniform in [lo, hi). */
static inline double ah__conf_uniform(ah__conf_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * (double)(ah__conf_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- cases --------------------------------------------------------------- */

#define AH_CONF_MAX_REQS 8
#define AH_CONF_MAX_CP 8 /* context-parallel ranks in a case */

typedef enum ah__conf_kind {
    AH__CONF_ATTENTION = 0, /* eager forward (with the KV write) vs the oracle */
    AH__CONF_GRAPH = 1,     /* capture once, replay with other batches */
    AH__CONF_MERGE = 2,     /* merge_states vs the oracle's merge */
    AH__CONF_CP = 3,        /* context-parallel ranks, each vs the whole oracle */
    AH__CONF_RAGGED = 4     /* a layer's ragged prefill form on a ragged step (ABI 2.3) */
} ah__conf_kind;

typedef struct ah__conf_case {
    char name[192];
    ah__conf_kind kind;
    ah_layer_spec spec; /* what the model text asks for (kv dtype/layout concrete) */
    uint32_t num_reqs;
    uint32_t qlen[AH_CONF_MAX_REQS];
    uint32_t slen[AH_CONF_MAX_REQS];
    int want_lse;
    int write_kv;                     /* new tokens' K/V go through the plugin */
    ah_graph_level graph;             /* GRAPH: the shape class to capture */
    uint32_t elen[AH_CONF_MAX_REQS];  /* cross layers: encoder_seq_lens (ABI 2.1) */
    int tree_mask;                    /* decoder: a random tree mask per request (ABI 2.1) */
    int release;                      /* windowed decoder: every block the window hides from
                                         all of a request's queries is released (-1) (ABI 2.1) */
    uint32_t cp_world, cp_interleave; /* CP: ranks and KV interleave (ABI 2.2) */
    /* RAGGED (ABI 2.3): each request's key count (k_len) over its qlen
     * queries; for an mla spec the non-absorbed sizes of its ragged form;
     * ragged_context: a context step (ragged_keys = context), klen the
     * context before every query (0 for some request); ragged_merge: klen
     * is a prefix chunk attended in a context step, the new tokens
     * bottom-right over their own keys, the two merged by LSE with
     * merge_states and compared with one causal pass over both (vLLM's
     * MLA prefill); ragged_beside: only the ragged form is the plugin's
     * (ah_host_select_ragged), the paged form binds by priority to another
     * plugin (a backend of the non-absorbed form only) */
    uint32_t klen[AH_CONF_MAX_REQS];
    uint32_t ragged_nope, ragged_v;
    int ragged_merge, ragged_context, ragged_beside;
    uint64_t seed;
} ah__conf_case;

typedef struct ah__conf_case_list {
    ah__conf_case *v;
    uint32_t n, cap;
} ah__conf_case_list;

/* Every case that covers what info's caps claim. */
ah_status ah__conf_make_cases(const ah_plugin_info *info, const ah_conformance_options *opts,
                              ah__conf_case_list *out);
void ah__conf_case_list_free(ah__conf_case_list *l);

/* A one-layer model description for spec (INI text, malloc'ed). */
char *ah__conf_model_text(const ah_layer_spec *spec);
/* A RAGGED case's model: its spec with a ragged prefill form. */
char *ah__conf_model_text_ragged(const ah__conf_case *c);

/* Outcome of one case. */
typedef enum ah__conf_verdict { AH__CONF_PASS, AH__CONF_FAIL, AH__CONF_SKIP } ah__conf_verdict;

typedef struct ah__conf_result {
    ah__conf_verdict verdict;
    double rel_l2, max_abs; /* worst over the comparisons made */
    char detail[768];       /* why it failed or was skipped */
} ah__conf_result;

/* Run one case against plugin on host (cp_devices: see
 * ah_conformance_options). */
void ah__conf_run_case(ah_host *host, const char *plugin, const ah_plugin_info *info,
                       const ah__conf_case *c, uint32_t cp_devices, ah__conf_result *res);

#endif
