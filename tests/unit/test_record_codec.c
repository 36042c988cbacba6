/*
 * The scan record codec: round trips of every kind of record, then hostile
 * input: every truncation, every single-byte corruption, random garbage,
 * hand-made lies (huge counts, NUL inside strings, bad enums, trailing
 * bytes), and allocation failure at every step. Whatever the bytes, decode
 * must give a valid record or a reason, never a crash or a leak (run under
 * valgrind or ASan to see the latter).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "scan_int.h"

static const uint32_t heads[] = {64, 128, 256};
static const char *const gfx[] = {"gfx90a", "gfx942"};
static const ah_config_key keys[] = {AH_KEY_INT_ROW("threads", "0", -3, 64, "worker threads"),
                                     AH_KEY_ENUM_ROW("mode", "b", "a|b", NULL)};

static ah_plugin_rec *make_accepted(void)
{
    ah_plugin_rec *r = ah__rec_new();
    ah_caps c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    c.q_dtypes = AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_BF16);
    c.kv_dtypes = AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_FP8_E5M2);
    c.qk_head_sizes = (ah_int_set)AH_INT_SET_LIST(heads);
    c.v_head_sizes = (ah_int_set)AH_INT_SET_LIST_AND_RANGE(heads, 8, 512, 8);
    c.block_sizes = (ah_int_set)AH_INT_SET_RANGE(16, 4096, 16);
    c.preferred_block_size = 32;
    c.features = AH_FEAT_MLA | AH_FEAT_LSE;
    c.attn_types = AH_BIT(AH_ATTN_DECODER);
    c.kv_layouts = AH_BIT(AH_KV_LAYOUT_HND);
    c.preferred_kv_layout = AH_KV_LAYOUT_HND;
    c.min_compute_capability = 80;
    c.gfx_targets = gfx;
    c.n_gfx_targets = 2;
    c.cpu_isa_required = AH_ISA_AVX512F;
    c.graph_level = AH_GRAPH_ALWAYS;
    c.graph_seq_len_fill = -1;
    c.forward_writes_kv = 1;
    c.caller_output = 1;
    c.max_head_groups = 16;
    c.config_keys = keys;
    c.n_config_keys = 2;
    c.prefill_rank = 300;
    c.decode_rank = 17;
    c.mixed_batch = AH_MIXED_SPLIT;
    c.decode_query_len_max = 4;
    CHECK(ah__rec_set(r, &r->info.path, "/opt/p/fa.so") == 0);
    CHECK(ah__rec_set(r, &r->info.name, "fa") == 0);
    CHECK(ah__rec_set(r, &r->info.version, "3.1") == 0);
    CHECK(ah__rec_set(r, &r->info.vendor, "Acme") == 0);
    CHECK(ah__rec_set(r, &r->info.reason, "") == 0);
    CHECK(ah__rec_set_caps(r, &c) == 0);
    r->info.device_kind = AH_DEVICE_CUDA;
    r->info.state = AH_PLUGIN_AVAILABLE;
    r->info.has_check_combination = 1;
    r->info.scan_ms = 12.5;
    r->probe.struct_size = sizeof r->probe;
    r->probe.usable = 1;
    snprintf(r->probe.device_name, sizeof r->probe.device_name, "NVIDIA H100 80GB HBM3");
    snprintf(r->probe.arch, sizeof r->probe.arch, "sm_90");
    snprintf(r->probe.driver_version, sizeof r->probe.driver_version, "580.65");
    r->probe.compute_capability = 90;
    r->probe.device_count = 8;
    r->probe.multiprocessors = 132;
    r->probe.memory_bytes = 85899345920ull;
    r->info.probe = &r->probe;
    r->dev = 2049;
    r->ino = 123456789;
    r->size = 4096000;
    r->mtime_ns = 1700000000123456789ll;
    r->ctime_ns = 1700000000987654321ll;
    r->content_hash = 0xfedcba9876543210ull;
    return r;
}

static ah_plugin_rec *make_quarantined(void)
{
    ah_plugin_rec *r = ah__rec_new();
    char reason[3000];
    memset(reason, 'r', sizeof reason - 1);
    reason[sizeof reason - 1] = '\0';
    CHECK(ah__rec_set(r, &r->info.path, "/opt/p/bad.so") == 0);
    CHECK(ah__rec_set(r, &r->info.name, "bad") == 0);
    CHECK(ah__rec_set(r, &r->info.reason, reason) == 0);
    r->info.state = AH_PLUGIN_QUARANTINED;
    return r;
}

static void encode(const ah_plugin_rec *r, ah_buf *b)
{
    memset(b, 0, sizeof *b);
    ah__rec_encode(r, b);
    CHECK(!b->oom && b->len > 12);
}

static int streq_null(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void check_same(const ah_plugin_rec *a, const ah_plugin_rec *b)
{
    CHECK(streq_null(a->info.path, b->info.path) && streq_null(a->info.name, b->info.name));
    CHECK(streq_null(a->info.version, b->info.version) &&
          streq_null(a->info.vendor, b->info.vendor) &&
          streq_null(a->info.license, b->info.license) &&
          streq_null(a->info.description, b->info.description));
    CHECK(streq_null(a->info.reason, b->info.reason));
    CHECK(a->info.state == b->info.state && a->info.device_kind == b->info.device_kind);
    CHECK(a->info.has_check_combination == b->info.has_check_combination);
    CHECK(a->info.scan_ms == b->info.scan_ms);
    CHECK(a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
          a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns &&
          a->content_hash == b->content_hash);
    CHECK((a->info.caps != NULL) == (b->info.caps != NULL));
    CHECK((a->info.probe != NULL) == (b->info.probe != NULL));
    if (b->info.caps) {
        CHECK(b->info.caps == &b->caps);
        ah_buf x = {0}, y = {0};
        ah__caps_encode(&a->caps, &x);
        ah__caps_encode(&b->caps, &y);
        CHECK(x.len == y.len && memcmp(x.p, y.p, x.len) == 0);
        ah__buf_free(&x);
        ah__buf_free(&y);
        CHECK(b->caps.struct_size == sizeof b->caps && b->caps.check_combination == NULL);
    }
    if (b->info.probe) {
        CHECK(b->info.probe == &b->probe);
        CHECK(memcmp(&a->probe, &b->probe, sizeof a->probe) == 0);
    }
}

static void test_round_trip(void)
{
    ah_plugin_rec *recs[] = {make_accepted(), make_quarantined()};
    for (int i = 0; i < 2; i++) {
        ah_buf b;
        encode(recs[i], &b);
        CHECK(ah__rec_encoded_size(b.p, b.len) == b.len);
        ah_plugin_rec *d = NULL;
        char why[512];
        CHECK_MSG(ah__rec_decode(b.p, b.len, &d, why, sizeof why) == 0, "%s", why);
        if (d) check_same(recs[i], d);
        ah__rec_free(d);
        ah_plugin_rec *dup = ah__rec_dup(recs[i]);
        CHECK(dup != NULL);
        if (dup) check_same(recs[i], dup);
        ah__rec_free(dup);
        ah__buf_free(&b);
    }
    /* Spot-check a few decoded values by hand, not only through the codec. */
    ah_plugin_rec *d = ah__rec_dup(recs[0]);
    if (d) {
        CHECK(d->caps.v_head_sizes.n_values == 3 && d->caps.v_head_sizes.values[2] == 256 &&
              d->caps.v_head_sizes.range_max == 512);
        CHECK(strcmp(d->caps.gfx_targets[1], "gfx942") == 0);
        CHECK(strcmp(d->caps.config_keys[1].choices, "a|b") == 0 &&
              d->caps.config_keys[1].doc == NULL);
        CHECK(d->caps.config_keys[1].type == AH_KEY_ENUM &&
              d->caps.config_keys[0].type == AH_KEY_INT);
        CHECK(d->caps.config_keys[0].int_min == -3 && d->caps.config_keys[0].int_max == 64);
        CHECK(strcmp(d->caps.config_keys[0].doc, "worker threads") == 0);
        CHECK(d->caps.prefill_rank == 300 && d->caps.decode_rank == 17);
        CHECK(d->caps.mixed_batch == AH_MIXED_SPLIT && d->caps.decode_query_len_max == 4);
        CHECK(d->caps.graph_seq_len_fill == -1 && d->probe.memory_bytes == 85899345920ull);
        CHECK(d->mtime_ns == 1700000000123456789ll);
        CHECK(d->ctime_ns == 1700000000987654321ll);
    }
    ah__rec_free(d);
    ah__rec_free(recs[0]);
    ah__rec_free(recs[1]);
}

