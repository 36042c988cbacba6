/*
 * Fuzz target: batch validation (ah_batch_validate) over batches built from
 * the fuzzer's bytes.
 *
 * Every host array is allocated at exactly the length the batch claims for
 * it (query_start_loc num_reqs + 1, seq_lens num_reqs, block table num_reqs
 * rows of block_table_stride, slot_mapping num_tokens), so AddressSanitizer
 * flags any read the validator makes past what the engine promised.
 *
 * Two ways to build a batch, chosen by the first byte: "raw" takes every
 * count and array element from the input; "mutant" first builds a valid
 * batch from compact per-request lengths, then overwrites one field or
 * element, which reaches the deep checks far more often than raw bytes do.
 *
 * The property beyond "no crash": when the validator accepts a batch, an
 * independent check (written here, not shared with the core) confirms every
 * index a plugin would follow is in bounds: a false accept is a crash.
 */
#include <inttypes.h>

#include "fuzz_common.h"

#include <attnhost/attnhost.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_REQS 64u
#define MAX_TOKENS 1024u
#define MAX_STRIDE 64u

typedef struct built {
    ah_batch b;
    ah_layer_spec spec;
    ah_limits lim;
    int use_lim;
    int32_t *qsl, *seq, *bt;
    int64_t *slots;
} built;

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (!p) abort();
    return p;
}

static void alloc_arrays(built *x)
{
    x->qsl = xcalloc((size_t)x->b.num_reqs + 1, sizeof *x->qsl);
    x->seq = xcalloc(x->b.num_reqs, sizeof *x->seq);
    x->bt = xcalloc((size_t)x->b.num_reqs * x->b.block_table_stride, sizeof *x->bt);
    x->slots = xcalloc(x->b.num_tokens, sizeof *x->slots);
}

/* Shrink a raw allocation to exactly n elements (so the tail is unreadable). */
static void *exact(void *p, size_t n, size_t sz)
{
    void *q = realloc(p, n ? n * sz : 1);
    if (!q) abort();
    return q;
}

static void build_raw(fz *f, built *x)
{
    x->b.num_reqs = fz_u8(f) % (MAX_REQS + 1);
    x->b.num_tokens = fz_u16(f) % (MAX_TOKENS + 1);
    x->b.block_table_stride = fz_u8(f) % (MAX_STRIDE + 1);
    x->b.max_query_len = fz_u32(f);
    x->b.max_seq_len = fz_u32(f);
    x->b.num_blocks = fz_u32(f);
    x->b.common_prefix_len = fz_u8(f) & 1 ? fz_u32(f) : 0;
    alloc_arrays(x);
    for (uint32_t i = 0; i <= x->b.num_reqs; i++) x->qsl[i] = (int32_t)fz_u32(f);
    for (uint32_t i = 0; i < x->b.num_reqs; i++) x->seq[i] = (int32_t)fz_u32(f);
    for (size_t i = 0; i < (size_t)x->b.num_reqs * x->b.block_table_stride; i++)
        x->bt[i] = (int32_t)fz_u32(f);
    for (uint32_t i = 0; i < x->b.num_tokens; i++)
        x->slots[i] = (int64_t)((uint64_t)fz_u32(f) | (uint64_t)fz_u32(f) << 32);
}

/* A valid batch from per-request (query_len, context) bytes, then one
 * targeted overwrite. Returns 0 when the input is too short to make one. */
