/*
 * Context parallelism in a binding: KV position p lives on rank
 * (p / I) % W (I the interleave, W the world size), so a rank holds, of a
 * request's n positions, L(n) = (n / (I W)) I + clamp(n mod (I W) - r I,
 * 0, I), the first ones in position order. A query token at position p
 * sees, on rank r, its first L(p + 1) local keys (L(n) of them when the
 * layer is not causal): a prefix of the shard, so one query token is one
 * ordinary decode request of that length. A step with only one-token
 * queries keeps the engine's requests and swaps in the local lengths; a
 * longer query becomes one request per token (block-table rows copied), so
 * every plugin computes exactly the keys the whole-cache result sums.
 *
 * Each layer's plugin writes its partial output and LSE into this rank's
 * send buffer (out then lse, 256-byte aligned), one all-gather brings every
 * rank's into recv, and W - 1 merge_states calls fold them into the
 * engine's out in rank order.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "cp.h"
#include "cp_comm.h"

#include <attnhost/plugin_util.h>

#define CP_ALIGN 256
#define CP_CHECK_INTS 4 /* status, num_reqs, num_tokens, checksum */

/* A 1-D or 2-D int32 tensor the rank owns, pointing at its own shape. */
typedef struct cp_tensor {
    DLTensor t;
    int64_t shape[2];
    void *dev;     /* device buffer (NULL on host memory: host serves) */
    size_t cap;    /* bytes of dev / host */
    int32_t *host; /* host copy */
} cp_tensor;

struct ah__cp {
    uint32_t world, rank, interleave;
    int validate; /* the binding checks batches (not a trusted engine's) */
    int causal;   /* the decoder layers' causality (one for the whole model) */
    ah__cp_comm *comm;
    ah_device *dev;   /* where the buffers live: every state's device */
    ah__cp_mem mem;   /* dev's plugin ops; stream set per step */
    ah_limits limits; /* the engine's */
    uint32_t n_groups;
    uint32_t *group_block; /* block size per KV-cache group */
    /* the step's buffers, sized at creation */
    void *send, *recv;
    size_t send_cap;
    void *lse_tmp[2];
    /* the local batch */
    ah_batch local;
    ah_kv_group *groups; /* n_groups local entries (expanded steps) */
    cp_tensor lens, qsl, *tables;
    uint32_t step_tokens;
    /* views handed to the plugin in forward */
    DLTensor out_view, lse_view;
    int64_t out_shape[3], lse_shape[2];
    uint32_t step_hq, step_dv;
    size_t step_stride, step_lse_off;
};

/* ---- layout ------------------------------------------------------------ */

uint32_t ah_cp_rank_of(uint64_t pos, uint32_t world_size, uint32_t interleave, uint64_t *local)
{
    const uint64_t I = interleave ? interleave : 1, W = world_size ? world_size : 1;
    if (local) *local = pos / (I * W) * I + pos % I;
    return (uint32_t)(pos / I % W);
}

uint64_t ah_cp_local_len(uint64_t n, uint32_t world_size, uint32_t rank, uint32_t interleave)
{
    const uint64_t I = interleave ? interleave : 1, W = world_size ? world_size : 1;
    const uint64_t rem = n % (I * W), start = (uint64_t)rank * I;
    const uint64_t part = rem > start ? (rem - start < I ? rem - start : I) : 0;
    return n / (I * W) * I + part;
}

static uint32_t interleave_of(const ah_cp_options *o) { return o->interleave ? o->interleave : 1; }

int ah__cp_wanted(const ah_cp_options *o)
{
    return o && o->struct_size >= offsetof(ah_cp_options, timeout_ms) && o->world_size > 1;
}

