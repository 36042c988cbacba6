/*
 * The test backend: naive attention over host memory, accumulated in double.
 * Slow and simple on purpose; it lets the host's binding, execution and graph
 * paths, and the conformance suite, run against a plugin that computes the
 * right answer (or, with defects planted, a known wrong one) on any machine.
 *
 * The probe reads its [plugin.<name>] key "usable": "0" makes it report the
 * device unusable, so tests can see config keys reach a probe (and the scan
 * cache notice a changed key).
 *
 * KV caches are fp32 or, where a plugin's caps claim them, FP8 (stored =
 * real / scale), with scales as host floats or, where the layer says so,
 * in [1] or [Hk] tensors read when the forward runs (ABI 2.3). With
 * ABI_FP8_MATH_ALLOWED (or the defect ABI_BUG_FP8_MATH) an FP8-cache layer
 * computes as an FP8 tensor-core backend would.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "common.h"

const ah_host_services *abi_host;

enum { MAX_RECORDED = 64 }; /* forward calls one emulated graph holds */
enum { MAX_FROZEN = 64 };   /* scales per tensor ABI_BUG_SCALE_CAPTURE keeps */

/* A scale tensor whose values were copied at capture (the defect
 * ABI_BUG_SCALE_CAPTURE): what a kernel launch that took scales by value
 * would replay. */
typedef struct frozen {
    DLTensor t;
    int64_t n;
    float v[MAX_FROZEN];
} frozen;

/* An emulated graph: the forward calls recorded during its capture. */
struct ah_graph {
    int n;
    struct recorded {
        ah_state *st;
        ah_forward_args a;
        frozen k, v, q;
    } calls[MAX_RECORDED];
};

typedef struct ah_context {
    ah_errbuf err;
    const ah_host_services *host;
    uint32_t bugs;
    struct ah_graph *capture; /* non-NULL between graph_begin and graph_end */
} ctx_t;

typedef struct ah_state {
    ah_errbuf err;
    ctx_t *ctx;
    ah_layer_spec spec;
    ah_limits lim;
    /* copies of the last planned batch's host arrays */
    uint32_t num_reqs, num_tokens, bt_stride, num_blocks, max_seq;
    int32_t *qsl, *seq, *bt;
    int64_t *slots;
    int fp8_math; /* round query rows and probabilities to e4m3 */
    /* a ragged layer (where a plugin's caps claim AH_FEAT_RAGGED_KV): the
     * planned cu_seqlens_k (seq then holds each request's k_len) and where
     * its queries sit (ah_ragged_keys) */
    int32_t *cuk;
    uint32_t ragged_keys;
} state_t;

ah_status abi_probe(const ah_host_services *host, ah_probe_info *info)
{
    /* plugins built on this backend may declare other keys instead */
    int usable = !host || !host->config_str || !host->config_str(host, "usable") ||
                 host->config_int(host, "usable");
    ah_strlcpy(info->device_name, "host CPU (ABI test plugin)", sizeof info->device_name);
    ah_strlcpy(info->arch, "generic", sizeof info->arch);
    info->device_count = 1;
    info->multiprocessors = host && host->hw ? host->hw->cpu_logical_cores : 1;
    info->memory_bytes = host && host->hw ? host->hw->memory_bytes : 0;
    if (!usable) {
        info->usable = 0;
        ah_strlcpy(info->reason, "switched off by its config key usable", sizeof info->reason);
        return AH_OK;
    }
    info->usable = 1;
    return AH_OK;
}

static ah_status ctx_create(const ah_host_services *host, const ah_context_options *opts,
                            ah_context **out, const char **why)
{
    if (opts->device_index != 0) {
        *out = NULL;
        *why = "the test device is device 0";
        return AH_ERR_UNAVAILABLE;
    }
    ctx_t *c = host->alloc(host, sizeof *c);
    *out = NULL;
    if (!c) {
        *why = "out of memory";
        return AH_ERR_OUT_OF_MEMORY;
    }
    memset(c, 0, sizeof *c);
    c->host = host;
    *out = c;
    return AH_OK;
}

