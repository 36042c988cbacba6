/*
 * Fuzz target: the FP8 scale checks of forward and write_kv
 * (ah__check_scales, ABI 2.3) over scales built from the fuzzer's bytes.
 *
 * The bytes give the layer's scale form (kv_scales, use_q_scale, MLA, KV
 * heads), whether the call carries a query scale (forward) or not
 * (write_kv), the binding's device, the three floats (any bit pattern:
 * NaN, infinities, negatives, zero) and for each of K, V and the query an
 * optional tensor: rank, length, dtype, device, byte offset, strides and
 * values. Each tensor's data is allocated at exactly the length its shape
 * claims, so AddressSanitizer flags any read past it.
 *
 * The property beyond "no crash": when the check accepts, an independent
 * check (written here, not shared with the core) confirms what the header
 * promises plugins: the form the spec declares and no other, tensors of
 * float32 [1] or [Hk] on the binding's device, dense and 4-byte aligned,
 * host-readable values finite and > 0, floats finite and >= 0 (a query
 * float > 0 where it is the scale). A refusal is AH_ERR_INVALID_ARGUMENT
 * with a message.
 */
#include <math.h>

#include "fuzz_common.h"

#include "tensor_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SCALES_MAX_LEN 12u

typedef struct ftensor {
    DLTensor t;
    int64_t shape[2], strides[2];
    void *mem; /* the allocation data points into */
} ftensor;

static float scales_float(fz *f)
{
    uint32_t u = fz_u32(f);
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static const DLDevice scale_devices[4] = {
    {kDLCPU, 0}, {kDLCUDA, 0}, {kDLCUDA, 1}, {kDLCUDAHost, 0}};

/* A tensor from the bytes, or NULL when the first byte says none. */
static const DLTensor *scales_tensor(fz *f, ftensor *x)
{
    const uint8_t how = fz_u8(f);
    if (!(how & 1)) return NULL;
    memset(x, 0, sizeof *x);
    x->t.ndim = ((how >> 1) & 3) % 3; /* 0, 1 or 2 dims */
    x->t.shape = x->shape;
    int64_t n = 1;
    for (int i = 0; i < x->t.ndim; i++) {
        x->shape[i] = fz_u8(f) % SCALES_MAX_LEN;
        n *= x->shape[i];
    }
    const uint8_t dt = fz_u8(f);
    x->t.dtype =
        (DLDataType){(uint8_t)(dt & 3), (uint8_t)(dt & 4 ? 16 : 32), (uint16_t)(dt & 8 ? 2 : 1)};
    if (!(dt & 16)) x->t.dtype = (DLDataType){kDLFloat, 32, 1};
    x->t.device = scale_devices[(how >> 3) & 3];
    x->t.byte_offset = (how >> 5) & 7;
    if (fz_u8(f) & 1) { /* explicit strides, dense or not */
        x->t.strides = x->strides;
        for (int i = 0; i < x->t.ndim; i++) x->strides[i] = fz_u8(f) % 3;
    }
    const size_t elems = n > 0 ? (size_t)n : 0;
    const size_t bytes = x->t.byte_offset + elems * sizeof(float);
    x->mem = malloc(bytes ? bytes : 1);
    if (!x->mem) abort();
    for (size_t i = 0; i < elems; i++) {
        float v = scales_float(f);
        memcpy((char *)x->mem + x->t.byte_offset + i * sizeof v, &v, sizeof v);
    }
    /* data NULL now and then; the offset stays in byte_offset */
    x->t.data = (fz_u8(f) & 7) == 7 ? NULL : x->mem;
    return &x->t;
}

static int scales_same_device(const DLTensor *t, const DLDevice *d)
{
    return (int)t->device.device_type == (int)d->device_type && t->device.device_id == d->device_id;
}

/* One accepted scale tensor as the header promises it. */
static void scales_tensor_ok(const char *what, const DLTensor *t, int64_t n, const DLDevice *dev)
{
    FZ_ASSERT(t->ndim == 1 && t->shape[0] == n, "%s: %d dims, length %lld, wanted [%lld]", what,
              t->ndim, t->ndim ? (long long)t->shape[0] : -1LL, (long long)n);
    FZ_ASSERT(t->dtype.code == kDLFloat && t->dtype.bits == 32 && t->dtype.lanes == 1,
              "%s: dtype %u/%u/%u", what, t->dtype.code, t->dtype.bits, t->dtype.lanes);
    FZ_ASSERT(scales_same_device(t, dev), "%s: on device %d:%d", what, (int)t->device.device_type,
              t->device.device_id);
    FZ_ASSERT(t->data, "%s: data NULL", what);
    FZ_ASSERT(((uintptr_t)t->data + t->byte_offset) % 4 == 0, "%s: misaligned", what);
    FZ_ASSERT(!t->strides || n <= 1 || t->strides[0] == 1, "%s: stride %lld", what,
              t->strides ? (long long)t->strides[0] : 0LL);
    if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost) return;
    const float *x = (const float *)((const char *)t->data + t->byte_offset);
    for (int64_t i = 0; i < n; i++)
        FZ_ASSERT(x[i] > 0 && isfinite(x[i]), "%s[%lld] = %g accepted", what, (long long)i,
                  (double)x[i]);
}

