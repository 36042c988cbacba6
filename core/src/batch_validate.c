/*
 * Batch validation: the host's guard between an engine and the plugins.
 * Every index a plugin will follow (query offsets, block ids, slots) is
 * checked here, on the host copies only, so a bad batch ends in a message
 * naming the field, the index and the value instead of a wild device write.
 *
 * Decisions:
 *  - max_query_len and max_seq_len must bound the real maxima, not equal
 *    them: engines that pad for CUDA graphs pass the capture-time maxima,
 *    and a larger bound only costs a plugin some planning slack, while a
 *    smaller one would let it size grids or buffers too small.
 *  - A request uses ceil(seq_len / block_size) blocks; only those entries of
 *    its block-table row are checked, the rest of the row may hold anything.
 *  - Padded requests (CUDA-graph padding, as vLLM and SGLang pad a batch
 *    up to a captured size): query_len 0, seq_len equal to the backend's
 *    graph_seq_len_fill, after every real request. They own no query
 *    tokens, so no slot, and nothing is written for them; the blocks their
 *    seq_len covers (one with a fill of 1) must still lie inside the cache,
 *    since a kernel may read them. A batch needs one real request.
 *  - Negative slots are padding. Any other slot must be the one the
 *    request's block table gives for that token's position, so a slot that
 *    would land in another request's block is caught.
 *  - Cacheless layers (ENCODER, ENCODER_ONLY, ABI 2.1) read no cache: for
 *    them block_table, slot_mapping and num_blocks are not required or
 *    checked, and seq_lens (when given) must equal the query lengths.
 *  - Cross layers (ENCODER_DECODER, ABI 2.1) need encoder_seq_lens: each
 *    >= 0, within max_seq_len (and limits.max_seq_len), and the block-table
 *    entries the encoder tokens use inside the cache. Their queries'
 *    positions do not matter, so query_len may exceed seq_len and slots
 *    are only range-checked.
 *  - A tree mask (custom_mask, ABI 2.1) needs mask_indptr with each
 *    request's span equal to query_len * seq_len, inside custom_mask_len.
 *  - KV-cache groups (ABI 2.1): a layer's paging comes from its group's
 *    entry (ah_batch_group_view), checked against that group's num_blocks;
 *    messages of a group other than 0 (or of a batch with kv_groups) start
 *    with "kv group G: ". A negative block-table entry is a released block:
 *    accepted only for a real request of a decoder layer whose window hides
 *    the whole block from the request's first query token (position
 *    seq_len - query_len), hence from all of them; anywhere else the
 *    message names the row, column, value and the position that still
 *    sees it. The slot of a new token never lies in a released block (the
 *    token sees its own position), so the slot check stays as it was.
 *  - Ragged layers (ragged_kv, ABI 2.3) read no cache either: their keys
 *    come from cu_seqlens_k, checked here (starts at 0, monotonic, ends at
 *    num_k_tokens; a padded request has none; max_seq_len bounds k_len),
 *    with ragged_keys: bottom_right, a real request has k_len >= 1, and >=
 *    query_len when causal, since its first query sees keys 0 .. k_len -
 *    query_len; context, every key precedes the queries, so any k_len >= 0
 *    stands (a request without context in this chunk). seq_lens belong to the
 *    paged form, validated with its own spec, so they are not read here;
 *    nor is a tree mask taken (it covers cache positions).
 *  - limits may be NULL (the reference oracle checks structure only).
 * Arithmetic on sizes is int64, so no product of two uint32 fields wraps.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <attnhost/attnhost.h>

#include "batch_validate.h"
#include "error.h"
#include "table_scan.h"

/* 1 for layers that read no paged cache: cacheless and ragged ones. */
static int no_cache(const ah_layer_spec *spec)
{
    return ah_spec_cacheless(spec) || ah_spec_ragged(spec);
}

