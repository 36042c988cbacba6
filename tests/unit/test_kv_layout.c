/*
 * ABI 2.3, KV-cache layout: the kernel-block table translation (released
 * entries stay released, rows never overrun the binding's buffer),
 * `block_size = auto` (parsed, written back, built from C; resolved per
 * KV-cache group on the selection test plugins, falling back to the next
 * layer's winner and refused naming the sizes tried), the interleaved
 * layout's cache description on cpu_amx (and its struct_size guard), and
 * the block sizes a binding reports when it runs a plugin on kernel
 * blocks. The layouts' and kernel blocks' results against the oracle are
 * the conformance suite's (layout and kernel-blk cases).
 */
#include <stdlib.h>
#include <string.h>

#include <attnhost/attnhost.h>

#include "binding_env.h"
#include "check.h"
#include "kv_split.h"
#include "scan.h"

/* ---- the kernel-block table ---------------------------------------------- */

static void test_split_table(void)
{
    /* cache blocks of 12 as 3 kernel blocks of 4 */
    const int32_t qsl[3] = {0, 1, 3}, seq[2] = {13, 30};
    const int32_t table[2 * 4] = {5,  2, 0, 0,  /* request 0: 13 tokens, 2 blocks */
                                  -1, 7, 1, 0}; /* request 1: 30 tokens, 3, first released */
    ah_batch b = {.struct_size = sizeof b,
                  .num_reqs = 2,
                  .num_tokens = 3,
                  .num_blocks = 8,
                  .query_start_loc_host = qsl,
                  .seq_lens_host = seq,
                  .block_table_host = table,
                  .block_table_stride = 4};
    int32_t out[2 * 4 * 3];
    for (size_t i = 0; i < sizeof out / sizeof *out; i++) out[i] = 999;
    uint32_t stride = 0;
    char err[256] = "";
    CHECK_MSG(ah__kv_split_table(&b, 12, 3, 2, 4, 0, out, &stride, err, sizeof err) == AH_OK, "%s",
              err);
    CHECK(stride == 9); /* the widest row: 3 cache blocks */
    const int32_t want0[6] = {15, 16, 17, 6, 7, 8}, want1[9] = {-1, -1, -1, 21, 22, 23, 3, 4, 5};
    CHECK(!memcmp(out, want0, sizeof want0) && out[6] == 999); /* the rest of the row untouched */
    CHECK(!memcmp(out + 9, want1, sizeof want1));
    /* m a multiple of four (the vector path): blocks of 16 as 8 of 2 */
    int32_t out8[2 * 4 * 8];
    for (size_t i = 0; i < sizeof out8 / sizeof *out8; i++) out8[i] = 999;
    CHECK(ah__kv_split_table(&b, 16, 8, 2, 4, 0, out8, &stride, err, sizeof err) == AH_OK &&
          stride == 16);
    for (int j = 0; j < 8; j++) {
        CHECK(out8[j] == 40 + j && out8[8 + j] == 999);      /* request 0: block 5 (13 tokens) */
        CHECK(out8[16 + j] == -1 && out8[24 + j] == 56 + j); /* request 1: released, 7 */
    }
    /* a captured graph keeps the limits' width */
    CHECK(ah__kv_split_table(&b, 12, 3, 2, 4, 1, out, &stride, err, sizeof err) == AH_OK &&
          stride == 12 && out[12] == -1 && out[15] == 21);
    /* a row needing more blocks than the limits allow is refused before
     * anything is written past the buffer, validation or not */
    CHECK(ah__kv_split_table(&b, 12, 3, 2, 2, 0, out, &stride, err, sizeof err) ==
          AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err, "request 1 needs 3 blocks of 12 tokens, but the block table rows hold 4 "
                        "and limits.max_blocks_per_req is 2");
    CHECK(ah__kv_split_table(&b, 12, 3, 1, 4, 0, out, &stride, err, sizeof err) ==
          AH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(err, "num_reqs = 2 exceeds limits.max_num_reqs 1");
    /* the kernel block: the largest member dividing the cache block */
    const ah_int_set s16 = AH_INT_SET_RANGE(16, 4096, 16);
    CHECK(ah__kernel_block(&s16, 8192) == 4096 && ah__kernel_block(&s16, 4112) == 16);
    CHECK(ah__kernel_block(&s16, 4104) == 0 && ah__kernel_block(&s16, 16) == 0);
}

/* ---- block_size = auto in a model ---------------------------------------- */

#define AUTO_MODEL \
    "[model]\nname = auto\nnum_layers = 2\nnum_q_heads = 4\nnum_kv_heads = 2\nhead_size = 64\n" \
    "dtype = fp32\nblock_size = auto\n"

static void test_auto_model(void)
{
    ah_model *m = NULL;
    ah_error err = {""};
    CHECK_MSG(ah_model_parse(AUTO_MODEL, "a.ini", &m, &err) == AH_OK, "%s", err.msg);
    if (!m) return;
    CHECK(ah_model_layer(m, 1)->block_size == AH_BLOCK_SIZE_AUTO);
    char *text = NULL;
    CHECK(ah_model_to_ini(m, &text) == AH_OK && text && strstr(text, "block_size = auto"));
    free(text);
    /* from C: AH_BLOCK_SIZE_AUTO is auto, 0 still 16 */
    ah_layer_spec specs[2] = {*ah_model_layer(m, 0), *ah_model_layer(m, 1)};
    ah_model_desc d = {sizeof d, "c", 2, specs, NULL, NULL};
    ah_model *c = NULL;
    CHECK_MSG(ah_model_create(&d, &c, &err) == AH_OK, "%s", err.msg);
    CHECK(c && ah_model_layer(c, 0)->block_size == AH_BLOCK_SIZE_AUTO);
    ah_model_destroy(c);
    specs[0].block_size = specs[1].block_size = 0;
    CHECK(ah_model_create(&d, &c, &err) == AH_OK && ah_model_layer(c, 0)->block_size == 16);
    ah_model_destroy(c);
    ah_model_destroy(m);
    /* one group, one block table: auto or a size for all of its layers */
    CHECK(ah_model_parse(AUTO_MODEL "[layers.1]\nblock_size = 16\n", "a.ini", &m, &err) ==
          AH_ERR_CONFIG);
    CHECK_CONTAINS(err.msg, "layers 0 and 1 are both in kv_group 0 but differ in block_size (auto "
                            "and 16)");
    CHECK(ah_model_parse(AUTO_MODEL "[layers.1]\nblock_size = often\n", "a.ini", &m, &err) ==
          AH_ERR_CONFIG);
    CHECK_CONTAINS(err.msg, "'often' is not a whole number");
}

/* ---- block_size = auto in selection ---------------------------------------- */

static ah_host *select_host(void)
{
    static const char *dirs[] = {ATTNHOST_SELECT_PLUGIN_DIR};
    ah_host_options o = {.struct_size = sizeof o,
                         .config_text = "[select]\nfallback = error\n"
                                        "[layer.0]\npriority = sel_beta\n"
                                        "[layer.1]\npriority = sel_alpha\n",
                         .plugin_dirs = dirs,
                         .n_plugin_dirs = 1,
                         .no_default_dirs = 1,
                         .cache_path = ""};
    ah_host *h = NULL;
    ah_error err;
    CHECK_MSG(ah_host_create(&o, &h, &err) == AH_OK, "%s", err.msg);
    return h;
}

/* Set a plugin's block sizes (range lo..hi) and preferred size as its scan
 * record claims them (what selection reads) and in its loaded copy (which
 * the host compares with the record when it loads the plugin for
 * check_combination), loading it first. */
static void set_block_sizes(ah_host *h, const char *name, uint32_t lo, uint32_t hi, uint32_t pref)
{
    const int i = ah__host_find(h, name);
    ah_caps *live = live_caps(h, name);
    CHECK(i >= 0 && live);
    if (i < 0 || !live) return;
    ah_caps *c[2] = {&h->scan.plugins[i]->caps, live};
    for (int k = 0; k < 2; k++) {
        c[k]->block_sizes.range_min = lo;
        c[k]->block_sizes.range_max = hi;
        c[k]->preferred_block_size = pref;
    }
}

static ah_selection *select_auto(ah_host *h, ah_status want, ah_error *err)
{
    ah_model *m = NULL;
    CHECK(ah_model_parse(AUTO_MODEL, "a.ini", &m, err) == AH_OK);
    ah_selection *sel = NULL;
    ah_status s = ah_host_select(h, m, &sel, err);
    CHECK_MSG(s == want, "status %d: %s", (int)s, err->msg);
    ah_model_destroy(m);
    return sel;
}

static void test_auto_select(void)
{
    ah_error err = {""};
    /* layer 0's winner sel_beta prefers 32, which sel_alpha (16..1024 step
     * 16) takes too: the group runs 32 */
    ah_host *h = select_host();
    if (!h) return;
    ah_selection *sel = select_auto(h, AH_OK, &err);
    const char *how = NULL;
    if (sel) {
        CHECK(ah_selection_kv_group_block_size(sel, 0, &how) == 32);
        CHECK_STREQ(how, "auto: the preferred size of layer 0's prefill winner sel_beta");
        for (uint32_t l = 0; l < 2; l++)
            for (int p = 0; p < AH_PHASE_COUNT; p++)
                CHECK(ah_selection_decision(sel, l, (ah_phase)p)->spec.block_size == 32);
        CHECK_STREQ(ah_selection_decision(sel, 1, AH_PHASE_PREFILL)->plugin, "sel_alpha");
        CHECK(ah_selection_kv_group_block_size(sel, 1, &how) == 0 && !strcmp(how, ""));
        ah_selection_destroy(sel);
    }
    ah_host_destroy(h);

    /* sel_beta prefers 24, which sel_alpha (now only 16) cannot run, even
     * on kernel blocks: the next layer's winner's 16 serves both */
    h = select_host();
    set_block_sizes(h, "sel_beta", 1, 1024, 24);
    set_block_sizes(h, "sel_alpha", 16, 16, 16);
    sel = select_auto(h, AH_OK, &err);
    if (sel) {
        CHECK(ah_selection_kv_group_block_size(sel, 0, &how) == 16);
        CHECK_STREQ(how, "auto: the preferred size of layer 1's prefill winner sel_alpha");
        CHECK(ah_selection_decision(sel, 0, AH_PHASE_DECODE)->spec.block_size == 16);
        ah_selection_destroy(sel);
    }
    ah_host_destroy(h);

    /* and with sel_beta taking only 24, no size serves both layers */
    h = select_host();
    set_block_sizes(h, "sel_beta", 24, 24, 24);
    set_block_sizes(h, "sel_alpha", 16, 16, 16);
    sel = select_auto(h, AH_ERR_NOT_FOUND, &err);
    CHECK(sel == NULL);
    CHECK_STREQ(err.msg, "kv_group 0: block_size = auto, but no block size serves every layer of "
                         "the group (they share one block table); tried 24 (layer 0's sel_beta; "
                         "layer 1 has no backend at it), 16 (layer 1's sel_alpha; layer 0 has no "
                         "backend at it): set block_size in the model");
    /* explain still shows each layer at its own winner's size */
    ah_model *m = NULL;
    CHECK(ah_model_parse(AUTO_MODEL, "a.ini", &m, &err) == AH_OK);
    CHECK(ah_host_explain(h, m, NULL, &sel, &err) == AH_ERR_NOT_FOUND && sel);
    if (sel) {
        CHECK(ah_selection_decision(sel, 0, AH_PHASE_PREFILL)->spec.block_size == 24);
        CHECK(ah_selection_decision(sel, 1, AH_PHASE_PREFILL)->spec.block_size == 16);
        CHECK(ah_selection_kv_group_block_size(sel, 0, NULL) == 0);
        ah_selection_destroy(sel);
    }
    ah_model_destroy(m);
    ah_host_destroy(h);
}

/* ---- on cpu_amx: the interleaved cache description, kernel blocks -------- */

static int amx_bind(const char *model, ah_host **h, ah_model **m, ah_selection **sel,
                    ah_binding **b)
{
    static const char *dirs[] = {ATTNHOST_BUILD_DIR "/lib/attnhost/plugins"};
    ah_host_options o = {.struct_size = sizeof o,
                         .plugin_dirs = dirs,
                         .n_plugin_dirs = 1,
                         .no_default_dirs = 1,
                         .cache_path = ""};
    ah_error err;
    *h = NULL, *m = NULL, *sel = NULL, *b = NULL;
    CHECK_MSG(ah_host_create(&o, h, &err) == AH_OK, "%s", err.msg);
    const ah_plugin_info *amx = *h ? ah_host_find_plugin(*h, "cpu_amx") : NULL;
    if (!amx || amx->state != AH_PLUGIN_AVAILABLE) {
        printf("test_kv_layout: cpu_amx not available here, skipped\n");
        return -1;
    }
    CHECK_MSG(ah_model_parse(model, "m", m, &err) == AH_OK, "%s", err.msg);
    CHECK_MSG(*m && ah_host_select(*h, *m, sel, &err) == AH_OK, "%s", err.msg);
    ah_binding_options bo = {
        sizeof bo, {sizeof(ah_limits), 4, 64, 4, 256, 10}, 0, 0, NULL, AH_MIXED_STEPS_CONFIG};
    CHECK_MSG(*sel && ah_binding_create(*h, *sel, &bo, b, &err) == AH_OK, "%s", err.msg);
    return *b ? 0 : -1;
}

static void amx_close(ah_host *h, ah_model *m, ah_selection *sel, ah_binding *b)
{
    ah_binding_destroy(b);
    ah_selection_destroy(sel);
    ah_model_destroy(m);
    ah_host_destroy(h);
}

static void test_interleaved_desc(void)
{
    ah_host *h;
    ah_model *m;
    ah_selection *sel;
    ah_binding *b;
    if (!amx_bind("[model]\nname = i\nnum_layers = 1\nnum_q_heads = 4\nnum_kv_heads = 2\n"
                  "head_size = 64\ndtype = fp32\nblock_size = 16\nkv_layout = nhd_interleaved\n",
                  &h, &m, &sel, &b)) {
        ah_kv_cache_desc k = {.struct_size = sizeof k}, v = {.struct_size = sizeof v};
        CHECK_MSG(ah_binding_kv_cache_desc(b, 0, 10, &k, &v) == AH_OK, "%s", ah_binding_errmsg(b));
        const int64_t shape[4] = {10, 16, 2, 64}, strides[4] = {2 * 16 * 2 * 64, 128, 64, 1},
                      alloc[5] = {10, 2, 16, 2, 64};
        for (int i = 0; i < 4; i++)
            CHECK(k.shape[i] == shape[i] && v.shape[i] == shape[i] && k.strides[i] == strides[i] &&
                  v.strides[i] == strides[i]);
        CHECK(k.alloc_ndim == 5 && v.alloc_ndim == 5 &&
              !memcmp(k.alloc_shape, alloc, sizeof alloc));
        CHECK(k.offset == 0 && v.offset == 16 * 2 * 64 && !k.in_key_alloc && v.in_key_alloc);
        /* struct_size 0: ABI 2.2's part only; too small: refused */
        ah_kv_cache_desc z, zv;
        memset(&z, 0x5a, sizeof z);
        z.struct_size = 0;
        zv = z;
        CHECK(ah_binding_kv_cache_desc(b, 0, 10, &z, &zv) == AH_OK);
        CHECK(z.ndim == 4 && z.shape[0] == 10 && z.alloc_ndim == 0x5a5a5a5a);
        z.struct_size = 8;
        CHECK(ah_binding_kv_cache_desc(b, 0, 10, &z, &zv) == AH_ERR_ABI);
        CHECK_CONTAINS(ah_binding_errmsg(b), "key->struct_size = 8 is smaller than ABI 2.2's");
    }
    amx_close(h, m, sel, b);
    /* MLA or two head sizes cannot interleave: refused where the model says so */
    ah_error err;
    CHECK(ah_model_parse("[model]\nname = i\nnum_layers = 1\nnum_q_heads = 4\nqk_head_size = 64\n"
                         "v_head_size = 32\nkv_layout = hnd_interleaved\n",
                         "i.ini", &m, &err) == AH_ERR_CONFIG);
    CHECK_CONTAINS(err.msg, "kv_layout = hnd_interleaved keeps K and V in one tensor of one head "
                            "size, which different qk_head_size and v_head_size do not fit");
}

static void test_kernel_block_sizes(void)
{
    ah_host *h;
    ah_model *m;
    ah_selection *sel;
    ah_binding *b;
    if (!amx_bind("[model]\nname = k\nnum_layers = 2\nnum_q_heads = 4\nnum_kv_heads = 2\n"
                  "head_size = 64\ndtype = fp32\nblock_size = 8192\n[layers.1]\nkv_group = 1\n"
                  "block_size = auto\n",
                  &h, &m, &sel, &b)) {
        uint32_t kernel = 0;
        CHECK(ah_binding_block_size(b, 0, AH_PHASE_PREFILL, &kernel) == 8192 && kernel == 4096);
        CHECK(ah_selection_decision(sel, 0, AH_PHASE_DECODE)->kernel_block_size == 4096);
        CHECK(ah_binding_block_size(b, 1, AH_PHASE_DECODE, &kernel) == 16 && kernel == 16);
        CHECK(ah_selection_decision(sel, 1, AH_PHASE_DECODE)->kernel_block_size == 0);
        CHECK(ah_binding_block_size(b, 2, AH_PHASE_DECODE, &kernel) == 0 && kernel == 0);
        ah_kv_cache_desc k = {.struct_size = sizeof k}, v = {.struct_size = sizeof v};
        CHECK(ah_binding_kv_cache_desc(b, 0, 3, &k, &v) == AH_OK && k.shape[1] == 8192);
    }
    amx_close(h, m, sel, b);
}

int main(void)
{
    test_split_table();
    test_auto_model();
    test_auto_select();
    test_interleaved_desc();
    test_kernel_block_sizes();
    return check_report("test_kv_layout");
}