static int build_mutant(fz *f, built *x)
{
    uint32_t bs = x->spec.block_size;
    uint32_t n = 1 + fz_u8(f) % 16;
    uint32_t ql[16], sl[16], tokens = 0, width = 1;
    for (uint32_t r = 0; r < n; r++) {
        ql[r] = 1 + fz_u8(f) % 8;
        sl[r] = ql[r] + fz_u8(f) % 40;
        tokens += ql[r];
        uint32_t need = (sl[r] + bs - 1) / bs;
        if (need > width) width = need;
    }
    if (width > MAX_STRIDE) return 0;
    x->b.num_reqs = n;
    x->b.num_tokens = tokens;
    x->b.block_table_stride = width + fz_u8(f) % 3;
    if (x->b.block_table_stride > MAX_STRIDE) x->b.block_table_stride = MAX_STRIDE;
    x->b.num_blocks = n * width + fz_u8(f) % 4;
    alloc_arrays(x);
    uint32_t next_block = 0, maxq = 0, maxs = 0, mins = UINT32_MAX;
    for (uint32_t r = 0; r < n; r++) {
        x->qsl[r + 1] = x->qsl[r] + (int32_t)ql[r];
        x->seq[r] = (int32_t)sl[r];
        uint32_t need = (sl[r] + bs - 1) / bs;
        for (uint32_t k = 0; k < need; k++)
            x->bt[(size_t)r * x->b.block_table_stride + k] =
                (int32_t)(next_block++ % x->b.num_blocks);
        for (uint32_t i = 0; i < ql[r]; i++) {
            uint32_t pos = sl[r] - ql[r] + i;
            int32_t blk = x->bt[(size_t)r * x->b.block_table_stride + pos / bs];
            x->slots[x->qsl[r] + (int32_t)i] = (int64_t)blk * bs + pos % bs;
        }
        if (ql[r] > maxq) maxq = ql[r];
        if (sl[r] > maxs) maxs = sl[r];
        if (sl[r] < mins) mins = sl[r];
    }
    x->b.max_query_len = maxq;
    x->b.max_seq_len = maxs;
    x->b.common_prefix_len = fz_u8(f) & 1 ? mins : 0;
    /* the overwrite: field selector, index, value */
    uint8_t which = fz_u8(f) % 12;
    uint32_t idx = fz_u16(f), v = fz_u32(f);
    switch (which) {
    case 0: x->qsl[idx % (n + 1)] = (int32_t)v; break;
    case 1: x->seq[idx % n] = (int32_t)v; break;
    case 2: x->bt[idx % ((size_t)n * x->b.block_table_stride)] = (int32_t)v; break;
    case 3: x->slots[idx % tokens] = (int64_t)(int32_t)v; break;
    case 4: x->b.max_query_len = v; break;
    case 5: x->b.max_seq_len = v; break;
    case 6: x->b.num_blocks = v; break;
    case 7: x->b.common_prefix_len = v; break;
    case 8: x->b.num_tokens = v % (MAX_TOKENS + 1) < tokens ? v % (MAX_TOKENS + 1) : tokens; break;
    case 9: x->slots[idx % tokens] += (int64_t)(int32_t)v; break;
    case 10: x->qsl[idx % (n + 1)] += (int32_t)(v % 5) - 2; break;
    default: break; /* unchanged: the valid batch itself */
    }
    /* a smaller num_tokens must also shrink what the engine promised */
    x->slots = exact(x->slots, x->b.num_tokens, sizeof *x->slots);
    return 1;
}

