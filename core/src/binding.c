/*
 * Binding: the selected plugins opened for execution. Layers with the same
 * plugin and resolved spec share one plugin state, so a step plans each
 * distinct state once and then runs forward per layer. The batch and every
 * tensor are checked before any plugin sees them (unless switched off).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "device_int.h"
#include "host_int.h"
#include "tensor_check.h"

#include <attnhost/plugin_util.h>

typedef struct bound_state {
    int slot;             /* plugin slot in the host */
    ah_context *ctx;      /* the plugin's context on the binding's device */
    ah_layer_spec spec;   /* resolved */
    ah_state *st;
    ah_device *dev;       /* the binding's device of that plugin */
    uint32_t plan_gen;    /* the plan generation it was last planned in */
} bound_state;

struct ah_binding {
    ah_host *host;
    const ah_selection *sel;
    ah_limits limits;
    int32_t device_index; /* ah_binding_options.device_index */
    int validate;
    bound_state *states;
    uint32_t n_states;
    ah_device **devs;
    uint32_t n_devs;
    uint32_t *layer_state[AH_PHASE_COUNT]; /* layer -> index into states */
    uint32_t num_layers;
    ah_phase phase;
    int planned;
    uint32_t plan_gen;
    ah_batch batch;       /* the last planned batch (the engine's pointers) */
    char errmsg[1024];
};

static ah_status fail(ah_binding *b, ah_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ah_status fail(ah_binding *b, ah_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->errmsg, sizeof b->errmsg, fmt, ap);
    va_end(ap);
    return s;
}

static const char *plugin_name(const ah_binding *b, int slot)
{
    return b->host->scan.plugins[slot]->info.name;
}

static const ah_plugin_ops *ops_of(const ah_binding *b, int slot)
{
    return &b->host->slots[slot].lp->ops;
}

/* The seq_len the engine writes into padded requests for bs's plugin. */
static int32_t seq_len_fill(const ah_binding *b, const bound_state *bs)
{
    return b->host->slots[bs->slot].lp->caps_live.graph_seq_len_fill;
}

static ah_device *device_for(ah_binding *b, int slot, ah_context *ctx, ah_error *err, ah_status *s)
{
    for (uint32_t i = 0; i < b->n_devs; i++)
        if (ah__device_slot(b->devs[i]) == slot) return b->devs[i];
    ah_device **grown = ah__realloc(b->devs, (b->n_devs + 1) * sizeof *grown);
    if (!grown) {
        *s = AH_ERR_OUT_OF_MEMORY;
        snprintf(err->msg, sizeof err->msg, "out of memory while binding");
        return NULL;
    }
    b->devs = grown;
    *s = ah__device_open(b->host, slot, ctx, b->device_index, &b->devs[b->n_devs], err);
    return *s == AH_OK ? b->devs[b->n_devs++] : NULL;
}

/* The state for (slot, spec), created on first use. Returns its index or -1. */
static int state_for(ah_binding *b, int slot, const ah_layer_spec *spec, ah_error *err, ah_status *s)
{
    for (uint32_t i = 0; i < b->n_states; i++)
        if (b->states[i].slot == slot && memcmp(&b->states[i].spec, spec, sizeof *spec) == 0)
            return (int)i;
    ah_context *ctx = NULL;
    *s = ah__host_open_context(b->host, slot, b->device_index, &ctx, err);
    if (*s != AH_OK) return -1;
    ah_device *dev = device_for(b, slot, ctx, err, s);
    if (!dev) return -1;
    bound_state *grown = ah__realloc(b->states, (b->n_states + 1) * sizeof *grown);
    if (!grown) {
        *s = AH_ERR_OUT_OF_MEMORY;
        snprintf(err->msg, sizeof err->msg, "out of memory while binding");
        return -1;
    }
    b->states = grown;
    bound_state *bs = &grown[b->n_states];
    memset(bs, 0, sizeof *bs);
    bs->slot = slot;
    bs->ctx = ctx;
    bs->spec = *spec;
    bs->dev = dev;
    *s = ops_of(b, slot)->state_create(ctx, spec, &b->limits, &bs->st);
    if (*s != AH_OK) {
        snprintf(err->msg, sizeof err->msg, "%s: creating a layer state failed: %s",
                 plugin_name(b, slot), ops_of(b, slot)->context_error(ctx));
        return -1;
    }
    return (int)b->n_states++;
}

