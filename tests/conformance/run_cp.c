/*
 * Context-parallel cases: the case's batch and cache are built whole, as
 * for an eager case, and the oracle computes the whole result. Then each
 * rank, a thread with its own binding, keeps only its shard, as an engine
 * would: its block table covers its local lengths (ah_cp_local_len), its
 * cache holds the context positions it owns (ah_cp_rank_of), and its slot
 * mapping stores the new tokens it owns. Every rank must end with the whole
 * result. Ranks share one device through a local group, or (cp_devices
 * >= the world) run on devices 0 .. world - 1 over NCCL.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>
#include <attnhost/reference.h>

#include "runner.h"

typedef struct cp_rank {
    ah__conf_run *r;
    uint32_t rank;
    ah_cp_options cpo;
    ah_binding *bind;
    ah_device *dev;
    ah_mirror q, knew, vnew, kc, vc, out, lse, sinks;
    ah_mirror d_qsl, d_sl, d_local, d_bt, d_slots;
    int32_t *local, *bt;
    int64_t *slots;
    uint32_t stride, num_blocks;
    ah_batch b;
    char why[1024];
} cp_rank;

static int rank_fail(cp_rank *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rank_fail(cp_rank *k, const char *fmt, ...)
{
    if (k->why[0]) return -1;
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(k->why, sizeof k->why, "rank %u: ", k->rank);
    vsnprintf(k->why + n, sizeof k->why - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static int mirror(cp_rank *k, ah_mirror *m, DLDataType dt, int ndim, const int64_t *shape,
                  const void *init)
{
    char why[512];
    if (ah_mirror_init(m, k->dev, dt, ndim, shape, why, sizeof why)) return rank_fail(k, "%s", why);
    if (init) memcpy(m->host, init, m->bytes);
    return ah_mirror_upload(m, 0, why, sizeof why) ? rank_fail(k, "%s", why) : 0;
}

/* The rank's paging: block table over its local lengths, the slots of
 * the new tokens it owns. */
static int shard_paging(cp_rank *k)
{
    ah__conf_run *r = k->r;
    const ah_layer_spec *s = &r->spec;
    const ah_batch *g = &r->batch.b;
    const uint32_t R = g->num_reqs, bs = s->block_size, W = k->cpo.world_size,
                   I = k->cpo.interleave;
    uint32_t maxb = 0, total = 0;
    for (uint32_t q = 0; q < R; q++) {
        uint32_t nb =
            ((uint32_t)ah_cp_local_len((uint64_t)g->seq_lens_host[q], W, k->rank, I) + bs - 1) / bs;
        total += nb;
        if (nb > maxb) maxb = nb;
    }
    k->stride = maxb + 1;
    k->num_blocks = total + 1;
    k->local = calloc(R, sizeof *k->local);
    k->bt = calloc((size_t)R * k->stride, sizeof *k->bt);
    k->slots = calloc(g->num_tokens ? g->num_tokens : 1, sizeof *k->slots);
    if (!k->local || !k->bt || !k->slots) return rank_fail(k, "out of host memory");
    /* blocks from the top down, so a shard's ids differ from the whole's */
    uint32_t next = k->num_blocks - 1;
    for (uint32_t q = 0; q < R; q++) {
        const uint32_t len =
            (uint32_t)ah_cp_local_len((uint64_t)g->seq_lens_host[q], W, k->rank, I);
        k->local[q] = (int32_t)len;
        int32_t *row = k->bt + (size_t)q * k->stride;
        for (uint32_t j = 0; j < (len + bs - 1) / bs; j++) row[j] = (int32_t)next--;
        const int32_t q0 = g->query_start_loc_host[q], ql = g->query_start_loc_host[q + 1] - q0;
        for (int32_t t = 0; t < ql; t++) {
            uint64_t lp;
            const uint64_t p = (uint64_t)(g->seq_lens_host[q] - ql + t);
            k->slots[q0 + t] = ah_cp_rank_of(p, W, I, &lp) == k->rank
                                   ? (int64_t)row[lp / bs] * bs + (int64_t)(lp % bs)
                                   : -1;
        }
    }
    return 0;
}

/* The rank's cache, allocated as its binding describes it (an interleaved
 * layout's value a view into the key's allocation): the context rows it
 * owns, copied from the whole cache as uploaded (before the new tokens);
 * zeros elsewhere. */