static ah_status check_counts(const ah_batch *b, const ah_layer_spec *spec, const ah_limits *lim,
                              ah_error *err)
{
    if (b->struct_size < offsetof(ah_batch, block_table_stride) + sizeof b->block_table_stride)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "batch: struct_size %" PRIu32 " is too small (need at least %zu)",
                        b->struct_size, offsetof(ah_batch, block_table_stride) + sizeof(uint32_t));
    if (spec->struct_size < offsetof(ah_layer_spec, block_size) + sizeof spec->block_size)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "layer spec: struct_size %" PRIu32 " is too small", spec->struct_size);
    const int cacheless = no_cache(spec);
    if (spec->block_size == 0 && !cacheless)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "layer spec: block_size = 0");
    if (b->num_reqs == 0)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "num_reqs = 0: a batch needs at least one request");
    if (!b->query_start_loc_host)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "query_start_loc_host is NULL");
    if (!cacheless && !b->seq_lens_host)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "seq_lens_host is NULL");
    if (spec->attn_type == AH_ATTN_ENCODER_DECODER && !ah_batch_encoder_seq_lens(b))
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "encoder_seq_lens_host is NULL (or the batch's struct_size %" PRIu32
                        " predates it): a cross-attention (encoder_decoder) layer reads each "
                        "request's encoder_seq_lens[r] encoder tokens",
                        b->struct_size);
    if (!lim) return AH_OK;
    if (lim->struct_size < sizeof(ah_limits))
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "limits: struct_size %" PRIu32 " is too small (need %zu)", lim->struct_size,
                        sizeof(ah_limits));
    if (b->num_reqs > lim->max_num_reqs)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "num_reqs = %" PRIu32 " exceeds limits.max_num_reqs = %" PRIu32,
                        b->num_reqs, lim->max_num_reqs);
    if (b->num_tokens > lim->max_num_tokens)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "num_tokens = %" PRIu32 " exceeds limits.max_num_tokens = %" PRIu32,
                        b->num_tokens, lim->max_num_tokens);
    if (b->max_seq_len > lim->max_seq_len)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "max_seq_len = %" PRIu32 " exceeds limits.max_seq_len = %" PRIu32,
                        b->max_seq_len, lim->max_seq_len);
    return AH_OK;
}

/* The paging fields of a layer with a cache (one group's). */
static ah_status check_paging(const ah_batch *b, const ah_limits *lim, ah_error *err)
{
    if (b->num_blocks == 0)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "num_blocks = 0: the KV cache has no blocks");
    if (!b->block_table_host)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "block_table_host is NULL");
    if (!b->slot_mapping_host)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "slot_mapping_host is NULL");
    if (b->block_table_stride == 0)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "block_table_stride = 0");
    if (lim && b->num_blocks > lim->num_blocks)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "num_blocks = %" PRIu32 " exceeds limits.num_blocks = %" PRIu32,
                        b->num_blocks, lim->num_blocks);
    return AH_OK;
}

/* query_start_loc and seq_lens, request by request; *max_q and *max_s get
 * the real maxima. */
/* The common case in one branch-free pass: every request real, with
 * 1 <= query_len <= seq_len <= max_seq (the maxima and minimum then set).
 * 0 leaves the batch to check_lengths' loop (padding, an empty
 * context-parallel shard, or an error to name). Differences wrap in
 * unsigned arithmetic: an offset going backwards reads as negative. */
static int lengths_plain(const int32_t *qsl, const int32_t *sl, uint32_t n, uint32_t max_seq,
                         int64_t *max_q, int64_t *max_s, int64_t *min_s)
{
    const int32_t lim = max_seq > INT32_MAX ? INT32_MAX : (int32_t)max_seq;
    int32_t bad = 0, mq = 0, ms = 0, mn = INT32_MAX;
    for (uint32_t r = 0; r < n; r++) {
        const int32_t q = (int32_t)((uint32_t)qsl[r + 1] - (uint32_t)qsl[r]), s = sl[r];
        bad |= (q < 1) | (s < q) | (s > lim);
        mq = q > mq ? q : mq;
        ms = s > ms ? s : ms;
        mn = s < mn ? s : mn;
    }
    if (bad) return 0;
    *max_q = mq, *max_s = ms, *min_s = mn;
    return 1;
}

