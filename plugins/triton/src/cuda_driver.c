/*
 * Resolves the CUDA driver API at run time (see cuda_driver.h). Keeping the
 * driver out of the link means the host can scan this plugin anywhere, and
 * a missing driver is a reason in the probe rather than a failed dlopen.
 */
#include "cuda_driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static ah_cu_api g_cu;
static const char *g_why;
static char g_why_buf[384];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void cu_load_once(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(g_why_buf, sizeof g_why_buf, "libcuda.so.1 not found: %s", e ? e : "?");
        g_why = g_why_buf;
        return;
    }
#define AH_CU_RESOLVE(ret, sym, field, params) \
    *(void **)&g_cu.field = dlsym(lib, #sym); \
    if (!g_cu.field) { \
        snprintf(g_why_buf, sizeof g_why_buf, "libcuda.so.1 lacks %s (driver too old)", #sym); \
        g_why = g_why_buf; \
        dlclose(lib); \
        return; \
    }
    AH_CU_FUNCS(AH_CU_RESOLVE)
#undef AH_CU_RESOLVE
    g_cu.lib = lib;
}

const ah_cu_api *tk_cu_load(const char **why)
{
    pthread_once(&g_once, cu_load_once);
    if (!g_cu.lib) {
        if (why) *why = g_why;
        return NULL;
    }
    return &g_cu;
}

const char *tk_cu_errstr(const ah_cu_api *cu, CUresult r)
{
    const char *s = NULL;
    if (cu && cu->error_string && cu->error_string(r, &s) == CUDA_SUCCESS && s) return s;
    return "unknown CUDA error";
}