ah_status ah__cp_local_spec(const ah_cp_options *o, uint32_t layer, const char *plugin,
                            const ah_layer_spec *spec, ah_layer_spec *local, ah_error *err)
{
    const uint32_t I = interleave_of(o), W = o->world_size;
    *local = *spec;
    const char *why = NULL;
    if (spec->attn_type != AH_ATTN_DECODER)
        why = "context parallelism shards a decoder's self-attention KV cache; encoder, "
              "encoder-only and cross layers are not sharded";
    else if (spec->use_alibi)
        why = "ALiBi biases a score by the key's global position, which a rank's shard does "
              "not keep";
    else if (spec->sliding_window && !ah_spec_causal(spec))
        why = "a two-sided window (causal = off) is not sharded";
    if (why) {
        snprintf(err->msg, sizeof err->msg, "layer %u (%s): %s", layer, plugin, why);
        return AH_ERR_UNSUPPORTED;
    }
    if (spec->sliding_window) {
        if ((uint64_t)spec->sliding_window % ((uint64_t)I * W)) {
            snprintf(err->msg, sizeof err->msg,
                     "layer %u (%s): sliding window %u is not a multiple of interleave %u x "
                     "world size %u, so the keys it shows a query would differ in number from "
                     "rank to rank; choose an interleave that divides %u / %u",
                     layer, plugin, spec->sliding_window, I, W, spec->sliding_window, W);
            return AH_ERR_UNSUPPORTED;
        }
        local->sliding_window = spec->sliding_window / W;
    }
    /* a sink is one more term of the softmax's denominator: rank 0's states
     * add it, the others run without, so the merge counts it once */
    if (o->rank) local->use_sinks = 0;
    return AH_OK;
}

void ah__cp_state_limits(const ah_limits *engine, ah_limits *state)
{
    *state = *engine;
    if (state->max_num_reqs < state->max_num_tokens) state->max_num_reqs = state->max_num_tokens;
}

/* ---- buffers ------------------------------------------------------------ */

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

static ah_status cp_alloc(ah__cp *cp, size_t bytes, void **p, ah_error *err, const char *what)
{
    ah_status s = ah_device_alloc(cp->dev, bytes ? bytes : 1, p);
    if (s != AH_OK)
        snprintf(err->msg, sizeof err->msg,
                 "context parallel: allocating %s (%zu bytes) failed: %s", what, bytes,
                 ah_device_errmsg(cp->dev));
    return s;
}

static void cp_free(ah__cp *cp, void *p)
{
    if (p) ah_device_free(cp->dev, p);
}

static ah_status cp_copy(ah__cp *cp, void *dst, const void *src, size_t bytes, ah_copy_kind kind,
                         void *stream, ah_error *err)
{
    if (!bytes) return AH_OK;
    if (cp->mem.host) {
        memmove(dst, src, bytes);
        return AH_OK;
    }
    ah_status s = cp->mem.ops->mem_copy(cp->mem.ctx, dst, src, bytes, kind, stream);
    if (s != AH_OK)
        snprintf(err->msg, sizeof err->msg, "context parallel: a device copy failed: %s",
                 cp->mem.ops->context_error(cp->mem.ctx));
    return s;
}

/* t holds at least n int32 on the host and, on a device, there too. Grows
 * (only between steps: an eager plan). */
static ah_status tensor_reserve(ah__cp *cp, cp_tensor *t, size_t n, ah_error *err)
{
    const size_t bytes = (n ? n : 1) * sizeof(int32_t);
    if (bytes <= t->cap) return AH_OK;
    int32_t *h = ah__realloc(t->host, bytes);
    if (!h) {
        snprintf(err->msg, sizeof err->msg, "context parallel: out of memory");
        return AH_ERR_OUT_OF_MEMORY;
    }
    t->host = h;
    if (!cp->mem.host) {
        cp_free(cp, t->dev);
        t->dev = NULL;
        ah_status s = cp_alloc(cp, bytes, &t->dev, err, "the local batch");
        if (s != AH_OK) return s;
    }
    t->cap = bytes;
    return AH_OK;
}

/* Fill t's descriptor (like the engine's tensor `like`) for n x m int32 and
 * copy the host values to the device on stream. */
static ah_status tensor_publish(ah__cp *cp, cp_tensor *t, const DLTensor *like, int64_t n,
                                int64_t m, void *stream, ah_error *err)
{
    memset(&t->t, 0, sizeof t->t);
    t->t.device = like ? like->device : (DLDevice){kDLCPU, 0};
    t->t.dtype = (DLDataType){kDLInt, 32, 1};
    t->shape[0] = n;
    t->shape[1] = m;
    t->t.ndim = m ? 2 : 1;
    t->t.shape = t->shape;
    t->t.data = cp->mem.host ? (void *)t->host : t->dev;
    const size_t elems = (size_t)n * (size_t)(m ? m : 1);
    return cp->mem.host ? AH_OK
                        : cp_copy(cp, t->dev, t->host, elems * sizeof(int32_t),
                                  AH_COPY_HOST_TO_DEVICE, stream, err);
}

