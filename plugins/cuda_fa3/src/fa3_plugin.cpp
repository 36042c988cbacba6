/*
 * cuda_fa3: the plugin's identity, its capability table, the probe and the
 * device context. The kernels are FlashAttention-3-style Hopper kernels
 * (TMA, wgmma, warp specialisation) built for sm_90a only, so the probe
 * accepts compute capability 9.0 and nothing else, and says why otherwise.
 *
 * Capabilities claim only what the correctness driver (test/fa3_check.c)
 * verifies against the reference oracle on an H100.
 */
#include <string.h>

#include "fa3_state.h"

/* qk 192 only on ragged layers, with v 128 (check_combination) */
static const uint32_t fa3_qk_head_sizes[] = {64, 128, 192, 256};
static const uint32_t fa3_v_head_sizes[] = {64, 128, 256};

/* Rules that cross fields: paged layers read K and V with one head size;
 * ragged layers (packed K/V) are MLA's non-absorbed prefill, qk 192 / v 128,
 * the one ragged instance. */
static void fa3_check_combination(const ah_layer_spec *spec, const ah_probe_info *probe,
                                  ah_reason_sink *sink)
{
    (void)probe;
    if (ah_spec_ragged(spec)) {
        if (spec->qk_head_size != 192 || spec->v_head_size != 128)
            sink->add(sink, AH_REASON_COMBINATION, "head_size", "on a ragged layer",
                      "qk 192 / v 128 on ragged layers (MLA's non-absorbed prefill)");
    } else if (spec->qk_head_size != spec->v_head_size || spec->qk_head_size == 192) {
        sink->add(sink, AH_REASON_COMBINATION, "v_head_size",
                  spec->qk_head_size == 192 ? "qk 192 on a paged layer"
                                            : "differs from qk_head_size",
                  "v_head_size == qk_head_size, 64, 128 or 256 (qk 192 / v 128 on ragged layers)");
    }
    if (spec->kv_dtype != spec->q_dtype && spec->kv_dtype != AH_DTYPE_FP8_E4M3)
        sink->add(sink, AH_REASON_COMBINATION, "kv_dtype", ah_dtype_name(spec->kv_dtype),
                  "the query dtype (fp16 or bf16) or fp8_e4m3");
    if (spec->attn_type == AH_ATTN_ENCODER_DECODER && spec->use_alibi)
        sink->add(sink, AH_REASON_COMBINATION, "alibi", "on a cross layer",
                  "ALiBi on decoder layers (a cross query has no position among its keys)");
    if (spec->num_kv_heads && spec->num_q_heads % spec->num_kv_heads)
        sink->add(sink, AH_REASON_COMBINATION, "num_q_heads", "not a multiple of num_kv_heads",
                  "num_q_heads % num_kv_heads == 0");
}

/* Typed keys: the host validates every value against its row and hands
 * typed values to fa3_state_create (config_int). fp8_compute is an enum
 * whose index order fa3_state.h's FA3_FP8_COMPUTE_* follows. */
static const ah_config_key fa3_config_keys[] = {
    AH_KEY_INT_ROW("max_splits", FA3_STR(FA3_MAX_SPLITS), 1, FA3_MAX_SPLITS,
                   "largest number of KV splits per query tile (1 disables split-KV)"),
    AH_KEY_ENUM_ROW(
        "fp8_compute", "auto", "auto|off",
        "fp8 e4m3 KV cache, head size 128: auto = e4m3 GEMMs (Q and P quantized in the kernel, ~2x the "
        "tensor rate, errors of a few percent) for layers whose model sets fp8_attention, the cache "
        "widened to 16 bits elsewhere; off = always widened (the 16-bit GEMMs' accuracy)"),
    AH_KEY_INT_ROW(
        "fp8_vt_scratch_mib", FA3_STR(FA3_VT_SCRATCH_MIB), 0, 65536,
        "FP8 compute: device memory (MiB, one buffer per context, used by forwards on one stream) "
        "through which the query tiles of a request share V transposed: one per KV head writes it, "
        "the others copy it; 0 = every query tile transposes the V tiles it reads"),
    AH_KEY_INT_ROW("l2_section_mib", "0", 0, 65536,
                   "K and V bytes (MiB) per L2 section of the work order: a request's query tiles "
                   "that read the same keys run close together, section by section (0 = half the "
                   "device's L2)"),
    AH_KEY_INT_ROW(
        "fp8_vt_min_reads", FA3_STR(FA3_VT_MIN_READS), 1, 1 << 20,
        "FP8 compute: share a request's transposed V when its KV tiles are read by at least this many "
        "query tiles on average"),
};

