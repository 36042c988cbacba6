/*
 * Tests of the binding's tensor checks: a well-formed set of forward and
 * write_kv arguments passes in both layouts and for MLA; each defect (rank,
 * shape, dtype, device, alignment, packing, missing sinks/ALiBi, bad lse,
 * bad scales) fails with a message naming the tensor and the values. FP8
 * scales (ABI 2.3): each form the spec declares takes its own fields and
 * refuses the others; scale tensors are checked like any tensor, and their
 * values where the host can read them; args of ABI 2.2's size read the new
 * fields as zero. Interleaved cache layouts (ABI 2.3): the two views'
 * strides, block counts and the value view's address.
 */
#include <stdint.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "check.h"
#include "tensor_check.h"

static _Alignas(64) char arena[1 << 12]; /* never read: only addresses matter */

typedef struct tens {
    DLTensor t;
    int64_t shape[4], strides[4];
} tens;

static void tens_init(tens *x, int ndim, const int64_t *shape, ah_dtype dt, DLDevice dev)
{
    memset(x, 0, sizeof *x);
    memcpy(x->shape, shape, sizeof(int64_t) * (size_t)ndim);
    x->t.data = arena;
    x->t.device = dev;
    x->t.ndim = ndim;
    x->t.dtype = ah_dtype_to_dl(dt);
    x->t.shape = x->shape;
}

typedef struct fixture {
    ah_layer_spec spec;
    ah_batch batch;
    DLDevice dev;
    tens q, k, v, kc, vc, out, lse, sinks, alibi;
    ah_forward_args fa;
    ah_kv_write_args wa;
} fixture;

/* T = 5 tokens, Hq = 8, Hk = 2, qk 64, v 32, fp16 q, fp8 KV, 10 blocks of 16. */
static void fixture_init(fixture *f, ah_kv_layout layout)
{
    memset(f, 0, sizeof *f);
    f->dev = (DLDevice){kDLCUDA, 0};
    ah_layer_spec *s = &f->spec;
    s->struct_size = sizeof *s;
    s->num_q_heads = 8;
    s->num_kv_heads = 2;
    s->qk_head_size = 64;
    s->v_head_size = 32;
    s->q_dtype = AH_DTYPE_FP16;
    s->kv_dtype = AH_DTYPE_FP8_E4M3;
    s->block_size = 16;
    s->kv_layout = layout;
    s->use_sinks = 1;
    s->use_alibi = 1;
    f->batch.struct_size = sizeof f->batch;
    f->batch.num_tokens = 5;
    f->batch.num_blocks = 10;
    const int hnd = layout == AH_KV_LAYOUT_HND;
    tens_init(&f->q, 3, (int64_t[]){5, 8, 64}, AH_DTYPE_FP16, f->dev);
    tens_init(&f->k, 3, (int64_t[]){5, 2, 64}, AH_DTYPE_FP16, f->dev);
    tens_init(&f->v, 3, (int64_t[]){5, 2, 32}, AH_DTYPE_FP16, f->dev);
    tens_init(&f->kc, 4, hnd ? (int64_t[]){10, 2, 16, 64} : (int64_t[]){10, 16, 2, 64},
              AH_DTYPE_FP8_E4M3, f->dev);
    tens_init(&f->vc, 4, hnd ? (int64_t[]){10, 2, 16, 32} : (int64_t[]){10, 16, 2, 32},
              AH_DTYPE_FP8_E4M3, f->dev);
    tens_init(&f->out, 3, (int64_t[]){5, 8, 32}, AH_DTYPE_FP16, f->dev);
    tens_init(&f->lse, 2, (int64_t[]){5, 8}, AH_DTYPE_FP32, f->dev);
    tens_init(&f->sinks, 1, (int64_t[]){8}, AH_DTYPE_FP32, f->dev);
    tens_init(&f->alibi, 1, (int64_t[]){8}, AH_DTYPE_FP32, f->dev);
    f->fa = (ah_forward_args){.struct_size = sizeof f->fa,
                              .q = &f->q.t,
                              .key = &f->k.t,
                              .value = &f->v.t,
                              .key_cache = &f->kc.t,
                              .value_cache = &f->vc.t,
                              .out = &f->out.t,
                              .lse = &f->lse.t,
                              .sinks = &f->sinks.t,
                              .alibi_slopes = &f->alibi.t,
                              .k_scale = 0.5f,
                              .v_scale = 0,
                              .stream = NULL};
    f->wa = (ah_kv_write_args){.struct_size = sizeof f->wa,
                               .key = &f->k.t,
                               .value = &f->v.t,
                               .key_cache = &f->kc.t,
                               .value_cache = &f->vc.t,
                               .k_scale = 0,
                               .v_scale = 0,
                               .stream = NULL};
}

