/*
 * cuda_flashinfer: the plugin's descriptor, capabilities and operations.
 *
 * Host-side only: checks what the host hands in, sizes every device buffer
 * at state creation from ah_limits, and turns plan/forward into launches of
 * the kernels (plan_kernels.cu, decode_kernel.cuh, prefill_kernel.cuh,
 * merge_kernels.cu; merge_states is the shared attnhost/cuda_merge.cuh).
 * The choices made in plan:
 *   - path: the bandwidth-bound decode kernel when every request has one
 *     query token (or the head size has no tensor-core kernel, i.e. MLA);
 *     the tensor-core kernel otherwise (prefill, extend, mixed batches);
 *   - split-KV: when the decode grid cannot fill the GPU (tokens x head
 *     blocks < SMs x resident CTAs), each row's keys are cut into S
 *     partitions and merged by LSE; S comes from the kernel's measured
 *     occupancy at its pipeline depth (scheduler.h, which makes every
 *     launch decision);
 *   - decode kernel: a 16-bit d128 layer's large batches stream through
 *     shared memory on chips that read at 4 TB/s and more, the rest take
 *     the register loads (scheduler.h, decode_stream_grid);
 *   - cascade: with batch.common_prefix_len >= one block, the shared prefix
 *     is attended once for all rows and merged with each request's suffix.
 * Graph modes fix the launch shapes from the limits (S from max_seq_len, the
 * tile grid from its upper bound) so replay rewrites buffers only.
 */
#include <math.h>
#include <string.h>

#include <attnhost/cuda_merge.cuh>
#include <attnhost/cuda_services.h>
#include <attnhost/plugin.h>
#include <attnhost/plugin_util.h>

#include "fi_params.h"
#include "fi_instances.h"

using namespace fi;

/* ---- capabilities ----------------------------------------------------------- */

/* The head sizes the decode instances are built for (cmake/instances.cmake);
 * each also has its tensor-core instance where prefill_supported says so. */
#define FI_QK_OF(qk, v) qk,
#define FI_V_OF(qk, v) v,
static const uint32_t fi_qk_sizes[] = {FI_DECODE_INSTANCES(FI_QK_OF)};
static const uint32_t fi_v_sizes[] = {FI_DECODE_INSTANCES(FI_V_OF)};
#undef FI_QK_OF
#undef FI_V_OF
static const uint32_t fi_block_sizes[] = {1, 2, 4, 8, 16, 32, 64, 128};

static void fi_check_combination(const ah_layer_spec *s, const ah_probe_info *probe,
                                 ah_reason_sink *sink)
{
    (void)probe;
    char v[64];
    const int mla_shape = s->qk_head_size == 576 && s->v_head_size == 512;
    if (s->use_mla && !mla_shape) {
        snprintf(v, sizeof v, "qk %u, v %u", s->qk_head_size, s->v_head_size);
        sink->add(sink, AH_REASON_COMBINATION, "mla_head_sizes", v, "qk 576, v 512");
    }
    if (!s->use_mla && s->qk_head_size != s->v_head_size) {
        snprintf(v, sizeof v, "qk %u, v %u", s->qk_head_size, s->v_head_size);
        sink->add(sink, AH_REASON_COMBINATION, "head_sizes", v, "qk == v (64, 128, 256)");
    }
    if (!s->use_mla && s->qk_head_size == 576) {
        sink->add(sink, AH_REASON_COMBINATION, "qk_head_size", "576 without MLA",
                  "576 only for absorbed MLA");
    }
    if (s->attn_type == AH_ATTN_ENCODER_DECODER && s->use_alibi)
        sink->add(sink, AH_REASON_COMBINATION, "alibi", "on a cross layer",
                  "ALiBi on decoder layers (a cross query has no position among its keys)");
    if (ah_kv_layout_is_interleaved(s->kv_layout) &&
        (s->use_mla || s->qk_head_size != s->v_head_size))
        sink->add(sink, AH_REASON_COMBINATION, "kv_layout", ah_kv_layout_name(s->kv_layout),
                  "an interleaved layout only with a value cache of the key's head size");
    const int kv16 = s->kv_dtype == AH_DTYPE_FP16 || s->kv_dtype == AH_DTYPE_BF16;
    if (kv16 && s->kv_dtype != s->q_dtype) {
        snprintf(v, sizeof v, "q %s, kv %s", ah_dtype_name(s->q_dtype), ah_dtype_name(s->kv_dtype));
        sink->add(sink, AH_REASON_COMBINATION, "kv_dtype", v,
                  "a 16-bit KV cache in the query's dtype, or fp8");
    }
}

