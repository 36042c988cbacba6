/*
 * The oracle's side of a workload: the host mirror of a step's K/V write,
 * the double-precision reference attention over pieces of the batch in
 * threads, and each layer's output compared with it (`attnhost run`).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <attnhost/plugin_util.h>
#include <attnhost/reference.h>

#include "workload_int.h"

/* The per-head scales the oracle takes (NULL: the floats serve). */
static const float *head_scales(const wl_layer *L, const ah_mirror *m)
{
    return ah_spec_kv_scales(&L->spec) == AH_KV_SCALES_PER_HEAD ? m->host : NULL;
}

/* The step's new K/V into the host mirror of the cache, with the layer's
 * scales. */
ah_status wl_ref_write_kv(const workload *w, const wl_layer *L, ah_error *err)
{
    const ah_layer_spec *s = &L->spec;
    const int mla = s->use_mla;
    if (ah_spec_kv_scales(s) == AH_KV_SCALES_PER_HEAD)
        return ah_reference_write_kv_per_head(s, &w->batch, L->k.host, mla ? NULL : L->v.host,
                                              L->kcache.host, mla ? NULL : L->vcache.host,
                                              L->ksc.host, L->vsc.host, err);
    return ah_reference_write_kv(s, &w->batch, L->k.host, mla ? NULL : L->v.host, L->kcache.host,
                                 mla ? NULL : L->vcache.host, L->k_scale, L->v_scale, err);
}

double wl_tolerance(const ah_layer_spec *s)
{
    double t = s->q_dtype == AH_DTYPE_FP32 ? 1e-4 : s->q_dtype == AH_DTYPE_FP16 ? 5e-3 : 2e-2;
    if (ah_dtype_is_fp8(s->kv_dtype)) t = t < 2e-2 ? 2e-2 : t;
    return t;
}

/* The oracle over pieces of the batch, in threads: a piece is some query
 * rows of one request, as a one-request batch of its own (a causal layer's
 * rows split further, each piece's seq_len ending at its last row; a cross
 * layer's rows too, its keys being the encoder's). */
typedef struct ref_piece {
    uint32_t r, a, b; /* request r's query rows [a, b) */
} ref_piece;

typedef struct ref_job {
    workload *w;
    const wl_layer *L;
    const ref_piece *pieces;
    uint32_t n;
    uint32_t next; /* taken with __atomic */
    ah_status st;
    char msg[sizeof(((ah_error *)0)->msg)];
    pthread_mutex_t mu;
} ref_job;

/* A ragged layer's piece: rows [a, b) of request r over its context and
 * new keys up to row b (bottom-right), one causal pass. */
static ah_status ref_piece_ragged(ref_job *j, const ref_piece *p, ah_error *err)
{
    const workload *w = j->w;
    const wl_layer *L = j->L;
    const ah_layer_spec *s = &L->rspec;
    const ah_batch *b = &w->batch;
    const int32_t t0 = b->query_start_loc_host[p->r], q = b->query_start_loc_host[p->r + 1] - t0;
    const int32_t ctx = b->seq_lens_host[p->r] - q;
    int32_t qsl[2] = {0, (int32_t)(p->b - p->a)}, cuk[2] = {0, ctx + (int32_t)p->b};
    ah_batch pb = {.struct_size = sizeof pb,
                   .num_reqs = 1,
                   .num_tokens = p->b - p->a,
                   .max_query_len = p->b - p->a,
                   .max_seq_len = (uint32_t)cuk[1],
                   .query_start_loc_host = qsl,
                   .cu_seqlens_k_host = cuk,
                   .num_k_tokens = (uint32_t)cuk[1]};
    const size_t es = ah_dtype_size(s->q_dtype), row = (size_t)t0 + p->a;
    const size_t qe = (size_t)s->num_q_heads * s->qk_head_size,
                 oe = (size_t)s->num_q_heads * s->v_head_size;
    const size_t ke = (size_t)s->num_kv_heads * s->qk_head_size,
                 ve = (size_t)s->num_kv_heads * s->v_head_size;
    ah_ref_inputs in = {.struct_size = sizeof in,
                        .spec = s,
                        .batch = &pb,
                        .q = (const char *)L->rq.host + row * qe * es,
                        .sinks = s->use_sinks ? L->sinks.host : NULL,
                        .alibi_slopes = s->use_alibi ? L->alibi.host : NULL,
                        .key = (const char *)w->rkf + (size_t)w->krow0[p->r] * ke * es,
                        .value = (const char *)w->rvf + (size_t)w->krow0[p->r] * ve * es};
    return ah_reference_attention(&in, w->ref + row * oe, NULL, err);
}