static ah_status fwd(fixture *f, char *msg)
{
    return ah__check_forward_args(&f->spec, &f->batch, &f->fa, &f->dev, msg, 256);
}

#define EXPECT_FWD_FAIL(f, text) \
    do { \
        char m_[256] = ""; \
        CHECK(fwd(f, m_) == AH_ERR_INVALID_ARGUMENT); \
        CHECK_CONTAINS(m_, text); \
    } while (0)

static void test_good(void)
{
    for (int l = AH_KV_LAYOUT_NHD; l <= AH_KV_LAYOUT_HND; l++) {
        fixture f;
        char m[256] = "";
        fixture_init(&f, (ah_kv_layout)l);
        CHECK_MSG(fwd(&f, m) == AH_OK, "layout %d: %s", l, m);
        CHECK_MSG(ah__check_kv_write_args(&f.spec, &f.batch, &f.wa, &f.dev, m, sizeof m) == AH_OK,
                  "%s", m);
        /* optional pieces: no new K/V, no lse, a plugin-filled out, a bigger cache,
         * q as a view with a token stride (last dim still contiguous) */
        f.fa.key = f.fa.value = NULL;
        f.fa.lse = NULL;
        f.out.t.data = NULL;
        f.kc.shape[0] = f.vc.shape[0] = 12;
        f.q.t.strides = f.q.strides;
        f.q.strides[0] = 8 * 64 * 3, f.q.strides[1] = 64, f.q.strides[2] = 1;
        CHECK_MSG(fwd(&f, m) == AH_OK, "optional pieces: %s", m);
    }
    /* MLA: value tensors are not read */
    fixture f;
    char m[256] = "";
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.spec.num_kv_heads = 1;
    f.spec.qk_head_size = 576;
    f.spec.v_head_size = 512;
    f.spec.use_mla = 1;
    f.k.shape[1] = 1, f.k.shape[2] = 576;
    f.kc.shape[2] = 1, f.kc.shape[3] = 576;
    f.q.shape[2] = 576;
    f.out.shape[2] = 512;
    f.fa.value = f.fa.value_cache = NULL;
    CHECK_MSG(fwd(&f, m) == AH_OK, "MLA: %s", m);
    f.wa = (ah_kv_write_args){.struct_size = sizeof f.wa,
                              .key = &f.k.t,
                              .value = NULL,
                              .key_cache = &f.kc.t,
                              .value_cache = NULL,
                              .k_scale = 0,
                              .v_scale = 0,
                              .stream = NULL};
    CHECK_MSG(ah__check_kv_write_args(&f.spec, &f.batch, &f.wa, &f.dev, m, sizeof m) == AH_OK, "%s",
              m);
}