static const ah_caps fi_caps = {
    sizeof(ah_caps),
    AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_BF16),
    AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_BF16) | AH_BIT(AH_DTYPE_FP8_E4M3) |
        AH_BIT(AH_DTYPE_FP8_E5M2),
    AH_INT_SET_LIST(fi_qk_sizes),
    AH_INT_SET_LIST(fi_v_sizes),
    AH_INT_SET_LIST(fi_block_sizes),
    16,
    /* EMPTY_KV: a request with no keys plans no pages and reads no table
     * entry; every kernel gives its rows out 0, LSE -inf (split_keys,
     * finish_state, merge_partials). RELEASED_BLOCKS: every kernel loads
     * keys from the first one some row of its CTA sees (split_keys,
     * the union of a prefill CTA's row ranges), never from a tile or page
     * boundary before it, so no hidden block's entry becomes an address;
     * the plan copies entries without following them and sorts none under
     * a window; the cascade's prefix pass, which reads request 0's
     * entries for every request's rows, is planned only where no row sees
     * a block request 0 may have released (schedule_cascade_window).
     * SCALE_TENSORS, KV_SCALE_PER_HEAD: every kernel that reads an FP8
     * cache (streaming decode, MLA on CUDA cores, the general tensor-core
     * kernel, hence the cascade's passes) and write_kv read the scale
     * tensors on the device, per KV head (tensor_scales). Q_SCALE: the
     * query stays in its 16-bit type, so the query scale is not needed */
    AH_FEAT_MLA | AH_FEAT_SINKS | AH_FEAT_SLIDING_WINDOW | AH_FEAT_ALIBI | AH_FEAT_SOFTCAP |
        AH_FEAT_NON_CAUSAL | AH_FEAT_LSE | AH_FEAT_CASCADE | AH_FEAT_CAUSAL_FLAG |
        AH_FEAT_EMPTY_KV | AH_FEAT_CROSS_ATTENTION | AH_FEAT_RELEASED_BLOCKS |
        AH_FEAT_SCALE_TENSORS | AH_FEAT_KV_SCALE_PER_HEAD | AH_FEAT_Q_SCALE,
    /* decoder layers over the paged cache, causal or not, and cross layers
     * over each request's encoder_seq_lens keys; cacheless encoder layers
     * (packed K/V, no cache) are not served */
    AH_BIT(AH_ATTN_DECODER) | AH_BIT(AH_ATTN_ENCODER_DECODER),
    /* the interleaved layouts are the same geometry with twice the block
     * stride (fi_geom), which every kernel takes at run time */
    AH_BIT(AH_KV_LAYOUT_NHD) | AH_BIT(AH_KV_LAYOUT_HND) | AH_BIT(AH_KV_LAYOUT_NHD_INTERLEAVED) |
        AH_BIT(AH_KV_LAYOUT_HND_INTERLEAVED),
    AH_KV_LAYOUT_NHD,
    80,
    0,
    NULL,
    0,
    0,
    AH_GRAPH_ALWAYS,
    1, /* padded slots: seq_len 1 keeps every kernel on a valid block 0 row */
    0,
    1,
    0,
    NULL, /* no configuration keys */
    0,
    fi_check_combination,
    AH_RANK_PRIMARY,
    AH_RANK_PRIMARY + 64, /* decode: ahead of cuda_fa3 (DECISIONS.md, "Decode rank") */
    AH_MIXED_WHOLE,       /* one plan serves decode and prefill requests together */
    1,
};

/* ---- context -------------------------------------------------------------------- */

struct ah_context {
    ah_cuda_svc svc;
    const ah_host_services *host; /* alloc/free of the context and its states */
    sched_device dev;
};
#define FI_SVC(c) (&(c)->svc)
AH_CUDA_DEFINE_DEVICE_OPS(fi, FI_SVC)

static ah_status fi_probe(const ah_host_services *host, ah_probe_info *info)
{
    (void)host;
    return ah_cuda_probe(info, 80);
}

static ah_status fi_context_create(const ah_host_services *host, const ah_context_options *opts,
                                   ah_context **out, const char **why)
{
    *out = NULL;
    if (!host || !host->alloc || !host->free) {
        *why = "context_create: host services without alloc/free";
        return AH_ERR_ABI;
    }
    if (!opts || !AH_HAS_FIELD(opts, ah_context_options, device_index)) {
        *why = "context_create: context options missing or too small";
        return AH_ERR_ABI;
    }
    const int device = opts->device_index;
    if (device < 0) {
        *why = "context_create: negative device_index";
        return AH_ERR_INVALID_ARGUMENT;
    }
    ah_context *c = (ah_context *)host->alloc(host, sizeof *c);
    if (!c) {
        *why = "out of host memory";
        return AH_ERR_OUT_OF_MEMORY;
    }
    memset(c, 0, sizeof *c);
    c->host = host;
    ah_status s = ah_cuda_svc_init(&c->svc, device, why);
    if (s != AH_OK) {
        int count = 0;
        if (s == AH_ERR_UNAVAILABLE && cudaGetDeviceCount(&count) == cudaSuccess && count > 0 &&
            device >= count)
            *why = "device_index is past the CUDA devices here (CUDA_VISIBLE_DEVICES applies)";
        (void)cudaGetLastError();
        host->free(host, c);
        return s;
    }
    c->dev = device_facts(device);
    if (c->dev.sms <= 0) {
        ah_cuda_svc_fini(&c->svc);
        host->free(host, c);
        *why = "cannot read the CUDA device's multiprocessor count";
        return AH_ERR_DEVICE;
    }
    *out = c;
    return AH_OK;
}

static void fi_context_destroy(ah_context *c)
{
    if (!c) return;
    ah_cuda_svc_fini(&c->svc);
    c->host->free(c->host, c);
}

/* Make the context's device current on the calling thread: bindings call
 * a state's slots from threads of their own. */
static cudaError_t fi_use_device(const ah_context *c)
{
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == c->svc.device) return cudaSuccess;
    return cudaSetDevice(c->svc.device);
}

static const char *fi_context_error(const ah_context *c) { return c->svc.err.msg; }

/* ---- state ------------------------------------------------------------------------ */

enum { FI_PATH_DECODE = 0, FI_PATH_PREFILL = 1 };

struct ah_state {
    ah_context *ctx;
    ah_layer_spec spec;
    ah_limits lim;
    ah_errbuf err;
    int qt, kvt, group, gb, mla, tc; /* tc: the tensor-core kernel serves this head size */
    prefill_family family;           /* the tensor-core passes' kernel family */
    decode_occ occupancy;            /* resident decode CTAs per SM at FI_DECODE_STAGES */
    plan_bufs pb;
    void *plan_mem;
    float *ws_o, *ws_lse;
    int64_t ws_rows; /* (token, partition) rows the workspace holds */
    int max_tiles;
    /* The last plan. */
    ah_plan_mode mode;
    int num_reqs, num_tokens, path, grid_tiles, cascade, prefix_len;
    int all_decode; /* every request has one query token */
    decode_choice decode;
    prefix_choice prefix; /* cascade: key ranges of the prefix pass */
    const int64_t *slot_mapping;
    uint32_t num_blocks; /* the batch's: its block ids and slots lie inside */
    /* The captured shape, which replay must keep. */
    int graph_ready, cap_reqs, cap_tokens, cap_path;
};

