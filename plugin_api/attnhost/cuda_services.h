/*
 * CUDA runtime implementations of the device slots of ah_plugin_ops
 * (memory, copies, streams, event timers, stream-capture graphs) and of the
 * probe, shared by every CUDA plugin. Header-only; include it from .cu files
 * (or C++ compiled against the CUDA runtime) only.
 *
 * A plugin embeds an ah_cuda_svc in its ah_context and forwards its slots to
 * the ah_cuda_* functions here; AH_CUDA_DEFINE_DEVICE_OPS writes those
 * forwarding functions, AH_CUDA_DEVICE_OPS lists them in slot order:
 *
 *   struct ah_context { ah_cuda_svc svc; ... };
 *   #define MY_SVC(ctx) (&(ctx)->svc)
 *   AH_CUDA_DEFINE_DEVICE_OPS(my, MY_SVC)
 *   static const ah_plugin_ops ops = { sizeof ops, probe, ..., workspace_size,
 *                                      AH_CUDA_DEVICE_OPS(my) };
 *
 * The probe loads libcuda.so.1 itself before touching the runtime, so a plugin
 * linked against the static runtime (CUDA::cudart_static) loads and explains
 * itself on a machine with no GPU or no driver.
 *
 * Thread safety: plugin.h lets the host call a context's device slots from
 * several threads at once (bindings on one device share the context); the
 * staging slots of mem_copy are taken under a lock. The timer keeps one
 * pair of events per context, so timers on one context do not nest.
 */
#ifndef ATTNHOST_CUDA_SERVICES_H
#define ATTNHOST_CUDA_SERVICES_H

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "plugin.h"
#include "plugin_util.h"

/* Page-locked staging for small host-to-device copies (see
 * ah_cuda_mem_copy): slots of AH_CUDA_STAGE_SLOT_BYTES, used round-robin. */
#define AH_CUDA_STAGE_SLOTS 16
#define AH_CUDA_STAGE_SLOT_BYTES ((size_t)64 << 10)

/* The per-context state the helpers need. Zero it, then ah_cuda_svc_init. */
typedef struct ah_cuda_svc {
    int device;
    int initialised;
    cudaEvent_t timer_begin, timer_end;
    int timer_running;
    pthread_mutex_t stage_lock;                  /* guards the four fields below */
    unsigned char *stage;                        /* the slots, allocated on first use */
    cudaEvent_t stage_done[AH_CUDA_STAGE_SLOTS]; /* recorded after each slot's copy */
    unsigned stage_next;
    int stage_unavailable; /* page-locked memory refused: copy synchronously */
    ah_errbuf err;         /* the context's last error; context_error returns err.msg */
} ah_cuda_svc;

/* What graph_end hands out. Plugins using these helpers must not define
 * struct ah_graph themselves. */
struct ah_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

/* Map a runtime error to the ABI's status. */
static inline ah_status ah_cuda_status(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return AH_OK;
    case cudaErrorMemoryAllocation: return AH_ERR_OUT_OF_MEMORY;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle: return AH_ERR_INVALID_ARGUMENT;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver: return AH_ERR_UNAVAILABLE;
    default: return AH_ERR_DEVICE;
    }
}

/* Evaluate a runtime call; on failure write "<call>: <runtime message>" into
 * the errbuf ERRP and return the mapped status from the enclosing function.
 * The sticky error is cleared with cudaGetLastError so the next call starts
 * clean where the failure was not fatal to the context. */
#define AH_CUDA_TRY(ERRP, CALL) \
    do { \
        cudaError_t ah_cuda_e_ = (CALL); \
        if (ah_cuda_e_ != cudaSuccess) { \
            (void)cudaGetLastError(); \
            return ah_fail((ERRP), ah_cuda_status(ah_cuda_e_), "%s: %s (%s:%d)", #CALL, \
                           cudaGetErrorString(ah_cuda_e_), __FILE__, __LINE__); \
        } \
    } while (0)