/* ---- creation ----------------------------------------------------------- */

ah_status ah__cp_create(const ah_cp_options *o, const ah_limits *engine_limits,
                        const ah__cp_state *states, uint32_t n_states, uint32_t n_groups,
                        int validate, ah__cp **out, ah_error *err)
{
    *out = NULL;
    if (o->world_size > AH__CP_MAX_WORLD) {
        snprintf(err->msg, sizeof err->msg,
                 "ah_cp_options: world_size %u is above the %u ranks a group may have",
                 o->world_size, AH__CP_MAX_WORLD);
        return AH_ERR_INVALID_ARGUMENT;
    }
    if (o->rank >= o->world_size) {
        snprintf(err->msg, sizeof err->msg,
                 "ah_cp_options: rank %u is outside a world of %u ranks (0 .. %u)", o->rank,
                 o->world_size, o->world_size - 1);
        return AH_ERR_INVALID_ARGUMENT;
    }
    if (!!o->nccl_comm == !!o->local_group) {
        snprintf(err->msg, sizeof err->msg,
                 "ah_cp_options: give one collective, nccl_comm or local_group (%s)",
                 o->nccl_comm ? "both are set" : "neither is set");
        return AH_ERR_INVALID_ARGUMENT;
    }
    if (!n_states) {
        snprintf(err->msg, sizeof err->msg,
                 "context parallel: the model has no attention layer to shard");
        return AH_ERR_INVALID_ARGUMENT;
    }
    size_t row = 0; /* largest bytes of one token's partial (out + lse) */
    uint32_t max_hq = 1;
    int causal = -1;
    for (uint32_t i = 0; i < n_states; i++) {
        const ah__cp_state *s = &states[i];
        const char *lack = !(s->caps->features & AH_FEAT_LSE)        ? "the lse feature"
                           : !(s->caps->features & AH_FEAT_EMPTY_KV) ? "the empty_kv feature"
                           : !s->ops->merge_states                   ? "merge_states"
                           : !s->caps->caller_output                 ? "caller_output"
                                                                     : NULL;
        if (lack) {
            snprintf(err->msg, sizeof err->msg,
                     "layer %u: %s does not offer %s, which a context-parallel rank needs (its "
                     "partial result with LSE, requests it holds no keys of, and the merge)",
                     s->layer, s->plugin, lack);
            return AH_ERR_UNSUPPORTED;
        }
        if (s->dev != states[0].dev) {
            snprintf(err->msg, sizeof err->msg,
                     "layers %u (%s) and %u (%s) run on different devices: a context-parallel "
                     "rank runs on one (bind one plugin kind, or force one with [select])",
                     states[0].layer, states[0].plugin, s->layer, s->plugin);
            return AH_ERR_UNSUPPORTED;
        }
        const int c = ah_spec_causal(s->spec);
        if (causal >= 0 && c != causal) {
            snprintf(err->msg, sizeof err->msg,
                     "layer %u is %scausal and layer %u is not: a context-parallel step plans "
                     "one query token per request for one rule of visibility",
                     c ? states[0].layer : s->layer, "", c ? s->layer : states[0].layer);
            return AH_ERR_UNSUPPORTED;
        }
        causal = c;
        const size_t hq = s->spec->num_q_heads;
        const size_t r =
            hq * s->spec->v_head_size * ah_dtype_size(s->spec->q_dtype) + hq * sizeof(float);
        if (r > row) row = r;
        if (hq > max_hq) max_hq = (uint32_t)hq;
    }
    ah__cp *cp = ah__calloc(1, sizeof *cp);
    if (!cp) goto oom;
    cp->world = o->world_size;
    cp->rank = o->rank;
    cp->interleave = interleave_of(o);
    cp->causal = causal;
    cp->validate = validate;
    cp->limits = *engine_limits;
    cp->dev = states[0].dev;
    cp->mem = (ah__cp_mem){!states[0].ops->mem_alloc || !states[0].ops->mem_copy,
                           states[0].ops,
                           states[0].ctx,
                           ah_device_kind_of(cp->dev),
                           ah_device_dl(cp->dev).device_id,
                           NULL};
    cp->n_groups = n_groups;
    if (!(cp->group_block = ah__calloc(n_groups, sizeof *cp->group_block)) ||
        !(cp->groups = ah__calloc(n_groups, sizeof *cp->groups)) ||
        !(cp->tables = ah__calloc(n_groups, sizeof *cp->tables)))
        goto oom;
    for (uint32_t i = 0; i < n_states; i++)
        cp->group_block[states[i].spec->kv_group] = states[i].spec->block_size;
    ah_status s = ah__cp_comm_open(o, &cp->mem, &cp->comm, err);
    if (s != AH_OK) goto fail;
    const size_t T = engine_limits->max_num_tokens;
    cp->send_cap = round_up(T * row + 2 * CP_ALIGN, CP_ALIGN);
    if ((s = cp_alloc(cp, cp->send_cap, &cp->send, err, "the partial results")) != AH_OK ||
        (s = cp_alloc(cp, cp->send_cap * cp->world, &cp->recv, err, "the gathered results")) !=
            AH_OK ||
        (s = cp_alloc(cp, T * max_hq * sizeof(float), &cp->lse_tmp[0], err, "merge LSEs")) !=
            AH_OK ||
        (s = cp_alloc(cp, T * max_hq * sizeof(float), &cp->lse_tmp[1], err, "merge LSEs")) != AH_OK)
        goto fail;
    /* one-token steps need only the local lengths */
    if ((s = tensor_reserve(cp, &cp->lens, engine_limits->max_num_reqs, err)) != AH_OK) goto fail;
    *out = cp;
    return AH_OK;
oom:
    snprintf(err->msg, sizeof err->msg, "context parallel: out of memory");
    s = AH_ERR_OUT_OF_MEMORY;
fail:
    ah__cp_destroy(cp);
    return s;
}

