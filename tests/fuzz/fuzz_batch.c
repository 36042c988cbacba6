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
 *
 * The ABI 2.1/2.2 fields come from the bytes after the batch (an "ext"
 * byte, 0 in every older seed, so those decode as before): encoder_seq_lens
 * (cross layers), a tree mask (custom_mask, mask_indptr), KV-cache groups
 * (counts that match the spec's kv_group or not, a NULL kv_groups, entries
 * standing for the batch's own fields, entries too small, own tables with
 * released entries under a sliding window) and cp_local_seq_lens, which
 * ah_batch_validate must ignore: the verdict with them equals the verdict
 * without. ABI 2.3: the spec becomes a ragged form (ragged_kv, causal or
 * not), ragged_keys comes from a byte (bottom-right, context or unknown)
 * and cu_seqlens_k from the key lengths (query length plus context, or
 * raw), with one entry or num_k_tokens nudged; an accepted ragged batch is
 * checked for key offsets a plugin could follow.
 */
#include <inttypes.h>

#include "fuzz_common.h"

#include <attnhost/attnhost.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_REQS 64u
#define MAX_TOKENS 1024u
#define MAX_STRIDE 64u

#define MAX_GROUPS 4u
#define MAX_MASK (1u << 20)

typedef struct built {
    ah_batch b;
    ah_layer_spec spec;
    ah_limits lim;
    int use_lim;
    int32_t *qsl, *seq, *bt;
    int64_t *slots;
    /* ABI 2.1/2.2 */
    int32_t *enc, *cp, *cuk;
    int64_t *indptr;
    uint8_t *mask;
    ah_kv_group groups[MAX_GROUPS];
    int32_t *gbt[MAX_GROUPS];
    int64_t *gslots[MAX_GROUPS];
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

/* A group entry of its own: the batch's table and slots copied at exactly
 * their lengths, then the first blocks of one request released (-1) and,
 * sometimes, one entry or slot overwritten. */
static void build_group_entry(fz *f, built *x, uint32_t g)
{
    const ah_batch *b = &x->b;
    size_t nbt = (size_t)b->num_reqs * b->block_table_stride;
    x->gbt[g] = xcalloc(nbt, sizeof *x->gbt[g]);
    x->gslots[g] = xcalloc(b->num_tokens, sizeof *x->gslots[g]);
    if (b->block_table_host) memcpy(x->gbt[g], x->bt, nbt * sizeof *x->bt);
    if (b->slot_mapping_host) memcpy(x->gslots[g], x->slots, b->num_tokens * sizeof *x->slots);
    uint8_t rel = fz_u8(f);
    if (nbt && rel) {
        uint32_t r = (rel >> 4) % b->num_reqs, k = rel & 15;
        for (uint32_t i = 0; i < k && i < b->block_table_stride; i++)
            x->gbt[g][(size_t)r * b->block_table_stride + i] = -1;
    }
    uint8_t poke = fz_u8(f);
    uint32_t idx = fz_u16(f), v = fz_u32(f);
    if (poke == 1 && nbt) x->gbt[g][idx % nbt] = (int32_t)v;
    if (poke == 2 && b->num_tokens) x->gslots[g][idx % b->num_tokens] = (int64_t)(int32_t)v;
    x->groups[g] = (ah_kv_group){sizeof(ah_kv_group), b->num_blocks,        NULL, NULL, x->gbt[g],
                                 x->gslots[g],        b->block_table_stride};
    if (poke == 3) x->groups[g].num_blocks = v;
    if (poke == 4) x->groups[g].struct_size = v % sizeof(ah_kv_group);
}

/* The ABI 2.1/2.2 fields, each from the input when ext asks for it. */
static void build_ext(fz *f, built *x, uint8_t ext)
{
    ah_batch *b = &x->b;
    const uint32_t n = b->num_reqs;
    const int32_t *qsl = b->query_start_loc_host, *seq = b->seq_lens_host;
    if (ext & 1) { /* encoder lengths: small, or raw */
        x->enc = xcalloc(n, sizeof *x->enc);
        uint8_t raw = fz_u8(f);
        for (uint32_t r = 0; r < n; r++) x->enc[r] = raw & 1 ? (int32_t)fz_u32(f) : fz_u8(f) % 48;
        b->encoder_seq_lens_host = x->enc;
    }
    int sane = qsl && seq; /* lengths small enough for mask offsets not to overflow */
    for (uint32_t r = 0; sane && r < n; r++)
        sane = qsl[r + 1] - (int64_t)qsl[r] >= 0 && qsl[r + 1] - (int64_t)qsl[r] <= MAX_TOKENS &&
               seq[r] >= 0 && seq[r] <= (int32_t)MAX_MASK;
    if ((ext & 2) && sane) { /* a tree mask: valid spans, then one nudge */
        x->indptr = xcalloc((size_t)n + 1, sizeof *x->indptr);
        x->indptr[0] = fz_u8(f);
        for (uint32_t r = 0; r < n; r++)
            x->indptr[r + 1] = x->indptr[r] + ((int64_t)qsl[r + 1] - qsl[r]) * seq[r];
        uint32_t idx = fz_u16(f);
        int8_t d = (int8_t)fz_u8(f);
        if (d) x->indptr[idx % (n + 1)] += d;
        int64_t len = x->indptr[n] + (int8_t)fz_u8(f) % 3;
        b->custom_mask_len = len < 0 ? 0 : (uint64_t)len;
        if (b->custom_mask_len <= MAX_MASK) {
            x->mask = xcalloc(b->custom_mask_len, 1);
            b->custom_mask_host = x->mask;
            b->mask_indptr_host = x->indptr;
        }
    }
    if (ext & 4) { /* KV-cache groups */
        uint8_t c = fz_u8(f);
        b->num_kv_groups = c & 0x80 ? c % (MAX_GROUPS + 2) : 1 + c % MAX_GROUPS;
        x->spec.kv_group = fz_u8(f) % (MAX_GROUPS + 1);
        uint32_t have = b->num_kv_groups < MAX_GROUPS ? b->num_kv_groups : MAX_GROUPS;
        for (uint32_t g = 0; g < have; g++) {
            uint8_t kind = fz_u8(f) % 3;
            if (kind == 0) /* the batch's own fields */
                x->groups[g] = (ah_kv_group){.struct_size = sizeof(ah_kv_group)};
            else if (kind == 1) build_group_entry(f, x, g);
            else
                x->groups[g] =
                    (ah_kv_group){.struct_size = (uint32_t)(fz_u8(f) % sizeof(ah_kv_group))};
        }
        /* an array of exactly the claimed entries, or NULL */
        if (!(c & 0x40) && b->num_kv_groups <= MAX_GROUPS) b->kv_groups = x->groups;
        else if (c & 0x40) b->kv_groups = NULL;
        else b->num_kv_groups = have; /* never point past the array */
    }
    if (ext & 8) /* a sliding window: released entries may stand */
        x->spec.sliding_window = fz_u16(f) % 600;
    if (ext & 16) { /* context parallelism: validation never reads these */
        x->cp = xcalloc(n, sizeof *x->cp);
        for (uint32_t r = 0; r < n; r++) x->cp[r] = (int32_t)fz_u32(f);
        b->cp_local_seq_lens_host = x->cp;
    }
    if (ext & 32) { /* ragged keys (ABI 2.3): per request q + context, or raw */
        uint8_t how = fz_u8(f);
        x->spec.ragged_kv = 1;
        x->spec.causal = how & 1 ? AH_CAUSAL_OFF : AH_CAUSAL_BY_TYPE;
        if (how & 8) b->ragged_keys = fz_u8(f); /* 1: context; above: unknown */
        x->cuk = xcalloc((size_t)n + 1, sizeof *x->cuk);
        for (uint32_t r = 0; r < n; r++) {
            int64_t q = qsl ? (int64_t)qsl[r + 1] - qsl[r] : 0;
            int64_t k = how & 2 ? (int64_t)(int32_t)fz_u32(f) : q + fz_u8(f) % 24;
            int64_t next = (int64_t)x->cuk[r] + k;
            x->cuk[r + 1] = next > INT32_MAX || next < INT32_MIN ? 0 : (int32_t)next;
        }
        uint32_t idx = fz_u16(f);
        int8_t d = (int8_t)fz_u8(f);
        if (d) { /* wrapping, as a caller's arithmetic might */
            int32_t *c = &x->cuk[idx % (n + 1)];
            *c = (int32_t)((uint32_t)*c + (uint32_t)(int32_t)d);
        }
        b->num_k_tokens = (uint32_t)x->cuk[n] + (uint32_t)(int8_t)fz_u8(f) % 2;
        b->cu_seqlens_k_host = how & 4 ? NULL : x->cuk;
    }
}

/* The independent check of an accepted batch. */
static void check_accepted(const built *x)
{
    /* the layer's group's paging: an entry of its own, else the batch's */
    ah_batch view = x->b;
    const ah_batch *b = &view;
    const int32_t *bt = x->bt;
    const int64_t *slots_of = x->slots;
    const uint32_t g = x->spec.kv_group;
    if (ah_spec_ragged(&x->spec)) { /* the queries and the key offsets only */
        const int32_t *k = x->b.cu_seqlens_k_host;
        FZ_ASSERT(k && x->b.num_reqs >= 1 && x->qsl[0] == 0 && k[0] == 0 &&
                      x->qsl[x->b.num_reqs] == (int64_t)x->b.num_tokens &&
                      k[x->b.num_reqs] == (int64_t)x->b.num_k_tokens,
                  "ragged: counts");
        /* a context step's keys precede its queries: any count, 0 too */
        const int context = x->b.ragged_keys == AH_RAGGED_KEYS_CONTEXT;
        FZ_ASSERT(x->b.ragged_keys < AH_RAGGED_KEYS_COUNT, "ragged_keys %u accepted",
                  x->b.ragged_keys);
        for (uint32_t r = 0; r < x->b.num_reqs; r++) {
            int64_t q = (int64_t)x->qsl[r + 1] - x->qsl[r], n = (int64_t)k[r + 1] - k[r];
            FZ_ASSERT(q >= 0 && n >= 0 && n <= x->b.max_seq_len, "ragged request %u: k_len", r);
            FZ_ASSERT(q ? n >= 1 || context : n == 0,
                      "ragged request %u: %" PRId64 " keys for %" PRId64 " queries", r, n, q);
            if (ah_spec_causal(&x->spec) && !context)
                FZ_ASSERT(n >= q, "ragged request %u: k_len %" PRId64 " < q %" PRId64, r, n, q);
        }
        return;
    }
    const int cacheless = ah_spec_cacheless(&x->spec);
    if (!cacheless && x->b.num_kv_groups) {
        FZ_ASSERT(x->b.kv_groups && g < x->b.num_kv_groups, "kv_group %u of %u groups accepted", g,
                  x->b.num_kv_groups);
        const ah_kv_group *e = &x->b.kv_groups[g];
        FZ_ASSERT(e->struct_size >= offsetof(ah_kv_group, block_table_stride) + sizeof(uint32_t),
                  "kv_groups[%u].struct_size %u accepted", g, e->struct_size);
        if (e->block_table_host) {
            view.num_blocks = e->num_blocks;
            view.block_table_stride = e->block_table_stride;
            bt = x->gbt[g];
            slots_of = x->gslots[g];
            FZ_ASSERT(e->block_table_host == bt && e->slot_mapping_host == slots_of, "entry");
        }
    } else if (!cacheless) {
        FZ_ASSERT(g == 0, "kv_group %u accepted without kv_groups", g);
    }
    const int64_t bs = x->spec.block_size;
    const int cross = x->spec.attn_type == AH_ATTN_ENCODER_DECODER;
    if (cacheless) { /* no cache: the queries and lengths only */
        FZ_ASSERT(b->num_reqs >= 1 && x->qsl[0] == 0 &&
                      x->qsl[b->num_reqs] == (int64_t)b->num_tokens,
                  "cacheless: counts");
        return;
    }
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
        const int32_t *row = bt + (size_t)r * b->block_table_stride;
        const int64_t w = x->spec.attn_type == AH_ATTN_DECODER ? x->spec.sliding_window : 0;
        for (int64_t k = 0; k < need; k++) {
            if (row[k] < 0) { /* released: no query of the request may see the block */
                FZ_ASSERT(w > 0 && (k + 1) * bs - 1 <= s - q - w,
                          "released block_table[%u][%" PRId64 "] accepted (seq %" PRId64
                          ", q %" PRId64 ", window %" PRId64 ")",
                          r, k, s, q, w);
                continue;
            }
            FZ_ASSERT(row[k] < (int64_t)b->num_blocks,
                      "block_table[%u][%" PRId64 "] = %" PRId32 " outside %u blocks", r, k, row[k],
                      b->num_blocks);
        }
        if (cross) { /* the encoder tokens' blocks, all inside the cache */
            int64_t e = x->enc[r], ne = (e + bs - 1) / bs;
            FZ_ASSERT(e >= 0 && e <= b->max_seq_len && ne <= b->block_table_stride,
                      "request %u: encoder length %" PRId64, r, e);
            for (int64_t k = 0; k < ne; k++)
                FZ_ASSERT(row[k] >= 0 && row[k] < (int64_t)b->num_blocks,
                          "cross block_table[%u][%" PRId64 "] = %" PRId32, r, k, row[k]);
        }
        if (b->custom_mask_host && x->spec.attn_type == AH_ATTN_DECODER)
            FZ_ASSERT(x->indptr[r] >= 0 && x->indptr[r + 1] - x->indptr[r] == q * s &&
                          (uint64_t)x->indptr[r + 1] <= b->custom_mask_len,
                      "request %u: mask span", r);
        for (int32_t t = x->qsl[r]; t < x->qsl[r + 1]; t++) {
            int64_t slot = slots_of[t];
            if (slot < 0) continue;
            FZ_ASSERT(slot < (int64_t)b->num_blocks * bs, "slot %" PRId64 " outside the cache",
                      slot);
            if (!cross) {
                int64_t pos = s - q + (t - x->qsl[r]);
                FZ_ASSERT(row[pos / bs] >= 0, "token %" PRId64 " written to a released block", pos);
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
        uint8_t ext = fz_u8(&f);
        if (ext && x.b.struct_size == sizeof x.b) build_ext(&f, &x, ext);
        ah_error err;
        err.msg[0] = '\0';
        ah_status s = ah_batch_validate(&x.b, &x.spec, x.use_lim ? &x.lim : NULL, &err);
        if (x.cp) { /* the same verdict without cp_local_seq_lens */
            ah_batch nocp = x.b;
            nocp.cp_local_seq_lens_host = NULL;
            ah_error e2;
            ah_status s2 = ah_batch_validate(&nocp, &x.spec, x.use_lim ? &x.lim : NULL, &e2);
            FZ_ASSERT(s2 == s, "cp_local_seq_lens changed the verdict: %d vs %d", (int)s, (int)s2);
        }
        if (s == AH_OK) check_accepted(&x);
        else
            FZ_ASSERT(s == AH_ERR_INVALID_ARGUMENT && err.msg[0], "status %d, message '%s'", (int)s,
                      err.msg);
    }
    free(x.qsl);
    free(x.seq);
    free(x.bt);
    free(x.slots);
    free(x.enc);
    free(x.cp);
    free(x.cuk);
    free(x.indptr);
    free(x.mask);
    for (uint32_t g = 0; g < MAX_GROUPS; g++) {
        free(x.gbt[g]);
        free(x.gslots[g]);
    }
    return 0;
}