static int decode_ok(const uint8_t *p, size_t n)
{
    ah_plugin_rec *d = NULL;
    char why[512];
    int rc = ah__rec_decode(p, n, &d, why, sizeof why);
    CHECK((rc == 0) == (d != NULL));
    CHECK(rc == 0 || why[0] != '\0');
    if (d) {
        /* Anything accepted is a sound record: re-encoding and decoding
         * it gives the same bytes back. */
        ah_buf b = {0};
        ah__rec_encode(d, &b);
        ah_plugin_rec *e = NULL;
        CHECK(!b.oom && ah__rec_decode(b.p, b.len, &e, why, sizeof why) == 0);
        if (e) check_same(d, e);
        ah__rec_free(e);
        ah__buf_free(&b);
    }
    ah__rec_free(d);
    return rc == 0;
}

static void test_truncation_and_corruption(void)
{
    ah_plugin_rec *r = make_accepted();
    ah_buf b;
    encode(r, &b);
    /* Every prefix is refused. */
    int accepted = 0;
    for (size_t n = 0; n < b.len; n++) accepted += decode_ok(b.p, n);
    CHECK(accepted == 0);
    /* A prefix with a patched length is refused too (fields run out). */
    uint8_t *copy = malloc(b.len + 16);
    for (size_t n = 12; n < b.len; n += 7) {
        memcpy(copy, b.p, n);
        uint32_t body = (uint32_t)(n - 12);
        copy[8] = (uint8_t)body;
        copy[9] = (uint8_t)(body >> 8);
        copy[10] = (uint8_t)(body >> 16);
        copy[11] = (uint8_t)(body >> 24);
        CHECK_MSG(!decode_ok(copy, n), "prefix %zu with patched length accepted", n);
    }
    /* Every byte, flipped in several ways: decoded or refused, never more. */
    for (size_t i = 0; i < b.len; i++)
        for (int k = 0; k < 3; k++) {
            static const uint8_t flips[] = {0x01, 0x80, 0xff};
            memcpy(copy, b.p, b.len);
            copy[i] ^= flips[k];
            (void)decode_ok(copy, b.len);
        }
    /* Trailing bytes. */
    memcpy(copy, b.p, b.len);
    copy[b.len] = 0;
    CHECK(!decode_ok(copy, b.len + 1));
    free(copy);
    ah__buf_free(&b);
    ah__rec_free(r);
}

