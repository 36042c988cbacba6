/*
 * The HIP flavour of the driver table (cuda_driver.h), for triton_hip.so:
 * resolves libamdhip64.so at run time and fills the same ah_cu_api fields
 * with small adapters, so plugin.c, state.c and launch.c run unchanged on
 * HIP. HIP's module API mirrors the CUDA driver's (modules, functions,
 * hipModuleLaunchKernel with the same argument array, streams, events,
 * stream capture); the adapters translate the few calls whose signatures or
 * constants differ (device attributes, pinned allocation, the pitched copy,
 * error strings). Constants come from the HIP headers this file is built
 * against. Untested on AMD hardware: nothing here has run on a GPU.
 */
#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "cuda_driver.h"

/* X(field, HIP symbol, return, parameters) */
#define AH_HIP_FUNCS(X)                                                                      \
    X(init, hipInit, hipError_t, (unsigned))                                                 \
    X(driver_version, hipDriverGetVersion, hipError_t, (int *))                              \
    X(device_count, hipGetDeviceCount, hipError_t, (int *))                                  \
    X(device_get, hipDeviceGet, hipError_t, (hipDevice_t *, int))                            \
    X(device_name, hipDeviceGetName, hipError_t, (char *, int, hipDevice_t))                 \
    X(device_attr, hipDeviceGetAttribute, hipError_t, (int *, hipDeviceAttribute_t, int))    \
    X(device_mem, hipDeviceTotalMem, hipError_t, (size_t *, hipDevice_t))                    \
    X(ctx_retain, hipDevicePrimaryCtxRetain, hipError_t, (hipCtx_t *, hipDevice_t))          \
    X(ctx_release, hipDevicePrimaryCtxRelease, hipError_t, (hipDevice_t))                    \
    X(ctx_set_current, hipCtxSetCurrent, hipError_t, (hipCtx_t))                             \
    X(module_load, hipModuleLoadData, hipError_t, (hipModule_t *, const void *))             \
    X(module_unload, hipModuleUnload, hipError_t, (hipModule_t))                             \
    X(module_function, hipModuleGetFunction, hipError_t, (hipFunction_t *, hipModule_t, const char *)) \
    X(launch, hipModuleLaunchKernel, hipError_t,                                             \
      (hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,  \
       hipStream_t, void **, void **))                                                       \
    X(mem_alloc, hipMalloc, hipError_t, (void **, size_t))                                   \
    X(mem_free, hipFree, hipError_t, (void *))                                               \
    X(host_alloc, hipHostMalloc, hipError_t, (void **, size_t, unsigned))                    \
    X(host_free, hipHostFree, hipError_t, (void *))                                          \
    X(copy_htod, hipMemcpyHtoDAsync, hipError_t, (hipDeviceptr_t, void *, size_t, hipStream_t)) \
    X(copy_dtoh, hipMemcpyDtoHAsync, hipError_t, (void *, hipDeviceptr_t, size_t, hipStream_t)) \
    X(copy_dtod, hipMemcpyDtoDAsync, hipError_t,                                             \
      (hipDeviceptr_t, hipDeviceptr_t, size_t, hipStream_t))                                 \
    X(copy_2d, hipMemcpy2DAsync, hipError_t,                                                 \
      (void *, size_t, const void *, size_t, size_t, size_t, hipMemcpyKind, hipStream_t))    \
    X(stream_create, hipStreamCreateWithFlags, hipError_t, (hipStream_t *, unsigned))        \
    X(stream_destroy, hipStreamDestroy, hipError_t, (hipStream_t))                           \
    X(stream_sync, hipStreamSynchronize, hipError_t, (hipStream_t))                          \
    X(event_create, hipEventCreateWithFlags, hipError_t, (hipEvent_t *, unsigned))           \
    X(event_destroy, hipEventDestroy, hipError_t, (hipEvent_t))                              \
    X(event_record, hipEventRecord, hipError_t, (hipEvent_t, hipStream_t))                   \
    X(event_sync, hipEventSynchronize, hipError_t, (hipEvent_t))                             \
    X(event_elapsed, hipEventElapsedTime, hipError_t, (float *, hipEvent_t, hipEvent_t))     \
    X(capture_begin, hipStreamBeginCapture, hipError_t, (hipStream_t, hipStreamCaptureMode)) \
    X(capture_end, hipStreamEndCapture, hipError_t, (hipStream_t, hipGraph_t *))             \
    X(graph_instantiate, hipGraphInstantiateWithFlags, hipError_t,                           \
      (hipGraphExec_t *, hipGraph_t, unsigned long long))                                    \
    X(graph_launch, hipGraphLaunch, hipError_t, (hipGraphExec_t, hipStream_t))               \
    X(graph_exec_destroy, hipGraphExecDestroy, hipError_t, (hipGraphExec_t))                 \
    X(graph_destroy, hipGraphDestroy, hipError_t, (hipGraph_t))                              \
    X(error_string, hipGetErrorString, const char *, (hipError_t))