void ah__cp_destroy(ah__cp *cp)
{
    if (!cp) return;
    if (cp->dev) {
        cp_free(cp, cp->send);
        cp_free(cp, cp->recv);
        cp_free(cp, cp->lse_tmp[0]);
        cp_free(cp, cp->lse_tmp[1]);
        cp_free(cp, cp->lens.dev);
        cp_free(cp, cp->qsl.dev);
        for (uint32_t g = 0; cp->tables && g < cp->n_groups; g++) cp_free(cp, cp->tables[g].dev);
    }
    ah__free(cp->lens.host);
    ah__free(cp->qsl.host);
    for (uint32_t g = 0; cp->tables && g < cp->n_groups; g++) ah__free(cp->tables[g].host);
    ah__free(cp->tables);
    ah__free(cp->groups);
    ah__free(cp->group_block);
    ah__cp_comm_close(cp->comm);
    ah__free(cp);
}

/* ---- the local batch ------------------------------------------------------- */

static ah_status bad(ah_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ah_status bad(ah_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(err->msg, sizeof err->msg, "batch (context parallel): ");
    vsnprintf(err->msg + n, sizeof err->msg - (size_t)n, fmt, ap);
    va_end(ap);
    return AH_ERR_INVALID_ARGUMENT;
}

/* The engine's global structure: what the local batch will not show. */
static ah_status check_global(const ah__cp *cp, const ah_batch *b, uint32_t *real, int *multi,
                              ah_error *err)
{
    if (!b->query_start_loc_host || !b->seq_lens_host || !b->slot_mapping_host)
        return bad(err, "query_start_loc, seq_lens and slot_mapping need their host copies");
    if (!b->num_reqs || b->num_reqs > cp->limits.max_num_reqs)
        return bad(err, "num_reqs = %u (1 .. limits.max_num_reqs = %u)", b->num_reqs,
                   cp->limits.max_num_reqs);
    if (ah_batch_custom_mask(b)) return bad(err, "custom_mask is set: tree masks are not sharded");
    if (b->common_prefix_len)
        return bad(err, "common_prefix_len = %u: cascade batches are not sharded",
                   b->common_prefix_len);
    const int32_t *qsl = b->query_start_loc_host, *sl = b->seq_lens_host;
    if (qsl[0] != 0) return bad(err, "query_start_loc[0] = %d, expected 0", qsl[0]);
    *real = b->num_reqs;
    *multi = 0;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        const int64_t q = (int64_t)qsl[r + 1] - qsl[r];
        if (q < 0)
            return bad(err, "query_start_loc[%u] = %d after %d: negative query length", r + 1,
                       qsl[r + 1], qsl[r]);
        if (q == 0) { /* padding: checked with the local batch */
            if (*real == b->num_reqs) *real = r;
            continue;
        }
        if (*real != b->num_reqs)
            return bad(err, "request %u has query tokens after padded request %u", r, *real);
        if (sl[r] < q)
            return bad(err,
                       "seq_lens[%u] = %d is less than its query_len %" PRId64
                       " (seq_lens are the global lengths, new tokens included)",
                       r, sl[r], q);
        if ((uint32_t)sl[r] > cp->limits.max_seq_len)
            return bad(err, "seq_lens[%u] = %d exceeds limits.max_seq_len = %u", r, sl[r],
                       cp->limits.max_seq_len);
        if (sl[r] > (int64_t)b->max_seq_len)
            return bad(err, "max_seq_len = %u is below seq_lens[%u] = %d", b->max_seq_len, r,
                       sl[r]);
        if (q > 1) *multi = 1;
    }
    if ((uint32_t)qsl[b->num_reqs] != b->num_tokens)
        return bad(err, "query_start_loc[%u] = %d, expected num_tokens = %u", b->num_reqs,
                   qsl[b->num_reqs], b->num_tokens);
    if (b->num_tokens > cp->limits.max_num_tokens)
        return bad(err, "num_tokens = %u exceeds limits.max_num_tokens = %u", b->num_tokens,
                   cp->limits.max_num_tokens);
    return AH_OK;
}

