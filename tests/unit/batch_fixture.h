/*
 * Pieces the binding tests (test_binding, test_phase_split,
 * test_engine_contract, test_context_parallel) build their engine step from: DLTensors over
 * plain memory, a deterministic fill, and the ah_batch of one KV group
 * with its four batch-description tensors made from the engine's host
 * arrays, so a test names each field once instead of listing them by
 * position.
 */
#ifndef AH_BATCH_FIXTURE_H
#define AH_BATCH_FIXTURE_H

#include <stdint.h>

#include <attnhost/attnhost.h>

/* A dense tensor of ndim dims (shape borrowed) over data on dev. */
static inline DLTensor bf_tensor_on(void *data, int ndim, int64_t *shape, DLDataTypeCode code,
                                    int bits, DLDevice dev)
{
    DLTensor t = {data, dev, ndim, {(uint8_t)code, (uint8_t)bits, 1}, shape, NULL, 0};
    return t;
}

static inline DLTensor bf_tensor(void *data, int ndim, int64_t *shape, DLDataTypeCode code,
                                 int bits)
{
    return bf_tensor_on(data, ndim, shape, code, bits, (DLDevice){kDLCPU, 0});
}

/* The next value in [-1, 1) of a 64-bit LCG seeded by *s. */
/* Forward args over q, the new K/V, the caches, out and lse (NULL: none):
 * no sinks or slopes, unit FP8 scales, the default stream. */
static inline ah_forward_args bf_forward_args(const DLTensor *q, const DLTensor *k,
                                              const DLTensor *v, const DLTensor *kc,
                                              const DLTensor *vc, DLTensor *out, DLTensor *lse)
{
    ah_forward_args a = {.struct_size = sizeof a,
                         .q = q,
                         .key = k,
                         .value = v,
                         .key_cache = kc,
                         .value_cache = vc,
                         .out = out,
                         .lse = lse,
                         .k_scale = 1.0f,
                         .v_scale = 1.0f};
    return a;
}

static inline float bf_frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (2.0 / 16777216.0) - 1.0);
}

/* The batch-description tensors of a batch, and their shapes. */
typedef struct bf_desc {
    int64_t sh_qsl[1], sh_seq[1], sh_tab[2], sh_slot[1];
    DLTensor tqsl, tseq, ttab, tslot;
} bf_desc;

/* b (counts and host arrays set, the rest zero) with struct_size and its
 * query_start_loc, seq_lens, block_table and slot_mapping tensors: the
 * host arrays themselves, on dev, shaped by num_reqs, num_tokens and
 * block_table_stride. d holds the tensors and must outlive the batch. */
static inline ah_batch bf_batch(bf_desc *d, DLDevice dev, ah_batch b)
{
    d->sh_qsl[0] = b.num_reqs + 1;
    d->sh_seq[0] = b.num_reqs;
    d->sh_tab[0] = b.num_reqs, d->sh_tab[1] = b.block_table_stride;
    d->sh_slot[0] = b.num_tokens;
    d->tqsl = bf_tensor_on((void *)b.query_start_loc_host, 1, d->sh_qsl, kDLInt, 32, dev);
    d->tseq = bf_tensor_on((void *)b.seq_lens_host, 1, d->sh_seq, kDLInt, 32, dev);
    d->ttab = bf_tensor_on((void *)b.block_table_host, 2, d->sh_tab, kDLInt, 32, dev);
    d->tslot = bf_tensor_on((void *)b.slot_mapping_host, 1, d->sh_slot, kDLInt, 64, dev);
    b.struct_size = sizeof b;
    b.query_start_loc = &d->tqsl;
    b.seq_lens = &d->tseq;
    b.block_table = &d->ttab;
    b.slot_mapping = &d->tslot;
    return b;
}

#endif
