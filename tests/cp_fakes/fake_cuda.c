/*
 * A fake CUDA driver (tests only), built as libcuda.so.1 in a directory of
 * its own that the test's LD_LIBRARY_PATH names: "device" and pinned
 * memory are host memory, copies are memcpy, and a stream is a
 * fake_cu_stream the test can keep busy for ever (fake_cp.h).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cp.h"

static int live; /* allocations not freed */
static int ctx_depth;

int fake_cuda_live(void) { return live; }
int fake_cuda_ctx_depth(void) { return ctx_depth; }

int cuInit(unsigned flags) { return flags ? 1 : 0; }
int cuDeviceGet(int *dev, int ordinal)
{
    *dev = ordinal;
    return ordinal < 0 || ordinal > 7 ? 101 : 0; /* CUDA_ERROR_INVALID_DEVICE */
}
int cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
    static char ctxs[8];
    *ctx = &ctxs[dev];
    return 0;
}
int cuDevicePrimaryCtxRelease_v2(int dev) { return dev < 0 ? 101 : 0; }
int cuCtxPushCurrent_v2(void *ctx)
{
    ctx_depth++;
    return ctx ? 0 : 201;
}
int cuCtxPopCurrent_v2(void **ctx)
{
    ctx_depth--;
    *ctx = NULL;
    return 0;
}
/* Every live allocation stays reachable from here: the transport leaves
 * its buffers allocated on purpose after a time-out (a stalled collective
 * may still write them), which a leak checker must not call a leak. */
static void *held[256];

static void *hold(size_t bytes)
{
    void *m = malloc(bytes);
    for (int i = 0; m && i < 256; i++)
        if (!held[i]) {
            held[i] = m;
            live++;
            return m;
        }
    free(m);
    return NULL;
}
static void release(void *m)
{
    for (int i = 0; i < 256; i++)
        if (held[i] == m) held[i] = NULL;
    free(m);
    live--;
}
int cuMemAlloc_v2(unsigned long long *p, size_t bytes)
{
    void *m = hold(bytes);
    if (!m) return 2;
    *p = (unsigned long long)(uintptr_t)m;
    return 0;
}
int cuMemFree_v2(unsigned long long p)
{
    release((void *)(uintptr_t)p);
    return 0;
}
int cuMemAllocHost_v2(void **p, size_t bytes)
{
    *p = hold(bytes);
    return *p ? 0 : 2;
}
int cuMemFreeHost(void *p)
{
    release(p);
    return 0;
}
int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t bytes, void *stream)
{
    (void)stream;
    memcpy((void *)(uintptr_t)dst, src, bytes);
    return 0;
}
int cuMemcpyDtoHAsync_v2(void *dst, unsigned long long src, size_t bytes, void *stream)
{
    (void)stream;
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return 0;
}
int cuStreamQuery(const fake_cu_stream *s) { return s && s->busy ? 600 : 0; }
int cuGetErrorString(int r, const char **s)
{
    *s = r == 600 ? "device not ready" : "fake CUDA error";
    return 0;
}
