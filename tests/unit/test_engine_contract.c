/*
 * The engine contract (issue 23), over the host-memory test plugins in
 * tests/fake_cuda_plugins and abi_good:
 *  - one plugin context per (plugin, device index), opened lazily with
 *    ah_context_options.device_index; a negative index refused; an index
 *    the plugin refuses fails with its reason; ah_device_dl reports the
 *    index; tensors on another index are refused naming tensor and devices;
 *  - CUDA-graph padding (query_len 0, seq_len = graph_seq_len_fill) through
 *    ah_binding_plan;
 *  - CPU fallback under [select] fallback = warn / error / allow;
 *  - ah_host_explain: the whole table when a layer cannot be served;
 *  - caller_output = 0: the plugin's buffer lives until the next forward on
 *    any layer sharing the state.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/attnhost.h>

#include "batch_fixture.h"
#include "check.h"

#define FAKE_DIR ATTNHOST_FAKE_CUDA_PLUGIN_DIR
#define GOOD_DIR ATTNHOST_TEST_PLUGIN_DIR "/good"

enum { HQ = 4, HK = 2, D = 64, BS = 16, NB = 4, MAXB = 2, T = 3 };

static ah_host *host_with(const char *ini)
{
    static const char *dirs[] = {FAKE_DIR, GOOD_DIR};
    ah_host_options o = {.struct_size = sizeof o,
                         .config_text = ini,
                         .plugin_dirs = dirs,
                         .n_plugin_dirs = 2,
                         .no_default_dirs = 1,
                         .cache_path = ""};
    ah_host *h = NULL;
    ah_error err;
    CHECK_MSG(ah_host_create(&o, &h, &err) == AH_OK, "%s", err.msg);
    return h;
}

static ah_model *model(uint32_t layer1_head)
{
    char text[512];
    snprintf(text, sizeof text,
             "[model]\nname = t\nnum_layers = 2\nnum_q_heads = %d\nnum_kv_heads = %d\n"
             "head_size = %d\ndtype = fp32\nblock_size = %d\n[layers.1]\nhead_size = %u\n",
             HQ, HK, D, BS, layer1_head);
    ah_model *m = NULL;
    ah_error err;
    CHECK_MSG(ah_model_parse(text, "<test model>", &m, &err) == AH_OK, "%s", err.msg);
    return m;
}

static ah_selection *select_ok(ah_host *h, const ah_model *m)
{
    ah_selection *s = NULL;
    ah_error err;
    CHECK_MSG(ah_host_select(h, m, &s, &err) == AH_OK, "%s", err.msg);
    return s;
}

static ah_binding_options opts(int32_t device_index)
{
    ah_binding_options bo = {sizeof bo, {sizeof(ah_limits), 4, 16, MAXB, MAXB * BS, NB},
                             0,         device_index,
                             NULL,      AH_MIXED_STEPS_CONFIG};
    return bo;
}

/* One prefill request of T new tokens (positions 0..T-1 in block 1), plus
 * room for padded requests; every tensor on dev. */
typedef struct step {
    float kc[NB * BS * HK * D], vc[NB * BS * HK * D];
    float q[T * HQ * D], k[T * HK * D], v[T * HK * D], out[T * HQ * D];
    int32_t qsl[4], seq[3], table[3 * MAXB];
    int64_t slots[T];
    int64_t sh_q[3], sh_k[3], sh_o[3], sh_c[4];
    DLTensor tq, tk, tv, to, tkc, tvc;
    bf_desc desc;
    ah_batch batch;
} step;

static void step_init(step *s, DLDevice dev)
{
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < sizeof s->q / sizeof s->q[0]; i++)
        s->q[i] = (float)((i * 7) % 13) / 13.0f;
    for (size_t i = 0; i < sizeof s->k / sizeof s->k[0]; i++)
        s->k[i] = (float)((i * 5) % 11) / 11.0f, s->v[i] = (float)((i * 3) % 17) / 17.0f;
    s->qsl[1] = T;
    s->seq[0] = T;
    s->table[0] = 1;
    for (int t = 0; t < T; t++) s->slots[t] = BS + t;
    s->sh_q[0] = s->sh_k[0] = s->sh_o[0] = T;
    s->sh_q[1] = s->sh_o[1] = HQ, s->sh_k[1] = HK;
    s->sh_q[2] = s->sh_k[2] = s->sh_o[2] = D;
    s->sh_c[0] = NB, s->sh_c[1] = BS, s->sh_c[2] = HK, s->sh_c[3] = D;
    s->tq = bf_tensor_on(s->q, 3, s->sh_q, kDLFloat, 32, dev);
    s->tk = bf_tensor_on(s->k, 3, s->sh_k, kDLFloat, 32, dev);
    s->tv = bf_tensor_on(s->v, 3, s->sh_k, kDLFloat, 32, dev);
    s->to = bf_tensor_on(s->out, 3, s->sh_o, kDLFloat, 32, dev);
    s->tkc = bf_tensor_on(s->kc, 4, s->sh_c, kDLFloat, 32, dev);
    s->tvc = bf_tensor_on(s->vc, 4, s->sh_c, kDLFloat, 32, dev);
    s->batch = bf_batch(&s->desc, dev,
                        (ah_batch){.num_reqs = 1,
                                   .num_tokens = T,
                                   .max_query_len = T,
                                   .max_seq_len = T,
                                   .num_blocks = NB,
                                   .query_start_loc_host = s->qsl,
                                   .seq_lens_host = s->seq,
                                   .block_table_host = s->table,
                                   .slot_mapping_host = s->slots,
                                   .block_table_stride = MAXB});
}

