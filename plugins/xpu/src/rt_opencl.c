/*
 * The OpenCL runtime behind xpu_rt: libOpenCL.so.1 opened with dlopen;
 * devices are every device of every platform, in the ICD loader's order.
 * Memory is coarse-grained buffer SVM (OpenCL 2.0+), so kernels take plain
 * pointers as on Level Zero; a stream is an in-order command queue with
 * profiling on (markers' timestamps time the stream). Programs come from
 * the embedded SPIR-V where the device takes IL, else from the same
 * modules as spir64 LLVM bitcode (cl_khr_spir, PoCL), else from the
 * embedded OpenCL C source. A graph is a command buffer
 * (cl_khr_command_buffer) recorded on the stream's queue.
 */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <CL/cl_ext.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "xpu.h"

#define CL_FNS(X) \
    X(clGetPlatformIDs) \
    X(clGetDeviceIDs) \
    X(clGetDeviceInfo) \
    X(clGetPlatformInfo) \
    X(clCreateContext) \
    X(clReleaseContext) \
    X(clCreateCommandQueueWithProperties) \
    X(clReleaseCommandQueue) \
    X(clCreateProgramWithIL) \
    X(clCreateProgramWithBinary) \
    X(clCreateProgramWithSource) \
    X(clBuildProgram) \
    X(clGetProgramBuildInfo) \
    X(clReleaseProgram) \
    X(clCreateKernel) \
    X(clReleaseKernel) \
    X(clSetKernelArg) \
    X(clSetKernelArgSVMPointer) \
    X(clEnqueueNDRangeKernel) \
    X(clSVMAlloc) \
    X(clSVMFree) \
    X(clEnqueueSVMMemcpy) \
    X(clFinish) \
    X(clEnqueueMarkerWithWaitList) \
    X(clWaitForEvents) \
    X(clGetEventProfilingInfo) \
    X(clReleaseEvent) \
    X(clCreateBuffer) \
    X(clEnqueueMapBuffer) \
    X(clEnqueueUnmapMemObject) \
    X(clReleaseMemObject) \
    X(clGetExtensionFunctionAddressForPlatform)

static struct {
#define X(f) __typeof__(&f) f;
    CL_FNS(X)
#undef X
    void *lib;
    char why[160];
} cl;
static pthread_once_t cl_once = PTHREAD_ONCE_INIT;

static void cl_load(void)
{
    cl.lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cl.lib) {
        snprintf(cl.why, sizeof cl.why, "libOpenCL.so.1 not found");
        return;
    }
#define X(f) \
    if (!(*(void **)&cl.f = dlsym(cl.lib, #f))) { \
        snprintf(cl.why, sizeof cl.why, "libOpenCL.so.1 lacks %s (OpenCL 2.1 needed)", #f); \
        cl.lib = NULL; \
        return; \
    }
    CL_FNS(X)
#undef X
}

static ah_status cl_ready(char *err, size_t cap)
{
    pthread_once(&cl_once, cl_load);
    if (cl.lib) return AH_OK;
    snprintf(err, cap, "%s", cl.why);
    return AH_ERR_UNAVAILABLE;
}

/* Device index among every platform's devices, GPUs and accelerators
 * first (in platform order), then the rest: index 0 is a GPU when there is
 * one. */
static ah_status cl_find(int index, cl_device_id *dev, cl_platform_id *plat, uint32_t *count,
                         char *err, size_t cap)
{
    cl_platform_id ps[16];
    cl_uint np = 0;
    if (cl.clGetPlatformIDs(16, ps, &np) != CL_SUCCESS || np == 0) {
        snprintf(err, cap, "no OpenCL platform (no ICD installed)");
        return AH_ERR_UNAVAILABLE;
    }
    if (np > 16) np = 16;
    uint32_t n = 0;
    int found = 0;
    const cl_device_type pass_types[2] = {CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR,
                                          CL_DEVICE_TYPE_CPU | CL_DEVICE_TYPE_CUSTOM};
    for (int pass = 0; pass < 2; pass++)
        for (cl_uint p = 0; p < np; p++) {
            cl_device_id ds[64];
            cl_uint nd = 0;
            if (cl.clGetDeviceIDs(ps[p], pass_types[pass], 64, ds, &nd) != CL_SUCCESS) continue;
            if (nd > 64) nd = 64;
            for (cl_uint i = 0; i < nd; i++, n++)
                if ((int)n == index) {
                    *dev = ds[i];
                    *plat = ps[p];
                    found = 1;
                }
        }
    *count = n;
    return found ? AH_OK : xpu_no_device(err, cap, "OpenCL device", index, n);
}

static int has_ext(cl_device_id dev, const char *name)
{
    size_t n = 0;
    if (cl.clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &n) != CL_SUCCESS || !n) return 0;
    char *s = malloc(n + 1);
    if (!s) return 0;
    s[n] = 0;
    int yes =
        cl.clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, n, s, NULL) == CL_SUCCESS && strstr(s, name);
    free(s);
    return yes;
}