/* Check the launch just made (kernel<<<...>>>): bad configurations surface
 * here, asynchronous faults at the next synchronising call. */
#define AH_CUDA_CHECK_LAUNCH(ERRP) AH_CUDA_TRY((ERRP), cudaPeekAtLastError())

/* ---- probe ---------------------------------------------------------------- */

/* Is a CUDA device of at least min_cc (major*10+minor) usable here? Fills
 * the fields of *info that its struct_size covers; returns AH_OK whether or
 * not the device is usable (info->usable and info->reason say), an error
 * only when info itself is unusable. Describes device 0, counts all. */
static inline ah_status ah_cuda_probe(ah_probe_info *info, uint32_t min_cc)
{
    if (!info || info->struct_size < offsetof(ah_probe_info, device_name)) return AH_ERR_ABI;
#define AH_PROBE_HAS(f) AH_HAS_FIELD(info, ah_probe_info, f)
    info->usable = 0;
    dlerror();
    void *libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!libcuda) {
        const char *why = dlerror();
        snprintf(info->reason, sizeof info->reason, "libcuda.so.1 not found: %s",
                 why ? why : "(no dlerror)");
        return AH_OK;
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0)) {
        (void)cudaGetLastError();
        ah_strlcpy(info->reason, "no CUDA device", sizeof info->reason);
        dlclose(libcuda);
        return AH_OK;
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(info->reason, sizeof info->reason, "CUDA runtime: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        dlclose(libcuda);
        return AH_OK;
    }
    struct cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, 0);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(info->reason, sizeof info->reason, "cudaGetDeviceProperties: %s",
                 cudaGetErrorString(e));
        dlclose(libcuda);
        return AH_OK;
    }
    uint32_t cc = (uint32_t)(prop.major * 10 + prop.minor);
    ah_strlcpy(info->device_name, prop.name, sizeof info->device_name);
    if (AH_PROBE_HAS(arch)) snprintf(info->arch, sizeof info->arch, "sm_%u", cc);
    if (AH_PROBE_HAS(compute_capability)) info->compute_capability = cc;
    if (AH_PROBE_HAS(device_count)) info->device_count = (uint32_t)count;
    if (AH_PROBE_HAS(multiprocessors)) info->multiprocessors = (uint32_t)prop.multiProcessorCount;
    if (AH_PROBE_HAS(memory_bytes)) info->memory_bytes = (uint64_t)prop.totalGlobalMem;
    if (AH_PROBE_HAS(driver_version)) {
        int drv = 0, rt = 0;
        cudaDriverGetVersion(&drv);
        cudaRuntimeGetVersion(&rt);
        snprintf(info->driver_version, sizeof info->driver_version, "driver %d.%d, runtime %d.%d",
                 drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    }
    if (min_cc && cc < min_cc) {
        snprintf(info->reason, sizeof info->reason, "compute capability %u.%u < %u.%u", cc / 10,
                 cc % 10, min_cc / 10, min_cc % 10);
    } else {
        info->usable = 1;
        info->reason[0] = '\0';
    }
    dlclose(libcuda); /* the runtime holds its own reference */
    return AH_OK;
#undef AH_PROBE_HAS
}

/* ---- context -------------------------------------------------------------- */

/* Open device `device` and create the timer events. On failure *why is
 * static text and nothing needs releasing. */
