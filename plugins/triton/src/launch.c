/*
 * Kernel lookup, module loading and launches: forward (unified kernel, or
 * split-KV stage 1 + reduce for pure decode; the ragged kernel for a ragged
 * layer), write_kv and merge_states.
 * Each launch packs its arguments in the order generate.py compiled the
 * kernel with, and checks the packed signature against the table's, so a
 * kernel changed without its launcher fails loudly instead of reading
 * garbage. Tensors are checked before anything is launched: bad input
 * returns an error and writes nothing.
 */
#include <limits.h>
#include <string.h>

#include "triton_plugin.h"

#define TK_SIG_UNIFIED "pppppppppppfffiiiiiiiiiiiiiiiiiiiiii"
#define TK_SIG_STAGE1 "pppppppppffiiiiiiiiiiiiiiiiiii"
#define TK_SIG_KV_WRITE "ppppppffiiiiiiiiiiii"
#define TK_SIG_SCALES "ppi" /* k_scale_ptr, v_scale_ptr, scale_stride */
const char tk_sig_unified[] = TK_SIG_UNIFIED;
const char tk_sig_unified_mask[] = TK_SIG_UNIFIED "p"; /* + mask_meta */
const char tk_sig_stage1[] = TK_SIG_STAGE1;
const char tk_sig_reduce[] = "ppppppfiiiiiiii";
const char tk_sig_merge[] = "ppppppiiiiiiiii";
const char tk_sig_kv_write[] = TK_SIG_KV_WRITE;
const char tk_sig_unified_scales[] = TK_SIG_UNIFIED TK_SIG_SCALES;
const char tk_sig_unified_mask_scales[] = TK_SIG_UNIFIED "p" TK_SIG_SCALES;
const char tk_sig_stage1_scales[] = TK_SIG_STAGE1 TK_SIG_SCALES;
const char tk_sig_kv_write_scales[] = TK_SIG_KV_WRITE TK_SIG_SCALES;
const char tk_sig_ragged[] = "ppppppppppffiiiiiiiiiiiiiiiiiiii";

/* ---- table and modules ------------------------------------------------------ */

static uint32_t tk_pad_for(uint32_t d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }

const tk_entry *tk_find(const ah_context *ctx, const char *kernel, ah_dtype q, ah_dtype kv,
                        uint32_t head_size)
{
    /* kv_write (and its scale-tensor form): one pad, masked to the head size */
    uint32_t pad = strncmp(kernel, "kv_write", 8) == 0 ? 256 : tk_pad_for(head_size);
    for (unsigned i = 0; i < ah_tk_table_len; i++) {
        const tk_entry *e = &ah_tk_table[i];
        if (e->q_dtype == q && e->kv_dtype == kv && e->head_pad == pad &&
            strcmp(e->kernel, kernel) == 0 && strcmp(e->arch, ctx->arch) == 0)
            return e;
    }
    return NULL;
}

const tk_entry *tk_find_ragged(const ah_context *ctx, const char *kernel, ah_dtype q, uint32_t qk,
                               uint32_t v)
{
    const tk_entry *best = NULL;
    for (unsigned i = 0; i < ah_tk_table_len; i++) {
        const tk_entry *e = &ah_tk_table[i];
        if (e->q_dtype != q || e->head_pad < qk || e->v_pad < v || strcmp(e->kernel, kernel) != 0 ||
            strcmp(e->arch, ctx->arch) != 0)
            continue;
        if (!best || e->head_pad + e->v_pad < best->head_pad + best->v_pad) best = e;
    }
    return best;
}

