/*
 * Binding: the selected plugins opened for execution. Layers with the same
 * plugin and resolved spec share one plugin state, so a step plans each
 * distinct state once and then runs forward per layer. The batch and every
 * tensor are checked before any plugin sees them (unless switched off).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "batch_split.h"
#include "batch_validate.h"
#include "cp.h"
#include "device_int.h"
#include "host_int.h"
#include "kv_layout.h"
#include "kv_split.h"
#include "tensor_check.h"
#include "tune_table.h"

#include <attnhost/plugin_util.h>

/* How a state is planned in a step: on the whole batch, on one part, or
 * (a ragged form) on the whole batch with its ragged keys. */
enum { PART_WHOLE = 0, PART_DECODE = 1, PART_PREFILL = 2, PART_RAGGED = 3 };
/* The plan lists: the whole batch on the decode states, on the prefill
 * states, split (each layer's state on its part), or a ragged step (the
 * prefill states, and each ragged form on the batch with its keys). */
enum { LIST_DECODE = 0, LIST_PREFILL = 1, LIST_SPLIT = 2, LIST_RAGGED = 3, LIST_COUNT };
/* bound_state.role of a layer's ragged prefill form (ABI 2.3) */
#define ROLE_RAGGED AH_PHASE_COUNT

typedef struct bound_state {
    int slot;           /* plugin slot in the host */
    int role;           /* -1: serves both phases of its layers; else the ah_phase,
                           or ROLE_RAGGED */
    ah_context *ctx;    /* the plugin's context on the binding's device */
    ah_layer_spec spec; /* resolved */
    ah_state *st;
    ah_device *dev;       /* the binding's device of that plugin */
    uint32_t dev_idx;     /* index of dev in the binding's devs */
    uint32_t first_layer; /* for messages */
    /* ABI 2.3: KV-cache layout. The kernel block size the plugin runs on
     * (0: spec.block_size, the cache's) and the kernel-block paging it is
     * planned on (index into splits, or -1). spec stays the engine's view:
     * the batch and tensors are checked against the cache's blocks. */
    uint32_t kblock;
    int32_t split;
} bound_state;

typedef struct plan_item {
    uint32_t state;
    uint32_t part;
} plan_item;

/* Why a batch with decode requests was not split (static text). */
static const char WHY_ORDER[] = "decode requests are not all first (order them first, as vLLM "
                                "and SGLang do)";
static const char WHY_GRAPH[] = "plan mode capture/replay: a CUDA graph captures one plan per "
                                "state, so a mixed batch is captured whole on the prefill winners";
static const char WHY_CASCADE[] = "common_prefix_len is set: cascade batches are planned whole";
static const char WHY_ALIGN[] = "splitting after this many tokens would leave the prefill part's "
                                "token rows off 16-byte alignment";
static const char WHY_SAME[] = "every layer's decode and prefill winner is one state that takes "
                               "mixed batches whole";
static const char WHY_MASK[] = "the batch has a tree mask (custom_mask) and a decode winner does "
                               "not claim tree_mask, so the prefill winners take it whole";
static const char WHY_RAGGED[] = "the batch carries cu_seqlens_k: a ragged step is planned whole";
static const char WHY_CONFIG[] = "mixed_steps = whole ([select] or the binding's options): "
                                 "mixed steps run whole on the prefill winners";
static const char WHY_OUTPUT[] = "a winner returns its own output buffer (caller_output = 0), so "
                                 "one output in token order would need a copy";

/* A device's stream for split steps' decode parts, beside the engine's, and
 * the two events that fork and join them. stream NULL: the device offers no
 * events, and the parts run in turn on the engine's stream. */
typedef struct side_stream {
    void *stream;
    ah_event *fork, *join;
} side_stream;

struct ah_binding {
    ah_host *host;
    const ah_selection *sel;
    ah_limits limits;     /* the states': under context parallelism a step may
                             plan a request per query token */
    ah__cp *cp;           /* context parallelism, or NULL */
    int32_t device_index; /* ah_binding_options.device_index */
    int validate;
    bound_state *states;
    uint32_t n_states;
    ah_device **devs;
    uint32_t n_devs;
    uint32_t *layer_state[AH_PHASE_COUNT]; /* layer -> index into states */
    uint32_t *layer_ragged;                /* layer -> its ragged form's state, or NO_STATE */
    int64_t ragged_unbound;                /* a layer whose ragged form is not bound, or -1 */
    uint32_t n_ragged;                     /* bound ragged forms */
    uint32_t num_layers;
    /* fixed at creation */
    uint8_t *layer_split;   /* 1: the layer's decode and prefill states differ */
    uint32_t decode_qmax;   /* a request is decode when its query_len <= this */
    const char *split_why;  /* why no batch of this binding can be split, or NULL */
    ah_mixed_steps mixed;   /* the options' mixed_steps, else [select]'s (never CONFIG) */
    char split_note[224];   /* split_why's text when mixed_steps = measured chose whole */
    uint32_t split_granule; /* the decode part's tokens must be a multiple of it */
    plan_item *plans[LIST_COUNT];
    uint32_t n_plans[LIST_COUNT];
    int32_t mask_bad[LIST_COUNT]; /* per list: a decoder state whose plugin lacks
                                     AH_FEAT_TREE_MASK, or -1 */
    uint32_t *checks;             /* states whose specs validate a batch (distinct groups,
                                     block sizes, kinds and fills) */
    uint32_t n_checks;
    uint32_t *rchecks; /* the ragged forms' states, which validate a ragged step */
    uint32_t n_rchecks;
    /* KV-cache groups (ABI 2.1), fixed at creation */
    uint32_t n_groups;                 /* 1 + the largest kv_group of a cache layer */
    uint32_t *release_w;               /* per group: the window that may hide released
                                          blocks (the smallest over its layers), 0: none */
    const char **release_why;          /* per group: why release_w is 0 (static text) */
    char (*release_buf)[96];           /* per group: the text release_why points at */
    int32_t *released_bad[LIST_COUNT]; /* per list and group: a state of the
                                          group whose plugin lacks
                                          AH_FEAT_RELEASED_BLOCKS, or -1 */
    int *released;                     /* per group: the last validated batch has released blocks */
    ah_batch *gbatch;                  /* per group: the planned batch with the group's paging
                                          (and no ragged keys) */
    ah_batch rbatch;                   /* a ragged step's batch for its ragged forms */
    int32_t *qsl_host;                 /* the prefill part's rebased query_start_loc */
    void **qsl_dev;                    /* per device: its copy (NULL: the host buffer serves) */
    uint8_t *dev_prefill;              /* per device: serves a prefill part */
    side_stream *side;                 /* per device: where its decode parts run (ABI 2.4) */
    ah_batch_part *dparts;             /* per group: the decode part */
    ah_batch_part *pparts;             /* per group and device (g * n_devs + d): the prefill part */
    ah__kv_split *splits;              /* kernel-block pagings (kv_split.h) */
    uint32_t n_splits;
    /* the last planned step */
    ah_phase phase;
    int planned;
    int split;
    int ragged_step; /* the step carries cu_seqlens_k: ragged forms attend */
    uint32_t nd, nd_tokens;
    const char *why;
    ah_batch batch; /* the last planned batch (the engine's pointers), as
                       ABI 2.1 sees it: fields its struct_size does not
                       cover are zero */
    char errmsg[1024];
};

/* layer_state of a non-attention layer (layer kinds): no state. */
#define NO_STATE UINT32_MAX

static ah_status fail(ah_binding *b, ah_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ah_status fail(ah_binding *b, ah_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->errmsg, sizeof b->errmsg, fmt, ap);
    va_end(ap);
    return s;
}

static const char *plugin_name(const ah_binding *b, int slot)
{
    return b->host->scan.plugins[slot]->info.name;
}

static const ah_plugin_ops *ops_of(const ah_binding *b, int slot)
{
    return &b->host->slots[slot].lp->ops;
}

static const ah_caps *caps_of(const ah_binding *b, int slot)
{
    return &b->host->slots[slot].lp->caps_live;
}

/* 1 for a state that reads no paged cache (cacheless, ragged): it has no
 * KV-cache group and takes the batch of group 0. */
static int no_cache(const ah_layer_spec *s) { return ah_spec_cacheless(s) || ah_spec_ragged(s); }

/* The seq_len the engine writes into padded requests for bs's plugin. */
static int32_t seq_len_fill(const ah_binding *b, const bound_state *bs)
{
    return caps_of(b, bs->slot)->graph_seq_len_fill;
}

static ah_device *device_for(ah_binding *b, int slot, ah_context *ctx, ah_error *err, ah_status *s)
{
    for (uint32_t i = 0; i < b->n_devs; i++)
        if (ah__device_slot(b->devs[i]) == slot) return b->devs[i];
    ah_device **grown = ah__realloc(b->devs, (b->n_devs + 1) * sizeof *grown);
    if (!grown) {
        *s = AH_ERR_OUT_OF_MEMORY;
        snprintf(err->msg, sizeof err->msg, "out of memory while binding");
        return NULL;
    }
    b->devs = grown;
    *s = ah__device_open(b->host, slot, ctx, b->device_index, &b->devs[b->n_devs], err);
    return *s == AH_OK ? b->devs[b->n_devs++] : NULL;
}

/* The state for (slot, spec, kernel block, role), created on first use.
 * Returns its index or -1. */