static inline ah_status ah_cuda_svc_init(ah_cuda_svc *s, int device, const char **why)
{
    memset(s, 0, sizeof *s);
    s->device = device;
    void *libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!libcuda) {
        if (why) *why = "libcuda.so.1 not found";
        return AH_ERR_UNAVAILABLE;
    }
    dlclose(libcuda);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device) {
        (void)cudaGetLastError();
        if (why) *why = "no CUDA device";
        return AH_ERR_UNAVAILABLE;
    }
    if (cudaSetDevice(device) != cudaSuccess || cudaFree(0) != cudaSuccess) {
        (void)cudaGetLastError();
        if (why) *why = "cannot initialise the CUDA device";
        return AH_ERR_DEVICE;
    }
    if (cudaEventCreate(&s->timer_begin) != cudaSuccess) {
        (void)cudaGetLastError();
        if (why) *why = "cudaEventCreate failed";
        return AH_ERR_DEVICE;
    }
    if (cudaEventCreate(&s->timer_end) != cudaSuccess) {
        (void)cudaGetLastError();
        cudaEventDestroy(s->timer_begin);
        if (why) *why = "cudaEventCreate failed";
        return AH_ERR_DEVICE;
    }
    pthread_mutex_init(&s->stage_lock, NULL);
    s->initialised = 1;
    return AH_OK;
}

static inline void ah_cuda_svc_fini(ah_cuda_svc *s)
{
    if (!s->initialised) return;
    cudaEventDestroy(s->timer_begin);
    cudaEventDestroy(s->timer_end);
    if (s->stage) {
        for (unsigned i = 0; i < AH_CUDA_STAGE_SLOTS; i++) cudaEventDestroy(s->stage_done[i]);
        cudaFreeHost(s->stage);
        s->stage = NULL;
    }
    pthread_mutex_destroy(&s->stage_lock);
    s->initialised = 0;
}

/* ---- memory, copies, streams --------------------------------------------- */

static inline ah_status ah_cuda_mem_alloc(ah_cuda_svc *s, size_t bytes, void **ptr)
{
    if (!ptr) return ah_fail(&s->err, AH_ERR_INVALID_ARGUMENT, "mem_alloc: ptr is NULL");
    *ptr = NULL;
    AH_CUDA_TRY(&s->err, cudaSetDevice(s->device));
    AH_CUDA_TRY(&s->err, cudaMalloc(ptr, bytes ? bytes : 1));
    return AH_OK;
}

static inline void ah_cuda_mem_free(ah_cuda_svc *s, void *ptr)
{
    (void)s;
    if (ptr) cudaFree(ptr);
}

/* A host-to-device copy of at most one slot, queued from page-locked
 * staging: the source is copied into the next slot, so the caller may reuse
 * it at once, and the device copy runs in stream order without the host
 * waiting for the stream (a split step's query_start_loc, a context-parallel
 * step's tables: plan must not stall the engine's pipeline). A slot is
 * reused once the copy queued from it has run. *staged = 0 leaves the copy
 * to the synchronous path: no page-locked memory, or a stream being captured
 * (a graph would keep reading a slot that later copies overwrite). */
static inline ah_status ah_cuda_stage_copy_locked(ah_cuda_svc *s, void *dst, const void *src,
                                                  size_t bytes, cudaStream_t st, int *staged)
{
    *staged = 0;
    if (s->stage_unavailable) return AH_OK;
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    AH_CUDA_TRY(&s->err, cudaStreamIsCapturing(st, &cap));
    if (cap != cudaStreamCaptureStatusNone) return AH_OK;
    if (!s->stage) {
        AH_CUDA_TRY(&s->err, cudaSetDevice(s->device));
        if (cudaHostAlloc((void **)&s->stage, AH_CUDA_STAGE_SLOTS * AH_CUDA_STAGE_SLOT_BYTES,
                          cudaHostAllocDefault) != cudaSuccess) {
            (void)cudaGetLastError();
            s->stage = NULL;
            s->stage_unavailable = 1;
            return AH_OK;
        }
        for (unsigned i = 0; i < AH_CUDA_STAGE_SLOTS; i++) {
            cudaError_t e = cudaEventCreateWithFlags(&s->stage_done[i], cudaEventDisableTiming);
            if (e != cudaSuccess) {
                while (i--) cudaEventDestroy(s->stage_done[i]);
                cudaFreeHost(s->stage);
                s->stage = NULL;
                AH_CUDA_TRY(&s->err, e);
            }
        }
    }
    const unsigned i = s->stage_next;
    s->stage_next = (i + 1) % AH_CUDA_STAGE_SLOTS;
    unsigned char *slot = s->stage + (size_t)i * AH_CUDA_STAGE_SLOT_BYTES;
    AH_CUDA_TRY(&s->err, cudaEventSynchronize(s->stage_done[i]));
    memcpy(slot, src, bytes);
    AH_CUDA_TRY(&s->err, cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, st));
    AH_CUDA_TRY(&s->err, cudaEventRecord(s->stage_done[i], st));
    *staged = 1;
    return AH_OK;
}