static ah_status check_lengths(const ah_batch *b, const ah_layer_spec *spec, const ah_limits *lim,
                               int32_t fill, int empty_kv, int64_t *max_q, int64_t *max_s,
                               int64_t *min_s, ah_error *err)
{
    const int ragged = ah_spec_ragged(spec);
    /* a ragged layer's key lengths are cu_seqlens_k's (check_ragged) */
    const int32_t *qsl = b->query_start_loc_host, *sl = ragged ? NULL : b->seq_lens_host;
    const int cross = spec->attn_type == AH_ATTN_ENCODER_DECODER;
    const int cacheless = no_cache(spec);
    if (qsl[0] != 0)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "query_start_loc[0] = %" PRId32 ", expected 0", qsl[0]);
    *max_q = *max_s = 0;
    *min_s = INT64_MAX;
    int64_t first_pad = -1;
    const int plain = sl && !cacheless && !cross &&
                      lengths_plain(qsl, sl, b->num_reqs, lim ? lim->max_seq_len : INT32_MAX, max_q,
                                    max_s, min_s);
    for (uint32_t r = 0; !plain && r < b->num_reqs; r++) {
        int64_t q = (int64_t)qsl[r + 1] - qsl[r];
        if (q < 0 || (q == 0 && fill < 0))
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "query_start_loc[%" PRIu32 "] = %" PRId32
                            " after query_start_loc[%" PRIu32 "] = %" PRId32 ": request %" PRIu32
                            " has query_len %" PRId64 " (must be >= %d)",
                            r + 1, qsl[r + 1], r, qsl[r], r, q, fill < 0 ? 1 : 0);
        if (cacheless && !sl) { /* no seq_lens: the query lengths */
            if (q == 0 && fill < 0) continue;
            if (q == 0) {
                if (first_pad < 0) first_pad = r;
                continue;
            }
            if (first_pad >= 0)
                return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                                "query_start_loc[%" PRIu32 "] = %" PRId32 ": request %" PRIu32
                                " has query_len %" PRId64 " after padded request %" PRId64,
                                r + 1, qsl[r + 1], r, q, first_pad);
            if (lim && q > lim->max_seq_len)
                return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                                "request %" PRIu32 " has query_len %" PRId64
                                " above limits.max_seq_len = %" PRIu32,
                                r, q, lim->max_seq_len);
            if (q > *max_q) *max_q = q;
            if (q > *max_s) *max_s = q;
            if (q < *min_s) *min_s = q;
            continue;
        }
        if (q == 0) { /* a padded request */
            if (sl[r] != fill)
                return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                                "seq_lens[%" PRIu32 "] = %" PRId32 " for padded request %" PRIu32
                                " (query_len 0): a padded request carries seq_len = %" PRId32
                                " (the backend's graph_seq_len_fill)",
                                r, sl[r], r, fill);
            if (first_pad < 0) first_pad = r;
            if (sl[r] > *max_s) *max_s = sl[r];
            continue;
        }
        if (first_pad >= 0)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "query_start_loc[%" PRIu32 "] = %" PRId32 ": request %" PRIu32
                            " has query_len %" PRId64 " after padded request %" PRId64
                            " (query_len 0); padded requests come after every real request",
                            r + 1, qsl[r + 1], r, q, first_pad);
        int64_t s = sl[r];
        if (empty_kv && s == 0 && q == 1 && spec->attn_type == AH_ATTN_DECODER) {
            if (q > *max_q) *max_q = q;
            *min_s = 0;
            continue;
        }
        if (s < 1)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "seq_lens[%" PRIu32 "] = %" PRId64 " (must be >= 1)", r, s);
        if (cacheless && s != q)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "seq_lens[%" PRIu32 "] = %" PRId64 ", but request %" PRIu32
                            " has query_len %" PRId64 ": a cacheless (encoder) layer attends over "
                            "the request's own tokens, so seq_len must equal query_len",
                            r, s, r, q);
        if (!cross && q > s)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "seq_lens[%" PRIu32 "] = %" PRId64 " is less than request %" PRIu32
                            "'s query_len %" PRId64 " (the cache holds the new tokens too)",
                            r, s, r, q);
        if (lim && s > lim->max_seq_len)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "seq_lens[%" PRIu32 "] = %" PRId64
                            " exceeds limits.max_seq_len = %" PRIu32,
                            r, s, lim->max_seq_len);
        if (q > *max_q) *max_q = q;
        if (s > *max_s) *max_s = s;
        if (s < *min_s) *min_s = s;
    }
    if (first_pad == 0)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "query_start_loc[1] = %" PRId32 ": every request is padding (query_len 0); "
                        "a batch needs at least one real request",
                        qsl[1]);
    if ((int64_t)qsl[b->num_reqs] != (int64_t)b->num_tokens)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "query_start_loc[%" PRIu32 "] = %" PRId32
                        ", expected num_tokens = %" PRIu32,
                        b->num_reqs, qsl[b->num_reqs], b->num_tokens);
    if (b->max_query_len < *max_q)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "max_query_len = %" PRIu32 " is below the longest query (%" PRId64 ")",
                        b->max_query_len, *max_q);
    if (lim && b->max_query_len > lim->max_num_tokens)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "max_query_len = %" PRIu32 " exceeds limits.max_num_tokens = %" PRIu32,
                        b->max_query_len, lim->max_num_tokens);
    if (b->max_seq_len < *max_s)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "max_seq_len = %" PRIu32 " is below the longest sequence (%" PRId64 ")",
                        b->max_seq_len, *max_s);
    if (!ragged && AH_HAS_FIELD(b, ah_batch, common_prefix_len) && b->common_prefix_len > *min_s)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "common_prefix_len = %" PRIu32 " exceeds the shortest sequence (%" PRId64
                        ")",
                        b->common_prefix_len, *min_s);
    return AH_OK;
}

