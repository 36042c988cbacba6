/*
 * Planning and running a forward: the batch becomes work items (request x
 * KV head x query tile x key range), long key ranges are split across
 * threads when there are too few items to fill the machine (split-KV), the
 * items run under OpenMP largest-first, and split rows are merged by their
 * log-sum-exp together with the attention sink. Output conversion and the
 * merge are scalar: they touch rows x head_size values per item, a vanishing
 * share of the work.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "state.h"

int cpu_amx_reserve(const ah_host_services *h, void **p, size_t *cap, size_t n, size_t sz)
{
    if (n <= *cap) return 1;
    size_t want = n < 64 ? 64 : n + n / 2;
    void *q = h->alloc(h, want * sz);
    if (!q) return 0;
    if (*p) memcpy(q, *p, *cap * sz); /* growing lists (items, merges) keep their entries */
    h->free(h, *p);
    *p = q;
    *cap = want;
    return 1;
}

/* Slices of rows each split item's merge is cut into (rows / 16 each). */
#define CPU_AMX_MERGE_SLICES 16

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

ah_status cpu_amx_scratch_create(ah_state *st)
{
    const ah_host_services *h = st->ctx->host;
    const cpu_amx_layer *L = &st->L;
    const size_t R = CPU_AMX_RMAX, K = CPU_AMX_KCHUNK;
    const size_t sizes[10] = {R * L->dpad * 4,
                              R * L->dv * 4,
                              R * 4,
                              R * 4,
                              R * K * 4,
                              CPU_AMX_KVROWS * L->dpad * 4,
                              CPU_AMX_KVROWS * L->dv * 4,
                              R * L->dpad * 2,
                              R * K * 2,
                              K * L->dpad * 2 + K * L->dv * 2};
    size_t per = 0;
    for (int i = 0; i < 10; i++) per += align64(sizes[i]);
    per = align64(per + align64(K * L->dv * 2));
    const int nt = st->ctx->threads;
    size_t total = (size_t)nt * per + 64 + (size_t)nt * sizeof(cpu_amx_scratch);
    char *mem = h->alloc(h, total);
    if (!mem)
        return ah_fail(&st->err, AH_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of scratch",
                       total);
    memset(mem, 0, total);
    st->ws_mem = mem;
    st->ws = (cpu_amx_scratch *)mem;
    char *base =
        (char *)(((uintptr_t)(mem + (size_t)nt * sizeof(cpu_amx_scratch)) + 63) & ~(uintptr_t)63);
    for (int t = 0; t < nt; t++) {
        char *c = base + (size_t)t * per;
        cpu_amx_scratch *w = &st->ws[t];
#define TAKE(field, type, n) w->field = (type *)c, c += align64(n)
        TAKE(q, float, sizes[0]);
        TAKE(o, float, sizes[1]);
        TAKE(m, float, sizes[2]);
        TAKE(l, float, sizes[3]);
        TAKE(s, float, sizes[4]);
        TAKE(kf, float, sizes[5]);
        TAKE(vf, float, sizes[6]);
        TAKE(qb, uint16_t, sizes[7]);
        TAKE(pb, uint16_t, sizes[8]);
        TAKE(kp, uint16_t, K * L->dpad * 2);
        TAKE(vp, uint16_t, K * L->dv * 2);
#undef TAKE
    }
    return AH_OK;
}

/* ---- planning ------------------------------------------------------------ */

static int cmp_cost_desc(const void *a, const void *b)
{
    const cpu_amx_item *x = a, *y = b;
    return x->cost < y->cost ? 1 : x->cost > y->cost ? -1 : 0;
}

static int push_item(ah_state *st, const cpu_amx_item *it)
{
    if (!cpu_amx_reserve(st->ctx->host, (void **)&st->items, &st->cap_items, st->n_items + 1,
                         sizeof *st->items))
        return 0;
    st->items[st->n_items++] = *it;
    return 1;
}