static int fi_dtype_id(ah_dtype t)
{
    switch (t) {
    case AH_DTYPE_FP16: return FI_F16;
    case AH_DTYPE_BF16: return FI_BF16;
    case AH_DTYPE_FP8_E4M3: return FI_E4M3;
    case AH_DTYPE_FP8_E5M2: return FI_E5M2;
    default: return -1;
    }
}

static int fi_ilog2(uint32_t x)
{
    int s = 0;
    while ((1u << s) < x) s++;
    return s;
}

/* Workspace rows for partial states: split-KV and cascade both need
 * (partitions x tokens) rows of Hq x Dv floats; capped at 64 MiB per state. */
static int64_t fi_ws_rows(const ah_layer_spec *s, const ah_limits *l)
{
    const int64_t row_bytes = (int64_t)s->num_q_heads * (s->v_head_size + 1) * 4;
    int64_t rows = ((int64_t)64 << 20) / row_bytes;
    /* every token's partitions: a lone long request splits 128 ways */
    const int64_t want = (int64_t)l->max_num_tokens * FI_MAX_DECODE_SPLITS;
    if (rows > want) rows = want;
    if (rows < 2) rows = 0;
    return rows;
}

/* int32 entries of the plan buffers (plan_bufs, carved in fi_state_create's
 * order): three request indptrs, last page lengths and sequence lengths,
 * two per-token lists, the page list, two per-tile lists, the tile count. */
static int64_t fi_plan_ints(int64_t R, int64_t T, int64_t pages, int64_t tiles)
{
    return 3 * (R + 1) + 2 * R + 2 * T + pages + 2 * tiles + 1;
}

static ah_status fi_workspace_size(const ah_layer_spec *s, const ah_limits *l, uint64_t *bytes)
{
    const int64_t rows = fi_ws_rows(s, l);
    const int64_t G = s->num_q_heads / (s->num_kv_heads ? s->num_kv_heads : 1);
    const int64_t R = l->max_num_reqs, T = l->max_num_tokens;
    const int64_t tiles = (T * G + FI_TILE_ROWS - 1) / FI_TILE_ROWS + R;
    const int64_t ints = fi_plan_ints(R, T, R * l->max_blocks_per_req, tiles);
    *bytes = (uint64_t)(ints * 4 + rows * s->num_q_heads * (s->v_head_size + 1) * 4);
    return AH_OK;
}

static void fi_state_destroy(ah_state *st)
{
    if (!st) return;
    if (st->plan_mem) cudaFree(st->plan_mem);
    if (st->ws_o) cudaFree(st->ws_o);
    st->ctx->host->free(st->ctx->host, st);
}

