/*
 * The host's plugins by name, loaded into the process and opened on a
 * device on first use (the scan found them; host.c made the slots).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "host_int.h"

#include <attnhost/plugin_util.h>

int ah__host_find(const ah_host *h, const char *name)
{
    for (uint32_t i = 0; i < h->scan.n; i++) {
        const ah_plugin_info *in = &h->scan.plugins[i]->info;
        /* a shadowed file keeps its name but is rejected: prefer the live one */
        if (strcmp(in->name, name) == 0 && in->state != AH_PLUGIN_REJECTED) return (int)i;
    }
    for (uint32_t i = 0; i < h->scan.n; i++)
        if (strcmp(h->scan.plugins[i]->info.name, name) == 0) return (int)i;
    return -1;
}

const ah_plugin_info *ah_host_find_plugin(const ah_host *h, const char *name)
{
    int i = ah__host_find(h, name);
    return i < 0 ? NULL : &h->scan.plugins[i]->info;
}

ah_status ah__host_load(ah_host *h, int i, ah_error *err)
{
    ah_plugin_slot *sl = &h->slots[i];
    if (sl->lp) return AH_OK;
    if (sl->load_error) {
        snprintf(err->msg, sizeof err->msg, "%s", sl->load_error);
        return AH_ERR_PLUGIN;
    }
    ah_status s = ah__plugin_load(h->scan.plugins[i], &h->config, &h->hw, &sl->lp, err);
    if (s != AH_OK && s != AH_ERR_OUT_OF_MEMORY) sl->load_error = ah__strdup(err->msg);
    return s;
}

ah_status ah__host_open_context(ah_host *h, int i, int32_t device_index, ah_context **ctx,
                                ah_error *err)
{
    *ctx = NULL;
    const ah_plugin_info *in = &h->scan.plugins[i]->info;
    if (in->device_kind == AH_DEVICE_CPU) device_index = 0; /* one CPU, device 0 */
    pthread_mutex_lock(&h->lock);
    ah_status s = ah__host_load(h, i, err);
    ah_plugin_slot *sl = &h->slots[i];
    for (uint32_t k = 0; s == AH_OK && k < sl->n_ctxs; k++)
        if (sl->ctxs[k].device_index == device_index) *ctx = sl->ctxs[k].ctx;
    if (s == AH_OK && !*ctx) {
        ah_plugin_ctx *grown = ah__realloc(sl->ctxs, (sl->n_ctxs + 1) * sizeof *grown);
        if (!grown) {
            s = AH_ERR_OUT_OF_MEMORY;
            snprintf(err->msg, sizeof err->msg, "out of memory while opening %s", in->name);
        } else {
            sl->ctxs = grown;
            const char *why = NULL;
            ah_context_options co = {sizeof co, device_index};
            ah_context *c = NULL;
            s = sl->lp->ops.context_create(&sl->lp->services, &co, &c, &why);
            if (s != AH_OK) {
                snprintf(err->msg, sizeof err->msg, "%s: opening device %s:%d failed: %s", in->name,
                         ah_device_kind_str(in->device_kind), device_index,
                         why && *why ? why : ah_status_str(s));
            } else if (!c) {
                s = AH_ERR_PLUGIN;
                snprintf(err->msg, sizeof err->msg,
                         "%s: context_create on device %d succeeded but returned no context",
                         in->name, device_index);
            } else {
                grown[sl->n_ctxs++] = (ah_plugin_ctx){device_index, c};
                *ctx = c;
            }
        }
    }
    pthread_mutex_unlock(&h->lock);
    return s;
}