/* Copy the batch's host arrays (the engine may reuse them before forward)
 * and check what a bad batch could make the kernels read out of bounds.
 * Cacheless layers get a block table of their own over the packed K/V
 * rows: "block" i of request r is token row query_start_loc[r] + i *
 * block_size (forward sets the block stride to the token stride), so the
 * kernels address new rows exactly as cache rows. Ragged layers (ABI 2.3)
 * do the same over the rows cu_seqlens_k gives, with seq_len = k_len, so
 * their queries sit bottom-right (position k_len - q_len + i) as paged
 * queries do. Cross layers read encoder_seq_lens keys instead of
 * seq_lens. */
static ah_status copy_batch(ah_state *st, const ah_batch *b)
{
    const ah_host_services *h = st->ctx->host;
    const uint32_t R = b->num_reqs, T = b->num_tokens, bs = st->L.block_size;
    const int nocache = st->L.cacheless;
    const int32_t *lens = st->L.cross ? ah_batch_encoder_seq_lens(b) : b->seq_lens_host;
    /* the packed key rows' offsets: the queries' own, or cu_seqlens_k */
    const int32_t *krow = st->L.ragged ? ah_batch_cu_seqlens_k(b) : b->query_start_loc_host;
    const uint32_t Tk = st->L.ragged ? b->num_k_tokens : T;
    if (R && !b->query_start_loc_host)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "batch lacks a host copy of query_start_loc");
    if (R && !krow)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "batch lacks a host copy of cu_seqlens_k (a ragged layer's key offsets)");
    if (R && krow[0] != 0)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "cu_seqlens_k[0] is %d, not 0", krow[0]);
    if (R && !nocache && (!lens || !b->block_table_host))
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "batch lacks host copies of %s or block_table",
                       st->L.cross ? "encoder_seq_lens" : "seq_lens");
    if (T && !nocache && !b->slot_mapping_host)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "batch lacks a host copy of slot_mapping");
    uint32_t stride = b->block_table_stride;
    if (nocache) {
        stride = 1;
        for (uint32_t r = 0; r < R; r++) {
            uint32_t k = (uint32_t)(krow[r + 1] - krow[r]);
            if ((k + bs - 1) / bs > stride) stride = (k + bs - 1) / bs;
        }
    }
    if (!cpu_amx_reserve(h, (void **)&st->qsl, &st->cap_qsl, R + 1, 4) ||
        !cpu_amx_reserve(h, (void **)&st->seq_lens, &st->cap_seq, R + 1, 4) ||
        !cpu_amx_reserve(h, (void **)&st->bt, &st->cap_bt, (size_t)R * stride + 1, 4) ||
        !cpu_amx_reserve(h, (void **)&st->slots, &st->cap_slots, (size_t)T + 1, 8))
        return ah_fail(&st->err, AH_ERR_OUT_OF_MEMORY, "cannot allocate the plan's batch copy");
    if (R && b->query_start_loc_host[0] != 0)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "query_start_loc[0] is %d, not 0",
                       b->query_start_loc_host[0]);
    for (uint32_t r = 0; r < R; r++) {
        int32_t q0 = b->query_start_loc_host[r], q1 = b->query_start_loc_host[r + 1];
        if (q1 < q0 || (uint32_t)q1 > T)
            return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                           "query_start_loc[%u..%u] = %d..%d is not monotonic within num_tokens %u",
                           r, r + 1, q0, q1, T);
        if (nocache) {
            const int32_t k0 = krow[r], k1 = krow[r + 1];
            if (k1 < k0 || (uint32_t)k1 > Tk)
                return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                               "key rows %d..%d of request %u are not monotonic within %u rows", k0,
                               k1, r, Tk);
            st->seq_lens[r] = k1 - k0;
            for (uint32_t i = 0; i < stride; i++)
                st->bt[(size_t)r * stride + i] = k0 + (int32_t)(i * bs);
            continue;
        }
        int32_t sl = lens[r];
        if (sl < 0)
            return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "%s[%u] = %d is negative",
                           st->L.cross ? "encoder_seq_lens" : "seq_lens", r, sl);
        uint32_t nblk = ((uint32_t)sl + bs - 1) / bs;
        if (nblk > b->block_table_stride)
            return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                           "seq_lens[%u] = %d needs %u blocks, block table rows hold %u", r, sl,
                           nblk, b->block_table_stride);
        const int32_t *row = b->block_table_host + (size_t)r * b->block_table_stride;
        /* Released blocks (AH_FEAT_RELEASED_BLOCKS): a negative entry is
         * fine where the window hides the whole block from the request's
         * first query (so from all of them): no item, no pre-packing and no
         * kernel reads a key before that query's window (plan and
         * plan_prepack start there). */
        const int32_t qlen = q1 - q0;
        const int64_t lo = st->L.window && !st->L.cross && qlen > 0
                               ? (int64_t)sl - qlen - (int64_t)st->L.window + 1
                               : 0;
        for (uint32_t i = 0; i < nblk; i++) {
            if (row[i] < 0 && (int64_t)(i + 1) * bs <= lo) continue;
            if (row[i] < 0 || (uint32_t)row[i] >= b->num_blocks)
                return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                               "block_table[%u][%u] = %d is outside the cache's %u blocks%s", r, i,
                               row[i], b->num_blocks,
                               row[i] < 0 ? " (a released block a query still sees)" : "");
        }
    }
    if (R && (uint32_t)b->query_start_loc_host[R] != T)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "query_start_loc[num_reqs] = %d, num_tokens = %u",
                       b->query_start_loc_host[R], T);
    for (uint32_t t = 0; t < T && !nocache; t++) {
        int64_t s = b->slot_mapping_host[t];
        if (s >= (int64_t)b->num_blocks * bs)
            return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                           "slot_mapping[%u] = %lld is outside the cache's %u slots", t,
                           (long long)s, b->num_blocks * bs);
    }
    /* the tree mask: decoder layers only, each request's block inside it */
    st->mask = NULL;
    const uint8_t *mask = ah_batch_custom_mask(b);
    if (mask && !st->L.cross && !nocache && R) {
        if (!b->mask_indptr_host)
            return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "custom_mask without mask_indptr");
        if (!cpu_amx_reserve(h, (void **)&st->mask_ip, &st->cap_mask_ip, R + 1, 8))
            return ah_fail(&st->err, AH_ERR_OUT_OF_MEMORY, "cannot allocate the mask offsets");
        for (uint32_t r = 0; r < R; r++) {
            int64_t q = b->query_start_loc_host[r + 1] - b->query_start_loc_host[r];
            int64_t a = b->mask_indptr_host[r];
            if (a < 0 || b->mask_indptr_host[r + 1] - a != q * lens[r] ||
                (uint64_t)b->mask_indptr_host[r + 1] > b->custom_mask_len)
                return ah_fail(
                    &st->err, AH_ERR_INVALID_ARGUMENT,
                    "mask_indptr[%u..%u] does not frame request %u's [%lld x %d] mask inside custom_mask_len %llu",
                    r, r + 1, r, (long long)q, lens[r], (unsigned long long)b->custom_mask_len);
        }
        memcpy(st->mask_ip, b->mask_indptr_host, (R + 1) * 8);
        st->mask = mask;
    }
    if (R) {
        memcpy(st->qsl, b->query_start_loc_host, (R + 1) * 4);
        if (!nocache) {
            memcpy(st->seq_lens, lens, R * 4);
            memcpy(st->bt, b->block_table_host, (size_t)R * b->block_table_stride * 4);
        }
    }
    if (T && !nocache) memcpy(st->slots, b->slot_mapping_host, (size_t)T * 8);
    st->num_reqs = R;
    st->num_tokens = T;
    st->num_k_tokens = Tk;
    st->bt_stride = stride;
    st->num_blocks = nocache ? 0 : b->num_blocks;
    return AH_OK;
}

