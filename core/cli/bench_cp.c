/*
 * attnhost bench --cp N: decode attention of one layer with its KV cache
 * sharded over 1, 2, 4 ... N ranks (context parallelism, ABI 2.2), as an
 * engine would run it: one thread per rank driving its own binding on
 * device `rank`, joined by NCCL communicators over devices 0 .. world - 1
 * (ah_cp_nccl_comms_create) or, for a CPU plugin, a local group.
 *
 * Each rank fills its own shard of the cache, as its engine would: the
 * block table covers the request's local positions (ah_cp_local_len) and
 * the new token's slot is given only on the rank that holds its position
 * (ah_cp_rank_of). Per shape and world it reports the step's median time
 * (the slowest rank's median over --iters device-timer timings: a step ends
 * when every rank has merged), the same rank's attention alone (a world-1
 * binding over the same shard and local lengths), so the share of the
 * all-gather and merge is 1 - local / step, the throughput against one
 * rank and the scaling efficiency T1 / (N * TN), and per batch the longest
 * context whose shard fits one device's memory at each rank count.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <attnhost/plugin_util.h>

#include "ceilings.h"
#include "cli.h"
#include "workload.h"
#include "zoo.h"

#define CP_MAX_WORLD 64
#define CP_MAX_SHAPES 32

typedef struct cp_layer {
    uint32_t hq, hk, head, block;
    const char *dtype, *kv_dtype;
} cp_layer;

typedef struct cp_shape {
    uint32_t batch, context; /* requests, each with context cached tokens + 1 new */
} cp_shape;

/* One (shape, world) run, shared by its rank threads. */
typedef struct cp_run {
    ah_host *h;
    const ah_selection *sel;
    const ah_layer_spec *spec;
    cp_shape s;
    uint32_t world, interleave;
    int iters, b2b;
    void **comms;             /* NCCL, or NULL */
    ah_cp_local_group *group; /* CPU plugins, or NULL */
    pthread_barrier_t bar;
    atomic_int failed;
    double *copy_gbs; /* the device's copy bandwidth, measured once (0: not yet) */
} cp_run;

typedef struct cp_rank {
    cp_run *run;
    uint32_t rank;
    double step_ms, local_ms; /* medians */
    double plan_us;           /* median host time of ah_binding_plan (the step's check) */
    char why[1024];
} cp_rank;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static uint64_t kv_row_bytes(const ah_layer_spec *s)
{
    return (uint64_t)s->num_kv_heads * (s->qk_head_size + (s->use_mla ? 0 : s->v_head_size)) *
           ah_dtype_size(s->kv_dtype);
}

/* The bytes of a rank's shard: its requests' local blocks, one spare. */
static uint64_t shard_bytes(const ah_layer_spec *sp, const cp_shape *s, uint32_t world,
                            uint32_t rank, uint32_t interleave)
{
    uint64_t local = ah_cp_local_len((uint64_t)s->context + 1, world, rank, interleave);
    uint64_t blocks = (local + sp->block_size - 1) / sp->block_size * s->batch + 1;
    return blocks * sp->block_size * kv_row_bytes(sp);
}

/* Every rank reaches each sync point, failed or not, so none waits for ever;
 * returns whether any rank has failed. */
static int sync_point(cp_rank *r, int failed_here)
{
    if (failed_here) atomic_store(&r->run->failed, 1);
    pthread_barrier_wait(&r->run->bar);
    return atomic_load(&r->run->failed);
}

/* A rank's tensors over one cache: the step's batch, q, out and the cache. */
typedef struct cp_data {
    ah_device *dev;
    ah_mirror q, out, qsl, seqlens, table, slots;
    ah_mirror kc, vc; /* device only: a shard may be most of the device */
    uint32_t mb, num_blocks;
    uint64_t local; /* this rank's local length of each request */
} cp_data;

