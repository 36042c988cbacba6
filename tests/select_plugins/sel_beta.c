/*
 * sel_beta: any head size, decoder attention, and
 * "CUDA graphs" at UNIFORM_BATCH on the CPU: between graph_begin and
 * graph_end forward calls are recorded, not run; graph_launch runs them
 * against whatever the last plan (AH_PLAN_REPLAY) left in the state. That
 * is the contract a GPU graph follows, so the conformance suite's capture
 * and replay path runs in CI without a GPU.
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define MAX_RECORDED 64

struct ah_graph {
    ah_state *st[MAX_RECORDED];
    ah_forward_args args[MAX_RECORDED];
    int n;
};

static struct ah_graph *capturing; /* one capture at a time, as tests use it */

static ah_status beta_forward(ah_state *st, const ah_forward_args *a)
{
    if (!capturing) return abi_ops.forward(st, a);
    if (capturing->n == MAX_RECORDED) return AH_ERR_OUT_OF_MEMORY;
    capturing->st[capturing->n] = st;
    capturing->args[capturing->n++] = *a;
    return AH_OK;
}

static ah_status mem_alloc(ah_context *c, size_t n, void **p)
{
    (void)c;
    *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    return *p ? AH_OK : AH_ERR_OUT_OF_MEMORY;
}

static void mem_free(ah_context *c, void *p)
{
    (void)c;
    free(p);
}

static ah_status mem_copy(ah_context *c, void *d, const void *s, size_t n, ah_copy_kind k, void *stream)
{
    (void)c, (void)k, (void)stream;
    memmove(d, s, n);
    return AH_OK;
}

static ah_status sync(ah_context *c, void *stream)
{
    (void)c, (void)stream;
    return AH_OK;
}

/* One stream is all the host needs; its value only has to be distinct. */
static char the_stream;

static ah_status stream_create(ah_context *c, void **stream)
{
    (void)c;
    *stream = &the_stream;
    return AH_OK;
}

static void stream_destroy(ah_context *c, void *stream) { (void)c, (void)stream; }

static ah_status graph_begin(ah_context *c, void *stream)
{
    (void)c, (void)stream;
    if (capturing) return AH_ERR_INVALID_ARGUMENT;
    capturing = calloc(1, sizeof *capturing);
    return capturing ? AH_OK : AH_ERR_OUT_OF_MEMORY;
}

static ah_status graph_end(ah_context *c, void *stream, ah_graph **g)
{
    (void)c, (void)stream;
    *g = capturing;
    capturing = NULL;
    return *g ? AH_OK : AH_ERR_INVALID_ARGUMENT;
}

static ah_status graph_launch(ah_context *c, ah_graph *g, void *stream)
{
    (void)c, (void)stream;
    for (int i = 0; i < g->n; i++) {
        ah_status s = abi_ops.forward(g->st[i], &g->args[i]);
        if (s != AH_OK) return s;
    }
    return AH_OK;
}

static void graph_destroy(ah_context *c, ah_graph *g)
{
    (void)c;
    free(g);
}

static const ah_caps caps = {
    .struct_size = sizeof(ah_caps),
    .q_dtypes = AH_BIT(AH_DTYPE_FP32),
    .kv_dtypes = AH_BIT(AH_DTYPE_FP32),
    .qk_head_sizes = AH_INT_SET_RANGE(1, 1024, 1),
    .v_head_sizes = AH_INT_SET_RANGE(1, 1024, 1),
    .block_sizes = AH_INT_SET_RANGE(1, 1024, 1),
    .preferred_block_size = 32,
    .features = AH_FEAT_DIFF_HEAD_SIZES,
    .attn_types = AH_BIT(AH_ATTN_DECODER),
    .kv_layouts = AH_BIT(AH_KV_LAYOUT_NHD),
    .preferred_kv_layout = AH_KV_LAYOUT_NHD,
    .graph_level = AH_GRAPH_UNIFORM_BATCH,
    .caller_output = 1,
};

static ah_plugin_ops ops;
static const ah_plugin_descriptor desc = ABI_DESC("sel_beta", &caps, &ops);

AH_EXPORT const ah_plugin_descriptor *attnhost_plugin_entry(uint32_t v, const ah_host_services *h,
                                                            const char **why);
AH_EXPORT const ah_plugin_descriptor *attnhost_plugin_entry(uint32_t v, const ah_host_services *h,
                                                            const char **why)
{
    (void)v;
    (void)why;
    abi_host = h;
    ops = abi_ops;
    ops.forward = beta_forward;
    ops.mem_alloc = mem_alloc;
    ops.mem_free = mem_free;
    ops.mem_copy = mem_copy;
    ops.synchronize = sync;
    ops.stream_create = stream_create;
    ops.stream_destroy = stream_destroy;
    ops.graph_begin = graph_begin;
    ops.graph_end = graph_end;
    ops.graph_launch = graph_launch;
    ops.graph_destroy = graph_destroy;
    return &desc;
}
