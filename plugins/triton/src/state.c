/*
 * Per-layer state and planning. A state owns every device buffer its
 * kernels read (batch metadata copies, split-KV workspace), sized once from
 * ah_limits, so a captured CUDA graph keeps pointing at valid memory and a
 * REPLAY plan only rewrites those buffers in place, in stream order. The
 * kernels read the request and token counts from device memory, which is
 * what lets one captured launch serve a replayed batch of other lengths.
 */
#include <string.h>

#include "triton_plugin.h"

static uint32_t tk_cdiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

/* Workspace bytes for a state: metadata (the tree mask's slot included)
 * plus split-KV partials. */
static uint64_t tk_ws_bytes(const ah_layer_spec *spec, const ah_limits *lim, int split_cap,
                            uint32_t head_pad)
{
    uint64_t meta = 8 + 4ull * (lim->max_num_reqs + 1) + 4ull * lim->max_num_reqs +
                    4ull * lim->max_num_reqs * lim->max_blocks_per_req +
                    8ull * lim->max_num_tokens + 8ull * (lim->max_num_reqs + 2);
    uint64_t rows = (uint64_t)lim->max_num_reqs * spec->num_q_heads * (uint64_t)split_cap;
    return meta + rows * 4 * (head_pad + 1);
}

static uint32_t tk_head_pad(uint32_t d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }

ah_status tk_workspace_size(const ah_layer_spec *spec, const ah_limits *lim, uint64_t *bytes)
{
    /* A ragged layer: counts, query_start_loc and cu_seqlens_k only. */
    if (ah_spec_ragged(spec)) {
        *bytes = 8 + 8ull * (lim->max_num_reqs + 1);
        return AH_OK;
    }
    /* Without a context the configuration is unknown: report the largest
     * split workspace (auto) so the figure is an upper bound. */
    *bytes = tk_ws_bytes(spec, lim, TK_MAX_SPLITS, tk_head_pad(spec->qk_head_size));
    return AH_OK;
}

void tk_state_destroy(ah_state *st)
{
    if (!st) return;
    ah_context *ctx = st->ctx;
    const ah_cu_api *cu = ctx->cu;
    cu->ctx_set_current(ctx->cuctx);
    CUdeviceptr *bufs[] = {&st->d_counts,      &st->d_qsl,   &st->d_seq_lens,
                           &st->d_block_table, &st->d_slots, &st->d_mid_o,
                           &st->d_mid_lse,     &st->d_cuk,   &st->d_mask};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (*bufs[i]) cu->mem_free(*bufs[i]);
    if (st->staged) {
        cu->event_sync(st->staged);
        cu->event_destroy(st->staged);
    }
    if (st->h_stage) cu->host_free(st->h_stage);
    ctx->host->free(ctx->host, st);
}