static ah_status fi_state_create(ah_context *ctx, const ah_layer_spec *spec, const ah_limits *lim,
                                 ah_state **out)
{
    ah_errbuf *e = &ctx->svc.err;
    *out = NULL;
    if (spec->struct_size < sizeof(ah_layer_spec) || lim->struct_size < sizeof(ah_limits))
        return ah_fail(e, AH_ERR_ABI, "state_create: layer spec or limits too small");
    const int mla = spec->use_mla != 0;
    if (!spec->num_kv_heads || spec->num_q_heads % spec->num_kv_heads)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "num_q_heads %u not a multiple of num_kv_heads %u", spec->num_q_heads,
                       spec->num_kv_heads);
    const int qk = (int)spec->qk_head_size, vh = (int)spec->v_head_size;
    if (mla ? !(qk == 576 && vh == 512) : !(qk == vh && (qk == 64 || qk == 128 || qk == 256)))
        return ah_fail(e, AH_ERR_UNSUPPORTED,
                       "head sizes qk %d, v %d unsupported (64/128/256 equal, or MLA 576/512)", qk,
                       vh);
    const int qt = fi_dtype_id(spec->q_dtype), kvt = fi_dtype_id(spec->kv_dtype);
    if (qt != FI_F16 && qt != FI_BF16)
        return ah_fail(e, AH_ERR_UNSUPPORTED, "query dtype %s unsupported (fp16, bf16)",
                       ah_dtype_name(spec->q_dtype));
    if (kvt < 0 || (kvt < FI_E4M3 && kvt != qt))
        return ah_fail(e, AH_ERR_UNSUPPORTED, "kv dtype %s with query %s unsupported",
                       ah_dtype_name(spec->kv_dtype), ah_dtype_name(spec->q_dtype));
    if (!spec->block_size || spec->block_size > 128 || (spec->block_size & (spec->block_size - 1)))
        return ah_fail(e, AH_ERR_UNSUPPORTED, "block size %u unsupported (powers of two to 128)",
                       spec->block_size);
    if (spec->kv_layout != AH_KV_LAYOUT_NHD && spec->kv_layout != AH_KV_LAYOUT_HND &&
        !ah_kv_layout_is_interleaved(spec->kv_layout))
        return ah_fail(e, AH_ERR_UNSUPPORTED,
                       "kv layout %d unsupported (NHD, HND and their interleaved forms)",
                       (int)spec->kv_layout);
    if (ah_kv_layout_is_interleaved(spec->kv_layout) && mla)
        return ah_fail(e, AH_ERR_UNSUPPORTED, "kv layout %s: MLA has no value cache",
                       ah_kv_layout_name(spec->kv_layout));
    if (!lim->max_num_reqs || !lim->max_num_tokens || !lim->max_blocks_per_req)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "limits: max_num_reqs, max_num_tokens and "
                       "max_blocks_per_req must be positive");

    const ah_host_services *host = ctx->host;
    ah_state *st = (ah_state *)host->alloc(host, sizeof *st);
    if (!st) return ah_fail(e, AH_ERR_OUT_OF_MEMORY, "state_create: out of host memory");
    memset(st, 0, sizeof *st);
    st->ctx = ctx;
    st->spec = *spec;
    st->lim = *lim;
    st->qt = qt;
    st->kvt = kvt;
    st->mla = mla;
    st->group = (int)(spec->num_q_heads / spec->num_kv_heads);
    st->gb = mla && schedule_mla_sm90(ctx->dev, st->group, qt, kvt)
                 ? FI_MLA_SM90_HEADS
                 : decode_group_block(st->group, mla, kvt == qt, qk);
    st->tc = prefill_supported(qk, vh);
    st->family = schedule_prefill_family(ctx->dev, qk, qt, kvt, spec->softcap, spec->use_alibi);

    const int64_t R = lim->max_num_reqs, T = lim->max_num_tokens;
    st->max_tiles = (int)((T * st->group + FI_TILE_ROWS - 1) / FI_TILE_ROWS + R);
    const int64_t n_idx = R * lim->max_blocks_per_req;
    const int64_t ints = fi_plan_ints(R, T, n_idx, st->max_tiles);
    cudaError_t ce = fi_use_device(ctx);
    if (ce == cudaSuccess) ce = cudaMalloc(&st->plan_mem, (size_t)ints * 4);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        fi_state_destroy(st);
        return ah_fail(e, ah_cuda_status(ce), "state_create: plan buffers (%lld bytes): %s",
                       (long long)ints * 4, cudaGetErrorString(ce));
    }
    int32_t *p = (int32_t *)st->plan_mem;
    st->pb.qo_indptr = p, p += R + 1;
    st->pb.kv_indptr = p, p += R + 1;
    st->pb.tile_indptr = p, p += R + 1;
    st->pb.kv_last_page_len = p, p += R;
    st->pb.seq_lens = p, p += R;
    st->pb.token_req = p, p += T;
    st->pb.token_pos = p, p += T;
    st->pb.kv_indices = p, p += n_idx;
    st->pb.tile_req = p, p += st->max_tiles;
    st->pb.tile_row0 = p, p += st->max_tiles;
    st->pb.num_tiles = p;

    st->ws_rows = fi_ws_rows(spec, lim);
    if (st->ws_rows) {
        const int64_t n = st->ws_rows * spec->num_q_heads * (spec->v_head_size + 1);
        ce = cudaMalloc((void **)&st->ws_o, (size_t)n * 4);
        if (ce != cudaSuccess) {
            (void)cudaGetLastError();
            fi_state_destroy(st);
            return ah_fail(e, ah_cuda_status(ce), "state_create: workspace (%lld bytes): %s",
                           (long long)n * 4, cudaGetErrorString(ce));
        }
        st->ws_lse = st->ws_o + st->ws_rows * spec->num_q_heads * spec->v_head_size;
    }
    st->occupancy.own = decode_occupancy(qt, kvt, qk, vh, st->gb, false);
    st->occupancy.stream = decode_occupancy(qt, kvt, qk, vh, st->gb, true);
    if (st->tc) {
        attn_params none = {};
        ce = launch_prefill(qt, kvt, qk, st->family, none, 0, 0);
        if (ce != cudaSuccess) {
            (void)cudaGetLastError();
            fi_state_destroy(st);
            return ah_fail(e, AH_ERR_DEVICE, "state_create: prefill kernel setup: %s",
                           cudaGetErrorString(ce));
        }
    }
    *out = st;
    return AH_OK;
}

static const char *fi_state_error(const ah_state *st) { return st->err.msg; }

/* ---- plan ------------------------------------------------------------------------- */

static int fi_dev_i32(const DLTensor *t, int64_t min_elems)
{
    return t && t->data && t->dtype.code == kDLInt && t->dtype.bits == 32 && t->dtype.lanes == 1 &&
           ah_dl_numel(t) >= min_elems;
}