ah_status tk_function(ah_context *ctx, const tk_entry *e, const char *want, CUfunction *out,
                      ah_errbuf *err)
{
    const ah_cu_api *cu = ctx->cu;
    size_t i = (size_t)(e - ah_tk_table);
    if (strcmp(e->signature, want) != 0)
        return ah_fail(
            err, AH_ERR_INTERNAL,
            "%s (%s): generated signature %s, launcher packs %s: regenerate or fix launch.c",
            e->kernel, e->arch, e->signature, want);
    if (!ctx->funcs[i]) {
        if ((size_t)e->shared > (size_t)ctx->smem_optin)
            return ah_fail(err, AH_ERR_UNSUPPORTED,
                           "%s needs %u bytes of shared memory, device has %d", e->kernel,
                           e->shared, ctx->smem_optin);
        ah_status s = tk_ctx_bind(ctx, err);
        if (s) return s;
        CUmodule m;
        TK_CU(ctx, err, cu->module_load(&m, e->image));
        CUfunction f;
        CUresult r = cu->module_function(&f, m, e->symbol);
        if (!r && e->shared > 49152)
            r = cu->func_set_attr(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  (int)e->shared);
        if (r) {
            cu->module_unload(m);
            return tk_cu_fail(cu, err, r,
                              "loading a kernel (cuModuleGetFunction/cuFuncSetAttribute)");
        }
        ctx->modules[i] = m;
        ctx->funcs[i] = f;
    }
    *out = ctx->funcs[i];
    return AH_OK;
}

/* ---- argument packing ------------------------------------------------------- */

#define TK_MAX_ARGS 48
typedef struct tk_args {
    uint64_t val[TK_MAX_ARGS];
    void *ptr[TK_MAX_ARGS];
    char sig[TK_MAX_ARGS];
    int n;
} tk_args;

static void tk_arg(tk_args *a, char kind, const void *src, size_t size)
{
    a->val[a->n] = 0;
    memcpy(&a->val[a->n], src, size);
    a->ptr[a->n] = &a->val[a->n];
    a->sig[a->n++] = kind;
}
static void arg_p(tk_args *a, CUdeviceptr p) { tk_arg(a, 'p', &p, sizeof p); }
static void arg_t(tk_args *a, const DLTensor *t)
{
    arg_p(a, t ? (CUdeviceptr)(uintptr_t)ah_dl_data(t) : 0);
}
static void arg_i(tk_args *a, int64_t v)
{
    int32_t x = (int32_t)v;
    tk_arg(a, 'i', &x, sizeof x);
}
static void arg_f(tk_args *a, float v) { tk_arg(a, 'f', &v, sizeof v); }

ah_status tk_launch(ah_context *ctx, const tk_entry *e, CUfunction f, unsigned gx, unsigned gy,
                    unsigned gz, void **params, CUstream stream, ah_errbuf *err)
{
    /* AMD's wavefronts are 64 lanes: Triton's num_warps counts wavefronts. */
    unsigned lanes = e->arch[0] == 'g' ? 64u : 32u;
    TK_CU(ctx, err,
          ctx->cu->launch(f, gx, gy, gz, lanes * e->num_warps, 1, 1, e->shared, stream, params,
                          NULL));
    return AH_OK;
}

/* Finish the argument list (Triton's two scratch pointers, unused here),
 * check it against the kernel's signature, launch. */
static ah_status tk_go(ah_context *ctx, const tk_entry *e, CUfunction f, tk_args *a, unsigned gx,
                       unsigned gy, unsigned gz, CUstream stream, ah_errbuf *err)
{
    a->sig[a->n] = '\0';
    if (strcmp(a->sig, e->signature) != 0)
        return ah_fail(err, AH_ERR_INTERNAL, "%s: packed %s, kernel takes %s", e->kernel, a->sig,
                       e->signature);
    int n = a->n;
    arg_p(a, 0);
    arg_p(a, 0);
    (void)n;
    if (!gx || !gy || !gz) return AH_OK;
    return tk_launch(ctx, e, f, gx, gy, gz, a->ptr, stream, err);
}

/* ---- tensor checks ---------------------------------------------------------- */

/* The host checks forward's and write_kv's tensors against the spec unless
 * validation is off (plugin_util.h). What stays here protects memory and
 * the kernels' compiled assumptions: the tensor holds what the kernels
 * address (ah_dl_check), its base is align-byte aligned and its outer
 * strides are multiples of 16 elements that fit in int32 (what the
 * kernels' vectorised loads were compiled for). */