/* Every new token's slot: this rank's for the positions it holds, negative
 * for the others. */
static ah_status check_slots(const ah__cp *cp, const ah_batch *b, uint32_t real, uint32_t group,
                             const int64_t *slots, ah_error *err)
{
    const int32_t *qsl = b->query_start_loc_host, *sl = b->seq_lens_host;
    for (uint32_t r = 0; r < real; r++) {
        const int64_t p0 = (int64_t)sl[r] - (qsl[r + 1] - qsl[r]);
        for (int32_t t = qsl[r]; t < qsl[r + 1]; t++) {
            const uint64_t p = (uint64_t)(p0 + t - qsl[r]);
            const uint32_t owner = ah_cp_rank_of(p, cp->world, cp->interleave, NULL);
            if ((owner == cp->rank) == (slots[t] >= 0)) continue;
            char g[32] = "";
            if (group != UINT32_MAX) snprintf(g, sizeof g, " of kv group %u", group);
            return owner == cp->rank
                       ? bad(err,
                             "slot_mapping[%d]%s = %" PRId64 " for token %d (request %u, position "
                             "%" PRIu64 "), which this rank %u holds: give it a slot in this "
                             "rank's cache",
                             t, g, slots[t], t, r, p, cp->rank)
                       : bad(err,
                             "slot_mapping[%d]%s = %" PRId64 " for token %d (request %u, position "
                             "%" PRIu64 "), which rank %u holds, not this rank %u: a rank "
                             "stores only its own positions (slot -1 for the others)",
                             t, g, slots[t], t, r, p, owner, cp->rank);
        }
    }
    return AH_OK;
}

/* One request per query token: each row of each group's block table is
 * its request's, cut to the blocks the token's local length covers. */
