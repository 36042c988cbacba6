/*
 * State creation and planning: the engine's batch (vLLM's common metadata)
 * becomes FA3-style metadata. Per request: cu_seqlens_q (query_start_loc),
 * seqused_k (seq_lens) and its page-table row; per query tile and KV head a
 * work item with its exact key range (causal and window limits applied, so
 * invisible KV tiles are never visited); long items split along KV so every
 * SM has work, each split writing float partials that a combine kernel
 * merges by LSE. Items are sorted by L2 section (the query tiles that read
 * the same keys run close together), longest first within each, and
 * handed to a persistent grid of one CTA per SM by list scheduling
 * (fa3_order.h).
 *
 * Everything is sized from ah_limits at creation. plan() fills pinned
 * staging buffers and copies them to the device on the caller's stream; in
 * AH_PLAN_REPLAY mode that copy is all it does, so a captured graph replays
 * any batch within the limits.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fa3_order.h"
#include "fa3_state.h"

static int fa3_ceil_div(int64_t a, int64_t b) { return (int)((a + b - 1) / b); }

/* Parts partials may use: four waves of full tiles. */
static int64_t fa3_part_rows_cap(int sms, int block_m) { return (int64_t)4 * sms * block_m; }

static void fa3_caps_for(const ah_layer_spec *spec, const ah_limits *lim, int sms, int *cap_work,
                         int *cap_combine, int64_t *part_rows)
{
    const int group = (int)(spec->num_q_heads / spec->num_kv_heads);
    const int block_m = FA3_BLOCK_M(spec->qk_head_size), tpt = block_m / group;
    const int64_t base =
        ((int64_t)lim->max_num_tokens / tpt + lim->max_num_reqs) * spec->num_kv_heads;
    *cap_combine = (int)base;
    *cap_work = (int)(2 * base + 2 * sms + 64);
    *part_rows = fa3_part_rows_cap(sms, block_m);
}

ah_status fa3_workspace_size(const ah_layer_spec *spec, const ah_limits *lim, uint64_t *bytes)
{
    if (!spec || !lim || !bytes || !spec->num_kv_heads) return AH_ERR_INVALID_ARGUMENT;
    int sms = 132, cw, cc;
    int64_t rows;
    fa3_caps_for(spec, lim, sms, &cw, &cc, &rows);
    *bytes = (uint64_t)cw * sizeof(fa3_work) + (uint64_t)cc * sizeof(fa3_combine_job) +
             (uint64_t)rows * (spec->v_head_size + 1) * sizeof(float) + sizeof(fa3_counts);
    return AH_OK;
}

void fa3_state_destroy(ah_state *st)
{
    if (!st) return;
    (void)fa3_use_device(st->ctx); /* its buffers are freed on their device */
    cudaFree(st->d_work);
    cudaFree(st->d_combine);
    cudaFree(st->d_counts);
    cudaFree(st->d_part_o);
    cudaFree(st->d_part_lse);
    cudaFree(st->d_kstart);
    cudaFreeHost(st->h_kstart);
    cudaFreeHost(st->h_work);
    cudaFreeHost(st->h_combine);
    cudaFreeHost(st->h_counts);
    if (st->staged) cudaEventDestroy(st->staged);
    const ah_host_services *host = st->ctx->host;
    host->free(host, st->h_cost);
    host->free(host, st->h_tmp);
    host->free(host, st->h_order);
    host->free(host, st);
}