static int state_for(ah_binding *b, int slot, const ah_layer_spec *spec, uint32_t kblock, int role,
                     uint32_t layer, ah_error *err, ah_status *s)
{
    for (uint32_t i = 0; i < b->n_states; i++)
        if (b->states[i].slot == slot && b->states[i].role == role &&
            b->states[i].kblock == kblock && memcmp(&b->states[i].spec, spec, sizeof *spec) == 0)
            return (int)i;
    ah_context *ctx = NULL;
    *s = ah__host_open_context(b->host, slot, b->device_index, &ctx, err);
    if (*s != AH_OK) return -1;
    ah_device *dev = device_for(b, slot, ctx, err, s);
    if (!dev) return -1;
    bound_state *grown = ah__realloc(b->states, (b->n_states + 1) * sizeof *grown);
    if (!grown) {
        *s = AH_ERR_OUT_OF_MEMORY;
        snprintf(err->msg, sizeof err->msg, "out of memory while binding");
        return -1;
    }
    b->states = grown;
    bound_state *bs = &grown[b->n_states];
    memset(bs, 0, sizeof *bs);
    bs->slot = slot;
    bs->role = role;
    bs->spec = *spec;
    bs->dev = dev;
    bs->first_layer = layer;
    bs->ctx = ctx;
    bs->kblock = kblock;
    bs->split = -1;
    ah_layer_spec as_run = *spec; /* the plugin plans kernel blocks */
    ah_limits lim = b->limits;
    if (kblock) {
        const uint32_t m = spec->block_size / kblock;
        as_run.block_size = kblock;
        lim.num_blocks *= m;
        lim.max_blocks_per_req *= m;
    }
    *s = ops_of(b, slot)->state_create(ctx, &as_run, &lim, &bs->st);
    if (*s != AH_OK) {
        snprintf(err->msg, sizeof err->msg, "%s: creating a layer state failed: %s",
                 plugin_name(b, slot), ops_of(b, slot)->context_error(ctx));
        return -1;
    }
    return (int)b->n_states++;
}

static ah_status check_limits(const ah_limits *l, ah_error *err)
{
    if (l->struct_size < sizeof(ah_limits)) {
        snprintf(err->msg, sizeof err->msg, "ah_limits.struct_size %u is too small",
                 l->struct_size);
        return AH_ERR_ABI;
    }
    const char *zero = !l->max_num_reqs         ? "max_num_reqs"
                       : !l->max_num_tokens     ? "max_num_tokens"
                       : !l->max_blocks_per_req ? "max_blocks_per_req"
                       : !l->max_seq_len        ? "max_seq_len"
                       : !l->num_blocks         ? "num_blocks"
                                                : NULL;
    if (zero) {
        snprintf(err->msg, sizeof err->msg, "limits: %s must be at least 1", zero);
        return AH_ERR_INVALID_ARGUMENT;
    }
    return AH_OK;
}

/* Append (state, part) to list unless the state is there already. */
static int plan_add(ah_binding *b, int list, uint32_t state, uint32_t part)
{
    for (uint32_t i = 0; i < b->n_plans[list]; i++)
        if (b->plans[list][i].state == state) return 0;
    b->plans[list][b->n_plans[list]++] = (plan_item){state, part};
    return 0;
}

/* Tokens the decode part must be a multiple of for every token row of the
 * prefill part to stay 16-byte aligned (dense rows): q, new K/V, out, lse. */
static uint32_t row_granule(const ah_layer_spec *s)
{
    const size_t e = ah_dtype_size(s->q_dtype);
    const size_t rows[5] = {s->num_q_heads * s->qk_head_size * e,
                            s->num_kv_heads * s->qk_head_size * e,
                            s->num_kv_heads * s->v_head_size * e,
                            s->num_q_heads * s->v_head_size * e, s->num_q_heads * sizeof(float)};
    uint32_t g = 1;
    for (int i = 0; i < 5; i++) {
        uint32_t need = 16;
        while (need > 1 && rows[i] % need)
            need /= 2; /* the largest power of two dividing it, up to 16 */
        if (16 / need > g) g = 16 / need;
    }
    return g;
}

/* A batch is validated once per distinct KV-cache group, block size,
 * attention kind and padding fill among the states that may plan it.
 * Padded requests (captured batches) must then carry a seq_len every such
 * plugin accepts; plugins that declare different fills cannot share padded
 * batches. */
static void check_add(ah_binding *b, uint32_t state)
{
    const bound_state *s = &b->states[state];
    for (uint32_t c = 0; c < b->n_checks; c++) {
        const bound_state *cs = &b->states[b->checks[c]];
        if (cs->spec.block_size == s->spec.block_size && cs->spec.attn_type == s->spec.attn_type &&
            cs->spec.kv_group == s->spec.kv_group && seq_len_fill(b, cs) == seq_len_fill(b, s))
            return;
    }
    b->checks[b->n_checks++] = state;
}

/* KV-cache groups: how many, a group's layers agreeing in their resolved
 * paging (kv_layout AUTO resolves per backend), the window that decides
 * which released blocks a group may have, and per plan list the first
 * state of each group whose plugin cannot skip released blocks. */
static ah_status prepare_groups(ah_binding *b, ah_error *err)
{
    uint32_t G = 1;
    for (uint32_t i = 0; i < b->n_states; i++)
        if (!no_cache(&b->states[i].spec) && b->states[i].spec.kv_group + 1 > G)
            G = b->states[i].spec.kv_group + 1;
    b->n_groups = G;
    if (!(b->release_w = ah__calloc(G, sizeof *b->release_w)) ||
        !(b->release_why = ah__calloc(G, sizeof *b->release_why)) ||
        !(b->release_buf = ah__calloc(G, sizeof *b->release_buf)) ||
        !(b->released = ah__calloc(G, sizeof *b->released)) ||
        !(b->gbatch = ah__calloc(G, sizeof *b->gbatch)) ||
        !(b->dparts = ah__calloc(G, sizeof *b->dparts)))
        return AH_ERR_OUT_OF_MEMORY;
    for (int li = 0; li < LIST_COUNT; li++) {
        if (!(b->released_bad[li] = ah__calloc(G, sizeof(int32_t)))) return AH_ERR_OUT_OF_MEMORY;
        for (uint32_t g = 0; g < G; g++) b->released_bad[li][g] = -1;
    }
    uint32_t *first = ah__calloc(G, sizeof *first); /* a state of each group + 1 */
    if (!first) return AH_ERR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < b->n_states; i++) {
        const bound_state *bs = &b->states[i];
        if (no_cache(&bs->spec)) continue;
        const uint32_t g = bs->spec.kv_group;
        if (!first[g]) {
            first[g] = i + 1;
            b->release_w[g] = UINT32_MAX;
        }
        const bound_state *a = &b->states[first[g] - 1];
        if (G > 1 && (a->spec.kv_layout != bs->spec.kv_layout ||
                      a->spec.block_size != bs->spec.block_size)) {
            snprintf(err->msg, sizeof err->msg,
                     "layers %u (%s) and %u (%s) are both in kv_group %u but resolve to kv_layout "
                     "%s / %s, block_size %u / %u: a group shares one cache layout; set kv_layout "
                     "in the model description",
                     a->first_layer, plugin_name(b, a->slot), bs->first_layer,
                     plugin_name(b, bs->slot), g, ah_kv_layout_str(a->spec.kv_layout),
                     ah_kv_layout_str(bs->spec.kv_layout), a->spec.block_size, bs->spec.block_size);
            ah__free(first);
            return AH_ERR_INVALID_ARGUMENT;
        }
        uint32_t w = bs->spec.attn_type == AH_ATTN_DECODER ? bs->spec.sliding_window : 0;
        if (!w && b->release_w[g]) {
            snprintf(b->release_buf[g], sizeof b->release_buf[g],
                     "layer %u of kv_group %u has no sliding window", bs->first_layer, g);
            b->release_why[g] = b->release_buf[g];
        }
        if (w < b->release_w[g]) b->release_w[g] = w;
    }
    ah__free(first);
    for (uint32_t g = 0; g < G; g++) {
        if (b->release_w[g] == UINT32_MAX) b->release_w[g] = 0;
        if (!b->release_why[g]) b->release_why[g] = "the group has no sliding window";
    }
    for (int li = 0; li < LIST_COUNT; li++)
        for (uint32_t i = 0; i < b->n_plans[li]; i++) {
            const uint32_t si = b->plans[li][i].state;
            const bound_state *bs = &b->states[si];
            if (no_cache(&bs->spec)) continue;
            int32_t *bad = &b->released_bad[li][bs->spec.kv_group];
            if (*bad < 0 && !(caps_of(b, bs->slot)->features & AH_FEAT_RELEASED_BLOCKS))
                *bad = (int32_t)si;
        }
    return AH_OK;
}

/* Kernel-block pagings (kv_split.h), one per KV-cache group, kernel blocks
 * per cache block and device among the states that run on kernel blocks:
 * the translated table's buffers, sized from the limits, on the host and
 * (where the plugin has memory slots) on its device. */
