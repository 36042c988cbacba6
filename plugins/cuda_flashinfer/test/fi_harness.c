/*
 * Harness implementation: plugin loading with minimal host services, device
 * tensors through the plugin's own memory slots, and random workloads.
 * Random values are never zero-filled: queries and caches are uniform in
 * [-1, 1) (FP8 caches hold value/scale, as the reference reads them).
 */
#include "fi_harness.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <attnhost/plugin_util.h>

static void h_log(const ah_host_services *h, ah_log_level l, const char *msg)
{
    (void)h;
    fprintf(stderr, "[plugin %d] %s\n", (int)l, msg);
}
static void *h_alloc(const ah_host_services *h, size_t n) { (void)h; return malloc(n); }
static void h_free(const ah_host_services *h, void *p) { (void)h; free(p); }
/* The plugin declares no configuration keys: any question is a bug. */
static int64_t h_config_int(const ah_host_services *h, const char *k)
{
    (void)h;
    fprintf(stderr, "[plugin] config_int(%s): undeclared key\n", k);
    return 0;
}
static double h_config_float(const ah_host_services *h, const char *k)
{
    (void)h;
    fprintf(stderr, "[plugin] config_float(%s): undeclared key\n", k);
    return 0;
}
static const char *h_config_str(const ah_host_services *h, const char *k)
{
    (void)h;
    fprintf(stderr, "[plugin] config_str(%s): undeclared key\n", k);
    return NULL;
}
static ah_hw_facts h_hw = {.struct_size = sizeof(ah_hw_facts)};
static ah_host_services h_services = {sizeof(ah_host_services), AH_ABI_VERSION, h_log, h_alloc, h_free,
                                      h_config_int, h_config_float, h_config_str, &h_hw, NULL};

int fi_plugin_open(fi_plugin *p, const char *path)
{
    memset(p, 0, sizeof *p);
    p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!p->dl) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return 1;
    }
    ah_plugin_entry_fn entry = (ah_plugin_entry_fn)dlsym(p->dl, AH_PLUGIN_ENTRY_SYMBOL);
    const char *why = "";
    p->desc = entry ? entry(AH_ABI_VERSION, &h_services, &why) : NULL;
    if (!p->desc) {
        fprintf(stderr, "entry refused: %s\n", why);
        return 1;
    }
    p->ops = p->desc->ops;
    p->probe.struct_size = sizeof p->probe;
    if (p->ops->probe(&h_services, &p->probe) != AH_OK) {
        fprintf(stderr, "probe failed\n");
        return 1;
    }
    if (!p->probe.usable) {
        printf("skipped: %s\n", p->probe.reason);
        return 77;
    }
    const ah_context_options opts = {sizeof(ah_context_options), 0};
    if (p->ops->context_create(&h_services, &opts, &p->ctx, &why) != AH_OK) {
        fprintf(stderr, "context_create: %s\n", why);
        return 1;
    }
    if (p->ops->stream_create(p->ctx, &p->stream) != AH_OK) {
        fprintf(stderr, "stream_create: %s\n", p->ops->context_error(p->ctx));
        return 1;
    }
    return 0;
}

void fi_plugin_close(fi_plugin *p)
{
    if (p->ctx) {
        if (p->stream) p->ops->stream_destroy(p->ctx, p->stream);
        p->ops->context_destroy(p->ctx);
    }
    if (p->dl) dlclose(p->dl);
    memset(p, 0, sizeof *p);
}

int fi_tensor_alloc_raw(fi_plugin *p, fi_tensor *t, DLDataType dl, int ndim, const int64_t *shape)
{
    memset(t, 0, sizeof *t);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        n *= (size_t)shape[i];
    }
    t->bytes = n * (dl.bits / 8);
    t->t.ndim = ndim;
    t->t.shape = t->shape;
    t->t.dtype = dl;
    t->t.device.device_type = kDLCUDA;
    void *ptr = NULL;
    if (p->ops->mem_alloc(p->ctx, t->bytes ? t->bytes : 16, &ptr) != AH_OK) {
        fprintf(stderr, "mem_alloc %zu: %s\n", t->bytes, p->ops->context_error(p->ctx));
        return 1;
    }
    t->t.data = ptr;
    return 0;
}

