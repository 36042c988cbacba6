/*
 * The HIP flavour of the driver table (cuda_driver.h), for triton_hip.so:
 * resolves libamdhip64.so at run time and fills the same ah_cu_api fields
 * with small adapters, so plugin.c, state.c and launch.c run unchanged on
 * HIP. HIP's module API mirrors the CUDA driver's (modules, functions,
 * hipModuleLaunchKernel with the same argument array, streams, events,
 * stream capture); the adapters translate the few calls whose signatures or
 * constants differ (device attributes, pinned allocation, the pitched copy,
 * error strings). The HIP functions come from the table the HIP plugins
 * share (attnhost/hip_driver.h); constants from the HIP headers this file
 * is built against. Untested on AMD hardware: nothing here has run on a GPU.
 */
#include <attnhost/hip_driver.h>

#include "cuda_driver.h"

/* The shared HIP table (plugin_api/attnhost/hip_driver.h), set once loaded. */
static const ah_hip_api *g_hip;

static ah_cu_api g_api;
static const char *g_why;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* ---- adapters: CUDA-driver signatures over HIP --------------------------- */

#define R(x) ((CUresult)(x))
#define DP(p) ((hipDeviceptr_t)(uintptr_t)(p))

static CUresult a_init(unsigned f) { return R(g_hip->init(f)); }
static CUresult a_driver_version(int *v) { return R(g_hip->driver_version(v)); }
static CUresult a_device_count(int *n) { return R(g_hip->device_count(n)); }
static CUresult a_device_get(CUdevice *d, int i) { return R(g_hip->device_get(d, i)); }
static CUresult a_device_name(char *n, int len, CUdevice d)
{
    return R(g_hip->device_name(n, len, d));
}
static CUresult a_device_attr(int *v, int attr, CUdevice d)
{
    hipDeviceAttribute_t a;
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: a = hipDeviceAttributeMultiprocessorCount; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        a = hipDeviceAttributeComputeCapabilityMajor;
        break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        a = hipDeviceAttributeComputeCapabilityMinor;
        break;
    /* HIP has no opt-in beyond the per-block maximum (64 KB of LDS). */
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        a = hipDeviceAttributeMaxSharedMemoryPerBlock;
        break;
    default: return R(hipErrorInvalidValue);
    }
    return R(g_hip->device_attr(v, a, d));
}
static CUresult a_device_mem(size_t *b, CUdevice d) { return R(g_hip->device_mem(b, d)); }
static CUresult a_ctx_retain(CUcontext *c, CUdevice d)
{
    return R(g_hip->ctx_retain((hipCtx_t *)c, d));
}
static CUresult a_ctx_release(CUdevice d) { return R(g_hip->ctx_release(d)); }
static CUresult a_ctx_set_current(CUcontext c) { return R(g_hip->ctx_set_current((hipCtx_t)c)); }
static CUresult a_module_load(CUmodule *m, const void *img)
{
    return R(g_hip->module_load((hipModule_t *)m, img));
}
static CUresult a_module_unload(CUmodule m) { return R(g_hip->module_unload((hipModule_t)m)); }
static CUresult a_module_function(CUfunction *f, CUmodule m, const char *name)
{
    return R(g_hip->module_function((hipFunction_t *)f, (hipModule_t)m, name));
}
/* Kernels never ask for more LDS than a block gets without opting in. */
static CUresult a_func_set_attr(CUfunction f, int attr, int v)
{
    (void)f;
    (void)attr;
    (void)v;
    return 0;
}
static CUresult a_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned smem, CUstream s, void **params,
                         void **extra)
{
    return R(g_hip->launch((hipFunction_t)f, gx, gy, gz, bx, by, bz, smem, (hipStream_t)s, params,
                           extra));
}
static CUresult a_mem_alloc(CUdeviceptr *p, size_t n)
{
    void *q = NULL;
    hipError_t e = g_hip->mem_alloc(&q, n);
    *p = (CUdeviceptr)(uintptr_t)q;
    return R(e);
}
static CUresult a_mem_free(CUdeviceptr p) { return R(g_hip->mem_free(DP(p))); }
static CUresult a_host_alloc(void **p, size_t n)
{
    return R(g_hip->host_alloc(p, n, hipHostMallocDefault));
}
static CUresult a_host_free(void *p) { return R(g_hip->host_free(p)); }
static CUresult a_copy_htod(CUdeviceptr d, const void *s, size_t n, CUstream st)
{
    return R(g_hip->copy_htod(DP(d), (void *)s, n, (hipStream_t)st));
}
static CUresult a_copy_dtoh(void *d, CUdeviceptr s, size_t n, CUstream st)
{
    return R(g_hip->copy_dtoh(d, DP(s), n, (hipStream_t)st));
}
static CUresult a_copy_dtod(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
    return R(g_hip->copy_dtod(DP(d), DP(s), n, (hipStream_t)st));
}
/* Only the device-to-device pitched copy plan() issues is supported. */
static CUresult a_copy_2d(const CUDA_MEMCPY2D *c, CUstream st)
{
    if (c->srcMemoryType != CU_MEMORYTYPE_DEVICE || c->dstMemoryType != CU_MEMORYTYPE_DEVICE ||
        c->srcXInBytes || c->srcY || c->dstXInBytes || c->dstY)
        return R(hipErrorInvalidValue);
    return R(g_hip->copy_2d((void *)(uintptr_t)c->dstDevice, c->dstPitch,
                            (const void *)(uintptr_t)c->srcDevice, c->srcPitch, c->WidthInBytes,
                            c->Height, hipMemcpyDeviceToDevice, (hipStream_t)st));
}
static CUresult a_stream_create(CUstream *s, unsigned f)
{
    return R(g_hip->stream_create((hipStream_t *)s,
                                  f == CU_STREAM_NON_BLOCKING ? hipStreamNonBlocking : 0));
}
static CUresult a_stream_destroy(CUstream s) { return R(g_hip->stream_destroy((hipStream_t)s)); }
static CUresult a_stream_sync(CUstream s) { return R(g_hip->stream_sync((hipStream_t)s)); }
static CUresult a_event_create(CUevent *e, unsigned f)
{
    return R(g_hip->event_create((hipEvent_t *)e,
                                 f == CU_EVENT_DISABLE_TIMING ? hipEventDisableTiming : 0));
}
static CUresult a_event_destroy(CUevent e) { return R(g_hip->event_destroy((hipEvent_t)e)); }
static CUresult a_event_record(CUevent e, CUstream s)
{
    return R(g_hip->event_record((hipEvent_t)e, (hipStream_t)s));
}
static CUresult a_event_sync(CUevent e) { return R(g_hip->event_sync((hipEvent_t)e)); }
static CUresult a_event_elapsed(float *ms, CUevent a, CUevent b)
{
    return R(g_hip->event_elapsed(ms, (hipEvent_t)a, (hipEvent_t)b));
}
static CUresult a_stream_wait(CUstream s, CUevent e, unsigned f)
{
    return R(g_hip->stream_wait((hipStream_t)s, (hipEvent_t)e, f));
}
static CUresult a_capture_begin(CUstream s, int mode)
{
    (void)mode; /* the plugin always captures thread-locally */
    return R(g_hip->capture_begin((hipStream_t)s, hipStreamCaptureModeThreadLocal));
}
static CUresult a_capture_end(CUstream s, CUgraph *g)
{
    return R(g_hip->capture_end((hipStream_t)s, (hipGraph_t *)g));
}
static CUresult a_graph_instantiate(CUgraphExec *e, CUgraph g, unsigned long long f)
{
    return R(g_hip->graph_instantiate((hipGraphExec_t *)e, (hipGraph_t)g, f));
}
static CUresult a_graph_launch(CUgraphExec e, CUstream s)
{
    return R(g_hip->graph_launch((hipGraphExec_t)e, (hipStream_t)s));
}
static CUresult a_graph_exec_destroy(CUgraphExec e)
{
    return R(g_hip->graph_exec_destroy((hipGraphExec_t)e));
}
static CUresult a_graph_destroy(CUgraph g) { return R(g_hip->graph_destroy((hipGraph_t)g)); }
static CUresult a_error_string(CUresult r, const char **s)
{
    *s = g_hip->error_string((hipError_t)r);
    return 0;
}