static ah_forward_args fwd(step *s)
{
    ah_forward_args a = bf_forward_args(&s->tq, &s->tk, &s->tv, &s->tkc, &s->tvc, &s->to, NULL);
    return a;
}

static int contexts_opened(void)
{
    void *so = dlopen(FAKE_DIR "/fake_cuda_dev.so", RTLD_NOW | RTLD_NOLOAD);
    if (!so) return -1;
    int (*count)(void) = (int (*)(void))dlsym(so, "fake_cuda_contexts_opened");
    int n = count ? count() : -1;
    dlclose(so);
    return n;
}

static void test_device_index(void)
{
    ah_host *h = host_with("[select]\npriority = fake_cuda_dev\n");
    ah_model *m = model(D);
    ah_selection *sel = select_ok(h, m);
    ah_binding *b0 = NULL, *b1 = NULL, *b0b = NULL, *bad = NULL;
    ah_error err;
    ah_binding_options o0 = opts(0), o1 = opts(1);
    CHECK_MSG(ah_binding_create(h, sel, &o0, &b0, &err) == AH_OK, "%s", err.msg);
    CHECK(contexts_opened() == 1);
    CHECK_MSG(ah_binding_create(h, sel, &o1, &b1, &err) == AH_OK, "%s", err.msg);
    CHECK(contexts_opened() == 2);
    /* a second binding on device 0 shares the first one's context */
    CHECK_MSG(ah_binding_create(h, sel, &o0, &b0b, &err) == AH_OK, "%s", err.msg);
    CHECK(contexts_opened() == 2);
    DLDevice d0 = ah_device_dl(ah_binding_device(b0, 0, AH_PHASE_PREFILL));
    DLDevice d1 = ah_device_dl(ah_binding_device(b1, 1, AH_PHASE_DECODE));
    CHECK(d0.device_type == kDLCUDA && d0.device_id == 0);
    CHECK(d1.device_type == kDLCUDA && d1.device_id == 1);
    /* a negative index, and one the plugin refuses, with its reason */
    ah_binding_options neg = opts(-1), five = opts(5);
    CHECK(ah_binding_create(h, sel, &neg, &bad, &err) == AH_ERR_INVALID_ARGUMENT && !bad);
    CHECK_CONTAINS(err.msg, "device_index = -1");
    CHECK(ah_binding_create(h, sel, &five, &bad, &err) == AH_ERR_UNAVAILABLE && !bad);
    CHECK_CONTAINS(err.msg, "fake_cuda_dev: opening device cuda:5 failed: "
                            "fake_cuda_dev has devices 0 and 1 only");
    CHECK(contexts_opened() == 2);

    /* tensors on cuda:1 run on b1; one on cuda:0 is refused naming both */
    step *s = calloc(1, sizeof *s);
    step_init(s, (DLDevice){kDLCUDA, 1});
    CHECK_MSG(ah_binding_plan(b1, &s->batch, AH_PLAN_EAGER, NULL) == AH_OK, "%s",
              ah_binding_errmsg(b1));
    ah_forward_args a = fwd(s);
    CHECK_MSG(ah_binding_forward(b1, 0, &a) == AH_OK, "%s", ah_binding_errmsg(b1));
    s->tq.device.device_id = 0;
    CHECK(ah_binding_forward(b1, 0, &a) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(b1), "q: on cuda:0, expected cuda:1");
    s->tq.device.device_id = 1;
    s->tkc.device.device_id = 0;
    CHECK(ah_binding_forward(b1, 1, &a) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(b1), "key_cache: on cuda:0, expected cuda:1");
    /* and b0 refuses the cuda:1 tensors */
    step_init(s, (DLDevice){kDLCUDA, 1});
    CHECK(ah_binding_plan(b0, &s->batch, AH_PLAN_EAGER, NULL) == AH_OK);
    CHECK(ah_binding_forward(b0, 0, &a) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(b0), "q: on cuda:1, expected cuda:0");
    free(s);
    ah_binding_destroy(b0);
    ah_binding_destroy(b1);
    ah_binding_destroy(b0b);
    ah_selection_destroy(sel);
    ah_model_destroy(m);
    ah_host_destroy(h);
}

