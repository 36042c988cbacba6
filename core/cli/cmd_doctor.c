/*
 * attnhost doctor [--json] [--root DIR]: which plugin packages fit this
 * machine, which installed plugins cannot run here and why, and the
 * apt-get line.
 *
 * The devices are found without any plugin: the CPU from the host's hardware
 * facts (CPUID, XCR0, the AMX permission), NVIDIA GPUs from
 * /proc/driver/nvidia/gpus and /dev/nvidiaN (then, only when one is there,
 * libcuda.so.1: cuInit and the compute capability of each device), AMD GPUs
 * from /dev/kfd and the KFD topology under /sys/class/kfd, Intel GPUs from
 * the render nodes whose PCI vendor is 0x8086 under /sys/class/drm, and the
 * runtimes the GPU plugins dlopen by looking for their files. The table
 * below turns a device into plugin packages. It lives in the CLI on purpose:
 * the library (core/src) never names a plugin.
 *
 * What is installed comes from the host's scan (ah_host plugin states), so
 * an unpacked tree or --plugin-dir counts as installed as well as a package.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <attnhost/plugin_util.h>

#include "cli.h"

enum dev { DEV_CPU_X86, DEV_NVIDIA, DEV_AMD, DEV_INTEL, DEV_COUNT };
static const char *const dev_names[DEV_COUNT] = {"cpu", "nvidia", "amd", "intel"};

/* Device kind -> plugin package. One row per plugin a package ships. */
static const struct fit_rule {
    const char *package;
    const char *plugin; /* the plugin name the package's .so declares */
    enum dev dev;
    unsigned min_cc, max_cc; /* NVIDIA compute capability x10, 0: no bound */
    const char *archs;       /* AMD: gfx targets the plugin has binaries for, NULL: any */
    const char *needs;       /* what the plugin needs, in words */
} rules[] = {
    {"attnhost-plugin-cpu-amx", "cpu_amx", DEV_CPU_X86, 0, 0, NULL,
     "an x86-64 CPU (AMX, AVX-512-BF16, AVX-512, AVX2 or scalar kernels)"},
    {"attnhost-plugin-cuda-flashinfer", "cuda_flashinfer", DEV_NVIDIA, 80, 0, NULL,
     "an NVIDIA GPU of compute capability 8.0 or newer"},
    {"attnhost-plugin-cuda-fa3", "cuda_fa3", DEV_NVIDIA, 90, 90, NULL,
     "an NVIDIA Hopper GPU (compute capability 9.0)"},
    {"attnhost-plugin-triton", "triton", DEV_NVIDIA, 80, 90, NULL,
     "an NVIDIA GPU of compute capability 8.0 to 9.0"},
    {"attnhost-plugin-triton", "triton_hip", DEV_AMD, 0, 0, "gfx90a gfx942",
     "an AMD GPU gfx90a or gfx942 (a build with HIP)"},
    {"attnhost-plugin-rocm-aiter", "rocm_aiter", DEV_AMD, 0, 0, NULL, "an AMD Instinct GPU (ROCm)"},
    {"attnhost-plugin-xpu", "xpu", DEV_INTEL, 0, 0, NULL, "an Intel GPU (Level Zero)"},
};
#define N_RULES (sizeof rules / sizeof rules[0])

/* What the GPU plugins dlopen, for the notes. */
static const struct runtime {
    enum dev dev;
    const char *files[3];
    const char *package; /* Debian */
} runtimes[] = {
    {DEV_NVIDIA, {"libcuda.so.1"}, "libcuda1 (the NVIDIA driver)"},
    {DEV_AMD, {"libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"}, "libamdhip64-5 (ROCm)"},
    {DEV_INTEL, {"libze_loader.so.1"}, "libze1 (the Level Zero loader)"},
};

#define MAX_GPUS 16

typedef struct gpu {
    char name[128];
    char arch[32]; /* "sm_90", "gfx942", "0x8086:0x0bd5" */
    unsigned cc;   /* NVIDIA: compute capability x10, 0 unknown */
} gpu;

typedef struct facts {
    const char *root;
    int x86;
    gpu g[DEV_COUNT][MAX_GPUS];
    unsigned n[DEV_COUNT];
    char how[DEV_COUNT][256];     /* where the devices were seen */
    int runtime_found[DEV_COUNT]; /* -1 not checked, 0 no, 1 yes */
    char runtime_file[DEV_COUNT][256];
    char cc_note[256]; /* why compute capabilities are unknown */
} facts;

