/*
 * What the binding tests over real plugins (test_phase_split,
 * test_kv_groups, test_context_parallel) share: a host, model, selection
 * and binding closed together, and a loaded plugin's live capabilities,
 * which a test changes to see how the host reacts to a claim.
 */
#ifndef AH_BINDING_ENV_H
#define AH_BINDING_ENV_H

#include <attnhost/attnhost.h>

#include "check.h"
#include "host_int.h"

typedef struct env {
    ah_host *h;
    ah_model *m;
    ah_selection *sel;
    ah_binding *b;
} env;

static inline void env_close(env *e)
{
    ah_binding_destroy(e->b);
    ah_selection_destroy(e->sel);
    ah_model_destroy(e->m);
    ah_host_destroy(e->h);
}

/* The caps the host reads for plugin name (loaded by opening its context
 * on device 0), or NULL after a failed check. */
static inline ah_caps *live_caps(ah_host *h, const char *name)
{
    ah_error err;
    ah_context *ctx;
    const int slot = ah__host_find(h, name);
    CHECK(slot >= 0 && ah__host_open_context(h, slot, 0, &ctx, &err) == AH_OK);
    return slot >= 0 && h->slots[slot].lp ? &h->slots[slot].lp->caps_live : NULL;
}

#endif