static ah_status tk_tensor_aligned(ah_errbuf *e, const ah_dl_want *w, const DLTensor *t,
                                   unsigned align)
{
    ah_status s = ah_dl_check(t, w, e);
    if (s) return s;
    if (((uintptr_t)ah_dl_data(t)) % align)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s: data not %u-byte aligned", w->name, align);
    for (int i = 0; w->ndim >= 3 && i < w->ndim - 1; i++) {
        int64_t st = ah_dl_stride(t, i);
        if (st % 16 || st < 0 || st > INT_MAX)
            return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                           "%s: stride %lld of dim %d must be a multiple of 16 in [0, 2^31)",
                           w->name, (long long)st, i);
    }
    return AH_OK;
}

/* A [>= T, heads, hsz] per-token tensor of the planned batch, 16-byte
 * aligned. */
static ah_status tk_rows(ah_state *st, const DLTensor *t, const char *name, ah_dtype dt,
                         int64_t heads, int64_t hsz)
{
    const ah_dl_want w = {name, 3, {st->num_tokens, heads, hsz}, 1, dt, 0, AH_KV_LAYOUT_AUTO};
    return tk_tensor_aligned(&st->err, &w, t, 16);
}

/* A cache of the planned batch's blocks; its strides (block, slot, head).
 * The kernels address every layout through these: an interleaved layout's
 * K and V views (one [blocks, 2, ...] allocation) differ from the dense
 * ones only in their block stride, twice a dense one, and in where the
 * value view starts, which ah_dl_check verifies against the layout. */
static ah_status tk_cache(ah_state *st, const DLTensor *t, const char *name, int64_t s[3])
{
    const ah_layer_spec *sp = &st->spec;
    const ah_dl_want w = ah_dl_cache_want(name, sp, st->num_blocks, sp->qk_head_size);
    ah_status r = tk_tensor_aligned(&st->err, &w, t, 16);
    if (r) return r;
    const int hnd = ah_kv_layout_is_hnd(sp->kv_layout);
    s[0] = ah_dl_stride(t, 0);
    s[1] = ah_dl_stride(t, hnd ? 2 : 1);
    s[2] = ah_dl_stride(t, hnd ? 1 : 2);
    return AH_OK;
}

/* ---- FP8 scales ------------------------------------------------------------ */

/* A layer with its FP8 scales in tensors (kv_scales tensor or per_head):
 * K's and V's, float32 [Hk] (per head) or [1], 4-byte aligned. The kernels
 * read them when they run; they are never read here. */
static ah_status tk_scale_tensors(ah_state *st, const DLTensor *k, const DLTensor *v)
{
    const int64_t n = st->scale_stride ? st->spec.num_kv_heads : 1;
    const ah_dl_want wk = {"k_scale_tensor", 1, {n}, 0, AH_DTYPE_FP32, 1, AH_KV_LAYOUT_AUTO},
                     wv = {"v_scale_tensor", 1, {n}, 0, AH_DTYPE_FP32, 1, AH_KV_LAYOUT_AUTO};
    ah_status s = tk_tensor_aligned(&st->err, &wk, k, 4);
    return s ? s : tk_tensor_aligned(&st->err, &wv, v, 4);
}

/* The scale tensors' kernel arguments (generate.py's P_SCALES). */
static void arg_scales(tk_args *g, const ah_state *st, const DLTensor *k, const DLTensor *v)
{
    arg_t(g, k);
    arg_t(g, v);
    arg_i(g, st->scale_stride);
}

/* ---- forward ------------------------------------------------------------- */