/* Tree-masked rows (ABI 2.1), on every ISA path: plain C in fp32, one row
 * at a time, online softmax over the item's keys that the layer's rule
 * AND the request's mask bytes let through. Leaves O, m and l in ws as the
 * other kernels do. Speculative verification has few rows per request, so
 * a simple kernel costs little next to the decode steps it serves. */
static void attend_masked(const ah_state *st, const cpu_amx_run *run, const cpu_amx_item *it,
                          cpu_amx_scratch *ws)
{
    const cpu_amx_layer *L = run->L;
    const size_t qsz = ah_dtype_size(L->q_dtype), ksz = ah_dtype_size(L->kv_dtype);
    const uint32_t r = it->req;
    const int32_t sl = run->seq_lens[r];
    const void *vc = run->vc;
    for (uint32_t i = 0; i < it->rows; i++) {
        uint32_t tok, head, toff, kk;
        cpu_amx_row(L, it, i, &tok, &head, &toff, &kk);
        const uint32_t kvh = it->kvh + kk;
        const int32_t p = it->pos0 + (int32_t)toff;
        const uint8_t *mrow =
            st->mask + st->mask_ip[r] + (int64_t)(tok - (uint32_t)run->qsl[r]) * sl;
        float *q = ws->q, *o = ws->o + (size_t)i * L->dv;
        const char *qs = (const char *)run->q +
                         ((int64_t)tok * run->q_ts + (int64_t)head * run->q_hs) * (int64_t)qsz;
        for (uint32_t c = 0; c < L->d; c++) q[c] = ah_load_f32(qs, c, L->q_dtype) * L->scale;
        float m = -INFINITY, l = 0.0f;
        memset(o, 0, L->dv * sizeof(float));
        int32_t lo, hi;
        cpu_amx_visible(L, p, &lo, &hi);
        const float ks = run->k_scale[kvh * run->scale_hs], vs = run->v_scale[kvh * run->scale_hs];
        for (int32_t j = it->k0; j < it->k1; j++) {
            if (j < lo || j > hi || !mrow[j]) continue;
            const char *kr =
                (const char *)run->kc +
                cpu_amx_kv_row(run, r, j, run->k_bs, run->k_ts, run->k_hs, kvh) * (int64_t)ksz;
            float x = 0.0f;
            for (uint32_t c = 0; c < L->d; c++) x += q[c] * ah_load_f32(kr, c, L->kv_dtype) * ks;
            if (L->softcap != 0.0f) x = L->softcap * tanhf(x / L->softcap);
            if (L->alibi) x += run->alibi[head] * (float)(j - p);
            float mn = x > m ? x : m, alpha = m == -INFINITY ? 0.0f : expf(m - mn),
                  e = expf(x - mn);
            const char *vr =
                (const char *)vc +
                cpu_amx_kv_row(run, r, j, run->v_bs, run->v_ts, run->v_hs, kvh) * (int64_t)ksz;
            for (uint32_t c = 0; c < L->dv; c++)
                o[c] = o[c] * alpha + e * ah_load_f32(vr, c, L->kv_dtype) * vs;
            l = l * alpha + e;
            m = mn;
        }
        ws->m[i] = m;
        ws->l[i] = l;
    }
}