static ah_status fi_plan(ah_state *st, const ah_batch *b, ah_plan_mode mode, void *stream)
{
    ah_errbuf *e = &st->err;
    if (!b || b->struct_size < offsetof(ah_batch, common_prefix_len))
        return ah_fail(e, AH_ERR_ABI, "plan: batch struct too small");
    if ((unsigned)mode > AH_PLAN_REPLAY)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "plan: mode %d", mode);
    const int R = (int)b->num_reqs, T = (int)b->num_tokens;
    /* A cross layer's keys are each request's encoder tokens, all visible
     * (FI_ATTN_CROSS): the plan lists them in place of the decoder's. */
    const int cross = st->spec.attn_type == AH_ATTN_ENCODER_DECODER;
    const DLTensor *key_lens = cross ? b->encoder_seq_lens : b->seq_lens;
    const int32_t *key_lens_host = cross ? ah_batch_encoder_seq_lens(b) : b->seq_lens_host;
    if (b->num_reqs > st->lim.max_num_reqs || b->num_tokens > st->lim.max_num_tokens)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "plan: %u requests / %u tokens exceed the state's limits %u / %u",
                       b->num_reqs, b->num_tokens, st->lim.max_num_reqs, st->lim.max_num_tokens);
    if (!fi_dev_i32(b->query_start_loc, R + 1) || !fi_dev_i32(key_lens, R) ||
        !fi_dev_i32(b->block_table, R ? 1 : 0) || !b->query_start_loc_host || !key_lens_host)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "plan: query_start_loc, %s and block_table must be int32 device "
                       "tensors (with host copies) covering the batch",
                       cross ? "encoder_seq_lens" : "seq_lens");
    const int64_t bt_stride = b->block_table->ndim == 2 ? ah_dl_stride(b->block_table, 0) : 0;
    const uint32_t bs = st->spec.block_size;
    int all_decode = 1;
    int64_t tiles = 0, max_seq = 0, min_seq = INT64_MAX, min_first_pos = INT64_MAX;
    /* the Hopper MLA kernel's CTAs that work: one per token block */
    const int tb = st->gb == FI_MLA_SM90_HEADS
                       ? mla_token_block(FI_MLA_SM90_HEADS, st->group, (int)st->spec.sliding_window)
                       : 1;
    int working = 0;
    for (int r = 0; r < R; r++) {
        const int ql = b->query_start_loc_host[r + 1] - b->query_start_loc_host[r];
        const int64_t sl = key_lens_host[r];
        working += (ql + tb - 1) / tb;
        if (ql != 1) all_decode = 0;
        if (sl - ql < min_first_pos) min_first_pos = sl - ql;
        tiles += ((int64_t)ql * st->group + FI_TILE_ROWS - 1) / FI_TILE_ROWS;
        if (sl > max_seq) max_seq = sl;
        if (sl < min_seq) min_seq = sl;
        if ((sl + bs - 1) / bs > st->lim.max_blocks_per_req)
            return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                           "plan: request %d needs %lld blocks > max_blocks_per_req %u", r,
                           (long long)((sl + bs - 1) / bs), st->lim.max_blocks_per_req);
    }
    if (b->block_table->ndim == 2 && R &&
        b->block_table->shape[1] < (int64_t)((max_seq + bs - 1) / bs))
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "plan: block_table has %lld columns, needs %lld",
                       (long long)b->block_table->shape[1], (long long)((max_seq + bs - 1) / bs));

    if (mode == AH_PLAN_REPLAY) {
        if (!st->graph_ready)
            return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "plan(REPLAY) without a plan(CAPTURE)");
        if (R != st->cap_reqs || T != st->cap_tokens)
            return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                           "plan(REPLAY): %d requests / %d tokens, captured %d / %d (pad the batch "
                           "to the captured shape)",
                           R, T, st->cap_reqs, st->cap_tokens);
        if (st->cap_path == FI_PATH_DECODE && !all_decode && st->tc)
            return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                           "plan(REPLAY): captured a decode batch, replayed a prefill one");
    } else {
        const int graph = mode == AH_PLAN_CAPTURE;
        st->path = (all_decode || !st->tc) ? FI_PATH_DECODE : FI_PATH_PREFILL;
        st->all_decode = all_decode;
        st->decode = decode_choice{1, 1, false};
        if (st->path == FI_PATH_DECODE) {
            const int64_t keys =
                decode_visible_keys(graph ? (int64_t)st->lim.max_seq_len : max_seq,
                                    ah_spec_causal(&st->spec), (int)st->spec.sliding_window);
            st->decode = schedule_decode(st->ctx->dev, st->occupancy, T, (int)st->spec.num_kv_heads,
                                         st->group, st->gb, (int)st->spec.qk_head_size, keys,
                                         st->ws_rows, graph ? T : working);
        }
        st->grid_tiles = graph
                             ? (int)(((int64_t)T * st->group + FI_TILE_ROWS - 1) / FI_TILE_ROWS + R)
                             : (int)tiles;
        st->prefix_len = (int)b->common_prefix_len;
        /* The prefix pass gives every row request 0's first prefix_len keys,
         * so every request must hold them: one with fewer (a request with no
         * keys, AH_FEAT_EMPTY_KV, whose table row may be garbage) is planned
         * without the cascade, and so is a cross layer (the shared prefix is
         * the decoder's, not the encoder's). Under a window, request 0's
         * entries the window hides from it may be released: the cascade
         * then needs every row's window to start past them. */
        st->cascade =
            !graph && !cross && st->tc && R > 1 && b->common_prefix_len >= bs &&
            2 * (int64_t)T <= st->ws_rows && (int64_t)b->common_prefix_len <= min_seq &&
            schedule_cascade_window((int)st->spec.sliding_window,
                                    (int64_t)key_lens_host[0] -
                                        (b->query_start_loc_host[1] - b->query_start_loc_host[0]),
                                    min_first_pos, (int)bs);
        if (st->cascade)
            st->prefix =
                schedule_prefix(st->ctx->dev, st->family, (int)st->spec.qk_head_size, T, st->group,
                                (int)st->spec.num_kv_heads, st->prefix_len, st->ws_rows);
        if (graph) {
            st->cap_reqs = R;
            st->cap_tokens = T;
            st->cap_path = st->path;
            st->graph_ready = 1;
        }
    }
    st->num_reqs = R;
    st->num_tokens = T;
    st->num_blocks = b->num_blocks;
    st->mode = mode;
    st->slot_mapping = b->slot_mapping && b->slot_mapping->data
                           ? (const int64_t *)ah_dl_data(b->slot_mapping)
                           : NULL;
    const int sort_pages =
        schedule_sort_pages(st->cascade, (int)st->spec.sliding_window, st->spec.use_alibi);
    cudaError_t ce = fi_use_device(st->ctx);
    if (ce == cudaSuccess)
        ce = launch_plan(
            (const int32_t *)ah_dl_data(b->query_start_loc), (const int32_t *)ah_dl_data(key_lens),
            (const int32_t *)ah_dl_data(b->block_table), bt_stride, R, T, fi_ilog2(bs), st->group,
            (int)st->lim.max_blocks_per_req, sort_pages, st->pb, (cudaStream_t)stream);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        return ah_fail(e, AH_ERR_DEVICE, "plan: kernel launch: %s", cudaGetErrorString(ce));
    }
    return AH_OK;
}

