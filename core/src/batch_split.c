/*
 * Splitting a batch by phase (see batch_split.h). Engines order decode
 * requests first (vLLM's reorder_batch, SGLang's mixed chunks), so the
 * decode part is a prefix of every array and the prefill part a suffix; only
 * the prefill part's query_start_loc needs new values (rebased to 0).
 */
#include "batch_split.h"

#include <string.h>

void ah__split_scan(const ah_batch *b, uint32_t qmax, ah_split_scan *o)
{
    const int32_t *qsl = b->query_start_loc_host, *seq = b->seq_lens_host;
    memset(o, 0, sizeof *o);
    uint32_t r = 0;
    for (; r < b->num_reqs; r++) {
        uint32_t q = (uint32_t)(qsl[r + 1] - qsl[r]);
        if (q > qmax) break;
        if (q > o->nd_max_q) o->nd_max_q = q;
        if ((uint32_t)seq[r] > o->nd_max_seq) o->nd_max_seq = (uint32_t)seq[r];
    }
    o->nd = r;
    o->nd_tokens = (uint32_t)qsl[r];
    for (; r < b->num_reqs && !o->decode_later; r++)
        o->decode_later = (uint32_t)(qsl[r + 1] - qsl[r]) <= qmax;
}

/* A 1-D or 2-D view of t starting `first` rows in, with its shape in
 * shape; NULL when the engine passed no tensor (a CPU-only engine may pass
 * host copies only). */
static const DLTensor *view(DLTensor *v, const DLTensor *t, int64_t first, int64_t *shape)
{
    if (!t) return NULL;
    *v = *t;
    v->shape = shape;
    if (!first || !t->data) return v;
    int64_t pitch = t->ndim > 1 && t->shape ? (t->strides ? t->strides[0] : t->shape[1]) : 1;
    v->data = (char *)t->data + first * pitch * ((t->dtype.bits * t->dtype.lanes + 7) / 8);
    return v;
}

void ah__batch_part_decode(ah_batch_part *p, const ah_batch *b, const ah_split_scan *s)
{
    p->batch = *b;
    p->batch.num_reqs = s->nd;
    p->batch.num_tokens = s->nd_tokens;
    p->batch.max_query_len = s->nd_max_q;
    p->batch.max_seq_len = s->nd_max_seq;
    p->batch.common_prefix_len = 0;
    p->qsl_shape = s->nd + 1;
    p->seq_shape = s->nd;
    p->table_shape[0] = s->nd;
    p->table_shape[1] = b->block_table && b->block_table->ndim > 1 && b->block_table->shape
                            ? b->block_table->shape[1]
                            : 1;
    p->slots_shape = s->nd_tokens;
    p->batch.query_start_loc = view(&p->qsl, b->query_start_loc, 0, &p->qsl_shape);
    p->batch.seq_lens = view(&p->seq, b->seq_lens, 0, &p->seq_shape);
    p->batch.block_table = view(&p->table, b->block_table, 0, p->table_shape);
    p->batch.slot_mapping = view(&p->slots, b->slot_mapping, 0, &p->slots_shape);
    /* ABI 2.1: encoder lengths per request; mask offsets stay absolute */
    p->enc_shape = s->nd;
    p->mip_shape = s->nd + 1;
    p->batch.encoder_seq_lens = view(&p->enc, b->encoder_seq_lens, 0, &p->enc_shape);
    p->batch.mask_indptr = view(&p->mip, b->mask_indptr, 0, &p->mip_shape);
}

void ah__split_rebase_qsl(const ah_batch *b, uint32_t nd, int32_t *dst)
{
    const int32_t *src = b->query_start_loc_host + nd, base = src[0];
    for (uint32_t i = 0, n = b->num_reqs - nd; i <= n; i++) dst[i] = src[i] - base;
}

void ah__batch_part_prefill(ah_batch_part *p, const ah_batch *b, const ah_split_scan *s,
                            const int32_t *qsl_host, void *qsl_dev)
{
    const uint32_t nd = s->nd, np = b->num_reqs - nd;
    p->batch = *b;
    p->batch.num_reqs = np;
    p->batch.num_tokens = b->num_tokens - s->nd_tokens;
    p->batch.common_prefix_len = 0;
    p->qsl_shape = np + 1;
    p->seq_shape = np;
    p->table_shape[0] = np;
    p->table_shape[1] = b->block_table && b->block_table->ndim > 1 && b->block_table->shape
                            ? b->block_table->shape[1]
                            : 1;
    p->slots_shape = p->batch.num_tokens;
    p->batch.query_start_loc = view(&p->qsl, b->query_start_loc, 0, &p->qsl_shape);
    if (p->batch.query_start_loc) {
        p->qsl.data = qsl_dev;
        p->qsl.byte_offset = 0;
        p->qsl.strides = NULL;
    }
    p->batch.seq_lens = view(&p->seq, b->seq_lens, nd, &p->seq_shape);
    p->batch.block_table = view(&p->table, b->block_table, nd, p->table_shape);
    p->batch.slot_mapping = view(&p->slots, b->slot_mapping, s->nd_tokens, &p->slots_shape);
    p->batch.query_start_loc_host = qsl_host;
    p->batch.seq_lens_host = b->seq_lens_host + nd;
    p->batch.block_table_host = b->block_table_host + (size_t)nd * b->block_table_stride;
    p->batch.slot_mapping_host = b->slot_mapping_host + s->nd_tokens;
    p->enc_shape = np;
    p->mip_shape = np + 1;
    p->batch.encoder_seq_lens = view(&p->enc, b->encoder_seq_lens, nd, &p->enc_shape);
    p->batch.mask_indptr = view(&p->mip, b->mask_indptr, nd, &p->mip_shape);
    if (b->encoder_seq_lens_host) p->batch.encoder_seq_lens_host = b->encoder_seq_lens_host + nd;
    if (b->mask_indptr_host) p->batch.mask_indptr_host = b->mask_indptr_host + nd;
}

int ah__row_view(const DLTensor *t, int64_t r0, int64_t n, DLTensor *v, int64_t *shape)
{
    if (t->ndim < 1 || t->ndim > 4) return -1;
    int64_t pitch = 1;
    if (t->strides) pitch = t->strides[0];
    else
        for (int i = 1; i < t->ndim; i++) pitch *= t->shape[i];
    *v = *t;
    for (int i = 0; i < t->ndim; i++) shape[i] = t->shape[i];
    shape[0] = n;
    v->shape = shape;
    if (!t->data) return 0;
    v->data = (char *)t->data + r0 * pitch * ((t->dtype.bits * t->dtype.lanes + 7) / 8);
    return ((uintptr_t)v->data + (uintptr_t)v->byte_offset) % 16 ? -1 : 0;
}