/* forward's lse, sinks and alibi_slopes, where the layer and call have them. */
static ah_status tk_side_tensors(ah_state *st, const ah_forward_args *a)
{
    const ah_layer_spec *sp = &st->spec;
    ah_errbuf *err = &st->err;
    const int64_t T = st->num_tokens, Hq = sp->num_q_heads;
    ah_status s;
    /* lse dense: the kernels index it as t * Hq + h */
    const ah_dl_want wl = {"lse", 2, {T, Hq}, 1, AH_DTYPE_FP32, 1, AH_KV_LAYOUT_AUTO},
                     ws = {"sinks", 1, {Hq}, 0, AH_DTYPE_FP32, 0, AH_KV_LAYOUT_AUTO},
                     wa = {"alibi_slopes", 1, {Hq}, 0, AH_DTYPE_FP32, 0, AH_KV_LAYOUT_AUTO};
    if (a->lse && (s = tk_tensor_aligned(err, &wl, a->lse, 16))) return s;
    if (sp->use_sinks && (s = tk_tensor_aligned(err, &ws, a->sinks, 16))) return s;
    if (sp->use_alibi && (s = tk_tensor_aligned(err, &wa, a->alibi_slopes, 16))) return s;
    return AH_OK;
}

/* A ragged layer: attention over forward's key and value, packed by the
 * planned cu_seqlens_k; nothing is read from or written to a cache. */
static ah_status tk_forward_ragged(ah_state *st, const ah_forward_args *a)
{
    ah_context *ctx = st->ctx;
    const ah_layer_spec *sp = &st->spec;
    ah_errbuf *err = &st->err;
    const int64_t Tk = st->num_k_tokens, Hq = sp->num_q_heads, Hk = sp->num_kv_heads;
    const int64_t Dqk = sp->qk_head_size, Dv = sp->v_head_size;
    const ah_dl_want wk = {"key", 3, {Tk, Hk, Dqk}, 1, sp->q_dtype, 0, AH_KV_LAYOUT_AUTO},
                     wv = {"value", 3, {Tk, Hk, Dv}, 1, sp->q_dtype, 0, AH_KV_LAYOUT_AUTO};
    ah_status s;
    if ((s = tk_rows(st, a->q, "q", sp->q_dtype, Hq, Dqk)) ||
        (s = tk_rows(st, a->out, "out", sp->q_dtype, Hq, Dv)) ||
        (s = tk_tensor_aligned(err, &wk, a->key, 16)) ||
        (s = tk_tensor_aligned(err, &wv, a->value, 16)) || (s = tk_side_tensors(st, a)))
        return s;
    if ((s = tk_ctx_bind(ctx, err))) return s;
    const int softcap = sp->softcap > 0;
    const tk_entry *e = st->k.ragged;
    tk_args g = {0};
    arg_t(&g, a->q);
    arg_t(&g, a->key);
    arg_t(&g, a->value);
    arg_t(&g, a->out);
    arg_t(&g, a->lse);
    arg_t(&g, sp->use_sinks ? a->sinks : NULL);
    arg_t(&g, sp->use_alibi ? a->alibi_slopes : NULL);
    arg_p(&g, st->d_cuk);
    arg_p(&g, st->d_qsl);
    arg_p(&g, st->d_counts);
    arg_f(&g, sp->scale);
    arg_f(&g, softcap ? sp->softcap : 1.0f);
    arg_i(&g, Hq / Hk);
    arg_i(&g, st->heads);
    arg_i(&g, Dqk);
    arg_i(&g, Dv);
    arg_i(&g, ah_dl_stride(a->q, 0));
    arg_i(&g, ah_dl_stride(a->q, 1));
    arg_i(&g, ah_dl_stride(a->out, 0));
    arg_i(&g, ah_dl_stride(a->out, 1));
    arg_i(&g, Hq);
    arg_i(&g, ah_dl_stride(a->key, 0));
    arg_i(&g, ah_dl_stride(a->key, 1));
    arg_i(&g, ah_dl_stride(a->value, 0));
    arg_i(&g, ah_dl_stride(a->value, 1));
    arg_i(&g, (int)sp->sliding_window);
    arg_i(&g, ah_spec_causal(sp));
    arg_i(&g, st->context_keys);
    arg_i(&g, softcap);
    arg_i(&g, sp->use_alibi != 0);
    arg_i(&g, sp->use_sinks != 0);
    arg_i(&g, a->lse != NULL);
    uint32_t block_q = e->block_m / (uint32_t)st->heads;
    unsigned gx = (st->grid_tokens + block_q - 1) / block_q + st->grid_reqs;
    return tk_go(ctx, e, st->k.f_ragged, &g, gx, (unsigned)(Hq / st->heads), 1, (CUstream)a->stream,
                 err);
}