static int rank_fail(cp_rank *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rank_fail(cp_rank *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    return -1;
}

static void data_free(cp_data *d)
{
    ah_mirror *all[] = {&d->q, &d->out, &d->qsl, &d->seqlens, &d->table, &d->slots, &d->vc, &d->kc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ah_mirror_free(all[i]);
    memset(d, 0, sizeof *d);
}

/* The rank's cache, q and out on b's device, and the block table of its
 * shard: request i owns blocks i * mb .. (i + 1) * mb - 1. */
static int data_init(cp_rank *r, ah_binding *b, cp_data *d)
{
    const cp_run *run = r->run;
    const ah_layer_spec *sp = run->spec;
    uint32_t B = run->s.batch, bs = sp->block_size;
    char err[512];
    d->dev = ah_binding_device(b, 0, AH_PHASE_DECODE);
    d->local = ah_cp_local_len((uint64_t)run->s.context + 1, run->world, r->rank, run->interleave);
    d->mb = (uint32_t)((d->local + bs - 1) / bs);
    if (!d->mb) d->mb = 1;
    d->num_blocks = d->mb * B + 1;
    ah_kv_cache_desc kd = {.struct_size = sizeof kd}, vd = {.struct_size = sizeof vd};
    if (ah_binding_kv_cache_desc(b, 0, d->num_blocks, &kd, &vd) != AH_OK)
        return rank_fail(r, "%s", ah_binding_errmsg(b));
    if (ah_mirror_kv_init(&d->kc, &d->vc, d->dev, &kd, &vd, 0, err, sizeof err))
        return rank_fail(r, "the KV cache: %s", err);
    /* what each owns: an interleaved layout's values lie in the key's */
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)r->rank << 32);
    ah_mirror *own[2] = {&d->kc, &d->vc};
    for (int i = 0; i < 2; i++)
        if (own[i]->bytes && wl_fill_device(d->dev, own[i]->t.data, own[i]->bytes, sp->kv_dtype,
                                            &rng, err, sizeof err))
            return rank_fail(r, "the KV cache: %s", err);
    DLDataType qt = ah_dtype_to_dl(sp->q_dtype), i32 = {kDLInt, 32, 1}, i64 = {kDLInt, 64, 1};
    int64_t s_q[3] = {B, sp->num_q_heads, sp->qk_head_size},
            s_o[3] = {B, sp->num_q_heads, sp->v_head_size}, s_qsl[1] = {B + 1}, s_req[1] = {B},
            s_tab[2] = {B, d->mb}, s_tok[1] = {B};
    if (ah_mirror_init(&d->q, d->dev, qt, 3, s_q, err, sizeof err) ||
        ah_mirror_init(&d->out, d->dev, qt, 3, s_o, err, sizeof err) ||
        ah_mirror_init(&d->qsl, d->dev, i32, 1, s_qsl, err, sizeof err) ||
        ah_mirror_init(&d->seqlens, d->dev, i32, 1, s_req, err, sizeof err) ||
        ah_mirror_init(&d->table, d->dev, i32, 2, s_tab, err, sizeof err) ||
        ah_mirror_init(&d->slots, d->dev, i64, 1, s_tok, err, sizeof err))
        return rank_fail(r, "%s", err);
    wl_fill_random(&rng, d->q.host, d->q.bytes / ah_dtype_size(sp->q_dtype), sp->q_dtype);
    int32_t *tab = d->table.host, *qsl = d->qsl.host;
    for (uint32_t i = 0; i < B; i++) {
        qsl[i] = (int32_t)i;
        for (uint32_t k = 0; k < d->mb; k++) tab[(size_t)i * d->mb + k] = (int32_t)(i * d->mb + k);
    }
    qsl[B] = (int32_t)B;
    if (ah_mirror_upload(&d->q, 0, err, sizeof err) ||
        ah_mirror_upload(&d->qsl, 0, err, sizeof err) ||
        ah_mirror_upload(&d->table, 0, err, sizeof err))
        return rank_fail(r, "%s", err);
    return 0;
}

/* Plan the decode step on b: with cp, global lengths and a slot only where
 * this rank holds the new token; without, the rank's local lengths (its
 * attention alone, nothing written: the slot is the last local one). */