/* Ragged keys: cu_seqlens_k against the queries, the maxima and the key
 * tensor's rows. */
static ah_status check_ragged(const ah_batch *b, const ah_layer_spec *spec, const ah_limits *lim,
                              ah_error *err)
{
    const int32_t *ck = ah_batch_cu_seqlens_k(b), *qsl = b->query_start_loc_host;
    if (!ck)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "cu_seqlens_k_host is NULL (or the batch's struct_size %" PRIu32
                        " predates it): a ragged layer reads request r's keys at rows "
                        "cu_seqlens_k[r] .. cu_seqlens_k[r + 1] - 1 of forward's key and value",
                        b->struct_size);
    if (ah_batch_custom_mask(b))
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "custom_mask is set, but a ragged layer takes no tree mask (a mask "
                        "covers the paged cache's positions)");
    const uint32_t place = ah_batch_ragged_keys(b);
    if (place >= AH_RAGGED_KEYS_COUNT)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "ragged_keys = %" PRIu32 " is unknown (0: bottom_right, the queries at the "
                        "last key positions; 1: context, every key before every query)",
                        place);
    if (ck[0] != 0)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "cu_seqlens_k[0] = %" PRId32 ", expected 0",
                        ck[0]);
    /* context keys all precede the queries: none needed, all visible */
    const int context = place == AH_RAGGED_KEYS_CONTEXT;
    const int causal = ah_spec_causal(spec) && !context;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        const int64_t q = (int64_t)qsl[r + 1] - qsl[r], k = (int64_t)ck[r + 1] - ck[r];
        const char *why = k < 0         ? "(must be >= 0)"
                          : q == 0 && k ? "for a padded request (query_len 0), which owns no keys"
                          : q > 0 && k == 0 && !context
                              ? "(a real request needs at least one key, except in a context "
                                "step: ragged_keys = context)"
                          : causal && k < q
                              ? "below its query_len: on a causal layer query i sees "
                                "keys 0 .. k_len - query_len + i, so k_len >= query_len"
                              : NULL;
        if (why)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "cu_seqlens_k[%" PRIu32 "] = %" PRId32 " after cu_seqlens_k[%" PRIu32
                            "] = %" PRId32 ": request %" PRIu32 " has k_len %" PRId64
                            " and query_len %" PRId64 " %s",
                            r + 1, ck[r + 1], r, ck[r], r, k, q, why);
        if (k > (int64_t)b->max_seq_len)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "cu_seqlens_k[%" PRIu32 "] = %" PRId32 ": request %" PRIu32
                            " has k_len %" PRId64 " above max_seq_len = %" PRIu32
                            " (which bounds key lengths too)",
                            r + 1, ck[r + 1], r, k, b->max_seq_len);
        if (lim && k > (int64_t)lim->max_seq_len)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "cu_seqlens_k[%" PRIu32 "] = %" PRId32 ": request %" PRIu32
                            " has k_len %" PRId64 " above limits.max_seq_len = %" PRIu32,
                            r + 1, ck[r + 1], r, k, lim->max_seq_len);
    }
    if ((int64_t)ck[b->num_reqs] != (int64_t)b->num_k_tokens)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "cu_seqlens_k[%" PRIu32 "] = %" PRId32 ", expected num_k_tokens = %" PRIu32
                        " (the key tensor's rows)",
                        b->num_reqs, ck[b->num_reqs], b->num_k_tokens);
    return AH_OK;
}

/* Why a released entry block_table[r][k] cannot stand, or AH_OK when the
 * window w hides it from every query token of request r. */