static ah_status prepare_splits(ah_binding *b, ah_error *err)
{
    if (!(b->splits = ah__calloc(b->n_states ? b->n_states : 1, sizeof *b->splits)))
        return AH_ERR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < b->n_states; i++) {
        bound_state *bs = &b->states[i];
        if (!bs->kblock || no_cache(&bs->spec)) continue;
        const uint32_t m = bs->spec.block_size / bs->kblock, g = bs->spec.kv_group;
        for (uint32_t k = 0; k < b->n_splits && bs->split < 0; k++)
            if (b->splits[k].group == g && b->splits[k].m == m &&
                b->splits[k].dev_idx == bs->dev_idx)
                bs->split = (int32_t)k;
        if (bs->split >= 0) continue;
        if ((uint64_t)b->limits.num_blocks * m > INT32_MAX) {
            snprintf(err->msg, sizeof err->msg,
                     "layer %u: limits.num_blocks %u x %u kernel blocks per cache block passes "
                     "2^31 - 1 kernel blocks",
                     bs->first_layer, b->limits.num_blocks, m);
            return AH_ERR_INVALID_ARGUMENT;
        }
        ah__kv_split *sp = &b->splits[b->n_splits];
        sp->group = g;
        sp->m = m;
        sp->dev_idx = bs->dev_idx;
        sp->owner = i;
        const size_t bytes =
            (size_t)b->limits.max_num_reqs * b->limits.max_blocks_per_req * m * sizeof(int32_t);
        if (!(sp->host = ah__calloc(1, bytes))) return AH_ERR_OUT_OF_MEMORY;
        b->n_splits++;
        if (ops_of(b, bs->slot)->mem_alloc) {
            ah_status s = ah_device_alloc(bs->dev, bytes, &sp->dev);
            if (s != AH_OK) {
                snprintf(err->msg, sizeof err->msg, "%s: allocating the kernel-block table: %s",
                         plugin_name(b, bs->slot), ah_device_errmsg(bs->dev));
                return s;
            }
        }
        sp->table = (DLTensor){NULL, ah_device_dl(bs->dev), 2, {kDLInt, 32, 1}, NULL, NULL, 0};
        bs->split = (int32_t)(b->n_splits - 1);
    }
    return AH_OK;
}

/* Release device d's side stream and events. */
static void side_close(ah_binding *b, uint32_t d)
{
    const ah_plugin_ops *ops = ops_of(b, ah__device_slot(b->devs[d]));
    ah_context *ctx = ah__device_context(b->devs[d]);
    side_stream *ss = &b->side[d];
    if (ss->fork) ops->event_destroy(ctx, ss->fork);
    if (ss->join) ops->event_destroy(ctx, ss->join);
    if (ss->stream) ops->stream_destroy(ctx, ss->stream);
    memset(ss, 0, sizeof *ss);
}

/* Device d's side stream and events, where its plugin offers events. */
static ah_status side_open(ah_binding *b, uint32_t d)
{
    const ah_plugin_ops *ops = ops_of(b, ah__device_slot(b->devs[d]));
    ah_context *ctx = ah__device_context(b->devs[d]);
    side_stream *ss = &b->side[d];
    if (!ops->event_create || !ops->event_destroy || !ops->event_record || !ops->stream_wait ||
        !ops->stream_create || !ops->stream_destroy)
        return AH_OK;
    ah_status s = ops->stream_create(ctx, &ss->stream);
    if (s == AH_OK) s = ops->event_create(ctx, &ss->fork);
    if (s == AH_OK) s = ops->event_create(ctx, &ss->join);
    if (s != AH_OK) side_close(b, d);
    return s;
}

/* Whether a binding of sel splits layer l's mixed steps: two winners, or
 * one whose caps split mixed batches (prepare_steps' layer_split, from the
 * decisions). */
static int layer_splits(const ah_host *h, const ah_selection *sel, uint32_t l)
{
    if (ah_selection_layer_kind(sel, l) != AH_LAYER_ATTENTION) return 0;
    const ah_decision *p = ah_selection_decision(sel, l, AH_PHASE_PREFILL),
                      *d = ah_selection_decision(sel, l, AH_PHASE_DECODE);
    if (!p->plugin || !d->plugin) return 0;
    if (strcmp(p->plugin, d->plugin)) return 1;
    const ah_plugin_info *in = ah_host_find_plugin(h, p->plugin);
    return in && in->caps->mixed_batch == AH_MIXED_SPLIT;
}

/* How mixed steps run under mode (never CONFIG) for the layers split[]
 * marks (NULL: layer_splits), *n of them: WHOLE when none, else mode, and
 * for measured WHOLE where the tune table's sums of each layer's mixed
 * step whole on its prefill winner (*whole) and split with its decode
 * winner (*splt) say so; the sums are -1 when not measured or any is
 * untuned. One rule for bindings and ah_selection_mixed_steps. */
static ah_mixed_steps mixed_choice(ah_host *h, const ah_selection *sel, const uint8_t *split,
                                   ah_mixed_steps mode, uint32_t *n, double *whole, double *splt)
{
    *whole = *splt = 0;
    *n = 0;
    int tuned = mode == AH_MIXED_STEPS_MEASURED;
    for (uint32_t l = 0; l < ah_selection_num_layers(sel); l++) {
        if (split ? !split[l] : !layer_splits(h, sel, l)) continue;
        (*n)++;
        const ah_decision *p = ah_selection_decision(sel, l, AH_PHASE_PREFILL),
                          *d = ah_selection_decision(sel, l, AH_PHASE_DECODE);
        double w, sp;
        if (!tuned || !ah__tune_lookup_mixed(h, p->plugin, NULL, &p->spec, &w) ||
            !ah__tune_lookup_mixed(h, p->plugin, d->plugin, &p->spec, &sp)) {
            tuned = 0;
            continue;
        }
        *whole += w, *splt += sp;
    }
    if (!tuned || !*n) *whole = *splt = -1;
    if (!*n) return AH_MIXED_STEPS_WHOLE;
    if (mode != AH_MIXED_STEPS_MEASURED) return mode;
    return *whole >= 0 && *whole < *splt ? AH_MIXED_STEPS_WHOLE : AH_MIXED_STEPS_SPLIT;
}

/* Why binding b runs every mixed step whole by its mixed_steps, or NULL. */
static const char *mixed_whole_why(ah_binding *b)
{
    double whole, split;
    uint32_t n;
    if (mixed_choice(b->host, b->sel, b->layer_split, b->mixed, &n, &whole, &split) !=
        AH_MIXED_STEPS_WHOLE)
        return NULL;
    if (whole < 0) return WHY_CONFIG;
    snprintf(b->split_note, sizeof b->split_note,
             "mixed_steps = measured: attnhost tune timed the mixed step whole in %.4g ms "
             "against %.4g ms split, over the %u layer%s with two winners",
             whole, split, n, n == 1 ? "" : "s");
    return b->split_note;
}

/* Everything a step needs, fixed at creation: which layers split, the
 * decode threshold, the plan lists, the validation specs and the split
 * buffers (no allocation per step). */
static ah_status prepare_steps(ah_binding *b, ah_error *err)
{
    const uint32_t L = b->num_layers;
    if (!(b->layer_split = ah__calloc(L ? L : 1, 1))) return AH_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < LIST_COUNT; i++)
        if (!(b->plans[i] = ah__calloc(b->n_states ? b->n_states : 1, sizeof(plan_item))))
            return AH_ERR_OUT_OF_MEMORY;
    if (!(b->checks = ah__calloc(b->n_states ? b->n_states : 1, sizeof(uint32_t))) ||
        !(b->rchecks = ah__calloc(b->n_states ? b->n_states : 1, sizeof(uint32_t))))
        return AH_ERR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < b->n_states; i++)
        for (uint32_t d = 0; d < b->n_devs; d++)
            if (b->devs[d] == b->states[i].dev) b->states[i].dev_idx = d;
    uint32_t n_split = 0;
    b->decode_qmax = UINT32_MAX;
    b->split_granule = 1;
    for (uint32_t l = 0; l < L; l++) {
        const uint32_t sd = b->layer_state[AH_PHASE_DECODE][l],
                       sp = b->layer_state[AH_PHASE_PREFILL][l];
        if (sp == NO_STATE) continue; /* not attention: nothing to plan */
        const bound_state *D = &b->states[sd], *P = &b->states[sp];
        uint32_t qmax = caps_of(b, D->slot)->decode_query_len_max;
        if (!qmax) qmax = 1;
        if (qmax < b->decode_qmax) b->decode_qmax = qmax;
        plan_add(b, LIST_DECODE, sd, PART_WHOLE);
        plan_add(b, LIST_PREFILL, sp, PART_WHOLE);
        if (sd == sp) {
            plan_add(b, LIST_SPLIT, sp, PART_WHOLE);
        } else {
            b->layer_split[l] = 1;
            n_split++;
            plan_add(b, LIST_SPLIT, sd, PART_DECODE);
            plan_add(b, LIST_SPLIT, sp, PART_PREFILL);
            if (!caps_of(b, D->slot)->caller_output || !caps_of(b, P->slot)->caller_output)
                b->split_why = WHY_OUTPUT;
            uint32_t g = row_granule(&P->spec);
            if (g > b->split_granule) b->split_granule = g;
        }
        check_add(b, sp);
        check_add(b, sd);
        /* a ragged step: the prefill state (for write_kv into the paged
         * cache) and the ragged form (for attention) both plan it */
        plan_add(b, LIST_RAGGED, sp, PART_WHOLE);
        const uint32_t sr = b->layer_ragged[l];
        if (sr != NO_STATE) {
            plan_add(b, LIST_RAGGED, sr, PART_RAGGED);
            uint32_t k = 0;
            while (k < b->n_rchecks && b->rchecks[k] != sr) k++;
            if (k == b->n_rchecks) b->rchecks[b->n_rchecks++] = sr;
        }
    }
    if (!L) b->decode_qmax = 1;
    for (int li = 0; li < LIST_COUNT; li++) {
        b->mask_bad[li] = -1;
        for (uint32_t i = 0; i < b->n_plans[li] && b->mask_bad[li] < 0; i++) {
            const bound_state *bs = &b->states[b->plans[li][i].state];
            if (bs->spec.attn_type == AH_ATTN_DECODER &&
                !(caps_of(b, bs->slot)->features & AH_FEAT_TREE_MASK))
                b->mask_bad[li] = (int32_t)b->plans[li][i].state;
        }
    }
    if (b->decode_qmax == UINT32_MAX) b->decode_qmax = 1; /* no attention layer */
    ah_status gs = prepare_groups(b, err);
    if (gs == AH_OK) gs = prepare_splits(b, err);
    if (gs != AH_OK) return gs;
    if (!n_split) b->split_why = WHY_SAME;
    else if (!b->split_why) b->split_why = mixed_whole_why(b);
    if (b->split_why) return AH_OK;
    /* split buffers: the rebased query_start_loc on the host and, on each
     * device that serves a prefill part and has memory slots, its copy */
    const size_t qbytes = ((size_t)b->limits.max_num_reqs + 1) * sizeof(int32_t);
    if (!(b->qsl_host = ah__calloc(1, qbytes)) ||
        !(b->qsl_dev = ah__calloc(b->n_devs, sizeof(void *))) ||
        !(b->dev_prefill = ah__calloc(b->n_devs, 1)) ||
        !(b->pparts = ah__calloc((size_t)b->n_devs * b->n_groups, sizeof(ah_batch_part))))
        return AH_ERR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < b->n_plans[LIST_SPLIT]; i++) {
        const plan_item *it = &b->plans[LIST_SPLIT][i];
        if (it->part == PART_PREFILL) b->dev_prefill[b->states[it->state].dev_idx] = 1;
    }
    for (uint32_t d = 0; d < b->n_devs; d++) {
        if (!b->dev_prefill[d] || !ops_of(b, ah__device_slot(b->devs[d]))->mem_alloc) continue;
        ah_status s = ah_device_alloc(b->devs[d], qbytes, &b->qsl_dev[d]);
        if (s != AH_OK) {
            snprintf(err->msg, sizeof err->msg,
                     "%s: allocating the split batch's query_start_loc: %s",
                     plugin_name(b, ah__device_slot(b->devs[d])), ah_device_errmsg(b->devs[d]));
            return s;
        }
    }
    if (!(b->side = ah__calloc(b->n_devs, sizeof *b->side))) return AH_ERR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < b->n_plans[LIST_SPLIT]; i++) {
        const plan_item *it = &b->plans[LIST_SPLIT][i];
        const uint32_t d = b->states[it->state].dev_idx;
        if (it->part != PART_DECODE || b->side[d].stream) continue;
        ah_status s = side_open(b, d);
        if (s != AH_OK) {
            snprintf(err->msg, sizeof err->msg, "%s: the split step's decode stream: %s",
                     plugin_name(b, ah__device_slot(b->devs[d])),
                     ops_of(b, ah__device_slot(b->devs[d]))
                         ->context_error(ah__device_context(b->devs[d])));
            return s;
        }
    }
    return AH_OK;
}

