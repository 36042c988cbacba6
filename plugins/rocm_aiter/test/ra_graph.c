/*
 * rocm_aiter's host side against a fake libamdhip64 (test/fake_hip.c, on
 * this test's LD_LIBRARY_PATH): what it launches, with which grid and
 * parameters, and what its graph plans rewrite. The kernels never run here;
 * their arithmetic is test_mfma_model's. Checked:
 *   - the probe refuses a gfx target without a code object and accepts
 *     gfx942;
 *   - graphs (UNIFORM_SINGLE_TOKEN_DECODE): plan(CAPTURE) copies the
 *     batch's metadata into the state and launches nothing; the forward
 *     under capture launches nothing and the graph holds the decode and
 *     reduce kernels over a grid from the limits, reading the state's
 *     buffers; plan(REPLAY) of another batch (other lengths, another block
 *     table) allocates nothing, launches nothing and rewrites those
 *     buffers; the graph launch replays the captured launches; REPLAY with
 *     another request count and CAPTURE of a prefill batch are refused;
 *   - eager plans read the batch's own tensors, over a grid from the batch;
 *   - absorbed MLA: prefill runs the decode kernel a wave per query token;
 *     write_kv stores keys alone;
 *   - every device allocation is freed.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "ath.h"
#include "check.h"
#include "fake_hip.h"

static void (*set_arch)(const char *);
static int (*live)(void), (*mallocs)(void);
static int (*executed)(const fake_hip_launch **);

static const fake_hip_launch *last(int back)
{
    const fake_hip_launch *log;
    const int n = executed(&log);
    return n > back ? &log[n - 1 - back] : NULL;
}

static int n_executed(void)
{
    const fake_hip_launch *log;
    return executed(&log);
}

/* The metadata a captured attention kernel reads equals batch B's. */
static void check_meta(const ra_attn_params *p, const ath_batch *B)
{
    for (uint32_t r = 0; r <= B->num_reqs; r++) CHECK(p->query_start_loc[r] == B->qsl[r]);
    for (uint32_t r = 0; r < B->num_reqs; r++) {
        CHECK(p->seq_lens[r] == B->seq[r]);
        for (int32_t k = 0; k < (B->seq[r] + 15) / 16; k++)
            CHECK(p->block_table[(size_t)r * p->table_stride + k] ==
                  B->bt[(size_t)r * B->width + k]);
    }
}

static void test_probe(ath_host *h)
{
    set_arch("gfx908:sramecc+:xnack-");
    CHECK(ath_probe(h) == 77);
    CHECK_CONTAINS(h->probe.reason, "gfx908: no code object for this target");
    set_arch("gfx942:sramecc+:xnack-");
    CHECK(ath_probe(h) == 0);
    CHECK_STREQ(h->probe.arch, "gfx942");
    CHECK(h->probe.multiprocessors == 304);
}