static int plan(cp_rank *r, ah_binding *b, cp_data *d, ah_batch *batch, int cp)
{
    const cp_run *run = r->run;
    uint32_t B = run->s.batch, bs = run->spec->block_size, ctx = run->s.context;
    int32_t *sl = d->seqlens.host;
    int64_t *slots = d->slots.host;
    uint64_t local_pos = 0;
    uint32_t owner = ah_cp_rank_of(ctx, run->world, run->interleave, &local_pos);
    if (!cp) local_pos = d->local - 1;
    for (uint32_t i = 0; i < B; i++) {
        sl[i] = (int32_t)(cp ? ctx + 1 : d->local);
        int mine = !cp || owner == r->rank;
        slots[i] =
            mine ? (int64_t)(i * d->mb + local_pos / bs) * bs + (int64_t)(local_pos % bs) : -1;
    }
    char err[512];
    if (ah_mirror_upload(&d->seqlens, 0, err, sizeof err) ||
        ah_mirror_upload(&d->slots, 0, err, sizeof err))
        return rank_fail(r, "%s", err);
    *batch = (ah_batch){.struct_size = sizeof(ah_batch),
                        .num_reqs = B,
                        .num_tokens = B,
                        .max_query_len = 1,
                        .max_seq_len = (uint32_t)sl[0],
                        .num_blocks = d->num_blocks,
                        .query_start_loc = &d->qsl.t,
                        .seq_lens = &d->seqlens.t,
                        .block_table = &d->table.t,
                        .slot_mapping = &d->slots.t,
                        .query_start_loc_host = d->qsl.host,
                        .seq_lens_host = sl,
                        .block_table_host = d->table.host,
                        .slot_mapping_host = slots,
                        .block_table_stride = d->mb};
    if (ah_binding_plan(b, batch, AH_PLAN_EAGER, ah_device_stream(d->dev)) != AH_OK)
        return rank_fail(r, "%s", ah_binding_errmsg(b));
    return 0;
}

/* Median of iters device-timer timings of b2b forwards each, after three
 * warm-ups. */
static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* The host's time of planning the step again (with context parallelism:
 * the local batch, its lengths' copy and the step's check with every rank,
 * which waits for the stream), median of the iterations. */
static int time_plan(cp_rank *r, ah_binding *b, cp_data *d, const ah_batch *batch, double *us)
{
    const int n = r->run->iters;
    float *t = malloc((size_t)n * sizeof *t);
    if (!t) return rank_fail(r, "out of host memory");
    for (int i = 0; i < n; i++) {
        double t0 = now_us();
        if (ah_binding_plan(b, batch, AH_PLAN_EAGER, ah_device_stream(d->dev)) != AH_OK) {
            free(t);
            return rank_fail(r, "plan: %s", ah_binding_errmsg(b));
        }
        t[i] = (float)(now_us() - t0);
    }
    qsort(t, (size_t)n, sizeof *t, cmp_float);
    *us = t[n / 2];
    free(t);
    return 0;
}

static int time_forward(cp_rank *r, ah_binding *b, cp_data *d, double *median_ms)
{
    const cp_run *run = r->run;
    int fp8 = ah_dtype_is_fp8(run->spec->kv_dtype);
    ah_forward_args a = {.struct_size = sizeof a,
                         .q = &d->q.t,
                         .key_cache = &d->kc.t,
                         .value_cache = d->vc.t.data ? &d->vc.t : NULL,
                         .out = &d->out.t,
                         .k_scale = fp8 ? 1.0f / 64 : 1.0f,
                         .v_scale = fp8 ? 1.0f / 48 : 1.0f,
                         .stream = ah_device_stream(d->dev)};
    float *ms = malloc((size_t)run->iters * sizeof *ms);
    if (!ms) return rank_fail(r, "out of host memory");
    int rc = -1;
    for (int i = 0; i < 3; i++)
        if (ah_binding_forward(b, 0, &a) != AH_OK) goto fwd_fail;
    if (ah_device_sync(d->dev) != AH_OK) goto dev_fail;
    for (int i = 0; i < run->iters; i++) {
        if (ah_device_timer_start(d->dev) != AH_OK) goto dev_fail;
        for (int k = 0; k < run->b2b; k++)
            if (ah_binding_forward(b, 0, &a) != AH_OK) goto fwd_fail;
        if (ah_device_timer_stop(d->dev, &ms[i]) != AH_OK || ah_device_sync(d->dev) != AH_OK)
            goto dev_fail;
        ms[i] /= (float)run->b2b;
    }
    qsort(ms, (size_t)run->iters, sizeof *ms, cmp_float);
    *median_ms = ms[run->iters / 2];
    rc = 0;
    goto out;
fwd_fail:
    rank_fail(r, "%s", ah_binding_errmsg(b));
    goto out;
dev_fail:
    rank_fail(r, "%s", ah_device_errmsg(d->dev));
out:
    free(ms);
    return rc;
}