const ah_caps fa3_caps = {
    sizeof(ah_caps), AH_BIT(AH_DTYPE_BF16) | AH_BIT(AH_DTYPE_FP16),
    AH_BIT(AH_DTYPE_BF16) | AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_FP8_E4M3),
    AH_INT_SET_LIST(fa3_qk_head_sizes), AH_INT_SET_LIST(fa3_v_head_sizes),
    /* preferred 64: one TMA box per page segment of a key tile, so page 16
     * costs 28% of the prefill and 24% of the decode against page 128, page
     * 64 within 1% / 4% (DECISIONS.md, "Preferred block size") */
    AH_INT_SET_RANGE(16, 1024, 16), 64,
    /* EMPTY_KV: a request with no keys gets a work item of no KV tiles
     * (fa3_item_keys), finished as out 0, LSE -inf without a table read.
     * RELEASED_BLOCKS: the kernels read a page's entry only for a box
     * holding a key the item sees (fa3_box_read), so never a block the
     * window hides from the request's first query; write_kv writes only
     * the new tokens' slots. */
    /* RAGGED_KV, DIFF_HEAD_SIZES: ragged decoder layers of qk 192 / v 128
     * (MLA's non-absorbed prefill, causal or not, every logit feature) on
     * their own instance, whose producer reads K and V from the packed
     * tensors; paged layers have one head size (check_combination). */
    /* SCALE_TENSORS, KV_SCALE_PER_HEAD: the kernels read the FP8 scales
     * from the tensors per item (its KV head's), the combine per job and
     * write_kv per element; Q_SCALE: the FP8-compute kernel quantises Q
     * with the engine's scale (the widening kernels keep Q in 16 bits). */
    AH_FEAT_SINKS | AH_FEAT_SLIDING_WINDOW | AH_FEAT_SOFTCAP | AH_FEAT_ALIBI | AH_FEAT_NON_CAUSAL |
        AH_FEAT_LSE | AH_FEAT_CAUSAL_FLAG | AH_FEAT_EMPTY_KV | AH_FEAT_CROSS_ATTENTION |
        AH_FEAT_RELEASED_BLOCKS | AH_FEAT_SCALE_TENSORS | AH_FEAT_KV_SCALE_PER_HEAD |
        AH_FEAT_Q_SCALE | AH_FEAT_RAGGED_KV | AH_FEAT_DIFF_HEAD_SIZES,
    /* decoder layers over the paged cache, causal or not, and cross layers
     * over each request's encoder_seq_lens keys (no position masks); not the
     * cacheless encoder layers (packed K/V, no cache) */
    AH_BIT(AH_ATTN_DECODER) | AH_BIT(AH_ATTN_ENCODER_DECODER),
    /* the interleaved layouts (vLLM's FlashInfer cache) are the same pages
     * at another block stride and value offset, which the TMA descriptors
     * and write_kv take from the views' strides and addresses */
    AH_BIT(AH_KV_LAYOUT_NHD) | AH_BIT(AH_KV_LAYOUT_HND) | AH_BIT(AH_KV_LAYOUT_NHD_INTERLEAVED) |
        AH_BIT(AH_KV_LAYOUT_HND_INTERLEAVED),
    AH_KV_LAYOUT_NHD, 90, 90, NULL, 0, 0, AH_GRAPH_ALWAYS, 0,
    0, /* forward does not write K/V: write_kv does */
    1, /* caller output */
    8, /* packing verified for groups 1, 2, 4, 6, 8 */
    fa3_config_keys, sizeof fa3_config_keys / sizeof fa3_config_keys[0], fa3_check_combination,
    /* Ranks: just above cuda_flashinfer's PRIMARY in both phases, the
     * order the host's built-in list had before ABI 2.0. */
    AH_RANK_PRIMARY + 32, AH_RANK_PRIMARY + 32,
    AH_MIXED_WHOLE, /* one plan takes decode and prefill requests together */
    1,              /* decode_query_len_max */
};

static ah_status fa3_probe(const ah_host_services *host, ah_probe_info *info)
{
    (void)host;
    ah_status s = ah_cuda_probe(info, 90);
    if (s != AH_OK || !info->usable) return s;
    if (info->compute_capability != 90) {
        info->usable = 0;
        snprintf(
            info->reason, sizeof info->reason,
            "compute capability %u.%u: cuda_fa3's kernels are built for sm_90a (Hopper, 9.0) only",
            info->compute_capability / 10, info->compute_capability % 10);
    }
    return AH_OK;
}