ah_status tk_forward(ah_state *st, const ah_forward_args *a)
{
    if (st->ragged) return tk_forward_ragged(st, a);
    ah_context *ctx = st->ctx;
    const ah_layer_spec *sp = &st->spec;
    ah_errbuf *err = &st->err;
    const int64_t Hq = sp->num_q_heads, D = sp->qk_head_size;
    ah_status s;
    int64_t ks[3], vs[3];
    if ((s = tk_rows(st, a->q, "q", sp->q_dtype, Hq, D)) ||
        (s = tk_rows(st, a->out, "out", sp->q_dtype, Hq, D)) ||
        (s = tk_cache(st, a->key_cache, "key_cache", ks)) ||
        (s = tk_cache(st, a->value_cache, "value_cache", vs)) || (s = tk_side_tensors(st, a)))
        return s;
    if (ks[0] > INT_MAX || vs[0] > INT_MAX)
        return ah_fail(err, AH_ERR_INVALID_ARGUMENT, "cache block stride exceeds int32");
    if (st->scale_tensors && (s = tk_scale_tensors(st, a->k_scale_tensor, a->v_scale_tensor)))
        return s;
    if ((s = tk_ctx_bind(ctx, err))) return s;

    /* Host floats fold into the score scale and the output's; scale
     * tensors are the kernels' to read (the floats are 0 then). */
    const float k_scale = st->scale_tensors ? 1.0f : ah_kv_scale(a->k_scale, sp->kv_dtype);
    const float v_scale = st->scale_tensors ? 1.0f : ah_kv_scale(a->v_scale, sp->kv_dtype);
    const int causal = ah_spec_causal(sp);
    const int window = sp->attn_type == AH_ATTN_ENCODER_DECODER ? 0 : (int)sp->sliding_window;
    const int group = (int)(sp->num_q_heads / sp->num_kv_heads);
    const int softcap = sp->softcap > 0;
    const int64_t sqt = ah_dl_stride(a->q, 0), sqh = ah_dl_stride(a->q, 1);
    const int64_t sot = ah_dl_stride(a->out, 0), soh = ah_dl_stride(a->out, 1);
    CUstream cs = (CUstream)a->stream;
    tk_args g = {0};

    if (!st->decode) {
        const tk_entry *e = st->masked ? st->k.masked : st->k.unified;
        const int heads = st->masked ? st->heads_masked : st->heads;
        arg_t(&g, a->q);
        arg_t(&g, a->key_cache);
        arg_t(&g, a->value_cache);
        arg_t(&g, a->out);
        arg_t(&g, a->lse);
        arg_t(&g, sp->use_sinks ? a->sinks : NULL);
        arg_t(&g, sp->use_alibi ? a->alibi_slopes : NULL);
        arg_p(&g, st->d_block_table);
        arg_p(&g, st->d_seq_lens);
        arg_p(&g, st->d_qsl);
        arg_p(&g, st->d_counts);
        arg_f(&g, sp->scale * k_scale);
        arg_f(&g, softcap ? sp->softcap : 1.0f);
        arg_f(&g, v_scale);
        arg_i(&g, group);
        arg_i(&g, heads);
        arg_i(&g, D);
        arg_i(&g, st->lim.max_blocks_per_req);
        arg_i(&g, sqt);
        arg_i(&g, sqh);
        arg_i(&g, sot);
        arg_i(&g, soh);
        arg_i(&g, Hq);
        arg_i(&g, ks[0]);
        arg_i(&g, ks[1]);
        arg_i(&g, ks[2]);
        arg_i(&g, vs[0]);
        arg_i(&g, vs[1]);
        arg_i(&g, vs[2]);
        arg_i(&g, sp->block_size);
        arg_i(&g, window);
        arg_i(&g, causal);
        arg_i(&g, softcap);
        arg_i(&g, sp->use_alibi != 0);
        arg_i(&g, sp->use_sinks != 0);
        arg_i(&g, a->lse != NULL);
        if (st->masked) arg_p(&g, st->d_mask);
        if (st->scale_tensors) arg_scales(&g, st, a->k_scale_tensor, a->v_scale_tensor);
        uint32_t block_q = e->block_m / (uint32_t)heads;
        unsigned gx = (st->grid_tokens + block_q - 1) / block_q + st->grid_reqs;
        return tk_go(ctx, e, st->masked ? st->k.f_masked : st->k.f_unified, &g, gx,
                     (unsigned)(Hq / heads), 1, cs, err);
    }

    const tk_entry *e1 = st->k.stage1, *e2 = st->k.reduce;
    arg_t(&g, a->q);
    arg_t(&g, a->key_cache);
    arg_t(&g, a->value_cache);
    arg_p(&g, st->d_mid_o);
    arg_p(&g, st->d_mid_lse);
    arg_t(&g, sp->use_alibi ? a->alibi_slopes : NULL);
    arg_p(&g, st->d_block_table);
    arg_p(&g, st->d_seq_lens);
    arg_p(&g, st->d_counts);
    arg_f(&g, sp->scale * k_scale);
    arg_f(&g, softcap ? sp->softcap : 1.0f);
    arg_i(&g, group);
    arg_i(&g, D);
    arg_i(&g, st->lim.max_blocks_per_req);
    arg_i(&g, sqt);
    arg_i(&g, sqh);
    arg_i(&g, ks[0]);
    arg_i(&g, ks[1]);
    arg_i(&g, ks[2]);
    arg_i(&g, vs[0]);
    arg_i(&g, vs[1]);
    arg_i(&g, vs[2]);
    arg_i(&g, sp->block_size);
    arg_i(&g, window);
    arg_i(&g, st->num_splits);
    arg_i(&g, ctx->cfg.split_tile);
    arg_i(&g, st->split_cap);
    arg_i(&g, Hq);
    arg_i(&g, softcap);
    arg_i(&g, sp->use_alibi != 0);
    /* stage 1 applies V's scale tensor to its partial outputs, so the
     * reduction's out_scale (v_scale) is 1 then */
    if (st->scale_tensors) arg_scales(&g, st, a->k_scale_tensor, a->v_scale_tensor);
    unsigned hb = (unsigned)(sp->num_kv_heads * ((group + e1->block_m - 1) / e1->block_m));
    if ((s = tk_go(ctx, e1, st->k.f_stage1, &g, st->grid_reqs, hb, (unsigned)st->num_splits, cs,
                   err)))
        return s;
    tk_args r = {0};
    arg_p(&r, st->d_mid_o);
    arg_p(&r, st->d_mid_lse);
    arg_t(&r, a->out);
    arg_t(&r, a->lse);
    arg_t(&r, sp->use_sinks ? a->sinks : NULL);
    arg_p(&r, st->d_counts);
    arg_f(&r, v_scale);
    arg_i(&r, D);
    arg_i(&r, st->num_splits);
    arg_i(&r, st->split_cap);
    arg_i(&r, sot);
    arg_i(&r, soh);
    arg_i(&r, Hq);
    arg_i(&r, sp->use_sinks != 0);
    arg_i(&r, a->lse != NULL);
    return tk_go(ctx, e2, st->k.f_reduce, &r, st->grid_reqs, (unsigned)Hq, 1, cs, err);
}