/* snprintf that truncates silently (paths and names here are short; a cut
 * one only fails to open) */
static void sfmt(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void sfmt(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, n, fmt, ap);
    va_end(ap);
}

static void path_at(const facts *f, char *out, size_t n, const char *p)
{
    sfmt(out, n, "%s%s", f->root ? f->root : "", p);
}

static int read_small(const char *path, char *buf, size_t n)
{
    FILE *fp = fopen(path, "r");
    if (!fp) return -1;
    size_t k = fread(buf, 1, n - 1, fp);
    fclose(fp);
    buf[k] = '\0';
    while (k && (buf[k - 1] == '\n' || buf[k - 1] == ' ')) buf[--k] = '\0';
    return 0;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void note_how(char *how, const char *what)
{
    size_t l = strlen(how);
    sfmt(how + l, 256 - l, "%s%s", l ? ", " : "", what);
}

/* A runtime library's file in the usual places (no dlopen: loading HIP or
 * Level Zero runs their initialisers). */
static int find_library_file(const char *name, char *out, size_t n)
{
    static const char *const dirs[] = {"/lib/x86_64-linux-gnu",
                                       "/usr/lib/x86_64-linux-gnu",
                                       "/lib/aarch64-linux-gnu",
                                       "/usr/lib/aarch64-linux-gnu",
                                       "/usr/lib64",
                                       "/usr/lib",
                                       "/usr/local/lib",
                                       "/opt/rocm/lib",
                                       "/usr/local/cuda/compat",
                                       "/usr/lib/wsl/lib"};
    char p[512];
    const char *ld = getenv("LD_LIBRARY_PATH");
    if (ld && *ld) {
        char *copy = strdup(ld), *save = NULL;
        for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d;
             d = strtok_r(NULL, ":", &save)) {
            sfmt(p, sizeof p, "%s/%s", d, name);
            if (exists(p)) {
                sfmt(out, n, "%s", p);
                free(copy);
                return 1;
            }
        }
        free(copy);
    }
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        sfmt(p, sizeof p, "%s/%s", dirs[i], name);
        if (exists(p)) {
            sfmt(out, n, "%s", p);
            return 1;
        }
    }
    return 0;
}