static void test_graph(ath_host *h)
{
    const int32_t q1[3] = {1, 1, 1}, s_cap[3] = {100, 300, 7}, s_rep[3] = {520, 12, 64};
    ath_shape s = {.attn = AH_ATTN_DECODER,
                   .q_dtype = AH_DTYPE_BF16,
                   .kv_dtype = AH_DTYPE_BF16,
                   .hq = 16,
                   .hk = 2,
                   .d = 128,
                   .layout = AH_KV_LAYOUT_NHD,
                   .batch = {.num_reqs = 3,
                             .qlens = q1,
                             .seqlens = s_cap,
                             .block_size = 16,
                             .table_width = 50,
                             .extra_blocks = 40,
                             .cap_tokens = 8}};
    uint64_t rng = ath_seed(7);
    ath_work w;
    if (ath_work_build(h, &w, &s, &rng)) {
        CHECK(0);
        return;
    }
    const ah_plugin_ops *ops = h->ops;
    ah_state *st = NULL;
    CHECK(ops->state_create(h->ctx, &w.spec, &w.lim, &st) == AH_OK);
    if (!st) return;
    const unsigned parts = (w.lim.max_seq_len + 255) / 256; /* 800 keys: 4 */
    const int n0 = n_executed();

    CHECK(ops->plan(st, &w.B.b, AH_PLAN_CAPTURE, h->stream) == AH_OK);
    CHECK(n_executed() == n0);
    ah_forward_args a = ath_work_args(&w, h->stream, 1);
    ah_graph *g = NULL;
    CHECK(ops->graph_begin(h->ctx, h->stream) == AH_OK);
    CHECK(ops->forward(st, &a) == AH_OK);
    CHECK(ops->graph_end(h->ctx, h->stream, &g) == AH_OK && g);
    CHECK(n_executed() == n0); /* captured, not run */

    /* another batch of the class: other lengths and table rows */
    s.batch.seqlens = s_rep;
    const int allocs = mallocs();
    CHECK(ath_work_refill(h, &w, &s, &rng) == 0);
    const int allocs_refill = mallocs();
    CHECK(ops->plan(st, &w.B.b, AH_PLAN_REPLAY, h->stream) == AH_OK);
    CHECK(mallocs() == allocs_refill && allocs_refill == allocs);
    CHECK(n_executed() == n0);
    CHECK(ops->graph_launch(h->ctx, g, h->stream) == AH_OK);
    CHECK(n_executed() == n0 + 2);
    const fake_hip_launch *dec = last(1), *red = last(0);
    if (dec && red) {
        CHECK_STREQ(dec->kernel, "ra_decode_bf16_d128");
        CHECK(dec->grid[0] == 3 && dec->grid[1] == 2 && dec->grid[2] == parts);
        CHECK(dec->block[0] == 64 && dec->block[1] == 1);
        CHECK_STREQ(red->kernel, "ra_decode_reduce_bf16_d128");
        CHECK(red->grid[0] == 16 && red->grid[1] == 3 && red->grid[2] == 1);
        const ra_attn_params *p = &dec->params.attn;
        CHECK(p->query_start_loc != w.B.d_qsl.t.data && p->block_table != w.B.d_bt.t.data);
        CHECK(p->table_stride == (int)w.lim.max_blocks_per_req && p->max_parts == (int)parts);
        CHECK(p->num_q_heads == 16 && p->num_kv_heads == 2 && p->causal == 1 && !p->kv_hnd);
        check_meta(p, &w.B); /* the replayed batch's, not the captured one's */
        CHECK(!memcmp(&red->params.attn, p, sizeof *p));
    }

    /* refused: another request count on replay, a prefill batch in a graph */
    const int32_t q2[2] = {1, 1}, s2[2] = {40, 50}, q5[3] = {5, 1, 1};
    ath_shape s_two = s;
    s_two.batch.num_reqs = 2, s_two.batch.qlens = q2, s_two.batch.seqlens = s2;
    CHECK(ath_work_refill(h, &w, &s_two, &rng) == 0);
    CHECK(ops->plan(st, &w.B.b, AH_PLAN_REPLAY, h->stream) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ops->state_error(st), "num_reqs 2, the captured graph has 3");
    ath_shape s_pre = s;
    s_pre.batch.qlens = q5, s_pre.batch.seqlens = s_cap;
    CHECK(ath_work_refill(h, &w, &s_pre, &rng) == 0);
    CHECK(ops->plan(st, &w.B.b, AH_PLAN_CAPTURE, h->stream) == AH_ERR_UNSUPPORTED);
    CHECK_CONTAINS(ops->state_error(st), "uniform_single_token_decode");

    /* eager: the batch's own tensors, a grid from the batch */
    s.batch.seqlens = s_rep;
    CHECK(ath_work_refill(h, &w, &s, &rng) == 0);
    CHECK(ops->plan(st, &w.B.b, AH_PLAN_EAGER, h->stream) == AH_OK);
    a = ath_work_args(&w, h->stream, 1);
    CHECK(ops->forward(st, &a) == AH_OK);
    dec = last(1);
    if (dec) {
        CHECK_STREQ(dec->kernel, "ra_decode_bf16_d128");
        CHECK(dec->grid[2] == 3); /* 520 keys */
        CHECK(dec->params.attn.query_start_loc == w.B.d_qsl.t.data);
        CHECK(dec->params.attn.block_table == w.B.d_bt.t.data);
    }
    ops->graph_destroy(h->ctx, g);
    ops->state_destroy(st);
    ath_work_free(h, &w);
}