/* What the context-parallel step needs of a state. */
static ah__cp_state cp_state(const ah_binding *b, const bound_state *bs)
{
    return (ah__cp_state){&bs->spec, caps_of(b, bs->slot),     ops_of(b, bs->slot),
                          bs->ctx,   plugin_name(b, bs->slot), bs->first_layer,
                          bs->dev};
}

static ah_status create_cp(ah_binding *b, const ah_cp_options *o, const ah_limits *engine,
                           ah_error *err)
{
    ah__cp_state *st = ah__calloc(b->n_states ? b->n_states : 1, sizeof *st);
    if (!st) return AH_ERR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < b->n_states; i++) st[i] = cp_state(b, &b->states[i]);
    ah_status s = ah__cp_create(o, engine, st, b->n_states, b->n_groups, b->validate, &b->cp, err);
    ah__free(st);
    return s;
}

ah_status ah_binding_create(ah_host *h, const ah_selection *sel, const ah_binding_options *o,
                            ah_binding **out, ah_error *err)
{
    *out = NULL;
    err->msg[0] = '\0';
    if (!o || o->struct_size < offsetof(ah_binding_options, device_index) + sizeof(int32_t)) {
        snprintf(err->msg, sizeof err->msg, "ah_binding_options missing or struct_size too small");
        return AH_ERR_ABI;
    }
    ah_status s = check_limits(&o->limits, err);
    if (s != AH_OK) return s;
    if (ah__selection_error(sel)) {
        snprintf(err->msg, sizeof err->msg, "the selection failed and cannot be bound: %s",
                 ah__selection_error(sel));
        return AH_ERR_INVALID_ARGUMENT;
    }
    if (o->device_index < 0) {
        snprintf(err->msg, sizeof err->msg,
                 "ah_binding_options.device_index = %d: a device index is 0 or more",
                 (int)o->device_index);
        return AH_ERR_INVALID_ARGUMENT;
    }
    const ah_mixed_steps mixed_opt =
        AH_HAS_FIELD(o, ah_binding_options, mixed_steps) ? o->mixed_steps : AH_MIXED_STEPS_CONFIG;
    if ((unsigned)mixed_opt > AH_MIXED_STEPS_MEASURED) {
        snprintf(err->msg, sizeof err->msg,
                 "ah_binding_options.mixed_steps = %d: not CONFIG, SPLIT, WHOLE or MEASURED",
                 (int)mixed_opt);
        return AH_ERR_INVALID_ARGUMENT;
    }

    ah_binding *b = ah__calloc(1, sizeof *b);
    if (!b) goto oom;
    b->host = h;
    b->sel = sel;
    const ah_cp_options *cpo = AH_HAS_FIELD(o, ah_binding_options, cp) ? o->cp : NULL;
    const int cp = ah__cp_wanted(cpo);
    b->limits = o->limits;
    if (cp) ah__cp_state_limits(&o->limits, &b->limits);
    b->device_index = o->device_index;
    b->mixed = mixed_opt ? mixed_opt : h->config.mixed_steps;
    b->validate = !o->no_validation && h->config.validate;
    b->why = "";
    b->num_layers = ah_selection_num_layers(sel);
    for (int p = 0; p < AH_PHASE_COUNT; p++)
        if (!(b->layer_state[p] = ah__calloc(b->num_layers ? b->num_layers : 1, sizeof(uint32_t))))
            goto oom;
    if (!(b->layer_ragged = ah__calloc(b->num_layers ? b->num_layers : 1, sizeof(uint32_t))))
        goto oom;
    b->ragged_unbound = -1;
    for (uint32_t l = 0; l < b->num_layers; l++) {
        const ah_decision *d[AH_PHASE_COUNT];
        int slot[AH_PHASE_COUNT];
        b->layer_ragged[l] = NO_STATE;
        if (ah_selection_layer_kind(sel, l) != AH_LAYER_ATTENTION) {
            b->layer_state[AH_PHASE_PREFILL][l] = b->layer_state[AH_PHASE_DECODE][l] = NO_STATE;
            continue;
        }
        for (int p = 0; p < AH_PHASE_COUNT; p++) {
            /* a context-parallel rank plans one-token queries only: the
             * decode winner serves both phases */
            d[p] = ah_selection_decision(sel, l, cp ? AH_PHASE_DECODE : (ah_phase)p);
            if (!d[p] || !d[p]->plugin) {
                snprintf(err->msg, sizeof err->msg, "layer %u (%s): no backend was selected", l,
                         p == AH_PHASE_PREFILL ? "prefill" : "decode");
                ah_binding_destroy(b);
                return AH_ERR_NOT_FOUND;
            }
            slot[p] = ah__host_find(h, d[p]->plugin);
            if (slot[p] < 0) {
                snprintf(err->msg, sizeof err->msg, "layer %u: plugin %s is gone", l, d[p]->plugin);
                ah_binding_destroy(b);
                return AH_ERR_NOT_FOUND;
            }
            ah_context *ctx; /* loads the plugin, so its caps are at hand */
            if ((s = ah__host_open_context(h, slot[p], b->device_index, &ctx, err)) != AH_OK) {
                ah_binding_destroy(b);
                return s;
            }
        }
        /* One state serves both phases of a layer when one plugin wins both
         * with one spec and takes mixed batches whole; otherwise each role
         * has its own state, so a split step plans both parts at once. */
        const int shared =
            cp || (slot[0] == slot[1] && memcmp(&d[0]->spec, &d[1]->spec, sizeof d[0]->spec) == 0 &&
                   d[0]->kernel_block_size == d[1]->kernel_block_size &&
                   caps_of(b, slot[0])->mixed_batch == AH_MIXED_WHOLE);
        if (cp && d[0]->kernel_block_size) {
            snprintf(err->msg, sizeof err->msg,
                     "layer %u: %s runs block size %u on kernel blocks of %u, which context "
                     "parallelism does not serve: set a block size it takes",
                     l, plugin_name(b, slot[0]), d[0]->spec.block_size, d[0]->kernel_block_size);
            ah_binding_destroy(b);
            return AH_ERR_UNSUPPORTED;
        }
        ah_layer_spec local = d[0]->spec;
        if (cp && (s = ah__cp_local_spec(cpo, l, plugin_name(b, slot[0]), &d[0]->spec, &local,
                                         err)) != AH_OK) {
            ah_binding_destroy(b);
            return s;
        }
        for (int p = 0; p < AH_PHASE_COUNT; p++) {
            int idx = state_for(b, slot[p], cp ? &local : &d[p]->spec, d[p]->kernel_block_size,
                                shared ? -1 : p, l, err, &s);
            if (idx < 0) {
                ah_binding_destroy(b);
                return s;
            }
            b->layer_state[p][l] = (uint32_t)idx;
        }
        /* ABI 2.3: the layer's ragged prefill form, where bound (a
         * context-parallel rank plans no ragged step) */
        const ah_decision *rd = ah_selection_ragged_decision(sel, l);
        if (rd && (cp || !ah_selection_ragged_bound(sel, l))) {
            if (b->ragged_unbound < 0) b->ragged_unbound = l;
        } else if (rd) {
            const int rs = ah__host_find(h, rd->plugin);
            int idx = rs < 0 ? -1
                             : state_for(b, rs, &rd->spec, rd->kernel_block_size, ROLE_RAGGED, l,
                                         err, &s);
            if (rs < 0) {
                snprintf(err->msg, sizeof err->msg, "layer %u: plugin %s is gone", l, rd->plugin);
                s = AH_ERR_NOT_FOUND;
            }
            if (idx < 0) {
                ah_binding_destroy(b);
                return s;
            }
            b->layer_ragged[l] = (uint32_t)idx;
            b->n_ragged++;
        }
    }
    if ((s = prepare_steps(b, err)) != AH_OK ||
        (cp && (s = create_cp(b, cpo, &o->limits, err)) != AH_OK)) {
        if (s == AH_ERR_OUT_OF_MEMORY && !err->msg[0])
            snprintf(err->msg, sizeof err->msg, "out of memory while binding");
        ah_binding_destroy(b);
        return s;
    }
    *out = b;
    return AH_OK;
oom:
    ah_binding_destroy(b);
    snprintf(err->msg, sizeof err->msg, "out of memory while binding");
    return AH_ERR_OUT_OF_MEMORY;
}