/* ---- write_kv ------------------------------------------------------------ */

ah_status tk_write_kv(ah_state *st, const ah_kv_write_args *a)
{
    ah_context *ctx = st->ctx;
    const ah_layer_spec *sp = &st->spec;
    ah_errbuf *err = &st->err;
    if (st->ragged)
        return ah_fail(err, AH_ERR_INVALID_ARGUMENT,
                       "write_kv on a ragged layer, which has no cache (its paged form's state "
                       "fills the cache)");
    const int64_t Hk = sp->num_kv_heads, D = sp->qk_head_size;
    ah_status s;
    int64_t ks[3], vs[3];
    if ((s = tk_rows(st, a->key, "key", sp->q_dtype, Hk, D)) ||
        (s = tk_rows(st, a->value, "value", sp->q_dtype, Hk, D)) ||
        (s = tk_cache(st, a->key_cache, "key_cache", ks)) ||
        (s = tk_cache(st, a->value_cache, "value_cache", vs)))
        return s;
    if (st->scale_tensors && (s = tk_scale_tensors(st, a->k_scale_tensor, a->v_scale_tensor)))
        return s;
    if ((s = tk_ctx_bind(ctx, err))) return s;
    const float k_scale = st->scale_tensors ? 1.0f : ah_kv_scale(a->k_scale, sp->kv_dtype);
    const float v_scale = st->scale_tensors ? 1.0f : ah_kv_scale(a->v_scale, sp->kv_dtype);
    const tk_entry *e = st->k.kv_write;
    tk_args g = {0};
    arg_t(&g, a->key);
    arg_t(&g, a->value);
    arg_t(&g, a->key_cache);
    arg_t(&g, a->value_cache);
    arg_p(&g, st->d_slots);
    arg_p(&g, st->d_counts);
    arg_f(&g, k_scale);
    arg_f(&g, v_scale);
    arg_i(&g, D);
    arg_i(&g, sp->block_size);
    arg_i(&g, ah_dl_stride(a->key, 0));
    arg_i(&g, ah_dl_stride(a->key, 1));
    arg_i(&g, ah_dl_stride(a->value, 0));
    arg_i(&g, ah_dl_stride(a->value, 1));
    arg_i(&g, ks[0]);
    arg_i(&g, ks[1]);
    arg_i(&g, ks[2]);
    arg_i(&g, vs[0]);
    arg_i(&g, vs[1]);
    arg_i(&g, vs[2]);
    if (st->scale_tensors) arg_scales(&g, st, a->k_scale_tensor, a->v_scale_tensor);
    return tk_go(ctx, e, st->k.f_kv_write, &g, st->grid_tokens, (unsigned)Hk, 1,
                 (CUstream)a->stream, err);
}