static ah_status expand(ah__cp *cp, const ah_batch *b, uint32_t real, void *stream, ah_batch *lb,
                        ah_error *err)
{
    const int32_t *qsl = b->query_start_loc_host, *sl = b->seq_lens_host;
    const uint32_t T = (uint32_t)qsl[real];
    ah_status s;
    if ((s = tensor_reserve(cp, &cp->qsl, (size_t)T + 1, err)) != AH_OK ||
        (s = tensor_reserve(cp, &cp->lens, T, err)) != AH_OK)
        return s;
    uint32_t max_len = 0;
    for (uint32_t r = 0; r < real; r++) {
        const int64_t q = qsl[r + 1] - qsl[r], p0 = (int64_t)sl[r] - q;
        for (int64_t i = 0; i < q; i++) {
            const uint64_t n = cp->causal ? (uint64_t)(p0 + i + 1) : (uint64_t)sl[r];
            const uint32_t len = (uint32_t)ah_cp_local_len(n, cp->world, cp->rank, cp->interleave);
            cp->lens.host[qsl[r] + i] = (int32_t)len;
            if (len > max_len) max_len = len;
        }
    }
    for (uint32_t t = 0; t <= T; t++) cp->qsl.host[t] = (int32_t)t;
    if ((s = tensor_publish(cp, &cp->qsl, b->query_start_loc, T + 1, 0, stream, err)) != AH_OK ||
        (s = tensor_publish(cp, &cp->lens, b->seq_lens, T, 0, stream, err)) != AH_OK)
        return s;
    lb->num_reqs = lb->num_tokens = T;
    lb->max_query_len = 1;
    lb->max_seq_len = max_len;
    lb->query_start_loc = &cp->qsl.t;
    lb->query_start_loc_host = cp->qsl.host;
    lb->seq_lens = &cp->lens.t;
    lb->seq_lens_host = cp->lens.host;
    const uint32_t ng = ah_batch_num_kv_groups(b);
    for (uint32_t g = 0; g < (ng ? ng : 1); g++) {
        ah_batch view;
        if ((s = ah_batch_group_view(b, g, &view, err)) != AH_OK) return s;
        if (!view.block_table_host) return bad(err, "block_table needs its host copy");
        const uint32_t bs = cp->group_block[g] ? cp->group_block[g] : 1;
        const uint32_t w = max_len ? (max_len + bs - 1) / bs : 1;
        if (w > view.block_table_stride)
            return bad(err,
                       "block_table%s has %u entries per row, but a request holds %u blocks "
                       "of this rank's shard",
                       ng ? " of a kv group" : "", view.block_table_stride, w);
        cp_tensor *tb = &cp->tables[g];
        if ((s = tensor_reserve(cp, tb, (size_t)T * w, err)) != AH_OK) return s;
        for (uint32_t r = 0; r < real; r++)
            for (int32_t t = qsl[r]; t < qsl[r + 1]; t++) {
                const uint32_t need = ((uint32_t)cp->lens.host[t] + bs - 1) / bs;
                const int32_t *src = view.block_table_host + (size_t)r * view.block_table_stride;
                int32_t *dst = tb->host + (size_t)t * w;
                memcpy(dst, src, need * sizeof *dst);
                memset(dst + need, 0, (w - need) * sizeof *dst);
            }
        if ((s = tensor_publish(cp, tb, view.block_table, T, w, stream, err)) != AH_OK) return s;
        if (!ng) {
            lb->block_table = &tb->t;
            lb->block_table_host = tb->host;
            lb->block_table_stride = w;
        } else {
            ah_kv_group *kg = &cp->groups[g];
            *kg = (ah_kv_group){sizeof *kg, view.num_blocks,        &tb->t, view.slot_mapping,
                                tb->host,   view.slot_mapping_host, w};
        }
    }
    if (ng) lb->kv_groups = cp->groups;
    return AH_OK;
}

ah_status ah__cp_local_batch(ah__cp *cp, const ah_batch *b, ah_plan_mode mode, void *stream,
                             const ah_batch **local, ah_error *err)
{
    uint32_t real = 0;
    int multi = 0;
    ah_status s = check_global(cp, b, &real, &multi, err);
    if (s != AH_OK) return s;
    /* every request's local length, once: checked against the engine's,
     * and the one-token step's seq_lens (padding keeps the backend's fill) */
    const int32_t *given = ah_batch_cp_local_seq_lens(b);
    const int32_t *sl = b->seq_lens_host;
    uint32_t max_len = 0;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        const int32_t len = r < real ? (int32_t)ah_cp_local_len((uint64_t)sl[r], cp->world,
                                                                cp->rank, cp->interleave)
                                     : sl[r];
        if (cp->validate && given && r < real && given[r] != len)
            return bad(err,
                       "cp_local_seq_lens[%u] = %d, but request %u (seq_len %d) has %d of its "
                       "keys on rank %u of %u (interleave %u)",
                       r, given[r], r, sl[r], len, cp->rank, cp->world, cp->interleave);
        cp->lens.host[r] = len;
        if ((uint32_t)len > max_len) max_len = (uint32_t)len;
    }
    const uint32_t ng = ah_batch_num_kv_groups(b);
    for (uint32_t g = 0; cp->validate && g < (ng ? ng : 1); g++) {
        ah_batch view;
        if ((s = ah_batch_group_view(b, g, &view, err)) != AH_OK) return s;
        if (!view.slot_mapping_host) return bad(err, "slot_mapping needs its host copy");
        s = check_slots(cp, b, real, ng ? g : UINT32_MAX, view.slot_mapping_host, err);
        if (s != AH_OK) return s;
    }
    if (mode != AH_PLAN_EAGER && !ah__cp_comm_capturable(cp->comm))
        return bad(err,
                   "plan mode %s: a %s's all-gather runs on the host, so a CUDA graph cannot "
                   "capture it (capture over NCCL)",
                   mode == AH_PLAN_CAPTURE ? "capture" : "replay", ah__cp_comm_name(cp->comm));
    ah_batch *lb = &cp->local;
    *lb = *b;
    lb->cp_local_seq_lens = NULL;
    lb->cp_local_seq_lens_host = NULL;
    if (multi) {
        if (mode != AH_PLAN_EAGER)
            return bad(err, "a request's query spans several tokens, which a rank plans as one "
                            "request per token; a captured graph cannot replay that: capture "
                            "steps whose queries are one token");
        if ((s = expand(cp, b, real, stream, lb, err)) != AH_OK) return s;
    } else {
        /* one token per query: the engine's requests with the local lengths */
        if (given && b->cp_local_seq_lens) {
            lb->seq_lens = b->cp_local_seq_lens;
        } else {
            s = tensor_publish(cp, &cp->lens, b->seq_lens, b->num_reqs, 0, stream, err);
            if (s != AH_OK) return s;
            lb->seq_lens = &cp->lens.t;
        }
        lb->seq_lens_host = cp->lens.host;
        lb->max_seq_len = max_len;
    }
    cp->step_tokens = lb->num_tokens;
    *local = lb;
    return AH_OK;
}

