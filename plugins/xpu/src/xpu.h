/*
 * xpu: attention on Intel GPUs through Level Zero, and on any OpenCL
 * device through OpenCL, with one set of kernels written in OpenCL C and
 * compiled to SPIR-V at build time. Both runtimes are loaded with dlopen
 * and sit behind one driver table (xpu_rt), so the plugin loads and probes
 * on a machine with neither.
 */
#ifndef XPU_H
#define XPU_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <attnhost/plugin.h>
#include <attnhost/plugin_util.h>

/* Kernels, in the order of xpu_kernel_names. XPU_K_ATTN_INTEL exists only
 * on a device opened with an Intel tier. */
enum {
    XPU_K_ATTN = 0,
    XPU_K_SPLIT_MERGE,
    XPU_K_WRITE_KV,
    XPU_K_MERGE_STATES,
    XPU_K_ATTN_MLA,
    XPU_K_ATTN_INTEL,
    XPU_K_COUNT
};
extern const char *const xpu_kernel_names[XPU_K_COUNT];
/* The module (program) each kernel lives in: 0 attn, 1 kv, 2 merge (the
 * portable tier, every device), 3 the Intel tier's attention. */
extern const int xpu_kernel_module[XPU_K_COUNT];
#define XPU_N_MODULES 3
#define XPU_MOD_INTEL 3

/* Embedded kernel binaries, generated at build time (kernels_embed.c). */
typedef struct xpu_blob {
    const unsigned char *data;
    size_t size;
} xpu_blob;
extern const xpu_blob xpu_spirv[XPU_N_MODULES]; /* SPIR-V 1.x modules */
extern const xpu_blob
    xpu_spirbc[XPU_N_MODULES]; /* the same, round-tripped to spir64 LLVM bitcode */
extern const xpu_blob xpu_source[XPU_N_MODULES]; /* OpenCL C, headers inlined */

/* The kernel tiers. The Intel tiers run attn_intel.cl with sub-groups of
 * 8 or 16 lanes: "subgroup" computes its matrix products with sub-group
 * shuffles (cl_intel_subgroups), "xmx" with the matrix engines
 * (cl_intel_subgroup_matrix_multiply_accumulate: dpas). */
typedef enum xpu_tier { XPU_TIER_PORTABLE = 0, XPU_TIER_SUBGROUP, XPU_TIER_XMX } xpu_tier;
extern const char *const xpu_tier_names[3];
/* The Intel tier's SPIR-V, one module per tier and sub-group size:
 * xpu_intel_spirv[xpu_intel_variant(tier, sg)]. */
#define XPU_N_INTEL 4
extern const xpu_blob xpu_intel_spirv[XPU_N_INTEL];
static inline int xpu_intel_variant(xpu_tier tier, int sg)
{
    return (tier == XPU_TIER_XMX ? 2 : 0) + (sg == 8 ? 1 : 0);
}

/* What a device is opened with: the tier and, for an Intel tier, its
 * sub-group size (8 or 16). */
typedef struct xpu_kernels {
    xpu_tier tier;
    int sg;
} xpu_kernels;

/* One kernel argument: a device pointer or a scalar of size bytes. A
 * pointer with host_bytes > 0 is host memory the plugin did not allocate
 * (a CPU device only, see plugin.c): the runtime wraps those bytes for the
 * launch and, with writes set, makes the kernel's stores visible there
 * before the launch returns. */
typedef struct xpu_arg {
    int is_ptr;
    uint32_t size;
    const void *val; /* the scalar, or the address of the pointer value */
    size_t host_bytes;
    int writes;
} xpu_arg;
#define XPU_PTR(p) ((xpu_arg){1, sizeof(void *), &(p), 0, 0})
#define XPU_VAL(v) ((xpu_arg){0, sizeof(v), &(v), 0, 0})
/* A tensor's pointer: its host extent when foreign (x: an xpu_ext). */
#define XPU_TPTR(p, x, w) ((xpu_arg){1, sizeof(void *), &(p), (x).foreign ? (x).bytes : 0, (w)})

/* What a tensor check learnt about a tensor's memory. */
typedef struct xpu_ext {
    size_t bytes; /* extent of the view from its data pointer */
    int foreign;  /* not from the plugin's mem_alloc */
} xpu_ext;

typedef enum xpu_runtime_id {
    XPU_RT_AUTO = 0,
    XPU_RT_LEVEL_ZERO = 1,
    XPU_RT_OPENCL = 2
} xpu_runtime_id;