ah_status fa3_state_create(ah_context *ctx, const ah_layer_spec *spec, const ah_limits *lim,
                           ah_state **out)
{
    *out = NULL;
    ah_errbuf *e = &ctx->svc.err;
    if (!spec || !lim)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "state_create: spec or limits is NULL");
    AH_CUDA_TRY(e, fa3_use_device(ctx));
    /* The caps' sets and rules, for drivers that skip the host's selection;
     * then what the caps cannot say. */
    ah_status cs = ah_spec_check_caps(spec, &fa3_caps, e);
    if (cs == AH_OK) cs = ah_spec_check_combination(spec, &fa3_caps, e);
    if (cs != AH_OK) return cs;
    const uint32_t d = spec->qk_head_size;
    const int group = (int)(spec->num_q_heads / spec->num_kv_heads);
    if (group > (int)fa3_caps.max_head_groups)
        return ah_fail(e, AH_ERR_UNSUPPORTED,
                       "%d query heads per KV head: cuda_fa3 packs at most %u", group,
                       fa3_caps.max_head_groups);
    if (spec->use_mla) return ah_fail(e, AH_ERR_UNSUPPORTED, "MLA is not served by cuda_fa3");
    if (ctx->smem_optin < fa3_fwd_smem_bytes((int)d))
        return ah_fail(e, AH_ERR_UNSUPPORTED,
                       "head size %u needs %zu bytes of shared memory, the device allows %zu", d,
                       fa3_fwd_smem_bytes((int)d), ctx->smem_optin);

    const ah_host_services *host = ctx->host;
    ah_state *st = (ah_state *)host->alloc(host, sizeof *st);
    if (!st) return ah_fail(e, AH_ERR_OUT_OF_MEMORY, "state_create: out of host memory");
    memset(st, 0, sizeof *st);
    st->ctx = ctx;
    st->spec = *spec;
    st->lim = *lim;
    st->group = group;
    st->tpt = FA3_BLOCK_M(d) / group;
    st->ragged = ah_spec_ragged(spec);
    /* one CTA per SM (every Hopper part has fewer than FA3_MAX_GRID) */
    st->grid = ctx->sms < FA3_MAX_GRID ? ctx->sms : FA3_MAX_GRID;
    fa3_caps_for(spec, lim, ctx->sms, &st->cap_work, &st->cap_combine, &st->cap_part_rows);
    /* The config keys' values, typed and range-checked by the host against
     * fa3_config_keys (fa3_plugin.cpp). */
    st->max_splits = (int)host->config_int(host, "max_splits");
    /* FP8 GEMMs only where the model allows FP8 math (the layer's
     * fp8_attention) and the config does not forbid them. */
    const int fp8_off = host->config_int(host, "fp8_compute") == FA3_FP8_COMPUTE_OFF;
    st->fp8_compute = !fp8_off && AH_HAS_FIELD(spec, ah_layer_spec, fp8_attention) &&
                      spec->fp8_attention && spec->kv_dtype == AH_DTYPE_FP8_E4M3;
    const int vt_mib = (int)host->config_int(host, "fp8_vt_scratch_mib");
    st->vt_min_reads = (int)host->config_int(host, "fp8_vt_min_reads");
    const int64_t l2_mib = host->config_int(host, "l2_section_mib");
    st->l2_section = l2_mib ? l2_mib << 20 : (int64_t)ctx->l2_bytes / 2;
    const int vt_layer = st->fp8_compute && d == 128; /* the FP8-compute kernel's head size */
    pthread_mutex_lock(&ctx->vt_lock); /* state_create runs concurrently on one context */
    if (vt_layer && vt_mib > 0 && !ctx->vt_tried) {
        /* A failed allocation only costs speed: the kernel transposes V itself. */
        ctx->vt_tried = 1;
        const size_t bytes = (size_t)vt_mib << 20;
        const size_t flags = fa3_vt_flag_bytes(bytes);
        if (cudaMalloc((void **)&ctx->vt_scratch, bytes) == cudaSuccess &&
            cudaMalloc((void **)&ctx->vt_flags, flags) == cudaSuccess &&
            cudaMemset(ctx->vt_flags, 0, flags) == cudaSuccess) {
            ctx->vt_bytes = bytes;
        } else {
            (void)cudaGetLastError();
            cudaFree(ctx->vt_scratch);
            cudaFree(ctx->vt_flags);
            ctx->vt_scratch = NULL;
            ctx->vt_flags = NULL;
            if (host->log)
                host->log(
                    host, AH_LOG_WARN,
                    "cuda_fa3: no device memory for the V^T scratch; FP8 compute transposes V in the kernel");
        }
    }
    if (vt_layer && ctx->vt_scratch)
        st->cap_vt_tiles = (int)(ctx->vt_bytes / ((size_t)spec->num_kv_heads * d * FA3_VT_KEYS));
    pthread_mutex_unlock(&ctx->vt_lock);

    cudaError_t ce = cudaSuccess;
