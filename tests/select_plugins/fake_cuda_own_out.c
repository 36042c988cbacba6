/*
 * fake_cuda_own_out: the CPU test backend with caps.caller_output = 0. Its
 * forward computes into a buffer the state owns and fills the caller's
 * out descriptor with it, as a plugin that returns its own output does; the
 * binding tests use it to show that buffer's lifetime (valid until the
 * next forward on any layer sharing the state). Device kind CPU despite
 * the name (the prefix keeps the engine tests' plugins apart).
 */
#include <string.h>

#include <attnhost/plugin_util.h>

#include "common.h"

typedef struct own_state {
    ah_state *inner;
    const ah_host_services *host;
    float *buf;
    int64_t shape[3];
    ah_layer_spec spec;
    char err[256];
} own_state;


static ah_status own_st_create(ah_context *c, const ah_layer_spec *spec, const ah_limits *lim,
                               ah_state **out)
{
    *out = NULL;

    ah_state *inner = NULL;
    ah_status s = abi_ops.state_create(c, spec, lim, &inner);
    if (s != AH_OK) return s;
    own_state *o = abi_host->alloc(abi_host, sizeof *o);
    float *buf = abi_host->alloc(abi_host, (size_t)lim->max_num_tokens * spec->num_q_heads *
                                               spec->v_head_size * sizeof(float));
    if (!o || !buf) {
        abi_host->free(abi_host, o);
        abi_host->free(abi_host, buf);
        abi_ops.state_destroy(inner);
        return AH_ERR_OUT_OF_MEMORY;
    }
    memset(o, 0, sizeof *o);
    o->inner = inner;
    o->host = abi_host;
    o->buf = buf;
    o->spec = *spec;
    *out = (ah_state *)o;
    return AH_OK;
}

static void own_st_destroy(ah_state *s)
{
    own_state *o = (own_state *)s;
    if (!o) return;
    abi_ops.state_destroy(o->inner);
    o->host->free(o->host, o->buf);
    o->host->free(o->host, o);
}

static const char *own_st_error(const ah_state *s)
{
    return abi_ops.state_error(((const own_state *)s)->inner);
}

static ah_status own_plan(ah_state *s, const ah_batch *b, ah_plan_mode m, void *stream)
{
    own_state *o = (own_state *)s;
    o->shape[0] = b->num_tokens;
    o->shape[1] = o->spec.num_q_heads;
    o->shape[2] = o->spec.v_head_size;
    return abi_ops.plan(o->inner, b, m, stream);
}

static ah_status own_write_kv(ah_state *s, const ah_kv_write_args *a)
{
    return abi_ops.write_kv(((own_state *)s)->inner, a);
}

static ah_status own_forward(ah_state *s, const ah_forward_args *a)
{
    own_state *o = (own_state *)s;
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = o->buf;
    t.device = (DLDevice){kDLCPU, 0};
    t.ndim = 3;
    t.dtype = (DLDataType){kDLFloat, 32, 1};
    t.shape = o->shape;
    ah_forward_args inner = *a;
    inner.out = &t;
    ah_status st = abi_ops.forward(o->inner, &inner);
    if (st == AH_OK) *a->out = t;
    return st;
}

/* The backend's caps, returning its own output, marginal in both phases
 * and without config keys. */
static ah_caps caps;
static ah_plugin_ops own_ops;
__attribute__((constructor)) static void own_init(void)
{
    caps = abi_caps;
    caps.caller_output = 0;
    caps.prefill_rank = AH_RANK_MARGINAL;
    caps.decode_rank = AH_RANK_MARGINAL;
    caps.config_keys = NULL;
    caps.n_config_keys = 0;
    own_ops = abi_ops;
    own_ops.state_create = own_st_create;
    own_ops.state_destroy = own_st_destroy;
    own_ops.state_error = own_st_error;
    own_ops.plan = own_plan;
    own_ops.write_kv = own_write_kv;
    own_ops.forward = own_forward;
}

static const ah_plugin_descriptor desc = ABI_DESC("fake_cuda_own_out", &caps, &own_ops);
ABI_ENTRY(desc)