static int shard_cache(cp_rank *k)
{
    ah__conf_run *r = k->r;
    const ah_layer_spec *s = &r->spec;
    const ah_batch *g = &r->batch.b;
    const uint32_t R = g->num_reqs, bs = s->block_size, W = k->cpo.world_size,
                   I = k->cpo.interleave;
    ah_kv_cache_desc kd = {.struct_size = sizeof kd}, vd = {.struct_size = sizeof vd};
    char why[512];
    if (ah_binding_kv_cache_desc(k->bind, 0, k->num_blocks, &kd, &vd) != AH_OK)
        return rank_fail(k, "kv_cache_desc: %s", ah_binding_errmsg(k->bind));
    if (ah_mirror_kv_init(&k->kc, &k->vc, k->dev, &kd, &vd, 1, why, sizeof why))
        return rank_fail(k, "%s", why);
    const size_t esz = ah_dtype_size(s->kv_dtype);
    /* the whole cache's values: in its own copy, or (interleaved) in the
     * key's at the value view's place */
    const char *vc0 = s->use_mla   ? NULL
                      : r->vc.host ? r->vc0
                                   : (const char *)r->kc0 + ((char *)r->vhost - (char *)r->kc.host);
    for (uint32_t q = 0; q < R; q++) {
        const int32_t ql = g->query_start_loc_host[q + 1] - g->query_start_loc_host[q];
        const uint64_t ctx = (uint64_t)(g->seq_lens_host[q] - ql);
        const int32_t *grow = g->block_table_host + (size_t)q * g->block_table_stride;
        const int32_t *lrow = k->bt + (size_t)q * k->stride;
        for (uint64_t p = 0; p < ctx; p++) {
            uint64_t lp;
            if (ah_cp_rank_of(p, W, I, &lp) != k->rank) continue;
            for (uint32_t h = 0; h < s->num_kv_heads; h++) {
                const size_t from = ah_kv_offset(s->kv_layout, bs, s->num_kv_heads, s->qk_head_size,
                                                 (uint32_t)grow[p / bs], (uint32_t)(p % bs), h, 0),
                             to = ah_kv_offset(s->kv_layout, bs, s->num_kv_heads, s->qk_head_size,
                                               (uint32_t)lrow[lp / bs], (uint32_t)(lp % bs), h, 0);
                memcpy((char *)k->kc.host + to * esz, (const char *)r->kc0 + from * esz,
                       s->qk_head_size * esz);
                if (s->use_mla) continue;
                const size_t vf = ah_kv_offset(s->kv_layout, bs, s->num_kv_heads, s->v_head_size,
                                               (uint32_t)grow[p / bs], (uint32_t)(p % bs), h, 0),
                             vt = ah_kv_offset(s->kv_layout, bs, s->num_kv_heads, s->v_head_size,
                                               (uint32_t)lrow[lp / bs], (uint32_t)(lp % bs), h, 0);
                memcpy((char *)k->vc.host + vt * esz, vc0 + vf * esz, s->v_head_size * esz);
            }
        }
    }
    /* the key's upload carries an interleaved value view; a view owns
     * nothing to copy */
    if (ah_mirror_upload(&k->kc, 0, why, sizeof why) ||
        ah_mirror_upload(&k->vc, 0, why, sizeof why))
        return rank_fail(k, "%s", why);
    return 0;
}

/* The engine's batch on this rank: global query_start_loc and seq_lens,
 * the shard's paging; odd ranks also pass cp_local_seq_lens. */
static int build_batch(cp_rank *k)
{
    const ah_batch *g = &k->r->batch.b;
    const int64_t R = g->num_reqs, R1 = R + 1, T = g->num_tokens, sbt[2] = {R, k->stride};
    const DLDataType i32 = {kDLInt, 32, 1}, i64 = {kDLInt, 64, 1};
    if (mirror(k, &k->d_qsl, i32, 1, &R1, g->query_start_loc_host) ||
        mirror(k, &k->d_sl, i32, 1, &R, g->seq_lens_host) ||
        mirror(k, &k->d_local, i32, 1, &R, k->local) || mirror(k, &k->d_bt, i32, 2, sbt, k->bt) ||
        mirror(k, &k->d_slots, i64, 1, &T, k->slots))
        return -1;
    ah_batch *b = &k->b;
    *b = *g;
    b->num_blocks = k->num_blocks;
    b->query_start_loc = &k->d_qsl.t;
    b->seq_lens = &k->d_sl.t;
    b->block_table = &k->d_bt.t;
    b->block_table_host = k->bt;
    b->block_table_stride = k->stride;
    b->slot_mapping = &k->d_slots.t;
    b->slot_mapping_host = k->slots;
    if (k->rank % 2) {
        b->cp_local_seq_lens = &k->d_local.t;
        b->cp_local_seq_lens_host = k->local;
    }
    return 0;
}