/* The first 16-key piece of request r any query of it sees. */
static uint32_t first_piece(const ah_state *st, uint32_t r)
{
    const cpu_amx_layer *L = &st->L;
    const int32_t qlen = st->qsl[r + 1] - st->qsl[r];
    int32_t lo, hi;
    cpu_amx_visible(L, st->seq_lens[r] - qlen, &lo, &hi);
    return lo > 0 ? (uint32_t)lo / 16 : 0;
}

/* Most bytes of pre-packed K/V one forward may use; a request that would
 * pass it packs each chunk in the items that read it. */
#define CPU_AMX_PP_MAX ((size_t)512 << 20)

/* Which requests get their K and V packed once for all their items: bf16
 * q and cache on a path with the tile kernel, and a query long enough for
 * more than one tile item per KV head (tq tokens each), so the packing is
 * shared. Fills pp_off/pp_np and the packing tasks (32 pieces each). */
static ah_status plan_prepack(ah_state *st, uint32_t tq)
{
    const cpu_amx_layer *L = &st->L;
    const ah_host_services *h = st->ctx->host;
    st->n_pp_tasks = 0;
    if (!st->ctx->k->prepack || L->q_dtype != AH_DTYPE_BF16 || L->kv_dtype != AH_DTYPE_BF16 ||
        !st->num_reqs)
        return AH_OK;
    if (!cpu_amx_reserve(h, (void **)&st->pp_off, &st->cap_pp_off, st->num_reqs,
                         sizeof *st->pp_off) ||
        !cpu_amx_reserve(h, (void **)&st->pp_np, &st->cap_pp_np, st->num_reqs, sizeof *st->pp_np))
        return ah_fail(&st->err, AH_ERR_OUT_OF_MEMORY, "cannot allocate the pre-packing plan");
    const uint32_t ng = L->group >= CPU_AMX_RMAX ? CPU_AMX_RMAX : L->group;
    size_t total = 0;
    uint32_t ntasks = 0;
    for (uint32_t r = 0; r < st->num_reqs; r++) {
        const uint32_t qlen = (uint32_t)(st->qsl[r + 1] - st->qsl[r]);
        st->pp_off[r] = CPU_AMX_NO_PP;
        st->pp_np[r] = 0;
        if (qlen <= tq || (uint64_t)tq * ng < st->ctx->tile_min_rows || st->seq_lens[r] <= 0)
            continue;
        const uint32_t np = ((uint32_t)st->seq_lens[r] + 15) / 16 + 1;
        const size_t need = (size_t)L->hk * np * CPU_AMX_PP_PIECE(L);
        if ((total + need) * 2 > CPU_AMX_PP_MAX) continue;
        st->pp_off[r] = total;
        st->pp_np[r] = np;
        total += need;
        ntasks += L->hk * ((np + 31) / 32);
    }
    if (!ntasks) return AH_OK;
    /* 32 elements more: the packed pieces start on a 64-byte boundary (the
     * packing stores and the vdpbf16ps loads are aligned ones). */
    if (!cpu_amx_reserve(h, (void **)&st->pp, &st->cap_pp, total + 32, 2) ||
        !cpu_amx_reserve(h, (void **)&st->pp_tasks, &st->cap_pp_tasks, ntasks,
                         sizeof *st->pp_tasks))
        return ah_fail(&st->err, AH_ERR_OUT_OF_MEMORY,
                       "cannot allocate %zu bytes of pre-packed K/V", total * 2);
    for (uint32_t r = 0; r < st->num_reqs; r++) {
        if (st->pp_off[r] == CPU_AMX_NO_PP) continue;
        /* Pieces before the first query's window are never read (items
         * start at its lower bound): skip them, so a released block there
         * is never touched. Block sizes are multiples of 16, so the piece
         * holding the bound lies in a visible block. */
        const uint32_t p_lo = first_piece(st, r);
        for (uint32_t kvh = 0; kvh < L->hk; kvh++)
            for (uint32_t p = p_lo; p < st->pp_np[r]; p += 32) {
                cpu_amx_pptask t = {r, kvh, p, p + 32 < st->pp_np[r] ? p + 32 : st->pp_np[r]};
                st->pp_tasks[st->n_pp_tasks++] = t;
            }
    }
    return AH_OK;
}

