/*
 * Tests of ah_batch_validate: a well-formed mixed batch passes; each way of
 * breaking it (one field at a time) fails with a message naming the field,
 * the index and the value.
 */
#include <stdint.h>
#include <string.h>

#include <attnhost/attnhost.h>

#include "check.h"

/* Three requests, block size 4, a cache of 16 blocks:
 *   r0: prefill 5 tokens, seq 5   -> blocks {3, 9}
 *   r1: decode 1 token,   seq 9   -> blocks {0, 1, 2}
 *   r2: extend 3 tokens,  seq 8   -> blocks {7, 15}      */
typedef struct fixture {
    ah_layer_spec spec;
    ah_limits lim;
    ah_batch b;
    int32_t qsl[6], sl[5], bt[5 * 4]; /* room for two padded requests */
    int64_t slots[10];
} fixture;

static void fixture_init(fixture *f)
{
    memset(f, 0, sizeof *f);
    f->spec.struct_size = sizeof f->spec;
    f->spec.attn_type = AH_ATTN_DECODER;
    f->spec.num_q_heads = f->spec.num_kv_heads = 2;
    f->spec.qk_head_size = f->spec.v_head_size = 8;
    f->spec.q_dtype = f->spec.kv_dtype = AH_DTYPE_FP16;
    f->spec.block_size = 4;
    f->spec.kv_layout = AH_KV_LAYOUT_NHD;
    f->lim = (ah_limits){sizeof(ah_limits), 8, 64, 4, 16, 16};
    const int32_t qsl[4] = {0, 5, 6, 9}, sl[3] = {5, 9, 8};
    const int32_t bt[12] = {3, 9, -1, -1, 0, 1, 2, -1, 7, 15, 99999, -5};
    memcpy(f->qsl, qsl, sizeof qsl);
    memcpy(f->sl, sl, sizeof sl);
    memcpy(f->bt, bt, sizeof bt);
    /* r0 positions 0..4 -> 12,13,14,15,36; r1 position 8 -> block 2 slot 0 = 8;
     * r2 positions 5..7 -> block 15 slots 1..3 = 61,62,63 */
    const int64_t slots[9] = {12, 13, 14, 15, 36, 8, 61, 62, 63};
    memcpy(f->slots, slots, sizeof slots);
    f->b.struct_size = sizeof f->b;
    f->b.num_reqs = 3;
    f->b.num_tokens = 9;
    f->b.max_query_len = 5;
    f->b.max_seq_len = 9;
    f->b.num_blocks = 16;
    f->b.query_start_loc_host = f->qsl;
    f->b.seq_lens_host = f->sl;
    f->b.block_table_host = f->bt;
    f->b.slot_mapping_host = f->slots;
    f->b.block_table_stride = 4;
}

/* Validate and expect failure with text in the message. */
static void expect_fail(fixture *f, const char *text, int line)
{
    ah_error err;
    memset(&err, 0, sizeof err);
    ah_status s = ah_batch_validate(&f->b, &f->spec, &f->lim, &err);
    CHECK_MSG(s == AH_ERR_INVALID_ARGUMENT, "line %d: status %d, expected invalid argument", line,
              (int)s);
    CHECK_MSG(strstr(err.msg, text) != NULL, "line %d: message \"%s\" lacks \"%s\"", line, err.msg,
              text);
}
#define EXPECT_FAIL(f, text) expect_fail(f, text, __LINE__)

static void expect_ok(fixture *f, int line)
{
    ah_error err;
    memset(&err, 0, sizeof err);
    ah_status s = ah_batch_validate(&f->b, &f->spec, &f->lim, &err);
    CHECK_MSG(s == AH_OK, "line %d: rejected: %s", line, err.msg);
}
#define EXPECT_OK(f) expect_ok(f, __LINE__)

static void test_good(void)
{
    fixture f;
    fixture_init(&f);
    EXPECT_OK(&f);
    /* padding slots, larger maxima (bounds), wider table, no limits */
    f.slots[3] = -1;
    f.b.max_query_len = 8;
    f.b.max_seq_len = 16;
    EXPECT_OK(&f);
    ah_error err;
    CHECK(ah_batch_validate(&f.b, &f.spec, NULL, &err) == AH_OK);
    /* a zero-filled struct_size-limited batch without common_prefix_len */
    f.b.struct_size = offsetof(ah_batch, common_prefix_len);
    f.b.common_prefix_len = 1000; /* not covered: ignored */
    EXPECT_OK(&f);
}