static ah_status binding_for(cp_rank *r, const ah_cp_options *cp, uint64_t len, ah_binding **b,
                             ah_error *err)
{
    const cp_run *run = r->run;
    uint32_t bs = run->spec->block_size, B = run->s.batch;
    uint32_t mb = (uint32_t)((ah_cp_local_len((uint64_t)run->s.context + 1, run->world, r->rank,
                                              run->interleave) +
                              bs - 1) /
                             bs);
    ah_binding_options o = {
        .struct_size = sizeof o,
        .limits = {sizeof(ah_limits), B, B, mb ? mb : 1, (uint32_t)len, (mb ? mb : 1) * B + 1},
        .device_index = (int32_t)r->rank,
        .cp = cp};
    return ah_binding_create(run->h, run->sel, &o, b, err);
}

/* A rank: three phases, each ended at a sync point every rank reaches, so
 * a rank that fails in its setup stops the others cleanly. A rank that
 * fails inside a timed forward leaves the others in the collective: a
 * local group gives up after its time-out, NCCL waits (the engine's
 * position too: it would abort the communicator). */
static void *rank_main(void *arg)
{
    cp_rank *r = arg;
    cp_run *run = r->run;
    cp_data d = {0};
    ah_binding *b = NULL, *lb = NULL;
    ah_batch batch, lbatch;
    ah_error err;
    int cp = run->world > 1;
    ah_cp_options o = {.struct_size = sizeof o,
                       .world_size = run->world,
                       .rank = r->rank,
                       .interleave = run->interleave,
                       .nccl_comm = run->comms ? run->comms[r->rank] : NULL,
                       .local_group = run->group};
    /* 1: the rank's binding, its shard and the step's plan (the plan's
     * check meets the other ranks) */
    int bad = binding_for(r, cp ? &o : NULL, (uint64_t)run->s.context + 1, &b, &err) != AH_OK
                  ? rank_fail(r, "%s", err.msg)
                  : data_init(r, b, &d) || plan(r, b, &d, &batch, cp);
    if (sync_point(r, bad)) goto out;
    /* 2: the sharded step, then its plan alone */
    bad = time_forward(r, b, &d, &r->step_ms) || time_plan(r, b, &d, &batch, &r->plan_us);
    if (sync_point(r, bad) || !cp) {
        r->local_ms = r->step_ms;
        if (!bad && !*run->copy_gbs) { /* the ceiling, once, with the cache freed */
            ah_binding *keep = b;
            data_free(&d);
            *run->copy_gbs =
                ah_device_kind_of(ah_binding_device(keep, 0, AH_PHASE_DECODE)) == AH_DEVICE_CPU
                    ? cpu_read_gbs(ah_host_hw_facts(run->h)->cpu_logical_cores)
                    : device_copy_gbs(ah_binding_device(keep, 0, AH_PHASE_DECODE));
        }
        goto out;
    }
    /* 3: the same shard alone, every rank at once as in the step */
    bad = !d.local ? 0
          : binding_for(r, NULL, d.local, &lb, &err) != AH_OK
              ? rank_fail(r, "%s", err.msg)
              : plan(r, lb, &d, &lbatch, 0) || time_forward(r, lb, &d, &r->local_ms);
    sync_point(r, bad);
out: /* the data lives on the bindings' devices: free it first */
    data_free(&d);
    ah_binding_destroy(lb);
    ah_binding_destroy(b);
    return NULL;
}

/* Run one shape on world ranks; the slowest rank's figures in *step, *local.
 * 0 fine; -1 with why. */