static ah_status check_limits(const ah_limits *l, ah_error *err)
{
    if (l->struct_size < sizeof(ah_limits)) {
        snprintf(err->msg, sizeof err->msg, "ah_limits.struct_size %u is too small", l->struct_size);
        return AH_ERR_ABI;
    }
    const char *zero = !l->max_num_reqs ? "max_num_reqs" : !l->max_num_tokens ? "max_num_tokens"
                       : !l->max_blocks_per_req ? "max_blocks_per_req" : !l->max_seq_len ? "max_seq_len"
                       : !l->num_blocks ? "num_blocks" : NULL;
    if (zero) {
        snprintf(err->msg, sizeof err->msg, "limits: %s must be at least 1", zero);
        return AH_ERR_INVALID_ARGUMENT;
    }
    return AH_OK;
}

ah_status ah_binding_create(ah_host *h, const ah_selection *sel, const ah_binding_options *o,
                            ah_binding **out, ah_error *err)
{
    *out = NULL;
    err->msg[0] = '\0';
    if (!o || o->struct_size < sizeof(ah_binding_options)) {
        snprintf(err->msg, sizeof err->msg, "ah_binding_options missing or struct_size too small");
        return AH_ERR_ABI;
    }
    ah_status s = check_limits(&o->limits, err);
    if (s != AH_OK) return s;
    if (ah__selection_error(sel)) {
        snprintf(err->msg, sizeof err->msg, "the selection failed and cannot be bound: %s",
                 ah__selection_error(sel));
        return AH_ERR_INVALID_ARGUMENT;
    }
    if (o->device_index < 0) {
        snprintf(err->msg, sizeof err->msg,
                 "ah_binding_options.device_index = %d: a device index is 0 or more",
                 (int)o->device_index);
        return AH_ERR_INVALID_ARGUMENT;
    }
    ah_binding *b = ah__calloc(1, sizeof *b);
    if (!b) goto oom;
    b->host = h;
    b->sel = sel;
    b->limits = o->limits;
    b->device_index = o->device_index;
    b->validate = !o->no_validation && h->config.validate;
    b->num_layers = ah_selection_num_layers(sel);
    for (int p = 0; p < AH_PHASE_COUNT; p++)
        if (!(b->layer_state[p] = ah__calloc(b->num_layers ? b->num_layers : 1, sizeof(uint32_t))))
            goto oom;
    for (uint32_t l = 0; l < b->num_layers; l++)
        for (int p = 0; p < AH_PHASE_COUNT; p++) {
            const ah_decision *d = ah_selection_decision(sel, l, (ah_phase)p);
            int slot = d && d->plugin ? ah__host_find(h, d->plugin) : -1;
            int idx = slot < 0 ? -1 : state_for(b, slot, &d->spec, err, &s);
            if (idx < 0) {
                if (slot < 0 && !(d && d->plugin)) {
                    snprintf(err->msg, sizeof err->msg, "layer %u (%s): no backend was selected",
                             l, p == AH_PHASE_PREFILL ? "prefill" : "decode");
                    s = AH_ERR_NOT_FOUND;
                } else if (slot < 0) {
                    snprintf(err->msg, sizeof err->msg, "layer %u: plugin %s is gone", l, d->plugin);
                    s = AH_ERR_NOT_FOUND;
                }
                ah_binding_destroy(b);
                return s;
            }
            b->layer_state[p][l] = (uint32_t)idx;
        }
    *out = b;
    return AH_OK;
oom:
    ah_binding_destroy(b);
    snprintf(err->msg, sizeof err->msg, "out of memory while binding");
    return AH_ERR_OUT_OF_MEMORY;
}

void ah_binding_destroy(ah_binding *b)
{
    if (!b) return;
    for (uint32_t i = 0; i < b->n_states; i++)
        if (b->states[i].st) ops_of(b, b->states[i].slot)->state_destroy(b->states[i].st);
    for (uint32_t i = 0; i < b->n_devs; i++) ah__device_close(b->devs[i]);
    for (int p = 0; p < AH_PHASE_COUNT; p++) ah__free(b->layer_state[p]);
    ah__free(b->states);
    ah__free(b->devs);
    ah__free(b);
}

const char *ah_binding_errmsg(const ah_binding *b) { return b->errmsg; }
ah_phase ah_binding_phase(const ah_binding *b) { return b->phase; }