ah_status cpu_amx_plan(ah_state *st, const ah_batch *b)
{
    const cpu_amx_layer *L = &st->L;
    ah_status rc = copy_batch(st, b);
    if (rc != AH_OK) return rc;
    st->n_items = st->n_merges = 0;

    /* Tiles: a KV head's query heads times as many tokens as fit RMAX rows;
     * a single-token request instead takes several KV heads per item, so
     * that the item reads whole NHD block rows in address order. */
    const uint32_t G = L->group;
    const uint32_t ng = G >= CPU_AMX_RMAX ? CPU_AMX_RMAX : G;
    const uint32_t tq = G >= CPU_AMX_RMAX ? 1 : CPU_AMX_RMAX / G;
    uint32_t kv_per_decode = G >= CPU_AMX_RMAX ? 1 : CPU_AMX_RMAX / G;
    if (kv_per_decode > CPU_AMX_MAXKV) kv_per_decode = CPU_AMX_MAXKV;
    uint64_t total = 0;
    for (uint32_t r = 0; r < st->num_reqs; r++) {
        const uint32_t q0 = (uint32_t)st->qsl[r], qlen = (uint32_t)st->qsl[r + 1] - q0;
        const int32_t sl = st->seq_lens[r], first = sl - (int32_t)qlen;
        const uint32_t kvstep = qlen == 1 ? kv_per_decode : 1;
        for (uint32_t kvh = 0; kvh < L->hk; kvh += kvstep)
            for (uint32_t g0 = 0; g0 < G; g0 += ng)
                for (uint32_t t = 0; t < qlen; t += tq) {
                    cpu_amx_item it;
                    memset(&it, 0, sizeof it);
                    it.req = r;
                    it.kvh = kvh;
                    it.nkv = kvh + kvstep <= L->hk ? kvstep : L->hk - kvh;
                    it.g0 = g0;
                    it.g1 = g0 + ng < G ? g0 + ng : G;
                    it.t0 = q0 + t;
                    it.t1 = q0 + (t + tq < qlen ? t + tq : qlen);
                    it.pos0 = first + (int32_t)t;
                    it.rows = it.nkv * (it.t1 - it.t0) * (it.g1 - it.g0);
                    int32_t lo, hi, lo2, hi2;
                    cpu_amx_visible(L, it.pos0, &lo, &hi);
                    cpu_amx_visible(L, it.pos0 + (int32_t)(it.t1 - it.t0) - 1, &lo2, &hi2);
                    it.k0 = lo < 0 ? 0 : lo;
                    it.k1 = hi2 >= sl ? sl : hi2 + 1;
                    if (it.k1 < it.k0) it.k1 = it.k0;
                    it.part = -1;
                    it.cost = (uint64_t)it.rows * (uint64_t)(it.k1 - it.k0 + 16) + 64;
                    total += it.cost;
                    if (!push_item(st, &it))
                        return ah_fail(&st->err, AH_ERR_OUT_OF_MEMORY,
                                       "cannot allocate work items");
                }
    }

    /* Split-KV: with fewer items than a few per thread, cut long key ranges
     * into 16-aligned chunks of at least split_min keys. */
    const uint32_t nt = (uint32_t)st->ctx->threads;
    uint32_t nparts = 0;
    if (nt > 1 && st->n_items < 4 * nt && total) {
        const uint64_t target = total / (4 * nt) + 1;
        const uint32_t n0 = st->n_items;
        for (uint32_t i = 0; i < n0; i++) {
            cpu_amx_item it = st->items[i];
            uint32_t len = (uint32_t)(it.k1 - it.k0);
            uint32_t ns = (uint32_t)((it.cost + target - 1) / target);
            uint32_t maxs = len / st->ctx->split_min;
            if (ns > maxs) ns = maxs;
            if (ns > 64) ns = 64;
            if (ns < 2) continue;
            cpu_amx_item m = it;
            m.part = (int32_t)nparts;
            m.nparts = ns;
            if (!cpu_amx_reserve(st->ctx->host, (void **)&st->merges, &st->cap_merges,
                                 st->n_merges + 1, sizeof *st->merges))
                return ah_fail(&st->err, AH_ERR_OUT_OF_MEMORY, "cannot allocate merge list");
            st->merges[st->n_merges++] = m;
            uint32_t chunk = ((len + ns - 1) / ns + 15) & ~15u;
            int32_t k = it.k0;
            for (uint32_t s = 0; s < ns; s++) {
                cpu_amx_item p = it;
                p.k0 = k;
                p.k1 = s + 1 == ns ? it.k1 : ((it.k0 + (int32_t)chunk * (int32_t)(s + 1)) & ~15);
                if (p.k1 > it.k1) p.k1 = it.k1;
                if (p.k1 < p.k0) p.k1 = p.k0;
                k = p.k1;
                p.part = (int32_t)(nparts + s);
                p.cost = (uint64_t)p.rows * (uint64_t)(p.k1 - p.k0 + 16) + 64;
                if (s == 0) st->items[i] = p;
                else if (!push_item(st, &p))
                    return ah_fail(&st->err, AH_ERR_OUT_OF_MEMORY, "cannot allocate work items");
            }
            nparts += ns;
        }
    }
    if (nparts) {
        size_t need = (size_t)nparts * CPU_AMX_RMAX;
        if (!cpu_amx_reserve(st->ctx->host, (void **)&st->part_o, &st->cap_part_o, need * L->dv,
                             4) ||
            !cpu_amx_reserve(st->ctx->host, (void **)&st->part_lse, &st->cap_part_lse, need, 4))
            return ah_fail(&st->err, AH_ERR_OUT_OF_MEMORY, "cannot allocate split-KV partials");
    }
    rc = plan_prepack(st, tq);
    if (rc != AH_OK) return rc;
    qsort(st->items, st->n_items, sizeof *st->items, cmp_cost_desc);
    return AH_OK;
}

