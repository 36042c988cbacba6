/*
 * The reference oracle (see reference.h for the exact definition): attention
 * over the paged KV cache in double precision, written for obviousness, not
 * speed. Every score of a query row is kept, the row's maximum subtracted
 * before exponentiation (the sink logit included), so nothing overflows and
 * the result is the textbook softmax to double rounding.
 *
 * Inputs are read through plugin_util.h's conversions, the same ones the
 * plugins use, so an FP8 or bf16 byte means the same value on both sides.
 * A kv_dtype of AUTO is read as "same as the query" (the host resolves it
 * before plugins see a spec; the oracle accepts the unresolved form too).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <attnhost/plugin_util.h>
#include <attnhost/reference.h>

#include "batch_validate.h"

#include "alloc.h"
#include "error.h"

static ah_dtype kv_dtype_of(const ah_layer_spec *spec)
{
    return spec->kv_dtype == AH_DTYPE_AUTO ? spec->q_dtype : spec->kv_dtype;
}

static int dtype_ok(ah_dtype t) { return t > AH_DTYPE_AUTO && t < AH_DTYPE_COUNT; }

/* What the oracle needs of a spec, with a message naming what is wrong. */
static ah_status check_spec(const ah_layer_spec *spec, ah_error *err)
{
    if (!spec) return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "layer spec is NULL");
    if (spec->struct_size < sizeof(ah_layer_spec))
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "layer spec: struct_size %" PRIu32 " < %zu",
                        spec->struct_size, sizeof(ah_layer_spec));
    if (!spec->num_q_heads || !spec->num_kv_heads || spec->num_q_heads % spec->num_kv_heads)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "layer spec: num_q_heads = %" PRIu32 " is not a positive multiple of "
                        "num_kv_heads = %" PRIu32,
                        spec->num_q_heads, spec->num_kv_heads);
    if (!spec->qk_head_size || !spec->v_head_size)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "layer spec: head sizes qk = %" PRIu32 ", v = %" PRIu32 " must be positive",
                        spec->qk_head_size, spec->v_head_size);
    if (spec->use_mla && spec->v_head_size > spec->qk_head_size)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "layer spec: MLA reads V from the key cache, but v_head_size = %" PRIu32
                        " > qk_head_size = %" PRIu32,
                        spec->v_head_size, spec->qk_head_size);
    if (!dtype_ok(spec->q_dtype) || ah_dtype_is_fp8(spec->q_dtype))
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "layer spec: q_dtype %s is not a query type",
                        ah_dtype_name(spec->q_dtype));
    if (!dtype_ok(kv_dtype_of(spec)))
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "layer spec: kv_dtype %d is unknown",
                        (int)spec->kv_dtype);
    if (spec->kv_layout == AH_KV_LAYOUT_AUTO || (unsigned)spec->kv_layout >= AH_KV_LAYOUT_COUNT)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "layer spec: kv_layout must be a concrete layout (got %d)",
                        (int)spec->kv_layout);
    if (ah_kv_layout_is_interleaved(spec->kv_layout) &&
        (spec->use_mla || spec->qk_head_size != spec->v_head_size))
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "layer spec: kv_layout %s interleaves K and V of one head size; this layer "
                        "has %s",
                        ah_kv_layout_str(spec->kv_layout),
                        spec->use_mla ? "no value cache (MLA)" : "different qk and v head sizes");
    if ((unsigned)spec->attn_type >= AH_ATTN_TYPE_COUNT)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "layer spec: attn_type %d is unknown",
                        (int)spec->attn_type);
    if (AH_HAS_FIELD(spec, ah_layer_spec, causal) &&
        (spec->causal >= AH_CAUSAL_COUNT ||
         (spec->causal == AH_CAUSAL_ON && spec->attn_type != AH_ATTN_DECODER)))
        return ah__fail(
            err, AH_ERR_INVALID_ARGUMENT,
            "layer spec: causal = %" PRIu32 " (%s) is not allowed for attn_type %s", spec->causal,
            spec->causal == AH_CAUSAL_ON ? "on: only decoder layers are causal" : "unknown",
            ah_attn_type_str(spec->attn_type));
    if (!(spec->softcap >= 0) || !isfinite(spec->softcap))
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "layer spec: softcap = %g must be >= 0",
                        (double)spec->softcap);
    return AH_OK;
}