void ah_binding_destroy(ah_binding *b)
{
    if (!b) return;
    ah__cp_destroy(b->cp); /* its buffers live on the binding's device */
    for (uint32_t i = 0; i < b->n_states; i++)
        if (b->states[i].st) ops_of(b, b->states[i].slot)->state_destroy(b->states[i].st);
    for (uint32_t k = 0; k < b->n_splits; k++) {
        if (b->splits[k].dev) ah_device_free(b->devs[b->splits[k].dev_idx], b->splits[k].dev);
        ah__free(b->splits[k].host);
    }
    ah__free(b->splits);
    for (uint32_t i = 0; i < b->n_devs; i++) {
        if (b->qsl_dev && b->qsl_dev[i]) ah_device_free(b->devs[i], b->qsl_dev[i]);
        if (b->side) side_close(b, i);
        ah__device_close(b->devs[i]);
    }
    for (int p = 0; p < AH_PHASE_COUNT; p++) ah__free(b->layer_state[p]);
    ah__free(b->layer_ragged);
    ah__free(b->rchecks);
    for (int i = 0; i < LIST_COUNT; i++) {
        ah__free(b->plans[i]);
        ah__free(b->released_bad[i]);
    }
    ah__free(b->release_w);
    ah__free(b->release_why);
    ah__free(b->release_buf);
    ah__free(b->released);
    ah__free(b->gbatch);
    ah__free(b->dparts);
    ah__free(b->layer_split);
    ah__free(b->checks);
    ah__free(b->qsl_host);
    ah__free(b->qsl_dev);
    ah__free(b->dev_prefill);
    ah__free(b->side);
    ah__free(b->pparts);
    ah__free(b->states);
    ah__free(b->devs);
    ah__free(b);
}

const char *ah_binding_errmsg(const ah_binding *b) { return b->errmsg; }
ah_phase ah_binding_phase(const ah_binding *b) { return b->phase; }

/* Build the two parts of a split step; the prefill part's query_start_loc
 * goes to each device that plans one, on the step's stream. */
static ah_status build_parts(ah_binding *b, const ah_batch *batch, const ah_split_scan *sc,
                             void *stream)
{
    for (uint32_t g = 0; g < b->n_groups; g++)
        ah__batch_part_decode(&b->dparts[g], &b->gbatch[g], sc);
    ah__split_rebase_qsl(batch, sc->nd, b->qsl_host);
    const size_t bytes = ((size_t)batch->num_reqs - sc->nd + 1) * sizeof(int32_t);
    for (uint32_t d = 0; d < b->n_devs; d++) {
        if (!b->dev_prefill[d]) continue;
        void *dst = b->qsl_host;
        if (b->qsl_dev[d]) {
            const int slot = ah__device_slot(b->devs[d]);
            const ah_plugin_ops *ops = ops_of(b, slot);
            ah_context *ctx = ah__device_context(b->devs[d]);
            ah_status s = ops->mem_copy(ctx, b->qsl_dev[d], b->qsl_host, bytes,
                                        AH_COPY_HOST_TO_DEVICE, stream);
            if (s != AH_OK)
                return fail(b, s, "%s: copying the prefill part's query_start_loc failed: %s",
                            plugin_name(b, slot), ops->context_error(ctx));
            dst = b->qsl_dev[d];
        }
        for (uint32_t g = 0; g < b->n_groups; g++)
            ah__batch_part_prefill(&b->pparts[(size_t)g * b->n_devs + d], &b->gbatch[g], sc,
                                   b->qsl_host, dst);
        for (uint32_t k = 0; k < b->n_splits; k++)
            if (b->splits[k].dev_idx == d)
                ah__batch_part_prefill(&b->splits[k].ppart, &b->splits[k].batch, sc, b->qsl_host,
                                       dst);
    }
    for (uint32_t k = 0; k < b->n_splits; k++)
        ah__batch_part_decode(&b->splits[k].dpart, &b->splits[k].batch, sc);
    return AH_OK;
}

/* Each kernel-block paging's table for this step, from its group's host
 * table, copied to its device on the step's stream. A captured graph keeps
 * the widest row its limits allow. */
static ah_status translate_splits(ah_binding *b, ah_plan_mode mode, void *stream)
{
    for (uint32_t k = 0; k < b->n_splits; k++) {
        ah__kv_split *sp = &b->splits[k];
        const ah_batch *gb = &b->gbatch[sp->group];
        const bound_state *bs = &b->states[sp->owner];
        char why[256];
        uint32_t stride = 0;
        ah_status s = ah__kv_split_table(gb, bs->spec.block_size, sp->m, b->limits.max_num_reqs,
                                         b->limits.max_blocks_per_req, mode != AH_PLAN_EAGER,
                                         sp->host, &stride, why, sizeof why);
        if (s != AH_OK)
            return fail(b, s, "kv group %u, kernel blocks of %u: %s", sp->group, bs->kblock, why);
        ah__kv_split_batch(sp, gb, stride);
        if (!sp->dev || !gb->num_reqs) continue;
        const ah_plugin_ops *ops = ops_of(b, bs->slot);
        s = ops->mem_copy(bs->ctx, sp->dev, sp->host, (size_t)gb->num_reqs * stride * 4,
                          AH_COPY_HOST_TO_DEVICE, stream);
        if (s != AH_OK)
            return fail(b, s, "%s: copying the kernel-block table failed: %s",
                        plugin_name(b, bs->slot), ops->context_error(bs->ctx));
    }
    return AH_OK;
}

/* How a step is served: which plan list, split or not, and why not. */
typedef struct step_choice {
    ah_phase phase;
    int list, split;
    uint32_t nd, nd_tokens;
    const char *why;
    ah_split_scan sc;
} step_choice;

/* Validate the batch and choose how the step is served; nothing is
 * planned or copied yet. */
