/*
 * The Level Zero runtime behind xpu_rt: libze_loader.so.1 opened with
 * dlopen; devices are the GPU devices of every driver, in driver order.
 * zeInit failing (no driver, or Intel's driver without a GPU: 0x78000001)
 * ends discovery there: zeDriverGet after a failed zeInit is not safe.
 * Modules come from the embedded SPIR-V; memory is USM device memory; a
 * stream is an immediate command list, kept in order by a barrier after
 * every command and drained through an event; timers are global
 * timestamps written into host USM.
 *
 * Written against the 1.4 headers Debian ships (libze-dev 1.8); never run
 * on an Intel GPU here (none was available).
 */
#include <dlfcn.h>
#include <level_zero/ze_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xpu.h"

#define ZE_FNS(X) \
    X(zeInit) \
    X(zeDriverGet) \
    X(zeDeviceGet) \
    X(zeDeviceGetProperties) \
    X(zeDeviceGetMemoryProperties) \
    X(zeDeviceGetComputeProperties) \
    X(zeDriverGetProperties) \
    X(zeContextCreate) \
    X(zeContextDestroy) \
    X(zeCommandListCreateImmediate) \
    X(zeCommandListDestroy) \
    X(zeModuleCreate) \
    X(zeModuleDestroy) \
    X(zeModuleBuildLogGetString) \
    X(zeModuleBuildLogDestroy) \
    X(zeKernelCreate) \
    X(zeKernelDestroy) \
    X(zeKernelSetGroupSize) \
    X(zeKernelSetArgumentValue) \
    X(zeCommandListAppendLaunchKernel) \
    X(zeMemAllocDevice) \
    X(zeMemAllocHost) \
    X(zeMemFree) \
    X(zeCommandListAppendMemoryCopy) \
    X(zeCommandListAppendBarrier) \
    X(zeEventPoolCreate) \
    X(zeEventPoolDestroy) \
    X(zeEventCreate) \
    X(zeEventDestroy) \
    X(zeEventHostSynchronize) \
    X(zeEventHostReset) \
    X(zeCommandListAppendWriteGlobalTimestamp) \
    X(zeCommandListCreate) \
    X(zeCommandListClose) \
    X(zeCommandQueueCreate) \
    X(zeCommandQueueDestroy) \
    X(zeCommandQueueExecuteCommandLists) \
    X(zeFenceCreate) \
    X(zeFenceDestroy) \
    X(zeFenceHostSynchronize) \
    X(zeFenceReset)

static struct {
#define X(f) __typeof__(&f) f;
    ZE_FNS(X)
#undef X
    void *lib;
    ze_result_t init;
    char why[160];
} ze;
static pthread_once_t ze_once = PTHREAD_ONCE_INIT;

