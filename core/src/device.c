/*
 * ah_device: memory, copies, streams, timers and graphs of one plugin's
 * device, so the CLI, the conformance suite and engines drive any backend
 * the same way. Where a plugin offers no memory slots (a CPU plugin), host
 * memory and the wall clock stand in.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "device_int.h"

struct ah_device {
    ah_host *host;
    int slot;
    ah_device_kind kind;
    int32_t index; /* the device index among those of its kind */
    const ah_plugin_ops *ops;
    ah_context *ctx;
    void *stream;
    struct timespec t0;
    char err[512];
};

static int host_memory(const ah_device *d) { return d->ops->mem_alloc == NULL; }

/* Record the plugin's context error in d and pass the status through. */
static ah_status fail(ah_device *d, ah_status s, const char *what)
{
    snprintf(d->err, sizeof d->err, "%s: %s", what,
             d->ops->context_error ? d->ops->context_error(d->ctx) : ah_status_str(s));
    return s;
}

ah_status ah__device_open(ah_host *h, int slot, ah_context *ctx, int32_t device_index,
                          ah_device **out, ah_error *err)
{
    *out = NULL;
    ah_device *d = ah__calloc(1, sizeof *d);
    if (!d) {
        snprintf(err->msg, sizeof err->msg, "out of memory while opening a device");
        return AH_ERR_OUT_OF_MEMORY;
    }
    d->host = h;
    d->slot = slot;
    d->kind = h->scan.plugins[slot]->info.device_kind;
    d->ops = &h->slots[slot].lp->ops;
    d->ctx = ctx;
    d->index = d->kind == AH_DEVICE_CPU ? 0 : device_index;
    if (!host_memory(d) && d->ops->stream_create) {
        ah_status s = d->ops->stream_create(d->ctx, &d->stream);
        if (s != AH_OK) {
            snprintf(err->msg, sizeof err->msg, "%s: creating a stream failed: %s",
                     h->scan.plugins[slot]->info.name, d->ops->context_error(d->ctx));
            ah__free(d);
            return s;
        }
    }
    *out = d;
    return AH_OK;
}

void ah__device_close(ah_device *d)
{
    if (!d) return;
    if (d->stream && d->ops->stream_destroy) d->ops->stream_destroy(d->ctx, d->stream);
    ah__free(d);
}

int ah__device_slot(const ah_device *d) { return d->slot; }
ah_context *ah__device_context(const ah_device *d) { return d->ctx; }
ah_device_kind ah_device_kind_of(const ah_device *d) { return d->kind; }
const char *ah_device_errmsg(const ah_device *d) { return d->err; }
void *ah_device_stream(ah_device *d) { return d->stream; }

DLDevice ah_device_dl(const ah_device *d)
{
    static const DLDeviceType types[AH_DEVICE_KIND_COUNT] = {kDLCPU, kDLCUDA, kDLROCM, kDLExtDev};
    DLDevice dev = {types[d->kind], d->index};
    return dev;
}

ah_status ah_device_alloc(ah_device *d, size_t bytes, void **ptr)
{
    *ptr = NULL;
    if (host_memory(d)) {
        /* 64-byte aligned, rounded up so aligned_alloc accepts the size */
        size_t rounded = (bytes + 63) & ~(size_t)63;
        *ptr = aligned_alloc(64, rounded ? rounded : 64);
        if (!*ptr) {
            snprintf(d->err, sizeof d->err, "out of host memory allocating %zu bytes", bytes);
            return AH_ERR_OUT_OF_MEMORY;
        }
        return AH_OK;
    }
    ah_status s = d->ops->mem_alloc(d->ctx, bytes, ptr);
    return s == AH_OK ? s : fail(d, s, "device allocation");
}

void ah_device_free(ah_device *d, void *ptr)
{
    if (!ptr) return;
    if (host_memory(d)) free(ptr);
    else d->ops->mem_free(d->ctx, ptr);
}

ah_status ah_device_copy(ah_device *d, void *dst, const void *src, size_t bytes, ah_copy_kind kind)
{
    if (host_memory(d)) {
        memmove(dst, src, bytes);
        return AH_OK;
    }
    ah_status s = d->ops->mem_copy(d->ctx, dst, src, bytes, kind, d->stream);
    /* Complete on return either way: the caller may launch on any stream. */
    if (s == AH_OK && kind != AH_COPY_DEVICE_TO_DEVICE && d->ops->synchronize)
        s = d->ops->synchronize(d->ctx, d->stream);
    return s == AH_OK ? s : fail(d, s, "device copy");
}

ah_status ah_device_sync(ah_device *d)
{
    if (host_memory(d) || !d->ops->synchronize) return AH_OK;
    ah_status s = d->ops->synchronize(d->ctx, d->stream);
    return s == AH_OK ? s : fail(d, s, "synchronize");
}

static int has_device_timer(const ah_device *d)
{
    return !host_memory(d) && d->ops->timer_start && d->ops->timer_stop;
}

ah_status ah_device_timer_start(ah_device *d)
{
    if (has_device_timer(d)) {
        ah_status s = d->ops->timer_start(d->ctx, d->stream);
        return s == AH_OK ? s : fail(d, s, "timer start");
    }
    ah_status s = ah_device_sync(d);
    clock_gettime(CLOCK_MONOTONIC, &d->t0);
    return s;
}

ah_status ah_device_timer_stop(ah_device *d, float *ms)
{
    if (has_device_timer(d)) {
        ah_status s = d->ops->timer_stop(d->ctx, d->stream, ms);
        return s == AH_OK ? s : fail(d, s, "timer stop");
    }
    ah_status s = ah_device_sync(d);
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *ms = (float)((t1.tv_sec - d->t0.tv_sec) * 1e3 + (t1.tv_nsec - d->t0.tv_nsec) * 1e-6);
    return s;
}

int ah_device_has_graphs(const ah_device *d)
{
    return d->ops->graph_begin && d->ops->graph_end && d->ops->graph_launch &&
           d->ops->graph_destroy;
}

static ah_status no_graphs(ah_device *d)
{
    snprintf(d->err, sizeof d->err, "%s has no graph support",
             d->host->scan.plugins[d->slot]->info.name);
    return AH_ERR_UNSUPPORTED;
}

ah_status ah_device_graph_begin(ah_device *d)
{
    if (!ah_device_has_graphs(d)) return no_graphs(d);
    ah_status s = d->ops->graph_begin(d->ctx, d->stream);
    return s == AH_OK ? s : fail(d, s, "graph capture begin");
}

ah_status ah_device_graph_end(ah_device *d, ah_graph **g)
{
    *g = NULL;
    if (!ah_device_has_graphs(d)) return no_graphs(d);
    ah_status s = d->ops->graph_end(d->ctx, d->stream, g);
    return s == AH_OK ? s : fail(d, s, "graph capture end");
}

ah_status ah_device_graph_launch(ah_device *d, ah_graph *g)
{
    if (!ah_device_has_graphs(d)) return no_graphs(d);
    ah_status s = d->ops->graph_launch(d->ctx, g, d->stream);
    return s == AH_OK ? s : fail(d, s, "graph launch");
}

void ah_device_graph_destroy(ah_device *d, ah_graph *g)
{
    if (g && ah_device_has_graphs(d)) d->ops->graph_destroy(d->ctx, g);
}