#define FA3_ALLOC(call) \
    do { \
        if (ce == cudaSuccess) ce = (call); \
    } while (0)
    FA3_ALLOC(cudaMalloc((void **)&st->d_work, sizeof(fa3_work) * st->cap_work));
    FA3_ALLOC(cudaMalloc((void **)&st->d_combine, sizeof(fa3_combine_job) * st->cap_combine));
    FA3_ALLOC(cudaMalloc((void **)&st->d_counts, sizeof(fa3_counts)));
    FA3_ALLOC(cudaMalloc((void **)&st->d_part_o, sizeof(float) * d * st->cap_part_rows));
    FA3_ALLOC(cudaMalloc((void **)&st->d_part_lse, sizeof(float) * st->cap_part_rows));
    if (st->ragged) {
        FA3_ALLOC(cudaMalloc((void **)&st->d_kstart, sizeof(int32_t) * (lim->max_num_reqs + 1)));
        FA3_ALLOC(
            cudaMallocHost((void **)&st->h_kstart, sizeof(int32_t) * (lim->max_num_reqs + 1)));
    }
    FA3_ALLOC(cudaMallocHost((void **)&st->h_work, sizeof(fa3_work) * st->cap_work));
    FA3_ALLOC(cudaMallocHost((void **)&st->h_combine, sizeof(fa3_combine_job) * st->cap_combine));
    FA3_ALLOC(cudaMallocHost((void **)&st->h_counts, sizeof(fa3_counts)));
    FA3_ALLOC(cudaEventCreateWithFlags(&st->staged, cudaEventDisableTiming));
    FA3_ALLOC(cudaMemset(st->d_counts, 0, sizeof(fa3_counts)));
#undef FA3_ALLOC
    st->h_cost = (int32_t *)host->alloc(host, sizeof(int32_t) * st->cap_work);
    st->h_tmp = (fa3_work *)host->alloc(host, sizeof(fa3_work) * st->cap_work);
    if (ce != cudaSuccess || !st->h_cost || !st->h_tmp) {
        ah_status s = ce != cudaSuccess ? ah_cuda_status(ce) : AH_ERR_OUT_OF_MEMORY;
        ah_fail(e, s, "state_create: %s",
                ce != cudaSuccess ? cudaGetErrorString(ce) : "out of host memory");
        (void)cudaGetLastError();
        fa3_state_destroy(st);
        return s;
    }
    *out = st;
    return AH_OK;
}

/* Sort work items by L2 section, then longest first by h_cost's keys
 * (fa3_sort_key), then give each of the g CTAs its share (fa3_order.h). */
static ah_status fa3_sort_work(ah_state *st, int n, int max_key, int nsec, int g, int BN)
{
    const ah_host_services *host = st->ctx->host;
    const int top = max_key > nsec ? max_key : nsec;
    const size_t sort_bytes = sizeof(int) * (size_t)(top + 2);
    /* keys are twice the tiles (plus 1 for a publisher): loads reach 4 + max_key / 2 */
    const int max_load = 4 + max_key / 2;
    const size_t assign_bytes = fa3_assign_scratch(n, g, max_load);
    const size_t need = sort_bytes > assign_bytes ? sort_bytes : assign_bytes;
    if (need > st->order_bytes) { /* grows to the largest plan's need, then stays */
        host->free(host, st->h_order);
        st->h_order = host->alloc(host, need);
        st->order_bytes = st->h_order ? need : 0;
        if (!st->h_order)
            return ah_fail(&st->err, AH_ERR_OUT_OF_MEMORY,
                           "plan: out of host memory for the work order");
    }
    fa3_sort_items(st->h_work, st->h_tmp, st->h_cost, n, max_key, nsec, (int *)st->h_order);
    fa3_assign_ctas(st->h_work, st->h_counts->cta_work, st->h_tmp, n, g, BN, max_load, st->h_order);
    return AH_OK;
}

/* FP8 compute: the requests whose KV tiles their query tiles read at least
 * vt_min_reads times on average share V^T through the scratch (a slab per
 * 128-key tile they touch and KV head), in batch order while it has room;
 * the kernel transposes V of the others in every item. items: pass 1's
 * h_tmp[0..n), grouped by request. Returns the tiles given out. */
