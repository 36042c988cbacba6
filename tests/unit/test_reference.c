/*
 * Tests of the reference oracle against computations done another way:
 * a naive attention over contiguous per-request K/V written here (no paging,
 * no layouts, its own masking), invariance under block size, block order
 * and layout, GQA against replicated MHA heads, visibility read off one-hot
 * values, soft-cap limits, the sink identity, merge of two halves against
 * the whole, and write_kv against hand-encoded FP8 bytes.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>
#include <attnhost/reference.h>

#include "check.h"

/* ---- a tiny deterministic generator ------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd_u32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rnd_f(void) { return (float)((rnd_u32() % 20001) / 10000.0 - 1.0); }

/* ---- a test problem: contiguous K/V per request, and a paged copy ------- */

#define MAXR 4
typedef struct problem {
    ah_layer_spec spec;
    uint32_t R, qlen[MAXR], slen[MAXR];
    uint32_t T, num_blocks, stride;
    float *q;       /* [T, Hq, qk] */
    float *k[MAXR]; /* [slen, Hk, qk] contiguous */
    float *v[MAXR]; /* [slen, Hk, vh] */
    float sinks[64], slopes[64];
    int32_t qsl[MAXR + 1], sl[MAXR], *bt;
    int64_t *slots;
    ah_batch batch;
    float *kc, *vc; /* paged caches (fp32) */
} problem;

static ah_layer_spec make_spec(uint32_t hq, uint32_t hk, uint32_t qk, uint32_t vh, uint32_t bs)
{
    ah_layer_spec s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.attn_type = AH_ATTN_DECODER;
    s.num_q_heads = hq;
    s.num_kv_heads = hk;
    s.qk_head_size = qk;
    s.v_head_size = vh;
    s.q_dtype = AH_DTYPE_FP32;
    s.kv_dtype = AH_DTYPE_FP32;
    s.block_size = bs;
    s.kv_layout = AH_KV_LAYOUT_NHD;
    return s;
}

/* Random contiguous data for the given lengths. */
static void problem_init(problem *p, ah_layer_spec spec, uint32_t R, const uint32_t *qlen,
                         const uint32_t *slen)
{
    memset(p, 0, sizeof *p);
    p->spec = spec;
    p->R = R;
    for (uint32_t r = 0; r < R; r++) {
        p->qlen[r] = qlen[r];
        p->slen[r] = slen[r];
        p->qsl[r + 1] = p->qsl[r] + (int32_t)qlen[r];
        p->sl[r] = (int32_t)slen[r];
        p->k[r] = malloc(sizeof(float) * slen[r] * spec.num_kv_heads * spec.qk_head_size);
        p->v[r] = malloc(sizeof(float) * slen[r] * spec.num_kv_heads * spec.v_head_size);
        for (size_t i = 0; i < (size_t)slen[r] * spec.num_kv_heads * spec.qk_head_size; i++)
            p->k[r][i] = rnd_f();
        for (size_t i = 0; i < (size_t)slen[r] * spec.num_kv_heads * spec.v_head_size; i++)
            p->v[r][i] = rnd_f();
        /* MLA: V is the head of K, so make the contiguous V say the same */
        if (spec.use_mla)
            for (uint32_t j = 0; j < slen[r]; j++)
                memcpy(p->v[r] + (size_t)j * spec.v_head_size,
                       p->k[r] + (size_t)j * spec.qk_head_size, sizeof(float) * spec.v_head_size);
    }
    p->T = (uint32_t)p->qsl[R];
    p->q = malloc(sizeof(float) * p->T * spec.num_q_heads * spec.qk_head_size);
    for (size_t i = 0; i < (size_t)p->T * spec.num_q_heads * spec.qk_head_size; i++)
        p->q[i] = rnd_f();
    for (uint32_t h = 0; h < spec.num_q_heads; h++) {
        p->sinks[h] = rnd_f() * 2;
        p->slopes[h] = ldexpf(1.0f, -(int)(h + 1));
    }
}

/* Page the contiguous data into caches of the spec's block size and layout,
 * with blocks handed out in a shuffled order (plus spare blocks). */