/* ---- finishing rows ------------------------------------------------------- */

/* ah_f32_to_bf16 (round to nearest even, NaN kept quiet) without a
 * branch, so that row_out's loop vectorises: a scalar output conversion of
 * a prefill item (128 rows x head size) is a visible share of its time. */
static inline uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

static void row_out(const cpu_amx_run *run, uint32_t tok, uint32_t head, const float *o, float mult,
                    float lse)
{
    const cpu_amx_layer *L = run->L;
    const size_t qsz = ah_dtype_size(L->q_dtype);
    char *dst =
        (char *)run->out + ((int64_t)tok * run->o_ts + (int64_t)head * run->o_hs) * (int64_t)qsz;
    if (L->q_dtype == AH_DTYPE_FP32) {
        float *d = (float *)dst;
        for (uint32_t c = 0; c < L->dv; c++) d[c] = o[c] * mult;
    } else if (L->q_dtype == AH_DTYPE_BF16) {
        uint16_t *d = (uint16_t *)dst;
        for (uint32_t c = 0; c < L->dv; c++) d[c] = bf16_of(o[c] * mult);
    } else {
        for (uint32_t c = 0; c < L->dv; c++) ah_store_f32(dst, c, L->q_dtype, o[c] * mult);
    }
    if (run->lse) run->lse[(int64_t)tok * run->l_ts + (int64_t)head * run->l_hs] = lse;
}