static ah_status choose_step(ah_binding *b, const ah_batch *batch, ah_plan_mode mode,
                             step_choice *c)
{
    if ((unsigned)mode > AH_PLAN_REPLAY)
        return fail(b, AH_ERR_INVALID_ARGUMENT, "unknown plan mode %d", mode);
    /* KV-cache groups: every group's view of the batch (pointers only) */
    const uint32_t nk = ah_batch_num_kv_groups(batch);
    if (nk ? nk != b->n_groups : b->n_groups > 1)
        return fail(
            b, AH_ERR_INVALID_ARGUMENT,
            "batch: num_kv_groups = %u, but the model has %u KV-cache groups: pass kv_groups "
            "with one entry per group%s",
            nk, b->n_groups, b->n_groups == 1 ? " (or none)" : "");
    for (uint32_t g = 0; g < b->n_groups; g++) {
        ah_error err;
        ah_status s = ah_batch_group_view(batch, g, &b->gbatch[g], &err);
        if (s != AH_OK) return fail(b, s, "batch: %s", err.msg);
        b->released[g] = 0;
        b->gbatch[g].cu_seqlens_k = NULL; /* only ragged forms see the keys' offsets */
        b->gbatch[g].cu_seqlens_k_host = NULL;
        b->gbatch[g].num_k_tokens = 0;
        b->gbatch[g].ragged_keys = AH_RAGGED_KEYS_BOTTOM_RIGHT;
    }
    const int ragged = ah_batch_cu_seqlens_k(batch) != NULL;
    if (!ragged && ah_batch_ragged_keys(batch) != AH_RAGGED_KEYS_BOTTOM_RIGHT)
        return fail(b, AH_ERR_INVALID_ARGUMENT,
                    "batch: ragged_keys = %u places ragged keys, but cu_seqlens_k is NULL: a "
                    "context step is a ragged step (give its keys' offsets)",
                    (unsigned)ah_batch_ragged_keys(batch));
    if (ragged) {
        if (b->ragged_unbound >= 0)
            return fail(b, AH_ERR_UNSUPPORTED,
                        "batch: cu_seqlens_k is set (a ragged step), but layer %u's ragged "
                        "prefill form is not bound%s (see ah_selection_ragged_decision): give "
                        "this layer's prefill batches without cu_seqlens_k",
                        (unsigned)b->ragged_unbound,
                        b->cp ? ": a context-parallel binding plans no ragged step" : "");
        if (!b->n_ragged)
            return fail(b, AH_ERR_INVALID_ARGUMENT,
                        "batch: cu_seqlens_k is set (a ragged step), but no layer has a ragged "
                        "prefill form (model key ragged_prefill), so nothing would read the "
                        "ragged keys");
        if (mode != AH_PLAN_EAGER)
            return fail(b, AH_ERR_UNSUPPORTED,
                        "batch: cu_seqlens_k is set, and a ragged step is planned eager only "
                        "(plan mode %d): CUDA graphs capture paged steps",
                        (int)mode);
        b->rbatch = b->gbatch[0];
        b->rbatch.cu_seqlens_k = batch->cu_seqlens_k;
        b->rbatch.cu_seqlens_k_host = batch->cu_seqlens_k_host;
        b->rbatch.num_k_tokens = batch->num_k_tokens;
        b->rbatch.ragged_keys = ah_batch_ragged_keys(batch);
    }
    for (uint32_t i = 0; ragged && b->validate && i < b->n_rchecks; i++) {
        ah_error err;
        const bound_state *rs = &b->states[b->rchecks[i]];
        ah_status s =
            ah__batch_validate_group(&b->rbatch, &rs->spec, &b->limits, seq_len_fill(b, rs),
                                     UINT32_MAX, 0, "", NULL, 0, &err);
        if (s != AH_OK)
            return fail(b, s, "batch: layer %u's ragged form: %s", rs->first_layer, err.msg);
    }
    if (b->validate)
        for (uint32_t i = 0; i < b->n_checks; i++) {
            ah_error err;
            const bound_state *cs = &b->states[b->checks[i]];
            const uint32_t g = no_cache(&cs->spec) ? 0 : cs->spec.kv_group;
            int rel = 0;
            ah_status s = ah__batch_validate_group(
                &b->gbatch[g], &cs->spec, &b->limits, seq_len_fill(b, cs), nk ? g : UINT32_MAX,
                b->release_w[g], b->release_why[g], &rel, b->cp != NULL, &err);
            if (s != AH_OK) return fail(b, s, "batch: %s", err.msg);
            if (rel) b->released[g] = 1;
        }

    /* decode requests: query_len <= decode_qmax; split when they lead */
    c->phase = AH_PHASE_DECODE;
    c->list = LIST_DECODE;
    c->split = 0;
    c->nd = batch->num_reqs;
    c->nd_tokens = batch->num_tokens;
    c->why = "";
    if (ragged) { /* whole: the ragged forms read the whole batch's keys */
        c->phase = AH_PHASE_PREFILL;
        c->list = LIST_RAGGED;
        c->nd = c->nd_tokens = 0;
        for (uint32_t r = 0; r < batch->num_reqs && !*c->why; r++)
            if ((uint32_t)(batch->query_start_loc_host[r + 1] - batch->query_start_loc_host[r]) <=
                b->decode_qmax)
                c->why = WHY_RAGGED;
    } else if (batch->max_query_len > b->decode_qmax) {
        ah_split_scan *sc = &c->sc;
        ah__split_scan(batch, b->decode_qmax, sc);
        if (sc->nd < batch->num_reqs) {
            c->phase = AH_PHASE_PREFILL;
            c->list = LIST_PREFILL;
            c->nd = c->nd_tokens = 0;
            if (sc->nd || sc->decode_later) {
                const char *why = sc->decode_later                   ? WHY_ORDER
                                  : b->split_why                     ? b->split_why
                                  : mode != AH_PLAN_EAGER            ? WHY_GRAPH
                                  : batch->common_prefix_len         ? WHY_CASCADE
                                  : sc->nd_tokens % b->split_granule ? WHY_ALIGN
                                                                     : NULL;
                c->why = why ? why : "";
                if (!why) {
                    c->split = 1;
                    c->list = LIST_SPLIT;
                    c->nd = sc->nd;
                    c->nd_tokens = sc->nd_tokens;
                }
            }
        }
    }
    /* A tree mask goes only to plugins that claim it: whole on the prefill
     * winners when a decode winner lacks it, an error when one of those does. */
    if (batch->custom_mask_host && b->mask_bad[c->list] >= 0 && c->list != LIST_PREFILL) {
        c->list = LIST_PREFILL;
        c->phase = AH_PHASE_PREFILL;
        c->split = 0;
        c->nd = c->nd_tokens = 0;
        c->why = WHY_MASK;
    }
    if (batch->custom_mask_host && b->mask_bad[c->list] >= 0) {
        const bound_state *bad = &b->states[b->mask_bad[c->list]];
        return fail(b, AH_ERR_UNSUPPORTED,
                    "batch: custom_mask is set, but layer %u's %s does not claim the tree_mask "
                    "feature",
                    bad->first_layer, plugin_name(b, bad->slot));
    }
    /* Released blocks go only to plugins that never read them. */
    for (uint32_t g = 0; g < b->n_groups; g++)
        if (b->released[g] && b->released_bad[c->list][g] >= 0) {
            const bound_state *bad = &b->states[b->released_bad[c->list][g]];
            return fail(
                b, AH_ERR_UNSUPPORTED,
                "batch: kv group %u has released blocks (negative block_table entries), but "
                "layer %u's %s does not claim the released_blocks feature, so it might read "
                "them: keep those blocks in the table for this plugin",
                g, bad->first_layer, plugin_name(b, bad->slot));
        }
    return AH_OK;
}

static const char *const part_names[] = {"", " (decode part)", " (prefill part)", " (ragged form)"};

/* The smallest ah_batch accepted: ABI 2.0's. */
#define BATCH_SIZE_20 (offsetof(ah_batch, common_prefix_len) + sizeof(uint32_t))

ah_status ah_binding_plan(ah_binding *b, const ah_batch *engine_batch, ah_plan_mode mode,
                          void *stream)
{
    b->planned = 0;
    if (!engine_batch || engine_batch->struct_size < BATCH_SIZE_20)
        return fail(b, AH_ERR_ABI, "batch missing or ah_batch.struct_size too small");
    /* An older batch lacks the later fields: read it into a zeroed full
     * struct the binding owns (plugins may keep the pointer until the step
     * ends). */
    ah_batch *whole = &b->batch;
    memset(whole, 0, sizeof *whole);
    memcpy(whole, engine_batch,
           engine_batch->struct_size < sizeof *whole ? engine_batch->struct_size : sizeof *whole);
    whole->struct_size = sizeof *whole;
    const ah_batch *batch = whole;
    ah_status s = AH_OK;
    if (b->cp) { /* this rank's share of the step */
        ah_error err;
        if ((s = ah__cp_local_batch(b->cp, whole, mode, stream, &batch, &err)) != AH_OK)
            fail(b, s, "%s", err.msg);
    }
    step_choice c;
    if (s == AH_OK) s = choose_step(b, batch, mode, &c);
    if (b->cp) { /* every rank runs the step, or none does */
        ah_error err;
        ah_status all = ah__cp_agree(b->cp, s, whole, stream, &err);
        if (s == AH_OK && all != AH_OK) return fail(b, all, "%s", err.msg);
    }
    if (s != AH_OK) return s;
    if ((s = translate_splits(b, mode, stream)) != AH_OK) return s;
    if (c.split && (s = build_parts(b, batch, &c.sc, stream)) != AH_OK) return s;
    for (uint32_t i = 0; i < b->n_plans[c.list]; i++) {
        const plan_item *it = &b->plans[c.list][i];
        bound_state *bs = &b->states[it->state];
        const uint32_t g = no_cache(&bs->spec) ? 0 : bs->spec.kv_group;
        const ah__kv_split *sp = bs->split >= 0 ? &b->splits[bs->split] : NULL;
        const ah_batch *part = it->part == PART_WHOLE    ? (sp ? &sp->batch : &b->gbatch[g])
                               : it->part == PART_RAGGED ? &b->rbatch
                               : it->part == PART_DECODE
                                   ? (sp ? &sp->dpart.batch : &b->dparts[g].batch)
                               : sp ? &sp->ppart.batch
                                    : &b->pparts[(size_t)g * b->n_devs + bs->dev_idx].batch;
        const ah_plugin_ops *ops = ops_of(b, bs->slot);
        s = ops->plan(bs->st, part, mode, stream);
        if (s != AH_OK)
            return fail(b, s, "layer %u: %s plan%s failed: %s", bs->first_layer,
                        plugin_name(b, bs->slot), part_names[it->part], ops->state_error(bs->st));
    }
    b->phase = c.phase;
    b->split = c.split;
    b->nd = c.nd;
    b->nd_tokens = c.nd_tokens;
    b->why = c.why;
    b->ragged_step = c.list == LIST_RAGGED;
    b->planned = 1;
    return AH_OK;
}

/* AH_ERR_INVALID_ARGUMENT naming the layer and its kind when layer is not
 * an attention layer (it has no state), else AH_OK. */
static ah_status attention_layer(ah_binding *b, uint32_t layer)
{
    if (b->layer_state[AH_PHASE_PREFILL][layer] != NO_STATE) return AH_OK;
    const char *kind = ah_layer_kind_str(ah_selection_layer_kind(b->sel, layer));
    return fail(b, AH_ERR_INVALID_ARGUMENT,
                "layer %u is a %s layer, not attention: the model declares it so, and nothing "
                "is bound to it",
                layer, kind);
}

/* The layer's state in the planned phase, or NULL with errmsg set. */
static bound_state *planned_state(ah_binding *b, uint32_t layer)
{
    if (layer >= b->num_layers) {
        fail(b, AH_ERR_INVALID_ARGUMENT, "layer %u out of range (the model has %u)", layer,
             b->num_layers);
        return NULL;
    }
    if (attention_layer(b, layer) != AH_OK) return NULL;
    if (!b->planned) {
        fail(b, AH_ERR_INVALID_ARGUMENT, "no planned batch: call ah_binding_plan first");
        return NULL;
    }
    return &b->states[b->layer_state[b->phase][layer]];
}

static int split_layer(const ah_binding *b, uint32_t layer)
{
    return b->split && b->layer_split[layer];
}

/* The planned batch as bs's KV-cache group (or ragged form) sees it. */
static const ah_batch *group_batch(const ah_binding *b, const bound_state *bs)
{
    if (bs->role == ROLE_RAGGED) return &b->rbatch;
    return &b->gbatch[no_cache(&bs->spec) ? 0 : bs->spec.kv_group];
}