static int run_world(ah_host *h, const ah_selection *sel, const ah_layer_spec *sp, cp_shape s,
                     uint32_t world, uint32_t interleave, int iters, int b2b, int nccl,
                     double *copy_gbs, double *step, double *local, double *plan_us, char *why,
                     size_t cap)
{
    cp_run run = {.h = h,
                  .copy_gbs = copy_gbs,
                  .sel = sel,
                  .spec = sp,
                  .s = s,
                  .world = world,
                  .interleave = interleave,
                  .iters = iters,
                  .b2b = b2b};
    void *comms[CP_MAX_WORLD] = {0};
    cp_rank ranks[CP_MAX_WORLD];
    pthread_t t[CP_MAX_WORLD];
    ah_error err;
    int rc = -1;
    if (world > 1 && nccl) {
        int32_t devs[CP_MAX_WORLD];
        for (uint32_t i = 0; i < world; i++) devs[i] = (int32_t)i;
        if (ah_cp_nccl_comms_create(world, devs, NULL, comms, &err) != AH_OK) {
            snprintf(why, cap, "%s", err.msg);
            return -1;
        }
        run.comms = comms;
    } else if (world > 1) {
        if (ah_cp_local_group_create(world, &run.group, &err) != AH_OK) {
            snprintf(why, cap, "%s", err.msg);
            return -1;
        }
    }
    pthread_barrier_init(&run.bar, NULL, world);
    uint32_t started = 0;
    for (; started < world; started++) {
        ranks[started] = (cp_rank){.run = &run, .rank = started};
        if (pthread_create(&t[started], NULL, rank_main, &ranks[started])) break;
    }
    if (started < world) { /* the started ranks wait at the barrier: give up loudly */
        fprintf(stderr, "attnhost bench: cannot start a thread for rank %u\n", started);
        exit(1);
    }
    for (uint32_t i = 0; i < world; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&run.bar);
    *step = *local = 0;
    uint32_t slow = 0;
    for (uint32_t i = 0; i < world; i++)
        if (ranks[i].why[0]) {
            snprintf(why, cap, "rank %u: %s", i, ranks[i].why);
            goto out;
        } else if (ranks[i].step_ms > ranks[slow].step_ms) slow = i;
    *step = ranks[slow].step_ms;
    *local = ranks[slow].local_ms;
    *plan_us = 0;
    for (uint32_t i = 0; i < world; i++)
        if (ranks[i].plan_us > *plan_us) *plan_us = ranks[i].plan_us;
    rc = 0;
out:
    for (uint32_t i = 0; i < world; i++) ah_cp_nccl_comm_destroy(comms[i]);
    ah_cp_local_group_destroy(run.group);
    return rc;
}

static void tokens_text(double n, char *buf, size_t cap)
{
    if (n >= 1048576) snprintf(buf, cap, "%.2fM", n / 1048576);
    else if (n >= 1024) snprintf(buf, cap, "%.0fk", n / 1024);
    else snprintf(buf, cap, "%.0f", n);
}