/* Per-head scales, where given: finite and > 0. */
static ah_status check_head_scales(const ah_layer_spec *spec, const float *k, const float *v,
                                   ah_error *err)
{
    for (uint32_t h = 0; h < spec->num_kv_heads; h++) {
        if (k && (!(k[h] > 0) || !isfinite(k[h])))
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "reference: k_scales[%" PRIu32 "] = %g must be finite and > 0", h,
                            (double)k[h]);
        if (v && (!(v[h] > 0) || !isfinite(v[h])))
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "reference: v_scales[%" PRIu32 "] = %g must be finite and > 0", h,
                            (double)v[h]);
    }
    return AH_OK;
}

/* Is key position j visible to a query at position p (before a tree mask)? */
static int visible(const ah_layer_spec *spec, int64_t j, int64_t p)
{
    const int64_t w = spec->sliding_window;
    if (spec->attn_type == AH_ATTN_ENCODER_DECODER) return 1; /* the whole encoder sequence */
    if (ah_spec_causal(spec)) return j <= p && (w == 0 || j > p - w);
    return w == 0 || (j - p < w && p - j < w);
}

/* 1 when the keys are packed rows of in->key / in->value, not the cache. */
static int packed_keys(const ah_layer_spec *s) { return ah_spec_cacheless(s) || ah_spec_ragged(s); }

/* The first packed key row of request r (packed_keys layers). */
static uint32_t key_row0(const ah_ref_inputs *in, uint32_t r)
{
    const ah_batch *b = in->batch;
    return (uint32_t)(ah_spec_ragged(in->spec) ? ah_batch_cu_seqlens_k(b)[r]
                                               : b->query_start_loc_host[r]);
}

/* Where request r's keys come from and how many there are. */
static int32_t key_count(const ah_ref_inputs *in, uint32_t r)
{
    const ah_batch *b = in->batch;
    if (ah_spec_ragged(in->spec))
        return ah_batch_cu_seqlens_k(b)[r + 1] - ah_batch_cu_seqlens_k(b)[r];
    if (ah_spec_cacheless(in->spec))
        return b->query_start_loc_host[r + 1] - b->query_start_loc_host[r];
    if (in->spec->attn_type == AH_ATTN_ENCODER_DECODER) return ah_batch_encoder_seq_lens(b)[r];
    return b->seq_lens_host[r];
}