ah_status ah_binding_plan(ah_binding *b, const ah_batch *batch, ah_plan_mode mode, void *stream)
{
    b->planned = 0;
    if (!batch || batch->struct_size < sizeof(ah_batch))
        return fail(b, AH_ERR_ABI, "batch missing or ah_batch.struct_size too small");
    if ((unsigned)mode > AH_PLAN_REPLAY) return fail(b, AH_ERR_INVALID_ARGUMENT, "unknown plan mode %d", mode);
    ah_phase phase = batch->max_query_len <= 1 ? AH_PHASE_DECODE : AH_PHASE_PREFILL;

    if (b->validate) {
        /* a batch is checked once per distinct block size and padding fill */
        uint32_t checked = 0;
        int32_t checked_fill = 0;
        for (uint32_t l = 0; l < b->num_layers; l++) {
            const bound_state *bs = &b->states[b->layer_state[phase][l]];
            if (bs->spec.block_size == checked && seq_len_fill(b, bs) == checked_fill) continue;
            ah_error err;
            ah_status s = ah_batch_validate_fill(batch, &bs->spec, &b->limits, seq_len_fill(b, bs), &err);
            if (s != AH_OK) return fail(b, s, "batch: %s", err.msg);
            checked = bs->spec.block_size;
            checked_fill = seq_len_fill(b, bs);
        }
    }
    b->plan_gen++;
    for (uint32_t l = 0; l < b->num_layers; l++) {
        bound_state *bs = &b->states[b->layer_state[phase][l]];
        if (bs->plan_gen == b->plan_gen) continue;
        const ah_plugin_ops *ops = ops_of(b, bs->slot);
        ah_status s = ops->plan(bs->st, batch, mode, stream);
        if (s != AH_OK)
            return fail(b, s, "layer %u: %s plan failed: %s", l, plugin_name(b, bs->slot),
                        ops->state_error(bs->st));
        bs->plan_gen = b->plan_gen;
    }
    b->batch = *batch;
    b->phase = phase;
    b->planned = 1;
    return AH_OK;
}

/* The layer's state in the planned phase, or NULL with errmsg set. */
static bound_state *planned_state(ah_binding *b, uint32_t layer)
{
    if (layer >= b->num_layers) {
        fail(b, AH_ERR_INVALID_ARGUMENT, "layer %u out of range (the model has %u)", layer,
             b->num_layers);
        return NULL;
    }
    if (!b->planned) {
        fail(b, AH_ERR_INVALID_ARGUMENT, "no planned batch: call ah_binding_plan first");
        return NULL;
    }
    return &b->states[b->layer_state[b->phase][layer]];
}

static ah_status write_kv(ah_binding *b, uint32_t layer, bound_state *bs, const ah_kv_write_args *a)
{
    const ah_plugin_ops *ops = ops_of(b, bs->slot);
    if (b->validate) {
        DLDevice dev = ah_device_dl(bs->dev);
        char why[512];
        ah_status s = ah__check_kv_write_args(&bs->spec, &b->batch, a, &dev, why, sizeof why);
        if (s != AH_OK) return fail(b, s, "layer %u: %s", layer, why);
    }
    if (!ops->write_kv)
        return fail(b, AH_ERR_UNSUPPORTED, "layer %u: %s stores K/V only inside forward", layer,
                    plugin_name(b, bs->slot));
    ah_status s = ops->write_kv(bs->st, a);
    return s == AH_OK ? s
                      : fail(b, s, "layer %u: %s write_kv failed: %s", layer,
                             plugin_name(b, bs->slot), ops->state_error(bs->st));
}

ah_status ah_binding_write_kv(ah_binding *b, uint32_t layer, const ah_kv_write_args *a)
{
    bound_state *bs = planned_state(b, layer);
    if (!bs) return AH_ERR_INVALID_ARGUMENT;
    if (!a || a->struct_size < sizeof(ah_kv_write_args))
        return fail(b, AH_ERR_ABI, "ah_kv_write_args missing or struct_size too small");
    return write_kv(b, layer, bs, a);
}