static ah_status tk_state_kernels(ah_state *st)
{
    ah_context *ctx = st->ctx;
    const ah_layer_spec *sp = &st->spec;
    tk_kernels *k = &st->k;
    if (st->ragged) {
        /* PLAIN for layers without soft-cap and ALiBi, where the target
         * has it (not AMD), as for the unified kernel */
        const char *name = "ragged_attention";
        if (!(sp->softcap > 0) && !sp->use_alibi &&
            tk_find_ragged(ctx, "ragged_plain", sp->q_dtype, sp->qk_head_size, sp->v_head_size))
            name = "ragged_plain";
        k->ragged = tk_find_ragged(ctx, name, sp->q_dtype, sp->qk_head_size, sp->v_head_size);
        if (!k->ragged)
            return ah_fail(&ctx->err, AH_ERR_UNSUPPORTED,
                           "no %s kernel for q %s, head sizes qk %u / v %u on %s (not generated)",
                           name, ah_dtype_name(sp->q_dtype), sp->qk_head_size, sp->v_head_size,
                           ctx->arch);
        return tk_function(ctx, k->ragged, tk_sig_ragged, &k->f_ragged, &ctx->err);
    }
    /* FP8 scales in tensors: the forms of the kernels that read them (the
     * reduction takes none: stage 1 applies V's) */
    const int sc = st->scale_tensors;
    struct {
        const char *name, *sig;
        ah_dtype kv;
        const tk_entry **e;
        CUfunction *f;
    } want[] = {
        {sc ? "unified_attention" TK_SCALES_SUFFIX : "unified_attention",
         sc ? tk_sig_unified_scales : tk_sig_unified, sp->kv_dtype, &k->unified, &k->f_unified},
        {sc ? "decode_split_stage1" TK_SCALES_SUFFIX : "decode_split_stage1",
         sc ? tk_sig_stage1_scales : tk_sig_stage1, sp->kv_dtype, &k->stage1, &k->f_stage1},
        {"decode_split_reduce", tk_sig_reduce, sp->q_dtype, &k->reduce, &k->f_reduce},
        {sc ? "kv_write" TK_SCALES_SUFFIX : "kv_write",
         sc ? tk_sig_kv_write_scales : tk_sig_kv_write, sp->kv_dtype, &k->kv_write, &k->f_kv_write},
        /* decoder layers: batches with a tree mask (cross layers ignore it) */
        {sc ? "unified_mask" TK_SCALES_SUFFIX : "unified_mask",
         sc ? tk_sig_unified_mask_scales : tk_sig_unified_mask, sp->kv_dtype, &k->masked,
         &k->f_masked},
    };
    const size_t n_want = sizeof want / sizeof want[0] - (sp->attn_type != AH_ATTN_DECODER);
    /* The PLAIN unified kernel serves layers without soft-cap and ALiBi
     * whose page size is a power of two, where the target has it (not AMD). */
    const char *plain = sc ? "unified_plain" TK_SCALES_SUFFIX : "unified_plain";
    st->plain = !(sp->softcap > 0) && !sp->use_alibi &&
                (sp->block_size & (sp->block_size - 1)) == 0 &&
                tk_find(ctx, plain, sp->q_dtype, sp->kv_dtype, sp->qk_head_size) != NULL;
    if (st->plain) want[0].name = plain;
    for (size_t i = 0; i < n_want; i++) {
        const tk_entry *e = tk_find(ctx, want[i].name, sp->q_dtype, want[i].kv, sp->qk_head_size);
        if (!e)
            return ah_fail(&ctx->err, AH_ERR_UNSUPPORTED,
                           "no %s kernel for q %s, kv %s, head size %u on %s (not generated)",
                           want[i].name, ah_dtype_name(sp->q_dtype), ah_dtype_name(want[i].kv),
                           sp->qk_head_size, ctx->arch);
        ah_status s = tk_function(ctx, e, want[i].sig, want[i].f, &ctx->err);
        if (s) return s;
        *want[i].e = e;
    }
    return AH_OK;
}

/* The spec against the caps (the host selected it by them; a driver that
 * skips the host may not have), and what the caps cannot say. */
static ah_status tk_spec_check(ah_context *ctx, const ah_layer_spec *sp)
{
    ah_errbuf *e = &ctx->err;
    ah_status s = ah_spec_check_caps(sp, &tk_caps, e);
    if (s == AH_OK) s = ah_spec_check_combination(sp, &tk_caps, e);
    if (s != AH_OK) return s;
    if (sp->use_mla) return ah_fail(e, AH_ERR_UNSUPPORTED, "MLA is not supported");
    const ah_kv_scales form = ah_spec_kv_scales(sp);
    const int fp8 = sp->kv_dtype == AH_DTYPE_FP8_E4M3 || sp->kv_dtype == AH_DTYPE_FP8_E5M2;
    if ((unsigned)form >= AH_KV_SCALES_COUNT || (form != AH_KV_SCALES_HOST && !fp8))
        return ah_fail(e, AH_ERR_UNSUPPORTED,
                       "kv_scales %u: scale tensors (tensor, per_head) need an FP8 cache, "
                       "kv_dtype is %s",
                       (unsigned)form, ah_dtype_name(sp->kv_dtype));
    /* The kernels keep the query in its dtype and convert the FP8 cache to
     * it: no FP8 queries, so no query scale to take (AH_FEAT_Q_SCALE is not
     * claimed). */
    if (ah_spec_q_scale(sp))
        return ah_fail(e, AH_ERR_UNSUPPORTED,
                       "use_q_scale: the kernels take no FP8 queries (Q.K^T runs in the query's "
                       "dtype over the converted cache), so they take no query scale");
    if (sp->softcap < 0 || sp->scale < 0)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "negative softcap or scale");
    return AH_OK;
}

/* Query heads per unified program: the largest divisor of the GQA group
 * that fits the program's rows. */
static int tk_heads_per_program(uint32_t group, uint32_t block_m)
{
    for (uint32_t h = group < block_m ? group : block_m; h > 1; h--)
        if (group % h == 0) return (int)h;
    return 1;
}

