/*
 * A fake HIP runtime (tests only), built as libamdhip64.so in a directory
 * of its own that ra_graph's LD_LIBRARY_PATH names, so rocm_aiter's host
 * side (probe, module and kernel lookup, plan, launch, stream capture and
 * graph replay) runs without an AMD GPU. One device of the gfx target
 * fake_hip_set_arch names; device memory is host memory and copies are
 * memcpy, so a test reads what a kernel would read. Kernels do not run:
 * each launch is recorded (kernel name, grid, a copy of its parameter
 * block), into the stream's capture while one is open, else into the log
 * of executed launches; a graph launch appends its captured launches to
 * that log.
 */
#include <stdlib.h>
#include <string.h>

#include "fake_hip.h"

static char arch[32] = "gfx942:sramecc+:xnack-";
static int live, mallocs;
static fake_hip_launch executed[FAKE_HIP_MAX_LAUNCHES];
static int n_executed;

struct fake_graph {
    fake_hip_launch launch[FAKE_HIP_MAX_LAUNCHES];
    int n;
};
static struct fake_graph *capturing; /* one stream capture at a time */

void fake_hip_set_arch(const char *gcn_arch) { strncpy(arch, gcn_arch, sizeof arch - 1); }
int fake_hip_live(void) { return live; }
int fake_hip_mallocs(void) { return mallocs; }
int fake_hip_executed(const fake_hip_launch **log)
{
    *log = executed;
    return n_executed;
}

hipError_t hipInit(unsigned flags) { return flags ? hipErrorInvalidValue : hipSuccess; }
hipError_t hipDriverGetVersion(int *v)
{
    *v = 50223000;
    return hipSuccess;
}
hipError_t hipRuntimeGetVersion(int *v) { return hipDriverGetVersion(v); }
hipError_t hipGetDeviceCount(int *n)
{
    *n = 1;
    return hipSuccess;
}
hipError_t hipDeviceGet(hipDevice_t *d, int ordinal)
{
    *d = ordinal;
    return ordinal == 0 ? hipSuccess : hipErrorInvalidDevice;
}
hipError_t hipDeviceGetName(char *name, int len, hipDevice_t d)
{
    strncpy(name, "fake AMD Instinct", (size_t)len);
    return d == 0 ? hipSuccess : hipErrorInvalidDevice;
}
hipError_t hipDeviceGetAttribute(int *v, hipDeviceAttribute_t a, int d)
{
    (void)a;
    *v = 0;
    return d == 0 ? hipSuccess : hipErrorInvalidDevice;
}
hipError_t hipGetDeviceProperties(hipDeviceProp_t *p, int d)
{
    memset(p, 0, sizeof *p);
    strcpy(p->name, "fake AMD Instinct");
    strncpy(p->gcnArchName, arch, sizeof p->gcnArchName - 1);
    p->multiProcessorCount = 304;
    p->totalGlobalMem = (size_t)192 << 30;
    return d == 0 ? hipSuccess : hipErrorInvalidDevice;
}
hipError_t hipDeviceTotalMem(size_t *b, hipDevice_t d)
{
    *b = (size_t)192 << 30;
    return d == 0 ? hipSuccess : hipErrorInvalidDevice;
}
hipError_t hipSetDevice(int d) { return d == 0 ? hipSuccess : hipErrorInvalidDevice; }
hipError_t hipDevicePrimaryCtxRetain(hipCtx_t *c, hipDevice_t d)
{
    *c = NULL;
    return d == 0 ? hipSuccess : hipErrorInvalidDevice;
}
hipError_t hipDevicePrimaryCtxRelease(hipDevice_t d)
{
    return d == 0 ? hipSuccess : hipErrorInvalidDevice;
}
hipError_t hipCtxSetCurrent(hipCtx_t c)
{
    (void)c;
    return hipSuccess;
}

/* A module is the code object; a function is its kernel's name. */
hipError_t hipModuleLoadData(hipModule_t *m, const void *image)
{
    static const unsigned char elf[4] = {0x7f, 'E', 'L', 'F'};
    if (memcmp(image, elf, 4) != 0) return hipErrorInvalidImage;
    *m = (hipModule_t)(uintptr_t)image;
    return hipSuccess;
}
hipError_t hipModuleUnload(hipModule_t m)
{
    (void)m;
    return hipSuccess;
}
hipError_t hipModuleGetFunction(hipFunction_t *f, hipModule_t m, const char *name)
{
    (void)m;
    static char names[256][64];
    static int n;
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name)) {
            *f = (hipFunction_t)names[i];
            return hipSuccess;
        }
    if (n == 256 || strlen(name) >= 64) return hipErrorNotFound;
    strcpy(names[n], name);
    *f = (hipFunction_t)names[n++];
    return hipSuccess;
}

/* The size of a rocm_aiter kernel's one parameter block. */
static size_t param_size(const char *name)
{
    if (!strncmp(name, "ra_write_kv", 11)) return sizeof(ra_kv_params);
    if (!strncmp(name, "ra_merge", 8)) return sizeof(ra_merge_params);
    return sizeof(ra_attn_params);
}

hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned gx, unsigned gy, unsigned gz,
                                 unsigned bx, unsigned by, unsigned bz, unsigned lds, hipStream_t s,
                                 void **args, void **extra)
{
    (void)lds, (void)s, (void)extra;
    fake_hip_launch *l = capturing ? &capturing->launch[capturing->n] : &executed[n_executed];
    if ((capturing ? capturing->n : n_executed) == FAKE_HIP_MAX_LAUNCHES)
        return hipErrorLaunchFailure;
    memset(l, 0, sizeof *l);
    strcpy(l->kernel, (const char *)f);
    l->grid[0] = gx, l->grid[1] = gy, l->grid[2] = gz;
    l->block[0] = bx, l->block[1] = by, l->block[2] = bz;
    memcpy(&l->params, args[0], param_size(l->kernel));
    if (capturing) capturing->n++;
    else n_executed++;
    return hipSuccess;
}