static void ctx_destroy(ah_context *c)
{
    if (!c) return;
    free(c->capture);
    c->host->free(c->host, c);
}

static const char *ctx_error(const ah_context *c) { return c->err.msg; }

uint32_t *abi_bugs(ah_context *c) { return &c->bugs; }

static void st_destroy(ah_state *s)
{
    if (!s) return;
    const ah_host_services *h = s->ctx->host;
    h->free(h, s->qsl);
    h->free(h, s->seq);
    h->free(h, s->bt);
    h->free(h, s->slots);
    h->free(h, s->cuk);
    h->free(h, s);
}

static ah_status st_create(ah_context *c, const ah_layer_spec *spec, const ah_limits *lim,
                           ah_state **out)
{
    *out = NULL;
    const int fp8 = ah_dtype_is_fp8(spec->kv_dtype);
    if (spec->q_dtype != AH_DTYPE_FP32 || (spec->kv_dtype != AH_DTYPE_FP32 && !fp8))
        return ah_fail(&c->err, AH_ERR_UNSUPPORTED, "only fp32 queries over an fp32 or fp8 cache");
    if ((spec->kv_layout != AH_KV_LAYOUT_NHD && spec->kv_layout != AH_KV_LAYOUT_NHD_INTERLEAVED) ||
        spec->attn_type != AH_ATTN_DECODER || spec->use_mla || spec->use_sinks || spec->use_alibi ||
        spec->softcap != 0 || spec->num_kv_heads == 0 || spec->num_q_heads % spec->num_kv_heads)
        return ah_fail(&c->err, AH_ERR_UNSUPPORTED, "unsupported layer spec");
    const ah_host_services *h = c->host;
    state_t *s = h->alloc(h, sizeof *s);
    if (!s) return ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
    memset(s, 0, sizeof *s);
    s->ctx = c;
    s->spec = *spec;
    s->lim = *lim;
    s->fp8_math = fp8 && ((c->bugs & ABI_BUG_FP8_MATH) ||
                          ((c->bugs & ABI_FP8_MATH_ALLOWED) && spec->fp8_attention));
    s->qsl = h->alloc(h, ((size_t)lim->max_num_reqs + 1) * sizeof(int32_t));
    s->seq = h->alloc(h, ((size_t)lim->max_num_reqs + 1) * sizeof(int32_t));
    s->bt =
        h->alloc(h, ((size_t)lim->max_num_reqs * lim->max_blocks_per_req + 1) * sizeof(int32_t));
    s->slots = h->alloc(h, ((size_t)lim->max_num_tokens + 1) * sizeof(int64_t));
    if (ah_spec_ragged(spec))
        s->cuk = h->alloc(h, ((size_t)lim->max_num_reqs + 1) * sizeof(int32_t));
    if (!s->qsl || !s->seq || !s->bt || !s->slots || (ah_spec_ragged(spec) && !s->cuk)) {
        st_destroy(s);
        return ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
    }
    *out = s;
    return AH_OK;
}

static const char *st_error(const ah_state *s) { return s->err.msg; }