/* ---- the step's check ------------------------------------------------------ */

static int32_t batch_checksum(const ah_batch *b)
{
    uint32_t h = 2166136261u;
    if (!b->query_start_loc_host || !b->seq_lens_host) return 0;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        h = (h ^ (uint32_t)b->query_start_loc_host[r + 1]) * 16777619u;
        h = (h ^ (uint32_t)b->seq_lens_host[r]) * 16777619u;
    }
    return (int32_t)(h & 0x7fffffff);
}

ah_status ah__cp_agree(ah__cp *cp, ah_status mine, const ah_batch *b, void *stream, ah_error *err)
{
    const int32_t me[CP_CHECK_INTS] = {(int32_t)mine, (int32_t)b->num_reqs, (int32_t)b->num_tokens,
                                       batch_checksum(b)};
    int32_t all[CP_CHECK_INTS * AH__CP_MAX_WORLD];
    cp->mem.stream = stream;
    ah_error xerr;
    ah_status s = ah__cp_comm_exchange(cp->comm, &cp->mem, me, all, CP_CHECK_INTS, &xerr);
    if (s != AH_OK) {
        if (mine == AH_OK) *err = xerr; /* else this rank's own reason stands */
        return mine != AH_OK ? mine : s;
    }
    if (mine != AH_OK) return mine;
    for (uint32_t k = 0; k < cp->world; k++) {
        const int32_t *o = all + k * CP_CHECK_INTS;
        if (o[0] != AH_OK) {
            snprintf(err->msg, sizeof err->msg,
                     "context parallel: rank %u refused this step (%s; its binding's message "
                     "says why), so no rank runs it",
                     k, ah_status_str((ah_status)o[0]));
            return AH_ERR_INVALID_ARGUMENT;
        }
    }
    for (uint32_t k = 1; k < cp->world; k++) {
        const int32_t *o = all + k * CP_CHECK_INTS, *z = all;
        if (memcmp(o + 1, z + 1, (CP_CHECK_INTS - 1) * sizeof *o)) {
            snprintf(err->msg, sizeof err->msg,
                     "context parallel: rank %u's batch differs from rank 0's (num_reqs %d vs "
                     "%d, num_tokens %d vs %d%s): every rank plans the same requests",
                     k, o[1], z[1], o[2], z[2],
                     o[3] != z[3] ? ", query or sequence lengths differ" : "");
            return AH_ERR_INVALID_ARGUMENT;
        }
    }
    return AH_OK;
}

/* ---- forward: partials, gather, merge ------------------------------------ */

static int dense(const DLTensor *t) { return !t->strides || ah_dl_is_contiguous(t); }

