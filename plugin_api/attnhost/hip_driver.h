/*
 * The HIP runtime (libamdhip64.so) as a table of function pointers,
 * resolved with dlopen + dlsym at run time, shared by the HIP plugins
 * (rocm_aiter, triton's HIP build). A plugin using it builds against HIP's
 * headers only (Debian libamdhip64-dev) and loads, probes and explains
 * itself on a machine with no ROCm ("libamdhip64.so not found: ...").
 * Header-only; the table is static to the including translation unit, so
 * include it from one file of a plugin and pass the table around.
 *
 *   const char *why;
 *   const ah_hip_api *hip = ah_hip_load(&why);   // NULL: why says why
 *   hip->device_count(&n);
 *
 * Signatures are HIP's own (hip_runtime_api.h of the headers built
 * against); hipGetDeviceProperties is resolved by its unversioned name,
 * which ROCm 6 keeps with the ROCm 5 layout of hipDeviceProp_t.
 */
#ifndef ATTNHOST_HIP_DRIVER_H
#define ATTNHOST_HIP_DRIVER_H

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

/* X(field, HIP symbol, return, parameters) */
#define AH_HIP_FUNCS(X) \
    X(init, hipInit, hipError_t, (unsigned)) \
    X(driver_version, hipDriverGetVersion, hipError_t, (int *)) \
    X(runtime_version, hipRuntimeGetVersion, hipError_t, (int *)) \
    X(device_count, hipGetDeviceCount, hipError_t, (int *)) \
    X(device_get, hipDeviceGet, hipError_t, (hipDevice_t *, int)) \
    X(device_name, hipDeviceGetName, hipError_t, (char *, int, hipDevice_t)) \
    X(device_attr, hipDeviceGetAttribute, hipError_t, (int *, hipDeviceAttribute_t, int)) \
    X(device_props, hipGetDeviceProperties, hipError_t, (hipDeviceProp_t *, int)) \
    X(device_mem, hipDeviceTotalMem, hipError_t, (size_t *, hipDevice_t)) \
    X(set_device, hipSetDevice, hipError_t, (int)) \
    X(ctx_retain, hipDevicePrimaryCtxRetain, hipError_t, (hipCtx_t *, hipDevice_t)) \
    X(ctx_release, hipDevicePrimaryCtxRelease, hipError_t, (hipDevice_t)) \
    X(ctx_set_current, hipCtxSetCurrent, hipError_t, (hipCtx_t)) \
    X(module_load, hipModuleLoadData, hipError_t, (hipModule_t *, const void *)) \
    X(module_unload, hipModuleUnload, hipError_t, (hipModule_t)) \
    X(module_function, hipModuleGetFunction, hipError_t, \
      (hipFunction_t *, hipModule_t, const char *)) \
    X(launch, hipModuleLaunchKernel, hipError_t, \
      (hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, \
       hipStream_t, void **, void **)) \
    X(mem_alloc, hipMalloc, hipError_t, (void **, size_t)) \
    X(mem_free, hipFree, hipError_t, (void *)) \
    X(host_alloc, hipHostMalloc, hipError_t, (void **, size_t, unsigned)) \
    X(host_free, hipHostFree, hipError_t, (void *)) \
    X(copy_async, hipMemcpyAsync, hipError_t, \
      (void *, const void *, size_t, hipMemcpyKind, hipStream_t)) \
    X(copy_htod, hipMemcpyHtoDAsync, hipError_t, (hipDeviceptr_t, void *, size_t, hipStream_t)) \
    X(copy_dtoh, hipMemcpyDtoHAsync, hipError_t, (void *, hipDeviceptr_t, size_t, hipStream_t)) \
    X(copy_dtod, hipMemcpyDtoDAsync, hipError_t, \
      (hipDeviceptr_t, hipDeviceptr_t, size_t, hipStream_t)) \
    X(copy_2d, hipMemcpy2DAsync, hipError_t, \
      (void *, size_t, const void *, size_t, size_t, size_t, hipMemcpyKind, hipStream_t)) \
    X(stream_create, hipStreamCreateWithFlags, hipError_t, (hipStream_t *, unsigned)) \
    X(stream_destroy, hipStreamDestroy, hipError_t, (hipStream_t)) \
    X(stream_sync, hipStreamSynchronize, hipError_t, (hipStream_t)) \
    X(event_create, hipEventCreateWithFlags, hipError_t, (hipEvent_t *, unsigned)) \
    X(event_destroy, hipEventDestroy, hipError_t, (hipEvent_t)) \
    X(event_record, hipEventRecord, hipError_t, (hipEvent_t, hipStream_t)) \
    X(event_sync, hipEventSynchronize, hipError_t, (hipEvent_t)) \
    X(event_elapsed, hipEventElapsedTime, hipError_t, (float *, hipEvent_t, hipEvent_t)) \
    X(stream_wait, hipStreamWaitEvent, hipError_t, (hipStream_t, hipEvent_t, unsigned)) \
    X(capture_begin, hipStreamBeginCapture, hipError_t, (hipStream_t, hipStreamCaptureMode)) \
    X(capture_end, hipStreamEndCapture, hipError_t, (hipStream_t, hipGraph_t *)) \
    X(graph_instantiate, hipGraphInstantiateWithFlags, hipError_t, \
      (hipGraphExec_t *, hipGraph_t, unsigned long long)) \
    X(graph_launch, hipGraphLaunch, hipError_t, (hipGraphExec_t, hipStream_t)) \
    X(graph_exec_destroy, hipGraphExecDestroy, hipError_t, (hipGraphExec_t)) \
    X(graph_destroy, hipGraphDestroy, hipError_t, (hipGraph_t)) \
    X(error_string, hipGetErrorString, const char *, (hipError_t))

