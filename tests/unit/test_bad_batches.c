/*
 * Bad batches and bad tensors through a bound CPU plugin: every field of
 * the batch description, and every tensor of a forward call, corrupted in
 * turn (negative and overflowing lengths, block ids and slots past the
 * cache, a table too narrow, wrong dtypes, shapes, strides, devices,
 * misaligned pointers, bad scales). Each must be refused by
 * ah_binding_plan or ah_binding_forward with a message naming the problem,
 * and not one byte of the KV cache, the output or the inputs may change
 * (FNV checksums before and after). A refused plan also leaves the binding
 * unplanned, so the forward that follows it is refused too.
 *
 * Runs against every CPU plugin the build has that serves the fixture's
 * model (the ABI test backend always, cpu_amx when built), through
 * ah_host_select_forced.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "reliability_fixture.h"

typedef struct sums {
    uint64_t kc, vc, out, q, k, v;
} sums;

static sums checksum(const rel_step *s)
{
    sums x;
    x.kc = rel_hash(s->kc, REL_CACHE_ELEMS * sizeof(float));
    x.vc = rel_hash(s->vc, REL_CACHE_ELEMS * sizeof(float));
    x.out = rel_hash(s->out, REL_Q_ELEMS * sizeof(float));
    x.q = rel_hash(s->q, REL_Q_ELEMS * sizeof(float));
    x.k = rel_hash(s->k, REL_KV_ELEMS * sizeof(float));
    x.v = rel_hash(s->v, REL_KV_ELEMS * sizeof(float));
    return x;
}

/* ---- batch corruptions: applied to a fresh valid step; want is a piece of
 * the expected message ------------------------------------------------------ */

typedef struct batch_case {
    const char *what;
    void (*apply)(rel_step *s);
    const char *want;
} batch_case;

#define BC(name, body, want_unused) \
    static void bc_##name(rel_step *s) { body; }
BC(num_reqs_zero, s->batch.num_reqs = 0, "num_reqs = 0")
BC(num_reqs_huge, s->batch.num_reqs = UINT32_MAX, "num_reqs")
BC(num_tokens_more, s->batch.num_tokens = REL_TOKENS + 1, "num_tokens")
BC(num_tokens_overflow, s->batch.num_tokens = UINT32_MAX, "num_tokens")
BC(qsl0_negative, s->qsl[0] = -1, "query_start_loc[0]")
BC(qsl_backwards, s->qsl[1] = -5, "query_len")
BC(qsl_empty_request, s->qsl[1] = 0, "query_len 0")
BC(qsl_overflow, s->qsl[2] = INT32_MAX, "query_start_loc")
BC(qsl_int_min, s->qsl[1] = INT32_MIN, "query_start_loc")
BC(seq_negative, s->seq[0] = -1, "seq_lens[0]")
BC(seq_zero, s->seq[1] = 0, "seq_lens[1]")
BC(seq_overflow, s->seq[1] = INT32_MAX, "seq_lens[1]")
BC(seq_below_query, s->seq[0] = 2, "query_len")
BC(max_query_below, s->batch.max_query_len = 2, "max_query_len")
BC(max_query_huge, s->batch.max_query_len = UINT32_MAX, "max_query_len")
BC(max_seq_below, s->batch.max_seq_len = 21, "max_seq_len")
BC(max_seq_huge, s->batch.max_seq_len = UINT32_MAX, "max_seq_len")
BC(block_past_cache, s->bt[0] = REL_BLOCKS, "outside the cache")
BC(block_negative, s->bt[1] = -1, "outside the cache")
BC(block_int_max, s->bt[REL_STRIDE + 1] = INT32_MAX, "outside the cache")
BC(slot_past_cache, s->slots[0] = REL_BLOCKS * REL_BS, "outside the cache")
BC(slot_int64_max, s->slots[3] = INT64_MAX, "outside the cache")
BC(slot_other_request, s->slots[3] = 6 * REL_BS + 5, "lives at slot")
BC(slot_wrong_offset, s->slots[1] = s->slots[0], "lives at slot")
BC(table_too_narrow, s->batch.block_table_stride = 1, "too narrow")
BC(table_stride_zero, s->batch.block_table_stride = 0, "block_table_stride = 0")
BC(num_blocks_zero, s->batch.num_blocks = 0, "num_blocks = 0")
BC(num_blocks_past_limits, s->batch.num_blocks = REL_BLOCKS + 1, "num_blocks")
BC(struct_size_small, s->batch.struct_size = 8, "struct_size")
BC(qsl_host_null, s->batch.query_start_loc_host = NULL, "NULL")
BC(seq_host_null, s->batch.seq_lens_host = NULL, "NULL")
BC(table_host_null, s->batch.block_table_host = NULL, "NULL")
BC(slots_host_null, s->batch.slot_mapping_host = NULL, "NULL")
BC(prefix_too_long, s->batch.common_prefix_len = 21, "common_prefix_len")

