/*
 * Binding and execution through the public API on the sel_beta test
 * plugin: results against the oracle, phase choice, and the errors that
 * must leave the KV cache and the output untouched (bad batch, bad tensor,
 * a scale in the wrong form, forward before plan, layer out of range).
 * Forward args of ABI 2.2's size (an engine built before the FP8 scale
 * fields) run as before.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/attnhost.h>
#include <attnhost/reference.h>

#include "batch_fixture.h"
#include "check.h"

enum { HQ = 4, HK = 2, D = 32, BS = 16, NB = 16, MAXB = 4, R = 2 };

typedef struct fixture {
    ah_host *h;
    ah_model *m;
    ah_selection *sel;
    ah_binding *b;
    float kc[NB * BS * HK * D], vc[NB * BS * HK * D];
    float q[64 * HQ * D], k[64 * HK * D], v[64 * HK * D], out[64 * HQ * D];
    int32_t qsl[R + 1], seq[R], table[R * MAXB];
    int64_t slots[64];
    int64_t sh_q[3], sh_k[3], sh_o[3], sh_c[4];
    DLTensor tq, tk, tv, to, tkc, tvc;
    bf_desc desc;
    ah_batch batch;
} fixture;

static void setup(fixture *f)
{
    memset(f, 0, sizeof *f);
    static const char *dirs[] = {ATTNHOST_SELECT_PLUGIN_DIR};
    ah_host_options o = {.struct_size = sizeof o,
                         .config_text = "[select]\npriority = sel_beta\n",
                         .plugin_dirs = dirs,
                         .n_plugin_dirs = 1,
                         .no_default_dirs = 1,
                         .cache_path = ""};
    ah_error err;
    CHECK_MSG(ah_host_create(&o, &f->h, &err) == AH_OK, "%s", err.msg);
    CHECK(ah_model_parse("[model]\nname = t\nnum_layers = 3\nnum_q_heads = 4\nnum_kv_heads = 2\n"
                         "head_size = 32\ndtype = fp32\nblock_size = 16\n",
                         "t", &f->m, &err) == AH_OK);
    CHECK(ah_host_select(f->h, f->m, &f->sel, &err) == AH_OK);
    ah_binding_options bo = {sizeof bo, {sizeof(ah_limits), R, 64, MAXB, MAXB * BS, NB},
                             0,         0,
                             NULL,      AH_MIXED_STEPS_CONFIG};
    CHECK_MSG(ah_binding_create(f->h, f->sel, &bo, &f->b, &err) == AH_OK, "%s", err.msg);
    uint64_t s = 7;
    for (size_t i = 0; i < sizeof f->kc / sizeof f->kc[0]; i++)
        f->kc[i] = bf_frand(&s), f->vc[i] = bf_frand(&s);
    for (size_t i = 0; i < sizeof f->q / sizeof f->q[0]; i++) f->q[i] = bf_frand(&s);
    for (size_t i = 0; i < sizeof f->k / sizeof f->k[0]; i++)
        f->k[i] = bf_frand(&s), f->v[i] = bf_frand(&s);
    /* request 0: 20 cached + 3 new; request 1: 5 new (a prefill) */
    int32_t ctx[R] = {20, 0}, ql[R] = {3, 5};
    for (int r = 0; r < R; r++)
        for (int j = 0; j < MAXB; j++) f->table[r * MAXB + j] = (r * MAXB + j * 3 + 1) % NB;
    f->qsl[0] = 0;
    for (int r = 0, t = 0; r < R; r++) {
        for (int i = 0; i < ql[r]; i++, t++) {
            int pos = ctx[r] + i;
            f->slots[t] = (int64_t)f->table[r * MAXB + pos / BS] * BS + pos % BS;
        }
        f->qsl[r + 1] = f->qsl[r] + ql[r];
        f->seq[r] = ctx[r] + ql[r];
    }
    int T = f->qsl[R];
    f->sh_q[0] = f->sh_k[0] = f->sh_o[0] = T;
    f->sh_q[1] = f->sh_o[1] = HQ, f->sh_k[1] = HK;
    f->sh_q[2] = f->sh_k[2] = f->sh_o[2] = D;
    f->sh_c[0] = NB, f->sh_c[1] = BS, f->sh_c[2] = HK, f->sh_c[3] = D;
    f->tq = bf_tensor(f->q, 3, f->sh_q, kDLFloat, 32);
    f->tk = bf_tensor(f->k, 3, f->sh_k, kDLFloat, 32);
    f->tv = bf_tensor(f->v, 3, f->sh_k, kDLFloat, 32);
    f->to = bf_tensor(f->out, 3, f->sh_o, kDLFloat, 32);
    f->tkc = bf_tensor(f->kc, 4, f->sh_c, kDLFloat, 32);
    f->tvc = bf_tensor(f->vc, 4, f->sh_c, kDLFloat, 32);
    f->batch = bf_batch(&f->desc, (DLDevice){kDLCPU, 0},
                        (ah_batch){.num_reqs = R,
                                   .num_tokens = (uint32_t)T,
                                   .max_query_len = 5,
                                   .max_seq_len = 23,
                                   .num_blocks = NB,
                                   .query_start_loc_host = f->qsl,
                                   .seq_lens_host = f->seq,
                                   .block_table_host = f->table,
                                   .slot_mapping_host = f->slots,
                                   .block_table_stride = MAXB});
}