static ah_status check_released(const ah_batch *b, const ah_layer_spec *spec, uint32_t r, int64_t k,
                                int32_t v, uint32_t w, const char *why_none, ah_error *err)
{
    const int64_t bs = spec->block_size;
    const int64_t q = (int64_t)b->query_start_loc_host[r + 1] - b->query_start_loc_host[r];
    const int64_t p0 = (int64_t)b->seq_lens_host[r] - q, last = (k + 1) * bs - 1;
    if (q == 0)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "block_table[%" PRIu32 "][%" PRId64 "] = %" PRId32
                        ": a released block in padded "
                        "request %" PRIu32 ", whose blocks a kernel may read: padding uses blocks "
                        "inside the cache",
                        r, k, v, r);
    if (spec->attn_type != AH_ATTN_DECODER)
        return ah__fail(
            err, AH_ERR_INVALID_ARGUMENT,
            "block_table[%" PRIu32 "][%" PRId64 "] = %" PRId32 ": a released block, but a "
            "%s layer reads every key of the request: only sliding-window decoder layers "
            "may have released blocks",
            r, k, v, ah_attn_type_str(spec->attn_type));
    if (!w)
        return ah__fail(
            err, AH_ERR_INVALID_ARGUMENT,
            "block_table[%" PRIu32 "][%" PRId64 "] = %" PRId32 " is outside the cache (%" PRIu32
            " blocks): a negative entry marks a released block, but %s, so request %" PRIu32
            "'s queries may read every key (positions %" PRId64 "..%" PRId64
            " of this block included)",
            r, k, v, b->num_blocks, why_none, r, k * bs, last);
    if (last > p0 - (int64_t)w) {
        int64_t lo = p0 - (int64_t)w + 1;
        return ah__fail(
            err, AH_ERR_INVALID_ARGUMENT,
            "block_table[%" PRIu32 "][%" PRId64 "] = %" PRId32 ": a released block, but "
            "request %" PRIu32 "'s first query token (position %" PRId64 ", sliding_window %" PRIu32
            ") still sees keys from position %" PRId64 " on, and the block holds "
            "positions %" PRId64 "..%" PRId64 "; only blocks wholly before position %" PRId64
            " may be released",
            r, k, v, r, p0, w, lo < 0 ? 0 : lo, k * bs, last, lo < 0 ? 0 : lo);
    }
    return AH_OK;
}

/* Block-table rows: wide enough, and every used block inside the cache or
 * released where no query sees it. */
static ah_status check_block_table(const ah_batch *b, const ah_layer_spec *spec,
                                   const ah_limits *lim, int64_t longest, uint32_t w,
                                   const char *why_none, int *released, ah_error *err)
{
    const int64_t bs = spec->block_size;
    const ah_divider div = ah__divider(spec->block_size);
    /* The longest request (check_lengths') bounds every row's width: one
     * division, and the per-request loop below only runs to name a culprit. */
    const int64_t widest = (int64_t)ah__blocks_for(&div, (uint32_t)longest);
    const int narrow = widest > (int64_t)b->block_table_stride ||
                       (lim && widest > (int64_t)lim->max_blocks_per_req);
    for (uint32_t r = 0; narrow && r < b->num_reqs; r++) {
        int64_t need = (int64_t)ah__blocks_for(&div, (uint32_t)b->seq_lens_host[r]);
        if (need > (int64_t)b->block_table_stride)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "block_table_stride = %" PRIu32 " is too narrow: request %" PRIu32
                            " (seq_len %" PRId32 ", block_size %" PRId64 ") needs %" PRId64
                            " blocks",
                            b->block_table_stride, r, b->seq_lens_host[r], bs, need);
        if (lim && need > (int64_t)lim->max_blocks_per_req)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "request %" PRIu32 " needs %" PRId64 " blocks (seq_len %" PRId32
                            "), above limits.max_blocks_per_req = %" PRIu32,
                            r, need, b->seq_lens_host[r], lim->max_blocks_per_req);
    }
    /* Read as unsigned, a negative (released) entry is 2^31 or more: below
     * min(num_blocks, 2^31), every entry is a block inside the cache, even
     * where num_blocks passes 2^31. */
    const uint32_t bound = b->num_blocks < 0x80000000u ? b->num_blocks : 0x80000000u;
    if (ah__table_max_unsigned(b->block_table_host, b->block_table_stride, b->seq_lens_host,
                               b->num_reqs, &div) < bound)
        return AH_OK;
    /* the slow path: released entries, or a culprit to name */
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        int64_t need = ((int64_t)b->seq_lens_host[r] + bs - 1) / bs;
        const int32_t *row = b->block_table_host + (size_t)r * b->block_table_stride;
        for (int64_t k = 0; k < need; k++) {
            if (row[k] < 0) {
                ah_status s = check_released(b, spec, r, k, row[k], w, why_none, err);
                if (s != AH_OK) return s;
                *released = 1;
                continue;
            }
            if ((int64_t)row[k] >= (int64_t)b->num_blocks)
                return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                                "block_table[%" PRIu32 "][%" PRId64 "] = %" PRId32
                                " is outside the cache (%" PRIu32 " blocks)",
                                r, k, row[k], b->num_blocks);
        }
    }
    return AH_OK;
}

