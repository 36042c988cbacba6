/*
 * Device tensors with host mirrors (mirror.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mirror.h"

int ah_mirror_init(ah_mirror *m, ah_device *dev, DLDataType dt, int ndim, const int64_t *shape,
                   char *err, size_t cap)
{
    memset(m, 0, sizeof *m);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        m->shape[i] = shape[i];
        n *= (size_t)shape[i];
    }
    m->bytes = n * (dt.bits / 8u);
    m->dev = dev;
    m->host = calloc(1, m->bytes ? m->bytes : 1);
    if (!m->host) {
        snprintf(err, cap, "out of host memory (%zu bytes)", m->bytes);
        return -1;
    }
    void *p = NULL;
    if (ah_device_alloc(dev, m->bytes ? m->bytes : 1, &p) != AH_OK) {
        snprintf(err, cap, "device allocation of %zu bytes: %s", m->bytes, ah_device_errmsg(dev));
        return -1;
    }
    m->t.data = p;
    m->t.device = ah_device_dl(dev);
    m->t.ndim = ndim;
    m->t.dtype = dt;
    m->t.shape = m->shape;
    return 0;
}

void ah_mirror_free(ah_mirror *m)
{
    if (m->dev && m->t.data) ah_device_free(m->dev, m->t.data);
    free(m->host);
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