static void test_garbage(void)
{
    uint8_t buf[4096];
    srand(12345);
    for (int round = 0; round < 20000; round++) {
        size_t n = (size_t)(rand() % (int)sizeof buf);
        for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)rand();
        /* Half the time give it a valid header so the body parser is hit. */
        if (round & 1 && n >= 12) {
            memcpy(buf, "AHRC\x01\x00\x00\x00", 8);
            uint32_t body = (uint32_t)(n - 12);
            memcpy(buf + 8, &body, 4);
        }
        CHECK(!decode_ok(buf, n));
    }
    CHECK(!decode_ok(NULL, 0));
}

/* Hand-made lies, each refused with a reason naming what is wrong. */
static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void expect_refused(const uint8_t *p, size_t n, const char *text)
{
    ah_plugin_rec *d = NULL;
    char why[512] = "";
    CHECK(ah__rec_decode(p, n, &d, why, sizeof why) == -1 && d == NULL);
    CHECK_CONTAINS(why, text);
}

static void test_lies(void)
{
    ah_plugin_rec *r = make_quarantined();
    ah_buf b;
    encode(r, &b);
    uint8_t *c = malloc(b.len);

    memcpy(c, b.p, b.len);
    c[0] = 'X';
    expect_refused(c, b.len, "bad magic");
    memcpy(c, b.p, b.len);
    c[4] = 3;
    expect_refused(c, b.len, "scan record version 3, this host reads version 2");
    memcpy(c, b.p, b.len);
    put32(c + 8, (uint32_t)b.len); /* claims more than there is */
    expect_refused(c, b.len, "length mismatch");
    /* The path string claims 4 GiB - 2 bytes. */
    memcpy(c, b.p, b.len);
    put32(c + 12, 0xfffffffeu);
    expect_refused(c, b.len, "field 'path'");
    /* A NUL inside the path. */
    memcpy(c, b.p, b.len);
    c[16 + 3] = '\0';
    expect_refused(c, b.len, "field 'path'");
    /* The name may not be NULL. */
    ah_plugin_rec *nameless = make_quarantined();
    ah__rec_set(nameless, &nameless->info.name, NULL);
    ah_buf nb;
    encode(nameless, &nb);
    expect_refused(nb.p, nb.len, "field 'name'");
    ah__buf_free(&nb);
    ah__rec_free(nameless);
    /* A quarantined record that claims caps. */
    ah_plugin_rec *liar = make_accepted();
    liar->info.state = AH_PLUGIN_QUARANTINED;
    ah_buf lb;
    encode(liar, &lb);
    expect_refused(lb.p, lb.len, "state does not match");
    ah__buf_free(&lb);
    /* Available while the probe says not usable. */
    liar->info.state = AH_PLUGIN_AVAILABLE;
    liar->probe.usable = 0;
    encode(liar, &lb);
    expect_refused(lb.p, lb.len, "state does not match probe.usable");
    ah__buf_free(&lb);
    /* Caps a live descriptor could not have passed with. */
    liar->probe.usable = 1;
    liar->caps.preferred_block_size = 17;
    encode(liar, &lb);
    expect_refused(lb.p, lb.len, "invalid caps: caps.preferred_block_size 17");
    ah__buf_free(&lb);
    liar->caps.preferred_block_size = 32;
    liar->info.state = (ah_plugin_state)7;
    encode(liar, &lb);
    expect_refused(lb.p, lb.len, "field 'state'");
    ah__buf_free(&lb);
    ah__rec_free(liar);
    free(c);
    ah__buf_free(&b);
    ah__rec_free(r);
}