/* What discovery found about one device. */
typedef struct xpu_devinfo {
    char name[128];
    char driver[64];
    int is_gpu; /* GPU (or accelerator), else a CPU device */
    /* what the Intel tiers need: sub-group sizes of 8 and 16 (bits 8 and
     * 16) with required sub-group sizes and SPIR-V, and the matrix
     * engines; 0 where the portable tier is all the device runs */
    uint32_t sg_sizes;
    int xmx;
    uint32_t compute_units;
    uint64_t memory;
    uint32_t count; /* devices of this runtime */
} xpu_devinfo;

typedef struct xpu_dev xpu_dev;     /* a runtime's open device */
typedef struct xpu_graph xpu_graph; /* launches recorded once, replayable */

/* The work-group of the portable kernels (XPU_GROUP x 1), on both
 * runtimes. Named, not left to the runtime: a work-item holds two
 * XPU_MAX_D float arrays (2 KB), and PoCL's CPU device runs a work-group
 * on one thread's stack with every work-item's private arrays in one
 * frame. Left to choose, PoCL takes groups of up to 4096 work-items (the
 * size it reports for the kernel) once a launch has 4096 per compute
 * unit, and such a frame (8.03 MB) overflows its threads' 8 MB stacks. */
#define XPU_GROUP 64

/* The driver table every runtime fills. All calls are thread-safe. err
 * receives the reason of a failure. */
typedef struct xpu_rt {
    const char *name;
    /* Discover device index without opening it (probe). */
    ah_status (*discover)(int index, xpu_devinfo *info, char *err, size_t cap);
    /* Open device index with the portable modules and, for an Intel tier,
     * the Intel module of that tier and sub-group size. */
    ah_status (*open)(int index, xpu_kernels kern, xpu_dev **out, char *err, size_t cap);
    void (*close)(xpu_dev *d);
    ah_status (*alloc)(xpu_dev *d, size_t bytes, void **ptr, char *err, size_t cap);
    void (*free)(xpu_dev *d, void *ptr);
    /* Blocking copy (host memory may be reused once it returns). */
    ah_status (*copy)(xpu_dev *d, void *stream, void *dst, const void *src, size_t bytes, char *err,
                      size_t cap);
    ah_status (*sync)(xpu_dev *d, void *stream, char *err, size_t cap);
    ah_status (*stream_create)(xpu_dev *d, void **stream, char *err, size_t cap);
    void (*stream_destroy)(xpu_dev *d, void *stream);
    /* Enqueue kernel k over gx x gy work-items in groups of lx x 1 (lx 0:
     * XPU_GROUP, gx rounded up to it; else gx is a multiple). */
    ah_status (*launch)(xpu_dev *d, void *stream, int k, uint32_t gx, uint32_t gy, uint32_t lx,
                        const xpu_arg *args, int n_args, char *err, size_t cap);
    ah_status (*timer_start)(xpu_dev *d, void *stream, char *err, size_t cap);
    ah_status (*timer_stop)(xpu_dev *d, void *stream, float *ms, char *err, size_t cap);
    /* Graphs: from graph_begin to graph_end the launches on stream are
     * recorded, with their arguments' values, into a graph instead of
     * running (copies, timers and synchronisation still run at once);
     * graph_launch runs a graph on a stream after what the stream holds.
     * Launches over foreign host memory cannot be recorded. */
    ah_status (*graph_begin)(xpu_dev *d, void *stream, char *err, size_t cap);
    ah_status (*graph_end)(xpu_dev *d, void *stream, xpu_graph **g, char *err, size_t cap);
    ah_status (*graph_launch)(xpu_dev *d, xpu_graph *g, void *stream, char *err, size_t cap);
    void (*graph_destroy)(xpu_dev *d, xpu_graph *g);
} xpu_rt;

/* rt_common.c: how many modules a device opened with kern builds, whether
 * kernel k is among them, and the SPIR-V module m is built from. */
int xpu_modules_of(xpu_kernels kern);
int xpu_kernel_present(xpu_kernels kern, int k);
const xpu_blob *xpu_module_spirv(xpu_kernels kern, int m);
/* The start of a runtime's open: device index discovered (a failure says
 * why in err), then a zeroed device of size bytes; NULL with *st set on a
 * failure. */
void *xpu_open_begin(ah_status (*discover)(int, xpu_devinfo *, char *, size_t), int index,
                     size_t size, ah_status *st, char *err, size_t cap);
/* "no <what>", or "<what> <index> does not exist (<n> of them)". */
ah_status xpu_no_device(char *err, size_t cap, const char *what, int index, uint32_t n);

extern const xpu_rt xpu_rt_opencl;
extern const xpu_rt xpu_rt_level_zero;

#endif
