/*
 * ah__descriptor_validate: one case per rule. Each starts from a valid
 * descriptor, breaks one thing, and checks that the reason names it; the
 * struct-size cases check that older (smaller, but not below the ABI 1.0
 * minimum) and newer (larger) tables are accepted.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "scan_int.h"

/* Never called: validation only looks at whether a slot is NULL. */
static void dummy(void) {}

static void set_slot(ah_plugin_ops *o, size_t off, int on)
{
    void (*f)(void) = on ? dummy : NULL;
    memcpy((char *)o + off, &f, sizeof f);
}

#define SLOT(name) offsetof(ah_plugin_ops, name)

static const size_t required[] = {SLOT(probe),         SLOT(context_create), SLOT(context_destroy),
                                  SLOT(context_error), SLOT(state_create),   SLOT(state_destroy),
                                  SLOT(state_error),   SLOT(plan),           SLOT(forward)};
static const char *const required_names[] = {"probe",         "context_create", "context_destroy",
                                             "context_error", "state_create",   "state_destroy",
                                             "state_error",   "plan",           "forward"};
static const size_t mem[] = {SLOT(mem_alloc),   SLOT(mem_free),      SLOT(mem_copy),
                             SLOT(synchronize), SLOT(stream_create), SLOT(stream_destroy)};
static const size_t graph[] = {SLOT(graph_begin), SLOT(graph_end), SLOT(graph_launch),
                               SLOT(graph_destroy)};

static const uint32_t head_list[] = {64, 128};
static const uint32_t block_list[] = {16, 32};
static const char *const gfx[] = {"gfx942"};
static const ah_config_key keys[] = {AH_KEY_INT_ROW("threads", "0", 0, 64, "worker threads")};

static ah_caps caps;
static ah_plugin_ops ops;
static ah_plugin_descriptor desc;

static void reset(void)
{
    memset(&caps, 0, sizeof caps);
    caps.struct_size = sizeof caps;
    caps.q_dtypes = AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_BF16);
    caps.kv_dtypes = AH_BIT(AH_DTYPE_FP16) | AH_BIT(AH_DTYPE_FP8_E4M3);
    caps.qk_head_sizes = (ah_int_set)AH_INT_SET_LIST(head_list);
    caps.v_head_sizes = (ah_int_set)AH_INT_SET_RANGE(32, 256, 32);
    caps.block_sizes = (ah_int_set)AH_INT_SET_LIST_AND_RANGE(block_list, 64, 1024, 64);
    caps.preferred_block_size = 16;
    caps.features = AH_FEAT_SLIDING_WINDOW | AH_FEAT_DIFF_HEAD_SIZES;
    caps.attn_types = AH_BIT(AH_ATTN_DECODER) | AH_BIT(AH_ATTN_ENCODER_ONLY);
    caps.kv_layouts = AH_BIT(AH_KV_LAYOUT_NHD) | AH_BIT(AH_KV_LAYOUT_HND);
    caps.preferred_kv_layout = AH_KV_LAYOUT_HND;
    caps.min_compute_capability = 80;
    caps.max_compute_capability = 90;
    caps.gfx_targets = gfx;
    caps.n_gfx_targets = 1;
    caps.cpu_isa_required = AH_ISA_AVX2;
    caps.graph_level = AH_GRAPH_UNIFORM_BATCH;
    caps.config_keys = keys;
    caps.n_config_keys = 1;
    memset(&ops, 0, sizeof ops);
    ops.struct_size = sizeof ops;
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        set_slot(&ops, required[i], 1);
    set_slot(&ops, SLOT(write_kv), 1);
    for (size_t i = 0; i < sizeof mem / sizeof mem[0]; i++) set_slot(&ops, mem[i], 1);
    for (size_t i = 0; i < sizeof graph / sizeof graph[0]; i++) set_slot(&ops, graph[i], 1);
    desc = (ah_plugin_descriptor){sizeof desc, AH_ABI_VERSION, "cuda_test", "1.0", "v", "MIT",
                                  "d",         AH_DEVICE_CUDA, &caps,       &ops};
}