int fi_tensor_alloc(fi_plugin *p, fi_tensor *t, ah_dtype dt, int ndim, const int64_t *shape)
{
    return fi_tensor_alloc_raw(p, t, ah_dtype_to_dl(dt), ndim, shape);
}

void fi_tensor_free(fi_plugin *p, fi_tensor *t)
{
    if (t->t.data) p->ops->mem_free(p->ctx, t->t.data);
    memset(t, 0, sizeof *t);
}

int fi_upload(fi_plugin *p, fi_tensor *t, const void *host)
{
    if (p->ops->mem_copy(p->ctx, t->t.data, host, t->bytes, AH_COPY_HOST_TO_DEVICE, p->stream)) {
        fprintf(stderr, "upload: %s\n", p->ops->context_error(p->ctx));
        return 1;
    }
    return 0;
}

int fi_download(fi_plugin *p, void *host, const fi_tensor *t)
{
    if (p->ops->mem_copy(p->ctx, host, t->t.data, t->bytes, AH_COPY_DEVICE_TO_HOST, p->stream)) {
        fprintf(stderr, "download: %s\n", p->ops->context_error(p->ctx));
        return 1;
    }
    return 0;
}

uint64_t fi_rand_u64(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

double fi_rand_unit(uint64_t *s) { return (double)(fi_rand_u64(s) >> 11) / 9007199254740992.0; }

/* The shape's query amplitude (q_amp, 0 meaning 1). */
static float q_amp(const fi_shape *s) { return s->q_amp ? s->q_amp : 1.f; }

/* xorshift64 is linear over GF(2): k steps of it are the matrix M^k, so a
 * state k steps ahead takes log2(k) matrix squarings to reach. That lets
 * threads fill disjoint ranges of one sequence, bit for bit what one
 * thread would write (a B64 x 16k cache is 2^31 values, seconds of device
 * machine time per benchmark run when filled serially). */
typedef struct { uint64_t col[64]; } gf2_mat; /* col[j] = M e_j */

static uint64_t gf2_apply(const gf2_mat *m, uint64_t v)
{
    uint64_t r = 0;
    for (int j = 0; v; j++, v >>= 1)
        if (v & 1) r ^= m->col[j];
    return r;
}

uint64_t fi_rand_jump(uint64_t s, uint64_t k)
{
    gf2_mat p, q;
    for (int j = 0; j < 64; j++) {
        uint64_t e = 1ull << j;
        p.col[j] = fi_rand_u64(&e);
    }
    for (; k; k >>= 1) {
        if (k & 1) s = gf2_apply(&p, s);
        for (int j = 0; j < 64; j++) q.col[j] = gf2_apply(&p, p.col[j]);
        p = q;
    }
    return s;
}

typedef struct fill_job {
    void *buf;
    size_t begin, end;
    ah_dtype dt;
    float amp, scale;
    uint64_t rng; /* the state before value `begin` */
} fill_job;

/* Values in [-amp, amp), stored as value / scale in FP8 caches. */
static void *fill_range(void *arg)
{
    fill_job *j = arg;
    const int fp8 = j->dt == AH_DTYPE_FP8_E4M3 || j->dt == AH_DTYPE_FP8_E5M2;
    for (size_t i = j->begin; i < j->end; i++) {
        float v = (float)(fi_rand_unit(&j->rng) * 2.0 - 1.0) * j->amp;
        ah_store_f32(j->buf, i, j->dt, fp8 ? v / j->scale : v);
    }
    return NULL;
}

void fi_fill_uniform(void *buf, size_t n, ah_dtype dt, float amp, float scale, uint64_t *rng)
{
    enum { MAX_THREADS = 16, MIN_PER_THREAD = 1 << 22 };
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const size_t cap = cpus < 1 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : (size_t)cpus;
    size_t nt = n / MIN_PER_THREAD;
    nt = nt < 1 ? 1 : nt > cap ? cap : nt;
    fill_job jobs[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    int running[MAX_THREADS] = {0};
    for (size_t t = 0; t < nt; t++) {
        const size_t b = n / nt * t, e = t + 1 == nt ? n : n / nt * (t + 1);
        jobs[t] = (fill_job){buf, b, e, dt, amp, scale, t ? fi_rand_jump(*rng, b) : *rng};
        if (t) running[t] = pthread_create(&th[t], NULL, fill_range, &jobs[t]) == 0;
    }
    fill_range(&jobs[0]);
    for (size_t t = 1; t < nt; t++) {
        if (running[t]) pthread_join(th[t], NULL);
        else fill_range(&jobs[t]); /* no thread could start: fill it here */
    }
    *rng = jobs[nt - 1].rng; /* the last range ends the sequence */
}

/* Lengths, tables and slots on the host; blocks come from a random
 * permutation (or in order with ordered_blocks, as a fresh pool hands them
 * out), shared leading blocks first when prefix_blocks > 0. */
static void host_layout(fi_work *w, const fi_shape *s, uint64_t *rng)
{
    const uint32_t R = s->num_reqs, bs = s->block_size;
    uint32_t *perm = malloc(sizeof(uint32_t) * w->num_blocks);
    for (uint32_t i = 0; i < w->num_blocks; i++) perm[i] = i;
    for (uint32_t i = s->ordered_blocks ? 0 : w->num_blocks; i > 1; i--) {
        uint32_t j = (uint32_t)(fi_rand_u64(rng) % i), t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    uint32_t next = s->prefix_blocks;
    w->qsl[0] = 0;
    for (uint32_t r = 0; r < R; r++) {
        w->qsl[r + 1] = w->qsl[r] + s->qlens[r];
        w->seq[r] = s->seqlens[r];
        const uint32_t np = (s->seqlens[r] + bs - 1) / bs;
        for (uint32_t i = 0; i < w->max_blocks; i++) {
            int32_t blk;
            if (i < s->prefix_blocks) blk = (int32_t)perm[i];
            else if (i < np) blk = (int32_t)perm[next++];
            else blk = 0;
            w->bt[(size_t)r * w->max_blocks + i] = blk;
        }
        for (int32_t i = 0; i < s->qlens[r]; i++) {
            const int32_t pos = s->seqlens[r] - s->qlens[r] + i;
            const int32_t blk = w->bt[(size_t)r * w->max_blocks + pos / (int32_t)bs];
            w->slots[w->qsl[r] + i] = (int64_t)blk * bs + pos % (int32_t)bs;
        }
    }
    free(perm);
}

static void fill_batch(fi_work *w, const fi_shape *s)
{
    ah_batch *b = &w->batch;
    memset(b, 0, sizeof *b);
    b->struct_size = sizeof *b;
    b->num_reqs = s->num_reqs;
    b->num_tokens = w->num_tokens;
    for (uint32_t r = 0; r < s->num_reqs; r++) {
        if ((uint32_t)s->qlens[r] > b->max_query_len) b->max_query_len = (uint32_t)s->qlens[r];
        if ((uint32_t)s->seqlens[r] > b->max_seq_len) b->max_seq_len = (uint32_t)s->seqlens[r];
    }
    b->num_blocks = w->num_blocks;
    b->query_start_loc = &w->d_qsl.t;
    b->seq_lens = &w->d_seq.t;
    b->block_table = &w->d_bt.t;
    b->slot_mapping = &w->d_slots.t;
    b->query_start_loc_host = w->qsl;
    b->seq_lens_host = w->seq;
    b->block_table_host = w->bt;
    b->slot_mapping_host = w->slots;
    b->block_table_stride = w->max_blocks;
    b->common_prefix_len = s->prefix_blocks * s->block_size;
}

static int upload_all(fi_plugin *p, fi_work *w)
{
    return fi_upload(p, &w->d_qsl, w->qsl) || fi_upload(p, &w->d_seq, w->seq) ||
           fi_upload(p, &w->d_bt, w->bt) || fi_upload(p, &w->d_slots, w->slots) ||
           fi_upload(p, &w->d_q, w->q) || fi_upload(p, &w->d_kc, w->kc) ||
           (w->vc && fi_upload(p, &w->d_vc, w->vc)) ||
           (w->sinks && fi_upload(p, &w->d_sinks, w->sinks)) ||
           (w->slopes && fi_upload(p, &w->d_slopes, w->slopes));
}

static void fill_values(fi_work *w, const fi_shape *s, uint64_t *rng)
{
    const size_t kv_per_block = (size_t)s->block_size * s->hk;
    fi_fill_uniform(w->q, (size_t)w->num_tokens * s->hq * s->d, s->q_dtype, q_amp(s), 1.f, rng);
    fi_fill_uniform(w->kc, w->num_blocks * kv_per_block * s->d, s->kv_dtype, 1.f,
                s->k_scale ? s->k_scale : 1.f, rng);
    if (w->vc)
        fi_fill_uniform(w->vc, w->num_blocks * kv_per_block * s->dv, s->kv_dtype, 1.f,
                    s->v_scale ? s->v_scale : 1.f, rng);
    for (uint32_t h = 0; h < s->hq; h++) {
        if (w->sinks) w->sinks[h] = (float)(fi_rand_unit(rng) * 4.0 - 1.0);
        if (w->slopes) w->slopes[h] = exp2f(-8.f * (float)(h + 1) / (float)s->hq);
    }
}

int fi_work_build(fi_plugin *p, fi_work *w, const fi_shape *s, uint64_t seed)
{
    memset(w, 0, sizeof *w);
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
    const uint32_t R = s->num_reqs, bs = s->block_size;
    uint32_t total_pages = s->prefix_blocks, max_pages = 1;
    w->num_tokens = 0;
    for (uint32_t r = 0; r < R; r++) {
        const uint32_t np = (s->seqlens[r] + bs - 1) / bs;
        w->num_tokens += (uint32_t)s->qlens[r];
        total_pages += np - (np < s->prefix_blocks ? np : s->prefix_blocks);
        if (np > max_pages) max_pages = np;
    }
    w->max_blocks = max_pages + s->spare_blocks;
    w->num_blocks = total_pages + 2 + s->spare_blocks * R;

    ah_layer_spec *sp = &w->spec;
    sp->struct_size = sizeof *sp;
    sp->attn_type = s->attn;
    sp->num_q_heads = s->hq;
    sp->num_kv_heads = s->hk;
    sp->qk_head_size = s->d;
    sp->v_head_size = s->dv;
    sp->q_dtype = s->q_dtype;
    sp->kv_dtype = s->kv_dtype;
    sp->block_size = bs;
    sp->kv_layout = s->layout;
    sp->sliding_window = s->window;
    sp->softcap = s->softcap;
    sp->scale = 1.f / sqrtf((float)s->d) / q_amp(s);
    sp->use_mla = s->mla;
    sp->use_sinks = s->sinks;
    sp->use_alibi = s->alibi;
    ah_limits *l = &w->lim;
    l->struct_size = sizeof *l;
    l->max_num_reqs = R;
    l->max_num_tokens = w->num_tokens;
    l->max_blocks_per_req = w->max_blocks;
    l->max_seq_len = w->max_blocks * bs;
    l->num_blocks = w->num_blocks;

    w->qsl = calloc(R + 1, 4);
    w->seq = calloc(R ? R : 1, 4);
    w->bt = calloc((size_t)R * w->max_blocks + 1, 4);
    w->slots = calloc(w->num_tokens + 1, 8);
    const size_t qe = ah_dtype_size(s->q_dtype), ke = ah_dtype_size(s->kv_dtype);
    const size_t kv_rows = (size_t)w->num_blocks * bs * s->hk;
    w->q = malloc((size_t)w->num_tokens * s->hq * s->d * qe + 16);
    w->kc = malloc(kv_rows * s->d * ke);
    w->vc = s->mla ? NULL : malloc(kv_rows * s->dv * ke);
    w->sinks = s->sinks ? malloc(4 * s->hq) : NULL;
    w->slopes = s->alibi ? malloc(4 * s->hq) : NULL;
    host_layout(w, s, &rng);
    fill_values(w, s, &rng);

    const int64_t sh_qsl[1] = {R + 1}, sh_seq[1] = {R}, sh_bt[2] = {R, w->max_blocks},
                  sh_slots[1] = {w->num_tokens}, sh_q[3] = {w->num_tokens, s->hq, s->d},
                  sh_out[3] = {w->num_tokens, s->hq, s->dv}, sh_lse[2] = {w->num_tokens, s->hq},
                  sh_h[1] = {s->hq};
    const int hnd = s->layout == AH_KV_LAYOUT_HND;
    const int64_t sh_k[4] = {w->num_blocks, hnd ? s->hk : bs, hnd ? bs : s->hk, s->d};
    const int64_t sh_v[4] = {w->num_blocks, hnd ? s->hk : bs, hnd ? bs : s->hk, s->dv};
    DLDataType i32 = {kDLInt, 32, 1}, i64 = {kDLInt, 64, 1};
    if (fi_tensor_alloc_raw(p, &w->d_qsl, i32, 1, sh_qsl) ||
        fi_tensor_alloc_raw(p, &w->d_seq, i32, 1, sh_seq) ||
        fi_tensor_alloc_raw(p, &w->d_bt, i32, 2, sh_bt) ||
        fi_tensor_alloc_raw(p, &w->d_slots, i64, 1, sh_slots) ||
        fi_tensor_alloc(p, &w->d_q, s->q_dtype, 3, sh_q) ||
        fi_tensor_alloc(p, &w->d_kc, s->kv_dtype, 4, sh_k) ||
        (!s->mla && fi_tensor_alloc(p, &w->d_vc, s->kv_dtype, 4, sh_v)) ||
        fi_tensor_alloc(p, &w->d_out, s->q_dtype, 3, sh_out) ||
        fi_tensor_alloc(p, &w->d_lse, AH_DTYPE_FP32, 2, sh_lse) ||
        (s->sinks && fi_tensor_alloc(p, &w->d_sinks, AH_DTYPE_FP32, 1, sh_h)) ||
        (s->alibi && fi_tensor_alloc(p, &w->d_slopes, AH_DTYPE_FP32, 1, sh_h)))
        return 1;
    fill_batch(w, s);
    return upload_all(p, w);
}

int fi_work_refill(fi_plugin *p, fi_work *w, const fi_shape *s, uint64_t seed)
{
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 7;
    host_layout(w, s, &rng);
    fill_values(w, s, &rng);
    fill_batch(w, s);
    return upload_all(p, w);
}

void fi_work_free(fi_plugin *p, fi_work *w)
{
    fi_tensor *ts[] = {&w->d_qsl, &w->d_seq, &w->d_bt, &w->d_slots, &w->d_q, &w->d_kc,
                       &w->d_vc, &w->d_out, &w->d_lse, &w->d_sinks, &w->d_slopes};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) fi_tensor_free(p, ts[i]);
    free(w->qsl);
    free(w->seq);
    free(w->bt);
    free(w->slots);
    free(w->q);
    free(w->kc);
    free(w->vc);
    free(w->sinks);
    free(w->slopes);
    memset(w, 0, sizeof *w);
}

ah_forward_args fi_work_args(fi_work *w, const fi_shape *s, void *stream, int want_lse)
{
    ah_forward_args a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.q = &w->d_q.t;
    a.key_cache = &w->d_kc.t;
    a.value_cache = s->mla ? NULL : &w->d_vc.t;
    a.out = &w->d_out.t;
    a.lse = want_lse ? &w->d_lse.t : NULL;
    a.sinks = s->sinks ? &w->d_sinks.t : NULL;
    a.alibi_slopes = s->alibi ? &w->d_slopes.t : NULL;
    a.k_scale = s->k_scale;
    a.v_scale = s->v_scale;
    a.stream = stream;
    return a;
}