static ah_status ref_piece_run(ref_job *j, const ref_piece *p, ah_error *err)
{
    const workload *w = j->w;
    const wl_layer *L = j->L;
    if (wl_ragged_now(w, L)) return ref_piece_ragged(j, p, err);
    const ah_layer_spec *s = &L->spec;
    const ah_batch *b = &w->batch;
    int32_t t0 = b->query_start_loc_host[p->r], q = b->query_start_loc_host[p->r + 1] - t0;
    int32_t qsl[2] = {0, (int32_t)(p->b - p->a)};
    int32_t sl = b->seq_lens_host[p->r];
    if (L->role == WL_SELF && ah_spec_causal(s)) sl -= q - (int32_t)p->b; /* rows past b unseen */
    ah_batch pb = *b;
    pb.num_reqs = 1;
    pb.num_tokens = p->b - p->a;
    pb.query_start_loc_host = qsl;
    pb.seq_lens_host = &sl;
    /* the layer's group's paging in the piece's own fields, as one group */
    ah_layer_spec one = *s;
    one.kv_group = 0;
    pb.num_kv_groups = 0;
    pb.kv_groups = NULL;
    if (L->role != WL_CACHELESS) {
        const wl_group *G = &w->groups[ah_spec_kv_group(s)];
        pb.num_blocks = G->num_blocks;
        pb.block_table = &G->table.t;
        pb.slot_mapping = &G->slots.t;
        pb.block_table_stride = G->row;
        pb.block_table_host = (const int32_t *)G->table.host + (size_t)p->r * G->row;
        pb.slot_mapping_host = (const int64_t *)G->slots.host + t0 + p->a;
    }
    if (b->encoder_seq_lens_host) pb.encoder_seq_lens_host = b->encoder_seq_lens_host + p->r;
    size_t row = (size_t)t0 + p->a;
    size_t qe = (size_t)s->num_q_heads * s->qk_head_size,
           oe = (size_t)s->num_q_heads * s->v_head_size;
    size_t ke = (size_t)s->num_kv_heads * s->qk_head_size,
           ve = (size_t)s->num_kv_heads * s->v_head_size;
    size_t es = ah_dtype_size(s->q_dtype);
    int nocache = L->role == WL_CACHELESS;
    ah_ref_inputs in = {.struct_size = sizeof in,
                        .spec = &one,
                        .batch = &pb,
                        .q = (const char *)L->q.host + row * qe * es,
                        .key_cache = nocache ? NULL : L->kcache.host,
                        .value_cache = nocache || s->use_mla ? NULL : L->vcache.host,
                        .sinks = s->use_sinks ? L->sinks.host : NULL,
                        .alibi_slopes = s->use_alibi ? L->alibi.host : NULL,
                        .k_scale = L->k_scale,
                        .v_scale = L->v_scale,
                        .key = nocache ? (const char *)L->k.host + (size_t)t0 * ke * es : NULL,
                        .value = nocache ? (const char *)L->v.host + (size_t)t0 * ve * es : NULL,
                        .k_scales = head_scales(L, &L->ksc),
                        .v_scales = head_scales(L, &L->vsc)};
    return ah_reference_attention(&in, w->ref + row * oe, NULL, err);
}

static void *ref_worker(void *arg)
{
    ref_job *j = arg;
    for (;;) {
        uint32_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (i >= j->n) break;
        ah_error err;
        ah_status st = ref_piece_run(j, &j->pieces[i], &err);
        if (st != AH_OK) {
            pthread_mutex_lock(&j->mu);
            if (j->st == AH_OK) {
                j->st = st;
                snprintf(j->msg, sizeof j->msg, "%s", err.msg);
            }
            pthread_mutex_unlock(&j->mu);
        }
    }
    return NULL;
}