/* One query row (token t, head h): fills out_row[v_head] and *lse. */
static void attend_row(const ah_ref_inputs *in, uint32_t r, uint32_t t, uint32_t h, int64_t p,
                       double *score, double *out_row, double *lse)
{
    const ah_layer_spec *sp = in->spec;
    const ah_batch *b = in->batch;
    const ah_dtype kvt = kv_dtype_of(sp);
    const uint32_t qk = sp->qk_head_size, vh = sp->v_head_size, bs = sp->block_size;
    const uint32_t kh = h / (sp->num_q_heads / sp->num_kv_heads);
    const double ks = in->k_scales && ah_dtype_is_fp8(kvt) ? (double)in->k_scales[kh]
                                                           : ah_kv_scale(in->k_scale, kvt);
    const double vs = in->v_scales && ah_dtype_is_fp8(kvt) ? (double)in->v_scales[kh]
                                                           : ah_kv_scale(in->v_scale, kvt);
    /* The default in double, not ah_spec_scale's float: a bound layer's
     * spec arrives resolved, so only a spec handed to the oracle directly
     * takes it, and there the oracle's own precision is the point. */
    const double scale = sp->scale != 0 ? (double)sp->scale : 1.0 / sqrt((double)qk);
    const int32_t seq_len = key_count(in, r);
    const int32_t *row =
        b->block_table_host ? b->block_table_host + (size_t)r * b->block_table_stride : NULL;
    const size_t q_off = ((size_t)t * sp->num_q_heads + h) * qk;
    /* MLA: V is the first v_head channels of the key cache row. */
    const void *vcache = sp->use_mla ? in->key_cache : in->value_cache;
    const uint32_t v_stride_head = sp->use_mla ? qk : vh;
    const double vscale = sp->use_mla ? ks : vs;
    /* cacheless and ragged: keys are packed rows (the request's new rows,
     * or its cu_seqlens_k rows), in q dtype, unscaled */
    const int nocache = packed_keys(sp);
    const uint32_t t0 = (uint32_t)b->query_start_loc_host[r], k0 = nocache ? key_row0(in, r) : 0;
    const void *kbuf = nocache ? in->key : in->key_cache;
    const void *vbuf = nocache ? in->value : vcache;
    const ah_dtype kt = nocache ? sp->q_dtype : kvt;
    const double kmul = nocache ? 1.0 : ks, vmul = nocache ? 1.0 : vscale;
    /* the tree mask row of this query token (decoder layers) */
    const uint8_t *mask = sp->attn_type == AH_ATTN_DECODER ? ah_batch_custom_mask(b) : NULL;
    if (mask) mask += b->mask_indptr_host[r] + (int64_t)(t - t0) * seq_len;

    double m = -INFINITY;
    for (int32_t j = 0; j < seq_len; j++) {
        score[j] = -INFINITY;
        if (!visible(sp, j, p) || (mask && !mask[j])) continue;
        size_t k_off = nocache ? ((size_t)(k0 + (uint32_t)j) * sp->num_kv_heads + kh) * qk
                               : ah_kv_offset(sp->kv_layout, bs, sp->num_kv_heads, qk,
                                              (uint32_t)row[j / bs], (uint32_t)(j % bs), kh, 0);
        double dot = 0;
        for (uint32_t c = 0; c < qk; c++)
            dot += (double)ah_load_f32(in->q, q_off + c, sp->q_dtype) *
                   ((double)ah_load_f32(kbuf, k_off + c, kt) * kmul);
        double s = scale * dot;
        if (sp->softcap > 0) s = sp->softcap * tanh(s / sp->softcap);
        if (sp->use_alibi) s += (double)in->alibi_slopes[h] * (double)(j - p);
        score[j] = s;
        if (s > m) m = s;
    }
    const double sink = sp->use_sinks ? (double)in->sinks[h] : -INFINITY;
    if (sink > m) m = sink;
    for (uint32_t c = 0; c < vh; c++) out_row[c] = 0;
    if (m == -INFINITY) { /* nothing visible and no sink */
        *lse = -INFINITY;
        return;
    }
    double den = sp->use_sinks ? exp(sink - m) : 0.0;
    for (int32_t j = 0; j < seq_len; j++) {
        if (score[j] == -INFINITY) continue;
        double e = exp(score[j] - m);
        den += e;
        size_t v_off = nocache ? ((size_t)(k0 + (uint32_t)j) * sp->num_kv_heads + kh) * vh
                               : ah_kv_offset(sp->kv_layout, bs, sp->num_kv_heads, v_stride_head,
                                              (uint32_t)row[j / bs], (uint32_t)(j % bs), kh, 0);
        for (uint32_t c = 0; c < vh; c++)
            out_row[c] += e * ((double)ah_load_f32(vbuf, v_off + c, kt) * vmul);
    }
    for (uint32_t c = 0; c < vh; c++) out_row[c] /= den;
    *lse = m + log(den);
}

