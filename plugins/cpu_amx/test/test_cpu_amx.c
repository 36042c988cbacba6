/*
 * cpu_amx kernel test: dlopens the plugin and runs every ISA path this CPU
 * offers over random batches against a double-precision reference written
 * here from the oracle's definition (core/include/attnhost/reference.h):
 * prefill, extend, decode and mixed batches; MHA/GQA/MQA and wide groups;
 * MLA (576/512, V inside the key cache); bf16/fp16/fp32 queries; bf16, fp16,
 * fp32 and FP8 E4M3/E5M2 caches with scales; NHD and HND; sliding window,
 * soft-cap, ALiBi, sinks; causal, bidirectional and cross attention; LSE;
 * split-KV; write_kv (bit-exact) and merge_states; and the errors a forced
 * ISA, a bad config key or a bad tensor must give.
 * Exit code 77 (skip) only if the plugin cannot be loaded at all.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "host_stub.h"

/* Two threads exercise the split-KV merge. Under ThreadSanitizer one: the
 * libgomp Debian ships is not instrumented, so its barriers would read as
 * races in every parallel region (the host's own thread tests cover
 * concurrency there). */
#if defined(__SANITIZE_THREAD__)
#define TEST_THREADS "1"
#else
#define TEST_THREADS "2"
#endif

static int failures, checks;
#define EXPECT(cond, ...)                                                   \
    do {                                                                    \
        checks++;                                                           \
        if (!(cond)) {                                                      \
            failures++;                                                     \
            fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);          \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) /* [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / (double)(1ull << 52) - 1.0;
}

typedef struct tcase {
    const char *name;
    ah_attn_type type;
    uint32_t hq, hk, d, dv;
    ah_dtype qdt, kvdt;
    uint32_t bs;
    ah_kv_layout layout;
    uint32_t window;
    float softcap;
    int mla, sinks, alibi;
    float k_scale, v_scale;
    int nreq;
    int qlen[6], seq[6];
    const char *split_min; /* NULL: default */
} tcase;

static size_t kv_off(const tcase *c, uint32_t hsz, uint32_t blk, uint32_t slot, uint32_t h, uint32_t ch)
{
    size_t per_block = (size_t)c->bs * c->hk * hsz;
    if (c->layout == AH_KV_LAYOUT_HND) return blk * per_block + ((size_t)h * c->bs + slot) * hsz + ch;
    return blk * per_block + ((size_t)slot * c->hk + h) * hsz + ch;
}

typedef struct world {
    const tcase *c;
    uint32_t T, nblocks, bt_stride;
    int32_t qsl[7], seq[6], *bt;
    int64_t *slots;
    void *q, *knew, *vnew, *kc, *vc, *kc_expect, *vc_expect;
    float sinks[128], alibi[128];
    double *ref_out, *ref_lse;
} world;

static void *fill(size_t n, ah_dtype t, double amp)
{
    void *p = calloc(n ? n : 1, ah_dtype_size(t));
    for (size_t i = 0; i < n; i++) ah_store_f32(p, i, t, (float)(amp * urand()));
    return p;
}

/* Random caches (quantised with the scales for FP8), tables and new tokens.
 * ramp > 0 scales the cached key at position p of a request by 1 + ramp *
 * p / seq_len, so scores keep rising along the sequence and the kernels'
 * running max moves far beyond its first value (their lazy rescale paths). */