static const batch_case batch_cases[] = {
#define E(name, want) \
    { \
#name, bc_##name, want \
    }
    E(num_reqs_zero, "num_reqs = 0"),
    E(num_reqs_huge, "num_reqs"),
    E(num_tokens_more, "num_tokens"),
    E(num_tokens_overflow, "num_tokens"),
    E(qsl0_negative, "query_start_loc[0]"),
    E(qsl_backwards, "query_len"),
    E(qsl_empty_request, "query_len 0"),
    E(qsl_overflow, "query_len 2147483644"),
    E(qsl_int_min, "query_start_loc"),
    E(seq_negative, "seq_lens[0]"),
    E(seq_zero, "seq_lens[1]"),
    E(seq_overflow, "seq_lens[1]"),
    E(seq_below_query, "query_len"),
    E(max_query_below, "max_query_len"),
    E(max_query_huge, "max_query_len"),
    E(max_seq_below, "max_seq_len"),
    E(max_seq_huge, "max_seq_len"),
    E(block_past_cache, "outside the cache"),
    E(block_negative, "outside the cache"),
    E(block_int_max, "outside the cache"),
    E(slot_past_cache, "outside the cache"),
    E(slot_int64_max, "outside the cache"),
    E(slot_other_request, "lives at slot"),
    E(slot_wrong_offset, "lives at slot"),
    E(table_too_narrow, "too narrow"),
    E(table_stride_zero, "block_table_stride = 0"),
    E(num_blocks_zero, "num_blocks = 0"),
    E(num_blocks_past_limits, "num_blocks"),
    E(struct_size_small, "struct_size"),
    E(qsl_host_null, "NULL"),
    E(seq_host_null, "NULL"),
    E(table_host_null, "NULL"),
    E(slots_host_null, "NULL"),
    E(prefix_too_long, "common_prefix_len"),
#undef E
};

/* ---- forward corruptions: applied after a valid plan ----------------------- */

typedef struct fwd_case {
    const char *what;
    void (*apply)(rel_step *s);
    const char *want;
} fwd_case;

static int64_t bad_shape3[3] = {REL_TOKENS, REL_HQ, REL_D + 1};
static int64_t bad_cache_shape[4] = {REL_BLOCKS - 1, REL_BS, REL_HK, REL_D};
static int64_t hnd_cache_shape[4] = {REL_BLOCKS, REL_HK, REL_BS, REL_D};
static int64_t gap_strides3[3] = {REL_HQ * REL_D * 2, REL_D * 2, 1};
static int64_t last_strided3[3] = {REL_HQ * REL_D, REL_D, 2};
static int64_t neg_shape3[3] = {-REL_TOKENS, REL_HQ, REL_D};
static int64_t huge_shape3[3] = {INT64_MAX, REL_HQ, REL_D};

#define FC(name, body) \
    static void fc_##name(rel_step *s) { body; }
FC(q_fp16, s->t_q.dtype.bits = 16)
FC(q_int32, s->t_q.dtype.code = kDLInt)
FC(q_lanes, s->t_q.dtype.lanes = 4)
FC(q_head_size, s->t_q.shape = bad_shape3)
FC(q_rank, s->t_q.ndim = 2)
FC(q_negative_dim, s->t_q.shape = neg_shape3)
FC(q_overflowing_dim, s->t_q.shape = huge_shape3)
FC(q_last_dim_strided, s->t_q.strides = last_strided3)
FC(q_misaligned, s->t_q.data = (char *)s->q + 4)
FC(q_byte_offset_misaligned, s->t_q.byte_offset = 2)
FC(q_on_cuda, s->t_q.device.device_type = kDLCUDA)
FC(q_null, s->args.q = NULL)
FC(q_data_null, s->t_q.data = NULL)
FC(out_shape, s->t_out.shape = bad_shape3)
FC(out_dtype, s->t_out.dtype.bits = 16)
FC(out_misaligned, s->t_out.data = (char *)s->out + 8)
FC(out_null, s->args.out = NULL)
FC(key_rank, s->t_k.ndim = 4)
FC(key_dtype, s->t_k.dtype.code = kDLBfloat)
FC(key_misaligned, s->t_k.data = (char *)s->k + 4)
FC(value_null, s->args.value = NULL)
FC(kc_too_few_blocks, s->t_kc.shape = bad_cache_shape)
FC(kc_wrong_layout, s->t_kc.shape = hnd_cache_shape)
FC(kc_dtype, s->t_kc.dtype.bits = 16)
FC(kc_strided, s->t_kc.strides = (int64_t *)gap_strides3; s->t_kc.ndim = 3)
FC(kc_misaligned, s->t_kc.data = (char *)s->kc + 4)
FC(kc_null, s->args.key_cache = NULL)
FC(vc_null, s->args.value_cache = NULL)
FC(vc_on_cuda, s->t_vc.device.device_type = kDLCUDA)
FC(k_scale_nan, s->args.k_scale = NAN)
FC(v_scale_negative, s->args.v_scale = -1.0f)
FC(args_struct_size, s->args.struct_size = 4)

