/*
 * A tensor on a plugin's device with a host mirror: what the conformance
 * suite, `attnhost run` and `attnhost bench` fill on the host, upload, hand
 * to a plugin and read back. Driven only through the public device API.
 */
#ifndef AH_MIRROR_H
#define AH_MIRROR_H

#include <stddef.h>
#include <stdint.h>

#include <attnhost/attnhost.h>

typedef struct ah_mirror {
    DLTensor t; /* the device tensor; t.shape points at shape */
    int64_t shape[4];
    void *host; /* the mirror, calloc'ed, bytes long */
    size_t bytes;
    ah_device *dev;
} ah_mirror;

/* Allocate both sides (at least 1 byte each). On failure writes why into
 * err and returns -1; ah_mirror_free is safe on a failed mirror. */
int ah_mirror_init(ah_mirror *m, ah_device *dev, DLDataType dt, int ndim, const int64_t *shape,
                   char *err, size_t cap);
void ah_mirror_free(ah_mirror *m);
/* Copy the first bytes bytes (0: all) host -> device or device -> host. */
int ah_mirror_upload(ah_mirror *m, size_t bytes, char *err, size_t cap);
int ah_mirror_download(ah_mirror *m, size_t bytes, char *err, size_t cap);

#endif