static void hip_load_once(void)
{
    g_hip = ah_hip_load(&g_why);
    if (!g_hip) return;
    void *lib = g_hip->lib;
    g_api = (ah_cu_api){lib,
                        a_init,
                        a_driver_version,
                        a_device_count,
                        a_device_get,
                        a_device_name,
                        a_device_attr,
                        a_device_mem,
                        a_ctx_retain,
                        a_ctx_release,
                        a_ctx_set_current,
                        a_module_load,
                        a_module_unload,
                        a_module_function,
                        a_func_set_attr,
                        a_launch,
                        a_mem_alloc,
                        a_mem_free,
                        a_host_alloc,
                        a_host_free,
                        a_copy_htod,
                        a_copy_dtoh,
                        a_copy_dtod,
                        a_copy_2d,
                        a_stream_create,
                        a_stream_destroy,
                        a_stream_sync,
                        a_event_create,
                        a_event_destroy,
                        a_event_record,
                        a_event_sync,
                        a_event_elapsed,
                        a_stream_wait,
                        a_capture_begin,
                        a_capture_end,
                        a_graph_instantiate,
                        a_graph_launch,
                        a_graph_exec_destroy,
                        a_graph_destroy,
                        a_error_string};
}

const ah_cu_api *tk_cu_load(const char **why)
{
    pthread_once(&g_once, hip_load_once);
    if (!g_api.lib) {
        if (why) *why = g_why;
        return NULL;
    }
    return &g_api;
}

const char *tk_cu_errstr(const ah_cu_api *cu, CUresult r)
{
    const char *s = NULL;
    if (cu && cu->error_string && cu->error_string(r, &s) == CUDA_SUCCESS && s) return s;
    return "unknown HIP error";
}