/* Rows of an item that saw every key: add the sink, normalise, store. */
static void finish_item(const cpu_amx_run *run, const cpu_amx_item *it, const cpu_amx_scratch *ws,
                        float *part_o, float *part_lse)
{
    const cpu_amx_layer *L = run->L;
    for (uint32_t i = 0; i < it->rows; i++) {
        float m = ws->m[i], l = ws->l[i];
        const float *o = ws->o + (size_t)i * L->dv;
        if (it->part >= 0) {
            float *po = part_o + ((size_t)it->part * CPU_AMX_RMAX + i) * L->dv;
            float inv = l > 0 ? 1.0f / l : 0.0f;
            for (uint32_t c = 0; c < L->dv; c++) po[c] = o[c] * inv;
            part_lse[(size_t)it->part * CPU_AMX_RMAX + i] = l > 0 ? m + logf(l) : -INFINITY;
            continue;
        }
        uint32_t tok, head, toff, kk;
        cpu_amx_row(L, it, i, &tok, &head, &toff, &kk);
        float mult, lse;
        if (L->sinks) {
            float sink = run->sinks[head];
            float M = l > 0 && m > sink ? m : sink;
            float em = l > 0 ? expf(m - M) : 0.0f;
            float tot = l * em + (sink == -INFINITY ? 0.0f : expf(sink - M));
            /* no key and a sink of -inf (a context-parallel rank after the
             * first adds none): nothing to attend */
            mult = tot > 0 ? em / tot : 0.0f;
            lse = tot > 0 ? M + logf(tot) : -INFINITY;
        } else {
            mult = l > 0 ? 1.0f / l : 0.0f;
            lse = l > 0 ? m + logf(l) : -INFINITY;
        }
        row_out(run, tok, head, o, mult, lse);
    }
}