static void detect_nvidia(facts *f)
{
    char p[512], buf[2048];
    unsigned *n = &f->n[DEV_NVIDIA];
    path_at(f, p, sizeof p, "/proc/driver/nvidia/gpus");
    DIR *d = opendir(p);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) && *n < MAX_GPUS) {
            if (e->d_name[0] == '.') continue;
            gpu *g = &f->g[DEV_NVIDIA][(*n)++];
            sfmt(g->name, sizeof g->name, "NVIDIA GPU %s", e->d_name);
            char info[768];
            sfmt(info, sizeof info, "%s/%s/information", p, e->d_name);
            if (read_small(info, buf, sizeof buf) == 0) {
                char *m = strstr(buf, "Model:");
                if (m) {
                    m += 6;
                    while (*m == ' ' || *m == '\t') m++;
                    size_t l = strcspn(m, "\n");
                    sfmt(g->name, sizeof g->name, "%.*s", (int)l, m);
                }
            }
        }
        closedir(d);
        if (*n) note_how(f->how[DEV_NVIDIA], "/proc/driver/nvidia/gpus");
    }
    unsigned nodes = 0;
    path_at(f, p, sizeof p, "/dev");
    d = opendir(p);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (!strncmp(e->d_name, "nvidia", 6) && e->d_name[6] >= '0' && e->d_name[6] <= '9')
                nodes++;
        closedir(d);
    }
    if (nodes) {
        note_how(f->how[DEV_NVIDIA], "/dev/nvidiaN");
        for (; *n < nodes && *n < MAX_GPUS; (*n)++)
            sfmt(f->g[DEV_NVIDIA][*n].name, sizeof f->g[DEV_NVIDIA][*n].name, "NVIDIA GPU %u", *n);
    }
    if (!*n) return;
    /* A GPU is there: the driver library, and the compute capabilities. */
    if (f->root) {
        f->runtime_found[DEV_NVIDIA] = -1;
        sfmt(f->cc_note, sizeof f->cc_note, "not asked (--root)");
        return;
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    f->runtime_found[DEV_NVIDIA] = lib != NULL;
    if (!lib) {
        const char *e = dlerror();
        sfmt(f->cc_note, sizeof f->cc_note, "libcuda.so.1: %s", e ? e : "not found");
        return;
    }
    sfmt(f->runtime_file[DEV_NVIDIA], sizeof f->runtime_file[DEV_NVIDIA], "libcuda.so.1");
    typedef int (*init_fn)(unsigned);
    typedef int (*count_fn)(int *);
    typedef int (*get_fn)(int *, int);
    typedef int (*attr_fn)(int *, int, int);
    typedef int (*name_fn)(char *, int, int);
    init_fn cu_init;
    count_fn cu_count;
    get_fn cu_get;
    attr_fn cu_attr;
    name_fn cu_name;
    void *s[5] = {dlsym(lib, "cuInit"), dlsym(lib, "cuDeviceGetCount"), dlsym(lib, "cuDeviceGet"),
                  dlsym(lib, "cuDeviceGetAttribute"), dlsym(lib, "cuDeviceGetName")};
    int count = 0, rc;
    if (!s[0] || !s[1] || !s[2] || !s[3] || !s[4]) {
        sfmt(f->cc_note, sizeof f->cc_note, "libcuda.so.1 lacks the driver API");
    } else {
        memcpy(&cu_init, &s[0], sizeof cu_init);
        memcpy(&cu_count, &s[1], sizeof cu_count);
        memcpy(&cu_get, &s[2], sizeof cu_get);
        memcpy(&cu_attr, &s[3], sizeof cu_attr);
        memcpy(&cu_name, &s[4], sizeof cu_name);
        if ((rc = cu_init(0)) != 0 || (rc = cu_count(&count)) != 0)
            sfmt(f->cc_note, sizeof f->cc_note, "cuInit/cuDeviceGetCount: CUDA error %d", rc);
        else {
            if (count > MAX_GPUS) count = MAX_GPUS;
            for (int i = 0; i < count; i++) {
                int dev, maj = 0, min = 0;
                gpu *g = &f->g[DEV_NVIDIA][i];
                if (cu_get(&dev, i) || cu_attr(&maj, 75, dev) || cu_attr(&min, 76, dev)) continue;
                g->cc = (unsigned)(maj * 10 + min);
                sfmt(g->arch, sizeof g->arch, "sm_%d%d", maj, min);
                cu_name(g->name, (int)sizeof g->name, dev);
            }
            *n = (unsigned)count; /* the driver's own count wins */
            note_how(f->how[DEV_NVIDIA], "libcuda.so.1");
        }
    }
    dlclose(lib);
}

static void detect_amd(facts *f)
{
    char p[512], buf[4096];
    path_at(f, p, sizeof p, "/dev/kfd");
    if (!exists(p)) return;
    path_at(f, p, sizeof p, "/sys/class/kfd/kfd/topology/nodes");
    DIR *d = opendir(p);
    unsigned *n = &f->n[DEV_AMD];
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) && *n < MAX_GPUS) {
            if (e->d_name[0] == '.') continue;
            char q[768];
            sfmt(q, sizeof q, "%s/%s/properties", p, e->d_name);
            if (read_small(q, buf, sizeof buf)) continue;
            char *t = strstr(buf, "gfx_target_version ");
            unsigned long v = t ? strtoul(t + 19, NULL, 10) : 0;
            if (!v) continue; /* a CPU node */
            gpu *g = &f->g[DEV_AMD][(*n)++];
            /* 90402 -> gfx942, 90010 -> gfx90a: major, minor and stepping in hex */
            sfmt(g->arch, sizeof g->arch, "gfx%lu%lx%lx", v / 10000, (v / 100) % 100, v % 100);
            sfmt(q, sizeof q, "%s/%s/name", p, e->d_name);
            if (read_small(q, buf, sizeof buf) || !*buf) sfmt(buf, sizeof buf, "AMD GPU");
            sfmt(g->name, sizeof g->name, "%s", buf);
        }
        closedir(d);
    }
    if (*n) note_how(f->how[DEV_AMD], "/dev/kfd, /sys/class/kfd");
}