ah_status tk_state_create(ah_context *ctx, const ah_layer_spec *spec, const ah_limits *lim,
                          ah_state **out)
{
    *out = NULL;
    ah_status s = tk_spec_check(ctx, spec);
    if (s) return s;
    if ((s = tk_ctx_bind(ctx, &ctx->err))) return s;
    ah_state *st = ctx->host->alloc(ctx->host, sizeof *st);
    if (!st) return ah_fail(&ctx->err, AH_ERR_OUT_OF_MEMORY, "out of host memory");
    memset(st, 0, sizeof *st);
    st->ctx = ctx;
    st->spec = *spec;
    st->lim = *lim;
    st->captured_decode = -1;
    st->spec.scale = ah_spec_scale(spec);
    st->ragged = ah_spec_ragged(spec);
    /* ragged layers read no cache: their keys come in the query dtype */
    st->scale_tensors = !st->ragged && ah_spec_kv_scales(spec) != AH_KV_SCALES_HOST;
    st->scale_stride = ah_spec_kv_scales(spec) == AH_KV_SCALES_PER_HEAD;
    st->split_cap = ctx->cfg.num_kv_splits ? ctx->cfg.num_kv_splits : TK_AUTO_SPLIT_CAP;
    if ((s = tk_state_kernels(st))) goto fail;
    const uint32_t group = spec->num_q_heads / spec->num_kv_heads;
    st->heads = tk_heads_per_program(group, (st->ragged ? st->k.ragged : st->k.unified)->block_m);
    if (st->k.masked) st->heads_masked = tk_heads_per_program(group, st->k.masked->block_m);

    /* A paged layer's buffers, or a ragged one's (counts, query_start_loc,
     * cu_seqlens_k); 0 bytes: not this layer's. */
    const ah_cu_api *cu = ctx->cu;
    const int paged = !st->ragged;
    struct {
        CUdeviceptr *p;
        uint64_t bytes;
        const char *what;
    } bufs[] = {
        {&st->d_counts, 8, "counts"},
        {&st->d_qsl, 4ull * (lim->max_num_reqs + 1), "query_start_loc"},
        {&st->d_cuk, st->ragged ? 4ull * (lim->max_num_reqs + 1) : 0, "cu_seqlens_k"},
        {&st->d_seq_lens, paged ? 4ull * lim->max_num_reqs : 0, "seq_lens"},
        {&st->d_block_table, paged ? 4ull * lim->max_num_reqs * lim->max_blocks_per_req : 0,
         "block table"},
        {&st->d_slots, paged ? 8ull * lim->max_num_tokens : 0, "slot mapping"},
        {&st->d_mask, st->k.masked ? 8ull * (lim->max_num_reqs + 2) : 0, "tree mask offsets"},
        {&st->d_mid_o,
         paged
             ? 4ull * lim->max_num_reqs * spec->num_q_heads * st->split_cap * st->k.stage1->head_pad
             : 0,
         "split-KV partial outputs"},
        {&st->d_mid_lse, paged ? 4ull * lim->max_num_reqs * spec->num_q_heads * st->split_cap : 0,
         "split-KV LSE"},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (!bufs[i].bytes) continue;
        CUresult r = cu->mem_alloc(bufs[i].p, bufs[i].bytes);
        if (r) {
            char what[96];
            snprintf(what, sizeof what, "cuMemAlloc(%s, %llu bytes)", bufs[i].what,
                     (unsigned long long)bufs[i].bytes);
            s = tk_cu_fail(cu, &ctx->err, r, what);
            goto fail;
        }
    }
    CUresult r = cu->host_alloc((void **)&st->h_stage, sizeof *st->h_stage);
    if (!r) r = cu->event_create(&st->staged, CU_EVENT_DISABLE_TIMING);
    if (r) {
        s = tk_cu_fail(cu, &ctx->err, r, "pinned staging buffer");
        goto fail;
    }
    *out = st;
    return AH_OK;
fail:
    tk_state_destroy(st);
    return s;
}

/* Checks of an int32 device vector from the batch. */
static ah_status tk_meta_tensor(ah_state *st, const DLTensor *t, const char *name, int64_t min_len,
                                int bits)
{
    if (!t || !t->data) return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "batch %s missing", name);
    if (t->dtype.code != (bits == 64 ? kDLInt : kDLInt) || t->dtype.bits != bits ||
        t->dtype.lanes != 1)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "batch %s: want int%d", name, bits);
    if (t->ndim < 1 || t->shape[0] < min_len)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "batch %s: %lld entries, need %lld", name,
                       t->ndim < 1 ? 0LL : (long long)t->shape[0], (long long)min_len);
    if (t->ndim == 1 && !ah_dl_is_contiguous(t))
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "batch %s is not contiguous", name);
    return AH_OK;
}