int cmd_bench_cp(cli_common *c)
{
    cp_layer L = {64, 8, 128, 16, "bf16", "auto"};
    cp_shape shapes[CP_MAX_SHAPES];
    uint32_t n_shapes = 0, cp_max = 0, interleave = 1, batch = 0, context = 0;
    uint32_t max_ctx = 0, max_batch = 0, iters = 20, b2b = 1;
    int layer_given = 0;
    for (int i = 0; i < c->argc; i++) {
        const char *a = c->argv[i], *v = i + 1 < c->argc ? c->argv[i + 1] : NULL;
        int bad = 0;
        if (!v) bad = 1;
        else if (!strcmp(a, "--cp")) bad = cli_parse_count("bench", a, v, &cp_max), i++;
        else if (!strcmp(a, "--cp-interleave"))
            bad = cli_parse_count("bench", a, v, &interleave), i++;
        else if (!strcmp(a, "--batch")) bad = cli_parse_count("bench", a, v, &batch), i++;
        else if (!strcmp(a, "--context")) bad = cli_parse_count("bench", a, v, &context), i++;
        else if (!strcmp(a, "--max-context")) bad = cli_parse_count("bench", a, v, &max_ctx), i++;
        else if (!strcmp(a, "--max-batch")) bad = cli_parse_count("bench", a, v, &max_batch), i++;
        else if (!strcmp(a, "--iters")) bad = cli_parse_count("bench", a, v, &iters), i++;
        else if (!strcmp(a, "--back-to-back")) bad = cli_parse_count("bench", a, v, &b2b), i++;
        else if (!strcmp(a, "--head-size"))
            bad = cli_parse_count("bench", a, v, &L.head), layer_given = 1, i++;
        else if (!strcmp(a, "--block-size"))
            bad = cli_parse_count("bench", a, v, &L.block), layer_given = 1, i++;
        else if (!strcmp(a, "--dtype")) L.dtype = v, layer_given = 1, i++;
        else if (!strcmp(a, "--kv-dtype")) L.kv_dtype = v, layer_given = 1, i++;
        else if (!strcmp(a, "--heads")) {
            if (sscanf(v, "%u/%u", &L.hq, &L.hk) != 2 || !L.hq || !L.hk) {
                fprintf(stderr, "attnhost bench: --heads: '%s' is not Q/KV, e.g. 64/8\n", v);
                return 2;
            }
            layer_given = 1, i++;
        } else if (!strcmp(a, "--step")) {
            zoo_step st;
            if (zoo_parse_step(v, &st) || st.n_pre || !st.n_dec || n_shapes == CP_MAX_SHAPES) {
                fprintf(stderr,
                        "attnhost bench: --cp: --step '%s' is not a decode step dBxC (or more "
                        "than %d steps)\n",
                        v, CP_MAX_SHAPES);
                return 2;
            }
            shapes[n_shapes++] = (cp_shape){st.n_dec, st.dec_ctx};
            i++;
        } else bad = 1;
        if (bad) {
            fprintf(stderr, "attnhost bench: --cp: bad option '%s'%s\n", a,
                    v ? "" : " (missing value)");
            return 2;
        }
    }
    if (cp_max > CP_MAX_WORLD || iters > 100000 || b2b > 1000) {
        fprintf(stderr, "attnhost bench: --cp %u, --iters %u or --back-to-back %u is too large\n",
                cp_max, iters, b2b);
        return 2;
    }
    if (c->model && layer_given) {
        fprintf(stderr, "attnhost bench: --model takes the layer from the model; --heads, "
                        "--head-size, --dtype ... describe a layer without it\n");
        return 2;
    }
    if (batch || context) {
        if (n_shapes == CP_MAX_SHAPES) return 2;
        shapes[n_shapes++] = (cp_shape){batch ? batch : 16, context ? context : 131072};
    }
    if (!n_shapes) { /* the standard set */
        static const uint32_t bs[3] = {16, 32, 64}, cs[4] = {131072, 262144, 524288, 1048576};
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < 4; k++) shapes[n_shapes++] = (cp_shape){bs[i], cs[k]};
    }
    for (uint32_t i = 0; i < n_shapes; i++) {
        if (max_ctx && shapes[i].context > max_ctx) shapes[i].context = max_ctx;
        if (max_batch && shapes[i].batch > max_batch) shapes[i].batch = max_batch;
    }

    ah_host *h = cli_host(c);
    if (!h) return 1;
    ah_model *m = NULL;
    ah_selection *sel = NULL;
    ah_error err;
    int rc = 1;
    if (c->model) {
        ah_model *full = cli_model(c);
        uint32_t first[1], count[1];
        if (full && zoo_distinct_specs(full, first, count, 1))
            m = zoo_one_layer(full, first[0], &err);
        else if (full) snprintf(err.msg, sizeof err.msg, "the model has no attention layer");
        ah_model_destroy(full);
        if (!full) goto out;
    } else {
        char text[512];
        snprintf(text, sizeof text,
                 "[model]\nname = cp\nnum_layers = 1\nnum_q_heads = %u\nnum_kv_heads = %u\n"
                 "head_size = %u\ndtype = %s\nkv_dtype = %s\nblock_size = %u\n",
                 L.hq, L.hk, L.head, L.dtype, L.kv_dtype, L.block);
        if (ah_model_parse(text, "<bench --cp layer>", &m, &err) != AH_OK) m = NULL;
    }
    if (!m) {
        fprintf(stderr, "attnhost bench: %s\n", err.msg);
        goto out;
    }
    if ((c->plugin ? ah_host_select_forced(h, m, c->plugin, &sel, &err)
                   : ah_host_select(h, m, &sel, &err)) != AH_OK) {
        fprintf(stderr, "attnhost bench: %s\n", err.msg);
        goto out;
    }
    const ah_decision *dec = ah_selection_decision(sel, 0, AH_PHASE_DECODE);
    const ah_layer_spec *sp = &dec->spec;
    const ah_plugin_info *pi = ah_host_find_plugin(h, dec->plugin);
    int on_cpu = pi->device_kind == AH_DEVICE_CPU;
    uint32_t devices = on_cpu ? cp_max : pi->probe ? pi->probe->device_count : 0;
    uint64_t mem = on_cpu      ? ah_host_hw_facts(h)->memory_bytes
                   : pi->probe ? pi->probe->memory_bytes
                               : 0;
    uint32_t worlds[8], n_worlds = 0;
    for (uint32_t w = 1; w < cp_max && n_worlds < 7; w *= 2) worlds[n_worlds++] = w;
    worlds[n_worlds++] = cp_max;
    char label[128];
    zoo_spec_label(sp, label, sizeof label);
    if (c->json) {
        printf("{\"plugin\": \"%s\", \"spec\": \"%s\", \"block_size\": %u, \"interleave\": %u, "
               "\"iters\": %u, \"back_to_back\": %u, \"device_memory_bytes\": %llu, "
               "\"transport\": \"%s\", \"results\": [",
               pi->name, label, sp->block_size, interleave, iters, b2b, (unsigned long long)mem,
               on_cpu ? "local group" : "nccl");
    } else {
        printf("context parallel decode: plugin %s, layer %s, block %u, interleave %u, %s; "
               "median of %u runs%s, the slowest rank\n",
               pi->name, label, sp->block_size, interleave, on_cpu ? "local group" : "NCCL", iters,
               b2b > 1 ? " of forwards back to back" : "");
        printf("%6s %8s %5s %10s %10s %11s %9s %10s %8s %6s %8s\n", "batch", "context", "ranks",
               "step ms", "local ms", "comm+merge", "vs 1 rank", "efficiency", "KV GB/s", "of bw",
               "plan us");
    }
    /* A rank's budget: 90% of a device (CPU ranks share the host's memory). */
    int first = 1;
    double copy_gbs = 0; /* measured by the first one-rank run */
    rc = 0;
    for (uint32_t i = 0; i < n_shapes; i++) {
        double t1 = 0;
        for (uint32_t k = 0; k < n_worlds; k++) {
            uint32_t w = worlds[k];
            double budget = 0.9 * (double)mem / (on_cpu ? w : 1);
            char why[1280] = "";
            double step = 0, local = 0, plan_us = 0;
            uint64_t need = 0;
            for (uint32_t r = 0; r < w; r++) {
                uint64_t b = shard_bytes(sp, &shapes[i], w, r, interleave);
                need = b > need ? b : need;
            }
            if (!on_cpu && w > devices)
                snprintf(why, sizeof why, "%u ranks need %u CUDA devices, %u here", w, w, devices);
            else if (mem && (double)need > budget)
                snprintf(why, sizeof why,
                         "the shard's KV cache needs %.1f GiB a rank, more than 90%% of the "
                         "%.1f GiB a rank has",
                         need / 1073741824.0,
                         (on_cpu ? (double)mem / w : (double)mem) / 1073741824.0);
            else if (run_world(h, sel, sp, shapes[i], w, interleave, (int)iters, (int)b2b, !on_cpu,
                               &copy_gbs, &step, &local, &plan_us, why, sizeof why))
                rc = 1;
            if (w == 1 && !why[0]) t1 = step;
            double share = step > 0 ? 1 - local / step : 0;
            /* the rank's attention alone: its shard's bytes over its time */
            double gbs = local > 0 ? (double)need / (local * 1e-3) / 1e9 : 0;
            double speedup = t1 > 0 && step > 0 ? t1 / step : 0;
            double eff = speedup / w;
            if (c->json) {
                printf("%s\n  {\"batch\": %u, \"context\": %u, \"ranks\": %u", first ? "" : ",",
                       shapes[i].batch, shapes[i].context, w);
                if (why[0]) {
                    printf(", \"skipped\": ");
                    cli_json_str(stdout, why);
                    printf("}");
                } else
                    printf(", \"step_ms\": %.4f, \"local_ms\": %.4f, \"collective_share\": %.3f, "
                           "\"speedup\": %.3f, \"efficiency\": %.3f, \"shard_bytes\": %llu, "
                           "\"local_gbs\": %.1f, \"plan_us\": %.1f}",
                           step, local, share, speedup, eff, (unsigned long long)need, gbs,
                           plan_us);
                first = 0;
            } else if (why[0])
                printf("%6u %8u %5u skipped: %s\n", shapes[i].batch, shapes[i].context, w, why);
            else if (speedup > 0)
                printf("%6u %8u %5u %10.3f %10.3f %10.1f%% %8.2fx %9.1f%% %8.0f %5.0f%% %8.1f\n",
                       shapes[i].batch, shapes[i].context, w, step, local, 100 * share, speedup,
                       100 * eff, gbs, copy_gbs > 0 ? 100 * gbs / copy_gbs : 0, plan_us);
            else
                printf("%6u %8u %5u %10.3f %10.3f %10.1f%% %9s %10s %8.0f %5.0f%% %8.1f\n",
                       shapes[i].batch, shapes[i].context, w, step, local, 100 * share, "-", "-",
                       gbs, copy_gbs > 0 ? 100 * gbs / copy_gbs : 0, plan_us);
            fflush(stdout);
        }
    }
    if (c->json) printf("\n], \"copy_gbs\": %.1f", copy_gbs);
    else
        printf("KV GB/s: the rank's shard over its attention alone; of bw: of the %s's %.0f GB/s "
               "(%s, this run); plan us: the host's time of ah_binding_plan (with ranks: the "
               "local batch and the step's check), the slowest rank\n",
               on_cpu ? "host" : "device", copy_gbs,
               on_cpu ? "every core reading" : "a 1 GiB device copy, read + written");
    /* The engine's question: at this batch, how long a context fits. */
    if (c->json) printf(", \"longest_context\": [");
    else if (on_cpu)
        printf("\nlongest context whose KV shards fit 90%% of the host's %.1f GiB, shared by the "
               "ranks, per batch:\n",
               (double)mem / 1073741824.0);
    else
        printf("\nlongest context whose KV shard fits 90%% of each device's %.1f GiB, per batch:\n",
               (double)mem / 1073741824.0);
    first = 1;
    uint32_t seen[CP_MAX_SHAPES], n_seen = 0;
    for (uint32_t i = 0; i < n_shapes; i++) {
        int dup = 0;
        for (uint32_t j = 0; j < n_seen; j++) dup |= seen[j] == shapes[i].batch;
        if (dup) continue;
        seen[n_seen++] = shapes[i].batch;
        if (!c->json) printf("%6u", shapes[i].batch);
        for (uint32_t k = 0; k < n_worlds; k++) {
            uint32_t w = worlds[k];
            double budget = 0.9 * (double)mem / (on_cpu ? w : 1);
            /* tokens a rank holds for every request, in whole blocks, one
             * spare block; ranks hold equal shares to within interleave */
            double blocks = budget / ((double)sp->block_size * kv_row_bytes(sp)) - 1;
            double per_rank =
                blocks > 0 ? (double)(uint64_t)(blocks / shapes[i].batch) * sp->block_size : 0;
            double fits = per_rank > interleave ? (per_rank - interleave) * w : 0;
            char tok[32];
            tokens_text(fits, tok, sizeof tok);
            if (c->json) {
                printf("%s\n  {\"batch\": %u, \"ranks\": %u, \"max_context\": %.0f}",
                       first ? "" : ",", shapes[i].batch, w, fits);
                first = 0;
            } else printf("  %u rank%s %8s", w, w == 1 ? ": " : "s:", tok);
        }
        if (!c->json) printf("\n");
    }
    if (c->json) printf("\n]}\n");
out:
    ah_selection_destroy(sel);
    ah_model_destroy(m);
    ah_host_destroy(h);
    return rc;
}
