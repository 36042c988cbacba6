/*
 * CUDA-graph cases: what an engine does with a backend that claims a graph
 * level. Plan for capture and capture one forward on the device stream;
 * then, for the captured batch and two more of the same shape class (same
 * requests and query lengths, other sequence lengths, block tables and
 * data, written into the same device buffers), plan for replay, launch the
 * graph, and check the result against the oracle and against an eager run
 * of the same batch. Eager runs are interleaved with replays on purpose:
 * engines run prefill eagerly between graph-replayed decode steps.
 */
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "runner.h"

#define REPLAYS 3

static int graph_step(ah__conf_run *r, ah_graph *g, const ah_forward_args *cap_args, void *scratch,
                      int i)
{
    char label[32];
    snprintf(label, sizeof label, "replay %d", i);
    if (ah__conf_poison_outputs(r)) return -1;
    if (ah_binding_plan(r->bind, &r->batch.b, AH_PLAN_REPLAY, ah_device_stream(r->dev)) != AH_OK)
        return ah__conf_fail(r, "%s: plan(REPLAY): %s", label, ah_binding_errmsg(r->bind));
    if (ah_device_graph_launch(r->dev, g) != AH_OK)
        return ah__conf_fail(r, "%s: graph launch: %s", label, ah_device_errmsg(r->dev));
    if (ah__conf_fetch_outputs(r, cap_args)) return -1;
    if (ah__conf_check_output(r, r->out.host, cap_args->lse ? r->lse.host : NULL, label)) return -1;
    memcpy(scratch, r->out.host, r->out.bytes);

    /* the same batch eagerly: must agree with the replay and the oracle */
    snprintf(label, sizeof label, "eager %d", i);
    if (ah__conf_poison_outputs(r)) return -1;
    if (ah_binding_plan(r->bind, &r->batch.b, AH_PLAN_EAGER, ah_device_stream(r->dev)) != AH_OK)
        return ah__conf_fail(r, "%s: plan: %s", label, ah_binding_errmsg(r->bind));
    ah_forward_args a;
    DLTensor out_desc;
    ah__conf_forward_args(r, &a, &out_desc, 0);
    if (ah_binding_forward(r->bind, 0, &a) != AH_OK)
        return ah__conf_fail(r, "%s: forward: %s", label, ah_binding_errmsg(r->bind));
    if (ah__conf_fetch_outputs(r, &a)) return -1;
    if (ah__conf_check_output(r, r->out.host, a.lse ? r->lse.host : NULL, label)) return -1;
    const size_t n = r->out.bytes / ah_dtype_size(r->spec.q_dtype);
    double *eager = malloc(sizeof(double) * (n ? n : 1));
    if (!eager) return ah__conf_fail(r, "out of host memory");
    for (size_t k = 0; k < n; k++) eager[k] = ah_load_f32(r->out.host, k, r->spec.q_dtype);
    ah__conf_diff d;
    ah__conf_compare(scratch, r->spec.q_dtype, eager, n, &d);
    free(eager);
    const double tol =
        ah__conf_tolerance(r->spec.q_dtype, r->spec.kv_dtype, (int)r->spec.fp8_attention).rel_l2;
    if (!(d.rel_l2 <= tol))
        return ah__conf_fail(r, "replay %d differs from the eager run: rel_l2 %.3g", i, d.rel_l2);
    return 0;
}

void ah__conf_run_graph(ah__conf_run *r, const char *plugin)
{
    const ah__conf_case *c = r->c;
    const ah_phase ph = ah__conf_phase_of(c);
    if (ah__conf_bind_prepare(r, plugin, ph)) return;
    if (r->caps->graph_level < c->graph) {
        ah__conf_skip(r, "the plugin claims graph level %s",
                      ah_graph_level_str(r->caps->graph_level));
        return;
    }
    /* sized for every batch of the class: sequences up to max + 16 */
    uint32_t max_s = 0, bs = r->spec.block_size;
    r->T = 0;
    for (uint32_t q = 0; q < c->num_reqs; q++) {
        if (c->slen[q] > max_s) max_s = c->slen[q];
        r->T += c->qlen[q];
    }
    const uint32_t L = max_s + 16;
    r->stride = (L + bs - 1) / bs + 1;
    r->num_blocks = c->num_reqs * ((L + bs - 1) / bs) + 3;
    r->lim = (ah_limits){sizeof(ah_limits), c->num_reqs, r->T, r->stride, L, r->num_blocks};
    if (ah__conf_bind_open(r, ph)) return;
    if (!ah_device_has_graphs(r->dev)) {
        ah__conf_skip(r, "the device has no graph capture");
        return;
    }
    if (ah__conf_batch_fill(r, &r->batch, c->qlen, c->slen, 0) ||
        ah__conf_batch_upload(r, &r->batch) || ah__conf_fill_inputs(r, 1) ||
        ah__conf_poison_outputs(r))
        return;

    /* capture */
    ah_forward_args cap;
    DLTensor cap_out;
    ah__conf_forward_args(r, &cap, &cap_out, 0);
    if (ah_binding_plan(r->bind, &r->batch.b, AH_PLAN_CAPTURE, ah_device_stream(r->dev)) != AH_OK) {
        ah__conf_fail(r, "plan(CAPTURE): %s", ah_binding_errmsg(r->bind));
        return;
    }
    if (ah_device_graph_begin(r->dev) != AH_OK) {
        ah__conf_fail(r, "graph begin: %s", ah_device_errmsg(r->dev));
        return;
    }
    ah_status fs = ah_binding_forward(r->bind, 0, &cap);
    ah_graph *g = NULL;
    ah_status es = ah_device_graph_end(r->dev, &g);
    if (fs != AH_OK || es != AH_OK || !g) {
        ah__conf_fail(r, "capture: %s",
                      fs != AH_OK ? ah_binding_errmsg(r->bind) : ah_device_errmsg(r->dev));
        if (g) ah_device_graph_destroy(r->dev, g);
        return;
    }
    void *scratch = malloc(r->out.bytes ? r->out.bytes : 1);
    if (!scratch) {
        ah__conf_fail(r, "out of host memory");
        ah_device_graph_destroy(r->dev, g);
        return;
    }
    for (int i = 0; i < REPLAYS; i++) {
        if (i > 0) {
            uint32_t slen[AH_CONF_MAX_REQS];
            for (uint32_t q = 0; q < c->num_reqs; q++)
                slen[q] = ah__conf_range(&r->rng, c->qlen[q], L);
            if (ah__conf_batch_fill(r, &r->batch, c->qlen, slen, 0) ||
                ah__conf_batch_upload(r, &r->batch) || ah__conf_fill_inputs(r, 1))
                break;
        }
        if (graph_step(r, g, &cap, scratch, i)) break;
    }
    free(scratch);
    ah_device_graph_destroy(r->dev, g);
}
