/*
 * Host stand-in for cpu_amx's drivers (see host_stub.h). The CPU facts follow
 * the same rule as the real host: a feature counts only when CPUID has it and
 * XCR0 shows the OS saves its state; AMX also needs the Linux permission
 * request (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA) to succeed.
 */
#include "host_stub.h"

#include <cpuid.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <attnhost/plugin_util.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static void stub_log(const ah_host_services *h, ah_log_level lv, const char *msg)
{
    (void)h;
    if (lv <= AH_LOG_WARN) fprintf(stderr, "cpu_amx: %s\n", msg);
}
static void *stub_alloc(const ah_host_services *h, size_t n)
{
    (void)h;
    return malloc(n ? n : 1);
}
static void stub_free(const ah_host_services *h, void *p)
{
    (void)h;
    free(p);
}
/* The driver's value of key, else the plugin's declared default. The
 * drivers set only values the key's declaration accepts. */
static const ah_config_key *stub_key(const ah_host_services *svc, const char *key, const char **text)
{
    const stub_host *h = (const stub_host *)svc;
    const ah_caps *c = h->desc ? h->desc->caps : NULL;
    const ah_config_key *k = NULL;
    for (uint32_t i = 0; c && i < c->n_config_keys; i++)
        if (strcmp(c->config_keys[i].name, key) == 0) k = &c->config_keys[i];
    if (!k) return NULL;
    *text = k->default_value;
    for (int i = 0; i < h->n_keys; i++)
        if (strcmp(h->keys[i], key) == 0) *text = h->vals[i];
    return k;
}

static int64_t stub_config_int(const ah_host_services *svc, const char *key)
{
    const char *t;
    const ah_config_key *k = stub_key(svc, key, &t);
    if (!k) return 0;
    if (k->type == AH_KEY_BOOL) return strcmp(t, "true") == 0 || strcmp(t, "1") == 0;
    if (k->type != AH_KEY_ENUM) return strtoll(t, NULL, 10);
    int64_t idx = 0;
    size_t n = strlen(t);
    for (const char *c = k->choices; c; c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL, idx++)
        if (strncmp(c, t, n) == 0 && (c[n] == '|' || c[n] == '\0')) return idx;
    return 0;
}

static double stub_config_float(const ah_host_services *svc, const char *key)
{
    const char *t;
    return stub_key(svc, key, &t) ? strtod(t, NULL) : 0;
}

static const char *stub_config_str(const ah_host_services *svc, const char *key)
{
    const char *t;
    return stub_key(svc, key, &t) ? t : NULL;
}

void stub_host_set(stub_host *h, const char *key, const char *val)
{
    for (int i = 0; i < h->n_keys; i++)
        if (strcmp(h->keys[i], key) == 0) {
            h->vals[i] = val;
            return;
        }
    if (h->n_keys < 8) {
        h->keys[h->n_keys] = key;
        h->vals[h->n_keys++] = val;
    }
}

