/*
 * The slice of the CUDA driver API the triton plugin uses, declared here
 * and resolved with dlopen("libcuda.so.1") + dlsym at run time, so the
 * plugin builds without the CUDA toolkit and loads (and explains itself) on
 * a machine with no NVIDIA driver. Types and enum values are the driver's
 * documented ABI (cuda.h); only what is called is declared.
 *
 * The table is also the plugin's device abstraction: hip_driver.c fills the
 * same fields with adapters over libamdhip64.so for triton_hip.so, so the
 * launcher is written once against these CUDA-shaped signatures.
 */
#ifndef AH_TRITON_CUDA_DRIVER_H
#define AH_TRITON_CUDA_DRIVER_H

#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NO_DEVICE 100

enum {
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
};
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
#define CU_STREAM_NON_BLOCKING 1
#define CU_EVENT_DEFAULT 0
#define CU_EVENT_DISABLE_TIMING 2
#define CU_STREAM_CAPTURE_MODE_THREAD_LOCAL 1
#define CU_MEMORYTYPE_DEVICE 2

/* CUDA_MEMCPY2D, for the pitched block-table copy. */
typedef struct CUDA_MEMCPY2D_st {
    size_t srcXInBytes, srcY;
    int srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;

/* X(return, name in libcuda, our field, parameters) */
#define AH_CU_FUNCS(X) \
    X(CUresult, cuInit, init, (unsigned int)) \
    X(CUresult, cuDriverGetVersion, driver_version, (int *)) \
    X(CUresult, cuDeviceGetCount, device_count, (int *)) \
    X(CUresult, cuDeviceGet, device_get, (CUdevice *, int)) \
    X(CUresult, cuDeviceGetName, device_name, (char *, int, CUdevice)) \
    X(CUresult, cuDeviceGetAttribute, device_attr, (int *, int, CUdevice)) \
    X(CUresult, cuDeviceTotalMem_v2, device_mem, (size_t *, CUdevice)) \
    X(CUresult, cuDevicePrimaryCtxRetain, ctx_retain, (CUcontext *, CUdevice)) \
    X(CUresult, cuDevicePrimaryCtxRelease_v2, ctx_release, (CUdevice)) \
    X(CUresult, cuCtxSetCurrent, ctx_set_current, (CUcontext)) \
    X(CUresult, cuModuleLoadData, module_load, (CUmodule *, const void *)) \
    X(CUresult, cuModuleUnload, module_unload, (CUmodule)) \
    X(CUresult, cuModuleGetFunction, module_function, (CUfunction *, CUmodule, const char *)) \
    X(CUresult, cuFuncSetAttribute, func_set_attr, (CUfunction, int, int)) \
    X(CUresult, cuLaunchKernel, launch, \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, \
       void **, void **)) \
    X(CUresult, cuMemAlloc_v2, mem_alloc, (CUdeviceptr *, size_t)) \
    X(CUresult, cuMemFree_v2, mem_free, (CUdeviceptr)) \
    X(CUresult, cuMemAllocHost_v2, host_alloc, (void **, size_t)) \
    X(CUresult, cuMemFreeHost, host_free, (void *)) \
    X(CUresult, cuMemcpyHtoDAsync_v2, copy_htod, (CUdeviceptr, const void *, size_t, CUstream)) \
    X(CUresult, cuMemcpyDtoHAsync_v2, copy_dtoh, (void *, CUdeviceptr, size_t, CUstream)) \
    X(CUresult, cuMemcpyDtoDAsync_v2, copy_dtod, (CUdeviceptr, CUdeviceptr, size_t, CUstream)) \
    X(CUresult, cuMemcpy2DAsync_v2, copy_2d, (const CUDA_MEMCPY2D *, CUstream)) \
    X(CUresult, cuStreamCreate, stream_create, (CUstream *, unsigned)) \
    X(CUresult, cuStreamDestroy_v2, stream_destroy, (CUstream)) \
    X(CUresult, cuStreamSynchronize, stream_sync, (CUstream)) \
    X(CUresult, cuEventCreate, event_create, (CUevent *, unsigned)) \
    X(CUresult, cuEventDestroy_v2, event_destroy, (CUevent)) \
    X(CUresult, cuEventRecord, event_record, (CUevent, CUstream)) \
    X(CUresult, cuEventSynchronize, event_sync, (CUevent)) \
    X(CUresult, cuEventElapsedTime, event_elapsed, (float *, CUevent, CUevent)) \
    X(CUresult, cuStreamWaitEvent, stream_wait, (CUstream, CUevent, unsigned)) \
    X(CUresult, cuStreamBeginCapture_v2, capture_begin, (CUstream, int)) \
    X(CUresult, cuStreamEndCapture, capture_end, (CUstream, CUgraph *)) \
    X(CUresult, cuGraphInstantiateWithFlags, graph_instantiate, \
      (CUgraphExec *, CUgraph, unsigned long long)) \
    X(CUresult, cuGraphLaunch, graph_launch, (CUgraphExec, CUstream)) \
    X(CUresult, cuGraphExecDestroy, graph_exec_destroy, (CUgraphExec)) \
    X(CUresult, cuGraphDestroy, graph_destroy, (CUgraph)) \
    X(CUresult, cuGetErrorString, error_string, (CUresult, const char **))

typedef struct ah_cu_api {
    void *lib;
#define AH_CU_FIELD(ret, sym, field, params) ret(*field) params;
    AH_CU_FUNCS(AH_CU_FIELD)
#undef AH_CU_FIELD
} ah_cu_api;

/* Load libcuda.so.1 and resolve every function, once per process (the
 * library stays loaded: unloading a driver library is never safe while any
 * context may exist). Returns NULL with *why set to a host-lifetime
 * message ("libcuda.so.1 not found: ...", "libcuda.so.1 lacks cuX") when
 * the driver cannot be used. Thread-safe. */
const ah_cu_api *tk_cu_load(const char **why);

/* The driver's text for an error code ("out of memory"). */
const char *tk_cu_errstr(const ah_cu_api *cu, CUresult r);

#endif