static void test_counts(void)
{
    fixture f;
    ah_error err;
    fixture_init(&f);
    CHECK(ah_batch_validate(NULL, &f.spec, &f.lim, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "batch is NULL");
    CHECK(ah_batch_validate(&f.b, NULL, &f.lim, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK(ah_batch_validate(&f.b, &f.spec, &f.lim, NULL) == AH_OK); /* err optional */
    f.b.struct_size = 8;
    EXPECT_FAIL(&f, "batch: struct_size 8");
    fixture_init(&f);
    f.lim.struct_size = 4;
    EXPECT_FAIL(&f, "limits: struct_size 4");
    fixture_init(&f);
    f.lim.max_num_reqs = 2;
    EXPECT_FAIL(&f, "num_reqs = 3 exceeds limits.max_num_reqs = 2");
    fixture_init(&f);
    f.lim.max_num_tokens = 8;
    EXPECT_FAIL(&f, "num_tokens = 9 exceeds limits.max_num_tokens = 8");
    fixture_init(&f);
    f.b.num_reqs = 0;
    EXPECT_FAIL(&f, "num_reqs = 0");
    fixture_init(&f);
    f.b.num_blocks = 17;
    EXPECT_FAIL(&f, "num_blocks = 17 exceeds limits.num_blocks = 16");
    fixture_init(&f);
    f.spec.block_size = 0;
    EXPECT_FAIL(&f, "block_size = 0");
    fixture_init(&f);
    f.b.block_table_stride = 0;
    EXPECT_FAIL(&f, "block_table_stride = 0");
    const char *names[4] = {"query_start_loc_host", "seq_lens_host", "block_table_host",
                            "slot_mapping_host"};
    for (int i = 0; i < 4; i++) {
        fixture_init(&f);
        if (i == 0) f.b.query_start_loc_host = NULL;
        if (i == 1) f.b.seq_lens_host = NULL;
        if (i == 2) f.b.block_table_host = NULL;
        if (i == 3) f.b.slot_mapping_host = NULL;
        EXPECT_FAIL(&f, names[i]);
    }
}

static void test_lengths(void)
{
    fixture f;
    fixture_init(&f);
    f.qsl[0] = 1;
    EXPECT_FAIL(&f, "query_start_loc[0] = 1, expected 0");
    fixture_init(&f);
    f.qsl[2] = 5; /* request 1 empty but not padding: seq_len 9, and a real request follows */
    EXPECT_FAIL(&f, "seq_lens[1] = 9 for padded request 1 (query_len 0): a padded request "
                    "carries seq_len = 0");
    fixture_init(&f);
    f.qsl[2] = 4; /* goes backwards */
    EXPECT_FAIL(&f, "query_start_loc[2] = 4 after query_start_loc[1] = 5");
    fixture_init(&f);
    f.b.num_tokens = 10;
    EXPECT_FAIL(&f, "query_start_loc[3] = 9, expected num_tokens = 10");
    fixture_init(&f);
    f.sl[0] = 4; /* shorter than its 5 queries */
    EXPECT_FAIL(&f, "seq_lens[0] = 4 is less than request 0's query_len 5");
    fixture_init(&f);
    f.sl[1] = 0;
    EXPECT_FAIL(&f, "seq_lens[1] = 0");
    fixture_init(&f);
    f.sl[1] = -7;
    EXPECT_FAIL(&f, "seq_lens[1] = -7");
    fixture_init(&f);
    f.lim.max_seq_len = 8;
    f.b.max_seq_len = 8;
    EXPECT_FAIL(&f, "seq_lens[1] = 9 exceeds limits.max_seq_len = 8");
    fixture_init(&f);
    f.b.max_seq_len = 20;
    EXPECT_FAIL(&f, "max_seq_len = 20 exceeds limits.max_seq_len = 16");
    fixture_init(&f);
    f.b.max_query_len = 4;
    EXPECT_FAIL(&f, "max_query_len = 4 is below the longest query (5)");
    fixture_init(&f);
    f.b.max_seq_len = 8;
    EXPECT_FAIL(&f, "max_seq_len = 8 is below the longest sequence (9)");
    fixture_init(&f);
    f.b.common_prefix_len = 6;
    EXPECT_FAIL(&f, "common_prefix_len = 6 exceeds the shortest sequence (5)");
    f.b.common_prefix_len = 4;
    EXPECT_OK(&f);
    /* huge int32 values: no overflow in the differences */
    fixture_init(&f);
    f.qsl[2] = INT32_MIN;
    EXPECT_FAIL(&f, "query_start_loc[2] = -2147483648 after query_start_loc[1] = 5: request 1 "
                    "has query_len -2147483653");
    fixture_init(&f);
    f.qsl[1] = INT32_MAX;
    EXPECT_FAIL(&f, "seq_lens[0] = 5 is less than request 0's query_len 2147483647");
}

static void test_block_table(void)
{
    fixture f;
    fixture_init(&f);
    f.bt[4 + 2] = 16;
    EXPECT_FAIL(&f, "block_table[1][2] = 16 is outside the cache (16 blocks)");
    fixture_init(&f);
    f.bt[0] = -1;
    EXPECT_FAIL(&f, "block_table[0][0] = -1 is outside the cache");
    /* a negative entry stays a released block in a cache of more than 2^31
     * blocks, where it is below num_blocks read as unsigned */
    fixture_init(&f);
    f.lim.num_blocks = f.b.num_blocks = 3000000000u;
    f.bt[4] = INT32_MIN + 5;
    EXPECT_FAIL(&f, "block_table[1][0] = -2147483643 is outside the cache (3000000000 blocks)");
    fixture_init(&f);
    f.b.block_table_stride = 2; /* request 1 needs 3 */
    f.bt[2] = 0, f.bt[3] = 1;   /* keep rows 0/1 plausible under the new stride */
    EXPECT_FAIL(
        &f,
        "block_table_stride = 2 is too narrow: request 1 (seq_len 9, block_size 4) needs 3 blocks");
    fixture_init(&f);
    f.lim.max_blocks_per_req = 2;
    EXPECT_FAIL(&f, "request 1 needs 3 blocks (seq_len 9), above limits.max_blocks_per_req = 2");
    /* unused entries past a request's blocks are never read */
    fixture_init(&f);
    f.bt[3] = INT32_MIN;
    EXPECT_OK(&f);
}

static void test_slots(void)
{
    fixture f;
    fixture_init(&f);
    f.slots[4] = 64;
    EXPECT_FAIL(&f, "slot_mapping[4] = 64 is outside the cache (16 blocks of 4 = 64 slots)");
    fixture_init(&f);
    f.slots[5] = 9; /* r1 position 8 is block 2 slot 0 = 8 */
    EXPECT_FAIL(&f, "slot_mapping[5] = 9, but token position 8 of request 1 lives at slot 8 "
                    "(block_table[1][2] = 2, block_size 4)");
    fixture_init(&f);
    f.slots[6] = 13; /* a slot of request 0's block */
    EXPECT_FAIL(&f, "slot_mapping[6] = 13, but token position 5 of request 2 lives at slot 61");
    fixture_init(&f);
    f.slots[0] = INT64_MAX;
    EXPECT_FAIL(&f, "slot_mapping[0] = 9223372036854775807 is outside the cache");
    /* cross-attention: queries may outnumber encoder tokens, slots range-checked only */
    fixture_init(&f);
    f.spec.attn_type = AH_ATTN_ENCODER_DECODER;
    EXPECT_FAIL(&f, "encoder_seq_lens_host is NULL");
    int32_t enc[8] = {2, 1, 3, 0, 0, 0, 0, 0};
    f.b.encoder_seq_lens_host = enc;
    f.sl[0] = 2;
    f.slots[5] = 9;
    EXPECT_OK(&f);
    f.slots[5] = 100;
    EXPECT_FAIL(&f, "slot_mapping[5] = 100 is outside the cache");
}

/* ABI 2.1 fields: encoder_seq_lens, cacheless layers, the tree mask. */
static void test_abi21_fields(void)
{
    fixture f;
    /* cross layers: encoder lengths checked and their blocks inside the cache */
    fixture_init(&f);
    f.spec.attn_type = AH_ATTN_ENCODER_DECODER;
    int32_t enc[5] = {2, 0, 3, 0, 0};
    f.b.encoder_seq_lens_host = enc;
    EXPECT_OK(&f);
    enc[1] = -1;
    EXPECT_FAIL(&f, "encoder_seq_lens[1] = -1 (must be >= 0)");
    enc[1] = (int32_t)f.b.max_seq_len + 1;
    EXPECT_FAIL(&f, "exceeds max_seq_len");
    enc[1] = 0;
    f.b.struct_size = (uint32_t)offsetof(ah_batch, encoder_seq_lens); /* a 2.0 batch */
    EXPECT_FAIL(&f, "predates it");
    /* cacheless layers need no cache, block table or slots */
    fixture_init(&f);
    f.spec.attn_type = AH_ATTN_ENCODER_ONLY;
    f.b.block_table_host = NULL;
    f.b.slot_mapping_host = NULL;
    f.b.seq_lens_host = NULL;
    f.b.num_blocks = 0;
    EXPECT_OK(&f);
    fixture_init(&f);
    f.spec.attn_type = AH_ATTN_ENCODER;
    EXPECT_FAIL(&f, "a cacheless (encoder) layer attends over the request's own tokens");
    /* the tree mask: spans of query_len * seq_len inside custom_mask_len */
    fixture_init(&f);
    uint8_t mask[4096];
    int64_t ip[6] = {0};
    memset(mask, 1, sizeof mask);
    for (uint32_t r = 0; r < f.b.num_reqs; r++)
        ip[r + 1] = ip[r] + (int64_t)(f.qsl[r + 1] - f.qsl[r]) * f.sl[r];
    f.b.custom_mask_host = mask;
    f.b.custom_mask_len = (uint64_t)ip[f.b.num_reqs];
    EXPECT_FAIL(&f, "custom_mask_host is set but mask_indptr_host is NULL");
    f.b.mask_indptr_host = ip;
    EXPECT_OK(&f);
    f.b.custom_mask_len--;
    EXPECT_FAIL(&f, "is past custom_mask_len");
    f.b.custom_mask_len++;
    ip[1]++;
    EXPECT_FAIL(&f, "mask_indptr[1] = ");
    ip[1]--;
    ip[0] = -1;
    EXPECT_FAIL(&f, "mask_indptr[0] = -1 (must be >= 0)");
    ip[0] = 0;
    f.spec.attn_type = AH_ATTN_ENCODER_DECODER; /* ignored by cross layers */
    int32_t enc2[5] = {1, 1, 1, 1, 1};
    f.b.encoder_seq_lens_host = enc2;
    ip[1] = 12345;
    EXPECT_OK(&f);
}

/* CUDA-graph padding as vLLM and SGLang write it: the batch of three real
 * requests padded to five with query_len 0 and seq_len = the backend's
 * graph_seq_len_fill (0 for most, 1 for FlashInfer-style kernels). */
static void pad_to_five(fixture *f, int32_t fill)
{
    f->qsl[4] = f->qsl[5] = 9;
    f->sl[3] = f->sl[4] = fill;
    f->bt[12] = f->bt[16] = 0; /* the null block a fill of 1 reads */
    f->b.num_reqs = 5;
}

static void test_padding(void)
{
    fixture pf;
    fixture *f = &pf;
    ah_error err;
    /* fill 0 (ah_batch_validate's) */
    fixture_init(&pf);
    pad_to_five(f, 0);
    EXPECT_OK(f);
    /* fill 1 through ah_batch_validate_fill; fill 0 there refuses it */
    fixture_init(&pf);
    pad_to_five(f, 1);
    CHECK_MSG(ah_batch_validate_fill(&f->b, &f->spec, &f->lim, 1, &err) == AH_OK, "%s", err.msg);
    CHECK(ah_batch_validate_fill(&f->b, &f->spec, &f->lim, 0, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "seq_lens[3] = 1 for padded request 3 (query_len 0): a padded request "
                            "carries seq_len = 0");
    /* a negative fill refuses every padded request */
    CHECK(ah_batch_validate_fill(&f->b, &f->spec, &f->lim, -1, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "request 3 has query_len 0 (must be >= 1)");
    /* the block a padded request's seq_len covers must be inside the cache */
    f->bt[12] = 16;
    CHECK(ah_batch_validate_fill(&f->b, &f->spec, &f->lim, 1, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err.msg, "block_table[3][0] = 16 is outside the cache");
    /* a real request after a padded one */
    fixture_init(&pf);
    pad_to_five(f, 0);
    f->qsl[5] = 10;
    f->slots[9] = -1;
    f->b.num_tokens = 10;
    f->sl[4] = 1;
    EXPECT_FAIL(f, "query_start_loc[5] = 10: request 4 has query_len 1 after padded request 3 "
                   "(query_len 0); padded requests come after every real request");
    /* every request padding */
    fixture_init(&pf);
    f->qsl[1] = f->qsl[2] = f->qsl[3] = 0;
    f->sl[0] = f->sl[1] = f->sl[2] = 0;
    f->b.num_tokens = 0;
    EXPECT_FAIL(f, "every request is padding (query_len 0)");
    /* common_prefix_len is bounded by the real requests only */
    fixture_init(&pf);
    pad_to_five(f, 0);
    f->b.common_prefix_len = 4;
    EXPECT_OK(f);
}

int main(void)
{
    test_good();
    test_counts();
    test_lengths();
    test_block_table();
    test_slots();
    test_padding();
    test_abi21_fields();
    return check_report("test_batch_validate");
}