static void test_defects(void)
{
    fixture f;
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.q.shape[2] = 128;
    EXPECT_FWD_FAIL(&f, "q: shape [5, 8, 128], expected [5, 8, 64]");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.q.t.ndim = 2;
    EXPECT_FWD_FAIL(&f, "q: 2 dims, expected 3 [5, 8, 64]");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.fa.q = NULL;
    EXPECT_FWD_FAIL(&f, "q is NULL");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.q.t.dtype = ah_dtype_to_dl(AH_DTYPE_BF16);
    EXPECT_FWD_FAIL(&f, "q: dtype bfloat16 (lanes 1), expected float16 for fp16");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.q.t.device = (DLDevice){kDLCPU, 0};
    EXPECT_FWD_FAIL(&f, "q: on cpu:0, expected cuda:0");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.q.t.byte_offset = 8;
    EXPECT_FWD_FAIL(&f, "is not 16-byte aligned");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.q.t.strides = f.q.strides;
    f.q.strides[0] = 8 * 64, f.q.strides[1] = 1, f.q.strides[2] = 8;
    EXPECT_FWD_FAIL(&f, "q: last dimension has stride 8, expected 1");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.v.shape[2] = 64;
    EXPECT_FWD_FAIL(&f, "value: shape [5, 2, 64], expected [5, 2, 32]");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.fa.value = NULL;
    EXPECT_FWD_FAIL(&f, "value is NULL");
    /* the cache must match the layout: an HND tensor under an NHD spec */
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.kc.shape[1] = 2, f.kc.shape[2] = 16;
    EXPECT_FWD_FAIL(&f, "key_cache: shape [10, 2, 16, 64], expected [>= 10, 16, 2, 64]");
    fixture_init(&f, AH_KV_LAYOUT_HND);
    f.vc.shape[0] = 9;
    EXPECT_FWD_FAIL(&f, "value_cache: shape [9, 2, 16, 32], expected [>= 10, 2, 16, 32]");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.kc.t.dtype = ah_dtype_to_dl(AH_DTYPE_FP16);
    EXPECT_FWD_FAIL(&f, "key_cache: dtype float16 (lanes 1), expected uint8 for fp8_e4m3");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.kc.t.strides = f.kc.strides; /* one half of a [2, blocks, ...] K/V tensor */
    f.kc.strides[0] = 2 * 16 * 2 * 64, f.kc.strides[1] = 128, f.kc.strides[2] = 64,
    f.kc.strides[3] = 1;
    EXPECT_FWD_FAIL(&f, "key_cache: strides [4096, 128, 64, 1], expected a densely packed tensor");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.out.shape[2] = 64;
    EXPECT_FWD_FAIL(&f, "out: shape [5, 8, 64], expected [5, 8, 32]");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.fa.out = NULL;
    EXPECT_FWD_FAIL(&f, "out is NULL");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.lse.t.dtype = ah_dtype_to_dl(AH_DTYPE_FP16);
    EXPECT_FWD_FAIL(&f, "lse: dtype float16");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.lse.shape[1] = 2;
    EXPECT_FWD_FAIL(&f, "lse: shape [5, 2], expected [5, 8]");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.fa.sinks = NULL;
    EXPECT_FWD_FAIL(&f, "sinks is NULL");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.alibi.shape[0] = 2;
    EXPECT_FWD_FAIL(&f, "alibi_slopes: shape [2], expected [8]");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.spec.use_alibi = 0; /* not used: not checked */
    f.fa.alibi_slopes = NULL;
    char m[256];
    CHECK(fwd(&f, m) == AH_OK);
    f.fa.k_scale = -1;
    EXPECT_FWD_FAIL(&f, "k_scale = -1 must be finite and >= 0");
    f.fa.k_scale = 0;
    f.fa.v_scale = NAN;
    EXPECT_FWD_FAIL(&f, "v_scale = nan");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.q.t.data = NULL;
    EXPECT_FWD_FAIL(&f, "q: data is NULL");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.fa.struct_size = 8;
    EXPECT_FWD_FAIL(&f, "struct_size 8");
    CHECK(ah__check_forward_args(&f.spec, &f.batch, NULL, &f.dev, m, sizeof m) ==
          AH_ERR_INVALID_ARGUMENT);
    /* write_kv */
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.k.shape[0] = 4;
    CHECK(ah__check_kv_write_args(&f.spec, &f.batch, &f.wa, &f.dev, m, sizeof m) ==
          AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(m, "key: shape [4, 2, 64], expected [5, 2, 64]");
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.wa.value_cache = NULL;
    CHECK(ah__check_kv_write_args(&f.spec, &f.batch, &f.wa, &f.dev, m, sizeof m) ==
          AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(m, "value_cache is NULL");
}

/* Interleaved layouts (ABI 2.3): K = cache[:, 0] and V = cache[:, 1] of
 * one [10, 2, 16, 2, 64] (NHD) or [10, 2, 2, 16, 64] (HND) fp8 tensor. */
static void interleaved_init(fixture *f, ah_kv_layout layout)
{
    fixture_init(f, layout == AH_KV_LAYOUT_NHD_INTERLEAVED ? AH_KV_LAYOUT_NHD : AH_KV_LAYOUT_HND);
    f->spec.kv_layout = layout;
    f->spec.v_head_size = 64;
    f->v.shape[2] = f->vc.shape[3] = f->out.shape[2] = 64;
    const int hnd = ah_kv_layout_is_hnd(layout);
    const int64_t s[4] = {2 * 16 * 2 * 64, hnd ? 16 * 64 : 2 * 64, 64, 1};
    memcpy(f->kc.strides, s, sizeof s);
    memcpy(f->vc.strides, s, sizeof s);
    f->kc.t.strides = f->kc.strides;
    f->vc.t.strides = f->vc.strides;
    f->vc.t.data = arena + 16 * 2 * 64; /* one byte per fp8 element */
}

static void test_interleaved(void)
{
    for (int l = AH_KV_LAYOUT_NHD_INTERLEAVED; l <= AH_KV_LAYOUT_HND_INTERLEAVED; l++) {
        fixture f;
        char m[256] = "";
        interleaved_init(&f, (ah_kv_layout)l);
        CHECK_MSG(fwd(&f, m) == AH_OK, "layout %d: %s", l, m);
        CHECK_MSG(ah__check_kv_write_args(&f.spec, &f.batch, &f.wa, &f.dev, m, sizeof m) == AH_OK,
                  "%s", m);
        /* the offset in byte_offset instead of data, as DLPack allows */
        f.vc.t.data = arena;
        f.vc.t.byte_offset = 16 * 2 * 64;
        CHECK_MSG(fwd(&f, m) == AH_OK, "byte_offset: %s", m);
    }
    fixture f;
    interleaved_init(&f, AH_KV_LAYOUT_NHD_INTERLEAVED);
    f.vc.t.data = arena; /* V read at K's address */
    EXPECT_FWD_FAIL(&f, "value_cache: address");
    EXPECT_FWD_FAIL(&f, "key_cache's + 2048 bytes: layout nhd_interleaved puts V = cache[:, 1] in "
                        "the key's [10, 2, 16, 2, 64] tensor");
    interleaved_init(&f, AH_KV_LAYOUT_NHD_INTERLEAVED);
    f.kc.t.strides = NULL; /* a dense key cache */
    EXPECT_FWD_FAIL(&f, "key_cache: strides NULL (dense), expected [4096, 128, 64, 1]: layout "
                        "nhd_interleaved hands over K = cache[:, 0] and V = cache[:, 1]");
    interleaved_init(&f, AH_KV_LAYOUT_HND_INTERLEAVED);
    f.vc.strides[1] = 128; /* NHD strides under HND */
    EXPECT_FWD_FAIL(&f, "value_cache: strides [4096, 128, 64, 1], expected [4096, 1024, 64, 1]");
    interleaved_init(&f, AH_KV_LAYOUT_NHD_INTERLEAVED);
    f.vc.shape[0] = 12;
    EXPECT_FWD_FAIL(&f, "value_cache: 12 blocks, key_cache 10");
    /* write_kv checks the same views */
    interleaved_init(&f, AH_KV_LAYOUT_NHD_INTERLEAVED);
    f.vc.t.data = arena;
    char m[256] = "";
    CHECK(ah__check_kv_write_args(&f.spec, &f.batch, &f.wa, &f.dev, m, sizeof m) ==
          AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(m, "value_cache: address");
}

/* The fixture on the CPU (a CPU plugin's device), where the host reads
 * scale values. */
static void fixture_on_cpu(fixture *f)
{
    f->dev = (DLDevice){kDLCPU, 0};
    tens *all[] = {&f->q, &f->k, &f->v, &f->kc, &f->vc, &f->out, &f->lse, &f->sinks, &f->alibi};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) all[i]->t.device = f->dev;
}

/* Scale tensors of a fixture: K and V [2] (or [1]) and the query's [1],
 * float32 on dev, over data the test owns. */
typedef struct scales {
    tens k, v, q;
    _Alignas(16) float kd[4], vd[4], qd[4];
} scales;

static void scales_init(scales *s, fixture *f, int64_t n)
{
    tens_init(&s->k, 1, &n, AH_DTYPE_FP32, f->dev);
    tens_init(&s->v, 1, &n, AH_DTYPE_FP32, f->dev);
    tens_init(&s->q, 1, (int64_t[]){1}, AH_DTYPE_FP32, f->dev);
    for (int i = 0; i < 4; i++)
        s->kd[i] = 0.01f * (float)(i + 1), s->vd[i] = 0.02f, s->qd[i] = 0.03f;
    s->k.t.data = s->kd, s->v.t.data = s->vd, s->q.t.data = s->qd;
    f->fa.k_scale = f->fa.v_scale = 0;
    f->fa.k_scale_tensor = f->wa.k_scale_tensor = &s->k.t;
    f->fa.v_scale_tensor = f->wa.v_scale_tensor = &s->v.t;
}

static void test_scales(void)
{
    fixture f;
    scales s;
    char m[256] = "";
    /* per tensor in device memory: the form is checked, the values are not */
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.spec.kv_scales = AH_KV_SCALES_TENSOR;
    scales_init(&s, &f, 1);
    s.kd[0] = -1; /* unread: device memory */
    CHECK_MSG(fwd(&f, m) == AH_OK, "%s", m);
    CHECK_MSG(ah__check_kv_write_args(&f.spec, &f.batch, &f.wa, &f.dev, m, sizeof m) == AH_OK, "%s",
              m);
    s.k.t.byte_offset = 4; /* a scalar inside a larger float32 tensor */
    CHECK_MSG(fwd(&f, m) == AH_OK, "%s", m);
    s.k.t.byte_offset = 2;
    EXPECT_FWD_FAIL(&f, "k_scale_tensor: data address");
    EXPECT_FWD_FAIL(&f, "is not 4-byte aligned");
    s.k.t.byte_offset = 0;
    s.v.shape[0] = 2;
    EXPECT_FWD_FAIL(&f, "v_scale_tensor: shape [2], expected [1]");
    s.v.shape[0] = 1;
    s.k.t.dtype = ah_dtype_to_dl(AH_DTYPE_FP16);
    EXPECT_FWD_FAIL(&f, "k_scale_tensor: dtype float16 (lanes 1), expected float32 for fp32");
    s.k.t.dtype = ah_dtype_to_dl(AH_DTYPE_FP32);
    s.k.t.device = (DLDevice){kDLCPU, 0};
    EXPECT_FWD_FAIL(&f, "k_scale_tensor: on cpu:0, expected cuda:0");
    s.k.t.device = f.dev;
    f.fa.k_scale = 0.5f; /* both forms */
    EXPECT_FWD_FAIL(&f, "k_scale = 0.5 is set and so is the tensor, but the layer's kv_scales = "
                        "tensor takes k_scale_tensor only");
    f.fa.k_scale_tensor = NULL;
    EXPECT_FWD_FAIL(&f, "k_scale = 0.5 is set, but the layer's kv_scales = tensor");
    f.fa.k_scale = 0;
    EXPECT_FWD_FAIL(&f, "k_scale_tensor is NULL: the layer's kv_scales = tensor takes the scale "
                        "as a float32 [1] tensor");
    f.wa.v_scale_tensor = NULL;
    CHECK(ah__check_kv_write_args(&f.spec, &f.batch, &f.wa, &f.dev, m, sizeof m) ==
          AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(m, "v_scale_tensor is NULL");

    /* per head in host memory: every value is read */
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    fixture_on_cpu(&f);
    f.spec.kv_scales = AH_KV_SCALES_PER_HEAD;
    scales_init(&s, &f, 2);
    CHECK_MSG(fwd(&f, m) == AH_OK, "%s", m);
    s.vd[1] = 0;
    EXPECT_FWD_FAIL(&f, "v_scale_tensor[1] = 0: a scale must be finite and > 0");
    s.vd[1] = INFINITY;
    EXPECT_FWD_FAIL(&f, "v_scale_tensor[1] = inf");
    s.vd[1] = 0.5f;
    s.k.shape[0] = 1; /* per tensor under a per-head spec */
    EXPECT_FWD_FAIL(&f, "k_scale_tensor: shape [1], expected [2]");
    s.k.shape[0] = 2;
    /* MLA takes no V scale: the tensor may be left out */
    f.spec.use_mla = 1;
    f.fa.v_scale_tensor = NULL;
    f.fa.value = f.fa.value_cache = NULL;
    CHECK_MSG(fwd(&f, m) == AH_OK, "mla: %s", m);
    f.spec.use_mla = 0;
    f.fa.v_scale_tensor = &s.v.t;
    f.fa.value = &f.v.t, f.fa.value_cache = &f.vc.t;

    /* host floats: no tensor */
    f.spec.kv_scales = AH_KV_SCALES_HOST;
    EXPECT_FWD_FAIL(&f, "k_scale_tensor is set, but the layer's kv_scales is host: pass k_scale "
                        "as a float");

    /* the query scale */
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    f.fa.q_scale = 0.1f;
    EXPECT_FWD_FAIL(&f, "q_scale is set, but the layer takes no query scale");
    f.spec.fp8_attention = f.spec.use_q_scale = 1;
    CHECK_MSG(fwd(&f, m) == AH_OK, "%s", m);
    f.fa.q_scale = 0;
    EXPECT_FWD_FAIL(&f, "q_scale = 0: the layer has q_scale = true and kv_scales = host");
    f.fa.q_scale = NAN;
    EXPECT_FWD_FAIL(&f, "q_scale = nan");
    f.spec.kv_scales = AH_KV_SCALES_TENSOR;
    scales_init(&s, &f, 1);
    f.fa.q_scale = 0;
    EXPECT_FWD_FAIL(&f, "q_scale_tensor is NULL: the layer's kv_scales = tensor");
    f.fa.q_scale_tensor = &s.q.t;
    CHECK_MSG(fwd(&f, m) == AH_OK, "%s", m);
    f.fa.q_scale = 0.25f;
    EXPECT_FWD_FAIL(&f, "q_scale = 0.25 is set and so is the tensor");
    f.fa.q_scale = 0;
    f.spec.use_q_scale = 0;
    EXPECT_FWD_FAIL(&f, "q_scale_tensor is set, but the layer takes no query scale");

    /* an engine built against ABI 2.2: the new fields read as zero */
    fixture_init(&f, AH_KV_LAYOUT_NHD);
    ah_forward_args old = f.fa, full;
    old.struct_size = (uint32_t)AH__FORWARD_ARGS_MIN;
    old.k_scale_tensor = &f.q.t; /* past its struct_size: never read */
    CHECK(ah__forward_args_full(&old, &full) == 1);
    CHECK(full.struct_size == sizeof full && full.k_scale_tensor == NULL && full.q_scale == 0);
    CHECK(full.k_scale == 0.5f && full.q == f.fa.q);
    CHECK_MSG(ah__check_forward_args(&f.spec, &f.batch, &full, &f.dev, m, sizeof m) == AH_OK, "%s",
              m);
    old.struct_size = (uint32_t)AH__FORWARD_ARGS_MIN - 1;
    CHECK(ah__forward_args_full(&old, &full) == 0);
    ah_kv_write_args wold = f.wa, wfull;
    wold.struct_size = (uint32_t)AH__KV_WRITE_ARGS_MIN;
    CHECK(ah__kv_write_args_full(&wold, &wfull) == 1 && wfull.k_scale_tensor == NULL);
}

int main(void)
{
    test_good();
    test_defects();
    test_interleaved();
    test_scales();
    return check_report("test_tensor_check");
}