static int fa3_plan_vt(ah_state *st, int n)
{
    int tiles = 0;
    for (int i = 0, j; i < n; i = j) {
        const int r = st->h_tmp[i].req;
        int lo = 0x7fffffff, hi = 0;
        int64_t reads = 0;
        for (j = i; j < n && st->h_tmp[j].req == r; j++) {
            const fa3_work *w = &st->h_tmp[j];
            if (w->kv_hi <= w->kv_lo) continue;
            const int a = w->kv_lo / FA3_VT_KEYS, z = fa3_ceil_div(w->kv_hi, FA3_VT_KEYS);
            lo = a < lo ? a : lo;
            hi = z > hi ? z : hi;
            reads += z - a;
        }
        if (hi <= lo || reads < (int64_t)st->vt_min_reads * (hi - lo) ||
            tiles + (hi - lo) > st->cap_vt_tiles)
            continue;
        for (int k = i; k < j; k++) {
            st->h_tmp[k].vt_base = tiles;
            st->h_tmp[k].vt_lo = lo;
        }
        tiles += hi - lo;
    }
    return tiles;
}

/* The lowest start of the key ranges of the request whose pass-1 items
 * begin at items[i] (an item of no keys starts nowhere). */
static int fa3_req_lo(const fa3_work *items, int i, int n)
{
    int lo = 0x7fffffff;
    for (int j = i; j < n && items[j].req == items[i].req; j++)
        if (items[j].kv_hi > items[j].kv_lo && items[j].kv_lo < lo) lo = items[j].kv_lo;
    return lo;
}

/* A request whose items (h_work[from..to)) found no publisher reads no
 * scratch: no reader would ever see its images out. */
static void fa3_unshare_unpublished(ah_state *st, int from, int to, int published)
{
    if (!published)
        for (int i = from; i < to; i++) st->h_work[i].vt_base = -1;
}