static void *run_rank(void *arg)
{
    cp_rank *k = arg;
    ah__conf_run *r = k->r;
    const ah_layer_spec *s = &r->spec;
    ah_binding_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.device_index = k->cpo.nccl_comm ? (int32_t)k->rank : 0;
    o.cp = &k->cpo;
    ah_error err = {{0}};
    /* limits: the shard's cache; lengths stay global */
    o.limits = r->lim;
    if (shard_paging(k)) return NULL;
    o.limits.num_blocks = k->num_blocks;
    o.limits.max_blocks_per_req = k->stride;
    ah_status st = ah_binding_create(r->host, r->sel, &o, &k->bind, &err);
    if (st != AH_OK) {
        rank_fail(k, "ah_binding_create: %s: %s", ah_status_str(st), err.msg);
        return NULL;
    }
    k->dev = ah_binding_device(k->bind, 0, AH_PHASE_DECODE);
    if (!k->dev) {
        rank_fail(k, "ah_binding_device returned NULL");
        return NULL;
    }
    const DLDataType qt = ah_dtype_to_dl(s->q_dtype), f32 = {kDLFloat, 32, 1};
    const int64_t T = r->T, sq[3] = {T, s->num_q_heads, s->qk_head_size},
                  sk[3] = {T, s->num_kv_heads, s->qk_head_size},
                  sv[3] = {T, s->num_kv_heads, s->v_head_size},
                  so[3] = {T, s->num_q_heads, s->v_head_size}, sl[2] = {T, s->num_q_heads},
                  sh = s->num_q_heads;
    if (shard_cache(k) || build_batch(k) || mirror(k, &k->q, qt, 3, sq, r->q.host) ||
        mirror(k, &k->knew, qt, 3, sk, r->knew.host) ||
        (!s->use_mla && mirror(k, &k->vnew, qt, 3, sv, r->vnew.host)) ||
        mirror(k, &k->sinks, f32, 1, &sh, r->sinks.host) || mirror(k, &k->out, qt, 3, so, NULL) ||
        mirror(k, &k->lse, f32, 2, sl, NULL))
        return NULL;
    ah__conf_poison(k->out.host, k->out.bytes / ah_dtype_size(s->q_dtype), s->q_dtype);
    ah__conf_poison_f32(k->lse.host, k->lse.bytes / 4);
    char why[512];
    if (ah_mirror_upload(&k->out, 0, why, sizeof why) ||
        ah_mirror_upload(&k->lse, 0, why, sizeof why)) {
        rank_fail(k, "%s", why);
        return NULL;
    }
    void *stream = ah_device_stream(k->dev);
    const int graph = r->c->graph != AH_GRAPH_NEVER;
    if (ah_binding_plan(k->bind, &k->b, graph ? AH_PLAN_CAPTURE : AH_PLAN_EAGER, stream) != AH_OK) {
        rank_fail(k, "plan: %s", ah_binding_errmsg(k->bind));
        return NULL;
    }
    ah_forward_args a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.q = &k->q.t;
    a.key = &k->knew.t;
    a.value = s->use_mla ? NULL : &k->vnew.t;
    a.key_cache = &k->kc.t;
    a.value_cache = s->use_mla ? NULL : &k->vc.t;
    a.out = &k->out.t;
    a.lse = &k->lse.t;
    a.sinks = s->use_sinks ? &k->sinks.t : NULL;
    a.k_scale = r->k_scale;
    a.v_scale = r->v_scale;
    a.stream = stream;
    if (graph) { /* capture the step (forward, all-gather, merges), replay it */
        ah_graph *gr = NULL;
        if (ah_device_graph_begin(k->dev) != AH_OK) {
            rank_fail(k, "graph begin: %s", ah_device_errmsg(k->dev));
            return NULL;
        }
        ah_status fs = ah_binding_forward(k->bind, 0, &a);
        ah_status es = ah_device_graph_end(k->dev, &gr);
        if (fs != AH_OK || es != AH_OK || !gr) {
            rank_fail(k, "capture: %s",
                      fs != AH_OK ? ah_binding_errmsg(k->bind) : ah_device_errmsg(k->dev));
            if (gr) ah_device_graph_destroy(k->dev, gr);
            return NULL;
        }
        /* the capture ran nothing: the outputs still hold the poison */
        ah_status rs = ah_binding_plan(k->bind, &k->b, AH_PLAN_REPLAY, stream);
        ah_status ls = rs == AH_OK ? ah_device_graph_launch(k->dev, gr) : rs;
        ah_device_graph_destroy(k->dev, gr);
        if (ls != AH_OK) {
            rank_fail(k, "replay: %s",
                      rs != AH_OK ? ah_binding_errmsg(k->bind) : ah_device_errmsg(k->dev));
            return NULL;
        }
    } else if (ah_binding_forward(k->bind, 0, &a) != AH_OK) {
        rank_fail(k, "forward: %s", ah_binding_errmsg(k->bind));
        return NULL;
    }
    if (ah_device_sync(k->dev) != AH_OK || ah_mirror_download(&k->out, 0, why, sizeof why) ||
        ah_mirror_download(&k->lse, 0, why, sizeof why))
        rank_fail(k, "copy back: %s", why[0] ? why : ah_device_errmsg(k->dev));
    return NULL;
}

