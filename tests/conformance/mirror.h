/*
 * A tensor on a plugin's device with a host mirror: what the conformance
 * suite, `attnhost run` and `attnhost bench` fill on the host, upload, hand
 * to a plugin and read back. Driven only through the public device API.
 *
 * A mirror owns its memory on both sides, or is a view into another
 * mirror's (the value cache of an interleaved KV-cache layout lies in the
 * key's allocation): a view owns nothing, so filling and copying the owner
 * covers it, and it must not outlive the owner.
 */
#ifndef AH_MIRROR_H
#define AH_MIRROR_H

#include <stddef.h>
#include <stdint.h>

#include <attnhost/attnhost.h>

typedef struct ah_mirror {
    DLTensor t; /* the device tensor; t.shape points at shape, t.strides at
                   strides for a strided tensor (else NULL: dense) */
    int64_t shape[6];
    int64_t strides[6];
    void *host;   /* the host side from t's first element; NULL: device only */
    size_t bytes; /* the memory owned on each side (a view: 0) */
    ah_device *dev;
    int view; /* lies in memory another mirror owns and frees */
} ah_mirror;

/* Allocate both sides (at least 1 byte each), dense. On failure writes why
 * into err and returns -1; ah_mirror_free is safe on a failed mirror. */
int ah_mirror_init(ah_mirror *m, ah_device *dev, DLDataType dt, int ndim, const int64_t *shape,
                   char *err, size_t cap);
/* A layer's key and value caches where ah_binding_kv_cache_desc says they
 * lie (kd and vd with struct_size covering ABI 2.3's fields): each tensor
 * with the desc's shape and strides at the start of an allocation of
 * alloc_shape, or, for a value with in_key_alloc (an interleaved layout),
 * the view offset elements into the key's allocation on both sides. So the
 * key's bytes (and the value's, when it owns any) are every element the
 * plugin and the oracle read. vd->ndim 0 (MLA) leaves value empty.
 * with_host 0 allocates no host side (a cache filled on the device). On
 * failure writes why into err and returns -1; ah_mirror_free is safe on
 * both then. */
int ah_mirror_kv_init(ah_mirror *key, ah_mirror *value, ah_device *dev, const ah_kv_cache_desc *kd,
                      const ah_kv_cache_desc *vd, int with_host, char *err, size_t cap);
/* Free what m owns (a view: nothing) and clear it. */
void ah_mirror_free(ah_mirror *m);
/* Copy the first bytes bytes (0: all it owns) host -> device or device ->
 * host. A view owns nothing: copy its owner. */
int ah_mirror_upload(ah_mirror *m, size_t bytes, char *err, size_t cap);
int ah_mirror_download(ah_mirror *m, size_t bytes, char *err, size_t cap);

#endif