static void detect_intel(facts *f)
{
    char p[512], buf[64];
    path_at(f, p, sizeof p, "/sys/class/drm");
    DIR *d = opendir(p);
    if (!d) return;
    unsigned *n = &f->n[DEV_INTEL];
    struct dirent *e;
    while ((e = readdir(d)) && *n < MAX_GPUS) {
        if (strncmp(e->d_name, "renderD", 7)) continue;
        char q[768];
        sfmt(q, sizeof q, "%s/%s/device/vendor", p, e->d_name);
        if (read_small(q, buf, sizeof buf) || strcmp(buf, "0x8086")) continue;
        gpu *g = &f->g[DEV_INTEL][(*n)++];
        sfmt(q, sizeof q, "%s/%s/device/device", p, e->d_name);
        if (read_small(q, buf, sizeof buf)) sfmt(buf, sizeof buf, "?");
        sfmt(g->arch, sizeof g->arch, "0x8086:%s", buf);
        sfmt(g->name, sizeof g->name, "Intel GPU (%s)", e->d_name);
    }
    closedir(d);
    if (*n) note_how(f->how[DEV_INTEL], "/sys/class/drm/renderD*/device/vendor");
}

static void detect(facts *f)
{
#if defined(__x86_64__)
    f->x86 = 1;
#endif
    for (int k = 0; k < DEV_COUNT; k++) f->runtime_found[k] = -1;
    detect_nvidia(f);
    detect_amd(f);
    detect_intel(f);
    for (size_t r = 0; r < sizeof runtimes / sizeof runtimes[0]; r++) {
        enum dev k = runtimes[r].dev;
        if (!f->n[k] || f->root || f->runtime_found[k] >= 0) continue;
        f->runtime_found[k] = 0;
        for (int i = 0; i < 3 && runtimes[r].files[i] && !f->runtime_found[k]; i++)
            f->runtime_found[k] = find_library_file(runtimes[r].files[i], f->runtime_file[k],
                                                    sizeof f->runtime_file[k]);
    }
}

/* Does the rule fit this machine? 1 yes, 0 no, -1 cannot tell (why in maybe). */
static int rule_fits(const facts *f, const struct fit_rule *r, char *why, size_t n)
{
    *why = '\0';
    if (r->dev == DEV_CPU_X86) return f->x86;
    if (!f->n[r->dev]) return 0;
    int unknown = 0;
    for (unsigned i = 0; i < f->n[r->dev]; i++) {
        const gpu *g = &f->g[r->dev][i];
        if (r->dev == DEV_NVIDIA && (r->min_cc || r->max_cc)) {
            if (!g->cc) {
                unknown = 1;
                continue;
            }
            if ((!r->min_cc || g->cc >= r->min_cc) && (!r->max_cc || g->cc <= r->max_cc)) return 1;
            continue;
        }
        if (r->archs) {
            size_t l = strlen(g->arch);
            for (const char *a = strstr(r->archs, g->arch); l && a; a = strstr(a + 1, g->arch))
                if ((a == r->archs || a[-1] == ' ') && (a[l] == ' ' || a[l] == '\0')) return 1;
            continue;
        }
        return 1;
    }
    if (unknown) {
        sfmt(why, n, "compute capability unknown (%s)", *f->cc_note ? f->cc_note : "not read");
        return -1;
    }
    return 0;
}

static const struct fit_rule *rule_of_plugin(const char *name)
{
    for (size_t i = 0; i < N_RULES; i++)
        if (!strcmp(rules[i].plugin, name)) return &rules[i];
    return NULL;
}

/* Is some plugin of this package among the host's plugins? */
static const ah_plugin_info *installed_of(ah_host *h, const char *package)
{
    for (size_t i = 0; h && i < ah_host_plugin_count(h); i++) {
        const ah_plugin_info *p = ah_host_plugin(h, i);
        const struct fit_rule *r = rule_of_plugin(p->name);
        if (r && !strcmp(r->package, package)) return p;
    }
    return NULL;
}

static int listed(const char **list, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i], s)) return 1;
    return 0;
}