/* ---- forward ------------------------------------------------------------------------ */

static int fi_aligned16(const DLTensor *t, size_t elem)
{
    if (((uintptr_t)ah_dl_data(t)) % 16) return 0;
    for (int i = 0; i + 1 < t->ndim; i++)
        if ((ah_dl_stride(t, i) * (int64_t)elem) % 16) return 0;
    return 1;
}

/* Element strides of a cache view in the layer's layout. An interleaved
 * layout's K and V views are [blocks, 2, ...] cut at index 0 and 1 of dim
 * 1: a dense view's strides but for the block stride, twice as long. */
static kv_geom fi_geom(const ah_layer_spec *s, int d)
{
    kv_geom g;
    g.page_shift = fi_ilog2(s->block_size);
    g.stride_page = (int64_t)s->block_size * s->num_kv_heads * d *
                    (ah_kv_layout_is_interleaved(s->kv_layout) ? 2 : 1);
    if (ah_kv_layout_is_hnd(s->kv_layout)) {
        g.stride_head = (int64_t)s->block_size * d;
        g.stride_slot = d;
    } else {
        g.stride_slot = (int64_t)s->num_kv_heads * d;
        g.stride_head = d;
    }
    return g;
}

/* An FP8 layer's scale tensors (kv_scales TENSOR: float32 [1], PER_HEAD:
 * [Hk]), checked as the kernels address them. Only their addresses go to
 * the kernels, which read the values when they run (a replayed graph reads
 * the replay's). k and v stay NULL for host floats (HOST) and 16-bit
 * caches; MLA's values take the key scales. */
struct fi_scales {
    const float *k, *v;
    int hs; /* 1: one per KV head */
};

static ah_status fi_scale_tensors(ah_state *st, const DLTensor *kt, const DLTensor *vt,
                                  fi_scales *out)
{
    const ah_layer_spec *s = &st->spec;
    const ah_kv_scales form = ah_spec_kv_scales(s);
    *out = fi_scales{NULL, NULL, 0};
    if (form == AH_KV_SCALES_HOST || !ah_dtype_is_fp8(s->kv_dtype)) return AH_OK;
    const int per_head = form == AH_KV_SCALES_PER_HEAD;
    const int64_t n = per_head ? (int64_t)s->num_kv_heads : 1;
    const ah_dl_want wk = {"k_scale_tensor", 1, {n}, 0, AH_DTYPE_FP32, 1};
    const ah_dl_want wv = {"v_scale_tensor", 1, {n}, 0, AH_DTYPE_FP32, 1};
    ah_status rc;
    if ((rc = ah_dl_check(kt, &wk, &st->err)) != AH_OK ||
        (!st->mla && (rc = ah_dl_check(vt, &wv, &st->err)) != AH_OK))
        return rc;
    out->k = (const float *)ah_dl_data(kt);
    out->v = st->mla ? out->k : (const float *)ah_dl_data(vt);
    out->hs = per_head;
    if ((uintptr_t)out->k % 4 || (uintptr_t)out->v % 4)
        return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT,
                       "k_scale_tensor and v_scale_tensor need 4-byte aligned data");
    return AH_OK;
}

static ah_status fi_cuda_fail(ah_errbuf *e, const char *what, cudaError_t ce)
{
    (void)cudaGetLastError();
    return ah_fail(e, ce == cudaErrorInvalidValue ? AH_ERR_UNSUPPORTED : AH_ERR_DEVICE, "%s: %s",
                   what, cudaGetErrorString(ce));
}