/* Every slot where the block table puts its token, or padding (< 0), in
 * one pass that does not stop at the first mismatch; 0 leaves the batch to
 * check_slots' loop, which names the culprit. */
static int slots_plain(const ah_batch *b, int64_t bs, const ah_divider *div)
{
    int bad = 0;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        const int32_t t0 = b->query_start_loc_host[r], t1 = b->query_start_loc_host[r + 1];
        const int64_t first_pos = (int64_t)b->seq_lens_host[r] - (t1 - t0);
        const int32_t *row = b->block_table_host + (size_t)r * b->block_table_stride;
        for (int32_t t = t0; t < t1; t++) {
            const int64_t slot = b->slot_mapping_host[t], pos = first_pos + (t - t0);
            if (slot < 0) continue;
            if (pos < 0) return 0;
            bad |= slot != (int64_t)row[ah__div(div, (uint64_t)pos)] * bs +
                               (int64_t)ah__mod(div, (uint64_t)pos);
        }
    }
    return !bad;
}

/* Slots: padding, or exactly where the block table puts the token. */
static ah_status check_slots(const ah_batch *b, const ah_layer_spec *spec, ah_error *err)
{
    const int64_t bs = spec->block_size, cache_slots = (int64_t)b->num_blocks * bs;
    const ah_divider div = ah__divider(spec->block_size);
    const int cross = spec->attn_type == AH_ATTN_ENCODER_DECODER;
    /* a slot equal to its table entry's lies inside the cache: the table
     * was checked first */
    if (!cross && slots_plain(b, bs, &div)) return AH_OK;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        int32_t t0 = b->query_start_loc_host[r], t1 = b->query_start_loc_host[r + 1];
        int64_t first_pos = (int64_t)b->seq_lens_host[r] - (t1 - t0);
        const int32_t *row = b->block_table_host + (size_t)r * b->block_table_stride;
        for (int32_t t = t0; t < t1; t++) {
            int64_t slot = b->slot_mapping_host[t];
            if (slot < 0) continue;
            if (slot >= cache_slots)
                return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                                "slot_mapping[%" PRId32 "] = %" PRId64
                                " is outside the cache (%" PRIu32 " blocks of %" PRId64
                                " = %" PRId64 " slots)",
                                t, slot, b->num_blocks, bs, cache_slots);
            if (cross) continue;
            int64_t pos = first_pos + (t - t0);
            if (pos < 0)
                return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                                "slot_mapping[%" PRId32 "] = %" PRId64 ", but request %" PRIu32
                                " has seq_len %" PRId32 ": its token has no position in the "
                                "cache (padding is -1)",
                                t, slot, r, b->seq_lens_host[r]);
            /* shift and mask for power-of-two block sizes */
            uint32_t blk = (uint32_t)ah__div(&div, (uint64_t)pos),
                     off = (uint32_t)ah__mod(&div, (uint64_t)pos);
            int64_t want = (int64_t)row[blk] * bs + off;
            if (slot != want)
                return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                                "slot_mapping[%" PRId32 "] = %" PRId64
                                ", but token position %" PRId64 " of request %" PRIu32
                                " lives at slot %" PRId64 " (block_table[%" PRIu32 "][%" PRId64
                                "] = %" PRId32 ", block_size %" PRId64 ")",
                                t, slot, pos, r, want, r, pos / bs, row[pos / bs], bs);
        }
    }
    return AH_OK;
}