/* Rows [r0, r1) of a split item: combine the parts' (o, lse) and the sink. */
static void merge_item(const cpu_amx_run *run, const cpu_amx_item *m, uint32_t r0, uint32_t r1,
                       const float *part_o, const float *part_lse, float *acc)
{
    const cpu_amx_layer *L = run->L;
    for (uint32_t i = r0; i < r1; i++) {
        uint32_t tok, head, toff, kk;
        cpu_amx_row(L, m, i, &tok, &head, &toff, &kk);
        float M = L->sinks ? run->sinks[head] : -INFINITY;
        for (uint32_t p = 0; p < m->nparts; p++) {
            float x = part_lse[((size_t)m->part + p) * CPU_AMX_RMAX + i];
            if (x > M) M = x;
        }
        memset(acc, 0, L->dv * sizeof(float));
        if (M == -INFINITY) {
            row_out(run, tok, head, acc, 0.0f, -INFINITY);
            continue;
        }
        float tot = L->sinks ? expf(run->sinks[head] - M) : 0.0f;
        for (uint32_t p = 0; p < m->nparts; p++) {
            float x = part_lse[((size_t)m->part + p) * CPU_AMX_RMAX + i];
            if (x == -INFINITY) continue;
            float w = expf(x - M);
            tot += w;
            const float *po = part_o + (((size_t)m->part + p) * CPU_AMX_RMAX + i) * L->dv;
            for (uint32_t c = 0; c < L->dv; c++) acc[c] += w * po[c];
        }
        row_out(run, tok, head, acc, 1.0f / tot, M + logf(tot));
    }
}

void cpu_amx_execute(ah_state *st, const cpu_amx_run *run)
{
    const cpu_amx_kernels *k = st->ctx->k;
    const int tile_ok =
        k->attend_bf16 && st->L.q_dtype == AH_DTYPE_BF16 && st->L.kv_dtype == AH_DTYPE_BF16;
    const uint32_t tile_min = st->ctx->tile_min_rows;
    const cpu_amx_attend_fn dec =
        st->ctx->amx_decode && k->attend_dec_amx ? k->attend_dec_amx : k->attend_dec;
    const int nt = st->ctx->threads;
    const long n = (long)st->n_items;
    /* Pack the prefill requests' K and V once (every item of them reads
     * it), then run the items. */
    const long npp = (long)st->n_pp_tasks;
    if (npp && run->pp) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1 && npp > 1)
        for (long i = 0; i < npp; i++) k->prepack(run, &st->pp_tasks[i]);
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1 && n > 1)
    for (long i = 0; i < n; i++) {
#ifdef _OPENMP
        cpu_amx_scratch *ws = &st->ws[omp_get_thread_num()];
#else
        cpu_amx_scratch *ws = &st->ws[0];
#endif
        const cpu_amx_item *it = &st->items[i];
        if (st->mask) attend_masked(st, run, it, ws);
        else if (tile_ok && it->nkv == 1 && it->rows >= tile_min) k->attend_bf16(run, it, ws);
        else if (tile_ok && dec) dec(run, it, ws);
        else k->attend(run, it, ws);
        finish_item(run, it, ws, st->part_o, st->part_lse);
    }
    /* Merges run in slices of rows: one long split request (its parts
     * read back from every thread's writes) would otherwise be merged by a
     * single thread while the others wait. */
    const long nm = (long)st->n_merges * CPU_AMX_MERGE_SLICES;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1 && nm > 1)
    for (long i = 0; i < nm; i++) {
#ifdef _OPENMP
        cpu_amx_scratch *ws = &st->ws[omp_get_thread_num()];
#else
        cpu_amx_scratch *ws = &st->ws[0];
#endif
        const cpu_amx_item *m = &st->merges[i / CPU_AMX_MERGE_SLICES];
        const uint32_t sl = (uint32_t)(i % CPU_AMX_MERGE_SLICES);
        const uint32_t r0 = m->rows * sl / CPU_AMX_MERGE_SLICES,
                       r1 = m->rows * (sl + 1) / CPU_AMX_MERGE_SLICES;
        if (r1 > r0) merge_item(run, m, r0, r1, st->part_o, st->part_lse, ws->o);
    }
}