static void test_mla(ath_host *h)
{
    const int32_t ql[2] = {5, 1}, sl[2] = {20, 40};
    ath_shape s = {.attn = AH_ATTN_DECODER,
                   .q_dtype = AH_DTYPE_BF16,
                   .kv_dtype = AH_DTYPE_FP8_E4M3,
                   .hq = 32,
                   .hk = 1,
                   .d = 576,
                   .dv = 512,
                   .mla = 1,
                   .k_scale = 0.5f,
                   .layout = AH_KV_LAYOUT_NHD,
                   .new_kv = 1,
                   .batch = {.num_reqs = 2, .qlens = ql, .seqlens = sl, .block_size = 16}};
    uint64_t rng = ath_seed(9);
    ath_work w;
    if (ath_work_build(h, &w, &s, &rng)) {
        CHECK(0);
        return;
    }
    ah_state *st = NULL;
    CHECK(h->ops->state_create(h->ctx, &w.spec, &w.lim, &st) == AH_OK);
    if (!st) return;
    CHECK(h->ops->plan(st, &w.B.b, AH_PLAN_EAGER, h->stream) == AH_OK);
    ah_forward_args a = ath_work_args(&w, h->stream, 1);
    CHECK(h->ops->forward(st, &a) == AH_OK);
    const fake_hip_launch *l = last(0);
    if (l) {
        CHECK_STREQ(l->kernel, "ra_decode_bf16_e4m3_mla");
        CHECK(l->grid[0] == 6 && l->grid[1] == 2 && l->grid[2] == 1); /* tokens, 16-head groups */
        CHECK(l->params.attn.token_rows == 1);
        CHECK(l->params.attn.v_cache == l->params.attn.k_cache);
        CHECK(l->params.attn.v_scale == 0.5f); /* V is the key cache: k_scale */
    }
    ah_kv_write_args k = ath_work_write_args(&w, h->stream);
    CHECK(h->ops->write_kv(st, &k) == AH_OK);
    l = last(0);
    if (l) {
        CHECK_STREQ(l->kernel, "ra_write_kv_bf16_e4m3");
        CHECK(l->grid[0] == 6 && !l->params.kv.value && !l->params.kv.v_cache);
        CHECK(l->params.kv.head_size == 576 && l->params.kv.k_scale == 0.5f);
    }
    h->ops->state_destroy(st);
    ath_work_free(h, &w);
}

int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    /* the fake the plugin will load too: LD_LIBRARY_PATH names its folder */
    void *fake = dlopen("libamdhip64.so", RTLD_NOW | RTLD_LOCAL);
    *(void **)&set_arch = fake ? dlsym(fake, "fake_hip_set_arch") : NULL;
    *(void **)&live = fake ? dlsym(fake, "fake_hip_live") : NULL;
    *(void **)&mallocs = fake ? dlsym(fake, "fake_hip_mallocs") : NULL;
    *(void **)&executed = fake ? dlsym(fake, "fake_hip_executed") : NULL;
    if (!set_arch || !live || !mallocs || !executed) {
        fprintf(stderr, "libamdhip64.so is not the fake: %s\n", fake ? "no fake_hip_*" : dlerror());
        return 1;
    }
    ath_host h;
    memset(&h, 0, sizeof h);
    CHECK(ath_load(&h, argv[1]) == 0);
    if (!h.ops) return check_report("rocm_aiter_graph");
    test_probe(&h);
    CHECK(ath_context(&h, 0, 1) == 0);
    if (h.ctx) {
        test_graph(&h);
        test_mla(&h);
    }
    ath_close(&h);
    CHECK_MSG(live() == 0, "%d device allocations not freed", live());
    return check_report("rocm_aiter_graph");
}