static void rank_free(cp_rank *k)
{
    ah_mirror *ms[] = {&k->q,     &k->knew,  &k->vnew, &k->kc,      &k->vc,   &k->out,    &k->lse,
                       &k->sinks, &k->d_qsl, &k->d_sl, &k->d_local, &k->d_bt, &k->d_slots};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) ah_mirror_free(ms[i]);
    free(k->local), free(k->bt), free(k->slots);
    if (k->bind) ah_binding_destroy(k->bind);
}

void ah__conf_run_cp(ah__conf_run *r, const char *plugin, uint32_t cp_devices)
{
    const ah__conf_case *c = r->c;
    const uint32_t W = c->cp_world;
    if (ah__conf_bind_prepare(r, plugin, AH_PHASE_DECODE)) return;
    uint32_t maxb = 0, total = 0, max_s = 0;
    r->T = 0;
    for (uint32_t q = 0; q < c->num_reqs; q++) {
        uint32_t nb = (c->slen[q] + r->spec.block_size - 1) / r->spec.block_size;
        total += nb;
        if (nb > maxb) maxb = nb;
        if (c->slen[q] > max_s) max_s = c->slen[q];
        r->T += c->qlen[q];
    }
    r->stride = maxb + 2;
    r->num_blocks = total + 3;
    r->lim = (ah_limits){sizeof(ah_limits), c->num_reqs, r->T, r->stride, max_s, r->num_blocks};
    /* the whole batch and cache (on an ordinary binding's device) and the
     * oracle's cache after the new tokens' write */
    if (ah__conf_bind_open(r, AH_PHASE_DECODE) ||
        ah__conf_batch_fill(r, &r->batch, c->qlen, c->slen, 1) || ah__conf_fill_inputs(r, 0))
        return;
    ah_error err = {{0}};
    if (ah__conf_ref_write_kv(r, &r->batch.b, r->knew.host, r->vnew.host, r->kc.host, r->vhost,
                              &err) != AH_OK) {
        ah__conf_fail(r, "oracle write_kv: %s", err.msg);
        return;
    }
    const int nccl = cp_devices >= W;
    void *comms[AH_CONF_MAX_CP];
    ah_cp_local_group *group = NULL;
    ah_status st;
    if (nccl) {
        int32_t devs[AH_CONF_MAX_CP];
        for (uint32_t i = 0; i < W; i++) devs[i] = (int32_t)i;
        st = ah_cp_nccl_comms_create(W, devs, NULL, comms, &err);
    } else {
        st = ah_cp_local_group_create(W, &group, &err);
    }
    if (st != AH_OK) {
        ah__conf_fail(r, "%s: %s", nccl ? "NCCL communicators" : "local group", err.msg);
        return;
    }
    cp_rank ranks[AH_CONF_MAX_CP];
    pthread_t th[AH_CONF_MAX_CP];
    memset(ranks, 0, sizeof ranks);
    for (uint32_t i = 0; i < W; i++) {
        cp_rank *k = &ranks[i];
        k->r = r;
        k->rank = i;
        k->cpo = (ah_cp_options){sizeof k->cpo,          W,     i,    c->cp_interleave,
                                 nccl ? comms[i] : NULL, group, NULL, 30000};
        if (pthread_create(&th[i], NULL, run_rank, k)) {
            rank_fail(k, "cannot start its thread");
            th[i] = 0;
        }
    }
    for (uint32_t i = 0; i < W; i++)
        if (th[i]) pthread_join(th[i], NULL);
    for (uint32_t i = 0; i < W && r->res->verdict != AH__CONF_FAIL; i++) {
        if (ranks[i].why[0]) {
            ah__conf_fail(r, "%s", ranks[i].why);
            break;
        }
        char label[32];
        snprintf(label, sizeof label, "rank %u of %u", i, W);
        ah__conf_check_output(r, ranks[i].out.host, ranks[i].lse.host, label);
    }
    for (uint32_t i = 0; i < W; i++) rank_free(&ranks[i]);
    if (nccl)
        for (uint32_t i = 0; i < W; i++) ah_cp_nccl_comm_destroy(comms[i]);
    ah_cp_local_group_destroy(group);
}