static void problem_page(problem *p, uint32_t spare)
{
    const ah_layer_spec *s = &p->spec;
    uint32_t bs = s->block_size, need = 0, maxb = 0, maxs = 0, maxq = 0;
    for (uint32_t r = 0; r < p->R; r++) {
        uint32_t nb = (p->slen[r] + bs - 1) / bs;
        need += nb;
        if (nb > maxb) maxb = nb;
        if (p->slen[r] > maxs) maxs = p->slen[r];
        if (p->qlen[r] > maxq) maxq = p->qlen[r];
    }
    p->num_blocks = need + spare;
    p->stride = maxb + 1;
    uint32_t *perm = malloc(sizeof(uint32_t) * p->num_blocks);
    for (uint32_t i = 0; i < p->num_blocks; i++) perm[i] = i;
    for (uint32_t i = p->num_blocks - 1; i > 0; i--) {
        uint32_t j = rnd_u32() % (i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    free(p->bt);
    free(p->slots);
    free(p->kc);
    free(p->vc);
    p->bt = malloc(sizeof(int32_t) * p->R * p->stride);
    for (uint32_t i = 0; i < p->R * p->stride; i++) p->bt[i] = 77777; /* unused entries */
    size_t per_block_k = (size_t)bs * s->num_kv_heads * s->qk_head_size;
    size_t per_block_v = (size_t)bs * s->num_kv_heads * s->v_head_size;
    p->kc = calloc(per_block_k * p->num_blocks, sizeof(float));
    p->vc = calloc(per_block_v * p->num_blocks, sizeof(float));
    p->slots = malloc(sizeof(int64_t) * (p->T ? p->T : 1));
    uint32_t next = 0;
    for (uint32_t r = 0; r < p->R; r++) {
        uint32_t nb = (p->slen[r] + bs - 1) / bs;
        for (uint32_t k = 0; k < nb; k++) p->bt[r * p->stride + k] = (int32_t)perm[next++];
        for (uint32_t j = 0; j < p->slen[r]; j++) {
            uint32_t blk = (uint32_t)p->bt[r * p->stride + j / bs], off = j % bs;
            for (uint32_t h = 0; h < s->num_kv_heads; h++) {
                for (uint32_t c = 0; c < s->qk_head_size; c++)
                    p->kc[ah_kv_offset(s->kv_layout, bs, s->num_kv_heads, s->qk_head_size, blk, off,
                                       h, c)] =
                        p->k[r][((size_t)j * s->num_kv_heads + h) * s->qk_head_size + c];
                for (uint32_t c = 0; c < s->v_head_size; c++)
                    p->vc[ah_kv_offset(s->kv_layout, bs, s->num_kv_heads, s->v_head_size, blk, off,
                                       h, c)] =
                        p->v[r][((size_t)j * s->num_kv_heads + h) * s->v_head_size + c];
            }
        }
        for (uint32_t i = 0; i < p->qlen[r]; i++) {
            /* decoder queries of a cross layer write nothing; nor does an
             * empty request's (its token lives on another rank) */
            if (s->attn_type == AH_ATTN_ENCODER_DECODER || p->slen[r] < p->qlen[r]) {
                p->slots[p->qsl[r] + i] = -1;
                continue;
            }
            uint32_t pos = p->slen[r] - p->qlen[r] + i;
            p->slots[p->qsl[r] + i] = (int64_t)p->bt[r * p->stride + pos / bs] * bs + pos % bs;
        }
    }
    free(perm);
    memset(&p->batch, 0, sizeof p->batch);
    p->batch.struct_size = sizeof p->batch;
    p->batch.num_reqs = p->R;
    p->batch.num_tokens = p->T;
    p->batch.max_query_len = maxq;
    p->batch.max_seq_len = maxs;
    p->batch.num_blocks = p->num_blocks;
    p->batch.query_start_loc_host = p->qsl;
    p->batch.seq_lens_host = p->sl;
    p->batch.block_table_host = p->bt;
    p->batch.slot_mapping_host = p->slots;
    p->batch.block_table_stride = p->stride;
    /* cross layers read encoder_seq_lens (ABI 2.1): the same lengths here */
    if (s->attn_type == AH_ATTN_ENCODER_DECODER) p->batch.encoder_seq_lens_host = p->sl;
}

static void problem_free(problem *p)
{
    for (uint32_t r = 0; r < p->R; r++) {
        free(p->k[r]);
        free(p->v[r]);
    }
    free(p->q);
    free(p->bt);
    free(p->slots);
    free(p->kc);
    free(p->vc);
}

/* The oracle over p; err (may be NULL) gets the refusal's message. */
static ah_status run_ref_err(problem *p, double *out, double *lse, ah_error *err)
{
    ah_ref_inputs in = {.struct_size = sizeof in,
                        .spec = &p->spec,
                        .batch = &p->batch,
                        .q = p->q,
                        .key_cache = p->kc,
                        .value_cache = p->spec.use_mla ? NULL : p->vc,
                        .sinks = p->sinks,
                        .alibi_slopes = p->slopes,
                        .k_scale = 0,
                        .v_scale = 0,
                        .key = NULL,
                        .value = NULL};
    ah_error mine = {{0}};
    if (!err) err = &mine;
    return ah_reference_attention(&in, out, lse, err);
}

static ah_status run_ref(problem *p, double *out, double *lse)
{
    ah_error err = {{0}};
    ah_status s = run_ref_err(p, out, lse, &err);
    if (s != AH_OK) fprintf(stderr, "reference failed: %s\n", err.msg);
    return s;
}

/* ---- the naive computation: contiguous K/V, masks written out ----------- */

static void naive(const problem *p, double *out, double *lse)
{
    const ah_layer_spec *s = &p->spec;
    uint32_t hq = s->num_q_heads, qk = s->qk_head_size, vh = s->v_head_size;
    double scale = s->scale ? s->scale : 1.0 / sqrt(qk);
    double w[4096];
    for (uint32_t r = 0; r < p->R; r++)
        for (uint32_t i = 0; i < p->qlen[r]; i++) {
            uint32_t t = (uint32_t)p->qsl[r] + i;
            long pos = (long)p->slen[r] - (long)p->qlen[r] + i;
            for (uint32_t h = 0; h < hq; h++) {
                uint32_t kh = h * s->num_kv_heads / hq; /* same group, computed differently */
                double mx = -INFINITY;
                for (uint32_t j = 0; j < p->slen[r]; j++) {
                    int see = 1;
                    long d = (long)j - pos;
                    if (ah_spec_causal(s)) {
                        if (d > 0) see = 0;
                        if (s->sliding_window && -d >= (long)s->sliding_window) see = 0;
                    } else if (s->attn_type != AH_ATTN_ENCODER_DECODER && s->sliding_window) {
                        if (labs(d) >= (long)s->sliding_window) see = 0;
                    }
                    if (!see) {
                        w[j] = NAN;
                        continue;
                    }
                    double dot = 0;
                    for (uint32_t c = 0; c < qk; c++)
                        dot += (double)p->q[((size_t)t * hq + h) * qk + c] *
                               p->k[r][((size_t)j * s->num_kv_heads + kh) * qk + c];
                    double sc = dot * scale;
                    if (s->softcap > 0) sc = tanh(sc / s->softcap) * s->softcap;
                    if (s->use_alibi) sc += p->slopes[h] * (double)d;
                    w[j] = sc;
                    if (sc > mx) mx = sc;
                }
                double sum = 0, acc[1024] = {0};
                for (uint32_t j = 0; j < p->slen[r]; j++) {
                    if (isnan(w[j])) continue;
                    double e = exp(w[j] - mx);
                    sum += e;
                    for (uint32_t c = 0; c < vh; c++)
                        acc[c] += e * p->v[r][((size_t)j * s->num_kv_heads + kh) * vh + c];
                }
                double total = sum;
                if (s->use_sinks) total += exp(p->sinks[h] - mx);
                for (uint32_t c = 0; c < vh; c++)
                    out[((size_t)t * hq + h) * vh + c] = acc[c] / total;
                lse[(size_t)t * hq + h] = mx + log(total);
            }
        }
}

static double max_diff(const double *a, const double *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN makes it NaN, which fails every <= check */
    }
    return m;
}

/* Reference vs naive over a problem; returns max difference (out and lse). */
static double compare_naive(problem *p)
{
    size_t no = (size_t)p->T * p->spec.num_q_heads * p->spec.v_head_size;
    size_t nl = (size_t)p->T * p->spec.num_q_heads;
    double *o1 = malloc(sizeof(double) * no), *o2 = malloc(sizeof(double) * no);
    double *l1 = malloc(sizeof(double) * nl), *l2 = malloc(sizeof(double) * nl);
    double d = INFINITY;
    if (run_ref(p, o1, l1) == AH_OK) {
        naive(p, o2, l2);
        double a = max_diff(o1, o2, no), b = max_diff(l1, l2, nl);
        d = a > b || a != a ? a : b;
    }
    free(o1);
    free(o2);
    free(l1);
    free(l2);
    return d;
}

/* ---- tests -------------------------------------------------------------- */

static const uint32_t QL3[3] = {5, 1, 3}, SL3[3] = {5, 17, 11}; /* prefill, decode, extend */

static void test_against_naive(void)
{
    struct {
        const char *name;
        uint32_t hq, hk, qk, vh, bs;
        ah_attn_type type;
        uint32_t window;
        float softcap;
        int sinks, alibi;
    } cases[] = {
        {"mha", 4, 4, 16, 16, 4, AH_ATTN_DECODER, 0, 0, 0, 0},
        {"gqa", 8, 2, 8, 8, 3, AH_ATTN_DECODER, 0, 0, 0, 0},
        {"mqa", 4, 1, 8, 8, 16, AH_ATTN_DECODER, 0, 0, 0, 0},
        {"qk!=v", 4, 2, 24, 8, 5, AH_ATTN_DECODER, 0, 0, 0, 0},
        {"window", 4, 2, 8, 8, 4, AH_ATTN_DECODER, 4, 0, 0, 0},
        {"softcap", 2, 1, 8, 8, 4, AH_ATTN_DECODER, 0, 0.5f, 0, 0},
        {"alibi", 4, 4, 8, 8, 4, AH_ATTN_DECODER, 0, 0, 0, 1},
        {"sinks", 4, 2, 8, 8, 4, AH_ATTN_DECODER, 0, 0, 1, 0},
        {"bidirectional decoder", 4, 2, 8, 8, 4, AH_ATTN_ENCODER, 0, 0, 0, 0},
        {"bidirectional decoder+window", 4, 2, 8, 8, 2, AH_ATTN_ENCODER_ONLY, 3, 0, 0, 0},
        {"cross", 4, 2, 8, 8, 4, AH_ATTN_ENCODER_DECODER, 0, 0, 0, 0},
        {"everything", 8, 2, 16, 8, 4, AH_ATTN_DECODER, 6, 1.5f, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ah_layer_spec s =
            make_spec(cases[i].hq, cases[i].hk, cases[i].qk, cases[i].vh, cases[i].bs);
        s.attn_type = cases[i].type;
        if (ah_spec_cacheless(&s)) { /* encoder rows: a decoder layer with causal = off */
            s.attn_type = AH_ATTN_DECODER;
            s.causal = AH_CAUSAL_OFF;
        }
        s.sliding_window = cases[i].window;
        s.softcap = cases[i].softcap;
        s.use_sinks = (uint32_t)cases[i].sinks;
        s.use_alibi = (uint32_t)cases[i].alibi;
        if (i % 2) s.scale = 0.3f; /* explicit scale on every other case */
        for (int layout = AH_KV_LAYOUT_NHD; layout <= AH_KV_LAYOUT_HND; layout++) {
            s.kv_layout = (ah_kv_layout)layout;
            problem p;
            /* cross-attention: decoder queries longer than the encoder is fine */
            static const uint32_t qx[3] = {7, 1, 3}, sx[3] = {4, 9, 11};
            int cross = cases[i].type == AH_ATTN_ENCODER_DECODER;
            problem_init(&p, s, 3, cross ? qx : QL3, cross ? sx : SL3);
            problem_page(&p, 3);
            double d = compare_naive(&p);
            CHECK_MSG(d < 1e-12, "%s (%s): reference differs from naive by %g", cases[i].name,
                      layout == AH_KV_LAYOUT_NHD ? "NHD" : "HND", d);
            problem_free(&p);
        }
    }
}

/* MLA: V comes out of the key cache; the value_cache pointer is ignored. */
static void test_mla(void)
{
    ah_layer_spec s = make_spec(4, 1, 36, 32, 4);
    s.use_mla = 1;
    problem p;
    problem_init(&p, s, 3, QL3, SL3);
    problem_page(&p, 1);
    double d = compare_naive(&p);
    CHECK_MSG(d < 1e-12, "MLA differs from naive by %g", d);
    problem_free(&p);
}

/* Same data, different block sizes, block orders and layouts: same result. */
static void test_paging_invariance(void)
{
    ah_layer_spec s = make_spec(4, 2, 8, 8, 1);
    problem p;
    problem_init(&p, s, 3, QL3, SL3);
    size_t n = (size_t)p.T * 4 * 8;
    double *base = malloc(sizeof(double) * n), *o = malloc(sizeof(double) * n);
    problem_page(&p, 0);
    CHECK(run_ref(&p, base, NULL) == AH_OK);
    const uint32_t sizes[] = {2, 3, 16, 32};
    for (size_t i = 0; i < 4; i++)
        for (int layout = AH_KV_LAYOUT_NHD; layout <= AH_KV_LAYOUT_HND; layout++) {
            p.spec.block_size = sizes[i];
            p.spec.kv_layout = (ah_kv_layout)layout;
            problem_page(&p, 5);
            CHECK(run_ref(&p, o, NULL) == AH_OK);
            /* the arithmetic is the same, only the addresses move */
            CHECK_MSG(max_diff(base, o, n) == 0, "block size %u layout %d changes the result by %g",
                      sizes[i], layout, max_diff(base, o, n));
        }
    free(base);
    free(o);
    problem_free(&p);
}

/* GQA with 2 KV heads for 6 query heads == MHA whose KV heads are the GQA
 * ones repeated per group. */
static void test_gqa_mapping(void)
{
    ah_layer_spec g = make_spec(6, 2, 8, 8, 4), m = make_spec(6, 6, 8, 8, 4);
    problem pg, pm;
    problem_init(&pg, g, 3, QL3, SL3);
    problem_init(&pm, m, 3, QL3, SL3);
    memcpy(pm.q, pg.q, sizeof(float) * pg.T * 6 * 8);
    for (uint32_t r = 0; r < 3; r++)
        for (uint32_t j = 0; j < SL3[r]; j++)
            for (uint32_t h = 0; h < 6; h++) {
                memcpy(pm.k[r] + ((size_t)j * 6 + h) * 8, pg.k[r] + ((size_t)j * 2 + h / 3) * 8,
                       sizeof(float) * 8);
                memcpy(pm.v[r] + ((size_t)j * 6 + h) * 8, pg.v[r] + ((size_t)j * 2 + h / 3) * 8,
                       sizeof(float) * 8);
            }
    problem_page(&pg, 0);
    problem_page(&pm, 2);
    size_t n = (size_t)pg.T * 6 * 8;
    double *a = malloc(sizeof(double) * n), *b = malloc(sizeof(double) * n);
    CHECK(run_ref(&pg, a, NULL) == AH_OK);
    CHECK(run_ref(&pm, b, NULL) == AH_OK);
    CHECK_MSG(max_diff(a, b, n) < 1e-14, "GQA vs replicated MHA differ by %g", max_diff(a, b, n));
    free(a);
    free(b);
    problem_free(&pg);
    problem_free(&pm);
}

/* Visibility: with q = 0 every visible key weighs the same, and with
 * one-hot values (v_j = e_j) output channel j is 1/count exactly where key j
 * is visible. Read the mask off and compare with the header's rules. */
static void test_visibility(void)
{
    const uint32_t S = 12, Q = 4;
    struct {
        ah_attn_type type;
        uint32_t window;
    } cases[] = {{AH_ATTN_DECODER, 0},         {AH_ATTN_DECODER, 1},        {AH_ATTN_DECODER, 3},
                 {AH_ATTN_ENCODER, 0},         {AH_ATTN_ENCODER_ONLY, 2},   {AH_ATTN_ENCODER, 5},
                 {AH_ATTN_ENCODER_DECODER, 0}, {AH_ATTN_ENCODER_DECODER, 2}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        ah_layer_spec s = make_spec(1, 1, 4, S, 5);
        s.attn_type = cases[ci].type;
        if (ah_spec_cacheless(&s)) { /* the bidirectional rule, on a decoder layer */
            s.attn_type = AH_ATTN_DECODER;
            s.causal = AH_CAUSAL_OFF;
        }
        s.sliding_window = cases[ci].window;
        problem p;
        uint32_t ql = Q, sl = S;
        problem_init(&p, s, 1, &ql, &sl);
        memset(p.q, 0, sizeof(float) * Q * 4);
        for (uint32_t j = 0; j < S; j++)
            for (uint32_t c = 0; c < S; c++) p.v[0][(size_t)j * S + c] = c == j ? 1.0f : 0.0f;
        problem_page(&p, 0);
        double out[4 * 12];
        CHECK(run_ref(&p, out, NULL) == AH_OK);
        for (uint32_t i = 0; i < Q; i++) {
            long pos = (long)(S - Q + i);
            uint32_t count = 0;
            int want[12];
            for (uint32_t j = 0; j < S; j++) {
                long w = cases[ci].window;
                if (ah_spec_causal(&s)) want[j] = j <= pos && (w == 0 || (long)j > pos - w);
                else if (cases[ci].type == AH_ATTN_ENCODER_DECODER) want[j] = 1;
                else want[j] = w == 0 || labs((long)j - pos) < w;
                count += (uint32_t)want[j];
            }
            for (uint32_t j = 0; j < S; j++) {
                double expect = want[j] ? 1.0 / count : 0.0;
                CHECK_MSG(fabs(out[i * S + j] - expect) < 1e-15,
                          "type %d window %u: query %u key %u weight %g, expected %g",
                          (int)cases[ci].type, cases[ci].window, i, j, out[i * S + j], expect);
            }
        }
        problem_free(&p);
    }
}

/* Soft-cap: a huge cap is no cap; a tiny cap flattens the scores, so the
 * output tends to the plain mean of the visible values. */
static void test_softcap_limits(void)
{
    ah_layer_spec s = make_spec(2, 1, 8, 8, 4);
    s.scale = 4.0f; /* big logits, so a cap matters */
    problem p;
    problem_init(&p, s, 3, QL3, SL3);
    problem_page(&p, 0);
    size_t n = (size_t)p.T * 2 * 8;
    double *a = malloc(sizeof(double) * n), *b = malloc(sizeof(double) * n);
    CHECK(run_ref(&p, a, NULL) == AH_OK);
    p.spec.softcap = 1e8f;
    CHECK(run_ref(&p, b, NULL) == AH_OK);
    CHECK_MSG(max_diff(a, b, n) < 1e-9, "softcap 1e8 differs from none by %g", max_diff(a, b, n));
    p.spec.softcap = 1e-7f;
    CHECK(run_ref(&p, b, NULL) == AH_OK);
    double worst = 0;
    for (uint32_t r = 0; r < 3; r++)
        for (uint32_t i = 0; i < QL3[r]; i++) {
            uint32_t t = (uint32_t)p.qsl[r] + i, pos = SL3[r] - QL3[r] + i;
            for (uint32_t h = 0; h < 2; h++)
                for (uint32_t c = 0; c < 8; c++) {
                    double mean = 0;
                    for (uint32_t j = 0; j <= pos; j++) mean += p.v[r][(size_t)j * 8 + c];
                    mean /= pos + 1;
                    double d = fabs(b[((size_t)t * 2 + h) * 8 + c] - mean);
                    if (d > worst) worst = d;
                }
        }
    CHECK_MSG(worst < 1e-6, "softcap 1e-7 is %g from the plain mean", worst);
    free(a);
    free(b);
    problem_free(&p);
}

/* Sinks: out_sink = out * e^{lse - lse_sink}, lse_sink = log(e^lse + e^sink):
 * the sink only takes probability mass away. */
static void test_sinks_identity(void)
{
    ah_layer_spec s = make_spec(4, 2, 8, 8, 4);
    problem p;
    problem_init(&p, s, 3, QL3, SL3);
    problem_page(&p, 0);
    size_t n = (size_t)p.T * 4 * 8, nl = (size_t)p.T * 4;
    double *o = malloc(sizeof(double) * n), *os = malloc(sizeof(double) * n);
    double *l = malloc(sizeof(double) * nl), *ls = malloc(sizeof(double) * nl);
    CHECK(run_ref(&p, o, l) == AH_OK);
    p.spec.use_sinks = 1;
    CHECK(run_ref(&p, os, ls) == AH_OK);
    double worst = 0, mass_ok = 1;
    for (size_t i = 0; i < nl; i++) {
        double h = (double)p.sinks[i % 4];
        double want_l = log(exp(l[i]) + exp(h));
        if (fabs(ls[i] - want_l) > worst) worst = fabs(ls[i] - want_l);
        if (!(ls[i] > l[i])) mass_ok = 0;
        for (size_t c = 0; c < 8; c++) {
            double want = o[i * 8 + c] * exp(l[i] - ls[i]);
            if (fabs(os[i * 8 + c] - want) > worst) worst = fabs(os[i * 8 + c] - want);
            if (!(fabs(os[i * 8 + c]) < fabs(o[i * 8 + c]) || o[i * 8 + c] == 0)) mass_ok = 0;
        }
    }
    CHECK_MSG(worst < 1e-13, "sink identity off by %g", worst);
    CHECK(mass_ok);
    free(o);
    free(os);
    free(l);
    free(ls);
    problem_free(&p);
}

/* A decode request with seq_len 0 (a context-parallel rank holding none of
 * its keys): out 0 and lse -inf, or the sink's logit with a sink; the
 * request beside it is unchanged. */
static void test_empty_request(void)
{
    ah_layer_spec s = make_spec(4, 2, 8, 8, 4);
    const uint32_t ql[2] = {1, 1}, sl[2] = {0, 6}, sl1[1] = {6};
    problem p, one;
    problem_init(&p, s, 2, ql, sl);
    problem_page(&p, 1);
    problem_init(&one, s, 1, ql, sl1);
    for (uint32_t r = 0; r < 2; r++) p.bt[r * p.stride] = r ? p.bt[r * p.stride] : 99999;
    memcpy(one.q, p.q + 4 * 8, sizeof(float) * 4 * 8); /* request 1's query */
    memcpy(one.k[0], p.k[1], sizeof(float) * 6 * 2 * 8);
    memcpy(one.v[0], p.v[1], sizeof(float) * 6 * 2 * 8);
    problem_page(&one, 0);
    for (int sinks = 0; sinks < 2; sinks++) {
        p.spec.use_sinks = one.spec.use_sinks = (uint32_t)sinks;
        memcpy(one.sinks, p.sinks, sizeof p.sinks);
        double o[2 * 4 * 8], l[2 * 4], o1[4 * 8], l1[4];
        CHECK(run_ref(&p, o, l) == AH_OK);
        CHECK(run_ref(&one, o1, l1) == AH_OK);
        for (int h = 0; h < 4; h++) {
            CHECK(sinks ? l[h] == (double)p.sinks[h] : l[h] == -INFINITY);
            for (int c = 0; c < 8; c++) CHECK(o[h * 8 + c] == 0.0);
            CHECK(fabs(l[4 + h] - l1[h]) < 1e-12);
        }
        for (int i = 0; i < 4 * 8; i++) CHECK(fabs(o[4 * 8 + i] - o1[i]) < 1e-12);
    }
    /* a prefill query needs keys: seq_len 0 with query_len 2 is refused */
    const uint32_t ql2[1] = {2}, sl2[1] = {0};
    problem bad;
    problem_init(&bad, s, 1, ql2, sl2);
    problem_page(&bad, 1);
    double ob[2 * 4 * 8], lb[2 * 4];
    CHECK(run_ref(&bad, ob, lb) == AH_ERR_INVALID_ARGUMENT);
    /* the empty request's token has no place in the cache: a slot there is
     * refused by name, not followed */
    p.slots[0] = 5;
    ah_error err = {{0}};
    double o[2 * 4 * 8], l[2 * 4];
    CHECK(run_ref_err(&p, o, l, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "slot_mapping[0] = 5, but request 0 has seq_len 0");
    problem_free(&p);
    problem_free(&one);
    problem_free(&bad);
}

/* Split one cross-attention request's keys into two halves (the second a
 * request whose block table starts mid-way), merge by LSE: the whole. */
static void test_merge_halves(void)
{
    const uint32_t S = 16, Q = 3, half = 8;
    ah_layer_spec s = make_spec(2, 1, 8, 8, 4);
    s.attn_type = AH_ATTN_ENCODER_DECODER;
    problem p;
    uint32_t ql = Q, sl = S;
    problem_init(&p, s, 1, &ql, &sl);
    problem_page(&p, 0);
    size_t n = (size_t)Q * 2 * 8, nl = (size_t)Q * 2;
    double whole[48], a[48], b[48], m[48], lw[6], la[6], lb[6], lm[6];
    CHECK(run_ref(&p, whole, lw) == AH_OK);
    p.sl[0] = (int32_t)half; /* first half: keys 0..7 */
    CHECK(run_ref(&p, a, la) == AH_OK);
    int32_t row[8];
    memcpy(row, p.bt, sizeof(int32_t) * p.stride);                /* stride is 5 here */
    for (uint32_t k = 0; k < 2; k++) p.bt[k] = row[k + half / 4]; /* second half: keys 8..15 */
    CHECK(run_ref(&p, b, lb) == AH_OK);
    ah_reference_merge_states(Q, 2, 8, a, la, b, lb, m, lm);
    CHECK_MSG(max_diff(whole, m, n) < 1e-14, "merged halves differ from whole by %g",
              max_diff(whole, m, n));
    CHECK_MSG(max_diff(lw, lm, nl) < 1e-13, "merged lse differs by %g", max_diff(lw, lm, nl));
    /* an empty half (lse -inf) leaves the other unchanged */
    double ninf[6], zero[48] = {0};
    for (int i = 0; i < 6; i++) ninf[i] = -INFINITY;
    ah_reference_merge_states(Q, 2, 8, a, la, zero, ninf, m, lm);
    CHECK(max_diff(a, m, n) == 0 && max_diff(la, lm, nl) == 0);
    ah_reference_merge_states(Q, 2, 8, zero, ninf, zero, ninf, m, lm);
    CHECK(m[0] == 0 && isinf(lm[0]) && lm[0] < 0);
    problem_free(&p);
}

/* write_kv: hand-encoded FP8 bytes, negative slots skipped, untouched
 * slots left alone, an out-of-range slot writes nothing. */
/* A batch of one request over host arrays: num_tokens query tokens (its
 * query is qsl[1] - qsl[0] of them), sl[0] keys, its table row bt of
 * stride entries in a cache of num_blocks blocks. */
static ah_batch one_request(int32_t *qsl, int32_t *sl, int32_t *bt, int64_t *slots,
                            uint32_t num_tokens, uint32_t stride, uint32_t num_blocks)
{
    ah_batch b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    b.num_reqs = 1;
    b.num_tokens = num_tokens;
    b.max_query_len = (uint32_t)(qsl[1] - qsl[0]);
    b.max_seq_len = (uint32_t)sl[0];
    b.num_blocks = num_blocks;
    b.query_start_loc_host = qsl;
    b.seq_lens_host = sl;
    b.block_table_host = bt;
    b.slot_mapping_host = slots;
    b.block_table_stride = stride;
    return b;
}

static void test_write_kv(void)
{
    ah_layer_spec s = make_spec(2, 2, 2, 2, 2);
    s.q_dtype = AH_DTYPE_FP32;
    s.kv_dtype = AH_DTYPE_FP8_E4M3;
    int32_t qsl[2] = {0, 3}, sl[1] = {3}, bt[2] = {1, 0};
    int64_t slots[3] = {2, -1, 0}; /* position 0 -> block 1 slot 0 -> 2; pos 2 -> block 0 slot 0 */
    ah_batch b = one_request(qsl, sl, bt, slots, 3, 2, 2);
    float key[12], val[12];
    for (int i = 0; i < 12; i++) {
        key[i] = 0.5f;  /* / 0.25 = 2.0 -> e4m3 0x40 */
        val[i] = -3.0f; /* / 2.0 = -1.5 -> e4m3 0xbc */
    }
    key[1] = 1000.0f; /* saturates at 448 -> 0x7e */
    uint8_t kc[16], vc[16];
    memset(kc, 0xee, sizeof kc);
    memset(vc, 0xee, sizeof vc);
    ah_error err = {{0}};
    CHECK(ah_reference_write_kv(&s, &b, key, val, kc, vc, 0.25f, 2.0f, &err) == AH_OK);
    /* NHD: offset = block*8 + (slot*2 + head)*2 + ch; slot 2 is block 1 slot 0 */
    CHECK(kc[8] == 0x40 && kc[9] == 0x7e && kc[10] == 0x40 && kc[11] == 0x40);
    CHECK(vc[8] == 0xbc && vc[11] == 0xbc);
    CHECK(kc[0] == 0x40 && kc[3] == 0x40 && vc[0] == 0xbc);            /* token 2 -> slot 0 */
    for (int i = 4; i < 8; i++) CHECK(kc[i] == 0xee && vc[i] == 0xee); /* slot 1: untouched */
    for (int i = 12; i < 16; i++) CHECK(kc[i] == 0xee);
    /* e5m2: 2.0 -> 0x40 */
    s.kv_dtype = AH_DTYPE_FP8_E5M2;
    CHECK(ah_reference_write_kv(&s, &b, key, val, kc, vc, 0.25f, 2.0f, &err) == AH_OK);
    CHECK(kc[0] == 0x40 && vc[0] == 0xbe); /* -1.5 in e5m2: sign, exp 15, man 2 */
    /* bf16 cache, HND: plain conversion, scale ignored */
    s.kv_dtype = AH_DTYPE_BF16;
    s.kv_layout = AH_KV_LAYOUT_HND;
    uint16_t kb[16], vb[16];
    memset(kb, 0, sizeof kb);
    memset(vb, 0, sizeof vb);
    key[0] = 1.0f;
    CHECK(ah_reference_write_kv(&s, &b, key, val, kb, vb, 0.25f, 2.0f, &err) == AH_OK);
    /* HND: block*8 + (head*2 + slot)*2 + ch; token 0 -> block 1 slot 0 */
    CHECK(kb[8] == 0x3f80 && kb[9] == 0x447a && vb[8] == 0xc040);
    CHECK(kb[12] == 0x3f00); /* head 1, slot 0 */
    /* out-of-range slot: an error naming it, nothing written */
    slots[1] = 4;
    memset(kb, 0, sizeof kb);
    CHECK(ah_reference_write_kv(&s, &b, key, val, kb, vb, 0, 0, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "slot_mapping[1] = 4");
    for (int i = 0; i < 16; i++) CHECK(kb[i] == 0);
    slots[1] = -1;
    /* MLA writes the key cache only and accepts NULL values */
    s.use_mla = 1;
    s.num_kv_heads = 1;
    s.num_q_heads = 1;
    CHECK(ah_reference_write_kv(&s, &b, key, NULL, kb, NULL, 0, 0, &err) == AH_OK);
}

/* FP8 cache read: stored * scale, via the shared decoder. */
static void test_fp8_read(void)
{
    ah_layer_spec s = make_spec(1, 1, 2, 2, 4);
    s.kv_dtype = AH_DTYPE_FP8_E4M3;
    s.attn_type = AH_ATTN_ENCODER_DECODER;
    int32_t qsl[2] = {0, 1}, sl[1] = {2}, bt[1] = {0};
    int64_t slots[1] = {-1};
    ah_batch b = one_request(qsl, sl, bt, slots, 1, 1, 1);
    b.encoder_seq_lens_host = sl;                          /* a cross layer: two encoder tokens */
    float q[2] = {0, 0};                                   /* equal weights */
    uint8_t kc[8] = {0}, vc[8] = {0x40, 0x38, 0x48, 0xb8}; /* 2, 1, 4, -1 */
    ah_ref_inputs in = {.struct_size = sizeof in,
                        .spec = &s,
                        .batch = &b,
                        .q = q,
                        .key_cache = kc,
                        .value_cache = vc,
                        .k_scale = 0.5f,
                        .v_scale = 3.0f};
    double out[2], lse[1];
    ah_error err = {{0}};
    CHECK(ah_reference_attention(&in, out, lse, &err) == AH_OK);
    CHECK_MSG(fabs(out[0] - 9.0) < 1e-15 && fabs(out[1] - 0.0) < 1e-15, "fp8 read: %g %g", out[0],
              out[1]); /* ((2+4)/2)*3 = 9, ((1-1)/2)*3 = 0 */
    CHECK(fabs(lse[0] - log(2.0)) < 1e-15);
    /* MLA: V is the key cache's head, so k_scale (not v_scale) applies */
    s.use_mla = 1;
    ah_ref_inputs mla = in;
    mla.key_cache = vc;
    mla.value_cache = NULL;
    mla.k_scale = 3.0f;
    mla.v_scale = 0.5f;
    CHECK(ah_reference_attention(&mla, out, lse, &err) == AH_OK);
    CHECK_MSG(fabs(out[0] - 9.0) < 1e-15 && fabs(out[1]) < 1e-15, "fp8 MLA read: %g %g", out[0],
              out[1]);
}

/* Per-KV-head scales (ABI 2.3): write_kv stores head h divided by its own
 * scale, attention reads it back times the same one, and an invalid scale
 * is refused naming its index before anything is written. */
static void test_fp8_per_head(void)
{
    ah_layer_spec s = make_spec(2, 2, 2, 2, 2);
    s.kv_dtype = AH_DTYPE_FP8_E4M3;
    s.attn_type = AH_ATTN_ENCODER_DECODER; /* every key visible: equal weights */
    int32_t qsl[2] = {0, 1}, sl[1] = {2}, bt[1] = {0};
    int64_t slots[2] = {0, 1};
    ah_batch b = one_request(qsl, sl, bt, slots, 2, 1, 1);
    b.encoder_seq_lens_host = sl;
    /* [token, head, ch]: K 1 everywhere; V of token 0 is 2, of token 1 is 4 */
    float key[8], val[8];
    for (int i = 0; i < 8; i++) key[i] = 1.0f, val[i] = i < 4 ? 2.0f : 4.0f;
    const float ks[2] = {0.5f, 0.25f}, vs[2] = {1.0f, 0.5f};
    uint8_t kc[8], vc[8];
    ah_error err = {{0}};
    CHECK(ah_reference_write_kv_per_head(&s, &b, key, val, kc, vc, ks, vs, &err) == AH_OK);
    /* NHD: (slot*2 + head)*2 + ch. head 0: K 1/0.5 = 2 (0x40), V 2/1 = 2 (0x40), 4/1 = 4
     * (0x48); head 1: K 1/0.25 = 4 (0x48), V 2/0.5 = 4 (0x48), 4/0.5 = 8 (0x50) */
    CHECK(kc[0] == 0x40 && kc[2] == 0x48 && kc[4] == 0x40 && kc[6] == 0x48);
    CHECK(vc[0] == 0x40 && vc[2] == 0x48 && vc[4] == 0x48 && vc[6] == 0x50);
    /* equal per-head scales write what the per-tensor form writes */
    uint8_t kt[8], vt[8];
    const float k2[2] = {0.5f, 0.5f}, v2[2] = {1.0f, 1.0f};
    CHECK(ah_reference_write_kv_per_head(&s, &b, key, val, kc, vc, k2, v2, &err) == AH_OK);
    CHECK(ah_reference_write_kv(&s, &b, key, val, kt, vt, 0.5f, 1.0f, &err) == AH_OK);
    CHECK(memcmp(kc, kt, 8) == 0 && memcmp(vc, vt, 8) == 0);
    /* read back with the scales it was written with: V is 3 for both heads */
    CHECK(ah_reference_write_kv_per_head(&s, &b, key, val, kc, vc, ks, vs, &err) == AH_OK);
    float q[4] = {0, 0, 0, 0};
    ah_ref_inputs in = {.struct_size = sizeof in,
                        .spec = &s,
                        .batch = &b,
                        .q = q,
                        .key_cache = kc,
                        .value_cache = vc,
                        .k_scale = 7.0f, /* not read: the per-head scales serve */
                        .v_scale = 7.0f,
                        .k_scales = ks,
                        .v_scales = vs};
    b.num_tokens = 1;
    double out[4], lse[2];
    CHECK(ah_reference_attention(&in, out, lse, &err) == AH_OK);
    for (int i = 0; i < 4; i++) CHECK_MSG(fabs(out[i] - 3.0) < 1e-12, "out[%d] = %g", i, out[i]);
    /* head 0's scale for head 1 halves head 1's values */
    const float v0[2] = {1.0f, 1.0f};
    in.v_scales = v0;
    CHECK(ah_reference_attention(&in, out, lse, &err) == AH_OK);
    CHECK(fabs(out[0] - 3.0) < 1e-12 && fabs(out[2] - 6.0) < 1e-12);
    /* refusals name the index; nothing is written */
    const float bad[2] = {0.5f, 0.0f};
    in.v_scales = bad;
    CHECK(ah_reference_attention(&in, out, lse, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "v_scales[1] = 0 must be finite and > 0");
    b.num_tokens = 2;
    memset(kc, 0xee, sizeof kc);
    const float nan_k[2] = {NAN, 0.5f};
    CHECK(ah_reference_write_kv_per_head(&s, &b, key, val, kc, vc, nan_k, vs, &err) ==
          AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "k_scales[0] = nan");
    for (int i = 0; i < 8; i++) CHECK(kc[i] == 0xee);
    CHECK(ah_reference_write_kv_per_head(&s, &b, key, val, kc, vc, NULL, vs, &err) ==
          AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "k_scales is NULL");
}

static void test_errors(void)
{
    ah_layer_spec s = make_spec(4, 2, 8, 8, 4);
    problem p;
    problem_init(&p, s, 3, QL3, SL3);
    problem_page(&p, 0);
    double out[9 * 4 * 8];
    ah_error err = {{0}};
    ah_ref_inputs in = {.struct_size = sizeof in,
                        .spec = &p.spec,
                        .batch = &p.batch,
                        .q = p.q,
                        .key_cache = p.kc,
                        .value_cache = p.vc,
                        .sinks = NULL,
                        .alibi_slopes = NULL,
                        .k_scale = 0,
                        .v_scale = 0,
                        .key = NULL,
                        .value = NULL};
    p.spec.use_sinks = 1;
    CHECK(ah_reference_attention(&in, out, NULL, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "sinks");
    p.spec.use_sinks = 0;
    p.spec.num_q_heads = 5;
    CHECK(ah_reference_attention(&in, out, NULL, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "num_q_heads = 5");
    p.spec.num_q_heads = 4;
    p.bt[p.stride] = (int32_t)p.num_blocks;
    CHECK(ah_reference_attention(&in, out, NULL, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "block_table[1][0]");
    problem_free(&p);
}

/* ah_parse_int, the plugins' config-value reader: whole decimal integers in
 * range, nothing else, and *out untouched on refusal. */
static void test_parse_int(void)
{
    int v = 7;
    CHECK(ah_parse_int("64", 0, 65536, &v) && v == 64);
    CHECK(ah_parse_int("0", 0, 1, &v) && v == 0);
    CHECK(ah_parse_int("-3", -5, 5, &v) && v == -3);
    CHECK(ah_parse_int("65536", 0, 65536, &v) && v == 65536);
    v = 7;
    const char *bad[] = {"", "lots", "64MiB", "6 4", "1.5", "65537", "-1", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(!ah_parse_int(bad[i], 0, 65536, &v) && v == 7);
}

int main(void)
{
    test_against_naive();
    test_mla();
    test_paging_invariance();
    test_gqa_mapping();
    test_visibility();
    test_softcap_limits();
    test_sinks_identity();
    test_empty_request();
    test_merge_halves();
    test_write_kv();
    test_fp8_read();
    test_fp8_per_head();
    test_parse_int();
    test_errors();
    return check_report("test_reference");
}
