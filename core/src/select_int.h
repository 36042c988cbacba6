/*
 * Selection's private pieces: priority lists (priority.c), candidate checks
 * (candidate.c), cached decisions (decision.c) and selections (select.c).
 */
#ifndef AH_SELECT_INT_H
#define AH_SELECT_INT_H

#include "host_int.h"

/* Plugin names in order, without duplicates; the strings are borrowed. */
typedef struct ah_name_list {
    const char **items;
    uint32_t n;
} ah_name_list;

int ah__names_has(const ah_name_list *l, const char *name);
/* Append name unless present; -1 on out-of-memory. */
int ah__names_push(ah_name_list *l, const char *name);

/* The candidates of one layer and phase, and where the list came from. */
typedef struct ah_layer_plan {
    ah_name_list list;
    const char *forced; /* borrowed; set when a backend is forced */
    ah_phase phase;     /* the phase the list is for (the fallback's order) */
    int is_default;     /* the list is the default order ([select] policy may reorder it) */
    char source[128];   /* "[select] priority", "[layer.0-3] backend",
                           "default (ranks, GPU first: cuda sm_90, cpu)", ... */
} ah_layer_plan;

/* The default order for phase, computed from what the plugins declare:
 * every accepted plugin (usable here or not) whose rank for the phase is
 * not AH_RANK_NONE, GPU device kinds before the CPU, then the phase's rank
 * (higher first), then the name. source (cap > 0) says so and names the
 * device kinds among the candidates. -1 on out-of-memory. */
int ah__default_order(const ah_host *h, ah_phase phase, ah_name_list *out, char *source,
                      size_t cap);
/* The most specific list for layer in phase; -1 on out-of-memory. */
int ah__plan_for_layer(const ah_host *h, uint32_t layer, ah_phase phase, ah_layer_plan *p);

/* Strings a decision owns. */
typedef struct ah_string_arena {
    char **items;
    uint32_t n;
} ah_string_arena;

/* A copy of s ("" for NULL) owned by the arena; NULL on out-of-memory. */
const char *ah__arena_keep(ah_string_arena *a, const char *s);
void ah__arena_free(ah_string_arena *a);

/* Reasons gathered for one candidate. sink comes first: check_combination
 * receives &sink and add() casts back. Strings go into the arena. */
typedef struct ah_reason_list {
    ah_reason_sink sink;
    ah_string_arena *arena;
    ah_reason *items;
    uint32_t n;
    int oom;
} ah_reason_list;

void ah__reason_list_init(ah_reason_list *r, ah_string_arena *arena);
void ah__reason_add(ah_reason_sink *sink, ah_reason_code code, const char *field, const char *value,
                    const char *supported);

/* Fill what the layer left to the backend: KV dtype, scale, layout and
 * block size (pinned by the other phase's winner when pin is set). */
ah_layer_spec ah__resolve_spec(const ah_layer_spec *in, const ah_caps *caps,
                               const ah_layer_spec *pin);
/* Check plugin name for spec; reasons go into r, the spec as this
 * candidate would run it into *resolved (the cache's block size), and the
 * kernel block size it would run on into *kernel (0: the cache's). */
void ah__evaluate_candidate(ah_host *h, const char *name, const ah_layer_spec *spec,
                            const ah_layer_spec *pin, ah_reason_list *r, ah_layer_spec *resolved,
                            uint32_t *kernel);

/* The cached decision for (spec, pin, plan), computed on a miss; NULL on
 * out-of-memory. */
const ah_decision *ah__decision_for(ah_host *h, const ah_layer_spec *spec, const ah_layer_spec *pin,
                                    const ah_layer_plan *p);

#endif