ah_status ah_reference_attention(const ah_ref_inputs *in, double *out, double *lse, ah_error *err)
{
    if (!in) return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "reference inputs are NULL");
    ah_status s = check_spec(in->spec, err);
    if (s != AH_OK) return s;
    const ah_layer_spec *sp = in->spec;
    s = ah__batch_validate_oracle(in->batch, sp, err);
    if (s != AH_OK) return s;
    /* the layer's KV-cache group: its block table (released entries are
     * never read: attend_row reads only the keys the window shows); fields
     * past the caller's struct_size read as zero */
    ah_batch gview;
    ah_ref_inputs gin;
    memset(&gin, 0, sizeof gin);
    memcpy(&gin, in, in->struct_size < sizeof gin ? in->struct_size : sizeof gin);
    in = &gin;
    if (!packed_keys(sp)) {
        if ((s = ah_batch_group_view(in->batch, ah_spec_kv_group(sp), &gview, err)) != AH_OK)
            return s;
        gin.batch = &gview;
    }
    if ((s = check_head_scales(sp, gin.k_scales, sp->use_mla ? NULL : gin.v_scales, err)) != AH_OK)
        return s;
    if (packed_keys(sp)) {
        if (!AH_HAS_FIELD(in, ah_ref_inputs, value) || !in->q || !in->key || !in->value || !out)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "reference: a %s layer needs q, key, value and out",
                            ah_spec_ragged(sp) ? "ragged" : ah_attn_type_str(sp->attn_type));
    } else if (!in->q || !in->key_cache || (!sp->use_mla && !in->value_cache) || !out)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "reference: %s is NULL",
                        !in->q           ? "q"
                        : !in->key_cache ? "key_cache"
                        : !out           ? "out"
                                         : "value_cache");
    if (sp->use_sinks && !in->sinks)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "reference: the layer uses sinks but sinks is NULL");
    if (sp->use_alibi && !in->alibi_slopes)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "reference: the layer uses ALiBi but alibi_slopes is NULL");

    const ah_batch *b = in->batch;
    uint32_t nkeys = b->max_seq_len > b->max_query_len ? b->max_seq_len : b->max_query_len;
    double *score = ah__malloc(sizeof(double) * (nkeys ? nkeys : 1));
    if (!score) return ah__fail(err, AH_ERR_OUT_OF_MEMORY, "reference: out of memory");
    const uint32_t hq = sp->num_q_heads, vh = sp->v_head_size;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        int32_t t0 = b->query_start_loc_host[r], t1 = b->query_start_loc_host[r + 1];
        /* bottom-right: the last query sits at the last key's position;
         * a ragged context step puts the queries after every key */
        const int context = ah_batch_ragged_keys(b) == AH_RAGGED_KEYS_CONTEXT;
        int64_t first_pos = ah_spec_cacheless(sp) ? 0
                            : ah_spec_ragged(sp)
                                ? (int64_t)key_count(in, r) - (context ? 0 : t1 - t0)
                                : (int64_t)b->seq_lens_host[r] - (t1 - t0);
        for (int32_t t = t0; t < t1; t++)
            for (uint32_t h = 0; h < hq; h++) {
                double l;
                attend_row(in, r, (uint32_t)t, h, first_pos + (t - t0), score,
                           out + ((size_t)t * hq + h) * vh, &l);
                if (lse) lse[(size_t)t * hq + h] = l;
            }
    }
    ah__free(score);
    return AH_OK;
}

/* The write of both public forms: head h's scales are k_scales[h] and
 * v_scales[h] when given, else k_scale and v_scale (0 meaning 1). */