static void teardown(fixture *f)
{
    ah_binding_destroy(f->b);
    ah_selection_destroy(f->sel);
    ah_model_destroy(f->m);
    ah_host_destroy(f->h);
}

static ah_forward_args args(fixture *f)
{
    ah_forward_args a = bf_forward_args(&f->tq, &f->tk, &f->tv, &f->tkc, &f->tvc, &f->to, NULL);
    return a;
}

static uint64_t checksum(const void *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

static void test_forward_matches_oracle(void)
{
    fixture *f = calloc(1, sizeof *f);
    setup(f);
    CHECK(ah_binding_plan(f->b, &f->batch, AH_PLAN_EAGER, NULL) == AH_OK);
    CHECK(ah_binding_phase(f->b) == AH_PHASE_PREFILL);
    /* the oracle sees the cache with the new tokens stored */
    static float kc[NB * BS * HK * D], vc[NB * BS * HK * D];
    memcpy(kc, f->kc, sizeof kc);
    memcpy(vc, f->vc, sizeof vc);
    const ah_decision *d = ah_selection_decision(f->sel, 1, AH_PHASE_PREFILL);
    ah_error err;
    CHECK(ah_reference_write_kv(&d->spec, &f->batch, f->k, f->v, kc, vc, 1, 1, &err) == AH_OK);
    ah_forward_args a = args(f);
    a.struct_size = offsetof(ah_forward_args, stream) + sizeof(void *); /* ABI 2.2's args */
    CHECK_MSG(ah_binding_forward(f->b, 1, &a) == AH_OK, "%s", ah_binding_errmsg(f->b));
    CHECK(memcmp(kc, f->kc, sizeof kc) == 0 && memcmp(vc, f->vc, sizeof vc) == 0);
    double ref[8 * HQ * D];
    ah_ref_inputs in = {.struct_size = sizeof in,
                        .spec = &d->spec,
                        .batch = &f->batch,
                        .q = f->q,
                        .key_cache = kc,
                        .value_cache = vc,
                        .sinks = NULL,
                        .alibi_slopes = NULL,
                        .k_scale = 1,
                        .v_scale = 1,
                        .key = NULL,
                        .value = NULL};
    CHECK(ah_reference_attention(&in, ref, NULL, &err) == AH_OK);
    double worst = 0;
    for (int i = 0; i < 8 * HQ * D; i++) worst = fmax(worst, fabs(ref[i] - f->out[i]));
    CHECK_MSG(worst < 1e-5, "max abs error %g", worst);
    /* layers share one device */
    CHECK(ah_binding_device(f->b, 0, AH_PHASE_PREFILL) ==
          ah_binding_device(f->b, 2, AH_PHASE_DECODE));
    ah_kv_cache_desc kd = {.struct_size = sizeof kd}, vd = {.struct_size = sizeof vd};
    CHECK(ah_binding_kv_cache_desc(f->b, 0, NB, &kd, &vd) == AH_OK);
    CHECK(kd.ndim == 4 && kd.shape[0] == NB && kd.shape[1] == BS && kd.shape[2] == HK &&
          kd.shape[3] == D);
    CHECK(kd.strides[3] == 1 && kd.strides[2] == D && kd.strides[1] == HK * D &&
          kd.strides[0] == BS * HK * D);
    CHECK(vd.ndim == 4 && vd.shape[3] == D && kd.kv_dtype == AH_DTYPE_FP32 &&
          kd.dl_dtype.bits == 32);
    CHECK(ah_binding_kv_cache_desc(f->b, 3, NB, &kd, &vd) == AH_ERR_INVALID_ARGUMENT);
    CHECK_STREQ(ah_binding_errmsg(f->b), "layer 3 out of range (the model has 3)");
    teardown(f);
    free(f);
}

static void test_errors_write_nothing(void)
{
    fixture *f = calloc(1, sizeof *f);
    setup(f);
    ah_forward_args a = args(f);
    /* forward before plan */
    CHECK(ah_binding_forward(f->b, 0, &a) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(f->b), "no planned batch");
    uint64_t ck = checksum(f->kc, sizeof f->kc), cv = checksum(f->vc, sizeof f->vc);
    memset(f->out, 0x7f, sizeof f->out);
    uint64_t co = checksum(f->out, sizeof f->out);
    /* a block id past the cache */
    int32_t saved = f->table[MAXB + 0];
    f->table[MAXB + 0] = NB;
    CHECK(ah_binding_plan(f->b, &f->batch, AH_PLAN_EAGER, NULL) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(f->b), "batch: ");
    CHECK_CONTAINS(ah_binding_errmsg(f->b), "block_table[1][0]");
    CHECK(ah_binding_forward(f->b, 0, &a) ==
          AH_ERR_INVALID_ARGUMENT); /* the failed plan planned nothing */
    f->table[MAXB + 0] = saved;
    CHECK(ah_binding_plan(f->b, &f->batch, AH_PLAN_EAGER, NULL) == AH_OK);
    /* a q tensor of the wrong head size */
    f->sh_q[2] = D / 2;
    CHECK(ah_binding_forward(f->b, 0, &a) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(f->b), "layer 0: q");
    f->sh_q[2] = D;
    /* a scale tensor for a layer whose scales are host floats, in forward
     * and write_kv */
    float one = 1;
    int64_t n1 = 1;
    DLTensor ts = bf_tensor(&one, 1, &n1, kDLFloat, 32);
    a.k_scale_tensor = &ts;
    CHECK(ah_binding_forward(f->b, 0, &a) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(f->b),
                   "layer 0: k_scale_tensor is set, but the layer's kv_scales is host");
    ah_kv_write_args w = {.struct_size = sizeof w,
                          .key = &f->tk,
                          .value = &f->tv,
                          .key_cache = &f->tkc,
                          .value_cache = &f->tvc,
                          .v_scale_tensor = &ts};
    CHECK(ah_binding_write_kv(f->b, 0, &w) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(f->b), "v_scale_tensor is set");
    a.k_scale_tensor = NULL;
    a.q_scale = 0.5f; /* no query scale on this layer */
    CHECK(ah_binding_forward(f->b, 0, &a) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(f->b), "q_scale is set, but the layer takes no query scale");
    a.q_scale = 0;
    /* layer out of range */
    CHECK(ah_binding_forward(f->b, 3, &a) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(f->b), "layer 3 out of range (the model has 3)");
    CHECK(checksum(f->kc, sizeof f->kc) == ck && checksum(f->vc, sizeof f->vc) == cv);
    CHECK(checksum(f->out, sizeof f->out) == co);
    /* bad limits and options */
    ah_binding *b2 = NULL;
    ah_error err;
    ah_binding_options bo = {
        sizeof bo, {sizeof(ah_limits), 0, 64, MAXB, 64, NB}, 0, 0, NULL, AH_MIXED_STEPS_CONFIG};
    CHECK(ah_binding_create(f->h, f->sel, &bo, &b2, &err) == AH_ERR_INVALID_ARGUMENT && !b2);
    CHECK_STREQ(err.msg, "limits: max_num_reqs must be at least 1");
    teardown(f);
    free(f);
}

int main(void)
{
    test_forward_matches_oracle();
    test_errors_write_nothing();
    return check_report("test_binding");
}