static const fwd_case fwd_cases[] = {
#define E(name, want) \
    { \
#name, fc_##name, want \
    }
    E(q_fp16, "q"),
    E(q_int32, "q"),
    E(q_lanes, "q"),
    E(q_head_size, "q"),
    E(q_rank, "q"),
    E(q_negative_dim, "q"),
    E(q_overflowing_dim, "q"),
    E(q_last_dim_strided, "q"),
    E(q_misaligned, "aligned"),
    E(q_byte_offset_misaligned, "aligned"),
    E(q_on_cuda, "q"),
    E(q_null, "q"),
    E(q_data_null, "q"),
    E(out_shape, "out"),
    E(out_dtype, "out"),
    E(out_misaligned, "aligned"),
    E(out_null, "out"),
    E(key_rank, "key"),
    E(key_dtype, "key"),
    E(key_misaligned, "aligned"),
    E(value_null, "value"),
    E(kc_too_few_blocks, "key_cache"),
    E(kc_wrong_layout, "key_cache"),
    E(kc_dtype, "key_cache"),
    E(kc_strided, "key_cache"),
    E(kc_misaligned, "aligned"),
    E(kc_null, "key_cache"),
    E(vc_null, "value_cache"),
    E(vc_on_cuda, "value_cache"),
    E(k_scale_nan, "k_scale"),
    E(v_scale_negative, "v_scale"),
    E(args_struct_size, "struct_size"),
#undef E
};