/* A binding of model(D) on the one plugin PLUGIN, and a CPU step for it. */
typedef struct bound {
    ah_host *h;
    ah_model *m;
    ah_selection *sel;
    ah_binding *b;
    step *s;
} bound;

static void bound_open(bound *f, const char *plugin)
{
    char ini[128];
    snprintf(ini, sizeof ini, "[select]\npriority = %s\n", plugin);
    f->h = host_with(ini);
    f->m = model(D);
    f->sel = select_ok(f->h, f->m);
    f->b = NULL;
    ah_error err;
    ah_binding_options o = opts(0);
    CHECK_MSG(ah_binding_create(f->h, f->sel, &o, &f->b, &err) == AH_OK, "%s", err.msg);
    f->s = calloc(1, sizeof *f->s);
    step_init(f->s, (DLDevice){kDLCPU, 0});
}

static void bound_close(bound *f)
{
    free(f->s);
    ah_binding_destroy(f->b);
    ah_selection_destroy(f->sel);
    ah_model_destroy(f->m);
    ah_host_destroy(f->h);
}

/* The batch padded to three requests as a CUDA-graph engine does: the
 * test backend declares graph_seq_len_fill = 0. */
static void test_padding_through_plan(void)
{
    bound f;
    bound_open(&f, "abi_good");
    ah_binding *b = f.b;
    step *s = f.s;
    s->batch.num_reqs = 3;
    s->qsl[2] = s->qsl[3] = T;
    s->seq[1] = s->seq[2] = 0;
    CHECK_MSG(ah_binding_plan(b, &s->batch, AH_PLAN_EAGER, NULL) == AH_OK, "%s",
              ah_binding_errmsg(b));
    ah_forward_args a = fwd(s);
    CHECK_MSG(ah_binding_forward(b, 0, &a) == AH_OK, "%s", ah_binding_errmsg(b));
    /* seq_len 1 is not this backend's fill */
    s->seq[2] = 1;
    CHECK(ah_binding_plan(b, &s->batch, AH_PLAN_EAGER, NULL) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(b), "seq_lens[2] = 1 for padded request 2 (query_len 0)");
    bound_close(&f);
}

static void test_cpu_fallback(void)
{
    /* layer 1 has head size 80: fake_cuda_dev (heads 64, 128) refuses it */
    ah_model *m = model(80);
    ah_host *h = host_with("[select]\npriority = fake_cuda_dev, abi_good\n");
    ah_selection *sel = select_ok(h, m);
    CHECK_STREQ(ah_selection_decision(sel, 0, AH_PHASE_PREFILL)->plugin, "fake_cuda_dev");
    CHECK_STREQ(ah_selection_decision(sel, 1, AH_PHASE_PREFILL)->plugin, "abi_good");
    const char *w = ah_selection_warnings(sel);
    CHECK_CONTAINS(w, "layer 1 (prefill): fell back to the CPU backend abi_good although a GPU "
                      "backend is available; the GPU backends refused it: fake_cuda_dev: "
                      "qk_head_size = 80 (supported: {64, 128})");
    CHECK_CONTAINS(w, "layer 1 (decode): fell back to the CPU backend abi_good");
    CHECK(strstr(w, "layer 0") == NULL);
    ah_selection_destroy(sel);
    ah_host_destroy(h);

    /* error: refuse, naming the layer and the GPU backend's reasons */
    h = host_with("[select]\npriority = fake_cuda_dev, abi_good\nfallback = error\n");
    ah_error err;
    sel = NULL;
    CHECK(ah_host_select(h, m, &sel, &err) == AH_ERR_NOT_FOUND && !sel);
    CHECK_CONTAINS(err.msg,
                   "layer 1 (prefill): only the CPU backend abi_good can serve it and "
                   "[select] fallback = error; the GPU backends refused it: fake_cuda_dev: "
                   "qk_head_size = 80");
    /* explain shows every layer anyway, and such a selection cannot be bound */
    CHECK(ah_host_explain(h, m, NULL, &sel, &err) == AH_ERR_NOT_FOUND && sel);
    CHECK_CONTAINS(err.msg, "layer 1 (prefill): only the CPU backend abi_good");
    CHECK_STREQ(ah_selection_decision(sel, 0, AH_PHASE_DECODE)->plugin, "fake_cuda_dev");
    ah_binding *b = NULL;
    ah_binding_options o = opts(0);
    CHECK(ah_binding_create(h, sel, &o, &b, &err) == AH_ERR_INVALID_ARGUMENT && !b);
    CHECK_CONTAINS(err.msg, "cannot be bound");
    ah_selection_destroy(sel);
    ah_host_destroy(h);

    /* allow: bind silently */
    h = host_with("[select]\npriority = fake_cuda_dev, abi_good\nfallback = allow\n");
    sel = select_ok(h, m);
    CHECK_STREQ(ah_selection_warnings(sel), "");
    CHECK_STREQ(ah_selection_decision(sel, 1, AH_PHASE_PREFILL)->plugin, "abi_good");
    ah_selection_destroy(sel);
    ah_host_destroy(h);

    /* a list that puts the CPU first is a choice, not a fallback; so is a
     * disabled GPU backend */
    h = host_with("[select]\npriority = abi_good, fake_cuda_dev\nfallback = error\n");
    sel = select_ok(h, m);
    CHECK_STREQ(ah_selection_warnings(sel), "");
    ah_selection_destroy(sel);
    ah_host_destroy(h);
    h = host_with("[select]\npriority = fake_cuda_dev, abi_good\ndisable = fake_cuda_dev\n"
                  "fallback = error\n");
    sel = select_ok(h, m);
    CHECK_STREQ(ah_selection_decision(sel, 0, AH_PHASE_PREFILL)->plugin, "abi_good");
    ah_selection_destroy(sel);
    ah_host_destroy(h);
    ah_model_destroy(m);
}