/* The same under the context's staging lock (see the top: contexts are
 * shared between threads). */
static inline ah_status ah_cuda_stage_copy(ah_cuda_svc *s, void *dst, const void *src, size_t bytes,
                                           cudaStream_t st, int *staged)
{
    pthread_mutex_lock(&s->stage_lock);
    ah_status r = ah_cuda_stage_copy_locked(s, dst, src, bytes, st, staged);
    pthread_mutex_unlock(&s->stage_lock);
    return r;
}

static inline ah_status ah_cuda_mem_copy(ah_cuda_svc *s, void *dst, const void *src, size_t bytes,
                                         ah_copy_kind kind, void *stream)
{
    static const enum cudaMemcpyKind kinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                                cudaMemcpyDeviceToDevice};
    if ((unsigned)kind > AH_COPY_DEVICE_TO_DEVICE)
        return ah_fail(&s->err, AH_ERR_INVALID_ARGUMENT, "mem_copy: unknown copy kind %d",
                       (int)kind);
    if (!bytes) return AH_OK;
    if (!dst || !src) return ah_fail(&s->err, AH_ERR_INVALID_ARGUMENT, "mem_copy: NULL pointer");
    cudaStream_t st = (cudaStream_t)stream;
    if (kind == AH_COPY_HOST_TO_DEVICE && bytes <= AH_CUDA_STAGE_SLOT_BYTES) {
        int staged = 0;
        ah_status r = ah_cuda_stage_copy(s, dst, src, bytes, st, &staged);
        if (r != AH_OK || staged) return r;
    }
    AH_CUDA_TRY(&s->err, cudaMemcpyAsync(dst, src, bytes, kinds[kind], st));
    /* Host memory is pageable in general: the caller may reuse it at once. */
    if (kind != AH_COPY_DEVICE_TO_DEVICE) AH_CUDA_TRY(&s->err, cudaStreamSynchronize(st));
    return AH_OK;
}

static inline ah_status ah_cuda_synchronize(ah_cuda_svc *s, void *stream)
{
    if (stream) AH_CUDA_TRY(&s->err, cudaStreamSynchronize((cudaStream_t)stream));
    else AH_CUDA_TRY(&s->err, cudaDeviceSynchronize());
    return AH_OK;
}

static inline ah_status ah_cuda_stream_create(ah_cuda_svc *s, void **stream)
{
    cudaStream_t st = NULL;
    *stream = NULL;
    AH_CUDA_TRY(&s->err, cudaSetDevice(s->device));
    AH_CUDA_TRY(&s->err, cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    *stream = st;
    return AH_OK;
}

static inline void ah_cuda_stream_destroy(ah_cuda_svc *s, void *stream)
{
    (void)s;
    if (stream) cudaStreamDestroy((cudaStream_t)stream);
}

/* ---- events --------------------------------------------------------------- */

/* An ah_event is a cudaEvent_t (timing off: only ordering). */
static inline ah_status ah_cuda_event_create(ah_cuda_svc *s, ah_event **out)
{
    cudaEvent_t e = NULL;
    *out = NULL;
    AH_CUDA_TRY(&s->err, cudaSetDevice(s->device));
    AH_CUDA_TRY(&s->err, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *out = (ah_event *)e;
    return AH_OK;
}

static inline void ah_cuda_event_destroy(ah_cuda_svc *s, ah_event *e)
{
    (void)s;
    if (e) cudaEventDestroy((cudaEvent_t)e);
}

static inline ah_status ah_cuda_event_record(ah_cuda_svc *s, ah_event *e, void *stream)
{
    AH_CUDA_TRY(&s->err, cudaEventRecord((cudaEvent_t)e, (cudaStream_t)stream));
    return AH_OK;
}

static inline ah_status ah_cuda_stream_wait(ah_cuda_svc *s, void *stream, ah_event *e)
{
    AH_CUDA_TRY(&s->err, cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)e, 0));
    return AH_OK;
}