hipError_t hipMalloc(void **p, size_t n)
{
    *p = malloc(n);
    if (!*p) return hipErrorOutOfMemory;
    live++, mallocs++;
    return hipSuccess;
}
hipError_t hipFree(void *p)
{
    if (p) live--;
    free(p);
    return hipSuccess;
}
hipError_t hipHostMalloc(void **p, size_t n, unsigned flags)
{
    (void)flags;
    return hipMalloc(p, n);
}
hipError_t hipHostFree(void *p) { return hipFree(p); }
hipError_t hipMemcpyAsync(void *d, const void *src, size_t n, hipMemcpyKind k, hipStream_t s)
{
    (void)k, (void)s;
    if (capturing) return hipErrorStreamCaptureUnsupported; /* the plugin copies before capture */
    memmove(d, src, n);
    return hipSuccess;
}
hipError_t hipMemcpyHtoDAsync(hipDeviceptr_t d, void *src, size_t n, hipStream_t s)
{
    return hipMemcpyAsync(d, src, n, hipMemcpyHostToDevice, s);
}
hipError_t hipMemcpyDtoHAsync(void *d, hipDeviceptr_t src, size_t n, hipStream_t s)
{
    return hipMemcpyAsync(d, src, n, hipMemcpyDeviceToHost, s);
}
hipError_t hipMemcpyDtoDAsync(hipDeviceptr_t d, hipDeviceptr_t src, size_t n, hipStream_t s)
{
    return hipMemcpyAsync(d, src, n, hipMemcpyDeviceToDevice, s);
}
hipError_t hipMemcpy2DAsync(void *d, size_t dpitch, const void *src, size_t spitch, size_t width,
                            size_t height, hipMemcpyKind k, hipStream_t s)
{
    if (width > dpitch || width > spitch) return hipErrorInvalidValue;
    for (size_t r = 0; r < height; r++) {
        hipError_t e =
            hipMemcpyAsync((char *)d + r * dpitch, (const char *)src + r * spitch, width, k, s);
        if (e != hipSuccess) return e;
    }
    return hipSuccess;
}

hipError_t hipStreamCreateWithFlags(hipStream_t *s, unsigned flags)
{
    (void)flags;
    static char streams[16];
    static int n;
    *s = (hipStream_t)&streams[n++ % 16];
    return hipSuccess;
}
hipError_t hipStreamDestroy(hipStream_t s)
{
    (void)s;
    return hipSuccess;
}
hipError_t hipStreamSynchronize(hipStream_t s)
{
    (void)s;
    return capturing ? hipErrorStreamCaptureUnsupported : hipSuccess;
}
hipError_t hipEventCreateWithFlags(hipEvent_t *e, unsigned flags)
{
    (void)flags;
    static char events[64];
    static int n;
    *e = (hipEvent_t)&events[n++ % 64];
    return hipSuccess;
}
hipError_t hipEventDestroy(hipEvent_t e)
{
    (void)e;
    return hipSuccess;
}
hipError_t hipEventRecord(hipEvent_t e, hipStream_t s)
{
    (void)e, (void)s;
    return hipSuccess;
}
hipError_t hipStreamWaitEvent(hipStream_t s, hipEvent_t e, unsigned flags)
{
    (void)s, (void)e, (void)flags;
    return hipSuccess;
}
hipError_t hipEventSynchronize(hipEvent_t e)
{
    (void)e;
    return hipSuccess;
}
hipError_t hipEventElapsedTime(float *ms, hipEvent_t a, hipEvent_t b)
{
    (void)a, (void)b;
    *ms = 0;
    return hipSuccess;
}

hipError_t hipStreamBeginCapture(hipStream_t s, hipStreamCaptureMode mode)
{
    (void)mode;
    if (!s || capturing) return hipErrorIllegalState;
    capturing = calloc(1, sizeof *capturing);
    return capturing ? hipSuccess : hipErrorOutOfMemory;
}
hipError_t hipStreamEndCapture(hipStream_t s, hipGraph_t *g)
{
    (void)s;
    if (!capturing) return hipErrorIllegalState;
    *g = (hipGraph_t)capturing;
    capturing = NULL;
    return hipSuccess;
}
hipError_t hipGraphInstantiateWithFlags(hipGraphExec_t *x, hipGraph_t g, unsigned long long flags)
{
    (void)flags;
    struct fake_graph *copy = malloc(sizeof *copy);
    if (!copy) return hipErrorOutOfMemory;
    memcpy(copy, g, sizeof *copy);
    *x = (hipGraphExec_t)copy;
    return hipSuccess;
}
hipError_t hipGraphLaunch(hipGraphExec_t x, hipStream_t s)
{
    (void)s;
    const struct fake_graph *g = (const struct fake_graph *)x;
    if (n_executed + g->n > FAKE_HIP_MAX_LAUNCHES) return hipErrorLaunchFailure;
    memcpy(&executed[n_executed], g->launch, sizeof *g->launch * (size_t)g->n);
    n_executed += g->n;
    return hipSuccess;
}
hipError_t hipGraphExecDestroy(hipGraphExec_t x)
{
    free(x);
    return hipSuccess;
}
hipError_t hipGraphDestroy(hipGraph_t g)
{
    free(g);
    return hipSuccess;
}
const char *hipGetErrorString(hipError_t e) { return e == hipSuccess ? "no error" : "fake error"; }