static int takes_spirv(cl_device_id dev)
{
    char il[256] = "";
    if (cl.clGetDeviceInfo(dev, CL_DEVICE_IL_VERSION, sizeof il - 1, il, NULL) != CL_SUCCESS)
        return 0;
    return strstr(il, "SPIR-V") != NULL;
}

/* CL_DEVICE_SUB_GROUP_SIZES_INTEL (cl_intel_required_subgroup_size) */
#define XPU_CL_SUB_GROUP_SIZES 0x4108

/* The sub-group sizes of 8 and 16 the Intel tiers can require here (bits
 * 8 and 16): SPIR-V, cl_intel_subgroups and required sub-group sizes. */
static uint32_t intel_sg_sizes(cl_device_id dev)
{
    if (!takes_spirv(dev) || !has_ext(dev, "cl_intel_subgroups") ||
        !has_ext(dev, "cl_intel_required_subgroup_size"))
        return 0;
    size_t sizes[16], n = 0;
    if (cl.clGetDeviceInfo(dev, XPU_CL_SUB_GROUP_SIZES, sizeof sizes, sizes, &n) != CL_SUCCESS)
        return 0;
    uint32_t mask = 0;
    for (size_t i = 0; i < n / sizeof sizes[0]; i++)
        if (sizes[i] == 8 || sizes[i] == 16) mask |= (uint32_t)sizes[i];
    return mask;
}

static ah_status cl_discover(int index, xpu_devinfo *info, char *err, size_t cap)
{
    memset(info, 0, sizeof *info);
    ah_status s = cl_ready(err, cap);
    if (s != AH_OK) return s;
    cl_device_id dev;
    cl_platform_id plat;
    if ((s = cl_find(index, &dev, &plat, &info->count, err, cap)) != AH_OK) return s;
    cl_device_type type = 0;
    cl_uint cu = 0;
    cl_ulong mem = 0;
    cl_device_svm_capabilities svm = 0;
    char ver[128] = "", drv[64] = "";
    cl.clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof info->name - 1, info->name, NULL);
    cl.clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    cl.clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
    cl.clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
    cl.clGetDeviceInfo(dev, CL_DEVICE_VERSION, sizeof ver - 1, ver, NULL);
    cl.clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof drv - 1, drv, NULL);
    snprintf(info->driver, sizeof info->driver, "OpenCL %.48s", drv);
    info->is_gpu = (type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) != 0;
    info->compute_units = cu;
    info->memory = mem;
    info->sg_sizes = intel_sg_sizes(dev);
    info->xmx = info->sg_sizes && has_ext(dev, "cl_intel_subgroup_matrix_multiply_accumulate");
    int major = 0, minor = 0;
    if (sscanf(ver, "OpenCL %d.%d", &major, &minor) != 2 || major < 2) {
        snprintf(err, cap, "OpenCL device %d (%s) is %s; SVM needs OpenCL 2.0 or later", index,
                 info->name, ver);
        return AH_ERR_UNAVAILABLE;
    }
    if (cl.clGetDeviceInfo(dev, CL_DEVICE_SVM_CAPABILITIES, sizeof svm, &svm, NULL) != CL_SUCCESS ||
        !(svm & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER)) {
        snprintf(err, cap, "OpenCL device %d (%s) has no coarse-grained buffer SVM", index,
                 info->name);
        return AH_ERR_UNAVAILABLE;
    }
    return AH_OK;
}