/* The request and token counts into d_counts and, for a plan of the
 * masked kernel, the tree mask's address (0: none) into d_mask[0], through
 * pinned memory (wait until the last upload has left it). */
static ah_status tk_upload(ah_state *st, const ah_batch *b, int masked, uint64_t mask_addr,
                           CUstream cs)
{
    ah_context *ctx = st->ctx;
    const ah_cu_api *cu = ctx->cu;
    tk_staging *h = st->h_stage;
    TK_CU(ctx, &st->err, cu->event_sync(st->staged));
    h->counts[0] = (int32_t)b->num_reqs;
    h->counts[1] = (int32_t)b->num_tokens;
    h->mask_addr = mask_addr;
    TK_CU(ctx, &st->err, cu->copy_htod(st->d_counts, h->counts, sizeof h->counts, cs));
    if (masked)
        TK_CU(ctx, &st->err, cu->copy_htod(st->d_mask, &h->mask_addr, sizeof h->mask_addr, cs));
    TK_CU(ctx, &st->err, cu->event_record(st->staged, cs));
    return AH_OK;
}

/* A batch's tree mask on the device: mask_indptr int64 [num_reqs + 1] and
 * custom_mask one byte an element (uint8 or bool, only != 0 is read),
 * holding every request's block (the host copy's last offset). */
static ah_status tk_mask_tensors(ah_state *st, const ah_batch *b)
{
    const DLTensor *m = b->custom_mask;
    ah_status s = tk_meta_tensor(st, b->mask_indptr, "mask_indptr", b->num_reqs + 1, 64);
    if (s) return s;
    if (!b->mask_indptr_host)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "batch custom_mask is set but mask_indptr_host is NULL");
    const int64_t need = b->mask_indptr_host[b->num_reqs];
    if (!m || !m->data)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "batch custom_mask_host is set but custom_mask (device) is missing");
    if (m->ndim != 1 || m->dtype.bits != 8 || m->dtype.lanes != 1 || !ah_dl_is_contiguous(m))
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "batch custom_mask: want a contiguous 1-D tensor of bytes (uint8 or bool)");
    if (m->shape[0] < need)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "batch custom_mask: %lld elements, mask_indptr[%u] = %lld",
                       (long long)m->shape[0], b->num_reqs, (long long)need);
    return AH_OK;
}

/* A ragged layer's plan: the queries' and keys' offsets and where the
 * queries sit. The host plans ragged steps eager only (CUDA graphs capture
 * paged steps), so a ragged state takes no other mode. */
static ah_status tk_plan_ragged(ah_state *st, const ah_batch *b, ah_plan_mode mode, CUstream cs)
{
    ah_context *ctx = st->ctx;
    const ah_cu_api *cu = ctx->cu;
    const ah_limits *lim = &st->lim;
    if (mode != AH_PLAN_EAGER)
        return ah_fail(&st->err, AH_ERR_UNSUPPORTED,
                       "ragged layer: plan mode %d; ragged steps are planned eager only (graphs "
                       "capture paged steps)",
                       (int)mode);
    if (!b->num_reqs || b->num_reqs > lim->max_num_reqs || b->num_tokens > lim->max_num_tokens)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "batch of %u requests, %u tokens: limits are 1..%u requests, %u tokens",
                       b->num_reqs, b->num_tokens, lim->max_num_reqs, lim->max_num_tokens);
    if (!ah_batch_cu_seqlens_k(b))
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "ragged layer: the batch has no cu_seqlens_k (a ragged layer runs on "
                       "ragged steps only)");
    if (ah_batch_custom_mask(b))
        return ah_fail(&st->err, AH_ERR_UNSUPPORTED,
                       "ragged layer: the batch has a tree mask (custom_mask), which a ragged "
                       "step does not take");
    const uint32_t where = ah_batch_ragged_keys(b);
    if (where >= (uint32_t)AH_RAGGED_KEYS_COUNT)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "batch ragged_keys %u: want bottom-right (0) or context (1)", where);
    ah_status s;
    if ((s = tk_meta_tensor(st, b->query_start_loc, "query_start_loc", b->num_reqs + 1, 32)) ||
        (s = tk_meta_tensor(st, b->cu_seqlens_k, "cu_seqlens_k", b->num_reqs + 1, 32)))
        return s;
    if ((s = tk_ctx_bind(ctx, &st->err))) return s;
    if ((s = tk_upload(st, b, 0, 0, cs))) return s;
    TK_CU(ctx, &st->err,
          cu->copy_dtod(st->d_qsl, (CUdeviceptr)(uintptr_t)ah_dl_data(b->query_start_loc),
                        4ull * (b->num_reqs + 1), cs));
    TK_CU(ctx, &st->err,
          cu->copy_dtod(st->d_cuk, (CUdeviceptr)(uintptr_t)ah_dl_data(b->cu_seqlens_k),
                        4ull * (b->num_reqs + 1), cs));
    st->num_reqs = b->num_reqs;
    st->num_tokens = b->num_tokens;
    st->num_k_tokens = b->num_k_tokens;
    st->context_keys = where == (uint32_t)AH_RAGGED_KEYS_CONTEXT;
    st->mode = mode;
    st->decode = 0;
    st->grid_reqs = b->num_reqs;
    st->grid_tokens = b->num_tokens;
    return AH_OK;
}