static ah_status fi_forward(ah_state *st, const ah_forward_args *a)
{
    ah_errbuf *e = &st->err;
    const ah_layer_spec *s = &st->spec;
    const int T = st->num_tokens, Hq = (int)s->num_q_heads, Hk = (int)s->num_kv_heads;
    const int qk = (int)s->qk_head_size, vh = (int)s->v_head_size;
    /* What the kernels address (the host checks the same with validation
     * on; with it off these keep them inside the tensors): q and out rows,
     * dense caches of the planned batch's blocks in the layer's layout, lse
     * rows, and [Hq] sinks and slopes. */
    const ah_dl_want wq = {"q", 3, {T, Hq, qk}, 0, s->q_dtype, 0};
    const ah_dl_want wo = {"out", 3, {T, Hq, vh}, 0, s->q_dtype, 0};
    const ah_dl_want wl = {"lse", 2, {T, Hq}, 0, AH_DTYPE_FP32, 0};
    const ah_dl_want wk = ah_dl_cache_want("key_cache", s, st->num_blocks, (uint32_t)qk);
    const ah_dl_want wv = ah_dl_cache_want("value_cache", s, st->num_blocks, (uint32_t)vh);
    const ah_dl_want wh = {"sinks", 1, {Hq}, 1, AH_DTYPE_FP32, 1};
    const ah_dl_want wa = {"alibi_slopes", 1, {Hq}, 1, AH_DTYPE_FP32, 1};
    ah_status rc;
    if ((rc = ah_dl_check(a->q, &wq, e)) != AH_OK || (rc = ah_dl_check(a->out, &wo, e)) != AH_OK ||
        (a->lse && (rc = ah_dl_check(a->lse, &wl, e)) != AH_OK) ||
        (rc = ah_dl_check(a->key_cache, &wk, e)) != AH_OK ||
        (!st->mla && (rc = ah_dl_check(a->value_cache, &wv, e)) != AH_OK) ||
        (s->use_sinks && (rc = ah_dl_check(a->sinks, &wh, e)) != AH_OK) ||
        (s->use_alibi && (rc = ah_dl_check(a->alibi_slopes, &wa, e)) != AH_OK))
        return rc;
    const size_t qe = ah_dtype_size(s->q_dtype), ke = ah_dtype_size(s->kv_dtype);
    if (!fi_aligned16(a->q, qe) || !fi_aligned16(a->out, qe) || !fi_aligned16(a->key_cache, ke) ||
        (!st->mla && !fi_aligned16(a->value_cache, ke)))
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "q, out and the KV caches need 16-byte aligned data and strides");
    if (T == 0) return AH_OK;
    cudaError_t ce = fi_use_device(st->ctx);
    if (ce != cudaSuccess) return fi_cuda_fail(e, "forward: cudaSetDevice", ce);

    /* FP8 scales: host floats folded into the variant here, or tensors the
     * kernels read per KV head. A query scale (use_q_scale) is left unread:
     * every kernel keeps the query in its 16-bit type (FP8 caches are
     * widened to it, or to fp16, for the math), which plugin.h's "FP8
     * scales" allows. */
    fi_scales sc;
    if ((rc = fi_scale_tensors(
             st, AH_HAS_FIELD(a, ah_forward_args, k_scale_tensor) ? a->k_scale_tensor : NULL,
             AH_HAS_FIELD(a, ah_forward_args, v_scale_tensor) ? a->v_scale_tensor : NULL, &sc)) !=
        AH_OK)
        return rc;
    const float ks = sc.k ? 1.f : ah_kv_scale(a->k_scale, st->spec.kv_dtype);
    const float vs = sc.k ? 1.f : ah_kv_scale(a->v_scale, st->spec.kv_dtype);
    const float scale = ah_spec_scale(s);
    cudaStream_t stream = (cudaStream_t)a->stream;

    attn_params p;
    memset(&p, 0, sizeof p);
    p.q = ah_dl_data(a->q);
    p.q_stride_t = ah_dl_stride(a->q, 0);
    p.q_stride_h = ah_dl_stride(a->q, 1);
    p.k_cache = ah_dl_data(a->key_cache);
    p.kg = fi_geom(s, qk);
    if (st->mla) {
        p.v_cache = p.k_cache;
        p.vg = p.kg;
    } else {
        p.v_cache = ah_dl_data(a->value_cache);
        p.vg = fi_geom(s, vh);
    }
    p.plan = st->pb;
    p.var.attn = s->attn_type == AH_ATTN_ENCODER_DECODER ? FI_ATTN_CROSS
                 : ah_spec_causal(s)                     ? FI_ATTN_CAUSAL
                                                         : FI_ATTN_BIDIR;
    p.var.window = (int)s->sliding_window;
    p.var.qk_scale = scale * ks;
    p.var.v_scale = st->mla ? ks : vs;
    p.var.k_scales = sc.k;
    p.var.v_scales = sc.v;
    p.var.scale_hs = sc.hs;
    p.var.softcap = s->softcap;
    p.var.inv_softcap = s->softcap > 0 ? 1.f / s->softcap : 0.f;
    p.var.alibi = s->use_alibi ? 1 : 0;
    p.var.slopes = s->use_alibi ? (const float *)ah_dl_data(a->alibi_slopes) : NULL;
    p.var.sinks = s->use_sinks ? (const float *)ah_dl_data(a->sinks) : NULL;
    p.o.out = ah_dl_data(a->out);
    p.o.out_stride_t = ah_dl_stride(a->out, 0);
    p.o.out_stride_h = ah_dl_stride(a->out, 1);
    p.o.lse = a->lse ? (float *)ah_dl_data(a->lse) : NULL;
    p.o.lse_stride_t = a->lse ? ah_dl_stride(a->lse, 0) : 0;
    p.o.part_o = st->ws_o;
    p.o.part_lse = st->ws_lse;
    p.num_tokens = T;
    p.num_qo_heads = Hq;
    p.num_kv_heads = Hk;
    p.group = st->group;
    p.num_splits = 1;
    p.one_token_reqs = st->all_decode;

    merge_params m;
    memset(&m, 0, sizeof m);
    m.part_o = st->ws_o;
    m.part_lse = st->ws_lse;
    m.num_tokens = T;
    m.num_heads = Hq;
    m.dv = vh;
    m.sinks = p.var.sinks;
    m.out = p.o.out;
    m.out_stride_t = p.o.out_stride_t;
    m.out_stride_h = p.o.out_stride_h;
    m.lse = p.o.lse;
    m.lse_stride_t = p.o.lse_stride_t;

    if (st->cascade) {
        /* Shared prefix once for every row, then each request's suffix. */
        attn_params pre = p;
        pre.shared_prefix = 1;
        pre.prefix_len = st->prefix_len;
        pre.partial = 1;
        pre.o.part_slot = 0;
        pre.kv_splits = st->prefix.splits;
        pre.kv_chunk = st->prefix.splits > 1 ? st->prefix.chunk : 0;
        pre.var.sinks = NULL;
        ce = launch_prefill(st->qt, st->kvt, qk, st->family, pre,
                            (int)(((int64_t)T * st->group + FI_TILE_ROWS - 1) / FI_TILE_ROWS),
                            stream);
        if (ce != cudaSuccess) return fi_cuda_fail(e, "forward: cascade prefix", ce);
        attn_params suf = p;
        suf.kv_begin = st->prefix_len;
        suf.partial = 1;
        suf.o.part_slot = st->prefix.splits;
        suf.var.sinks = NULL;
        ce = st->path == FI_PATH_DECODE
                 ? launch_decode(st->qt, st->kvt, qk, vh, st->gb,
                                 schedule_heads_per_cta(Hk, st->group, st->gb, qk, 1), false, suf,
                                 stream)
                 : launch_prefill(st->qt, st->kvt, qk, st->family, suf, st->grid_tiles, stream);
        if (ce != cudaSuccess) return fi_cuda_fail(e, "forward: cascade suffix", ce);
        m.num_parts = st->prefix.splits + 1;
        ce = launch_merge_partials(st->qt, m, schedule_merge_pdl(st->ctx->dev), stream);
        if (ce != cudaSuccess) return fi_cuda_fail(e, "forward: cascade merge", ce);
        return AH_OK;
    }
    if (st->path == FI_PATH_DECODE) {
        p.num_splits = st->decode.splits;
        ce = launch_decode(st->qt, st->kvt, qk, vh, st->gb, st->decode.heads_per_cta,
                           st->decode.stream, p, stream);
        if (ce != cudaSuccess) return fi_cuda_fail(e, "forward: decode", ce);
        if (st->decode.splits > 1) {
            m.num_parts = st->decode.splits;
            ce = launch_merge_partials(st->qt, m, schedule_merge_pdl(st->ctx->dev), stream);
            if (ce != cudaSuccess) return fi_cuda_fail(e, "forward: split-KV merge", ce);
        }
        return AH_OK;
    }
    ce = launch_prefill(st->qt, st->kvt, qk, st->family, p, st->grid_tiles, stream);
    if (ce != cudaSuccess) return fi_cuda_fail(e, "forward: prefill", ce);
    return AH_OK;
}