static ah_status check_kv_args(ah_binding *b, uint32_t layer, const bound_state *bs,
                               const ah_kv_write_args *a)
{
    if (!b->validate) return AH_OK;
    DLDevice dev = ah_device_dl(bs->dev);
    char why[512];
    ah_status s = ah__check_kv_write_args(&bs->spec, group_batch(b, bs), a, &dev, why, sizeof why);
    return s == AH_OK ? s : fail(b, s, "layer %u: %s", layer, why);
}

/* The caches as a state on kernel blocks sees them (kv_split.h): views
 * into v of the engine's tensors, in place of *kc and *vc. A tensor that
 * is not 4-dim (validation off) goes as it is, for the plugin to refuse. */
typedef struct kernel_views {
    DLTensor kc, vc;
    int64_t ks[4], kst[4], vs[4], vst[4];
} kernel_views;

static void kernel_caches(const bound_state *bs, const DLTensor **kc, const DLTensor **vc,
                          kernel_views *v)
{
    if (!bs->kblock || bs->split < 0) return;
    const uint32_t m = bs->spec.block_size / bs->kblock;
    if (*kc && (*kc)->ndim == 4 && (*kc)->shape) {
        ah__kv_split_cache(*kc, m, &v->kc, v->ks, v->kst);
        *kc = &v->kc;
    }
    if (*vc && (*vc)->ndim == 4 && (*vc)->shape) {
        ah__kv_split_cache(*vc, m, &v->vc, v->vs, v->vst);
        *vc = &v->vc;
    }
}

/* The plugin's write_kv on its state (args already checked). */
static ah_status call_write_kv(ah_binding *b, uint32_t layer, bound_state *bs,
                               const ah_kv_write_args *args)
{
    const ah_plugin_ops *ops = ops_of(b, bs->slot);
    if (!ops->write_kv)
        return fail(b, AH_ERR_UNSUPPORTED, "layer %u: %s stores K/V only inside forward", layer,
                    plugin_name(b, bs->slot));
    ah_kv_write_args kw = *args, *a = &kw;
    kernel_views v;
    kernel_caches(bs, &kw.key_cache, &kw.value_cache, &v);
    ah_status s = ops->write_kv(bs->st, a);
    return s == AH_OK ? s
                      : fail(b, s, "layer %u: %s write_kv failed: %s", layer,
                             plugin_name(b, bs->slot), ops->state_error(bs->st));
}

static ah_status call_forward(ah_binding *b, uint32_t layer, bound_state *bs,
                              const ah_forward_args *args)
{
    const ah_plugin_ops *ops = ops_of(b, bs->slot);
    ah_forward_args fa = *args;
    kernel_views v;
    kernel_caches(bs, &fa.key_cache, &fa.value_cache, &v);
    ah_status s = ops->forward(bs->st, &fa);
    return s == AH_OK ? s
                      : fail(b, s, "layer %u: %s forward failed: %s", layer,
                             plugin_name(b, bs->slot), ops->state_error(bs->st));
}

/* The K/V store of forward's arguments a: new rows key / value (the whole
 * step's or one part's) into a's caches, with a's scales. */
static ah_kv_write_args kv_args_of(const ah_forward_args *a, const DLTensor *key,
                                   const DLTensor *value)
{
    ah_kv_write_args kv;
    memset(&kv, 0, sizeof kv);
    kv.struct_size = sizeof kv;
    kv.key = key;
    kv.value = value;
    kv.key_cache = a->key_cache;
    kv.value_cache = a->value_cache;
    kv.k_scale = a->k_scale;
    kv.v_scale = a->v_scale;
    kv.stream = a->stream;
    kv.k_scale_tensor = a->k_scale_tensor;
    kv.v_scale_tensor = a->v_scale_tensor;
    return kv;
}

/* Token-row views of one part's tensors. */
typedef struct part_views {
    DLTensor q, key, value, out, lse;
    int64_t sq[4], sk[4], sv[4], so[4], sl[4];
} part_views;

/* t's rows [r0, r0 + n) as *view (its shape in sh), or NULL for no t;
 * *bad names the first tensor whose view is misaligned. */
static DLTensor *part_view(const DLTensor *t, const char *name, int64_t r0, int64_t n,
                           DLTensor *view, int64_t *sh, const char **bad)
{
    if (!t) return NULL;
    if (ah__row_view(t, r0, n, view, sh) && !*bad) *bad = name;
    return view;
}

/* Views of rows [r0, r0 + n) of a's per-token tensors into *o (the rest as
 * in a); the name of a tensor whose view is misaligned, or NULL. */
static const char *part_args(const ah_forward_args *a, int64_t r0, int64_t n, part_views *v,
                             ah_forward_args *o)
{
    const char *bad = NULL;
    *o = *a;
    o->q = part_view(a->q, "q", r0, n, &v->q, v->sq, &bad);
    o->key = part_view(a->key, "key", r0, n, &v->key, v->sk, &bad);
    o->value = part_view(a->value, "value", r0, n, &v->value, v->sv, &bad);
    o->out = part_view(a->out, "out", r0, n, &v->out, v->so, &bad);
    o->lse = part_view(a->lse, "lse", r0, n, &v->lse, v->sl, &bad);
    return bad;
}

/* Device d's side stream after what `stream` queued so far (join = 0), or
 * `stream` after what the side stream queued (join = 1). */
static ah_status side_order(ah_binding *b, uint32_t d, void *stream, int join)
{
    const int slot = ah__device_slot(b->devs[d]);
    const ah_plugin_ops *ops = ops_of(b, slot);
    ah_context *ctx = ah__device_context(b->devs[d]);
    const side_stream *ss = &b->side[d];
    void *from = join ? ss->stream : stream, *to = join ? stream : ss->stream;
    ah_event *e = join ? ss->join : ss->fork;
    ah_status s = ops->event_record(ctx, e, from);
    if (s == AH_OK) s = ops->stream_wait(ctx, to, e);
    return s == AH_OK ? s
                      : fail(b, s, "%s: ordering the split step's streams failed: %s",
                             plugin_name(b, slot), ops->context_error(ctx));
}

/* Both parts of a split layer, each its K/V then its attention: the decode
 * winner on the first nd_tokens rows and the prefill winner on the rest,
 * both writing into the caller's out. Where the decode winner's device
 * has a side stream and both winners are of one device kind, the decode
 * part runs there, at the same time as the prefill part on the engine's
 * stream, forked from and joined back into it. */
static ah_status forward_split(ah_binding *b, uint32_t layer, const ah_forward_args *a, int attend)
{
    bound_state *st[2] = {&b->states[b->layer_state[AH_PHASE_DECODE][layer]],
                          &b->states[b->layer_state[AH_PHASE_PREFILL][layer]]};
    const int64_t rows[2][2] = {{0, b->nd_tokens},
                                {b->nd_tokens, b->batch.num_tokens - b->nd_tokens}};
    part_views v[2];
    ah_forward_args pa[2];
    for (int i = 0; i < 2; i++) {
        const char *bad = part_args(a, rows[i][0], rows[i][1], &v[i], &pa[i]);
        if (bad && b->validate)
            return fail(b, AH_ERR_INVALID_ARGUMENT,
                        "layer %u: %s: the prefill part starting at token %u is not 16-byte "
                        "aligned (its row pitch is not a multiple of 16 bytes)",
                        layer, bad, b->nd_tokens);
    }
    const uint32_t d = st[0]->dev_idx;
    const int side = attend && b->side && b->side[d].stream &&
                     ah_device_kind_of(st[0]->dev) == ah_device_kind_of(st[1]->dev);
    ah_status s;
    if (side) {
        if ((s = side_order(b, d, a->stream, 0)) != AH_OK) return s;
        pa[0].stream = b->side[d].stream;
    }
    for (int i = 0; i < 2; i++) {
        if (a->key && !no_cache(&st[1]->spec) &&
            !(attend && caps_of(b, st[i]->slot)->forward_writes_kv)) {
            const ah_kv_write_args kv = kv_args_of(&pa[i], pa[i].key, pa[i].value);
            if ((s = call_write_kv(b, layer, st[i], &kv)) != AH_OK) return s;
        }
        if (attend && (s = call_forward(b, layer, st[i], &pa[i])) != AH_OK) return s;
    }
    return side ? side_order(b, d, a->stream, 1) : AH_OK;
}

/* One state's K/V store (unless its forward stores them) and attention. */
static ah_status forward_one(ah_binding *b, uint32_t layer, bound_state *bs,
                             const ah_forward_args *a)
{
    if (a->key && !no_cache(&bs->spec) && !caps_of(b, bs->slot)->forward_writes_kv) {
        const ah_kv_write_args kv = kv_args_of(a, a->key, a->value);
        ah_status s = call_write_kv(b, layer, bs, &kv);
        if (s != AH_OK) return s;
    }
    return call_forward(b, layer, bs, a);
}

/* A context-parallel rank: attention over its shard into its partial
 * buffer, then every rank's partial gathered and merged into a->out. */
static ah_status forward_cp(ah_binding *b, uint32_t layer, bound_state *bs,
                            const ah_forward_args *a)
{
    const ah__cp_state st = cp_state(b, bs);
    ah_forward_args local;
    ah_error err;
    ah_status s = ah__cp_forward_begin(b->cp, &st, a, &local, &err);
    if (s != AH_OK) return fail(b, s, "%s", err.msg);
    if ((s = forward_one(b, layer, bs, &local)) != AH_OK) return s;
    s = ah__cp_forward_end(b->cp, &st, a, &err);
    return s == AH_OK ? s : fail(b, s, "%s", err.msg);
}