ah_status fa3_plan(ah_state *st, const ah_batch *b, ah_plan_mode mode, void *stream)
{
    ah_errbuf *e = &st->err;
    AH_CUDA_TRY(e, fa3_use_device(st->ctx));
    const int ragged = st->ragged;
    if (!b || !b->query_start_loc_host || !b->seq_lens_host ||
        (!ragged && (!b->block_table_host || !b->block_table)))
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "plan: the batch lacks host copies or a block table");
    if (b->num_reqs > st->lim.max_num_reqs || b->num_tokens > st->lim.max_num_tokens)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "plan: batch of %u requests / %u tokens exceeds the limits %u / %u",
                       b->num_reqs, b->num_tokens, st->lim.max_num_reqs, st->lim.max_num_tokens);
    /* A ragged layer's keys: request r's rows cu_seqlens_k[r] .. [r + 1] of
     * forward's key and value, its queries after them (ah_ragged_keys). */
    const int32_t *cuk = ragged ? ah_batch_cu_seqlens_k(b) : NULL;
    if (ragged && !cuk)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "plan: a ragged layer needs the batch's cu_seqlens_k (host copy)");
    const int context_keys = ragged && ah_batch_ragged_keys(b) == AH_RAGGED_KEYS_CONTEXT;
    int32_t bt_stride = 0;
    if (!ragged) {
        if (b->block_table->ndim != 2)
            return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "plan: block_table must be 2-D");
        bt_stride = (int32_t)ah_dl_stride(b->block_table, 0);
    }
    if (mode == AH_PLAN_REPLAY &&
        (!st->planned ||
         (!ragged && ((const int32_t *)ah_dl_data(b->block_table) != st->block_table ||
                      bt_stride != st->bt_stride))))
        return ah_fail(
            e, AH_ERR_INVALID_ARGUMENT,
            "plan(REPLAY): the block table must be the captured one, rewritten in place");

    /* The previous plan's copies must have left the staging buffers. */
    if (st->staged_pending) AH_CUDA_TRY(e, cudaEventSynchronize(st->staged));

    const ah_layer_spec *sp = &st->spec;
    const int G = st->group, tpt = st->tpt, BN = FA3_BLOCK_N(sp->qk_head_size);
    const int causal = ah_spec_causal(sp), cross = sp->attn_type == AH_ATTN_ENCODER_DECODER;
    const int W = (int)sp->sliding_window;
    /* a cross layer's keys are each request's encoder tokens, all visible */
    const int32_t *key_lens = cross ? ah_batch_encoder_seq_lens(b) : b->seq_lens_host;
    if (!key_lens)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "plan: a cross layer needs encoder_seq_lens");
    auto klen = [&](uint32_t r) -> int { return ragged ? cuk[r + 1] - cuk[r] : key_lens[r]; };
    const int Hk = (int)sp->num_kv_heads;

    /* K and V bytes of one (request, KV head) pair of a request with more
     * than one query tile, whose tiles share its keys (L2 sections). */
    const int64_t key_bytes =
        (int64_t)(sp->qk_head_size + sp->v_head_size) * (int64_t)ah_dtype_size(sp->kv_dtype);
    auto pair_bytes = [&](uint32_t r) -> int64_t {
        const int qlen = b->query_start_loc_host[r + 1] - b->query_start_loc_host[r];
        return qlen > tpt ? (int64_t)klen(r) * key_bytes : 0;
    };
    int64_t shared_bytes = 0;
    for (uint32_t r = 0; r < b->num_reqs; r++) shared_bytes += pair_bytes(r) * Hk;
    const int nsec = fa3_section_count(shared_bytes, st->l2_section);

    /* Pass 1: one item per (request, query tile); its cost in KV tiles. */
    int n = 0, max_key = 0, max_ntok = 0;
    if (b->num_reqs > 0 && (int64_t)b->num_tokens / tpt + b->num_reqs > st->cap_combine)
        return ah_fail(e, AH_ERR_INTERNAL, "plan: more query tiles than the limits allow");
    int64_t total_cost = 0;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        const int q0 = b->query_start_loc_host[r], qlen = b->query_start_loc_host[r + 1] - q0;
        const int seq = klen(r);
        /* the first query's position: after the keys on a context step */
        const int q_at = context_keys ? seq : seq - qlen;
        for (int t0 = 0; t0 < qlen; t0 += tpt) {
            fa3_work w;
            w.req = (int32_t)r;
            w.q_tok0 = q0 + t0;
            w.q_ntok = qlen - t0 < tpt ? qlen - t0 : tpt;
            if (w.q_ntok > max_ntok) max_ntok = w.q_ntok;
            w.pos0 = q_at + t0;
            fa3_item_keys(causal, cross, W, seq, w.pos0, w.q_ntok, &w.kv_lo, &w.kv_hi);
            w.kvh = 0;
            w.part_row = -1;
            w.vt_base = -1;
            w.vt_lo = 0;
            w.vt_pub = 0;
            w.section = 0;
            const int cost = fa3_tiles(w.kv_lo, w.kv_hi, BN);
            if (n >= st->cap_combine)
                return ah_fail(e, AH_ERR_INTERNAL, "plan: more query tiles than the limits allow");
            st->h_tmp[n] = w;
            total_cost += (int64_t)cost * Hk;
            n++;
        }
    }

    /* Graphs never use the scratch (see ah_context): eager plans only. */
    const int vt_tiles = st->cap_vt_tiles && mode == AH_PLAN_EAGER ? fa3_plan_vt(st, n) : 0;

    /* Pass 2: split items longer than a fair share of the machine, within
     * the partial-buffer budget, then replicate over KV heads. */
    const int64_t fair = total_cost / st->grid > 4 ? total_cost / st->grid : 4;
    int nw = 0, nc = 0, req_w0 = 0, req_pub = 0, req_lo = 0;
    int64_t part_used = 0, shared_before = 0, pair = 0;
    for (int i = 0; i < n; i++) {
        fa3_work base = st->h_tmp[i];
        if (i == 0 ||
            base.req != st->h_tmp[i - 1].req) { /* a new request; the last one's items end at nw */
            if (i) fa3_unshare_unpublished(st, req_w0, nw, req_pub);
            req_w0 = nw;
            req_pub = 0;
            req_lo = fa3_req_lo(st->h_tmp, i, n);
            shared_before += pair * Hk;
            pair = pair_bytes((uint32_t)base.req);
        }
        const int cost = fa3_tiles(base.kv_lo, base.kv_hi, BN);
        int s = 1;
        if (cost > fair && st->max_splits > 1) {
            s = fa3_ceil_div(cost, fair);
            if (s > st->max_splits) s = st->max_splits;
            if (s > cost) s = cost;
            const int64_t rows = (int64_t)base.q_ntok * G;
            while (s > 1 && part_used + rows * s * Hk > st->cap_part_rows) s--;
        }
        /* The request's V^T publisher (one per KV head): its first item that
         * is not split and loads every box the others load (copies
         * zero-fill past an item's range). */
        if (base.vt_base >= 0 && !req_pub && s == 1 &&
            fa3_vt_can_publish(&base, req_lo, klen((uint32_t)base.req))) {
            base.vt_pub = 1;
            req_pub = 1;
        }
        const int rows = base.q_ntok * G;
        const int t_lo = base.kv_lo / BN, t_hi = fa3_ceil_div(base.kv_hi, BN);
        for (int h = 0; h < Hk; h++) {
            int part = -1;
            if (s > 1) {
                part = (int)part_used;
                part_used += (int64_t)rows * s;
                fa3_combine_job *j = &st->h_combine[nc++];
                memset(j, 0, sizeof *j);
                j->part_row = part;
                j->rows = rows;
                j->nsplit = s;
                j->q_tok0 = base.q_tok0;
                j->kvh = h;
            }
            for (int k = 0; k < s; k++) {
                if (nw >= st->cap_work)
                    return ah_fail(e, AH_ERR_INTERNAL, "plan: work list overflow");
                fa3_work w = base;
                w.kvh = h;
                w.section = nsec > 1 && pair
                                ? fa3_section_of(shared_before + h * pair, pair, shared_bytes, nsec)
                                : 0;
                if (s > 1) {
                    const int a = t_lo + (int)((int64_t)(t_hi - t_lo) * k / s);
                    const int z = t_lo + (int)((int64_t)(t_hi - t_lo) * (k + 1) / s);
                    w.kv_lo = a * BN > base.kv_lo ? a * BN : base.kv_lo;
                    w.kv_hi = z * BN < base.kv_hi ? z * BN : base.kv_hi;
                    w.part_row = part + k * rows;
                }
                st->h_work[nw] = w;
                const int c = fa3_sort_key(&w, BN);
                st->h_cost[nw] = c;
                if (c > max_key) max_key = c;
                nw++;
            }
        }
    }
    if (n) fa3_unshare_unpublished(st, req_w0, nw, req_pub);
    ah_status so = fa3_sort_work(st, nw, max_key, nsec, st->grid, BN);
    if (so != AH_OK) return so;
    st->h_counts->n_work = nw;
    st->h_counts->n_combine = nc;

    cudaStream_t s = (cudaStream_t)stream;
    AH_CUDA_TRY(e, cudaMemcpyAsync(st->d_work, st->h_work, sizeof(fa3_work) * (size_t)(nw ? nw : 1),
                                   cudaMemcpyHostToDevice, s));
    if (nc)
        AH_CUDA_TRY(e, cudaMemcpyAsync(st->d_combine, st->h_combine,
                                       sizeof(fa3_combine_job) * (size_t)nc, cudaMemcpyHostToDevice,
                                       s));
    if (ragged) {
        memcpy(st->h_kstart, cuk, sizeof(int32_t) * (b->num_reqs + 1));
        AH_CUDA_TRY(e,
                    cudaMemcpyAsync(st->d_kstart, st->h_kstart, sizeof(int32_t) * (b->num_reqs + 1),
                                    cudaMemcpyHostToDevice, s));
    }
    AH_CUDA_TRY(e,
                cudaMemcpyAsync(st->d_counts, st->h_counts,
                                offsetof(fa3_counts, cta_work) + sizeof(int32_t) * (st->grid + 1),
                                cudaMemcpyHostToDevice, s));
    AH_CUDA_TRY(e, cudaEventRecord(st->staged, s));
    st->staged_pending = 1;
    st->n_work = nw;
    st->n_combine = nc;
    st->vt_tiles = vt_tiles;
    st->stage_out = max_ntok * G >= FA3_BLOCK_M(sp->qk_head_size) / 2;
    st->eager = mode == AH_PLAN_EAGER;
    st->num_tokens = b->num_tokens;
    st->num_k_tokens = ragged ? b->num_k_tokens : 0;
    st->block_table = ragged ? NULL : (const int32_t *)ah_dl_data(b->block_table);
    st->bt_stride = bt_stride;
    st->slot_mapping = b->slot_mapping ? (const int64_t *)ah_dl_data(b->slot_mapping) : NULL;
    st->planned = 1;
    return AH_OK;
}