/* ---- timers ----------------------------------------------------------------- */

static inline ah_status ah_cuda_timer_start(ah_cuda_svc *s, void *stream)
{
    AH_CUDA_TRY(&s->err, cudaEventRecord(s->timer_begin, (cudaStream_t)stream));
    s->timer_running = 1;
    return AH_OK;
}

/* Waits for the end event: the elapsed time is what the device spent. */
static inline ah_status ah_cuda_timer_stop(ah_cuda_svc *s, void *stream, float *ms)
{
    if (!s->timer_running)
        return ah_fail(&s->err, AH_ERR_INVALID_ARGUMENT, "timer_stop without timer_start");
    s->timer_running = 0;
    AH_CUDA_TRY(&s->err, cudaEventRecord(s->timer_end, (cudaStream_t)stream));
    AH_CUDA_TRY(&s->err, cudaEventSynchronize(s->timer_end));
    AH_CUDA_TRY(&s->err, cudaEventElapsedTime(ms, s->timer_begin, s->timer_end));
    return AH_OK;
}

/* ---- graphs --------------------------------------------------------------- */

/* Begin capturing stream. Thread-local mode: other threads may keep using
 * the runtime while this one captures. The legacy default stream cannot be
 * captured, so stream must not be NULL. */
static inline ah_status ah_cuda_graph_begin(ah_cuda_svc *s, void *stream)
{
    if (!stream)
        return ah_fail(&s->err, AH_ERR_INVALID_ARGUMENT,
                       "graph_begin: the default stream cannot be captured; pass a stream");
    AH_CUDA_TRY(&s->err,
                cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeThreadLocal));
    return AH_OK;
}

static inline ah_status ah_cuda_graph_end(ah_cuda_svc *s, void *stream, ah_graph **out)
{
    *out = NULL;
    cudaGraph_t graph = NULL;
    AH_CUDA_TRY(&s->err, cudaStreamEndCapture((cudaStream_t)stream, &graph));
    ah_graph *g = (ah_graph *)calloc(1, sizeof *g);
    if (!g) {
        cudaGraphDestroy(graph);
        return ah_fail(&s->err, AH_ERR_OUT_OF_MEMORY, "graph_end: out of host memory");
    }
    g->graph = graph;
    cudaError_t e = cudaGraphInstantiate(&g->exec, graph, 0);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cudaGraphDestroy(graph);
        free(g);
        return ah_fail(&s->err, ah_cuda_status(e), "cudaGraphInstantiate: %s",
                       cudaGetErrorString(e));
    }
    *out = g;
    return AH_OK;
}

static inline ah_status ah_cuda_graph_launch(ah_cuda_svc *s, ah_graph *g, void *stream)
{
    if (!g) return ah_fail(&s->err, AH_ERR_INVALID_ARGUMENT, "graph_launch: graph is NULL");
    AH_CUDA_TRY(&s->err, cudaGraphLaunch(g->exec, (cudaStream_t)stream));
    return AH_OK;
}

static inline void ah_cuda_graph_destroy(ah_cuda_svc *s, ah_graph *g)
{
    (void)s;
    if (!g) return;
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    free(g);
}