static char why[512];

static int validate(void)
{
    why[0] = '\0';
    return ah__descriptor_validate(&desc, why, sizeof why);
}

/* Break something with STMT; expect a refusal whose reason contains TEXT. */
#define REFUSED(STMT, TEXT) \
    do { \
        reset(); \
        STMT; \
        CHECK_MSG(validate() == -1, "accepted after: %s", #STMT); \
        CHECK_CONTAINS(why, TEXT); \
    } while (0)

#define ACCEPTED(STMT) \
    do { \
        reset(); \
        STMT; \
        CHECK_MSG(validate() == 0, "refused after %s: %s", #STMT, why); \
    } while (0)

static void test_top_level(void)
{
    ACCEPTED((void)0);
    CHECK(ah__descriptor_validate(NULL, why, sizeof why) == -1);
    CHECK_CONTAINS(why, "NULL descriptor");
    REFUSED(desc.struct_size = (uint32_t)AH__DESC_MIN_SIZE - 1, "descriptor struct_size");
    REFUSED(desc.struct_size = 8, "smaller than the ABI 1.0 minimum");
    REFUSED(desc.abi_version = 1u << 16, "plugin ABI 1.0, host ABI " HOST_ABI);
    REFUSED(desc.abi_version = 3u << 16, "plugin ABI 3.0, host ABI " HOST_ABI);
    REFUSED(desc.abi_version = 0, "plugin ABI 0.0, host ABI " HOST_ABI);
    ACCEPTED(desc.abi_version = AH_ABI_VERSION | 9u); /* newer minor */
    REFUSED(desc.name = NULL, "descriptor name is NULL");
    REFUSED(desc.name = "", "descriptor name '' is not [a-z0-9_]{1,63}");
    REFUSED(desc.name = "Flash-Attn", "'Flash-Attn' is not");
    REFUSED(desc.name = "a b", "is not [a-z0-9_]");
    REFUSED(desc.name = "0123456789012345678901234567890123456789012345678901234567890123",
            "is not [a-z0-9_]{1,63}");
    ACCEPTED(desc.name = "012345678901234567890123456789012345678901234567890123456789012");
    ACCEPTED(desc.version = NULL; desc.vendor = NULL; desc.license = NULL; desc.description = NULL);
    REFUSED(desc.device_kind = AH_DEVICE_KIND_COUNT, "device_kind 4 is out of range");
    REFUSED(desc.device_kind = (ah_device_kind)-1, "device_kind -1 is out of range");
    REFUSED(desc.caps = NULL, "caps is NULL");
    REFUSED(desc.ops = NULL, "ops is NULL");
}

static void test_sizes(void)
{
    REFUSED(caps.struct_size = (uint32_t)AH__CAPS_MIN_SIZE - 4, "caps struct_size");
    REFUSED(ops.struct_size = (uint32_t)AH__OPS_MIN_SIZE - 8, "ops struct_size");
    /* Older tables: the optional tail is cut off and with it the graph
     * level, so the graph slots are no longer needed. */
    ACCEPTED(caps.struct_size = (uint32_t)AH__CAPS_MIN_SIZE);
    ACCEPTED(ops.struct_size = (uint32_t)AH__OPS_MIN_SIZE; caps.forward_writes_kv = 1;
             caps.graph_level = AH_GRAPH_NEVER);
    /* Cut ops short of write_kv: forward must store KV itself. */
    REFUSED(ops.struct_size = (uint32_t)AH__OPS_MIN_SIZE;
            caps.graph_level = AH_GRAPH_NEVER,
            "ops.write_kv is NULL while caps.forward_writes_kv is 0");
    /* Cut ops short of the graph slots while caps claims graphs. */
    REFUSED(ops.struct_size = (uint32_t)offsetof(ah_plugin_ops, graph_begin),
            "caps.graph_level is 2 but ops.graph_begin is NULL");
    /* Caps cut before graph_level: the nonsense value there is unseen. */
    ACCEPTED(caps.struct_size = (uint32_t)offsetof(ah_caps, graph_level);
             caps.graph_level = (ah_graph_level)77);
    /* Newer: bigger than this host knows. */
    static struct {
        ah_caps c;
        uint64_t extra[4];
    } big_caps;
    static struct {
        ah_plugin_ops o;
        void *extra[4];
    } big_ops;
    static struct {
        ah_plugin_descriptor d;
        const char *extra;
    } big_desc;
    reset();
    big_caps.c = caps;
    big_caps.c.struct_size = sizeof big_caps;
    big_ops.o = ops;
    big_ops.o.struct_size = sizeof big_ops;
    big_desc.d = desc;
    big_desc.d.struct_size = sizeof big_desc;
    big_desc.d.caps = &big_caps.c;
    big_desc.d.ops = &big_ops.o;
    CHECK(ah__descriptor_validate(&big_desc.d, why, sizeof why) == 0);
    /* Int sets must carry their ABI 1.0 size. */
    REFUSED(caps.block_sizes.struct_size = 0, "caps.block_sizes.struct_size 0 is smaller");
}

static void test_slots(void)
{
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        reset();
        set_slot(&ops, required[i], 0);
        CHECK(validate() == -1);
        char expect[64];
        snprintf(expect, sizeof expect, "required slot ops.%s is NULL", required_names[i]);
        CHECK_CONTAINS(why, expect);
    }
    REFUSED(ops.write_kv = NULL, "ops.write_kv is NULL while caps.forward_writes_kv is 0");
    ACCEPTED(ops.write_kv = NULL; caps.forward_writes_kv = 1);
    REFUSED(ops.mem_copy = NULL, "ops.mem_copy is NULL but other device-memory slots are set");
    ACCEPTED(for (size_t i = 0; i < 6; i++) set_slot(&ops, mem[i], 0);
             for (size_t i = 0; i < 4; i++) set_slot(&ops, graph[i], 0);
             caps.graph_level = AH_GRAPH_NEVER);
    REFUSED(for (size_t i = 0; i < 6; i++) set_slot(&ops, mem[i], 0),
            "caps.graph_level is 2 but ops.mem_alloc is NULL");
    REFUSED(ops.graph_launch = NULL, "caps.graph_level is 2 but ops.graph_launch is NULL");
    REFUSED(set_slot(&ops, SLOT(timer_start), 1), "ops.timer_stop is NULL but the other timer");
    ACCEPTED(set_slot(&ops, SLOT(timer_start), 1); set_slot(&ops, SLOT(timer_stop), 1));
    ACCEPTED(ops.merge_states = NULL; ops.workspace_size = NULL);
}

static void test_caps(void)
{
    static const uint32_t with_zero[] = {0, 64};
    REFUSED(caps.q_dtypes = 0, "caps.q_dtypes is empty");
    REFUSED(caps.q_dtypes |= AH_BIT(AH_DTYPE_AUTO), "caps.q_dtypes 0xd has unknown bits 0x1");
    /* the first bit past the dtypes (bits 6 and 7, the fnuz FP8 types, are ABI 2.3's) */
    REFUSED(caps.q_dtypes |= AH_BIT(AH_DTYPE_COUNT),
            "caps.q_dtypes 0x10c has unknown bits 0x100 (known: fp32, fp16, bf16, fp8_e4m3, "
            "fp8_e5m2, fp8_e4m3fnuz, fp8_e5m2fnuz)");
    ACCEPTED(caps.kv_dtypes |= AH_BIT(AH_DTYPE_FP8_E4M3_FNUZ) | AH_BIT(AH_DTYPE_FP8_E5M2_FNUZ));
    REFUSED(caps.kv_dtypes |= 1u << 20, "caps.kv_dtypes 0x100014 has unknown bits 0x100000");
    REFUSED(caps.kv_dtypes = 0, "caps.kv_dtypes is empty");
    REFUSED(caps.qk_head_sizes = (ah_int_set)AH_INT_SET_RANGE(0, 0, 0),
            "caps.qk_head_sizes is empty");
    REFUSED(caps.v_head_sizes = (ah_int_set)AH_INT_SET_RANGE(0, 0, 0),
            "caps.v_head_sizes is empty");
    REFUSED(caps.v_head_sizes = (ah_int_set)AH_INT_SET_RANGE(256, 32, 32),
            "caps.v_head_sizes range 256..32 is empty");
    REFUSED(caps.qk_head_sizes.values = NULL,
            "caps.qk_head_sizes has n_values 2 but values is NULL");
    REFUSED(caps.qk_head_sizes = (ah_int_set)AH_INT_SET_LIST(with_zero),
            "caps.qk_head_sizes lists 0");
    REFUSED(caps.qk_head_sizes.n_values = 5000, "at most 4096");
    REFUSED(caps.block_sizes = (ah_int_set)AH_INT_SET_RANGE(0, 0, 0), "caps.block_sizes is empty");
    REFUSED(caps.preferred_block_size = 48,
            "caps.preferred_block_size 48 is not in caps.block_sizes");
    REFUSED(caps.preferred_block_size = 0, "caps.preferred_block_size 0");
    ACCEPTED(caps.preferred_block_size = 128); /* in the range part */
    REFUSED(caps.features = 1u << 20, "caps.features 0x100000 has unknown bits 0x100000");
    ACCEPTED(caps.features = (1u << AH_FEATURE_COUNT) - 1); /* through AH_FEAT_Q_SCALE (ABI 2.3) */
    REFUSED(caps.features = AH_FEAT_KV_SCALE_PER_HEAD,
            "caps.features 0x20000 claims kv_scale_per_head without scale_tensors");
    ACCEPTED(caps.features = AH_FEAT_KV_SCALE_PER_HEAD | AH_FEAT_SCALE_TENSORS);
    REFUSED(caps.attn_types = 0, "caps.attn_types is empty");
    REFUSED(caps.attn_types = 1u << 4, "caps.attn_types 0x10 has unknown bits 0x10");
    REFUSED(caps.kv_layouts = 0, "caps.kv_layouts is empty");
    REFUSED(caps.kv_layouts = AH_BIT(AH_KV_LAYOUT_AUTO) | AH_BIT(AH_KV_LAYOUT_NHD),
            "caps.kv_layouts 0x3 has unknown bits");
    REFUSED(caps.kv_layouts = AH_BIT(AH_KV_LAYOUT_NHD),
            "caps.preferred_kv_layout 2 is not in caps.kv_layouts 0x2");
    REFUSED(caps.preferred_kv_layout = AH_KV_LAYOUT_AUTO, "caps.preferred_kv_layout 0");
    REFUSED(caps.preferred_kv_layout = (ah_kv_layout)9, "caps.preferred_kv_layout 9");
    REFUSED(caps.min_compute_capability = 100, "compute-capability range 100..90 is empty");
    ACCEPTED(caps.min_compute_capability = 100; caps.max_compute_capability = 0);
    REFUSED(caps.gfx_targets = NULL, "caps.n_gfx_targets is 1 but gfx_targets is NULL");
    static const char *const gfx_null[] = {NULL};
    REFUSED(caps.gfx_targets = gfx_null, "caps.gfx_targets[0] is NULL");
    REFUSED(caps.cpu_isa_required = 1u << 16, "caps.cpu_isa_required 0x10000 has unknown bits");
    REFUSED(caps.graph_level = AH_GRAPH_LEVEL_COUNT, "caps.graph_level 4 is out of range (0..3)");
    REFUSED(caps.graph_level = (ah_graph_level)-1, "caps.graph_level -1 is out of range");
    REFUSED(caps.forward_writes_kv = 2, "forward_writes_kv / caller_output must be 0 or 1");
    REFUSED(caps.caller_output = 5, "must be 0 or 1");
    REFUSED(caps.config_keys = NULL, "caps.n_config_keys is 1 but config_keys is NULL");
    static const ah_config_key nameless[] = {AH_KEY_BOOL_ROW(NULL, "true", "doc")};
    REFUSED(caps.config_keys = nameless, "caps.config_keys[0].name is NULL");
    static const ah_config_key docless[] = {AH_KEY_STRING_ROW("k", "", NULL)};
    ACCEPTED(caps.config_keys = docless);
    static const ah_config_key badname[] = {AH_KEY_STRING_ROW("Threads", "", NULL)};
    REFUSED(caps.config_keys = badname, "caps.config_keys[0].name 'Threads' is not [a-z0-9_]+");
    static const ah_config_key twice[] = {AH_KEY_BOOL_ROW("a", "true", NULL),
                                          AH_KEY_BOOL_ROW("a", "false", NULL)};
    REFUSED(caps.config_keys = twice;
            caps.n_config_keys = 2, "caps.config_keys: 'a' is declared twice");
    static const ah_config_key badtype[] = {{"a", (ah_key_type)9, "1", 0, 0, 0, 0, NULL, NULL}};
    REFUSED(caps.config_keys = badtype, "caps.config_keys 'a': type 9 is out of range (0..4)");
    static const ah_config_key empty_range[] = {AH_KEY_INT_ROW("n", "3", 5, 1, NULL)};
    REFUSED(caps.config_keys = empty_range, "caps.config_keys 'n': int range 5..1 is empty");
    static const ah_config_key nan_range[] = {AH_KEY_FLOAT_ROW("x", "1", 0.0 / 0.0, 1, NULL)};
    REFUSED(caps.config_keys = nan_range, "caps.config_keys 'x': float range nan..1 is empty");
    static const ah_config_key no_choices[] = {AH_KEY_ENUM_ROW("m", "a", "", NULL)};
    REFUSED(caps.config_keys = no_choices, "caps.config_keys 'm': an enum key needs choices");
    static const ah_config_key no_default[] = {AH_KEY_BOOL_ROW("b", NULL, NULL)};
    REFUSED(caps.config_keys = no_default, "caps.config_keys 'b': default_value is NULL");
    static const ah_config_key bad_default[] = {AH_KEY_INT_ROW("n", "65", 0, 64, NULL)};
    REFUSED(caps.config_keys = bad_default,
            "caps.config_keys 'n': default '65' is not an integer in 0..64");
    static const ah_config_key bad_choice[] = {AH_KEY_ENUM_ROW("m", "c", "a|b", NULL)};
    REFUSED(caps.config_keys = bad_choice, "default 'c' is not one of a|b");
    REFUSED(caps.mixed_batch = AH_MIXED_BATCH_COUNT, "caps.mixed_batch 2 is out of range (0..1)");
    ACCEPTED(caps.check_combination = NULL; caps.n_config_keys = 0; caps.config_keys = NULL);
}

/* Normalization copies exactly struct_size bytes and zeroes the rest. */
static void test_normalize(void)
{
    reset();
    ah_caps small = caps;
    small.struct_size = (uint32_t)offsetof(ah_caps, min_compute_capability);
    ah_caps n;
    ah__caps_normalize(&n, &small);
    CHECK(n.struct_size == sizeof n);
    CHECK(n.preferred_kv_layout == AH_KV_LAYOUT_HND);
    CHECK(n.min_compute_capability == 0 && n.n_gfx_targets == 0 && n.config_keys == NULL &&
          n.graph_level == AH_GRAPH_NEVER);
    ah_plugin_ops so = ops, no;
    so.struct_size = (uint32_t)offsetof(ah_plugin_ops, merge_states);
    ah__ops_normalize(&no, &so);
    CHECK(no.struct_size == sizeof no && no.write_kv != NULL && no.merge_states == NULL &&
          no.mem_alloc == NULL && no.graph_destroy == NULL);
}

int main(void)
{
    test_top_level();
    test_sizes();
    test_slots();
    test_caps();
    test_normalize();
    return check_report("test_descriptor");
}