typedef struct ah_hip_api {
    void *lib;
#define AH_HIP_FIELD(field, sym, ret, params) ret(*field) params;
    AH_HIP_FUNCS(AH_HIP_FIELD)
#undef AH_HIP_FIELD
} ah_hip_api;

static ah_hip_api ah_hip_table_;
static char ah_hip_why_[384];
static pthread_once_t ah_hip_once_ = PTHREAD_ONCE_INIT;

static void ah_hip_load_once_(void)
{
    static const char *const names[] = {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"};
    void *lib = NULL;
    for (unsigned i = 0; i < sizeof names / sizeof *names && !lib; i++)
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(ah_hip_why_, sizeof ah_hip_why_, "libamdhip64.so not found: %s", e ? e : "?");
        return;
    }
    ah_hip_api t;
#define AH_HIP_RESOLVE(field, sym, ret, params) \
    *(void **)&t.field = dlsym(lib, #sym); \
    if (!t.field) { \
        snprintf(ah_hip_why_, sizeof ah_hip_why_, "libamdhip64.so lacks %s (ROCm too old)", #sym); \
        dlclose(lib); \
        return; \
    }
    AH_HIP_FUNCS(AH_HIP_RESOLVE)
#undef AH_HIP_RESOLVE
    t.lib = lib;
    ah_hip_table_ = t;
}

/* Load libamdhip64.so and resolve every function, once per process (the
 * library stays loaded). NULL with *why set to a message that lives as
 * long as the process when HIP cannot be used. Thread-safe. */
static inline const ah_hip_api *ah_hip_load(const char **why)
{
    pthread_once(&ah_hip_once_, ah_hip_load_once_);
    if (!ah_hip_table_.lib) {
        if (why) *why = ah_hip_why_;
        return NULL;
    }
    return &ah_hip_table_;
}

/* HIP's text for an error code. */
static inline const char *ah_hip_errstr(const ah_hip_api *hip, hipError_t e)
{
    const char *s = hip && hip->error_string ? hip->error_string(e) : NULL;
    return s ? s : "unknown HIP error";
}

#endif