static void test_plugin(ah_host *h, const ah_model *m, const char *plugin)
{
    ah_selection *sel = NULL;
    ah_binding *b = NULL;
    ah_error err;
    if (ah_host_select_forced(h, m, plugin, &sel, &err) != AH_OK) {
        printf("%s: skipped, it does not serve the fixture model: %s\n", plugin, err.msg);
        return;
    }
    ah_binding_options bo = rel_binding_options();
    ah_status st = ah_binding_create(h, sel, &bo, &b, &err);
    CHECK_MSG(st == AH_OK, "%s: binding: %s", plugin, err.msg);
    if (st != AH_OK) {
        ah_selection_destroy(sel);
        return;
    }
    int n_batch = 0, n_fwd = 0;

    /* The valid step runs (the baseline the corruptions depart from). */
    rel_step s;
    rel_step_init(&s, 11);
    CHECK_MSG(ah_binding_plan(b, &s.batch, AH_PLAN_EAGER, NULL) == AH_OK, "%s: valid plan: %s",
              plugin, ah_binding_errmsg(b));
    CHECK_MSG(ah_binding_forward(b, 0, &s.args) == AH_OK, "%s: valid forward: %s", plugin,
              ah_binding_errmsg(b));
    rel_step_free(&s);

    for (size_t i = 0; i < sizeof batch_cases / sizeof batch_cases[0]; i++) {
        const batch_case *c = &batch_cases[i];
        rel_step_init(&s, 100 + (uint32_t)i);
        c->apply(&s);
        sums before = checksum(&s);
        st = ah_binding_plan(b, &s.batch, AH_PLAN_EAGER, NULL);
        CHECK_MSG(st == AH_ERR_INVALID_ARGUMENT || st == AH_ERR_ABI, "%s: %s: plan returned %s",
                  plugin, c->what, ah_status_str(st));
        CHECK_MSG(strstr(ah_binding_errmsg(b), c->want) != NULL,
                  "%s: %s: message '%s' does not name '%s'", plugin, c->what, ah_binding_errmsg(b),
                  c->want);
        /* the refused plan left nothing planned: forward must refuse too */
        st = ah_binding_forward(b, 0, &s.args);
        CHECK_MSG(st != AH_OK, "%s: %s: forward ran after a refused plan", plugin, c->what);
        sums after = checksum(&s);
        CHECK_MSG(memcmp(&before, &after, sizeof before) == 0, "%s: %s: bytes changed", plugin,
                  c->what);
        rel_step_free(&s);
        n_batch++;
    }
    /* an unknown plan mode */
    rel_step_init(&s, 99);
    CHECK(ah_binding_plan(b, &s.batch, (ah_plan_mode)7, NULL) == AH_ERR_INVALID_ARGUMENT);
    rel_step_free(&s);

    for (size_t i = 0; i < sizeof fwd_cases / sizeof fwd_cases[0]; i++) {
        const fwd_case *c = &fwd_cases[i];
        rel_step_init(&s, 200 + (uint32_t)i);
        st = ah_binding_plan(b, &s.batch, AH_PLAN_EAGER, NULL);
        CHECK_MSG(st == AH_OK, "%s: %s: plan: %s", plugin, c->what, ah_binding_errmsg(b));
        for (size_t e = 0; e < REL_Q_ELEMS; e++) s.out[e] = 12345.0f; /* a pattern to keep */
        c->apply(&s);
        sums before = checksum(&s);
        for (uint32_t layer = 0; layer < 2; layer++) {
            st = ah_binding_forward(b, layer, &s.args);
            CHECK_MSG(st == AH_ERR_INVALID_ARGUMENT || st == AH_ERR_ABI,
                      "%s: %s: forward layer %u returned %s", plugin, c->what, layer,
                      ah_status_str(st));
            CHECK_MSG(strstr(ah_binding_errmsg(b), c->want) != NULL,
                      "%s: %s: message '%s' does not name '%s'", plugin, c->what,
                      ah_binding_errmsg(b), c->want);
        }
        sums after = checksum(&s);
        CHECK_MSG(memcmp(&before, &after, sizeof before) == 0, "%s: %s: bytes changed", plugin,
                  c->what);
        rel_step_free(&s);
        n_fwd++;
    }
    /* a layer past the model, and write_kv with bad arguments */
    rel_step_init(&s, 300);
    CHECK(ah_binding_plan(b, &s.batch, AH_PLAN_EAGER, NULL) == AH_OK);
    sums before = checksum(&s);
    CHECK(ah_binding_forward(b, 2, &s.args) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ah_binding_errmsg(b), "layer 2");
    CHECK(ah_binding_forward(b, UINT32_MAX, &s.args) == AH_ERR_INVALID_ARGUMENT);
    CHECK(ah_binding_forward(b, 0, NULL) != AH_OK);
    ah_kv_write_args kv = {.struct_size = sizeof kv,
                           .key = &s.t_k,
                           .value = &s.t_v,
                           .key_cache = &s.t_kc,
                           .value_cache = &s.t_vc,
                           .k_scale = 0,
                           .v_scale = 0,
                           .stream = NULL};
    s.t_vc.shape = bad_cache_shape;
    st = ah_binding_write_kv(b, 0, &kv);
    CHECK_MSG(st == AH_ERR_INVALID_ARGUMENT || st == AH_ERR_UNSUPPORTED, "write_kv: %s",
              ah_status_str(st));
    sums after = checksum(&s);
    CHECK_MSG(memcmp(&before, &after, sizeof before) == 0, "%s: layer/write_kv: bytes changed",
              plugin);
    rel_step_free(&s);

    printf("%s: %d batch corruptions and %d tensor corruptions refused, nothing written\n", plugin,
           n_batch, n_fwd);
    ah_binding_destroy(b);
    ah_selection_destroy(sel);
}

int main(void)
{
    char good[1024];
    const char *dirs[2] = {ATTNHOST_BUILD_DIR "/lib/attnhost/plugins",
                           rel_case_dir("good", good, sizeof good)};
    ah_host_options ho = rel_host_options(dirs, 2, NULL);
    ah_host *h = NULL;
    ah_model *m = NULL;
    ah_error err;
    CHECK_MSG(ah_host_create(&ho, &h, &err) == AH_OK, "host: %s", err.msg);
    CHECK_MSG(ah_model_parse(rel_model_text, "<rel>", &m, &err) == AH_OK, "model: %s", err.msg);
    if (!h || !m) return check_report("test_bad_batches");
    int tested = 0;
    for (size_t i = 0; i < ah_host_plugin_count(h); i++) {
        const ah_plugin_info *p = ah_host_plugin(h, i);
        if (p->state != AH_PLUGIN_AVAILABLE || p->device_kind != AH_DEVICE_CPU) continue;
        test_plugin(h, m, p->name);
        tested++;
    }
    CHECK_MSG(tested >= 1, "no CPU plugin available (the ABI test backend should be)");
    ah_model_destroy(m);
    ah_host_destroy(h);
    return check_report("test_bad_batches");
}