static void world_build(world *w, const tcase *c, float ramp)
{
    memset(w, 0, sizeof *w);
    w->c = c;
    uint32_t maxblk = 0, total_blk = 0;
    for (int r = 0; r < c->nreq; r++) {
        w->qsl[r + 1] = w->qsl[r] + c->qlen[r];
        w->seq[r] = c->seq[r];
        uint32_t nb = ((uint32_t)c->seq[r] + c->bs - 1) / c->bs;
        if (nb > maxblk) maxblk = nb;
        total_blk += nb;
    }
    w->T = (uint32_t)w->qsl[c->nreq];
    w->bt_stride = maxblk + 1;
    w->nblocks = total_blk + 3;
    /* A random permutation of the blocks, handed out to requests in turn. */
    uint32_t *perm = malloc(w->nblocks * sizeof *perm);
    for (uint32_t i = 0; i < w->nblocks; i++) perm[i] = i;
    for (uint32_t i = w->nblocks - 1; i > 0; i--) {
        uint32_t j = (uint32_t)((urand() + 1) * 0.5 * (i + 1)) % (i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    w->bt = calloc((size_t)c->nreq * w->bt_stride, 4);
    uint32_t next = 0;
    for (int r = 0; r < c->nreq; r++)
        for (uint32_t i = 0; i < w->bt_stride; i++)
            w->bt[(size_t)r * w->bt_stride + i] = i * c->bs < (uint32_t)c->seq[r] ? (int32_t)perm[next++] : 0;
    free(perm);
    const int fp8 = c->kvdt == AH_DTYPE_FP8_E4M3 || c->kvdt == AH_DTYPE_FP8_E5M2;
    const double ka = fp8 ? 1.0 / c->k_scale : 1.0, va = fp8 ? 1.0 / c->v_scale : 1.0;
    size_t kn = (size_t)w->nblocks * c->bs * c->hk * c->d, vn = (size_t)w->nblocks * c->bs * c->hk * c->dv;
    w->kc = fill(kn, c->kvdt, ka);
    w->vc = c->mla ? NULL : fill(vn, c->kvdt, va);
    for (int r = 0; ramp > 0 && r < c->nreq; r++)
        for (int32_t p = 0; p < c->seq[r]; p++) {
            const uint32_t blk = (uint32_t)w->bt[(size_t)r * w->bt_stride + (uint32_t)p / c->bs], off = (uint32_t)p % c->bs;
            const float f = 1.0f + ramp * (float)p / (float)c->seq[r];
            for (uint32_t h = 0; h < c->hk; h++)
                for (uint32_t ch = 0; ch < c->d; ch++) {
                    const size_t at = kv_off(c, c->d, blk, off, h, ch);
                    ah_store_f32(w->kc, at, c->kvdt, ah_load_f32(w->kc, at, c->kvdt) * f);
                }
        }
    w->q = fill((size_t)w->T * c->hq * c->d, c->qdt, 2.0);
    w->knew = fill((size_t)w->T * c->hk * c->d, c->qdt, 1.0);
    w->vnew = c->mla ? NULL : fill((size_t)w->T * c->hk * c->dv, c->qdt, 1.0);
    for (uint32_t h = 0; h < c->hq; h++) {
        w->sinks[h] = (float)(1.5 * urand());
        w->alibi[h] = (float)(0.1 * (urand() + 1.0));
    }
    /* Slots of the new tokens: the last query_len positions (none for cross). */
    w->slots = malloc((w->T + 1) * sizeof *w->slots);
    for (int r = 0; r < c->nreq; r++)
        for (int i = 0; i < c->qlen[r]; i++) {
            int32_t p = c->seq[r] - c->qlen[r] + i;
            w->slots[w->qsl[r] + i] = c->type == AH_ATTN_ENCODER_DECODER || p < 0
                                          ? -1
                                          : (int64_t)w->bt[(size_t)r * w->bt_stride + (uint32_t)p / c->bs] * c->bs + p % c->bs;
        }
    /* What write_kv must leave in the caches. */
    w->kc_expect = malloc(kn * ah_dtype_size(c->kvdt));
    memcpy(w->kc_expect, w->kc, kn * ah_dtype_size(c->kvdt));
    if (!c->mla) {
        w->vc_expect = malloc(vn * ah_dtype_size(c->kvdt));
        memcpy(w->vc_expect, w->vc, vn * ah_dtype_size(c->kvdt));
    }
    for (uint32_t t = 0; t < w->T; t++) {
        if (w->slots[t] < 0) continue;
        uint32_t blk = (uint32_t)(w->slots[t] / c->bs), off = (uint32_t)(w->slots[t] % c->bs);
        for (uint32_t h = 0; h < c->hk; h++) {
            for (uint32_t ch = 0; ch < c->d; ch++) {
                float v = ah_load_f32(w->knew, ((size_t)t * c->hk + h) * c->d + ch, c->qdt);
                ah_store_f32(w->kc_expect, kv_off(c, c->d, blk, off, h, ch), c->kvdt, fp8 ? v * (1.0f / c->k_scale) : v);
            }
            if (!c->mla)
                for (uint32_t ch = 0; ch < c->dv; ch++) {
                    float v = ah_load_f32(w->vnew, ((size_t)t * c->hk + h) * c->dv + ch, c->qdt);
                    ah_store_f32(w->vc_expect, kv_off(c, c->dv, blk, off, h, ch), c->kvdt, fp8 ? v * (1.0f / c->v_scale) : v);
                }
        }
    }
}

static void world_free(world *w)
{
    void *p[] = {w->bt, w->slots, w->q, w->knew, w->vnew, w->kc, w->vc, w->kc_expect, w->vc_expect, w->ref_out, w->ref_lse};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
}

/* The oracle, in double precision, over the expected (written) caches. */
static void reference(world *w)
{
    const tcase *c = w->c;
    const int fp8 = c->kvdt == AH_DTYPE_FP8_E4M3 || c->kvdt == AH_DTYPE_FP8_E5M2;
    const double ks = fp8 ? c->k_scale : 1.0, vs = fp8 ? c->v_scale : 1.0;
    const double scale = 1.0 / sqrt((double)c->d);
    w->ref_out = calloc((size_t)w->T * c->hq * c->dv, sizeof(double));
    w->ref_lse = calloc((size_t)w->T * c->hq, sizeof(double));
    double *s = malloc(sizeof(double) * 20000);
    for (int r = 0; r < c->nreq; r++)
        for (int i = 0; i < c->qlen[r]; i++) {
            uint32_t t = (uint32_t)(w->qsl[r] + i);
            int32_t p = c->seq[r] - c->qlen[r] + i;
            for (uint32_t h = 0; h < c->hq; h++) {
                uint32_t kh = h / (c->hq / c->hk);
                double mx = -INFINITY;
                for (int32_t j = 0; j < c->seq[r]; j++) {
                    int vis = 1;
                    if (c->type == AH_ATTN_DECODER) vis = j <= p && (!c->window || j > p - (int32_t)c->window);
                    else if (c->type != AH_ATTN_ENCODER_DECODER) vis = !c->window || abs(j - p) < (int32_t)c->window;
                    if (!vis) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    uint32_t blk = (uint32_t)w->bt[(size_t)r * w->bt_stride + (uint32_t)j / c->bs], off = (uint32_t)j % c->bs;
                    double dot = 0;
                    for (uint32_t ch = 0; ch < c->d; ch++)
                        dot += (double)ah_load_f32(w->q, ((size_t)t * c->hq + h) * c->d + ch, c->qdt) *
                               (double)ah_load_f32(w->kc_expect, kv_off(c, c->d, blk, off, kh, ch), c->kvdt) * ks;
                    double x = scale * dot;
                    if (c->softcap > 0) x = c->softcap * tanh(x / c->softcap);
                    if (c->alibi) x += (double)w->alibi[h] * (double)(j - p);
                    s[j] = x;
                    if (x > mx) mx = x;
                }
                if (c->sinks && w->sinks[h] > mx) mx = w->sinks[h];
                double *o = w->ref_out + ((size_t)t * c->hq + h) * c->dv;
                if (mx == -INFINITY) {
                    w->ref_lse[(size_t)t * c->hq + h] = -INFINITY;
                    continue;
                }
                double sum = c->sinks ? exp(w->sinks[h] - mx) : 0.0;
                for (int32_t j = 0; j < c->seq[r]; j++) {
                    if (s[j] == -INFINITY) continue;
                    double e = exp(s[j] - mx);
                    sum += e;
                    uint32_t blk = (uint32_t)w->bt[(size_t)r * w->bt_stride + (uint32_t)j / c->bs], off = (uint32_t)j % c->bs;
                    for (uint32_t ch = 0; ch < c->dv; ch++)
                        o[ch] += e * (c->mla ? (double)ah_load_f32(w->kc_expect, kv_off(c, c->d, blk, off, 0, ch), c->kvdt) * ks
                                             : (double)ah_load_f32(w->vc_expect, kv_off(c, c->dv, blk, off, kh, ch), c->kvdt) * vs);
                }
                for (uint32_t ch = 0; ch < c->dv; ch++) o[ch] /= sum;
                w->ref_lse[(size_t)t * c->hq + h] = mx + log(sum);
            }
        }
    free(s);
}

static int64_t shp[32][4];
static int nshp;
static DLTensor *mk(DLTensor *t, void *data, ah_dtype dt, int ndim, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t s[4] = {a, b, c, d};
    stub_tensor(t, data, dt, ndim, shp[nshp++ % 32], s);
    return t;
}

static void cache_shape(const tcase *c, const world *w, uint32_t hsz, int64_t *s)
{
    s[0] = w->nblocks;
    s[1] = c->layout == AH_KV_LAYOUT_HND ? c->hk : c->bs;
    s[2] = c->layout == AH_KV_LAYOUT_HND ? c->bs : c->hk;
    s[3] = hsz;
}

static ah_layer_spec spec_of(const tcase *c)
{
    ah_layer_spec s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.attn_type = c->type;
    if (ah_spec_cacheless(&s)) { /* the bidirectional rule on a decoder layer (ABI 2.1) */
        s.attn_type = AH_ATTN_DECODER;
        s.causal = AH_CAUSAL_OFF;
    }
    s.num_q_heads = c->hq;
    s.num_kv_heads = c->hk;
    s.qk_head_size = c->d;
    s.v_head_size = c->dv;
    s.q_dtype = c->qdt;
    s.kv_dtype = c->kvdt;
    s.block_size = c->bs;
    s.kv_layout = c->layout;
    s.sliding_window = c->window;
    s.softcap = c->softcap;
    s.scale = 0.0f;
    s.use_mla = (uint32_t)c->mla;
    s.use_sinks = (uint32_t)c->sinks;
    s.use_alibi = (uint32_t)c->alibi;
    return s;
}

static ah_batch batch_of(const world *w, DLTensor *tq, DLTensor *ts, DLTensor *tb, DLTensor *tsl)
{
    const tcase *c = w->c;
    ah_batch b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    b.num_reqs = (uint32_t)c->nreq;
    b.num_tokens = w->T;
    for (int r = 0; r < c->nreq; r++) {
        if ((uint32_t)c->qlen[r] > b.max_query_len) b.max_query_len = (uint32_t)c->qlen[r];
        if ((uint32_t)c->seq[r] > b.max_seq_len) b.max_seq_len = (uint32_t)c->seq[r];
    }
    b.num_blocks = w->nblocks;
    b.query_start_loc = mk(tq, (void *)w->qsl, AH_DTYPE_FP32, 1, c->nreq + 1, 0, 0, 0);
    b.seq_lens = mk(ts, (void *)w->seq, AH_DTYPE_FP32, 1, c->nreq, 0, 0, 0);
    b.block_table = mk(tb, w->bt, AH_DTYPE_FP32, 2, c->nreq, w->bt_stride, 0, 0);
    b.slot_mapping = mk(tsl, w->slots, AH_DTYPE_FP32, 1, w->T, 0, 0, 0);
    b.query_start_loc_host = w->qsl;
    b.seq_lens_host = w->seq;
    b.block_table_host = w->bt;
    b.slot_mapping_host = w->slots;
    b.block_table_stride = w->bt_stride;
    if (c->type == AH_ATTN_ENCODER_DECODER) b.encoder_seq_lens_host = w->seq; /* ABI 2.1 */
    return b;
}

static double tol_of(ah_dtype t) { return t == AH_DTYPE_BF16 ? 2.5e-2 : t == AH_DTYPE_FP16 ? 3e-3 : 2e-4; }

/* One case on one ISA path: write_kv, forward, compare. */
static void run_case(stub_host *h, const tcase *c, const char *isa, float ramp)
{
    world w;
    world_build(&w, c, ramp);
    reference(&w);
    stub_host_set(h, "isa", isa);
    stub_host_set(h, "split_min", c->split_min ? c->split_min : "256");
    const ah_plugin_ops *ops = h->desc->ops;
    ah_context *ctx = NULL;
    const char *why = NULL;
    if (ops->context_create(&h->svc, &stub_device0, &ctx, &why) != AH_OK) {
        EXPECT(0, "%s/%s: context_create: %s", c->name, isa, why);
        world_free(&w);
        return;
    }
    ah_layer_spec spec = spec_of(c);
    ah_limits lim = {sizeof lim, (uint32_t)c->nreq, w.T, w.bt_stride, 20000, w.nblocks};
    ah_state *st = NULL;
    if (ops->state_create(ctx, &spec, &lim, &st) != AH_OK) {
        EXPECT(0, "%s/%s: state_create: %s", c->name, isa, ops->context_error(ctx));
        ops->context_destroy(ctx);
        world_free(&w);
        return;
    }
    DLTensor tq, ts, tb, tsl, q, k, v, kc, vc, out, lse, sinks, alibi;
    ah_batch b = batch_of(&w, &tq, &ts, &tb, &tsl);
    ah_status rc = ops->plan(st, &b, AH_PLAN_EAGER, NULL);
    EXPECT(rc == AH_OK, "%s/%s: plan: %s", c->name, isa, ops->state_error(st));
    int64_t ks[4], vs[4];
    cache_shape(c, &w, c->d, ks);
    cache_shape(c, &w, c->dv, vs);
    mk(&kc, w.kc, c->kvdt, 4, ks[0], ks[1], ks[2], ks[3]);
    if (!c->mla) mk(&vc, w.vc, c->kvdt, 4, vs[0], vs[1], vs[2], vs[3]);
    ah_kv_write_args wa = {sizeof wa, mk(&k, w.knew, c->qdt, 3, w.T, c->hk, c->d, 0),
                           c->mla ? NULL : mk(&v, w.vnew, c->qdt, 3, w.T, c->hk, c->dv, 0),
                           &kc, c->mla ? NULL : &vc, c->k_scale, c->v_scale, NULL};
    rc = ops->write_kv(st, &wa);
    EXPECT(rc == AH_OK, "%s/%s: write_kv: %s", c->name, isa, ops->state_error(st));
    size_t kbytes = (size_t)ks[0] * ks[1] * ks[2] * ks[3] * ah_dtype_size(c->kvdt);
    EXPECT(memcmp(w.kc, w.kc_expect, kbytes) == 0, "%s/%s: key cache after write_kv differs", c->name, isa);
    if (!c->mla)
        EXPECT(memcmp(w.vc, w.vc_expect, (size_t)vs[0] * vs[1] * vs[2] * vs[3] * ah_dtype_size(c->kvdt)) == 0,
               "%s/%s: value cache after write_kv differs", c->name, isa);

    size_t on = (size_t)w.T * c->hq * c->dv;
    void *o = malloc(on * ah_dtype_size(c->qdt) + 1);
    float *l = malloc(((size_t)w.T * c->hq + 1) * sizeof(float));
    memset(o, 0x7f, on * ah_dtype_size(c->qdt)); /* garbage the kernel must overwrite */
    ah_forward_args fa;
    memset(&fa, 0, sizeof fa);
    fa.struct_size = sizeof fa;
    fa.q = mk(&q, w.q, c->qdt, 3, w.T, c->hq, c->d, 0);
    fa.key_cache = &kc;
    fa.value_cache = c->mla ? NULL : &vc;
    fa.out = mk(&out, o, c->qdt, 3, w.T, c->hq, c->dv, 0);
    fa.lse = mk(&lse, l, AH_DTYPE_FP32, 2, w.T, c->hq, 0, 0);
    fa.sinks = c->sinks ? mk(&sinks, w.sinks, AH_DTYPE_FP32, 1, c->hq, 0, 0, 0) : NULL;
    fa.alibi_slopes = c->alibi ? mk(&alibi, w.alibi, AH_DTYPE_FP32, 1, c->hq, 0, 0, 0) : NULL;
    fa.k_scale = c->k_scale;
    fa.v_scale = c->v_scale;
    rc = ops->forward(st, &fa);
    EXPECT(rc == AH_OK, "%s/%s: forward: %s", c->name, isa, ops->state_error(st));
    double worst = 0, worst_l = 0;
    size_t bad = 0;
    const double tol = tol_of(c->qdt);
    for (size_t i = 0; i < on; i++) {
        double e = fabs((double)ah_load_f32(o, i, c->qdt) - w.ref_out[i]);
        if (!(e <= tol)) bad++;
        if (!(e <= worst)) worst = e;
    }
    for (size_t i = 0; i < (size_t)w.T * c->hq; i++) {
        double r = w.ref_lse[i], g = l[i];
        double e = (r == -INFINITY && g == -INFINITY) ? 0 : fabs(g - r);
        if (!(e <= worst_l)) worst_l = e;
    }
    EXPECT(bad == 0, "%s/%s: %zu of %zu outputs off by more than %g (worst %g)", c->name, isa, bad, on, tol, worst);
    EXPECT(worst_l <= 2e-3, "%s/%s: lse off by %g", c->name, isa, worst_l);
    printf("  %-28s %-10s T=%-4u max|err| out %.2e lse %.2e\n", c->name, isa, w.T, worst, worst_l);

    /* Bad input: a wrong q shape is refused and the output is left alone. */
    memcpy(l, l, 0);
    unsigned char probe_byte = ((unsigned char *)o)[0];
    mk(&q, w.q, c->qdt, 3, w.T, c->hq + 1, c->d, 0);
    rc = ops->forward(st, &fa);
    EXPECT(rc == AH_ERR_INVALID_ARGUMENT && strstr(ops->state_error(st), "q dim 1"),
           "%s/%s: bad q shape gave %d '%s'", c->name, isa, rc, ops->state_error(st));
    EXPECT(((unsigned char *)o)[0] == probe_byte, "%s/%s: failed forward wrote output", c->name, isa);
    free(o);
    free(l);
    ops->state_destroy(st);
    ops->context_destroy(ctx);
    world_free(&w);
}

static void test_merge(stub_host *h)
{
    const ah_plugin_ops *ops = h->desc->ops;
    ah_context *ctx = NULL;
    const char *why = NULL;
    stub_host_set(h, "isa", "auto");
    if (ops->context_create(&h->svc, &stub_device0, &ctx, &why) != AH_OK) {
        EXPECT(0, "merge: context_create: %s", why);
        return;
    }
    const uint32_t T = 5, H = 3, D = 48;
    for (int dti = 0; dti < 3; dti++) {
        ah_dtype dt = dti == 0 ? AH_DTYPE_FP32 : dti == 1 ? AH_DTYPE_FP16 : AH_DTYPE_BF16;
        void *a = fill(T * H * D, dt, 1), *b = fill(T * H * D, dt, 1), *o = fill(T * H * D, dt, 1);
        float la[15], lb[15], lo[15];
        for (int i = 0; i < 15; i++) {
            la[i] = (float)(3 * urand());
            lb[i] = (float)(3 * urand());
        }
        la[4] = -INFINITY;
        la[7] = lb[7] = -INFINITY;
        DLTensor ta, tb, to, tla, tlb, tlo;
        ah_merge_args m = {sizeof m, mk(&ta, a, dt, 3, T, H, D, 0), mk(&tla, la, AH_DTYPE_FP32, 2, T, H, 0, 0),
                           mk(&tb, b, dt, 3, T, H, D, 0), mk(&tlb, lb, AH_DTYPE_FP32, 2, T, H, 0, 0),
                           mk(&to, o, dt, 3, T, H, D, 0), mk(&tlo, lo, AH_DTYPE_FP32, 2, T, H, 0, 0), NULL};
        EXPECT(ops->merge_states(ctx, &m) == AH_OK, "merge: %s", ops->context_error(ctx));
        double worst = 0;
        for (uint32_t r = 0; r < T * H; r++) {
            double M = fmax(la[r], lb[r]);
            double wa = M == -INFINITY ? 0 : exp(la[r] - M), wb = M == -INFINITY ? 0 : exp(lb[r] - M);
            double lref = M == -INFINITY ? -INFINITY : M + log(wa + wb);
            EXPECT((lref == -INFINITY && lo[r] == -INFINITY) || fabs(lo[r] - lref) < 1e-5, "merge lse row %u: %g vs %g", r, lo[r], lref);
            for (uint32_t c = 0; c < D; c++) {
                double ref = M == -INFINITY ? 0 : (wa * ah_load_f32(a, r * D + c, dt) + wb * ah_load_f32(b, r * D + c, dt)) / (wa + wb);
                double e = fabs(ah_load_f32(o, r * D + c, dt) - ref);
                if (e > worst) worst = e;
            }
        }
        EXPECT(worst <= tol_of(dt) / 4, "merge %s: worst error %g", ah_dtype_name(dt), worst);
        /* out aliasing v_a is allowed. */
        m.out = &ta;
        EXPECT(ops->merge_states(ctx, &m) == AH_OK && memcmp(a, o, (size_t)T * H * D * ah_dtype_size(dt)) == 0,
               "merge in place into v_a differs (%s)", ah_dtype_name(dt));
        /* A shape mismatch is refused. */
        mk(&tb, b, dt, 3, T, H, D - 16, 0);
        EXPECT(ops->merge_states(ctx, &m) == AH_ERR_INVALID_ARGUMENT, "merge accepted mismatched shapes");
        free(a);
        free(b);
        free(o);
    }
    ops->context_destroy(ctx);
}

static void test_forced_paths(stub_host *h)
{
    const ah_plugin_ops *ops = h->desc->ops;
    ah_context *ctx = NULL;
    const char *why = NULL;
    /* Malformed values never reach the plugin: the host refuses them against
     * the declared key table (tests/unit/test_plugin_keys.c). */
    stub_host_set(h, "threads", TEST_THREADS);
    /* Every path the CPU lacks must be refused, by probe and by context_create. */
    const char *paths[] = {"amx", "avx512bf16", "avx512", "avx2", "scalar"};
    for (int i = 0; i < 5; i++) {
        stub_host_set(h, "isa", paths[i]);
        ah_probe_info pi;
        memset(&pi, 0, sizeof pi);
        pi.struct_size = sizeof pi;
        ops->probe(&h->svc, &pi);
        ah_status rc = ops->context_create(&h->svc, &stub_device0, &ctx, &why);
        if (pi.usable) {
            EXPECT(rc == AH_OK && strcmp(pi.arch, paths[i]) == 0 && pi.multiprocessors == (uint32_t)atoi(TEST_THREADS),
                   "probe says %s usable (arch %s, %u threads) but context_create gave %d", paths[i], pi.arch, pi.multiprocessors, rc);
            if (rc == AH_OK) ops->context_destroy(ctx);
        } else {
            EXPECT(rc == AH_ERR_UNAVAILABLE && ctx == NULL && strstr(why, paths[i]) && strstr(pi.reason, "lacks"),
                   "forced %s on a CPU without it: rc %d why '%s' reason '%s'", paths[i], rc, why ? why : "", pi.reason);
            printf("  forced isa=%s refused: %s\n", paths[i], pi.reason);
        }
    }
    stub_host_set(h, "isa", "auto");
}

int main(int argc, char **argv)
{
    stub_host h;
    if (stub_host_init(&h, argc > 1 ? argv[1] : CPU_AMX_SO) != 0) return 77;
    stub_host_set(&h, "threads", TEST_THREADS);
    const char *paths[] = {"scalar", "avx2", "avx512", "avx512bf16", "amx"};
    /* argv[2] restricts the run to one path. */
    const char *only = argc > 2 ? argv[2] : NULL;
    const ah_dtype BF = AH_DTYPE_BF16, F16 = AH_DTYPE_FP16, F32 = AH_DTYPE_FP32, E4 = AH_DTYPE_FP8_E4M3, E5 = AH_DTYPE_FP8_E5M2;
    const ah_kv_layout NHD = AH_KV_LAYOUT_NHD, HND = AH_KV_LAYOUT_HND;
    const ah_attn_type DEC = AH_ATTN_DECODER;
    const tcase cases[] = {
        {"decode gqa bf16", DEC, 8, 2, 128, 128, BF, BF, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 4, {1, 1, 1, 1}, {1, 17, 100, 333}, NULL},
        {"prefill mha bf16 bs32", DEC, 4, 4, 64, 64, BF, BF, 32, NHD, 0, 0, 0, 0, 0, 1, 1, 2, {70, 33}, {70, 33}, NULL},
        {"extend gqa bf16 HND", DEC, 8, 2, 128, 128, BF, BF, 16, HND, 0, 0, 0, 0, 0, 1, 1, 2, {20, 5}, {150, 37}, NULL},
        {"mixed bf16 d80", DEC, 6, 2, 80, 80, BF, BF, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 4, {40, 10, 1, 1}, {40, 90, 64, 1}, NULL},
        {"mixed fp16 d96 mqa", DEC, 4, 1, 96, 96, F16, F16, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 4, {40, 10, 1, 1}, {40, 90, 64, 1}, NULL},
        {"fp32 win/cap/alibi/sink", DEC, 2, 1, 32, 32, F32, F32, 48, NHD, 7, 5.0f, 0, 1, 1, 1, 1, 3, {30, 4, 1}, {30, 100, 77}, NULL},
        {"bf16 win/cap/alibi/sink", DEC, 8, 2, 64, 64, BF, BF, 16, HND, 33, 3.0f, 0, 1, 1, 1, 1, 3, {50, 4, 1}, {50, 100, 77}, NULL},
        {"fp8 e4m3 bf16 q", DEC, 8, 2, 128, 128, BF, E4, 16, NHD, 0, 0, 0, 0, 0, 0.05f, 0.02f, 3, {1, 12, 1}, {90, 60, 5}, NULL},
        {"fp8 e5m2 fp16 q HND", DEC, 4, 2, 64, 64, F16, E5, 32, HND, 0, 0, 0, 0, 0, 0.03f, 0.5f, 3, {1, 12, 1}, {90, 60, 5}, NULL},
        {"fp8 e4m3 fp32 q", DEC, 4, 4, 48, 48, F32, E4, 16, NHD, 0, 0, 0, 1, 0, 2.0f, 1.0f, 2, {3, 1}, {40, 19}, NULL},
        {"mla 576/512 bf16", DEC, 16, 1, 576, 512, BF, BF, 16, NHD, 0, 0, 1, 0, 0, 1, 1, 3, {1, 1, 9}, {50, 130, 40}, NULL},
        {"mla 576/512 fp8 e4m3", DEC, 8, 1, 576, 512, BF, E4, 64, NHD, 0, 0, 1, 0, 0, 0.04f, 0.04f, 2, {1, 5}, {70, 30}, NULL},
        {"mla fp16 sinks", DEC, 4, 1, 576, 512, F16, F16, 16, NHD, 0, 0, 1, 1, 0, 1, 1, 2, {1, 3}, {33, 20}, NULL},
        {"mla bf16 group 4 sinks", DEC, 4, 1, 576, 512, BF, BF, 32, NHD, 0, 0, 1, 1, 0, 1, 1, 3, {1, 1, 2}, {45, 97, 20}, NULL},
        {"bf16 decode window split", DEC, 8, 2, 80, 80, BF, BF, 16, HND, 700, 2.0f, 0, 1, 1, 1, 1, 2, {1, 1}, {1500, 333}, "64"},
        /* cacheless encoder layers (ABI 2.1) run in the conformance suite */
        {"bidirectional decoder bf16", AH_ATTN_ENCODER_ONLY, 4, 4, 64, 64, BF, BF, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 2, {50, 17}, {50, 17}, NULL},
        {"bidirectional decoder window fp32", AH_ATTN_ENCODER, 4, 2, 64, 64, F32, BF, 16, NHD, 9, 0, 0, 0, 0, 1, 1, 2, {50, 17}, {50, 17}, NULL},
        {"cross attention bf16", AH_ATTN_ENCODER_DECODER, 4, 4, 64, 64, BF, BF, 16, NHD, 0, 0, 0, 0, 1, 1, 1, 2, {3, 7}, {40, 13}, NULL},
        {"cross attention fp16 win", AH_ATTN_ENCODER_DECODER, 4, 2, 32, 32, F16, F16, 16, HND, 5, 0, 0, 0, 0, 1, 1, 2, {3, 1}, {40, 13}, NULL},
        {"head 256 bf16 sinks", DEC, 4, 2, 256, 256, BF, BF, 64, NHD, 0, 0, 0, 1, 0, 1, 1, 2, {1, 20}, {200, 40}, NULL},
        {"head 512 fp16", DEC, 2, 1, 512, 512, F16, F16, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 2, {1, 6}, {50, 40}, NULL},
        {"qk 192 v 128 bf16", DEC, 4, 2, 192, 128, BF, BF, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 2, {1, 19}, {60, 40}, NULL},
        {"wide group 64/1 bf16", DEC, 64, 1, 64, 64, BF, BF, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 2, {1, 3}, {90, 30}, NULL},
        {"split-kv decode bf16", DEC, 8, 2, 128, 128, BF, BF, 16, NHD, 0, 0, 0, 1, 0, 1, 1, 1, {1}, {3001}, "64"},
        {"split-kv decode fp32 win", DEC, 4, 1, 64, 64, F32, F32, 16, NHD, 1500, 0, 0, 0, 0, 1, 1, 1, {1}, {2500}, "64"},
        {"split-kv prefill bf16", DEC, 2, 1, 64, 64, BF, BF, 32, NHD, 0, 0, 0, 0, 0, 1, 1, 1, {40}, {1200}, "64"},
        {"split-kv prefill gqa4 bf16 HND", DEC, 8, 2, 128, 64, BF, BF, 32, HND, 0, 0, 0, 1, 0, 1, 1, 2, {40, 70}, {1500, 70}, "80"},
        {"decode group 16 alibi bf16", DEC, 32, 2, 64, 64, BF, BF, 16, NHD, 0, 0, 0, 0, 1, 1, 1, 3, {1, 1, 1}, {7, 50, 129}, NULL},
        {"decode window bf16 HND", DEC, 8, 2, 128, 128, BF, BF, 32, HND, 37, 0, 0, 1, 0, 1, 1, 3, {1, 1, 1}, {5, 90, 200}, NULL},
        {"empty and zero-len rows", DEC, 4, 2, 32, 32, BF, BF, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 3, {0, 2, 1}, {5, 2, 1}, NULL},
    };
    /* Rising scores (world_build's ramp): MQA (one KV head per decode item,
     * consecutive AMX units on the same head), GQA 4 over two KV heads,
     * groups of 8 (the AMX kernel's transposed S^T), and prefill/extend (the
     * tile kernel's 16-row softmax step). */
    const tcase ramped[] = {
        {"decode mqa rising bf16", DEC, 4, 1, 128, 128, BF, BF, 16, NHD, 0, 0, 0, 1, 0, 1, 1, 2, {1, 1}, {700, 1001}, NULL},
        {"decode gqa4 rising bf16", DEC, 8, 2, 128, 64, BF, BF, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 2, {1, 1}, {333, 500}, NULL},
        {"decode group 8 rising bf16", DEC, 16, 2, 64, 64, BF, BF, 32, HND, 0, 0, 0, 0, 0, 1, 1, 2, {1, 1}, {95, 600}, NULL},
        {"extend gqa4 rising bf16", DEC, 8, 2, 128, 128, BF, BF, 16, NHD, 0, 0, 0, 0, 0, 1, 1, 2, {300, 40}, {300, 1001}, NULL},
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]), nramped = (int)(sizeof ramped / sizeof ramped[0]);
    int ran_paths = 0;
    for (int p = 0; p < 5; p++) {
        if (only && strcmp(only, paths[p]) != 0) continue;
        ah_probe_info pi;
        memset(&pi, 0, sizeof pi);
        pi.struct_size = sizeof pi;
        stub_host_set(&h, "isa", paths[p]);
        h.desc->ops->probe(&h.svc, &pi);
        if (!pi.usable) {
            printf("isa %s: skipped: %s\n", paths[p], pi.reason);
            continue;
        }
        ran_paths++;
        printf("isa %s:\n", paths[p]);
        for (int i = 0; i < ncases; i++) run_case(&h, &cases[i], paths[p], 0.0f);
        for (int i = 0; i < nramped; i++) run_case(&h, &ramped[i], paths[p], 6.0f);
        if (strcmp(paths[p], "amx") == 0) {
            /* The amx path's other decode kernel (vdpbf16ps), as amx_decode = 0
             * picks it, and the prefill's tile products in one burst per row
             * block (amx_interleave = 0). */
            stub_host_set(&h, "amx_decode", "0");
            stub_host_set(&h, "amx_interleave", "0");
            printf("isa amx, amx_decode = 0, amx_interleave = 0:\n");
            for (int i = 0; i < ncases; i++) run_case(&h, &cases[i], paths[p], 0.0f);
            for (int i = 0; i < nramped; i++) run_case(&h, &ramped[i], paths[p], 6.0f);
            stub_host_set(&h, "amx_decode", "1");
            stub_host_set(&h, "amx_interleave", "1");
        }
    }
    if (ran_paths == 0 && only) {
        printf("skipped: isa %s is not usable here\n", only);
        return 77;
    }
    EXPECT(ran_paths > 0, "no ISA path ran");
    test_merge(&h);
    test_forced_paths(&h);
    printf("cpu_amx_test: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