static ah_status plan(ah_state *s, const ah_batch *b, ah_plan_mode mode, void *stream)
{
    (void)stream;
    if (mode == AH_PLAN_REPLAY && (s->ctx->bugs & ABI_BUG_STALE)) return AH_OK;
    if (b->num_reqs > s->lim.max_num_reqs || b->num_tokens > s->lim.max_num_tokens)
        return ah_fail(&s->err, AH_ERR_INVALID_ARGUMENT, "batch exceeds the state's limits");
    uint32_t width = s->lim.max_blocks_per_req < b->block_table_stride ? s->lim.max_blocks_per_req
                                                                       : b->block_table_stride;
    memcpy(s->qsl, b->query_start_loc_host, ((size_t)b->num_reqs + 1) * sizeof(int32_t));
    memcpy(s->seq, b->seq_lens_host, (size_t)b->num_reqs * sizeof(int32_t));
    s->max_seq = 0;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        memcpy(s->bt + (size_t)r * width, b->block_table_host + (size_t)r * b->block_table_stride,
               width * sizeof(int32_t));
        if (s->seq[r] > (int32_t)s->max_seq) s->max_seq = (uint32_t)s->seq[r];
    }
    memcpy(s->slots, b->slot_mapping_host, (size_t)b->num_tokens * sizeof(int64_t));
    if (s->cuk) {
        const int32_t *cuk = ah_batch_cu_seqlens_k(b);
        if (!cuk)
            return ah_fail(&s->err, AH_ERR_INVALID_ARGUMENT, "a ragged layer needs cu_seqlens_k");
        memcpy(s->cuk, cuk, ((size_t)b->num_reqs + 1) * sizeof(int32_t));
        s->ragged_keys = ah_batch_ragged_keys(b);
        s->max_seq = 0;
        for (uint32_t r = 0; r < b->num_reqs; r++) {
            s->seq[r] = cuk[r + 1] - cuk[r];
            if (s->seq[r] > (int32_t)s->max_seq) s->max_seq = (uint32_t)s->seq[r];
        }
    }
    s->num_reqs = b->num_reqs;
    s->num_tokens = b->num_tokens;
    s->num_blocks = b->num_blocks;
    s->bt_stride = width;
    return AH_OK;
}

static float *f32(const DLTensor *t) { return (float *)ah_dl_data(t); }

static float scale_or_1(float s) { return s != 0 ? s : 1.0f; }

/* KV head h's scale: the tensor's ([1] or [Hk]) when the call has one,
 * else the float (0 meaning 1). */
static float scale_at(const DLTensor *t, float f, size_t h, uint32_t bugs)
{
    if (!t) return scale_or_1(f);
    return f32(t)[t->shape[0] > 1 && !(bugs & ABI_BUG_HEAD0_SCALE) ? h : 0];
}

/* x rounded to e4m3, as FP8 tensor cores see it. */
static double e4m3(double x)
{
    return ah_fp8e4m3_to_f32(ah_f32_to_fp8((float)x, AH_DTYPE_FP8_E4M3));
}

/* The element offset of (slot, KV head) in an NHD cache view, through its
 * strides: a dense cache and an interleaved one's views alike. */
static size_t row_at(const DLTensor *cache, size_t bs, size_t slot, size_t kh)
{
    return (size_t)((int64_t)(slot / bs) * ah_dl_stride(cache, 0) +
                    (int64_t)(slot % bs) * ah_dl_stride(cache, 1) +
                    (int64_t)kh * ah_dl_stride(cache, 2));
}

/* n new elements at src into the cache at element offset at: fp32 copied,
 * FP8 stored as value / scale. */