ah_status ah_binding_write_kv(ah_binding *b, uint32_t layer, const ah_kv_write_args *engine_args)
{
    bound_state *bs = planned_state(b, layer);
    if (!bs) return AH_ERR_INVALID_ARGUMENT;
    ah_kv_write_args full; /* an older engine's args, later fields zero */
    if (!ah__kv_write_args_full(engine_args, &full))
        return fail(b, AH_ERR_ABI, "ah_kv_write_args missing or struct_size too small");
    const ah_kv_write_args *a = &full;
    if (ah_spec_cacheless(&bs->spec))
        return fail(b, AH_ERR_INVALID_ARGUMENT,
                    "layer %u: write_kv on a cacheless (%s) layer: it has no KV cache", layer,
                    ah_attn_type_str(bs->spec.attn_type));
    ah_status s = check_kv_args(b, layer, bs, a);
    if (s != AH_OK) return s;
    if (!split_layer(b, layer)) return call_write_kv(b, layer, bs, a);
    ah_forward_args fa;
    memset(&fa, 0, sizeof fa);
    fa.struct_size = sizeof fa;
    fa.key = a->key;
    fa.value = a->value;
    fa.key_cache = a->key_cache;
    fa.value_cache = a->value_cache;
    fa.k_scale = a->k_scale;
    fa.v_scale = a->v_scale;
    fa.stream = a->stream;
    fa.k_scale_tensor = a->k_scale_tensor;
    fa.v_scale_tensor = a->v_scale_tensor;
    return forward_split(b, layer, &fa, 0);
}

static ah_status forward_layer(ah_binding *b, uint32_t layer, const ah_forward_args *engine_args)
{
    bound_state *bs = planned_state(b, layer);
    if (!bs) return AH_ERR_INVALID_ARGUMENT;
    /* a ragged step: the layer's ragged form attends over forward's packed
     * keys (its paged state was planned for write_kv) */
    if (b->ragged_step && b->layer_ragged[layer] != NO_STATE)
        bs = &b->states[b->layer_ragged[layer]];
    /* An older engine's args, later fields zero. Plugins keep no pointer to
     * the args struct past the call (an emulated graph copies it), so one
     * on the stack serves. */
    ah_forward_args full;
    if (!ah__forward_args_full(engine_args, &full))
        return fail(b, AH_ERR_ABI, "ah_forward_args missing or struct_size too small");
    const ah_forward_args *a = &full;
    /* validation on or off: a plugin's forward would store these K/V */
    if (bs->spec.attn_type == AH_ATTN_ENCODER_DECODER && (a->key || a->value))
        return fail(b, AH_ERR_INVALID_ARGUMENT,
                    "layer %u: %s is set, but a cross-attention (encoder_decoder) layer's cache "
                    "holds the encoder's K/V, written by ah_binding_write_kv on the encoder "
                    "pass; forward never writes it (pass NULL)",
                    layer, a->key ? "key" : "value");
    if (b->validate) {
        /* once, on the whole tensors, before any split */
        DLDevice dev = ah_device_dl(bs->dev);
        char why[512];
        ah_status s =
            ah__check_forward_args(&bs->spec, group_batch(b, bs), a, &dev, why, sizeof why);
        if (s != AH_OK) return fail(b, s, "layer %u: %s", layer, why);
    }
    if (b->cp) return forward_cp(b, layer, bs, a);
    if (split_layer(b, layer)) return forward_split(b, layer, a, 1);
    return forward_one(b, layer, bs, a);
}

ah_status ah_binding_forward(ah_binding *b, uint32_t layer, const ah_forward_args *engine_args)
{
    ah_status s = forward_layer(b, layer, engine_args);
    /* A context-parallel rank that fails after the step's check would leave
     * the others waiting in the layer's all-gather: tell the group. */
    if (s != AH_OK && b->cp) ah__cp_fail(b->cp, ah_binding_errmsg(b));
    return s;
}

ah_status ah_binding_merge_states(ah_binding *b, uint32_t layer, const ah_merge_args *a)
{
    if (layer >= b->num_layers)
        return fail(b, AH_ERR_INVALID_ARGUMENT, "layer %u out of range", layer);
    if (attention_layer(b, layer) != AH_OK) return AH_ERR_INVALID_ARGUMENT;
    bound_state *bs = &b->states[b->layer_state[b->phase][layer]];
    const ah_plugin_ops *ops = ops_of(b, bs->slot);
    if (!ops->merge_states)
        return fail(b, AH_ERR_UNSUPPORTED, "%s offers no merge_states", plugin_name(b, bs->slot));
    if (!a || a->struct_size < sizeof(ah_merge_args))
        return fail(b, AH_ERR_ABI, "ah_merge_args missing or struct_size too small");
    ah_context *ctx = bs->ctx;
    ah_status s = ops->merge_states(ctx, a);
    return s == AH_OK ? s
                      : fail(b, s, "%s merge_states failed: %s", plugin_name(b, bs->slot),
                             ops->context_error(ctx));
}

/* ABI 2.2's ah_kv_cache_desc: the fields before the layout's. */
#define KV_DESC_SIZE_22 offsetof(ah_kv_cache_desc, alloc_ndim)

/* One cache tensor of head size d (see kv_layout.h) into *o, as much as
 * size bytes of it hold. */
static void cache_desc(const ah_layer_spec *s, uint32_t num_blocks, uint32_t d, int value,
                       size_t size, ah_kv_cache_desc *o)
{
    ah_kv_cache_desc full;
    memset(&full, 0, sizeof full);
    full.struct_size = (uint32_t)size;
    full.kv_dtype = s->kv_dtype;
    if (d) {
        ah__kv_geom g;
        ah__kv_geom_of(s, num_blocks, d, value, &g);
        full.ndim = 4;
        full.dl_dtype = ah_dtype_to_dl(s->kv_dtype);
        memcpy(full.shape, g.shape, sizeof g.shape);
        memcpy(full.strides, g.strides, sizeof g.strides);
        full.alloc_ndim = g.alloc_ndim;
        memcpy(full.alloc_shape, g.alloc_shape, sizeof g.alloc_shape);
        full.offset = g.offset;
        full.in_key_alloc = (uint32_t)(value && ah_kv_layout_is_interleaved(s->kv_layout));
    }
    memcpy(o, &full, size);
}

/* The bytes of an ah_kv_cache_desc the caller's struct_size lets the host
 * write, or 0 when it is too small. */
static size_t desc_size(const ah_kv_cache_desc *d)
{
    if (d->struct_size == 0) return KV_DESC_SIZE_22;
    if (d->struct_size < KV_DESC_SIZE_22) return 0;
    return d->struct_size < sizeof *d ? d->struct_size : sizeof *d;
}

ah_status ah_binding_kv_cache_desc(ah_binding *b, uint32_t layer, uint32_t num_blocks,
                                   ah_kv_cache_desc *key, ah_kv_cache_desc *value)
{
    if (layer >= b->num_layers)
        return fail(b, AH_ERR_INVALID_ARGUMENT, "layer %u out of range (the model has %u)", layer,
                    b->num_layers);
    if (!key || !value)
        return fail(b, AH_ERR_INVALID_ARGUMENT,
                    "ah_binding_kv_cache_desc: key and value are required");
    const size_t ks = desc_size(key), vs = desc_size(value);
    if (!ks || !vs)
        return fail(b, AH_ERR_ABI,
                    "ah_binding_kv_cache_desc: %s->struct_size = %u is smaller than ABI 2.2's %zu: "
                    "set it to sizeof(ah_kv_cache_desc)",
                    ks ? "value" : "key", ks ? value->struct_size : key->struct_size,
                    KV_DESC_SIZE_22);
    if (attention_layer(b, layer) != AH_OK) return AH_ERR_INVALID_ARGUMENT;
    const ah_layer_spec *s = &b->states[b->layer_state[AH_PHASE_PREFILL][layer]].spec;
    cache_desc(s, num_blocks, s->qk_head_size, 0, ks, key);
    cache_desc(s, num_blocks, s->use_mla ? 0 : s->v_head_size, 1, vs, value);
    return AH_OK;
}

uint32_t ah_binding_block_size(const ah_binding *b, uint32_t layer, ah_phase phase,
                               uint32_t *kernel)
{
    if (kernel) *kernel = 0;
    if (layer >= b->num_layers || (unsigned)phase >= AH_PHASE_COUNT ||
        b->layer_state[phase][layer] == NO_STATE)
        return 0;
    const bound_state *bs = &b->states[b->layer_state[phase][layer]];
    if (kernel) *kernel = bs->kblock ? bs->kblock : bs->spec.block_size;
    return bs->spec.block_size;
}

uint32_t ah_binding_split(const ah_binding *b, uint32_t *decode_tokens, const char **why)
{
    if (decode_tokens) *decode_tokens = b->planned ? b->nd_tokens : 0;
    if (why) *why = b->planned ? b->why : "";
    return b->planned ? b->nd : 0;
}

ah_mixed_steps ah_selection_mixed_steps(ah_host *h, const ah_selection *sel, uint32_t *split_layers,
                                        double *whole_ms, double *split_ms)
{
    double whole = -1, split = -1;
    uint32_t n = 0;
    const ah_mixed_steps how =
        h && sel ? mixed_choice(h, sel, NULL, h->config.mixed_steps, &n, &whole, &split)
                 : AH_MIXED_STEPS_WHOLE;
    if (split_layers) *split_layers = n;
    if (whole_ms) *whole_ms = whole;
    if (split_ms) *split_ms = split;
    return how;
}

ah_device *ah_binding_device(ah_binding *b, uint32_t layer, ah_phase phase)
{
    if (layer >= b->num_layers || (unsigned)phase >= AH_PHASE_COUNT) return NULL;
    if (b->layer_state[phase][layer] == NO_STATE) return NULL; /* not attention */
    return b->states[b->layer_state[phase][layer]].dev;
}