static ah_status write_kv(const ah_layer_spec *spec, const ah_batch *batch, const void *key,
                          const void *value, void *key_cache, void *value_cache, float k_scale,
                          float v_scale, const float *k_scales, const float *v_scales,
                          ah_error *err)
{
    ah_status s = check_spec(spec, err);
    if (s != AH_OK) return s;
    if (!batch) return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "batch is NULL");
    ah_batch gview; /* the layer's KV-cache group: its slots and cache */
    if ((s = ah_batch_group_view(batch, ah_spec_kv_group(spec), &gview, err)) != AH_OK) return s;
    batch = &gview;
    if (!batch->slot_mapping_host)
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "slot_mapping_host is NULL");
    if (!key || !key_cache || (!spec->use_mla && (!value || !value_cache)))
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "write_kv: %s is NULL",
                        !key         ? "key"
                        : !key_cache ? "key_cache"
                        : !value     ? "value"
                                     : "value_cache");
    const ah_dtype kvt = kv_dtype_of(spec);
    const int fp8 = ah_dtype_is_fp8(kvt);
    if (fp8 && (!(k_scale >= 0) || !(v_scale >= 0) || !isfinite(k_scale) || !isfinite(v_scale)))
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                        "write_kv: scales k = %g, v = %g must be >= 0", (double)k_scale,
                        (double)v_scale);
    if ((s = check_head_scales(spec, k_scales, spec->use_mla ? NULL : v_scales, err)) != AH_OK)
        return s;
    const int64_t cache_slots = (int64_t)batch->num_blocks * spec->block_size;
    /* Check every slot before writing any: bad input writes nothing. */
    for (uint32_t t = 0; t < batch->num_tokens; t++) {
        int64_t slot = batch->slot_mapping_host[t];
        if (slot >= cache_slots)
            return ah__fail(err, AH_ERR_INVALID_ARGUMENT,
                            "slot_mapping[%" PRIu32 "] = %" PRId64 " is outside the cache (%" PRId64
                            " slots)",
                            t, slot, cache_slots);
    }
    const uint32_t hk = spec->num_kv_heads, qk = spec->qk_head_size, vh = spec->v_head_size;
    for (uint32_t t = 0; t < batch->num_tokens; t++) {
        int64_t slot = batch->slot_mapping_host[t];
        if (slot < 0) continue;
        uint32_t blk = (uint32_t)(slot / spec->block_size),
                 off = (uint32_t)(slot % spec->block_size);
        for (uint32_t h = 0; h < hk; h++) {
            const float ks = k_scales ? k_scales[h] : ah_kv_scale(k_scale, kvt);
            const float vs = v_scales ? v_scales[h] : ah_kv_scale(v_scale, kvt);
            size_t kc = ah_kv_offset(spec->kv_layout, spec->block_size, hk, qk, blk, off, h, 0);
            for (uint32_t c = 0; c < qk; c++) {
                /* float32 division, as a device writer does it */
                float x = ah_load_f32(key, ((size_t)t * hk + h) * qk + c, spec->q_dtype);
                ah_store_f32(key_cache, kc + c, kvt, fp8 ? x / ks : x);
            }
            if (spec->use_mla) continue;
            size_t vc = ah_kv_offset(spec->kv_layout, spec->block_size, hk, vh, blk, off, h, 0);
            for (uint32_t c = 0; c < vh; c++) {
                float x = ah_load_f32(value, ((size_t)t * hk + h) * vh + c, spec->q_dtype);
                ah_store_f32(value_cache, vc + c, kvt, fp8 ? x / vs : x);
            }
        }
    }
    return AH_OK;
}

ah_status ah_reference_write_kv(const ah_layer_spec *spec, const ah_batch *batch, const void *key,
                                const void *value, void *key_cache, void *value_cache,
                                float k_scale, float v_scale, ah_error *err)
{
    return write_kv(spec, batch, key, value, key_cache, value_cache, k_scale, v_scale, NULL, NULL,
                    err);
}

ah_status ah_reference_write_kv_per_head(const ah_layer_spec *spec, const ah_batch *batch,
                                         const void *key, const void *value, void *key_cache,
                                         void *value_cache, const float *k_scales,
                                         const float *v_scales, ah_error *err)
{
    if (!k_scales || (!v_scales && spec && !spec->use_mla))
        return ah__fail(err, AH_ERR_INVALID_ARGUMENT, "write_kv: %s is NULL",
                        !k_scales ? "k_scales" : "v_scales");
    return write_kv(spec, batch, key, value, key_cache, value_cache, 0, 0, k_scales, v_scales, err);
}

void ah_reference_merge_states(uint32_t T, uint32_t H, uint32_t D, const double *v_a,
                               const double *lse_a, const double *v_b, const double *lse_b,
                               double *out, double *lse_out)
{
    for (size_t i = 0; i < (size_t)T * H; i++) {
        double la = lse_a[i], lb = lse_b[i], m = la > lb ? la : lb;
        const double *a = v_a + i * D, *b = v_b + i * D;
        double *o = out + i * D;
        if (m == -INFINITY) { /* both parts empty */
            for (uint32_t c = 0; c < D; c++) o[c] = 0;
            if (lse_out) lse_out[i] = -INFINITY;
            continue;
        }
        double wa = exp(la - m), wb = exp(lb - m), den = wa + wb;
        for (uint32_t c = 0; c < D; c++) o[c] = (wa * a[c] + wb * b[c]) / den;
        if (lse_out) lse_out[i] = m + log(den);
    }
}