int cmd_doctor(cli_common *c)
{
    facts *f = calloc(1, sizeof *f);
    if (!f) return 1;
    for (int i = 0; i < c->argc; i++) {
        if (!strcmp(c->argv[i], "--root") && i + 1 < c->argc) f->root = c->argv[++i];
        else {
            fprintf(stderr, "attnhost doctor: unknown option '%s'\n", c->argv[i]);
            free(f);
            return 2;
        }
    }
    /* the scan first: the scanner children start before this process has
     * touched CUDA */
    ah_host *h = cli_host(c);
    detect(f);

    /* the packages that fit, fitted or not yet installed; one that fits on
     * one device is not also "may fit" on another */
    const char *fit[N_RULES], *maybe[N_RULES], *install[N_RULES], *remove[N_RULES];
    const char *fit_needs[N_RULES];
    char maybe_why[N_RULES][300];
    size_t nfit = 0, nmaybe = 0, ninstall = 0, nremove = 0;
    int verdict[N_RULES];
    char why[N_RULES][300];
    for (size_t i = 0; i < N_RULES; i++)
        verdict[i] = rule_fits(f, &rules[i], why[i], sizeof why[i]);
    for (size_t i = 0; i < N_RULES; i++)
        if (verdict[i] == 1 && !listed(fit, nfit, rules[i].package)) {
            fit_needs[nfit] = rules[i].needs;
            fit[nfit++] = rules[i].package;
            if (!installed_of(h, rules[i].package)) install[ninstall++] = rules[i].package;
        }
    for (size_t i = 0; i < N_RULES; i++)
        if (verdict[i] == -1 && !listed(fit, nfit, rules[i].package) &&
            !listed(maybe, nmaybe, rules[i].package)) {
            sfmt(maybe_why[nmaybe], sizeof maybe_why[nmaybe], "%s; %s", rules[i].needs, why[i]);
            maybe[nmaybe++] = rules[i].package;
        }
    /* installed packages that fit nothing here */
    for (size_t i = 0; h && i < ah_host_plugin_count(h); i++) {
        const struct fit_rule *r = rule_of_plugin(ah_host_plugin(h, i)->name);
        if (r && !listed(fit, nfit, r->package) && !listed(maybe, nmaybe, r->package) &&
            !listed(remove, nremove, r->package))
            remove[nremove++] = r->package;
    }
    const ah_hw_facts *hw = h ? ah_host_hw_facts(h) : NULL;
    char isa[512] = "";
    if (hw) ah_format_isa(hw->cpu_isa, isa, sizeof isa);

    if (c->json) {
        FILE *o = stdout;
        fprintf(o, "{\"cpu\": {\"x86_64\": %s, \"model\": ", f->x86 ? "true" : "false");
        cli_json_str(o, hw ? hw->cpu_model : "");
        fprintf(o, ", \"logical_cores\": %u, \"isa\": ", hw ? hw->cpu_logical_cores : 0);
        cli_json_str(o, isa);
        fprintf(o, ", \"amx_note\": ");
        cli_json_str(o, hw ? hw->amx_note : "");
        fprintf(o, "},\n \"gpus\": [");
        int first = 1;
        for (int k = DEV_NVIDIA; k < DEV_COUNT; k++)
            for (unsigned i = 0; i < f->n[k]; i++) {
                fprintf(o, "%s{\"vendor\": \"%s\", \"name\": ", first ? "" : ", ", dev_names[k]);
                cli_json_str(o, f->g[k][i].name);
                fprintf(o, ", \"arch\": ");
                cli_json_str(o, f->g[k][i].arch);
                fprintf(o, ", \"seen_in\": ");
                cli_json_str(o, f->how[k]);
                fprintf(o, "}");
                first = 0;
            }
        fprintf(o, "],\n \"runtimes\": {");
        first = 1;
        for (int k = DEV_NVIDIA; k < DEV_COUNT; k++) {
            if (!f->n[k]) continue;
            fprintf(o, "%s\"%s\": ", first ? "" : ", ", dev_names[k]);
            if (f->runtime_found[k] < 0) fprintf(o, "null");
            else cli_json_str(o, f->runtime_found[k] ? f->runtime_file[k] : "");
            first = 0;
        }
        fprintf(o, "},\n \"fit\": [");
        for (size_t i = 0; i < nfit; i++) {
            fprintf(o, "%s", i ? ", " : "");
            cli_json_str(o, fit[i]);
        }
        fprintf(o, "],\n \"may_fit\": [");
        for (size_t i = 0; i < nmaybe; i++) {
            fprintf(o, "%s{\"package\": ", i ? ", " : "");
            cli_json_str(o, maybe[i]);
            fprintf(o, ", \"why\": ");
            cli_json_str(o, maybe_why[i]);
            fprintf(o, "}");
        }
        fprintf(o, "],\n \"plugins\": [");
        for (size_t i = 0; h && i < ah_host_plugin_count(h); i++) {
            const ah_plugin_info *p = ah_host_plugin(h, i);
            const struct fit_rule *r = rule_of_plugin(p->name);
            fprintf(o, "%s\n  {\"name\": ", i ? "," : "");
            cli_json_str(o, p->name);
            fprintf(o, ", \"package\": ");
            if (r) cli_json_str(o, r->package);
            else fprintf(o, "null");
            fprintf(o, ", \"path\": ");
            cli_json_str(o, p->path);
            fprintf(o, ", \"state\": \"%s\", \"runs_here\": %s, \"reason\": ",
                    ah_plugin_state_str(p->state),
                    p->state == AH_PLUGIN_AVAILABLE ? "true" : "false");
            cli_json_str(o, p->reason);
            fprintf(o, "}");
        }
        fprintf(o, "],\n \"install\": [");
        for (size_t i = 0; i < ninstall; i++) {
            fprintf(o, "%s", i ? ", " : "");
            cli_json_str(o, install[i]);
        }
        fprintf(o, "],\n \"remove\": [");
        for (size_t i = 0; i < nremove; i++) {
            fprintf(o, "%s", i ? ", " : "");
            cli_json_str(o, remove[i]);
        }
        fprintf(o, "],\n \"host_error\": %s}\n", h ? "false" : "true");
        int rc = h ? 0 : 1;
        ah_host_destroy(h);
        free(f);
        return rc;
    }

    printf("This machine\n");
    if (hw)
        printf("  CPU: %s, %u logical cores%s\n       usable ISA: %s%s%s\n", hw->cpu_model,
               hw->cpu_logical_cores, f->x86 ? " (x86-64)" : "", isa,
               *hw->amx_note ? "; AMX: " : "", hw->amx_note);
    else
        printf("  CPU: %s (no hardware facts: the host could not start)\n",
               f->x86 ? "x86-64" : "not x86-64");
    unsigned ngpu = 0;
    for (int k = DEV_NVIDIA; k < DEV_COUNT; k++) {
        for (unsigned i = 0; i < f->n[k]; i++)
            printf("  GPU: %s%s%s%s\n", f->g[k][i].name, *f->g[k][i].arch ? " (" : "",
                   f->g[k][i].arch, *f->g[k][i].arch ? ")" : "");
        if (f->n[k]) {
            printf("       seen in %s", f->how[k]);
            if (f->runtime_found[k] == 1) printf("; runtime %s", f->runtime_file[k]);
            for (size_t r = 0; r < sizeof runtimes / sizeof runtimes[0]; r++)
                if (runtimes[r].dev == (enum dev)k && f->runtime_found[k] == 0)
                    printf("; runtime %s NOT found: install %s", runtimes[r].files[0],
                           runtimes[r].package);
            printf("\n");
        }
        ngpu += f->n[k];
    }
    if (!ngpu) printf("  GPU: none (no NVIDIA, AMD or Intel GPU device found)\n");

    printf("\nPlugin packages that fit\n");
    if (!nfit && !nmaybe) printf("  none\n");
    for (size_t i = 0; i < nfit; i++) {
        const ah_plugin_info *p = installed_of(h, fit[i]);
        printf("  %-34s %s: %s\n", fit[i], p ? "installed" : "not installed", fit_needs[i]);
    }
    for (size_t i = 0; i < nmaybe; i++) printf("  %-34s may fit: %s\n", maybe[i], maybe_why[i]);
    if (nmaybe)
        printf(
            "  (the packages that may fit are not in the apt-get line: once the driver answers,\n"
            "   attnhost doctor knows; `attnhost list` after installing shows each probe)\n");

    printf("\nInstalled plugins\n");
    if (!h) printf("  unknown: the host could not start (see above)\n");
    else if (!ah_host_plugin_count(h)) printf("  none found\n");
    for (size_t i = 0; h && i < ah_host_plugin_count(h); i++) {
        const ah_plugin_info *p = ah_host_plugin(h, i);
        const struct fit_rule *r = rule_of_plugin(p->name);
        printf("  %-16s %-12s %s\n", p->name, ah_plugin_state_str(p->state),
               r ? r->package : "(not an attnhost package)");
        if (p->state != AH_PLUGIN_AVAILABLE)
            printf("    cannot run here: %s\n",
                   *p->reason ? p->reason : ah_plugin_state_str(p->state));
        printf("    %s\n", p->path);
    }

    printf("\n");
    if (ninstall) {
        printf("Install:\n  apt-get install");
        for (size_t i = 0; i < ninstall; i++) printf(" %s", install[i]);
        printf("\n");
    } else if (nfit) printf("Every plugin package that fits this machine is installed.\n");
    if (nremove) {
        printf("Not needed here (no device for them):\n  apt-get remove");
        for (size_t i = 0; i < nremove; i++) printf(" %s", remove[i]);
        printf("\n");
    }
    int rc = h ? 0 : 1;
    ah_host_destroy(h);
    free(f);
    return rc;
}