/* ---- write_kv, merge_states -------------------------------------------------------- */

static ah_status fi_write_kv(ah_state *st, const ah_kv_write_args *a)
{
    ah_errbuf *e = &st->err;
    const ah_layer_spec *s = &st->spec;
    if (!st->slot_mapping)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "write_kv: the planned batch has no slot_mapping");
    const int T = st->num_tokens, Hk = (int)s->num_kv_heads;
    const int qk = (int)s->qk_head_size, vh = (int)s->v_head_size;
    /* What the kernel addresses (see fi_forward): new rows and the caches
     * of the planned batch's blocks, which its slots stay inside. */
    const ah_dl_want wk = {"key", 3, {T, Hk, qk}, 0, s->q_dtype, 0};
    const ah_dl_want wv = {"value", 3, {T, Hk, vh}, 0, s->q_dtype, 0};
    const ah_dl_want wkc = ah_dl_cache_want("key_cache", s, st->num_blocks, (uint32_t)qk);
    const ah_dl_want wvc = ah_dl_cache_want("value_cache", s, st->num_blocks, (uint32_t)vh);
    ah_status rc;
    if ((rc = ah_dl_check(a->key, &wk, e)) != AH_OK ||
        (rc = ah_dl_check(a->key_cache, &wkc, e)) != AH_OK ||
        (!st->mla && ((rc = ah_dl_check(a->value, &wv, e)) != AH_OK ||
                      (rc = ah_dl_check(a->value_cache, &wvc, e)) != AH_OK)))
        return rc;
    fi_scales sc;
    if ((rc = fi_scale_tensors(
             st, AH_HAS_FIELD(a, ah_kv_write_args, k_scale_tensor) ? a->k_scale_tensor : NULL,
             AH_HAS_FIELD(a, ah_kv_write_args, v_scale_tensor) ? a->v_scale_tensor : NULL, &sc)) !=
        AH_OK)
        return rc;
    const float ks = ah_kv_scale(a->k_scale, st->spec.kv_dtype);
    const float vs = ah_kv_scale(a->v_scale, st->spec.kv_dtype);
    cudaStream_t stream = (cudaStream_t)a->stream;
    cudaError_t ce = fi_use_device(st->ctx);
    if (ce == cudaSuccess)
        ce = launch_write_kv(st->qt, st->kvt, ah_dl_data(a->key), ah_dl_stride(a->key, 0),
                             ah_dl_stride(a->key, 1), ah_dl_data(a->key_cache), fi_geom(s, qk), qk,
                             st->slot_mapping, T, Hk, ks, sc.k, sc.hs, stream);
    if (ce == cudaSuccess && !st->mla)
        ce = launch_write_kv(st->qt, st->kvt, ah_dl_data(a->value), ah_dl_stride(a->value, 0),
                             ah_dl_stride(a->value, 1), ah_dl_data(a->value_cache), fi_geom(s, vh),
                             vh, st->slot_mapping, T, Hk, vs, sc.v, sc.hs, stream);
    if (ce != cudaSuccess) return fi_cuda_fail(e, "write_kv", ce);
    return AH_OK;
}

/* The shared LSE merge (attnhost/cuda_merge.cuh) on the context's device. */
static ah_status fi_merge_states(ah_context *ctx, const ah_merge_args *a)
{
    const cudaError_t ce = fi_use_device(ctx);
    if (ce != cudaSuccess) return fi_cuda_fail(&ctx->svc.err, "merge_states: cudaSetDevice", ce);
    return ah_cuda_merge::merge_states(a, &ctx->svc.err);
}

/* ---- descriptor --------------------------------------------------------------------- */

static const ah_plugin_ops fi_ops = {
    sizeof(ah_plugin_ops),
    fi_probe,
    fi_context_create,
    fi_context_destroy,
    fi_context_error,
    fi_state_create,
    fi_state_destroy,
    fi_state_error,
    fi_plan,
    fi_forward,
    fi_write_kv,
    fi_merge_states,
    fi_workspace_size,
    AH_CUDA_DEVICE_OPS(fi),
};

extern "C" {
AH_PLUGIN_DEFINE(cuda_flashinfer, "0.1.0", "attnhost", "Apache-2.0",
                 "FlashInfer-style paged attention: GPU planning, GQA decode with split-KV, "
                 "tensor-core prefill/extend, cascade, FP8 KV, MLA decode",
                 AH_DEVICE_CUDA, &fi_caps, &fi_ops)
}