ah_status tk_plan(ah_state *st, const ah_batch *b, ah_plan_mode mode, void *stream)
{
    if (st->ragged) return tk_plan_ragged(st, b, mode, (CUstream)stream);
    ah_context *ctx = st->ctx;
    const ah_cu_api *cu = ctx->cu;
    CUstream cs = (CUstream)stream;
    const ah_limits *lim = &st->lim;
    /* The host validates the batch's host copies (unless validation is
     * off), not its device tensors: these checks keep the copies below
     * inside the engine's tensors and the state's buffers. */
    if (!b->num_reqs || b->num_reqs > lim->max_num_reqs || b->num_tokens > lim->max_num_tokens)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "batch of %u requests, %u tokens: limits are 1..%u requests, %u tokens",
                       b->num_reqs, b->num_tokens, lim->max_num_reqs, lim->max_num_tokens);
    /* A cross layer's keys are each request's encoder tokens, all visible
     * (causal 0, no window): the kernels take them as the sequence. */
    const int cross = st->spec.attn_type == AH_ATTN_ENCODER_DECODER;
    const DLTensor *key_lens = cross ? b->encoder_seq_lens : b->seq_lens;
    ah_status s;
    if ((s = tk_meta_tensor(st, b->query_start_loc, "query_start_loc", b->num_reqs + 1, 32)) ||
        (s = tk_meta_tensor(st, key_lens, cross ? "encoder_seq_lens" : "seq_lens", b->num_reqs,
                            32)) ||
        (s = tk_meta_tensor(st, b->block_table, "block_table", b->num_reqs, 32)))
        return s;
    if (b->num_tokens &&
        (s = tk_meta_tensor(st, b->slot_mapping, "slot_mapping", b->num_tokens, 64)))
        return s;
    const DLTensor *bt = b->block_table;
    if (bt->ndim != 2)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "block_table has %d dims, want 2",
                       bt->ndim);
    int64_t bt_cols = bt->shape[1], bt_pitch = bt->strides ? bt->strides[0] : bt->shape[1];
    if (bt->strides && bt->strides[1] != 1)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "block_table rows are not contiguous");
    /* Host copies: the path decision and a bound on the blocks a request uses.
     * A tree mask (decoder layers; cross layers ignore it) takes the masked
     * unified kernel whatever the query lengths: split-KV applies none. */
    const int has_mask = st->k.masked && ah_batch_custom_mask(b);
    if (has_mask && (s = tk_mask_tensors(st, b))) return s;
    int masked = has_mask;
    int decode = !masked && b->num_tokens == b->num_reqs && b->max_query_len <= 1;
    uint32_t need_cols = tk_cdiv(b->max_seq_len, st->spec.block_size);
    if (need_cols > lim->max_blocks_per_req || need_cols > bt_cols)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "max_seq_len %u needs %u blocks per request; block_table has %lld columns, "
                       "limits %u",
                       b->max_seq_len, need_cols, (long long)bt_cols, lim->max_blocks_per_req);
    if (mode == AH_PLAN_REPLAY) {
        if (st->captured_decode < 0)
            return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "REPLAY plan without a CAPTURE plan");
        if (masked && !st->captured_masked)
            return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                           "graph was captured on a batch without a tree mask (%s kernel); this "
                           "batch has one: capture a batch with a tree mask for it",
                           st->captured_decode ? "split-KV" : "unified");
        if (st->captured_decode && !decode)
            return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                           "graph was captured for a pure-decode batch (split-KV path); this batch "
                           "has query lengths > 1: capture a mixed batch for it");
        decode = st->captured_decode;
        /* the masked launch replays batches without a mask too (address 0) */
        masked = st->captured_masked;
    }
    if ((s = tk_ctx_bind(ctx, &st->err))) return s;

    const uint64_t mask_addr = has_mask ? (uint64_t)(uintptr_t)ah_dl_data(b->custom_mask) : 0;
    if ((s = tk_upload(st, b, masked, mask_addr, cs))) return s;
    if (has_mask)
        TK_CU(ctx, &st->err,
              cu->copy_dtod(st->d_mask + 8, (CUdeviceptr)(uintptr_t)ah_dl_data(b->mask_indptr),
                            8ull * (b->num_reqs + 1), cs));
    TK_CU(ctx, &st->err,
          cu->copy_dtod(st->d_qsl, (CUdeviceptr)(uintptr_t)ah_dl_data(b->query_start_loc),
                        4ull * (b->num_reqs + 1), cs));
    TK_CU(ctx, &st->err,
          cu->copy_dtod(st->d_seq_lens, (CUdeviceptr)(uintptr_t)ah_dl_data(key_lens),
                        4ull * b->num_reqs, cs));
    uint32_t cols =
        (uint32_t)(bt_cols < lim->max_blocks_per_req ? bt_cols : lim->max_blocks_per_req);
    CUDA_MEMCPY2D c2 = {0};
    c2.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c2.srcDevice = (CUdeviceptr)(uintptr_t)ah_dl_data(bt);
    c2.srcPitch = (size_t)bt_pitch * 4;
    c2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c2.dstDevice = st->d_block_table;
    c2.dstPitch = (size_t)lim->max_blocks_per_req * 4;
    c2.WidthInBytes = (size_t)cols * 4;
    c2.Height = b->num_reqs;
    TK_CU(ctx, &st->err, cu->copy_2d(&c2, cs));
    if (b->num_tokens)
        TK_CU(ctx, &st->err,
              cu->copy_dtod(st->d_slots, (CUdeviceptr)(uintptr_t)ah_dl_data(b->slot_mapping),
                            8ull * b->num_tokens, cs));

    st->num_reqs = b->num_reqs;
    st->num_tokens = b->num_tokens;
    st->num_blocks = b->num_blocks;
    if (mode != AH_PLAN_REPLAY) {
        st->decode = decode;
        st->masked = masked;
        st->mode = mode;
        /* A captured launch must cover any batch within the limits. */
        st->grid_reqs = mode == AH_PLAN_CAPTURE ? lim->max_num_reqs : b->num_reqs;
        st->grid_tokens = mode == AH_PLAN_CAPTURE ? lim->max_num_tokens : b->num_tokens;
        if (ctx->cfg.num_kv_splits) {
            st->num_splits = ctx->cfg.num_kv_splits;
        } else {
            /* About 16 programs per SM, rounded up to a power of two, no
             * more splits than the longest request has split_tile keys. On
             * an H100 (132 SMs), batch 64 x 8 KV heads gets 8 splits, the
             * best of the counts measured there at 8k and 16k context
             * (DECISIONS.md). */
            uint32_t group = st->spec.num_q_heads / st->spec.num_kv_heads;
            uint64_t programs =
                (uint64_t)st->grid_reqs * st->spec.num_kv_heads * tk_cdiv(group, TK_DECODE_BLOCK_H);
            uint64_t need = (16ull * (uint64_t)ctx->sms + programs - 1) / programs, want = 1;
            while (want < need) want <<= 1;
            uint32_t by_len =
                tk_cdiv(b->max_seq_len ? b->max_seq_len : 1, (uint32_t)ctx->cfg.split_tile);
            if (mode == AH_PLAN_CAPTURE)
                by_len =
                    tk_cdiv(lim->max_seq_len ? lim->max_seq_len : 1, (uint32_t)ctx->cfg.split_tile);
            if (want > by_len) want = by_len;
            if (want < 1) want = 1;
            if (want > (uint64_t)st->split_cap) want = (uint64_t)st->split_cap;
            st->num_splits = (int)want;
        }
        st->captured_decode = mode == AH_PLAN_CAPTURE ? decode : st->captured_decode;
        st->captured_masked = mode == AH_PLAN_CAPTURE ? masked : st->captured_masked;
    }
    return AH_OK;
}