/* ---- forwarding slots --------------------------------------------------- */

/* Define PREFIX##_mem_alloc ... PREFIX##_graph_destroy, each taking the
 * plugin's ah_context and calling the helper on SVC(ctx). */
#define AH_CUDA_DEFINE_DEVICE_OPS(PREFIX, SVC) \
    static ah_status PREFIX##_mem_alloc(ah_context *c, size_t n, void **p) \
    { \
        return ah_cuda_mem_alloc(SVC(c), n, p); \
    } \
    static void PREFIX##_mem_free(ah_context *c, void *p) { ah_cuda_mem_free(SVC(c), p); } \
    static ah_status PREFIX##_mem_copy(ah_context *c, void *d, const void *s, size_t n, \
                                       ah_copy_kind k, void *st) \
    { \
        return ah_cuda_mem_copy(SVC(c), d, s, n, k, st); \
    } \
    static ah_status PREFIX##_synchronize(ah_context *c, void *st) \
    { \
        return ah_cuda_synchronize(SVC(c), st); \
    } \
    static ah_status PREFIX##_stream_create(ah_context *c, void **st) \
    { \
        return ah_cuda_stream_create(SVC(c), st); \
    } \
    static void PREFIX##_stream_destroy(ah_context *c, void *st) \
    { \
        ah_cuda_stream_destroy(SVC(c), st); \
    } \
    static ah_status PREFIX##_timer_start(ah_context *c, void *st) \
    { \
        return ah_cuda_timer_start(SVC(c), st); \
    } \
    static ah_status PREFIX##_timer_stop(ah_context *c, void *st, float *ms) \
    { \
        return ah_cuda_timer_stop(SVC(c), st, ms); \
    } \
    static ah_status PREFIX##_graph_begin(ah_context *c, void *st) \
    { \
        return ah_cuda_graph_begin(SVC(c), st); \
    } \
    static ah_status PREFIX##_graph_end(ah_context *c, void *st, ah_graph **g) \
    { \
        return ah_cuda_graph_end(SVC(c), st, g); \
    } \
    static ah_status PREFIX##_graph_launch(ah_context *c, ah_graph *g, void *st) \
    { \
        return ah_cuda_graph_launch(SVC(c), g, st); \
    } \
    static void PREFIX##_graph_destroy(ah_context *c, ah_graph *g) \
    { \
        ah_cuda_graph_destroy(SVC(c), g); \
    } \
    static ah_status PREFIX##_event_create(ah_context *c, ah_event **e) \
    { \
        return ah_cuda_event_create(SVC(c), e); \
    } \
    static void PREFIX##_event_destroy(ah_context *c, ah_event *e) \
    { \
        ah_cuda_event_destroy(SVC(c), e); \
    } \
    static ah_status PREFIX##_event_record(ah_context *c, ah_event *e, void *st) \
    { \
        return ah_cuda_event_record(SVC(c), e, st); \
    } \
    static ah_status PREFIX##_stream_wait(ah_context *c, void *st, ah_event *e) \
    { \
        return ah_cuda_stream_wait(SVC(c), st, e); \
    }

/* The sixteen device slots of ah_plugin_ops, in order (after
 * workspace_size): memory, streams, timers, graphs, events. */
#define AH_CUDA_DEVICE_OPS(PREFIX) \
    PREFIX##_mem_alloc, PREFIX##_mem_free, PREFIX##_mem_copy, PREFIX##_synchronize, \
        PREFIX##_stream_create, PREFIX##_stream_destroy, PREFIX##_timer_start, \
        PREFIX##_timer_stop, PREFIX##_graph_begin, PREFIX##_graph_end, PREFIX##_graph_launch, \
        PREFIX##_graph_destroy, PREFIX##_event_create, PREFIX##_event_destroy, \
        PREFIX##_event_record, PREFIX##_stream_wait

#endif /* ATTNHOST_CUDA_SERVICES_H */