static struct {
#define AH_HIP_FIELD(field, sym, ret, params) ret(*field) params;
    AH_HIP_FUNCS(AH_HIP_FIELD)
#undef AH_HIP_FIELD
} h;

static ah_cu_api g_api;
static const char *g_why;
static char g_why_buf[384];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* ---- adapters: CUDA-driver signatures over HIP --------------------------- */

#define R(x) ((CUresult)(x))
#define DP(p) ((hipDeviceptr_t)(uintptr_t)(p))

static CUresult a_init(unsigned f) { return R(h.init(f)); }
static CUresult a_driver_version(int *v) { return R(h.driver_version(v)); }
static CUresult a_device_count(int *n) { return R(h.device_count(n)); }
static CUresult a_device_get(CUdevice *d, int i) { return R(h.device_get(d, i)); }
static CUresult a_device_name(char *n, int len, CUdevice d) { return R(h.device_name(n, len, d)); }
static CUresult a_device_attr(int *v, int attr, CUdevice d)
{
    hipDeviceAttribute_t a;
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: a = hipDeviceAttributeMultiprocessorCount; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: a = hipDeviceAttributeComputeCapabilityMajor; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: a = hipDeviceAttributeComputeCapabilityMinor; break;
    /* HIP has no opt-in beyond the per-block maximum (64 KB of LDS). */
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: a = hipDeviceAttributeMaxSharedMemoryPerBlock; break;
    default: return R(hipErrorInvalidValue);
    }
    return R(h.device_attr(v, a, d));
}
static CUresult a_device_mem(size_t *b, CUdevice d) { return R(h.device_mem(b, d)); }
static CUresult a_ctx_retain(CUcontext *c, CUdevice d) { return R(h.ctx_retain((hipCtx_t *)c, d)); }
static CUresult a_ctx_release(CUdevice d) { return R(h.ctx_release(d)); }
static CUresult a_ctx_set_current(CUcontext c) { return R(h.ctx_set_current((hipCtx_t)c)); }
static CUresult a_module_load(CUmodule *m, const void *img) { return R(h.module_load((hipModule_t *)m, img)); }
static CUresult a_module_unload(CUmodule m) { return R(h.module_unload((hipModule_t)m)); }
static CUresult a_module_function(CUfunction *f, CUmodule m, const char *name)
{
    return R(h.module_function((hipFunction_t *)f, (hipModule_t)m, name));
}
/* Kernels never ask for more LDS than a block gets without opting in. */
static CUresult a_func_set_attr(CUfunction f, int attr, int v) { (void)f; (void)attr; (void)v; return 0; }
static CUresult a_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                         unsigned bz, unsigned smem, CUstream s, void **params, void **extra)
{
    return R(h.launch((hipFunction_t)f, gx, gy, gz, bx, by, bz, smem, (hipStream_t)s, params, extra));
}
static CUresult a_mem_alloc(CUdeviceptr *p, size_t n)
{
    void *q = NULL;
    hipError_t e = h.mem_alloc(&q, n);
    *p = (CUdeviceptr)(uintptr_t)q;
    return R(e);
}
static CUresult a_mem_free(CUdeviceptr p) { return R(h.mem_free(DP(p))); }
static CUresult a_host_alloc(void **p, size_t n) { return R(h.host_alloc(p, n, hipHostMallocDefault)); }
static CUresult a_host_free(void *p) { return R(h.host_free(p)); }
static CUresult a_copy_htod(CUdeviceptr d, const void *s, size_t n, CUstream st)
{
    return R(h.copy_htod(DP(d), (void *)s, n, (hipStream_t)st));
}
static CUresult a_copy_dtoh(void *d, CUdeviceptr s, size_t n, CUstream st)
{
    return R(h.copy_dtoh(d, DP(s), n, (hipStream_t)st));
}
static CUresult a_copy_dtod(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
    return R(h.copy_dtod(DP(d), DP(s), n, (hipStream_t)st));
}
/* Only the device-to-device pitched copy plan() issues is supported. */
static CUresult a_copy_2d(const CUDA_MEMCPY2D *c, CUstream st)
{
    if (c->srcMemoryType != CU_MEMORYTYPE_DEVICE || c->dstMemoryType != CU_MEMORYTYPE_DEVICE ||
        c->srcXInBytes || c->srcY || c->dstXInBytes || c->dstY)
        return R(hipErrorInvalidValue);
    return R(h.copy_2d((void *)(uintptr_t)c->dstDevice, c->dstPitch,
                       (const void *)(uintptr_t)c->srcDevice, c->srcPitch, c->WidthInBytes, c->Height,
                       hipMemcpyDeviceToDevice, (hipStream_t)st));
}
static CUresult a_stream_create(CUstream *s, unsigned f)
{
    return R(h.stream_create((hipStream_t *)s, f == CU_STREAM_NON_BLOCKING ? hipStreamNonBlocking : 0));
}
static CUresult a_stream_destroy(CUstream s) { return R(h.stream_destroy((hipStream_t)s)); }
static CUresult a_stream_sync(CUstream s) { return R(h.stream_sync((hipStream_t)s)); }
static CUresult a_event_create(CUevent *e, unsigned f)
{
    return R(h.event_create((hipEvent_t *)e, f == CU_EVENT_DISABLE_TIMING ? hipEventDisableTiming : 0));
}
static CUresult a_event_destroy(CUevent e) { return R(h.event_destroy((hipEvent_t)e)); }
static CUresult a_event_record(CUevent e, CUstream s) { return R(h.event_record((hipEvent_t)e, (hipStream_t)s)); }
static CUresult a_event_sync(CUevent e) { return R(h.event_sync((hipEvent_t)e)); }
static CUresult a_event_elapsed(float *ms, CUevent a, CUevent b)
{
    return R(h.event_elapsed(ms, (hipEvent_t)a, (hipEvent_t)b));
}
static CUresult a_capture_begin(CUstream s, int mode)
{
    (void)mode; /* the plugin always captures thread-locally */
    return R(h.capture_begin((hipStream_t)s, hipStreamCaptureModeThreadLocal));
}
static CUresult a_capture_end(CUstream s, CUgraph *g) { return R(h.capture_end((hipStream_t)s, (hipGraph_t *)g)); }
static CUresult a_graph_instantiate(CUgraphExec *e, CUgraph g, unsigned long long f)
{
    return R(h.graph_instantiate((hipGraphExec_t *)e, (hipGraph_t)g, f));
}
static CUresult a_graph_launch(CUgraphExec e, CUstream s) { return R(h.graph_launch((hipGraphExec_t)e, (hipStream_t)s)); }
static CUresult a_graph_exec_destroy(CUgraphExec e) { return R(h.graph_exec_destroy((hipGraphExec_t)e)); }
static CUresult a_graph_destroy(CUgraph g) { return R(h.graph_destroy((hipGraph_t)g)); }
static CUresult a_error_string(CUresult r, const char **s)
{
    *s = h.error_string((hipError_t)r);
    return 0;
}