static ah_status fa3_context_create(const ah_host_services *host, const ah_context_options *opts,
                                    ah_context **out, const char **why)
{
    *out = NULL;
    if (!opts || !AH_HAS_FIELD(opts, ah_context_options, device_index)) {
        if (why) *why = "context_create: context options missing or too small";
        return AH_ERR_ABI;
    }
    const int device = opts->device_index;
    if (device < 0) {
        if (why) *why = "context_create: negative device_index";
        return AH_ERR_INVALID_ARGUMENT;
    }
    ah_context *c = (ah_context *)host->alloc(host, sizeof *c);
    if (!c) {
        if (why) *why = "out of host memory";
        return AH_ERR_OUT_OF_MEMORY;
    }
    memset(c, 0, sizeof *c);
    ah_status s = ah_cuda_svc_init(&c->svc, device, why);
    if (s != AH_OK) {
        int count = 0;
        if (s == AH_ERR_UNAVAILABLE && cudaGetDeviceCount(&count) == cudaSuccess && count > 0 &&
            device >= count && why)
            *why = "device_index is past the CUDA devices here (CUDA_VISIBLE_DEVICES applies)";
        (void)cudaGetLastError();
        host->free(host, c);
        return s;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess || prop.major != 9 ||
        prop.minor != 0) {
        (void)cudaGetLastError();
        ah_cuda_svc_fini(&c->svc);
        host->free(host, c);
        if (why) *why = "cuda_fa3 needs a compute capability 9.0 (Hopper) device";
        return AH_ERR_UNAVAILABLE;
    }
    c->host = host;
    pthread_mutex_init(&c->vt_lock, NULL);
    c->sms = prop.multiProcessorCount;
    c->smem_optin = prop.sharedMemPerBlockOptin;
    c->l2_bytes = (size_t)prop.l2CacheSize;
    *out = c;
    return AH_OK;
}

static void fa3_context_destroy(ah_context *c)
{
    if (!c) return;
    const ah_host_services *host = c->host;
    (void)fa3_use_device(c);
    cudaFree(c->vt_scratch);
    cudaFree(c->vt_flags);
    pthread_mutex_destroy(&c->vt_lock);
    ah_cuda_svc_fini(&c->svc);
    host->free(host, c);
}

int fa3_capturing(void *stream)
{
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)stream, &cs) != cudaSuccess ||
        cs != cudaStreamCaptureStatusNone) {
        (void)cudaGetLastError();
        return 1;
    }
    return 0;
}

/* The scratch goes to the first stream that asks, and stays with it (see
 * ah_context); callers keep captures away from it. */
int fa3_vt_usable(ah_context *c, void *stream)
{
    pthread_mutex_lock(&c->vt_lock);
    if (c->vt_scratch && !c->vt_owned) {
        c->vt_owned = 1;
        c->vt_stream = (cudaStream_t)stream;
    }
    const int mine = c->vt_owned && c->vt_stream == (cudaStream_t)stream;
    pthread_mutex_unlock(&c->vt_lock);
    return mine;
}

static const char *fa3_context_error(const ah_context *c) { return c->svc.err.msg; }
static const char *fa3_state_error(const ah_state *st) { return st->err.msg; }

#define FA3_SVC(c) (&(c)->svc)
AH_CUDA_DEFINE_DEVICE_OPS(fa3, FA3_SVC)

static const ah_plugin_ops fa3_ops = {
    sizeof(ah_plugin_ops),
    fa3_probe,
    fa3_context_create,
    fa3_context_destroy,
    fa3_context_error,
    fa3_state_create,
    fa3_state_destroy,
    fa3_state_error,
    fa3_plan,
    fa3_forward,
    fa3_write_kv,
    fa3_merge_states,
    fa3_workspace_size,
    AH_CUDA_DEVICE_OPS(fa3),
};

/* C linkage: the host looks the entry up by its plain name. */
extern "C" {
AH_PLUGIN_DEFINE(cuda_fa3, "0.1.0", "attnhost", "Apache-2.0",
                 "FlashAttention-3-style Hopper kernels: TMA, wgmma, warp specialisation, split-KV",
                 AH_DEVICE_CUDA, &fa3_caps, &fa3_ops)
}