static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void cpu_facts(ah_hw_facts *f)
{
    unsigned a, b, c, d;
    uint32_t id = 0;
    memset(f, 0, sizeof *f);
    f->struct_size = sizeof *f;
    __cpuid(1, a, b, c, d);
    int osxsave = (c >> 27) & 1;
    if (c & (1u << 20)) id |= AH_ISA_SSE42;
    if (c & (1u << 28)) id |= AH_ISA_AVX;
    if (c & (1u << 12)) id |= AH_ISA_FMA;
    if (c & (1u << 29)) id |= AH_ISA_F16C;
    __cpuid_count(7, 0, a, b, c, d);
    if (b & (1u << 5)) id |= AH_ISA_AVX2;
    if (b & (1u << 16)) id |= AH_ISA_AVX512F;
    if (b & (1u << 17)) id |= AH_ISA_AVX512DQ;
    if (b & (1u << 30)) id |= AH_ISA_AVX512BW;
    if (b & (1u << 31)) id |= AH_ISA_AVX512VL;
    if (c & (1u << 11)) id |= AH_ISA_AVX512_VNNI;
    if (d & (1u << 23)) id |= AH_ISA_AVX512_FP16;
    if (d & (1u << 22)) id |= AH_ISA_AMX_BF16;
    if (d & (1u << 24)) id |= AH_ISA_AMX_TILE;
    if (d & (1u << 25)) id |= AH_ISA_AMX_INT8;
    __cpuid_count(7, 1, a, b, c, d);
    if (a & (1u << 5)) id |= AH_ISA_AVX512_BF16;
    if (a & (1u << 21)) id |= AH_ISA_AMX_FP16;
    f->cpu_isa_cpuid = id;
    uint32_t ok = id & AH_ISA_SSE42;
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    if ((xcr0 & 6) == 6) ok |= id & (AH_ISA_AVX | AH_ISA_AVX2 | AH_ISA_FMA | AH_ISA_F16C);
    if ((xcr0 & 0xe6) == 0xe6)
        ok |= id & (AH_ISA_AVX512F | AH_ISA_AVX512BW | AH_ISA_AVX512VL | AH_ISA_AVX512DQ |
                    AH_ISA_AVX512_VNNI | AH_ISA_AVX512_BF16 | AH_ISA_AVX512_FP16);
    if (id & AH_ISA_AMX_TILE) {
        if ((xcr0 & (3u << 17)) != (3u << 17))
            ah_strlcpy(f->amx_note, "XCR0 lacks the AMX tile state", sizeof f->amx_note);
        else if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
            ah_strlcpy(f->amx_note, "arch_prctl(ARCH_REQ_XCOMP_PERM) refused", sizeof f->amx_note);
        else
            ok |= id & (AH_ISA_AMX_TILE | AH_ISA_AMX_BF16 | AH_ISA_AMX_INT8 | AH_ISA_AMX_FP16);
    } else {
        ah_strlcpy(f->amx_note, "no AMX on this CPU", sizeof f->amx_note);
    }
    f->cpu_isa = ok;
    f->cpu_logical_cores = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
    f->memory_bytes = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGE_SIZE);
    unsigned brand[12];
    __cpuid(0x80000002, brand[0], brand[1], brand[2], brand[3]);
    __cpuid(0x80000003, brand[4], brand[5], brand[6], brand[7]);
    __cpuid(0x80000004, brand[8], brand[9], brand[10], brand[11]);
    char name[49];
    memcpy(name, brand, 48);
    name[48] = 0;
    ah_strlcpy(f->cpu_model, name, sizeof f->cpu_model);
}

int stub_host_init(stub_host *h, const char *so_path)
{
    memset(h, 0, sizeof *h);
    cpu_facts(&h->hw);
    h->svc.struct_size = sizeof h->svc;
    h->svc.abi_version = AH_ABI_VERSION;
    h->svc.log = stub_log;
    h->svc.alloc = stub_alloc;
    h->svc.free = stub_free;
    h->svc.config_int = stub_config_int;
    h->svc.config_float = stub_config_float;
    h->svc.config_str = stub_config_str;
    h->svc.hw = &h->hw;
    h->dl = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
    if (!h->dl) {
        fprintf(stderr, "dlopen %s: %s\n", so_path, dlerror());
        return -1;
    }
    ah_plugin_entry_fn entry = (ah_plugin_entry_fn)dlsym(h->dl, AH_PLUGIN_ENTRY_SYMBOL);
    const char *why = NULL;
    h->desc = entry ? entry(AH_ABI_VERSION, &h->svc, &why) : NULL;
    if (!h->desc) {
        fprintf(stderr, "plugin entry refused: %s\n", why ? why : "no entry symbol");
        return -1;
    }
    return 0;
}

void stub_tensor(DLTensor *t, void *data, ah_dtype dt, int ndim, int64_t *shape_storage,
                 const int64_t *shape)
{
    memset(t, 0, sizeof *t);
    t->data = data;
    t->device.device_type = kDLCPU;
    t->ndim = ndim;
    t->dtype = ah_dtype_to_dl(dt);
    memcpy(shape_storage, shape, (size_t)ndim * sizeof *shape);
    t->shape = shape_storage;
}