ah_status ah_binding_forward(ah_binding *b, uint32_t layer, const ah_forward_args *a)
{
    bound_state *bs = planned_state(b, layer);
    if (!bs) return AH_ERR_INVALID_ARGUMENT;
    if (!a || a->struct_size < sizeof(ah_forward_args))
        return fail(b, AH_ERR_ABI, "ah_forward_args missing or struct_size too small");
    const ah_plugin_ops *ops = ops_of(b, bs->slot);
    const ah_caps *caps = &b->host->slots[bs->slot].lp->caps_live;
    if (b->validate) {
        DLDevice dev = ah_device_dl(bs->dev);
        char why[512];
        ah_status s = ah__check_forward_args(&bs->spec, &b->batch, a, &dev, why, sizeof why);
        if (s != AH_OK) return fail(b, s, "layer %u: %s", layer, why);
    }
    if (a->key && !caps->forward_writes_kv) {
        ah_kv_write_args kv = {sizeof kv,      a->key,     a->value,   a->key_cache,
                               a->value_cache, a->k_scale, a->v_scale, a->stream};
        ah_status s = write_kv(b, layer, bs, &kv);
        if (s != AH_OK) return s;
    }
    ah_status s = ops->forward(bs->st, a);
    return s == AH_OK ? s
                      : fail(b, s, "layer %u: %s forward failed: %s", layer,
                             plugin_name(b, bs->slot), ops->state_error(bs->st));
}

ah_status ah_binding_merge_states(ah_binding *b, uint32_t layer, const ah_merge_args *a)
{
    if (layer >= b->num_layers)
        return fail(b, AH_ERR_INVALID_ARGUMENT, "layer %u out of range", layer);
    bound_state *bs = &b->states[b->layer_state[b->phase][layer]];
    const ah_plugin_ops *ops = ops_of(b, bs->slot);
    if (!ops->merge_states)
        return fail(b, AH_ERR_UNSUPPORTED, "%s offers no merge_states", plugin_name(b, bs->slot));
    if (!a || a->struct_size < sizeof(ah_merge_args))
        return fail(b, AH_ERR_ABI, "ah_merge_args missing or struct_size too small");
    ah_context *ctx = bs->ctx;
    ah_status s = ops->merge_states(ctx, a);
    return s == AH_OK ? s
                      : fail(b, s, "%s merge_states failed: %s", plugin_name(b, bs->slot),
                             ops->context_error(ctx));
}

/* One cache tensor of head size d: [nb, bs, h, d] (NHD) or [nb, h, bs, d]
 * (HND), dense, row-major. */
static void cache_desc(const ah_layer_spec *s, uint32_t num_blocks, uint32_t d, ah_kv_cache_desc *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->ndim = 4;
    int hnd = s->kv_layout == AH_KV_LAYOUT_HND;
    o->shape[0] = num_blocks;
    o->shape[1] = hnd ? s->num_kv_heads : s->block_size;
    o->shape[2] = hnd ? s->block_size : s->num_kv_heads;
    o->shape[3] = d;
    o->strides[3] = 1;
    for (int i = 2; i >= 0; i--) o->strides[i] = o->strides[i + 1] * o->shape[i + 1];
    o->kv_dtype = s->kv_dtype;
    o->dl_dtype = ah_dtype_to_dl(s->kv_dtype);
}

ah_status ah_binding_kv_cache_desc(ah_binding *b, uint32_t layer, uint32_t num_blocks,
                                   ah_kv_cache_desc *key, ah_kv_cache_desc *value)
{
    if (layer >= b->num_layers)
        return fail(b, AH_ERR_INVALID_ARGUMENT, "layer %u out of range (the model has %u)", layer,
                    b->num_layers);
    if (!key || !value)
        return fail(b, AH_ERR_INVALID_ARGUMENT, "ah_binding_kv_cache_desc: key and value are required");
    const ah_layer_spec *s = &b->states[b->layer_state[AH_PHASE_PREFILL][layer]].spec;
    cache_desc(s, num_blocks, s->qk_head_size, key);
    if (s->use_mla) {
        memset(value, 0, sizeof *value);
        value->struct_size = sizeof *value;
        value->kv_dtype = s->kv_dtype;
    } else {
        cache_desc(s, num_blocks, s->v_head_size, value);
    }
    return AH_OK;
}

uint32_t ah_binding_split(const ah_binding *b, uint32_t *decode_tokens, const char **why)
{
    if (decode_tokens) *decode_tokens = b->phase == AH_PHASE_DECODE ? b->batch.num_tokens : 0;
    if (why) *why = "";
    return b->phase == AH_PHASE_DECODE ? b->batch.num_reqs : 0;
}

ah_device *ah_binding_device(ah_binding *b, uint32_t layer, ah_phase phase)
{
    if (layer >= b->num_layers || (unsigned)phase >= AH_PHASE_COUNT) return NULL;
    return b->states[b->layer_state[phase][layer]].dev;
}