typedef struct cl_timer {
    void *stream;
    cl_event ev;
} cl_timer;

/* cl_khr_command_buffer's entry points (per platform), the ones the
 * extension's 0.9.0 (PoCL 3.1) and 1.0 (Intel's CPU runtime) share. */
typedef struct cl_cmdbuf_fns {
    clCreateCommandBufferKHR_fn create;
    clFinalizeCommandBufferKHR_fn finalize;
    clReleaseCommandBufferKHR_fn release;
    clEnqueueCommandBufferKHR_fn enqueue;
    clCommandNDRangeKernelKHR_fn ndrange;
    cl_command_buffer_flags_khr flags; /* simultaneous use where offered */
} cl_cmdbuf_fns;

/* A graph's launches run kernel objects of its own, created for each
 * recorded launch: PoCL 3.1 reads a recorded kernel's arguments when the
 * command buffer runs, not when the launch was recorded, so a launch on
 * the shared kernel object in between (an eager forward between replays)
 * would change what a replay computes. */
#define CL_GRAPH_KERNELS 8

/* A stream being recorded, or a recorded graph. */
typedef struct cl_rec {
    cl_command_queue q; /* the queue it was recorded on */
    cl_command_buffer_khr cb;
    cl_kernel ks[CL_GRAPH_KERNELS];
    int n_ks;
} cl_rec;

struct xpu_graph {
    cl_rec r;
};

struct xpu_dev {
    cl_context ctx;
    cl_device_id dev;
    cl_command_queue q; /* the NULL stream */
    cl_program prog[XPU_N_MODULES + 1];
    cl_kernel k[XPU_K_COUNT];
    pthread_mutex_t mu; /* kernel arguments and launches; timers */
    cl_timer timers[8];
    cl_cmdbuf_fns cb; /* create NULL: no cl_khr_command_buffer */
    cl_rec rec[8];    /* streams being recorded */
    const char *how;  /* which program form was built */
};

static void rec_release(xpu_dev *d, cl_rec *r)
{
    for (int i = 0; i < r->n_ks; i++) cl.clReleaseKernel(r->ks[i]);
    if (r->cb) d->cb.release(r->cb);
    memset(r, 0, sizeof *r);
}

