/*
 * Device tensors with host mirrors (mirror.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mirror.h"

/* bytes (at least 1) on the device and, with with_host, zeroed on the host. */
static int alloc_sides(ah_mirror *m, ah_device *dev, size_t bytes, int with_host, char *err,
                       size_t cap)
{
    m->bytes = bytes;
    m->dev = dev;
    if (with_host && !(m->host = calloc(1, bytes ? bytes : 1))) {
        snprintf(err, cap, "out of host memory (%zu bytes)", bytes);
        return -1;
    }
    void *p = NULL;
    if (ah_device_alloc(dev, bytes ? bytes : 1, &p) != AH_OK) {
        snprintf(err, cap, "device allocation of %zu bytes: %s", bytes, ah_device_errmsg(dev));
        return -1;
    }
    m->t.data = p;
    return 0;
}

/* m's tensor: dt, ndim dims of shape, strides when given (NULL: dense). */
static void set_tensor(ah_mirror *m, DLDataType dt, int ndim, const int64_t *shape,
                       const int64_t *strides)
{
    for (int i = 0; i < ndim; i++) {
        m->shape[i] = shape[i];
        if (strides) m->strides[i] = strides[i];
    }
    m->t.device = ah_device_dl(m->dev);
    m->t.ndim = ndim;
    m->t.dtype = dt;
    m->t.shape = m->shape;
    m->t.strides = strides ? m->strides : NULL;
}

int ah_mirror_init(ah_mirror *m, ah_device *dev, DLDataType dt, int ndim, const int64_t *shape,
                   char *err, size_t cap)
{
    memset(m, 0, sizeof *m);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    if (alloc_sides(m, dev, n * (dt.bits / 8u), 1, err, cap)) return -1;
    set_tensor(m, dt, ndim, shape, NULL);
    return 0;
}

/* One cache tensor of d in an allocation of its own, at its start. */
static int kv_alloc(ah_mirror *m, ah_device *dev, const ah_kv_cache_desc *d, int with_host,
                    char *err, size_t cap)
{
    if (d->alloc_ndim <= 0 || d->alloc_ndim > 6 || d->ndim > 6) {
        snprintf(err, cap,
                 "kv_cache_desc: a %d-dim tensor in a %d-dim allocation (a desc of ABI 2.3's "
                 "size gives both)",
                 d->ndim, d->alloc_ndim);
        return -1;
    }
    size_t n = 1;
    for (int i = 0; i < d->alloc_ndim; i++) n *= (size_t)d->alloc_shape[i];
    const size_t esz = d->dl_dtype.bits / 8u * d->dl_dtype.lanes;
    if (alloc_sides(m, dev, n * esz, with_host, err, cap)) return -1;
    set_tensor(m, d->dl_dtype, d->ndim, d->shape, d->strides);
    return 0;
}

int ah_mirror_kv_init(ah_mirror *key, ah_mirror *value, ah_device *dev, const ah_kv_cache_desc *kd,
                      const ah_kv_cache_desc *vd, int with_host, char *err, size_t cap)
{
    memset(key, 0, sizeof *key);
    memset(value, 0, sizeof *value);
    if (kv_alloc(key, dev, kd, with_host, err, cap)) return -1;
    if (!vd->ndim) return 0;
    if (!vd->in_key_alloc) return kv_alloc(value, dev, vd, with_host, err, cap);
    const size_t at = (size_t)vd->offset * (vd->dl_dtype.bits / 8u * vd->dl_dtype.lanes);
    if (at >= key->bytes) {
        snprintf(err, cap, "kv_cache_desc: the value's offset %lld is outside the key's %zu bytes",
                 (long long)vd->offset, key->bytes);
        return -1;
    }
    /* the address in data, as PyTorch's DLPack export of cache[:, 1] puts it */
    value->dev = dev;
    value->view = 1;
    value->t.data = (char *)key->t.data + at;
    value->host = key->host ? (char *)key->host + at : NULL;
    set_tensor(value, vd->dl_dtype, vd->ndim, vd->shape, vd->strides);
    return 0;
}

void ah_mirror_free(ah_mirror *m)
{
    if (!m->view) {
        if (m->dev && m->t.data) ah_device_free(m->dev, m->t.data);
        free(m->host);
    }
    memset(m, 0, sizeof *m);
}

static int copy(ah_mirror *m, size_t bytes, int up, char *err, size_t cap)
{
    if (!bytes) bytes = m->bytes;
    if (!bytes) return 0;
    ah_status s = up ? ah_device_copy(m->dev, m->t.data, m->host, bytes, AH_COPY_HOST_TO_DEVICE)
                     : ah_device_copy(m->dev, m->host, m->t.data, bytes, AH_COPY_DEVICE_TO_HOST);
    if (s == AH_OK) return 0;
    snprintf(err, cap, "copy to %s: %s", up ? "device" : "host", ah_device_errmsg(m->dev));
    return -1;
}

int ah_mirror_upload(ah_mirror *m, size_t bytes, char *err, size_t cap)
{
    return copy(m, bytes, 1, err, cap);
}

int ah_mirror_download(ah_mirror *m, size_t bytes, char *err, size_t cap)
{
    return copy(m, bytes, 0, err, cap);
}