/* ---- merge_states ---------------------------------------------------------- */

ah_status tk_merge_states(ah_context *ctx, const ah_merge_args *a)
{
    ah_errbuf *err = &ctx->err;
    if (!a || a->struct_size < sizeof(ah_merge_args))
        return ah_fail(err, AH_ERR_ABI, "merge_states: args missing or from an older ABI");
    if (!a->v_a || !a->v_a->data)
        return ah_fail(err, AH_ERR_INVALID_ARGUMENT, "merge_states: v_a missing");
    if (a->v_a->ndim != 3)
        return ah_fail(err, AH_ERR_INVALID_ARGUMENT,
                       "merge_states: v_a has %d dims, want [T, H, D]", a->v_a->ndim);
    ah_dtype dt = ah_dl_dtype_is(a->v_a, AH_DTYPE_BF16)   ? AH_DTYPE_BF16
                  : ah_dl_dtype_is(a->v_a, AH_DTYPE_FP16) ? AH_DTYPE_FP16
                                                          : AH_DTYPE_AUTO;
    if (dt == AH_DTYPE_AUTO)
        return ah_fail(err, AH_ERR_UNSUPPORTED,
                       "merge_states: v_a dtype code %d bits %d, want fp16 or bf16",
                       a->v_a->dtype.code, a->v_a->dtype.bits);
    const int64_t T = a->v_a->shape[0], H = a->v_a->shape[1], D = a->v_a->shape[2];
    /* D: the v head sizes the caps claim; one program per (token, head) row
     * and the grid's limits bound T and H. */
    if (D < 16 || D > 256 || D % 16)
        return ah_fail(err, AH_ERR_UNSUPPORTED,
                       "merge_states: v_a head dim %lld, want a multiple of 16 up to 256",
                       (long long)D);
    if (T < 0 || T > INT_MAX || H < 0 || H > 65535)
        return ah_fail(
            err, AH_ERR_UNSUPPORTED,
            "merge_states: v_a is [%lld, %lld, %lld]: at most 2^31-1 tokens and 65535 heads",
            (long long)T, (long long)H, (long long)D);
    const ah_dl_want wv[3] = {{"merge_states: v_a", 3, {T, H, D}, 0, dt, 0, AH_KV_LAYOUT_AUTO},
                              {"merge_states: v_b", 3, {T, H, D}, 0, dt, 0, AH_KV_LAYOUT_AUTO},
                              {"merge_states: out", 3, {T, H, D}, 0, dt, 0, AH_KV_LAYOUT_AUTO}};
    /* dense: the kernel indexes the LSEs as t * H + h */
    const ah_dl_want wl[3] = {
        {"merge_states: lse_a", 2, {T, H}, 0, AH_DTYPE_FP32, 1, AH_KV_LAYOUT_AUTO},
        {"merge_states: lse_b", 2, {T, H}, 0, AH_DTYPE_FP32, 1, AH_KV_LAYOUT_AUTO},
        {"merge_states: lse_out", 2, {T, H}, 0, AH_DTYPE_FP32, 1, AH_KV_LAYOUT_AUTO}};
    ah_status s;
    /* LSEs need only float alignment (generate.py compiles their pointers
     * without the 16-byte hint): a rank's slice of an all-gathered LSE
     * buffer starts at k * T * H floats. */
    if ((s = tk_tensor_aligned(err, &wv[0], a->v_a, 16)) ||
        (s = tk_tensor_aligned(err, &wv[1], a->v_b, 16)) ||
        (s = tk_tensor_aligned(err, &wv[2], a->out, 16)) ||
        (s = tk_tensor_aligned(err, &wl[0], a->lse_a, 4)) ||
        (s = tk_tensor_aligned(err, &wl[1], a->lse_b, 4)))
        return s;
    if (a->lse_out && (s = tk_tensor_aligned(err, &wl[2], a->lse_out, 4))) return s;
    const tk_entry *e = tk_find(ctx, "merge_states", dt, dt, (uint32_t)D);
    if (!e)
        return ah_fail(err, AH_ERR_UNSUPPORTED, "no merge_states kernel for %s on %s",
                       ah_dtype_name(dt), ctx->arch);
    CUfunction f;
    if ((s = tk_function(ctx, e, tk_sig_merge, &f, err))) return s;
    if ((s = tk_ctx_bind(ctx, err))) return s;
    tk_args g = {0};
    arg_t(&g, a->v_a);
    arg_t(&g, a->lse_a);
    arg_t(&g, a->v_b);
    arg_t(&g, a->lse_b);
    arg_t(&g, a->out);
    arg_t(&g, a->lse_out);
    arg_i(&g, H);
    arg_i(&g, D);
    arg_i(&g, ah_dl_stride(a->v_a, 0));
    arg_i(&g, ah_dl_stride(a->v_a, 1));
    arg_i(&g, ah_dl_stride(a->v_b, 0));
    arg_i(&g, ah_dl_stride(a->v_b, 1));
    arg_i(&g, ah_dl_stride(a->out, 0));
    arg_i(&g, ah_dl_stride(a->out, 1));
    arg_i(&g, a->lse_out != NULL);
    return tk_go(ctx, e, f, &g, (unsigned)T, (unsigned)H, 1, (CUstream)a->stream, err);
}