/* The independent check of an accepted batch. */
static void check_accepted(const built *x)
{
    const ah_batch *b = &x->b;
    const int64_t bs = x->spec.block_size;
    const int cross = x->spec.attn_type == AH_ATTN_ENCODER_DECODER;
    FZ_ASSERT(b->num_reqs >= 1 && b->num_blocks >= 1 && b->block_table_stride >= 1, "counts");
    FZ_ASSERT(x->qsl[0] == 0, "qsl[0] = %" PRId32, x->qsl[0]);
    FZ_ASSERT(x->qsl[b->num_reqs] == (int64_t)b->num_tokens, "qsl end %" PRId32 " vs %" PRIu32,
              x->qsl[b->num_reqs], b->num_tokens);
    if (x->use_lim) {
        FZ_ASSERT(b->num_reqs <= x->lim.max_num_reqs && b->num_tokens <= x->lim.max_num_tokens &&
                      b->num_blocks <= x->lim.num_blocks && b->max_seq_len <= x->lim.max_seq_len,
                  "limits exceeded");
    }
    int padded = 0;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        int64_t q = (int64_t)x->qsl[r + 1] - x->qsl[r], s = x->seq[r];
        /* padding (fill 0): query_len 0 and seq_len 0, after the real requests */
        if (q == 0 && s == 0) {
            FZ_ASSERT(r > 0, "request 0 is padding");
            padded = 1;
            continue;
        }
        FZ_ASSERT(!padded, "request %u: real after padding", r);
        FZ_ASSERT(q >= 1 && s >= 1, "request %u: q %" PRId64 " s %" PRId64, r, q, s);
        FZ_ASSERT(q <= b->max_query_len && s <= b->max_seq_len, "request %u above the maxima", r);
        if (!cross) FZ_ASSERT(q <= s, "request %u: q %" PRId64 " > s %" PRId64, r, q, s);
        int64_t need = (s + bs - 1) / bs;
        FZ_ASSERT(need <= b->block_table_stride, "request %u: %" PRId64 " blocks, stride %u", r,
                  need, b->block_table_stride);
        if (x->use_lim) FZ_ASSERT(need <= x->lim.max_blocks_per_req, "request %u too long", r);
        const int32_t *row = x->bt + (size_t)r * b->block_table_stride;
        for (int64_t k = 0; k < need; k++)
            FZ_ASSERT(row[k] >= 0 && row[k] < (int64_t)b->num_blocks,
                      "block_table[%u][%" PRId64 "] = %" PRId32 " outside %u blocks", r, k, row[k],
                      b->num_blocks);
        for (int32_t t = x->qsl[r]; t < x->qsl[r + 1]; t++) {
            int64_t slot = x->slots[t];
            if (slot < 0) continue;
            FZ_ASSERT(slot < (int64_t)b->num_blocks * bs, "slot %" PRId64 " outside the cache",
                      slot);
            if (!cross) {
                int64_t pos = s - q + (t - x->qsl[r]);
                FZ_ASSERT(slot / bs == row[pos / bs] && slot % bs == pos % bs,
                          "slot %" PRId64 " is not token %" PRId64 "'s place", slot, pos);
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f = {data, size, 0};
    built x;
    memset(&x, 0, sizeof x);
    uint8_t mode = fz_u8(&f);
    x.spec.struct_size = sizeof x.spec;
    x.spec.attn_type = (ah_attn_type)(fz_u8(&f) % AH_ATTN_TYPE_COUNT);
    uint8_t bsel = fz_u8(&f);
    x.spec.block_size = bsel & 0x80 ? (uint32_t)(bsel & 0x7f) : 1u << (bsel % 8); /* 0 allowed */
    x.b.struct_size = sizeof x.b;
    if (mode & 2) x.b.struct_size = fz_u8(&f); /* too small, mostly */
    x.use_lim = (mode & 4) != 0;
    int ok = 1;
    if (mode & 1) {
        if (x.spec.block_size == 0) x.spec.block_size = 16;
        ok = build_mutant(&f, &x);
    } else {
        build_raw(&f, &x);
    }
    if (ok) {
        if (x.use_lim) {
            x.lim.struct_size = sizeof x.lim;
            x.lim.max_num_reqs = fz_u8(&f) % 2 ? fz_u32(&f) : x.b.num_reqs;
            x.lim.max_num_tokens = fz_u8(&f) % 2 ? fz_u32(&f) : x.b.num_tokens;
            x.lim.max_blocks_per_req = fz_u8(&f) % 2 ? fz_u32(&f) : x.b.block_table_stride;
            x.lim.max_seq_len = fz_u8(&f) % 2 ? fz_u32(&f) : x.b.max_seq_len;
            x.lim.num_blocks = fz_u8(&f) % 2 ? fz_u32(&f) : x.b.num_blocks;
        }
        /* exact-length arrays; NULLs on request */
        x.qsl = exact(x.qsl, (size_t)x.b.num_reqs + 1, sizeof *x.qsl);
        x.seq = exact(x.seq, x.b.num_reqs, sizeof *x.seq);
        uint8_t nulls = fz_u8(&f);
        x.b.query_start_loc_host = nulls == 0xf1 ? NULL : x.qsl;
        x.b.seq_lens_host = nulls == 0xf2 ? NULL : x.seq;
        x.b.block_table_host = nulls == 0xf3 ? NULL : x.bt;
        x.b.slot_mapping_host = nulls == 0xf4 ? NULL : x.slots;
        ah_error err;
        err.msg[0] = '\0';
        ah_status s = ah_batch_validate(&x.b, &x.spec, x.use_lim ? &x.lim : NULL, &err);
        if (s == AH_OK) check_accepted(&x);
        else
            FZ_ASSERT(s == AH_ERR_INVALID_ARGUMENT && err.msg[0], "status %d, message '%s'", (int)s,
                      err.msg);
    }
    free(x.qsl);
    free(x.seq);
    free(x.bt);
    free(x.slots);
    return 0;
}