/* Cross layers: encoder_seq_lens, and the blocks the encoder tokens use. */
static ah_status check_encoder(const ah_batch *b, const ah_layer_spec *spec, const ah_limits *lim,
                               ah_error *err)
{
    const int32_t *el = ah_batch_encoder_seq_lens(b);
    const int64_t bs = spec->block_size;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        int64_t e = el[r];
        if (e < 0)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "encoder_seq_lens[%" PRIu32 "] = %" PRId64 " (must be >= 0)", r, e);
        if (e > (int64_t)b->max_seq_len)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "encoder_seq_lens[%" PRIu32 "] = %" PRId64
                            " exceeds max_seq_len = %" PRIu32 " (which bounds encoder lengths too)",
                            r, e, b->max_seq_len);
        if (lim && e > (int64_t)lim->max_seq_len)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "encoder_seq_lens[%" PRIu32 "] = %" PRId64
                            " exceeds limits.max_seq_len = %" PRIu32,
                            r, e, lim->max_seq_len);
        int64_t need = (e + bs - 1) / bs;
        if (need > (int64_t)b->block_table_stride)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "block_table_stride = %" PRIu32 " is too narrow: request %" PRIu32
                            "'s cross cache (encoder_seq_lens %" PRId64 ", block_size %" PRId64
                            ") needs %" PRId64 " blocks",
                            b->block_table_stride, r, e, bs, need);
        if (lim && need > (int64_t)lim->max_blocks_per_req)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "request %" PRIu32 "'s encoder tokens need %" PRId64
                            " blocks, above limits.max_blocks_per_req = %" PRIu32,
                            r, need, lim->max_blocks_per_req);
        const int32_t *row = b->block_table_host + (size_t)r * b->block_table_stride;
        for (int64_t k = 0; k < need; k++)
            if (row[k] < 0 || (int64_t)row[k] >= (int64_t)b->num_blocks)
                return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                                "block_table[%" PRIu32 "][%" PRId64 "] = %" PRId32
                                " is outside the cache (%" PRIu32 " blocks): the cross cache holds "
                                "request %" PRIu32 "'s %" PRId64 " encoder tokens there",
                                r, k, row[k], b->num_blocks, r, e);
    }
    return AH_OK;
}

/* The tree mask: every request's [query_len x seq_len] block inside it. */
static ah_status check_mask(const ah_batch *b, ah_error *err)
{
    const int64_t *ip = b->mask_indptr_host;
    if (!ip)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "custom_mask_host is set but mask_indptr_host is NULL");
    if (!b->seq_lens_host)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "custom_mask_host is set but seq_lens_host is NULL");
    if (ip[0] < 0)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "mask_indptr[0] = %" PRId64 " (must be >= 0)",
                        ip[0]);
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        int64_t q = (int64_t)b->query_start_loc_host[r + 1] - b->query_start_loc_host[r];
        int64_t want = q * (int64_t)b->seq_lens_host[r];
        if (ip[r + 1] - ip[r] != want)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "mask_indptr[%" PRIu32 "] = %" PRId64 " after mask_indptr[%" PRIu32
                            "] = %" PRId64 ": request %" PRIu32 " needs a [%" PRId64 " x %" PRId32
                            "] mask block of %" PRId64 " bytes",
                            r + 1, ip[r + 1], r, ip[r], r, q, b->seq_lens_host[r], want);
    }
    if ((uint64_t)ip[b->num_reqs] > b->custom_mask_len)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "mask_indptr[%" PRIu32 "] = %" PRId64 " is past custom_mask_len = %" PRIu64,
                        b->num_reqs, ip[b->num_reqs], b->custom_mask_len);
    return AH_OK;
}

ah_status ah_batch_validate(const ah_batch *batch, const ah_layer_spec *spec,
                            const ah_limits *limits, ah_error *err)
{
    return ah_batch_validate_fill(batch, spec, limits, 0, err);
}

ah_status ah_batch_group_view(const ah_batch *batch, uint32_t g, ah_batch *view, ah_error *err)
{
    if (!batch || !view)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "ah_batch_group_view: batch and view are required");
    if (batch->struct_size <
        offsetof(ah_batch, block_table_stride) + sizeof batch->block_table_stride)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "batch: struct_size %" PRIu32 " is too small",
                        batch->struct_size);
    const uint32_t n = ah_batch_num_kv_groups(batch);
    memset(view, 0, sizeof *view);
    memcpy(view, batch, batch->struct_size < sizeof *view ? batch->struct_size : sizeof *view);
    view->struct_size = sizeof *view;
    view->num_kv_groups = 0;
    view->kv_groups = NULL;
    if (!n) {
        if (g == 0) return AH_OK;
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "num_kv_groups = 0 (the batch's own block_table is group 0 and there is no "
                        "other), but the layer is in kv_group %" PRIu32
                        ": pass every group in kv_groups",
                        g);
    }
    if (!batch->kv_groups)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "num_kv_groups = %" PRIu32 " but kv_groups is NULL", n);
    if (g >= n)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "num_kv_groups = %" PRIu32 ", but the layer is in kv_group %" PRIu32
                        ": kv_groups needs an entry per group of the model",
                        n, g);
    const ah_kv_group *e = &batch->kv_groups[g];
    if (e->struct_size < offsetof(ah_kv_group, block_table_stride) + sizeof e->block_table_stride)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "kv_groups[%" PRIu32 "].struct_size = %" PRIu32 " is too small (need %zu)",
                        g, e->struct_size,
                        offsetof(ah_kv_group, block_table_stride) + sizeof(uint32_t));
    if (!e->block_table_host) return AH_OK; /* the batch's own fields */
    view->num_blocks = e->num_blocks;
    view->block_table = e->block_table;
    view->slot_mapping = e->slot_mapping;
    view->block_table_host = e->block_table_host;
    view->slot_mapping_host = e->slot_mapping_host;
    view->block_table_stride = e->block_table_stride;
    return AH_OK;
}