/* Every allocation of a decode and of a deep copy may fail: the result is
 * a clean refusal, and nothing leaks. */
static void test_alloc_failure(void)
{
    ah_plugin_rec *r = make_accepted();
    ah_buf b;
    encode(r, &b);
    int succeeded = 0;
    for (long n = 1; n < 200 && !succeeded; n++) {
        ah_plugin_rec *d = NULL;
        char why[512];
        ah__fault_inject_after(n);
        int rc = ah__rec_decode(b.p, b.len, &d, why, sizeof why);
        ah__fault_inject_after(0);
        if (rc == 0) {
            succeeded = 1;
            check_same(r, d);
        } else {
            CHECK_STREQ(why, "out of memory");
        }
        ah__rec_free(d);
    }
    CHECK(succeeded);
    for (long n = 1; n < 200; n++) {
        ah_buf e = {0};
        ah__fault_inject_after(n);
        ah__rec_encode(r, &e);
        ah__fault_inject_after(0);
        int failed = e.oom;
        CHECK(failed || e.len == b.len);
        ah__buf_free(&e);
        if (!failed) break;
    }
    ah__buf_free(&b);
    ah__rec_free(r);
}

/* The scan request a spawned scanner reads: round trip, then every
 * truncation and every single-byte corruption gives a request or a reason. */
static void test_scan_request(void)
{
    ah_plugin_kv kv[] = {{"cpu_amx", "threads", "4", 7}, {"cuda_fa3", "mode", "", 9}};
    ah_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.plugin_keys = kv;
    cfg.n_plugin_keys = 2;
    ah_hw_facts hw;
    memset(&hw, 0, sizeof hw);
    hw.struct_size = sizeof hw;
    hw.cpu_isa = AH_ISA_AVX2 | AH_ISA_AMX_TILE;
    hw.cpu_isa_cpuid = hw.cpu_isa | AH_ISA_AVX512F;
    hw.cpu_logical_cores = 96;
    hw.memory_bytes = 1ull << 40;
    memcpy(hw.cpu_vendor, "GenuineIntel", 13);
    memset(hw.cpu_model, 'm', sizeof hw.cpu_model); /* no NUL: sent cut to fit one */
    snprintf(hw.amx_note, sizeof hw.amx_note, "granted");
    ah_buf b = {0};
    ah__scan_req_encode(&cfg, &hw, &b);
    CHECK(!b.oom);
    ah_config got;
    ah_hw_facts ghw;
    char why[512];
    hw.cpu_model[sizeof hw.cpu_model - 1] = '\0';
    CHECK_MSG(ah__scan_req_decode(b.p, b.len, &got, &ghw, why, sizeof why) == 0, "%s", why);
    CHECK(memcmp(&ghw, &hw, sizeof hw) == 0);
    CHECK(got.n_plugin_keys == 2);
    if (got.n_plugin_keys == 2) {
        CHECK_STREQ(got.plugin_keys[1].plugin, "cuda_fa3");
        CHECK_STREQ(got.plugin_keys[1].value, "");
        CHECK(got.plugin_keys[0].line == 7);
        CHECK_STREQ(ah__config_plugin_key(&got, "cpu_amx", "threads"), "4");
    }
    ah__config_free(&got);
    for (size_t n = 0; n < b.len; n++) {
        CHECK_MSG(ah__scan_req_decode(b.p, n, &got, &ghw, why, sizeof why) != 0 && why[0],
                  "truncated to %zu", n);
        CHECK(got.plugin_keys == NULL && got.n_plugin_keys == 0);
    }
    for (size_t i = 0; i < b.len; i++) {
        b.p[i] ^= 0xa5;
        if (ah__scan_req_decode(b.p, b.len, &got, &ghw, why, sizeof why) == 0)
            ah__config_free(&got);
        b.p[i] ^= 0xa5;
    }
    ah__buf_free(&b);
}

int main(void)
{
    test_round_trip();
    test_truncation_and_corruption();
    test_garbage();
    test_lies();
    test_alloc_failure();
    test_scan_request();
    return check_report("test_record_codec");
}