static void scales_accepted(const ah_layer_spec *s, const ah__scales *sc, const DLDevice *dev)
{
    const ah_kv_scales form = ah_spec_kv_scales(s);
    FZ_ASSERT(sc->k >= 0 && isfinite(sc->k) && sc->v >= 0 && isfinite(sc->v),
              "floats k %g v %g accepted", (double)sc->k, (double)sc->v);
    if (form == AH_KV_SCALES_HOST) {
        FZ_ASSERT(!sc->kt && !sc->vt, "a tensor accepted under kv_scales = host");
    } else {
        const int64_t n = form == AH_KV_SCALES_PER_HEAD ? (int64_t)s->num_kv_heads : 1;
        FZ_ASSERT(sc->k == 0 && sc->v == 0, "floats k %g v %g beside tensors", (double)sc->k,
                  (double)sc->v);
        FZ_ASSERT(sc->kt, "k_scale_tensor NULL accepted");
        FZ_ASSERT(sc->vt || s->use_mla, "v_scale_tensor NULL accepted without MLA");
        scales_tensor_ok("k_scale_tensor", sc->kt, n, dev);
        if (sc->vt) scales_tensor_ok("v_scale_tensor", sc->vt, n, dev);
    }
    if (!sc->has_q) return;
    if (!ah_spec_q_scale(s)) {
        FZ_ASSERT(sc->q == 0 && !sc->qt, "a query scale accepted on a layer without one");
    } else if (form == AH_KV_SCALES_HOST) {
        FZ_ASSERT(sc->q > 0 && isfinite(sc->q) && !sc->qt, "query float %g accepted",
                  (double)sc->q);
    } else {
        FZ_ASSERT(sc->q == 0 && sc->qt, "query float %g / tensor %p accepted", (double)sc->q,
                  (const void *)sc->qt);
        scales_tensor_ok("q_scale_tensor", sc->qt, 1, dev);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f = {data, size, 0};
    const uint8_t mode = fz_u8(&f);
    ah_layer_spec s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.kv_dtype = AH_DTYPE_FP8_E4M3;
    s.kv_scales = (uint32_t)((mode & 3) % 3);
    s.use_q_scale = (mode >> 2) & 1;
    s.use_mla = (mode >> 3) & 1;
    s.num_kv_heads = s.use_mla ? 1 : 1 + fz_u8(&f) % 8;
    s.num_q_heads = s.num_kv_heads * 2;
    const DLDevice dev = scale_devices[(mode >> 4) & 3];
    ah__scales sc = {0};
    sc.has_q = (mode >> 6) & 1;
    sc.k = scales_float(&f);
    sc.v = scales_float(&f);
    sc.q = scales_float(&f);
    ftensor kt, vt, qt;
    memset(&kt, 0, sizeof kt), memset(&vt, 0, sizeof vt), memset(&qt, 0, sizeof qt);
    sc.kt = scales_tensor(&f, &kt);
    sc.vt = scales_tensor(&f, &vt);
    sc.qt = scales_tensor(&f, &qt);
    char err[512] = "";
    const ah_status st = ah__check_scales(&s, &sc, &dev, err, sizeof err);
    if (st == AH_OK) scales_accepted(&s, &sc, &dev);
    else
        FZ_ASSERT(st == AH_ERR_INVALID_ARGUMENT && err[0], "status %d, message '%s'", (int)st, err);
    free(kt.mem), free(vt.mem), free(qt.mem);
    return 0;
}