static void ze_load(void)
{
    void *lib = dlopen("libze_loader.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(ze.why, sizeof ze.why, "libze_loader.so.1 not found");
        return;
    }
#define X(f) \
    if (!(*(void **)&ze.f = dlsym(lib, #f))) { \
        snprintf(ze.why, sizeof ze.why, "libze_loader.so.1 lacks %s", #f); \
        return; \
    }
    ZE_FNS(X)
#undef X
    ze.init = ze.zeInit(ZE_INIT_FLAG_GPU_ONLY);
    if (ze.init != ZE_RESULT_SUCCESS) {
        snprintf(ze.why, sizeof ze.why, "no Level Zero driver or device (zeInit: %#x)",
                 (unsigned)ze.init);
        return;
    }
    ze.lib = lib;
}

static ah_status ze_ready(char *err, size_t cap)
{
    pthread_once(&ze_once, ze_load);
    if (ze.lib) return AH_OK;
    snprintf(err, cap, "%s", ze.why);
    return AH_ERR_UNAVAILABLE;
}

/* GPU device index among every driver's devices. */
static ah_status ze_find(int index, ze_driver_handle_t *drv, ze_device_handle_t *dev,
                         uint32_t *count, char *err, size_t cap)
{
    uint32_t nd = 0;
    if (ze.zeDriverGet(&nd, NULL) != ZE_RESULT_SUCCESS || nd == 0) {
        snprintf(err, cap, "no Level Zero driver");
        return AH_ERR_UNAVAILABLE;
    }
    ze_driver_handle_t ds[8];
    if (nd > 8) nd = 8;
    ze.zeDriverGet(&nd, ds);
    uint32_t n = 0;
    int found = 0;
    for (uint32_t i = 0; i < nd; i++) {
        uint32_t nv = 0;
        if (ze.zeDeviceGet(ds[i], &nv, NULL) != ZE_RESULT_SUCCESS) continue;
        ze_device_handle_t vs[32];
        if (nv > 32) nv = 32;
        ze.zeDeviceGet(ds[i], &nv, vs);
        for (uint32_t j = 0; j < nv; j++) {
            ze_device_properties_t p = {.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES};
            if (ze.zeDeviceGetProperties(vs[j], &p) != ZE_RESULT_SUCCESS ||
                p.type != ZE_DEVICE_TYPE_GPU)
                continue;
            if ((int)n == index) *drv = ds[i], *dev = vs[j], found = 1;
            n++;
        }
    }
    *count = n;
    return found ? AH_OK : xpu_no_device(err, cap, "Level Zero GPU", index, n);
}

/* Level Zero lists no OpenCL extensions: the matrix engines are known by
 * device ID, the GPUs whose dpas the Intel tier's xmx modules were
 * compiled for (ocloc: pvc with sub-groups of 16, acm-g10 with 8). */
static int has_xmx(uint32_t id)
{
    return (id >= 0x0bd0 && id <= 0x0bdb) || id == 0x0b69 || id == 0x0b6e || /* Max (PVC) */
           (id >= 0x5690 && id <= 0x56c2) || (id >= 0x4f80 && id <= 0x4f88); /* Arc, Flex (DG2) */
}

static ah_status ze_discover(int index, xpu_devinfo *info, char *err, size_t cap)
{
    memset(info, 0, sizeof *info);
    ah_status s = ze_ready(err, cap);
    if (s != AH_OK) return s;
    ze_driver_handle_t drv;
    ze_device_handle_t dev;
    if ((s = ze_find(index, &drv, &dev, &info->count, err, cap)) != AH_OK) return s;
    ze_device_properties_t p = {.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES};
    ze.zeDeviceGetProperties(dev, &p);
    ah_strlcpy(info->name, p.name, sizeof info->name);
    info->is_gpu = 1;
    info->compute_units = p.numSlices * p.numSubslicesPerSlice * p.numEUsPerSubslice;
    uint32_t nm = 0;
    ze.zeDeviceGetMemoryProperties(dev, &nm, NULL);
    ze_device_memory_properties_t mp[4];
    if (nm > 4) nm = 4;
    for (uint32_t i = 0; i < nm; i++)
        mp[i] =
            (ze_device_memory_properties_t){.stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES};
    ze.zeDeviceGetMemoryProperties(dev, &nm, mp);
    for (uint32_t i = 0; i < nm; i++) info->memory += mp[i].totalSize;
    ze_driver_properties_t dp = {.stype = ZE_STRUCTURE_TYPE_DRIVER_PROPERTIES};
    ze.zeDriverGetProperties(drv, &dp);
    snprintf(info->driver, sizeof info->driver, "Level Zero driver %u", dp.driverVersion);
    ze_device_compute_properties_t cp = {.stype = ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES};
    if (ze.zeDeviceGetComputeProperties(dev, &cp) == ZE_RESULT_SUCCESS)
        for (uint32_t i = 0; i < cp.numSubGroupSizes && i < ZE_SUBGROUPSIZE_COUNT; i++)
            if (cp.subGroupSizes[i] == 8 || cp.subGroupSizes[i] == 16)
                info->sg_sizes |= cp.subGroupSizes[i];
    info->xmx = info->sg_sizes && has_xmx(p.deviceId);
    return AH_OK;
}

typedef struct ze_stream {
    ze_command_list_handle_t list;
    ze_command_list_handle_t rec; /* a regular list recording a graph, or NULL */
    ze_event_pool_handle_t pool;
    ze_event_handle_t done;
    uint64_t *ts; /* host USM: two global timestamps */
} ze_stream;

struct xpu_dev {
    ze_driver_handle_t drv;
    ze_device_handle_t dev;
    ze_context_handle_t ctx;
    ze_module_handle_t mod[XPU_N_MODULES + 1];
    ze_kernel_handle_t k[XPU_K_COUNT];
    ze_stream *def; /* the NULL stream */
    double ns_per_tick;
    uint64_t ts_mask;
    pthread_mutex_t mu; /* kernel arguments and every append */
};

static void stream_free(xpu_dev *d, ze_stream *s)
{
    if (!s) return;
    if (s->ts) ze.zeMemFree(d->ctx, s->ts);
    if (s->done) ze.zeEventDestroy(s->done);
    if (s->pool) ze.zeEventPoolDestroy(s->pool);
    if (s->list) ze.zeCommandListDestroy(s->list);
    if (s->rec) ze.zeCommandListDestroy(s->rec);
    free(s);
}

static ah_status stream_new(xpu_dev *d, ze_stream **out, char *err, size_t cap)
{
    ze_stream *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s) {
        snprintf(err, cap, "out of memory");
        return AH_ERR_OUT_OF_MEMORY;
    }
    ze_command_queue_desc_t qd = {.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
                                  .mode = ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
                                  .priority = ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
    ze_event_pool_desc_t pd = {.stype = ZE_STRUCTURE_TYPE_EVENT_POOL_DESC,
                               .flags = ZE_EVENT_POOL_FLAG_HOST_VISIBLE,
                               .count = 1};
    ze_event_desc_t ed = {.stype = ZE_STRUCTURE_TYPE_EVENT_DESC,
                          .index = 0,
                          .signal = ZE_EVENT_SCOPE_FLAG_HOST,
                          .wait = ZE_EVENT_SCOPE_FLAG_HOST};
    ze_host_mem_alloc_desc_t hd = {.stype = ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC};
    ze_result_t r = ze.zeCommandListCreateImmediate(d->ctx, d->dev, &qd, &s->list);
    if (r == ZE_RESULT_SUCCESS) r = ze.zeEventPoolCreate(d->ctx, &pd, 1, &d->dev, &s->pool);
    if (r == ZE_RESULT_SUCCESS) r = ze.zeEventCreate(s->pool, &ed, &s->done);
    if (r == ZE_RESULT_SUCCESS)
        r = ze.zeMemAllocHost(d->ctx, &hd, 2 * sizeof(uint64_t), 8, (void **)&s->ts);
    if (r != ZE_RESULT_SUCCESS) {
        stream_free(d, s);
        snprintf(err, cap, "creating an immediate command list failed (%#x)", (unsigned)r);
        return AH_ERR_DEVICE;
    }
    *out = s;
    return AH_OK;
}

static void ze_close(xpu_dev *d)
{
    if (!d) return;
    stream_free(d, d->def);
    for (int i = 0; i < XPU_K_COUNT; i++)
        if (d->k[i]) ze.zeKernelDestroy(d->k[i]);
    for (int i = 0; i < XPU_N_MODULES + 1; i++)
        if (d->mod[i]) ze.zeModuleDestroy(d->mod[i]);
    if (d->ctx) ze.zeContextDestroy(d->ctx);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

static ah_status ze_open(int index, xpu_kernels kern, xpu_dev **out, char *err, size_t cap)
{
    ah_status s;
    xpu_dev *d = xpu_open_begin(ze_discover, index, sizeof *d, &s, err, cap);
    *out = NULL;
    if (!d) return s;
    pthread_mutex_init(&d->mu, NULL);
    uint32_t n;
    ze_find(index, &d->drv, &d->dev, &n, err, cap);
    ze_device_properties_t p = {.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES};
    ze.zeDeviceGetProperties(d->dev, &p);
    d->ns_per_tick = (double)p.timerResolution; /* ns with the 1.0 properties struct */
    d->ts_mask = p.timestampValidBits >= 64 ? ~0ull : (1ull << p.timestampValidBits) - 1;
    ze_context_desc_t cd = {.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC};
    ze_result_t r = ze.zeContextCreate(d->drv, &cd, &d->ctx);
    if (r != ZE_RESULT_SUCCESS) {
        snprintf(err, cap, "zeContextCreate failed (%#x)", (unsigned)r);
        ze_close(d);
        return AH_ERR_DEVICE;
    }
    for (int m = 0; m < xpu_modules_of(kern); m++) {
        const xpu_blob *b = xpu_module_spirv(kern, m);
        ze_module_desc_t md = {.stype = ZE_STRUCTURE_TYPE_MODULE_DESC,
                               .format = ZE_MODULE_FORMAT_IL_SPIRV,
                               .inputSize = b->size,
                               .pInputModule = b->data,
                               .pBuildFlags = ""};
        ze_module_build_log_handle_t log = NULL;
        r = ze.zeModuleCreate(d->ctx, d->dev, &md, &d->mod[m], &log);
        if (r != ZE_RESULT_SUCCESS) {
            char text[512] = "";
            size_t len = sizeof text;
            if (log) ze.zeModuleBuildLogGetString(log, &len, text);
            snprintf(err, cap, "zeModuleCreate failed (%#x): %s", (unsigned)r, text);
        }
        if (log) ze.zeModuleBuildLogDestroy(log);
        if (r != ZE_RESULT_SUCCESS) {
            ze_close(d);
            return AH_ERR_DEVICE;
        }
    }
    for (int k = 0; k < XPU_K_COUNT; k++) {
        if (!xpu_kernel_present(kern, k)) continue;
        /* the Intel kernel requires one sub-group per work-group */
        const uint32_t group = k == XPU_K_ATTN_INTEL ? (uint32_t)kern.sg : XPU_GROUP;
        ze_kernel_desc_t kd = {.stype = ZE_STRUCTURE_TYPE_KERNEL_DESC,
                               .pKernelName = xpu_kernel_names[k]};
        r = ze.zeKernelCreate(d->mod[xpu_kernel_module[k]], &kd, &d->k[k]);
        if (r == ZE_RESULT_SUCCESS) r = ze.zeKernelSetGroupSize(d->k[k], group, 1, 1);
        if (r != ZE_RESULT_SUCCESS) {
            snprintf(err, cap, "zeKernelCreate %s failed (%#x)", xpu_kernel_names[k], (unsigned)r);
            ze_close(d);
            return AH_ERR_DEVICE;
        }
    }
    if ((s = stream_new(d, &d->def, err, cap)) != AH_OK) {
        ze_close(d);
        return s;
    }
    *out = d;
    return AH_OK;
}

static ze_stream *stream_of(xpu_dev *d, void *stream)
{
    return stream ? (ze_stream *)stream : d->def;
}

static ah_status ze_alloc(xpu_dev *d, size_t bytes, void **ptr, char *err, size_t cap)
{
    ze_device_mem_alloc_desc_t md = {.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC};
    ze_result_t r = ze.zeMemAllocDevice(d->ctx, &md, bytes ? bytes : 64, 64, d->dev, ptr);
    if (r == ZE_RESULT_SUCCESS) return AH_OK;
    *ptr = NULL;
    snprintf(err, cap, "zeMemAllocDevice of %zu bytes failed (%#x)", bytes, (unsigned)r);
    return AH_ERR_OUT_OF_MEMORY;
}

/* Drain a stream: a barrier signalling its event, waited for on the host. */
static ah_status drain(xpu_dev *d, ze_stream *s, char *err, size_t cap)
{
    pthread_mutex_lock(&d->mu);
    ze_result_t r = ze.zeCommandListAppendBarrier(s->list, s->done, 0, NULL);
    pthread_mutex_unlock(&d->mu);
    if (r == ZE_RESULT_SUCCESS) r = ze.zeEventHostSynchronize(s->done, UINT64_MAX);
    if (r == ZE_RESULT_SUCCESS) r = ze.zeEventHostReset(s->done);
    if (r == ZE_RESULT_SUCCESS) return AH_OK;
    snprintf(err, cap, "synchronizing the command list failed (%#x)", (unsigned)r);
    return AH_ERR_DEVICE;
}

static void ze_free(xpu_dev *d, void *ptr)
{
    char err[64];
    if (!ptr) return;
    drain(d, d->def, err, sizeof err);
    ze.zeMemFree(d->ctx, ptr);
}

static ah_status ze_copy(xpu_dev *d, void *stream, void *dst, const void *src, size_t bytes,
                         char *err, size_t cap)
{
    if (!bytes) return AH_OK;
    ze_stream *s = stream_of(d, stream);
    pthread_mutex_lock(&d->mu);
    ze_result_t r = ze.zeCommandListAppendMemoryCopy(s->list, dst, src, bytes, NULL, 0, NULL);
    pthread_mutex_unlock(&d->mu);
    if (r != ZE_RESULT_SUCCESS) {
        snprintf(err, cap, "zeCommandListAppendMemoryCopy of %zu bytes failed (%#x)", bytes,
                 (unsigned)r);
        return AH_ERR_DEVICE;
    }
    return drain(d, s, err, cap);
}

static ah_status ze_sync(xpu_dev *d, void *stream, char *err, size_t cap)
{
    return drain(d, stream_of(d, stream), err, cap);
}

static ah_status ze_stream_create(xpu_dev *d, void **stream, char *err, size_t cap)
{
    ze_stream *s;
    ah_status st = stream_new(d, &s, err, cap);
    *stream = st == AH_OK ? s : NULL;
    return st;
}

static void ze_stream_destroy(xpu_dev *d, void *stream)
{
    char err[64];
    if (!stream) return;
    drain(d, stream, err, sizeof err);
    stream_free(d, stream);
}

static ah_status ze_launch(xpu_dev *d, void *stream, int k, uint32_t gx, uint32_t gy, uint32_t lx,
                           const xpu_arg *args, int n_args, char *err, size_t cap)
{
    if (!gx || !gy) return AH_OK;
    ze_stream *s = stream_of(d, stream);
    /* lx is the group size the kernel was created with (ze_open) */
    ze_group_count_t g = {lx ? gx / lx : (gx + XPU_GROUP - 1) / XPU_GROUP, gy, 1};
    pthread_mutex_lock(&d->mu);
    ze_result_t r = ZE_RESULT_SUCCESS;
    /* a recording stream appends to its graph's list (arguments are
     * captured at the append) */
    ze_command_list_handle_t list = s->rec ? s->rec : s->list;
    for (int i = 0; i < n_args && r == ZE_RESULT_SUCCESS; i++)
        r = args[i].host_bytes
                ? ZE_RESULT_ERROR_INVALID_ARGUMENT /* foreign memory: never on a GPU */
                : ze.zeKernelSetArgumentValue(d->k[k], (uint32_t)i, args[i].size, args[i].val);
    if (r == ZE_RESULT_SUCCESS)
        r = ze.zeCommandListAppendLaunchKernel(list, d->k[k], &g, NULL, 0, NULL);
    if (r == ZE_RESULT_SUCCESS) r = ze.zeCommandListAppendBarrier(list, NULL, 0, NULL);
    pthread_mutex_unlock(&d->mu);
    if (r == ZE_RESULT_SUCCESS) return AH_OK;
    snprintf(err, cap, "launching %s failed (%#x)", xpu_kernel_names[k], (unsigned)r);
    return AH_ERR_DEVICE;
}

static ah_status stamp(xpu_dev *d, ze_stream *s, int i, char *err, size_t cap)
{
    pthread_mutex_lock(&d->mu);
    ze_result_t r = ze.zeCommandListAppendBarrier(s->list, NULL, 0, NULL);
    if (r == ZE_RESULT_SUCCESS)
        r = ze.zeCommandListAppendWriteGlobalTimestamp(s->list, s->ts + i, NULL, 0, NULL);
    pthread_mutex_unlock(&d->mu);
    if (r == ZE_RESULT_SUCCESS) return AH_OK;
    snprintf(err, cap, "zeCommandListAppendWriteGlobalTimestamp failed (%#x)", (unsigned)r);
    return AH_ERR_DEVICE;
}

static ah_status ze_timer_start(xpu_dev *d, void *stream, char *err, size_t cap)
{
    return stamp(d, stream_of(d, stream), 0, err, cap);
}

static ah_status ze_timer_stop(xpu_dev *d, void *stream, float *ms, char *err, size_t cap)
{
    ze_stream *s = stream_of(d, stream);
    *ms = 0;
    ah_status st = stamp(d, s, 1, err, cap);
    if (st == AH_OK) st = drain(d, s, err, cap);
    if (st != AH_OK) return st;
    const uint64_t ticks = (s->ts[1] - s->ts[0]) & d->ts_mask;
    *ms = (float)((double)ticks * d->ns_per_tick * 1e-6);
    return AH_OK;
}

/* A graph is a regular command list, closed once, executed on a command
 * queue of its own with a fence. */
struct xpu_graph {
    ze_command_list_handle_t list;
    ze_command_queue_handle_t q;
    ze_fence_handle_t fence;
};

static ah_status ze_graph_begin(xpu_dev *d, void *stream, char *err, size_t cap)
{
    ze_stream *s = stream_of(d, stream);
    ze_command_list_desc_t ld = {.stype = ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC};
    ze_result_t r = ZE_RESULT_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&d->mu);
    if (!s->rec) r = ze.zeCommandListCreate(d->ctx, d->dev, &ld, &s->rec);
    pthread_mutex_unlock(&d->mu);
    if (r == ZE_RESULT_SUCCESS) return AH_OK;
    if (r == ZE_RESULT_ERROR_INVALID_ARGUMENT) {
        snprintf(err, cap, "the stream is already being captured");
        return AH_ERR_INVALID_ARGUMENT;
    }
    snprintf(err, cap, "zeCommandListCreate failed (%#x)", (unsigned)r);
    return AH_ERR_DEVICE;
}

static void ze_graph_destroy(xpu_dev *d, xpu_graph *g)
{
    (void)d;
    if (!g) return;
    if (g->fence) ze.zeFenceDestroy(g->fence);
    if (g->q) ze.zeCommandQueueDestroy(g->q);
    if (g->list) ze.zeCommandListDestroy(g->list);
    free(g);
}

static ah_status ze_graph_end(xpu_dev *d, void *stream, xpu_graph **out, char *err, size_t cap)
{
    ze_stream *s = stream_of(d, stream);
    *out = NULL;
    pthread_mutex_lock(&d->mu);
    ze_command_list_handle_t list = s->rec;
    s->rec = NULL;
    pthread_mutex_unlock(&d->mu);
    if (!list) {
        snprintf(err, cap, "graph_end without graph_begin on this stream");
        return AH_ERR_INVALID_ARGUMENT;
    }
    xpu_graph *g = calloc(1, sizeof *g);
    if (!g) {
        ze.zeCommandListDestroy(list);
        snprintf(err, cap, "out of memory");
        return AH_ERR_OUT_OF_MEMORY;
    }
    g->list = list;
    ze_command_queue_desc_t qd = {.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
                                  .mode = ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
                                  .priority = ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
    ze_fence_desc_t fd = {.stype = ZE_STRUCTURE_TYPE_FENCE_DESC};
    ze_result_t r = ze.zeCommandListClose(list);
    if (r == ZE_RESULT_SUCCESS) r = ze.zeCommandQueueCreate(d->ctx, d->dev, &qd, &g->q);
    if (r == ZE_RESULT_SUCCESS) r = ze.zeFenceCreate(g->q, &fd, &g->fence);
    if (r != ZE_RESULT_SUCCESS) {
        ze_graph_destroy(d, g);
        snprintf(err, cap, "closing the recorded command list failed (%#x)", (unsigned)r);
        return AH_ERR_DEVICE;
    }
    *out = g;
    return AH_OK;
}

/* After what the stream holds (drained), the list on the graph's queue,
 * waited for: a replay is complete when it returns. */
static ah_status ze_graph_launch(xpu_dev *d, xpu_graph *g, void *stream, char *err, size_t cap)
{
    ah_status st = drain(d, stream_of(d, stream), err, cap);
    if (st != AH_OK) return st;
    ze_result_t r = ze.zeCommandQueueExecuteCommandLists(g->q, 1, &g->list, g->fence);
    if (r == ZE_RESULT_SUCCESS) r = ze.zeFenceHostSynchronize(g->fence, UINT64_MAX);
    if (r == ZE_RESULT_SUCCESS) r = ze.zeFenceReset(g->fence);
    if (r == ZE_RESULT_SUCCESS) return AH_OK;
    snprintf(err, cap, "executing the recorded command list failed (%#x)", (unsigned)r);
    return AH_ERR_DEVICE;
}

const xpu_rt xpu_rt_level_zero = {
    "level_zero",    ze_discover,      ze_open,       ze_close,         ze_alloc,
    ze_free,         ze_copy,          ze_sync,       ze_stream_create, ze_stream_destroy,
    ze_launch,       ze_timer_start,   ze_timer_stop, ze_graph_begin,   ze_graph_end,
    ze_graph_launch, ze_graph_destroy,
};