/* Prefix "kv group G: " to err's message. */
static ah_status in_group(ah_status s, uint32_t g, ah_error *err)
{
    if (s == AH_OK || !err || g == UINT32_MAX) return s;
    char tmp[sizeof err->msg];
    snprintf(tmp, sizeof tmp, "%s", err->msg);
    snprintf(err->msg, sizeof err->msg, "kv group %" PRIu32 ": %.990s", g, tmp);
    return s;
}

static ah_status validate(const ah_batch *batch, const ah_layer_spec *spec, const ah_limits *limits,
                          int32_t seq_len_fill, int empty_kv, ah_error *err)
{
    if (!batch) return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "batch is NULL");
    if (!spec) return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "layer spec is NULL");
    const uint32_t g = ah_spec_kv_group(spec);
    const int grouped =
        g || (batch->struct_size >= offsetof(ah_batch, block_table_stride) + sizeof(uint32_t) &&
              ah_batch_num_kv_groups(batch));
    ah_batch view;
    if (!no_cache(spec)) {
        ah_status s = ah_batch_group_view(batch, g, &view, err);
        if (s != AH_OK) return s;
        batch = &view;
    }
    const int causal_window = spec->attn_type == AH_ATTN_DECODER;
    return ah__batch_validate_group(batch, spec, limits, seq_len_fill, grouped ? g : UINT32_MAX,
                                    causal_window ? spec->sliding_window : 0,
                                    "the layer has no sliding window", NULL, empty_kv, err);
}

ah_status ah_batch_validate_fill(const ah_batch *batch, const ah_layer_spec *spec,
                                 const ah_limits *limits, int32_t seq_len_fill, ah_error *err)
{
    return validate(batch, spec, limits, seq_len_fill, 0, err);
}

ah_status ah__batch_validate_oracle(const ah_batch *batch, const ah_layer_spec *spec, ah_error *err)
{
    return validate(batch, spec, NULL, 0, 1, err);
}

ah_status ah__batch_validate_group(const ah_batch *batch, const ah_layer_spec *spec,
                                   const ah_limits *limits, int32_t seq_len_fill, uint32_t group,
                                   uint32_t release_window, const char *release_why, int *released,
                                   int empty_kv, ah_error *err)
{
    int rel = 0;
    if (released) *released = 0;
    ah_status s = check_counts(batch, spec, limits, err);
    if (s != AH_OK) return s;
    if (!no_cache(spec) && (s = check_paging(batch, limits, err)) != AH_OK)
        return in_group(s, group, err);
    int64_t max_q = 0, max_s = 0, min_s = 0;
    s = check_lengths(batch, spec, limits, seq_len_fill, empty_kv, &max_q, &max_s, &min_s, err);
    if (s != AH_OK) return s;
    if (ah_spec_ragged(spec)) return check_ragged(batch, spec, limits, err);
    if (ah_batch_custom_mask(batch) && spec->attn_type == AH_ATTN_DECODER &&
        (s = check_mask(batch, err)) != AH_OK)
        return s;
    if (ah_spec_cacheless(spec)) return AH_OK;
    s = check_block_table(batch, spec, limits, max_s, release_window, release_why, &rel, err);
    if (s != AH_OK) return in_group(s, group, err);
    if (spec->attn_type == AH_ATTN_ENCODER_DECODER &&
        (s = check_encoder(batch, spec, limits, err)) != AH_OK)
        return in_group(s, group, err);
    s = check_slots(batch, spec, err);
    if (s != AH_OK) return in_group(s, group, err);
    if (released) *released = rel;
    return AH_OK;
}