static void test_explain_unservable(void)
{
    ah_model *m = model(80);
    ah_host *h = host_with("");
    ah_selection *sel = NULL;
    ah_error err;
    CHECK(ah_host_explain(h, m, "fake_cuda_dev", &sel, &err) == AH_ERR_UNSUPPORTED && sel);
    CHECK_CONTAINS(err.msg, "layer 1 (prefill): the forced backend cannot serve it");
    const ah_decision *d0 = ah_selection_decision(sel, 0, AH_PHASE_PREFILL);
    const ah_decision *d1 = ah_selection_decision(sel, 1, AH_PHASE_PREFILL);
    CHECK(d0 && d0->plugin && !strcmp(d0->plugin, "fake_cuda_dev"));
    CHECK(d1 && !d1->plugin && d1->n_candidates == 1 && d1->candidates[0].n_reasons >= 1);
    CHECK(ah_selection_decision(sel, 1, AH_PHASE_DECODE) != NULL);
    ah_binding *b = NULL;
    ah_binding_options o = opts(0);
    CHECK(ah_binding_create(h, sel, &o, &b, &err) != AH_OK && !b);
    ah_selection_destroy(sel);
    /* the plain selection still fails and leaves nothing */
    sel = NULL;
    CHECK(ah_host_select_forced(h, m, "fake_cuda_dev", &sel, &err) == AH_ERR_UNSUPPORTED && !sel);
    ah_host_destroy(h);
    ah_model_destroy(m);
}

/* caller_output = 0: layers 0 and 1 share a state, so layer 1's forward
 * overwrites the buffer layer 0 returned. */
static void test_plugin_owned_output(void)
{
    bound f;
    bound_open(&f, "fake_cuda_own_out");
    ah_binding *b = f.b;
    step *s = f.s;
    CHECK_MSG(ah_binding_plan(b, &s->batch, AH_PLAN_EAGER, NULL) == AH_OK, "%s",
              ah_binding_errmsg(b));
    DLTensor out0, out1;
    memset(&out0, 0, sizeof out0);
    memset(&out1, 0, sizeof out1);
    ah_forward_args a = fwd(s);
    a.out = &out0;
    CHECK_MSG(ah_binding_forward(b, 0, &a) == AH_OK, "%s", ah_binding_errmsg(b));
    CHECK(out0.data && out0.ndim == 3 && out0.shape[0] == T && out0.shape[1] == HQ &&
          out0.shape[2] == D);
    static float first[T * HQ * D];
    memcpy(first, out0.data, sizeof first);
    /* the next layer, other queries: the same buffer, now its result */
    for (size_t i = 0; i < sizeof s->q / sizeof s->q[0]; i++) s->q[i] = -s->q[i] * 3.0f;
    a.out = &out1;
    a.key = a.value = NULL; /* K/V are stored already */
    CHECK_MSG(ah_binding_forward(b, 1, &a) == AH_OK, "%s", ah_binding_errmsg(b));
    CHECK(out1.data == out0.data);
    CHECK(memcmp(first, out0.data, sizeof first) != 0);
    bound_close(&f);
}

int main(void)
{
    test_device_index();
    test_padding_through_plan();
    test_cpu_fallback();
    test_explain_unservable();
    test_plugin_owned_output();
    return check_report("test_engine_contract");
}