ah_status ah__cp_forward_begin(ah__cp *cp, const ah__cp_state *st, const ah_forward_args *a,
                               ah_forward_args *local, ah_error *err)
{
    const ah_layer_spec *sp = st->spec;
    if (!a->out || !a->out->data || !dense(a->out) || (a->lse && !dense(a->lse))) {
        snprintf(err->msg, sizeof err->msg,
                 "layer %u: context parallel: out%s must be a densely packed buffer the merge "
                 "writes into",
                 st->layer, a->lse ? " and lse" : "");
        return AH_ERR_INVALID_ARGUMENT;
    }
    const uint32_t T = cp->step_tokens, Hq = sp->num_q_heads, Dv = sp->v_head_size;
    const size_t ob = (size_t)T * Hq * Dv * ah_dtype_size(sp->q_dtype);
    cp->step_hq = Hq;
    cp->step_dv = Dv;
    cp->step_lse_off = round_up(ob, CP_ALIGN);
    cp->step_stride = round_up(cp->step_lse_off + (size_t)T * Hq * sizeof(float), CP_ALIGN);
    *local = *a;
    cp->out_view = *a->out;
    cp->out_view.data = cp->send;
    cp->out_view.byte_offset = 0;
    cp->out_view.strides = NULL;
    cp->out_shape[0] = T;
    cp->out_shape[1] = Hq;
    cp->out_shape[2] = Dv;
    cp->out_view.shape = cp->out_shape;
    cp->out_view.ndim = 3;
    cp->lse_view = (DLTensor){(char *)cp->send + cp->step_lse_off,
                              a->out->device,
                              2,
                              (DLDataType){kDLFloat, 32, 1},
                              cp->lse_shape,
                              NULL,
                              0};
    cp->lse_shape[0] = T;
    cp->lse_shape[1] = Hq;
    local->out = &cp->out_view;
    local->lse = &cp->lse_view;
    return AH_OK;
}

/* Rank k's partial out or lse in the gathered buffer, as a tensor. */
static void gathered(const ah__cp *cp, uint32_t k, const DLTensor *like, int lse, DLTensor *t,
                     int64_t *shape)
{
    char *base = (char *)cp->recv + (size_t)k * cp->step_stride;
    shape[0] = cp->step_tokens;
    shape[1] = cp->step_hq;
    shape[2] = cp->step_dv;
    *t = (DLTensor){lse ? base + cp->step_lse_off : base,
                    like->device,
                    lse ? 2 : 3,
                    lse ? (DLDataType){kDLFloat, 32, 1} : like->dtype,
                    shape,
                    NULL,
                    0};
}

void ah__cp_fail(ah__cp *cp, const char *why) { ah__cp_comm_fail(cp->comm, why); }

ah_status ah__cp_forward_end(ah__cp *cp, const ah__cp_state *st, const ah_forward_args *a,
                             ah_error *err)
{
    cp->mem.stream = a->stream;
    ah_status s =
        ah__cp_comm_all_gather(cp->comm, &cp->mem, cp->send, cp->recv, cp->step_stride, err);
    if (s != AH_OK) return s;
    DLTensor va, la, vb, lb, tmp[2];
    int64_t sva[3], sla[3], svb[3], slb[3], stmp[2][2];
    for (int i = 0; i < 2; i++) {
        stmp[i][0] = cp->step_tokens;
        stmp[i][1] = cp->step_hq;
        tmp[i] = (DLTensor){cp->lse_tmp[i], a->out->device, 2, (DLDataType){kDLFloat, 32, 1},
                            stmp[i],        NULL,           0};
    }
    gathered(cp, 0, a->out, 0, &va, sva);
    gathered(cp, 0, a->out, 1, &la, sla);
    for (uint32_t k = 1; k < cp->world; k++) {
        gathered(cp, k, a->out, 0, &vb, svb);
        gathered(cp, k, a->out, 1, &lb, slb);
        const int last = k + 1 == cp->world;
        DLTensor *lse_out = last ? a->lse : &tmp[(k - 1) % 2];
        ah_merge_args m = {
            sizeof m, k == 1 ? &va : a->out, k == 1 ? &la : &tmp[k % 2], &vb, &lb, a->out, lse_out,
            a->stream};
        s = st->ops->merge_states(st->ctx, &m);
        if (s != AH_OK) {
            snprintf(err->msg, sizeof err->msg,
                     "layer %u: context parallel: %s merge_states of rank %u's partial "
                     "failed: %s",
                     st->layer, st->plugin, k, st->ops->context_error(st->ctx));
            return s;
        }
    }
    return AH_OK;
}