static void cl_close(xpu_dev *d)
{
    if (!d) return;
    for (int i = 0; i < XPU_K_COUNT; i++)
        if (d->k[i]) cl.clReleaseKernel(d->k[i]);
    for (int i = 0; i < XPU_N_MODULES + 1; i++)
        if (d->prog[i]) cl.clReleaseProgram(d->prog[i]);
    for (int i = 0; i < 8; i++) {
        if (d->timers[i].ev) cl.clReleaseEvent(d->timers[i].ev);
        rec_release(d, &d->rec[i]);
    }
    if (d->q) cl.clReleaseCommandQueue(d->q);
    if (d->ctx) cl.clReleaseContext(d->ctx);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* The Intel module is SPIR-V only: discovery offers its tiers only to a
 * device that takes SPIR-V. */
static ah_status build_one(xpu_dev *d, xpu_kernels kern, int m, char *err, size_t cap)
{
    cl_int rc = CL_SUCCESS;
    const char *opts = "";
    if (takes_spirv(d->dev)) {
        const xpu_blob *b = xpu_module_spirv(kern, m);
        d->prog[m] = cl.clCreateProgramWithIL(d->ctx, b->data, b->size, &rc);
        d->how = "SPIR-V";
    } else if (has_ext(d->dev, "cl_khr_spir")) {
        const unsigned char *bin = xpu_spirbc[m].data;
        size_t len = xpu_spirbc[m].size;
        cl_int st = 0;
        d->prog[m] = cl.clCreateProgramWithBinary(d->ctx, 1, &d->dev, &len, &bin, &st, &rc);
        opts = "-x spir -spir-std=1.2";
        d->how = "SPIR 1.2 bitcode (round-tripped from the SPIR-V)";
    } else {
        const char *src = (const char *)xpu_source[m].data;
        size_t len = xpu_source[m].size;
        d->prog[m] = cl.clCreateProgramWithSource(d->ctx, 1, &src, &len, &rc);
        opts = "-cl-std=CL1.2";
        d->how = "OpenCL C source";
    }
    if (!d->prog[m] || rc != CL_SUCCESS) {
        snprintf(err, cap, "creating the OpenCL program from %s failed (%d)", d->how, (int)rc);
        return AH_ERR_DEVICE;
    }
    rc = cl.clBuildProgram(d->prog[m], 1, &d->dev, opts, NULL, NULL);
    if (rc != CL_SUCCESS) {
        char log[512] = "";
        cl.clGetProgramBuildInfo(d->prog[m], d->dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log,
                                 NULL);
        snprintf(err, cap, "building the OpenCL program from %s failed (%d): %s", d->how, (int)rc,
                 log);
        return AH_ERR_DEVICE;
    }
    return AH_OK;
}

static void load_cmdbuf(xpu_dev *d, cl_platform_id plat)
{
    if (!has_ext(d->dev, "cl_khr_command_buffer")) return;
    cl_cmdbuf_fns f = {0};
#define CB_FN(field, name) \
    *(void **)&f.field = cl.clGetExtensionFunctionAddressForPlatform(plat, name)
    CB_FN(create, "clCreateCommandBufferKHR");
    CB_FN(finalize, "clFinalizeCommandBufferKHR");
    CB_FN(release, "clReleaseCommandBufferKHR");
    CB_FN(enqueue, "clEnqueueCommandBufferKHR");
    CB_FN(ndrange, "clCommandNDRangeKernelKHR");
#undef CB_FN
    if (!f.create || !f.finalize || !f.release || !f.enqueue || !f.ndrange) return;
    cl_device_command_buffer_capabilities_khr caps = 0;
    cl.clGetDeviceInfo(d->dev, CL_DEVICE_COMMAND_BUFFER_CAPABILITIES_KHR, sizeof caps, &caps, NULL);
    if (caps & CL_COMMAND_BUFFER_CAPABILITY_SIMULTANEOUS_USE_KHR)
        f.flags = CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR;
    d->cb = f;
}

static ah_status cl_open(int index, xpu_kernels kern, xpu_dev **out, char *err, size_t cap)
{
    ah_status s;
    xpu_dev *d = xpu_open_begin(cl_discover, index, sizeof *d, &s, err, cap);
    *out = NULL;
    if (!d) return s;
    pthread_mutex_init(&d->mu, NULL);
    cl_platform_id plat;
    uint32_t n;
    cl_find(index, &d->dev, &plat, &n, err, cap);
    cl_int rc = 0;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plat, 0};
    d->ctx = cl.clCreateContext(props, 1, &d->dev, NULL, NULL, &rc);
    if (!d->ctx) {
        snprintf(err, cap, "clCreateContext failed (%d)", (int)rc);
        cl_close(d);
        return AH_ERR_DEVICE;
    }
    cl_queue_properties qp[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
    d->q = cl.clCreateCommandQueueWithProperties(d->ctx, d->dev, qp, &rc);
    if (!d->q) {
        snprintf(err, cap, "clCreateCommandQueueWithProperties failed (%d)", (int)rc);
        cl_close(d);
        return AH_ERR_DEVICE;
    }
    for (int m = 0; m < xpu_modules_of(kern); m++)
        if ((s = build_one(d, kern, m, err, cap)) != AH_OK) {
            cl_close(d);
            return s;
        }
    for (int k = 0; k < XPU_K_COUNT; k++) {
        if (!xpu_kernel_present(kern, k)) continue;
        d->k[k] = cl.clCreateKernel(d->prog[xpu_kernel_module[k]], xpu_kernel_names[k], &rc);
        if (!d->k[k]) {
            snprintf(err, cap, "kernel %s not found in the program (%d)", xpu_kernel_names[k],
                     (int)rc);
            cl_close(d);
            return AH_ERR_DEVICE;
        }
    }
    load_cmdbuf(d, plat);
    *out = d;
    return AH_OK;
}

static cl_command_queue queue_of(xpu_dev *d, void *stream)
{
    return stream ? (cl_command_queue)stream : d->q;
}

static ah_status cl_alloc(xpu_dev *d, size_t bytes, void **ptr, char *err, size_t cap)
{
    *ptr = cl.clSVMAlloc(d->ctx, CL_MEM_READ_WRITE, bytes ? bytes : 64, 64);
    if (*ptr) return AH_OK;
    snprintf(err, cap, "clSVMAlloc of %zu bytes failed", bytes);
    return AH_ERR_OUT_OF_MEMORY;
}

static void cl_free(xpu_dev *d, void *ptr)
{
    if (!ptr) return;
    /* the memory may still be in use by enqueued work: drain first */
    cl.clFinish(d->q);
    cl.clSVMFree(d->ctx, ptr);
}

static ah_status cl_copy(xpu_dev *d, void *stream, void *dst, const void *src, size_t bytes,
                         char *err, size_t cap)
{
    if (!bytes) return AH_OK;
    cl_int rc = cl.clEnqueueSVMMemcpy(queue_of(d, stream), CL_TRUE, dst, src, bytes, 0, NULL, NULL);
    if (rc == CL_SUCCESS) return AH_OK;
    snprintf(err, cap, "clEnqueueSVMMemcpy of %zu bytes failed (%d)", bytes, (int)rc);
    return AH_ERR_DEVICE;
}

static ah_status cl_sync(xpu_dev *d, void *stream, char *err, size_t cap)
{
    cl_int rc = cl.clFinish(queue_of(d, stream));
    if (rc == CL_SUCCESS) return AH_OK;
    snprintf(err, cap, "clFinish failed (%d)", (int)rc);
    return AH_ERR_DEVICE;
}

static ah_status cl_stream_create(xpu_dev *d, void **stream, char *err, size_t cap)
{
    cl_int rc = 0;
    cl_queue_properties qp[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
    cl_command_queue q = cl.clCreateCommandQueueWithProperties(d->ctx, d->dev, qp, &rc);
    *stream = q;
    if (q) return AH_OK;
    snprintf(err, cap, "creating a command queue failed (%d)", (int)rc);
    return AH_ERR_DEVICE;
}

static void cl_stream_destroy(xpu_dev *d, void *stream)
{
    (void)d;
    if (!stream) return;
    cl.clFinish((cl_command_queue)stream);
    cl.clReleaseCommandQueue((cl_command_queue)stream);
}

/* The recording on queue q, or NULL (d->mu held). */
static cl_rec *recording(xpu_dev *d, cl_command_queue q)
{
    for (int i = 0; i < 8; i++)
        if (d->rec[i].cb && d->rec[i].q == q) return &d->rec[i];
    return NULL;
}

/* Foreign host memory (a CPU device) is wrapped in a CL_MEM_USE_HOST_PTR
 * buffer for the launch; a blocking map of each written one after the
 * kernel makes the stores visible in the host memory, and the launch
 * completes before it returns. */
static ah_status cl_launch(xpu_dev *d, void *stream, int k, uint32_t gx, uint32_t gy, uint32_t lx,
                           const xpu_arg *args, int n_args, char *err, size_t cap)
{
    if (!gx || !gy) return AH_OK;
    cl_command_queue q = queue_of(d, stream);
    cl_mem wrap[64];
    int n_wrap = 0, host = 0;
    pthread_mutex_lock(&d->mu);
    cl_rec *rec = recording(d, q);
    cl_kernel kern = d->k[k];
    cl_int rc = CL_SUCCESS;
    if (rec && rec->n_ks == CL_GRAPH_KERNELS) {
        pthread_mutex_unlock(&d->mu);
        snprintf(err, cap, "a graph records at most %d launches", CL_GRAPH_KERNELS);
        return AH_ERR_UNSUPPORTED;
    }
    if (rec) {
        kern = cl.clCreateKernel(d->prog[xpu_kernel_module[k]], xpu_kernel_names[k], &rc);
        if (kern) rec->ks[rec->n_ks++] = kern;
    }
    for (int i = 0; i < n_args && rc == CL_SUCCESS; i++) {
        if (rec && args[i].is_ptr && args[i].host_bytes) {
            pthread_mutex_unlock(&d->mu);
            snprintf(err, cap,
                     "%s: argument %d is host memory the plugin did not allocate, which a graph "
                     "cannot record (each launch wraps it anew)",
                     xpu_kernel_names[k], i);
            return AH_ERR_INVALID_ARGUMENT;
        }
        if (args[i].is_ptr && args[i].host_bytes && n_wrap < 64) {
            cl_mem m = cl.clCreateBuffer(d->ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR,
                                         args[i].host_bytes, *(void *const *)args[i].val, &rc);
            if (!m) break;
            wrap[n_wrap++] = m;
            host = 1;
            rc = cl.clSetKernelArg(kern, (cl_uint)i, sizeof m, &m);
        } else {
            rc = args[i].is_ptr
                     ? cl.clSetKernelArgSVMPointer(kern, (cl_uint)i, *(void *const *)args[i].val)
                     : cl.clSetKernelArg(kern, (cl_uint)i, args[i].size, args[i].val);
        }
    }
    const size_t l = lx ? lx : XPU_GROUP;
    const size_t global[2] = {(gx + l - 1) / l * l, gy}, local[2] = {l, 1};
    if (rc == CL_SUCCESS && rec)
        rc = d->cb.ndrange(rec->cb, NULL, NULL, kern, 2, NULL, global, local, 0, NULL, NULL, NULL);
    else if (rc == CL_SUCCESS)
        rc = cl.clEnqueueNDRangeKernel(q, kern, 2, NULL, global, local, 0, NULL, NULL);
    for (int i = 0, w = 0; host && rc == CL_SUCCESS && i < n_args; i++) {
        if (!args[i].is_ptr || !args[i].host_bytes) continue;
        cl_mem m = wrap[w++];
        if (!args[i].writes) continue;
        void *p = cl.clEnqueueMapBuffer(q, m, CL_TRUE, CL_MAP_READ, 0, args[i].host_bytes, 0, NULL,
                                        NULL, &rc);
        if (p) rc = cl.clEnqueueUnmapMemObject(q, m, p, 0, NULL, NULL);
    }
    if (host && rc == CL_SUCCESS) rc = cl.clFinish(q);
    for (int i = 0; i < n_wrap; i++) cl.clReleaseMemObject(wrap[i]);
    pthread_mutex_unlock(&d->mu);
    if (rc == CL_SUCCESS) return AH_OK;
    snprintf(err, cap, "launching %s failed (%d)", xpu_kernel_names[k], (int)rc);
    return AH_ERR_DEVICE;
}

static ah_status cl_timer_start(xpu_dev *d, void *stream, char *err, size_t cap)
{
    cl_event ev = NULL;
    cl_int rc = cl.clEnqueueMarkerWithWaitList(queue_of(d, stream), 0, NULL, &ev);
    if (rc != CL_SUCCESS) {
        snprintf(err, cap, "clEnqueueMarkerWithWaitList failed (%d)", (int)rc);
        return AH_ERR_DEVICE;
    }
    pthread_mutex_lock(&d->mu);
    int slot = 0;
    for (int i = 0; i < 8; i++)
        if (d->timers[i].stream == stream && d->timers[i].ev) slot = i, i = 8;
        else if (!d->timers[i].ev) slot = i;
    if (d->timers[slot].ev) cl.clReleaseEvent(d->timers[slot].ev);
    d->timers[slot].stream = stream;
    d->timers[slot].ev = ev;
    pthread_mutex_unlock(&d->mu);
    return AH_OK;
}

static ah_status cl_timer_stop(xpu_dev *d, void *stream, float *ms, char *err, size_t cap)
{
    *ms = 0;
    cl_event e0 = NULL, e1 = NULL;
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < 8; i++)
        if (d->timers[i].ev && d->timers[i].stream == stream) {
            e0 = d->timers[i].ev;
            d->timers[i].ev = NULL;
            break;
        }
    pthread_mutex_unlock(&d->mu);
    if (!e0) {
        snprintf(err, cap, "timer_stop without timer_start on this stream");
        return AH_ERR_INVALID_ARGUMENT;
    }
    cl_int rc = cl.clEnqueueMarkerWithWaitList(queue_of(d, stream), 0, NULL, &e1);
    if (rc == CL_SUCCESS) rc = cl.clWaitForEvents(1, &e1);
    cl_ulong t0 = 0, t1 = 0;
    if (rc == CL_SUCCESS)
        rc = cl.clGetEventProfilingInfo(e0, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL);
    if (rc == CL_SUCCESS)
        rc = cl.clGetEventProfilingInfo(e1, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    cl.clReleaseEvent(e0);
    if (e1) cl.clReleaseEvent(e1);
    if (rc != CL_SUCCESS) {
        snprintf(err, cap, "reading the marker timestamps failed (%d)", (int)rc);
        return AH_ERR_DEVICE;
    }
    *ms = (float)((double)(t1 - t0) * 1e-6);
    return AH_OK;
}

static ah_status cl_graph_begin(xpu_dev *d, void *stream, char *err, size_t cap)
{
    if (!d->cb.create) {
        snprintf(err, cap, "this OpenCL device has no cl_khr_command_buffer: no graphs");
        return AH_ERR_UNSUPPORTED;
    }
    cl_command_queue q = queue_of(d, stream);
    const cl_command_buffer_properties_khr props[] = {CL_COMMAND_BUFFER_FLAGS_KHR, d->cb.flags, 0};
    cl_int rc = CL_SUCCESS;
    ah_status st = AH_OK;
    pthread_mutex_lock(&d->mu);
    int slot = -1;
    for (int i = 0; i < 8; i++)
        if (!d->rec[i].cb && slot < 0) slot = i;
    if (recording(d, q)) {
        snprintf(err, cap, "the stream is already being captured");
        st = AH_ERR_INVALID_ARGUMENT;
    } else if (slot < 0) {
        snprintf(err, cap, "8 streams are being captured already");
        st = AH_ERR_UNSUPPORTED;
    } else {
        d->rec[slot].cb = d->cb.create(1, &q, props, &rc);
        d->rec[slot].q = q;
        if (!d->rec[slot].cb) {
            snprintf(err, cap, "clCreateCommandBufferKHR failed (%d)", (int)rc);
            st = AH_ERR_DEVICE;
        }
    }
    pthread_mutex_unlock(&d->mu);
    return st;
}

static ah_status cl_graph_end(xpu_dev *d, void *stream, xpu_graph **out, char *err, size_t cap)
{
    cl_command_queue q = queue_of(d, stream);
    xpu_graph *g = calloc(1, sizeof *g);
    *out = NULL;
    pthread_mutex_lock(&d->mu);
    cl_rec *rec = recording(d, q);
    if (rec && g) g->r = *rec, memset(rec, 0, sizeof *rec);
    else if (rec) rec_release(d, rec);
    pthread_mutex_unlock(&d->mu);
    if (!rec) {
        free(g);
        snprintf(err, cap, "graph_end without graph_begin on this stream");
        return AH_ERR_INVALID_ARGUMENT;
    }
    cl_int rc = g ? d->cb.finalize(g->r.cb) : CL_OUT_OF_HOST_MEMORY;
    if (rc != CL_SUCCESS) {
        if (g) rec_release(d, &g->r);
        free(g);
        snprintf(err, cap, "clFinalizeCommandBufferKHR failed (%d)", (int)rc);
        return AH_ERR_DEVICE;
    }
    *out = g;
    return AH_OK;
}

static ah_status cl_graph_launch(xpu_dev *d, xpu_graph *g, void *stream, char *err, size_t cap)
{
    cl_command_queue q = queue_of(d, stream);
    /* on its own queue without naming it: the extension's 0.9.0 takes no
     * other queue */
    cl_int rc = q == g->r.q ? d->cb.enqueue(0, NULL, g->r.cb, 0, NULL, NULL)
                            : d->cb.enqueue(1, &q, g->r.cb, 0, NULL, NULL);
    if (rc == CL_SUCCESS) return AH_OK;
    snprintf(err, cap, "clEnqueueCommandBufferKHR failed (%d)", (int)rc);
    return AH_ERR_DEVICE;
}

static void cl_graph_destroy(xpu_dev *d, xpu_graph *g)
{
    if (!g) return;
    rec_release(d, &g->r);
    free(g);
}

const xpu_rt xpu_rt_opencl = {
    "opencl",        cl_discover,      cl_open,       cl_close,         cl_alloc,
    cl_free,         cl_copy,          cl_sync,       cl_stream_create, cl_stream_destroy,
    cl_launch,       cl_timer_start,   cl_timer_stop, cl_graph_begin,   cl_graph_end,
    cl_graph_launch, cl_graph_destroy,
};