static void store_row(const DLTensor *cache, ah_dtype t, size_t at, const float *src, size_t n,
                      float scale)
{
    if (t == AH_DTYPE_FP32) {
        memcpy(f32(cache) + at, src, n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; i++) ah_store_f32(ah_dl_data(cache), at + i, t, src[i] / scale);
}

static ah_status write_kv(ah_state *s, const ah_kv_write_args *a)
{
    const ah_layer_spec *sp = &s->spec;
    const uint32_t bugs = s->ctx->bugs;
    if (!a->key || !a->value || !a->key_cache || !a->value_cache)
        return ah_fail(&s->err, AH_ERR_INVALID_ARGUMENT, "write_kv needs key, value and caches");
    size_t hk = sp->num_kv_heads, dq = sp->qk_head_size, dv = sp->v_head_size;
    const int64_t cache_slots = (int64_t)s->num_blocks * sp->block_size;
    uint32_t n = s->num_tokens - ((bugs & ABI_BUG_DROP) && s->num_tokens);
    for (uint32_t t = 0; t < n; t++) {
        if (s->slots[t] < 0) continue; /* padding */
        for (int64_t slot = s->slots[t]; slot <= s->slots[t] + !!(bugs & ABI_BUG_STRAY); slot++) {
            if (slot >= cache_slots) continue;
            for (size_t h = 0; h < hk; h++) {
                store_row(a->key_cache, sp->kv_dtype,
                          row_at(a->key_cache, sp->block_size, (size_t)slot, h),
                          f32(a->key) + (t * hk + h) * dq, dq,
                          scale_at(a->k_scale_tensor, a->k_scale, h, bugs));
                store_row(a->value_cache, sp->kv_dtype,
                          row_at(a->value_cache, sp->block_size, (size_t)slot, h),
                          f32(a->value) + (t * hk + h) * dv, dv,
                          scale_at(a->v_scale_tensor, a->v_scale, h, bugs));
            }
        }
    }
    return AH_OK;
}

/* Key j of request r, KV head kh: the element offsets of its K and V rows
 * in kt and vt, the paged caches or a ragged layer's packed key and value
 * ([Tk, Hk, D], rows from cu_seqlens_k[r]). */
static void key_rows(const state_t *s, const ah_forward_args *a, uint32_t r, int64_t j, size_t kh,
                     const DLTensor **kt, size_t *k0, const DLTensor **vt, size_t *v0)
{
    if (s->cuk) {
        const int64_t row = s->cuk[r] + j;
        *kt = a->key;
        *vt = a->value;
        *k0 = (size_t)(row * ah_dl_stride(a->key, 0) + (int64_t)kh * ah_dl_stride(a->key, 1));
        *v0 = (size_t)(row * ah_dl_stride(a->value, 0) + (int64_t)kh * ah_dl_stride(a->value, 1));
        return;
    }
    const size_t bs = s->spec.block_size;
    const int32_t *table = s->bt + (size_t)r * s->bt_stride;
    const size_t slot = (size_t)table[j / (int64_t)bs] * bs + (size_t)j % bs;
    *kt = a->key_cache;
    *vt = s->ctx->bugs & ABI_BUG_VALUE_AT_KEY ? a->key_cache : a->value_cache;
    *k0 = row_at(a->key_cache, bs, slot, kh);
    *v0 = row_at(*vt, bs, slot, kh);
}

/* Query token t of request r, head h: softmax over the keys its causal
 * (and sliding) window admits, into O and, if wanted, the LSE (a row that
 * sees no key: O 0, LSE -inf). W holds max_seq logits, ACC v_head_size
 * sums, Q the qk_head_size query values the dot products use. A ragged
 * step's context queries sit after every key. */
static void attend_row(const state_t *s, const ah_forward_args *a, uint32_t r, int32_t t, size_t h,
                       double *w, double *acc, double *q)
{
    const ah_layer_spec *sp = &s->spec;
    const uint32_t bugs = s->ctx->bugs;
    const size_t hq = sp->num_q_heads, hk = sp->num_kv_heads, dq = sp->qk_head_size;
    const size_t dv = sp->v_head_size;
    const size_t kh = bugs & ABI_BUG_GQA ? h % hk : h / (hq / hk);
    const double scale = sp->scale != 0 ? sp->scale : 1.0 / sqrt((double)dq);
    const int context = s->cuk && s->ragged_keys == AH_RAGGED_KEYS_CONTEXT;
    const int64_t pos = s->seq[r] - (context ? 0 : s->qsl[r + 1] - s->qsl[r]) + (t - s->qsl[r]);
    const int64_t last = pos < s->seq[r] ? pos : s->seq[r] - 1;
    const int64_t win = (int64_t)sp->sliding_window + !!(bugs & ABI_BUG_WINDOW);
    const int64_t first = sp->sliding_window && pos - win + 1 > 0 ? pos - win + 1 : 0;
    const float *qv = f32(a->q) + ((size_t)t * hq + h) * dq;
    const ah_dtype kt = sp->kv_dtype;
    const float ks = kt == AH_DTYPE_FP32 ? 1.0f : scale_at(a->k_scale_tensor, a->k_scale, kh, bugs);
    const float vs = kt == AH_DTYPE_FP32 ? 1.0f : scale_at(a->v_scale_tensor, a->v_scale, kh, bugs);
    /* FP8 math: the query row in e4m3, with the engine's q_scale where the
     * layer gives one, else a per-row scale of its own. */
    double qmax = 0, qs = 1;
    if (s->fp8_math && ah_spec_q_scale(sp)) {
        qs = a->q_scale_tensor ? f32(a->q_scale_tensor)[0] : a->q_scale;
    } else {
        for (size_t c = 0; s->fp8_math && c < dq; c++) qmax = fmax(qmax, fabs((double)qv[c]));
        qs = qmax > 0 ? qmax / 448 : 1;
    }
    const double descale = bugs & ABI_BUG_Q_DESCALE ? 1 : qs;
    for (size_t c = 0; c < dq; c++) q[c] = s->fp8_math ? e4m3(qv[c] / qs) * descale : qv[c];
    double m = -INFINITY, den = 0;
    const DLTensor *kc, *vc;
    size_t k0, v0;
    for (int64_t j = first; j <= last; j++) {
        key_rows(s, a, r, j, kh, &kc, &k0, &vc, &v0);
        double d = 0;
        for (size_t c = 0; c < dq; c++) d += q[c] * ah_load_f32(ah_dl_data(kc), k0 + c, kt) * ks;
        w[j] = d * scale;
        if (w[j] > m) m = w[j];
    }
    memset(acc, 0, dv * sizeof *acc);
    for (int64_t j = first; j <= last; j++) {
        key_rows(s, a, r, j, kh, &kc, &k0, &vc, &v0);
        double e = exp(w[j] - m);
        if (s->fp8_math) e = e4m3(e * 256) / 256; /* P in e4m3, 256 against underflow */
        den += e;
        for (size_t c = 0; c < dv; c++) acc[c] += e * ah_load_f32(ah_dl_data(vc), v0 + c, kt) * vs;
    }
    float *ov = f32(a->out) + ((size_t)t * hq + h) * dv;
    for (size_t c = 0; c < dv; c++) ov[c] = den > 0 ? (float)(acc[c] / den) : 0.0f;
    if ((bugs & ABI_BUG_NAN) && t == 0 && h == 0) ov[0] = NAN;
    if (a->lse)
        f32(a->lse)[(size_t)t * hq + h] =
            den > 0 ? (float)(m + log(den) + (bugs & ABI_BUG_LSE ? 0.01 : 0)) : -INFINITY;
}

static ah_status forward_now(ah_state *s, const ah_forward_args *a)
{
    const size_t hq = s->spec.num_q_heads;
    if (!a->q || !a->out || (s->cuk ? !a->key || !a->value : !a->key_cache || !a->value_cache))
        return ah_fail(&s->err, AH_ERR_INVALID_ARGUMENT,
                       s->cuk ? "forward needs q, out, key and value (a ragged layer)"
                              : "forward needs q, out and caches");
    double *w = malloc(((size_t)s->max_seq + s->spec.v_head_size + s->spec.qk_head_size + 1) *
                       sizeof(double));
    if (!w) return ah_fail(&s->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
    for (uint32_t r = 0; r < s->num_reqs; r++)
        for (int32_t t = s->qsl[r]; t < s->qsl[r + 1]; t++)
            for (size_t h = 0; h < hq - !!(s->ctx->bugs & ABI_BUG_SKIP_HEAD); h++)
                attend_row(s, a, r, t, h, w, w + s->max_seq, w + s->max_seq + s->spec.v_head_size);
    free(w);
    return AH_OK;
}

static int is_f32(const DLTensor *t)
{
    return t && t->dtype.code == kDLFloat && t->dtype.bits == 32 && t->dtype.lanes == 1;
}

/* Element (i, j[, k]) of a 2-D or 3-D fp32 tensor, through its strides. */
static float *at3(const DLTensor *t, int64_t i, int64_t j, int64_t k)
{
    return f32(t) + i * ah_dl_stride(t, 0) + j * ah_dl_stride(t, 1) +
           (t->ndim > 2 ? k * ah_dl_stride(t, 2) : 0);
}

ah_status abi_merge_states(ah_context *c, const ah_merge_args *a)
{
    const DLTensor *t[] = {a ? a->v_a : NULL, a ? a->lse_a : NULL, a ? a->v_b : NULL,
                           a ? a->lse_b : NULL, a ? a->out : NULL};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!is_f32(t[i]) || t[i]->ndim != (i % 2 ? 2 : 3))
            return ah_fail(&c->err, AH_ERR_INVALID_ARGUMENT,
                           "merge_states takes fp32 parts [T, H, D] and LSEs [T, H]");
    if (a->lse_out && (!is_f32(a->lse_out) || a->lse_out->ndim != 2))
        return ah_fail(&c->err, AH_ERR_INVALID_ARGUMENT, "merge_states: lse_out is fp32 [T, H]");
    const int64_t T = a->v_a->shape[0], H = a->v_a->shape[1], D = a->v_a->shape[2];
    const DLTensor *parts[] = {a->v_b, a->out}, *lses[] = {a->lse_a, a->lse_b, a->lse_out};
    for (size_t i = 0; i < 2; i++)
        if (parts[i]->shape[0] != T || parts[i]->shape[1] != H || parts[i]->shape[2] != D)
            return ah_fail(&c->err, AH_ERR_INVALID_ARGUMENT,
                           "merge_states: v_b and out must have v_a's shape");
    for (size_t i = 0; i < 3; i++)
        if (lses[i] && (lses[i]->shape[0] != T || lses[i]->shape[1] != H))
            return ah_fail(&c->err, AH_ERR_INVALID_ARGUMENT, "merge_states: the LSEs are [T, H]");
    for (int64_t i = 0; i < T; i++)
        for (int64_t h = 0; h < H; h++) {
            const double la = *at3(a->lse_a, i, h, 0), lb = *at3(a->lse_b, i, h, 0);
            const double m = la > lb ? la : lb;
            const double wa = m == -INFINITY ? 0 : exp(la - m),
                         wb = m == -INFINITY ? 0 : exp(lb - m);
            const double den = wa + wb;
            for (int64_t d = 0; d < D; d++) {
                const double v =
                    den > 0 ? (wa * *at3(a->v_a, i, h, d) + wb * *at3(a->v_b, i, h, d)) / den : 0;
                *at3(a->out, i, h, d) = (float)v;
            }
            if (a->lse_out) *at3(a->lse_out, i, h, 0) = den > 0 ? (float)(m + log(den)) : -INFINITY;
        }
    return AH_OK;
}

/* Copy scale tensor *t's values into f and point *t at the copy. */
static void freeze(frozen *f, const DLTensor **t)
{
    if (!*t) return;
    f->t = **t;
    f->n = f->t.shape[0] < MAX_FROZEN ? f->t.shape[0] : MAX_FROZEN;
    memcpy(f->v, f32(*t), (size_t)f->n * sizeof(float));
    f->t.data = f->v;
    f->t.byte_offset = 0;
    f->t.shape = &f->n;
    *t = &f->t;
}

/* While a graph is being captured, forward records instead of running. */
static ah_status forward(ah_state *s, const ah_forward_args *a)
{
    struct ah_graph *g = s->ctx->capture;
    if (!g) return forward_now(s, a);
    if (g->n == MAX_RECORDED) return ah_fail(&s->err, AH_ERR_UNSUPPORTED, "graph too long");
    struct recorded *rec = &g->calls[g->n++];
    rec->st = s;
    rec->a = *a;
    if (s->ctx->bugs & ABI_BUG_SCALE_CAPTURE) {
        freeze(&rec->k, &rec->a.k_scale_tensor);
        freeze(&rec->v, &rec->a.v_scale_tensor);
        freeze(&rec->q, &rec->a.q_scale_tensor);
    }
    return AH_OK;
}

/* ---- host memory as "device" memory, and emulated graphs ---------------- */

static ah_status mem_alloc(ah_context *c, size_t bytes, void **p)
{
    *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    return *p ? AH_OK : ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
}

static void mem_free(ah_context *c, void *p)
{
    (void)c;
    free(p);
}

static ah_status mem_copy(ah_context *c, void *dst, const void *src, size_t n, ah_copy_kind k,
                          void *stream)
{
    (void)c, (void)k, (void)stream;
    memmove(dst, src, n);
    return AH_OK;
}

static ah_status synchronize(ah_context *c, void *stream)
{
    (void)c, (void)stream;
    return AH_OK;
}

/* A stream only has to be a distinct handle. */
static ah_status stream_create(ah_context *c, void **stream)
{
    *stream = malloc(1);
    return *stream ? AH_OK : ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
}

static void stream_destroy(ah_context *c, void *stream)
{
    (void)c;
    free(stream);
}

static ah_status graph_begin(ah_context *c, void *stream)
{
    (void)stream;
    if (c->capture) return ah_fail(&c->err, AH_ERR_INVALID_ARGUMENT, "already capturing");
    c->capture = calloc(1, sizeof *c->capture);
    return c->capture ? AH_OK : ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
}

static ah_status graph_end(ah_context *c, void *stream, ah_graph **out)
{
    (void)stream;
    *out = c->capture;
    c->capture = NULL;
    return *out ? AH_OK : ah_fail(&c->err, AH_ERR_INVALID_ARGUMENT, "not capturing");
}

static ah_status graph_launch(ah_context *c, ah_graph *g, void *stream)
{
    (void)stream;
    for (int i = 0; i < g->n; i++) {
        ah_status s = forward_now(g->calls[i].st, &g->calls[i].a);
        if (s != AH_OK) return ah_fail(&c->err, s, "replayed forward: %s", g->calls[i].st->err.msg);
    }
    return AH_OK;
}

static void graph_destroy(ah_context *c, ah_graph *g)
{
    (void)c;
    free(g);
}

/* Events: the backend runs synchronously, so any order holds by itself; an
 * event only remembers that it was recorded, so waiting on one never
 * recorded is the host's mistake. */
struct ah_event {
    int recorded;
};

static ah_status event_create(ah_context *c, ah_event **e)
{
    *e = calloc(1, sizeof **e);
    return *e ? AH_OK : ah_fail(&c->err, AH_ERR_OUT_OF_MEMORY, "out of memory");
}

static void event_destroy(ah_context *c, ah_event *e)
{
    (void)c;
    free(e);
}

static ah_status event_record(ah_context *c, ah_event *e, void *stream)
{
    (void)c, (void)stream;
    e->recorded = 1;
    return AH_OK;
}

static ah_status stream_wait(ah_context *c, void *stream, ah_event *e)
{
    (void)stream;
    return e->recorded
               ? AH_OK
               : ah_fail(&c->err, AH_ERR_INVALID_ARGUMENT, "waiting on an unrecorded event");
}

static const ah_config_key abi_keys[] = {
    AH_KEY_BOOL_ROW("usable", "true", "false: the probe reports the device unusable (for tests)")};

const ah_caps abi_caps = {
    ABI_CAPS_COMMON,
    .qk_head_sizes = AH_INT_SET_RANGE(1, 1024, 1),
    .v_head_sizes = AH_INT_SET_RANGE(1, 1024, 1),
    .block_sizes = AH_INT_SET_RANGE(1, 1024, 1),
    .features = AH_FEAT_DIFF_HEAD_SIZES,
    .graph_level = AH_GRAPH_NEVER,
    .config_keys = abi_keys,
    .n_config_keys = 1,
    .prefill_rank = AH_RANK_SECONDARY,
    .decode_rank = AH_RANK_SECONDARY,
    .mixed_batch = AH_MIXED_WHOLE,
    .decode_query_len_max = 1,
};

/* The slots both operation tables fill. */
#define BACKEND_SLOTS \
    .struct_size = sizeof(ah_plugin_ops), .probe = abi_probe, .context_create = ctx_create, \
    .context_destroy = ctx_destroy, .context_error = ctx_error, .state_create = st_create, \
    .state_destroy = st_destroy, .state_error = st_error, .plan = plan, .forward = forward, \
    .write_kv = write_kv

const ah_plugin_ops abi_ops = {BACKEND_SLOTS};

const ah_plugin_ops abi_graph_ops = {
    BACKEND_SLOTS,
    .mem_alloc = mem_alloc,
    .mem_free = mem_free,
    .mem_copy = mem_copy,
    .synchronize = synchronize,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .graph_begin = graph_begin,
    .graph_end = graph_end,
    .graph_launch = graph_launch,
    .graph_destroy = graph_destroy,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .stream_wait = stream_wait,
};
