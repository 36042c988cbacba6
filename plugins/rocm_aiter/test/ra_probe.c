/* rocm_aiter.so loads, validates its descriptor's basics and probes on any
 * machine: usable on an AMD GPU it has a code object for, else a reason
 * (libamdhip64.so missing, no GPU, an unbuilt gfx target). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <attnhost/plugin.h>

int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    void *so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        printf("FAIL dlopen: %s\n", dlerror());
        return 1;
    }
    ah_plugin_entry_fn entry;
    *(void **)&entry = dlsym(so, AH_PLUGIN_ENTRY_SYMBOL);
    const char *why = NULL;
    const ah_plugin_descriptor *d = entry ? entry(AH_ABI_VERSION, NULL, &why) : NULL;
    if (!d || strcmp(d->name, "rocm_aiter") || d->device_kind != AH_DEVICE_HIP ||
        d->caps->n_gfx_targets == 0 || d->caps->prefill_rank != AH_RANK_PRIMARY) {
        printf("FAIL descriptor\n");
        return 1;
    }
    ah_probe_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (d->ops->probe(NULL, &info) != AH_OK || (!info.usable && !info.reason[0])) {
        printf("FAIL probe\n");
        return 1;
    }
    printf("targets:");
    for (uint32_t i = 0; i < d->caps->n_gfx_targets; i++) printf(" %s", d->caps->gfx_targets[i]);
    printf(
        "\nprobe: usable=%d reason=\"%s\" device=\"%s\" arch=%s CUs=%u memory=%llu driver=\"%s\"\n",
        info.usable, info.reason, info.device_name, info.arch, info.multiprocessors,
        (unsigned long long)info.memory_bytes, info.driver_version);
    return 0;
}