static int reference(workload *w, uint32_t l)
{
    const wl_layer *L = &w->layers[l];
    const ah_batch *b = &w->batch;
    /* pieces of about equal work: rows x visible keys */
    int split = L->role == WL_CROSS || (L->role == WL_SELF && ah_spec_causal(&L->spec));
    uint64_t total = 0;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        uint64_t q = (uint64_t)(b->query_start_loc_host[r + 1] - b->query_start_loc_host[r]);
        uint64_t k = L->role == WL_CROSS       ? (uint64_t)b->encoder_seq_lens_host[r]
                     : L->role == WL_CACHELESS ? q
                                               : (uint64_t)b->seq_lens_host[r];
        total += q * (k ? k : 1);
    }
    uint64_t grain = total / (8ull * w->threads) + 1;
    uint32_t cap = b->num_reqs + (uint32_t)(total / grain) + 2, n = 0;
    ref_piece *pieces = malloc(cap * sizeof *pieces);
    if (!pieces) return wl_fail(w, "out of host memory");
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        uint32_t q = (uint32_t)(b->query_start_loc_host[r + 1] - b->query_start_loc_host[r]);
        uint64_t k = L->role == WL_CROSS       ? (uint64_t)b->encoder_seq_lens_host[r]
                     : L->role == WL_CACHELESS ? q
                                               : (uint64_t)b->seq_lens_host[r];
        uint32_t step = split ? (uint32_t)(grain / (k ? k : 1)) : q;
        if (step < 1) step = 1;
        for (uint32_t a = 0; a < q && n < cap; a += step) {
            uint32_t e = q - a < step || n + 1 == cap ? q : a + step;
            pieces[n++] = (ref_piece){r, a, e};
            if (e == q) break;
        }
    }
    ref_job j = {w, L, pieces, n, 0, AH_OK, "", PTHREAD_MUTEX_INITIALIZER};
    uint32_t nt = w->threads < n ? w->threads : n;
    pthread_t th[16];
    uint32_t started = 0;
    for (uint32_t i = 1; i < nt; i++)
        if (pthread_create(&th[started], NULL, ref_worker, &j) == 0) started++;
    ref_worker(&j);
    for (uint32_t i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(pieces);
    if (j.st != AH_OK) return wl_fail(w, "layer %u: reference: %s", l, j.msg);
    return 0;
}

int wl_check_layer(workload *w, uint32_t l, int store_kv, double *rel)
{
    wl_layer *L = &w->layers[l];
    *rel = 0;
    if (!L->dev) return 0; /* not attention */
    const int ragged = wl_ragged_now(w, L);
    const ah_layer_spec *s = ragged ? &L->rspec : &L->spec;
    ah_mirror *out = ragged ? &L->rout[L->rfinal] : &L->out;
    uint32_t T = w->batch.num_tokens;
    ah_error err;
    if (w->timing) return wl_fail(w, "layer %u: a timing workload is never checked", l);
    if (L->role == WL_SELF && store_kv && wl_ref_write_kv(w, L, &err) != AH_OK)
        return wl_fail(w, "layer %u: reference KV write: %s", l, err.msg);
    size_t n = (size_t)T * s->num_q_heads * s->v_head_size;
    if (n > w->ref_cap) return wl_fail(w, "layer %u: %zu outputs, room for %zu", l, n, w->ref_cap);
    if (ah_mirror_download(out, n * ah_dtype_size(s->q_dtype), w->err, sizeof w->err)) return -1;
    if (reference(w, l)) return -1;
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double got = ah_load_f32(out->host, i, s->q_dtype), d = got - w->ref[i];
        num += d * d;
        den += w->ref[i] * w->ref[i];
    }
    double e = sqrt(num / (den > 0 ? den : 1));
    if (e != e) e = INFINITY; /* NaN never passes */
    *rel = e;
    return 0;
}

int wl_check(workload *w, double *max_err, int *ok)
{
    *max_err = 0;
    *ok = 1;
    for (uint32_t l = 0; l < w->num_layers; l++) {
        double rel;
        if (!w->layers[l].dev) continue;
        if (wl_check_layer(w, l, 1, &rel)) return -1;
        if (rel > *max_err) *max_err = rel;
        if (!(rel <= wl_tolerance(&w->layers[l].spec))) *ok = 0;
    }
    return 0;
}