static void hip_load_once(void)
{
    void *lib = dlopen("libamdhip64.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libamdhip64.so.6", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libamdhip64.so.5", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(g_why_buf, sizeof g_why_buf, "libamdhip64.so not found: %s", e ? e : "?");
        g_why = g_why_buf;
        return;
    }
#define AH_HIP_RESOLVE(field, sym, ret, params)                                                   \
    *(void **)&h.field = dlsym(lib, #sym);                                                        \
    if (!h.field) {                                                                               \
        snprintf(g_why_buf, sizeof g_why_buf, "libamdhip64.so lacks %s (ROCm too old)", #sym);     \
        g_why = g_why_buf;                                                                        \
        dlclose(lib);                                                                             \
        return;                                                                                   \
    }
    AH_HIP_FUNCS(AH_HIP_RESOLVE)
#undef AH_HIP_RESOLVE
    g_api = (ah_cu_api){lib, a_init, a_driver_version, a_device_count, a_device_get, a_device_name,
                        a_device_attr, a_device_mem, a_ctx_retain, a_ctx_release, a_ctx_set_current,
                        a_module_load, a_module_unload, a_module_function, a_func_set_attr, a_launch,
                        a_mem_alloc, a_mem_free, a_host_alloc, a_host_free, a_copy_htod, a_copy_dtoh,
                        a_copy_dtod, a_copy_2d, a_stream_create, a_stream_destroy, a_stream_sync,
                        a_event_create, a_event_destroy, a_event_record, a_event_sync,
                        a_event_elapsed, a_capture_begin, a_capture_end, a_graph_instantiate,
                        a_graph_launch, a_graph_exec_destroy, a_graph_destroy, a_error_string};
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
