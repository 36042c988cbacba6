/*
 * Model descriptions: layer patterns (alternating windows, 5:1 local/global,
 * later sections winning), MLA's absorbed form and its precedence rules,
 * every value mapped into ah_layer_spec, the exact message for every kind of
 * error, every allocation failing cleanly, and the shipped example models.
 *
 * `test_model --dump-keys` prints the model-keys dump that
 * docs/configuration.md embeds (this test checks that it does).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "mutate.h"
#include "model.h"

static ah_model *parse(const char *text)
{
    ah_model *m = NULL;
    ah_error err = {""};
    ah_status s = ah_model_parse(text, "m.ini", &m, &err);
    CHECK_MSG(s == AH_OK, "%s", err.msg);
    return m;
}

/* The window of every layer as a string of 'W' (windowed) and 'g'. */
static void windows(const ah_model *m, char *out)
{
    uint32_t n = ah_model_num_layers(m);
    for (uint32_t i = 0; i < n; i++) out[i] = ah_model_layer(m, i)->sliding_window ? 'W' : 'g';
    out[n] = '\0';
}

static void patterns(void)
{
    char w[64];
    /* Gemma 2 style: every second layer local. */
    ah_model *m = parse("[model]\nname = alt\nnum_layers = 8\nnum_q_heads = 8\nhead_size = 64\n"
                        "[layers.0-7/2]\nsliding_window = 4096\n");
    if (m) {
        windows(m, w);
        CHECK_STREQ(w, "WgWgWgWg");
        CHECK(ah_model_layer(m, 0)->sliding_window == 4096);
        CHECK_STREQ(ah_model_name(m), "alt");
        ah_model_destroy(m);
    }
    /* Gemma 3 style: 5 local, 1 global, written as a default plus an
     * override with an open stepped range. */
    m = parse("[model]\nname = g3\nnum_layers = 14\nnum_q_heads = 8\nhead_size = 64\n"
              "sliding_window = 1024\n[layers.5-*/6]\nsliding_window = 0\n");
    if (m) {
        windows(m, w);
        CHECK_STREQ(w, "WWWWWgWWWWWgWW");
        ah_model_destroy(m);
    }
    /* Sections apply in file order; [model] is the default wherever it sits. */
    m = parse(
        "[layers.2-5]\nblock_size = 64\nkv_group = 1\n[layers.0-3]\nblock_size = 32\nkv_group = 0\n"
        "[model]\nname = order\nnum_layers = 6\nnum_q_heads = 4\nhead_size = 32\nblock_size = 8\n");
    if (m) {
        uint32_t bs[6];
        for (uint32_t i = 0; i < 6; i++) bs[i] = ah_model_layer(m, i)->block_size;
        CHECK(bs[0] == 32 && bs[1] == 32 && bs[2] == 32 && bs[3] == 32 && bs[4] == 64 &&
              bs[5] == 64);
        CHECK(ah_model_layer(m, 3)->kv_group == 0 && ah_model_layer(m, 4)->kv_group == 1);
        CHECK(ah_model_num_kv_groups(m) == 2);
        ah_model_destroy(m);
    }
    /* head_size sets both sizes; qk/v_head_size in the same section refine
     * it whatever the order of the lines. */
    m = parse("[model]\nname = hs\nnum_layers = 3\nnum_q_heads = 4\nqk_head_size = 192\n"
              "head_size = 128\n[layers.1]\nhead_size = 64\n[layers.2]\nv_head_size = 96\n");
    if (m) {
        const ah_layer_spec *l0 = ah_model_layer(m, 0), *l1 = ah_model_layer(m, 1),
                            *l2 = ah_model_layer(m, 2);
        CHECK(l0->qk_head_size == 192 && l0->v_head_size == 128);
        CHECK(l1->qk_head_size == 64 && l1->v_head_size == 64);
        CHECK(l2->qk_head_size == 192 && l2->v_head_size == 96);
        ah_model_destroy(m);
    }
}

static void values(void)
{
    ah_model *m = parse("[model]\nname = v\nnum_layers = 2\nnum_q_heads = 12\nnum_kv_heads = 4\n"
                        "head_size = 80\ndtype = fp16\nkv_dtype = fp8_e5m2\nblock_size = 32\n"
                        "kv_layout = hnd\nsoftcap = 30.5\nscale = 0.125\nsinks = true\n"
                        "alibi = true\nfp8_attention = true\nkv_scales = per_head\n"
                        "q_scale = true\n[layers.1]\nattn_type = encoder_only\n"
                        "dtype = fp32\nkv_dtype = auto\nkv_layout = nhd\nsinks = false\n"
                        "fp8_attention = false\nkv_scales = host\nq_scale = false\n");
    if (!m) return;
    const ah_layer_spec *s = ah_model_layer(m, 0);
    CHECK(s->struct_size == sizeof(ah_layer_spec));
    CHECK(s->attn_type == AH_ATTN_DECODER);
    CHECK(s->num_q_heads == 12 && s->num_kv_heads == 4);
    CHECK(s->qk_head_size == 80 && s->v_head_size == 80);
    CHECK(s->q_dtype == AH_DTYPE_FP16 && s->kv_dtype == AH_DTYPE_FP8_E5M2);
    CHECK(s->block_size == 32 && s->kv_layout == AH_KV_LAYOUT_HND);
    CHECK(s->sliding_window == 0);
    CHECK(s->softcap == 30.5f && s->scale == 0.125f);
    CHECK(s->use_sinks == 1 && s->use_alibi == 1 && s->use_mla == 0 && s->fp8_attention == 1);
    CHECK(s->kv_scales == AH_KV_SCALES_PER_HEAD && s->use_q_scale == 1);
    const ah_layer_spec *t = ah_model_layer(m, 1);
    CHECK(t->kv_scales == AH_KV_SCALES_HOST && t->use_q_scale == 0);
    CHECK(t->attn_type == AH_ATTN_ENCODER_ONLY && t->q_dtype == AH_DTYPE_FP32);
    CHECK(t->kv_dtype == AH_DTYPE_AUTO && t->kv_layout == AH_KV_LAYOUT_NHD);
    CHECK(t->use_sinks == 0 && t->use_alibi == 1 && t->softcap == 30.5f && !t->fp8_attention);
    CHECK(ah_model_layer(m, 2) == NULL);
    CHECK(ah_model_num_layers(m) == 2);
    ah_model_destroy(m);

    /* Defaults: MHA when num_kv_heads is not set, bf16, block 16, auto. */
    m = parse("[model]\nname = d\nnum_layers = 1\nnum_q_heads = 6\nhead_size = 64\n");
    if (!m) return;
    s = ah_model_layer(m, 0);
    CHECK(s->num_kv_heads == 6 && s->q_dtype == AH_DTYPE_BF16 && s->kv_dtype == AH_DTYPE_AUTO);
    CHECK(s->block_size == 16 && s->kv_layout == AH_KV_LAYOUT_AUTO && s->scale == 0.0f);
    CHECK(s->attn_type == AH_ATTN_DECODER && !s->use_sinks && !s->use_alibi && !s->use_mla);
    CHECK(!s->fp8_attention && s->kv_scales == AH_KV_SCALES_HOST && !s->use_q_scale);
    ah_model_destroy(m);

    /* The fnuz FP8 caches (ABI 2.3), which take scale tensors as OCP's do. */
    m = parse("[model]\nname = z\nnum_layers = 2\nnum_q_heads = 8\nhead_size = 128\n"
              "kv_dtype = fp8_e4m3fnuz\nkv_scales = per_head\n[layers.1]\n"
              "kv_dtype = fp8_e5m2fnuz\n");
    if (!m) return;
    CHECK(ah_model_layer(m, 0)->kv_dtype == AH_DTYPE_FP8_E4M3_FNUZ);
    CHECK(ah_model_layer(m, 0)->kv_scales == AH_KV_SCALES_PER_HEAD);
    CHECK(ah_model_layer(m, 1)->kv_dtype == AH_DTYPE_FP8_E5M2_FNUZ);
    ah_model_destroy(m);

    CHECK(ah_model_name(NULL) == NULL && ah_model_num_layers(NULL) == 0);
    CHECK(ah_model_layer(NULL, 0) == NULL);
    ah_model_destroy(NULL);
}

static void mla(void)
{
    /* All layers MLA, default ranks. */
    ah_model *m = parse("[model]\nname = ds\nnum_layers = 3\nnum_q_heads = 128\nmla = true\n");
    if (m) {
        for (uint32_t i = 0; i < 3; i++) {
            const ah_layer_spec *s = ah_model_layer(m, i);
            CHECK(s->use_mla == 1 && s->num_kv_heads == 1 && s->num_q_heads == 128);
            CHECK(s->qk_head_size == 576 && s->v_head_size == 512);
        }
        ah_model_destroy(m);
    }
    /* Other ranks. */
    m = parse("[model]\nname = small\nnum_layers = 1\nnum_q_heads = 16\nmla = true\n"
              "kv_lora_rank = 256\nqk_rope_head_dim = 32\n");
    if (m) {
        CHECK(ah_model_layer(m, 0)->qk_head_size == 288 &&
              ah_model_layer(m, 0)->v_head_size == 256);
        ah_model_destroy(m);
    }
    /* Explicit sizes that agree are fine. */
    m = parse("[model]\nname = ok\nnum_layers = 1\nnum_q_heads = 16\nmla = true\nnum_kv_heads = 1\n"
              "qk_head_size = 576\nv_head_size = 512\n");
    if (m) ah_model_destroy(m);
    /* mla in [layers] replaces the GQA sizes set in [model] for those
     * layers only: the demo model's pattern. */
    m = parse(ah_demo_model_text());
    if (m) {
        CHECK_STREQ(ah_model_name(m), "demo-mixed");
        CHECK(ah_model_num_layers(m) == 6);
        for (uint32_t i = 0; i < 4; i++) {
            const ah_layer_spec *s = ah_model_layer(m, i);
            CHECK(!s->use_mla && s->num_q_heads == 32 && s->num_kv_heads == 8);
            CHECK(s->qk_head_size == 128 && s->v_head_size == 128 && s->q_dtype == AH_DTYPE_BF16);
            CHECK(s->sliding_window == (i % 2 ? 1024u : 0u));
        }
        for (uint32_t i = 4; i < 6; i++) {
            const ah_layer_spec *s = ah_model_layer(m, i);
            CHECK(s->use_mla && s->num_q_heads == 16 && s->num_kv_heads == 1);
            CHECK(s->qk_head_size == 576 && s->v_head_size == 512 && s->sliding_window == 0);
        }
        ah_model_destroy(m);
    }
    /* mla = true in [model], switched off for some layers in [layers]: the
     * MLA ranks set in [model] do not apply there, and need not. */
    m = parse(
        "[model]\nname = mix\nnum_layers = 2\nnum_q_heads = 8\nmla = true\nkv_lora_rank = 256\n"
        "[layers.1]\nmla = false\nhead_size = 64\n");
    if (m) {
        CHECK(ah_model_layer(m, 0)->qk_head_size == 320);
        CHECK(!ah_model_layer(m, 1)->use_mla && ah_model_layer(m, 1)->qk_head_size == 64 &&
              ah_model_layer(m, 1)->num_kv_heads == 8);
        ah_model_destroy(m);
    }
}

typedef struct bad_case {
    const char *text, *message;
} bad_case;

#define HEAD "[model]\nname = x\nnum_layers = 8\n"
#define GOOD HEAD "num_q_heads = 8\nhead_size = 64\n"
#define LAYER_KEYS \
    "kind, attn_type, causal, num_q_heads, num_kv_heads, head_size, qk_head_size, v_head_size, " \
    "dtype, " \
    "kv_dtype, block_size, kv_layout, kv_group, sliding_window, softcap, scale, sinks, alibi, " \
    "fp8_attention, kv_scales, q_scale, mla, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, " \
    "v_head_dim, ragged_prefill"

static const bad_case bad_cases[] = {
    /* FP8 scales (ABI 2.3): forms other than host need an FP8 cache; a
     * query scale needs FP8 attention */
    {GOOD "kv_scales = per_head\n",
     "m.ini:6: layer 0: kv_scales = per_head needs a KV cache in an FP8 kv_dtype (fp8_e4m3, "
     "fp8_e5m2, fp8_e4m3fnuz, fp8_e5m2fnuz), not kv_dtype auto"},
    {GOOD "kv_dtype = fp8_e4m3\n[layers.2]\nattn_type = encoder_only\nkv_scales = tensor\n",
     "m.ini:9: layer 2: kv_scales = tensor needs a KV cache in an FP8 kv_dtype (fp8_e4m3, "
     "fp8_e5m2, fp8_e4m3fnuz, fp8_e5m2fnuz), not a cacheless encoder_only"},
    {GOOD "kv_scales = heads\n",
     "m.ini:6: [model] kv_scales: 'heads' is not one of host, tensor, per_head"},
    {GOOD "kv_dtype = fp8_e5m2\nq_scale = true\n",
     "m.ini:7: layer 0: q_scale = true needs fp8_attention = true over an FP8 kv_dtype (the "
     "query is quantised only for FP8 attention); the layer has kv_dtype fp8_e5m2, "
     "fp8_attention = false"},
    {GOOD "q_scale = true\nfp8_attention = true\n",
     "m.ini:6: layer 0: q_scale = true needs fp8_attention = true over an FP8 kv_dtype (the "
     "query is quantised only for FP8 attention); the layer has kv_dtype auto, "
     "fp8_attention = true"},
    {"", "m.ini: no [model] section (it sets name and num_layers)"},
    {"[layers.0]\nhead_size = 64\n", "m.ini: no [model] section (it sets name and num_layers)"},
    {"[model]\nname = x\n", "m.ini:1: [model] num_layers: not set (required)"},
    {"\n[model]\nnum_layers = 2\n", "m.ini:2: [model] name: not set (required)"},
    {"[model]\nname =\nnum_layers = 2\n", "m.ini:2: [model] name: must not be empty"},
    {"[model]\nname = a;b\nnum_layers = 2\n",
     "m.ini:2: [model] name: must not hold ';' or '#' (a description reads them as a comment)"},
    {"[model]\nname = "
     "x123456789x123456789x123456789x123456789x123456789x123456789x123456789x123456789x123456789"
     "x123456789x123456789x123456789x12345678\nnum_layers = 2\n",
     "m.ini:2: [model] name: is longer than 128 bytes"},
    {HEAD, "m.ini:1: layer 0: head_size (or qk_head_size) is not set"},
    {HEAD "v_head_size = 64\nnum_q_heads = 2\n",
     "m.ini:1: layer 0: head_size (or qk_head_size) is not set"},
    {HEAD "qk_head_size = 64\nnum_q_heads = 2\n",
     "m.ini:4: layer 0: v_head_size is not set (head_size sets both sizes)"},
    {HEAD "head_size = 64\n", "m.ini:1: layer 0: num_q_heads is not set"},
    {HEAD "head_size = 64\nnum_q_heads = 32\nnum_kv_heads = 6\n",
     "m.ini:6: layer 0: num_q_heads 32 is not a multiple of num_kv_heads 6"},
    {HEAD "head_size = 64\nnum_kv_heads = 6\nnum_q_heads = 32\n",
     "m.ini:6: layer 0: num_q_heads 32 is not a multiple of num_kv_heads 6"},
    {GOOD "num_kv_heads = 2\n[layers.3-4]\nnum_kv_heads = 3\n",
     "m.ini:8: layer 3: num_q_heads 8 is not a multiple of num_kv_heads 3"},
    {GOOD "[layers.5]\nnum_kv_heads = 16\n",
     "m.ini:7: layer 5: num_q_heads 8 is not a multiple of num_kv_heads 16"},
    {GOOD "mla = true\nnum_kv_heads = 8\n",
     "m.ini:7: layer 0: num_kv_heads = 8 conflicts with mla (line 6), which needs 1 (one KV head)"},
    {HEAD "num_q_heads = 8\nmla = true\nhead_size = 128\n",
     "m.ini:6: layer 0: head_size = 128 conflicts with mla (line 5), which needs 576 "
     "(kv_lora_rank + qk_rope_head_dim)"},
    {HEAD "num_q_heads = 8\nmla = true\nkv_lora_rank = 256\nv_head_size = 512\n",
     "m.ini:7: layer 0: v_head_size = 512 conflicts with mla (line 5), which needs 256 "
     "(kv_lora_rank)"},
    {GOOD "[layers.2]\nmla = true\nqk_head_size = 192\n",
     "m.ini:8: layer 2: qk_head_size = 192 conflicts with mla (line 7), which needs 576 "
     "(kv_lora_rank + qk_rope_head_dim)"},
    {HEAD "num_q_heads = 8\nmla = true\nattn_type = encoder\n",
     "m.ini:6: layer 0: mla needs attn_type = decoder, not encoder"},
    {GOOD "kv_lora_rank = 256\n", "m.ini:6: layer 0: kv_lora_rank applies only to mla layers"},
    {GOOD "[layers.1]\nqk_rope_head_dim = 32\n",
     "m.ini:7: layer 1: qk_rope_head_dim applies only to mla layers"},
    {GOOD "[layers.1-7/2]\nattn_type = encoder_decoder\n[layers.*]\nsliding_window = 512\n",
     "m.ini:9: layer 1: sliding_window does not apply to encoder_decoder (cross-attention) layers"},
    {GOOD "[layers.4-9]\nsliding_window = 64\n",
     "m.ini:6: [layers.4-9]: layer 9 is beyond the model's 8 layers (0-7)"},
    {GOOD "[layers.1-20/9]\nsliding_window = 64\n",
     "m.ini:6: [layers.1-20/9]: layer 19 is beyond the model's 8 layers (0-7)"},
    {GOOD "[layers.0,8-*]\nsliding_window = 64\n",
     "m.ini:6: [layers.0,8-*]: layer 8 is beyond the model's 8 layers (0-7)"},
    {GOOD "[layers.5-2]\n",
     "m.ini:6: [layers.5-2]: bad layer range: part '5-2': start 5 is after end 2"},
    {GOOD "[layers.]\n",
     "m.ini:6: [layers.]: no layer range: write [layers.<range>], e.g. [layers.0-3] or "
     "[layers.1-47/2]"},
    {GOOD "[layer.0-3]\n",
     "m.ini:6: [layer.0-3]: unknown section (a model description uses [layers.0-3]; "
     "[layer.<range>] belongs in the host configuration)"},
    {GOOD "[select]\n",
     "m.ini:6: [select]: unknown section; a model description has [model] and [layers.<range>] "
     "sections"},
    {GOOD "[model]\n", "m.ini:6: [model]: appears twice (first at line 1)"},
    {GOOD "[layers.0]\nname = y\n",
     "m.ini:7: [layers.0] name: 'name' belongs in [model]; it cannot vary per layer"},
    {GOOD "[layers.0]\nnum_layers = 4\n",
     "m.ini:7: [layers.0] num_layers: 'num_layers' belongs in [model]; it cannot vary per layer"},
    {GOOD "head_size = 32\n", "m.ini:6: [model] head_size: duplicate key (first set at line 5)"},
    {GOOD "[layers.0]\nwindow = 4\n",
     "m.ini:7: [layers.0] window: unknown key; per-layer keys are " LAYER_KEYS},
    {GOOD "heads = 4\n",
     "m.ini:6: [model] heads: unknown key; [model] takes name, num_layers and the per-layer keys "
     "are " LAYER_KEYS},
    {HEAD "num_q_heads = 0\n", "m.ini:4: [model] num_q_heads: '0' is out of range 1..4096"},
    {"[model]\nnum_layers = 0\n", "m.ini:2: [model] num_layers: '0' is out of range 1..16384"},
    {"[model]\nnum_layers = many\n", "m.ini:2: [model] num_layers: 'many' is not a whole number"},
    {GOOD "head_size2 = 1\n",
     "m.ini:6: [model] head_size2: unknown key; [model] takes name, num_layers and the per-layer "
     "keys are " LAYER_KEYS},
    {GOOD "dtype = fp8_e4m3\n",
     "m.ini:6: [model] dtype: 'fp8_e4m3' is not one of fp32, fp16, bf16"},
    {GOOD "kv_dtype = int8\n",
     "m.ini:6: [model] kv_dtype: 'int8' is not one of auto, fp16, bf16, fp32, fp8_e4m3, fp8_e5m2, "
     "fp8_e4m3fnuz, fp8_e5m2fnuz"},
    {GOOD "kv_layout = bshd\n",
     "m.ini:6: [model] kv_layout: 'bshd' is not one of auto, nhd, hnd, nhd_interleaved, hnd_interleaved"},
    {GOOD "attn_type = cross\n",
     "m.ini:6: [model] attn_type: 'cross' is not one of decoder, encoder, encoder_only, "
     "encoder_decoder"},
    {GOOD "softcap = -1\n", "m.ini:6: [model] softcap: '-1' is out of range 0..1e+06"},
    {GOOD "softcap = 3x\n", "m.ini:6: [model] softcap: '3x' is not a finite number"},
    {GOOD "scale = nan\n", "m.ini:6: [model] scale: 'nan' is not a finite number"},
    {GOOD "scale = inf\n", "m.ini:6: [model] scale: 'inf' is not a finite number"},
    {GOOD "scale = 1e999\n", "m.ini:6: [model] scale: '1e999' is not a finite number"},
    {GOOD "sinks = 1\n", "m.ini:6: [model] sinks: '1' is not one of true, false"},
    {GOOD "block_size = 0\n", "m.ini:6: [model] block_size: '0' is out of range 1..65536"},
    {GOOD "sliding_window = -1\n", "m.ini:6: [model] sliding_window: '-1' is not a whole number"},
    {GOOD "[layers.0]\nhead_size\n",
     "m.ini:7: [layers.0]: expected 'key = value', got 'head_size'"},
};

static void errors(void)
{
    for (size_t i = 0; i < sizeof bad_cases / sizeof *bad_cases; i++) {
        ah_model *m = (ah_model *)&m;
        ah_error err = {""};
        long live = ah__alloc_live();
        ah_status s = ah_model_parse(bad_cases[i].text, "m.ini", &m, &err);
        CHECK_MSG(s == AH_ERR_CONFIG, "case %zu: status %d", i, (int)s);
        CHECK(m == NULL);
        CHECK_STREQ(err.msg, bad_cases[i].message);
        CHECK_MSG(ah__alloc_live() == live, "case %zu leaked", i);
        CHECK(ah_model_parse(bad_cases[i].text, "m.ini", &m, NULL) == AH_ERR_CONFIG && m == NULL);
    }
    ah_model *m = (ah_model *)&m;
    ah_error err;
    CHECK(ah_model_parse(NULL, "m.ini", &m, &err) == AH_ERR_INVALID_ARGUMENT && m == NULL);
    CHECK(ah_model_load(NULL, &m, &err) == AH_ERR_INVALID_ARGUMENT && m == NULL);
    CHECK(ah_model_load("/nonexistent/model.ini", &m, &err) == AH_ERR_IO && m == NULL);
    CHECK_STREQ(err.msg, "/nonexistent/model.ini: cannot open: No such file or directory");
}

static void out_of_memory(const char *text)
{
    ah_model *m = NULL;
    ah_error err;
    ah__fault_inject_after(0);
    CHECK(ah_model_parse(text, "m.ini", &m, &err) == AH_OK);
    long n = ah__alloc_count();
    ah_model_destroy(m);
    CHECK(n > 0);
    for (long i = 1; i <= n; i++) {
        long live = ah__alloc_live();
        ah__fault_inject_after(i);
        ah_status s = ah_model_parse(text, "m.ini", &m, &err);
        ah__fault_inject_after(0);
        CHECK_MSG(s == AH_ERR_OUT_OF_MEMORY, "allocation %ld of %ld: status %d (%s)", i, n, (int)s,
                  err.msg);
        CHECK(m == NULL);
        CHECK_MSG(ah__alloc_live() == live, "allocation %ld of %ld leaked", i, n);
    }
}

static ah_model *load_example(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/models/%s", ATTNHOST_SOURCE_DIR, name);
    ah_model *m = NULL;
    ah_error err = {""};
    CHECK_MSG(ah_model_load(path, &m, &err) == AH_OK, "%s: %s", name, err.msg);
    return m;
}

static void examples(void)
{
    char w[128];
    ah_model *m = load_example("llama-3-8b.ini");
    if (m) {
        CHECK(m->num_layers == 32 && m->layers[31].num_q_heads == 32 &&
              m->layers[31].num_kv_heads == 8);
        CHECK(m->layers[0].qk_head_size == 128 && m->layers[0].sliding_window == 0);
        ah_model_destroy(m);
    }
    m = load_example("gemma-2-9b.ini");
    if (m) {
        windows(m, w);
        CHECK_STREQ(w, "WgWgWgWgWgWgWgWgWgWgWgWgWgWgWgWgWgWgWgWgWg");
        CHECK(m->layers[1].softcap == 50.0f && m->layers[0].sliding_window == 4096);
        ah_model_destroy(m);
    }
    m = load_example("gemma-3-12b.ini");
    if (m) {
        windows(m, w);
        CHECK_STREQ(w, "WWWWWgWWWWWgWWWWWgWWWWWgWWWWWgWWWWWgWWWWWgWWWWWg");
        ah_model_destroy(m);
    }
    m = load_example("deepseek-v3.ini");
    if (m) {
        CHECK(m->num_layers == 61);
        CHECK(m->layers[60].use_mla && m->layers[60].qk_head_size == 576 &&
              m->layers[60].v_head_size == 512 && m->layers[60].num_kv_heads == 1);
        CHECK(fabsf(m->layers[0].scale - 0.13523377f) < 1e-7f && m->layers[0].block_size == 64);
        ah_model_destroy(m);
    }
    m = load_example("gpt-oss-120b.ini");
    if (m) {
        windows(m, w);
        CHECK_STREQ(w, "WgWgWgWgWgWgWgWgWgWgWgWgWgWgWgWgWgWg");
        CHECK(m->layers[1].use_sinks && m->layers[0].use_sinks &&
              m->layers[0].sliding_window == 128);
        ah_model_destroy(m);
    }
    m = load_example("whisper-large-v3.ini");
    if (m) {
        CHECK(m->num_layers == 96);
        CHECK(m->layers[0].attn_type == AH_ATTN_ENCODER &&
              m->layers[31].attn_type == AH_ATTN_ENCODER);
        CHECK(m->layers[32].attn_type == AH_ATTN_DECODER &&
              m->layers[94].attn_type == AH_ATTN_DECODER);
        CHECK(m->layers[33].attn_type == AH_ATTN_ENCODER_DECODER &&
              m->layers[95].attn_type == AH_ATTN_ENCODER_DECODER);
        CHECK(m->layers[50].num_kv_heads == 20 && m->layers[50].q_dtype == AH_DTYPE_FP16);
        ah_model_destroy(m);
    }
    m = load_example("bert-base.ini");
    if (m) {
        CHECK(m->num_layers == 12 && m->layers[11].attn_type == AH_ATTN_ENCODER_ONLY);
        ah_model_destroy(m);
    }
    m = load_example("mpt-7b.ini");
    if (m) {
        CHECK(m->layers[0].use_alibi && m->layers[31].use_alibi && m->layers[0].num_kv_heads == 32);
        ah_model_destroy(m);
    }
}

static const char *slurp(const char *path)
{
    static char buf[1 << 17];
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void dump(void)
{
    char *text = NULL;
    CHECK(ah__model_keys_dump(&text) == AH_OK);
    if (!text) return;
    CHECK_CONTAINS(text, "#num_layers =\n");
    CHECK_CONTAINS(text, "#kv_lora_rank = 512\n");
    CHECK_CONTAINS(
        text,
        "# Value: one of auto, nhd, hnd, nhd_interleaved, hnd_interleaved. Default: auto.\n#kv_layout = auto\n");
    /* With the required keys filled in, the dump is a valid description
     * whose layers have the table's defaults. */
    static const char *const fill[][2] = {{"#name =\n", "name = dumped\n"},
                                          {"#num_layers =\n", "num_layers = 2\n"},
                                          {"#num_q_heads =\n", "num_q_heads = 4\n"},
                                          {"#head_size =\n", "head_size = 64\n"}};
    char *full = ah__malloc(strlen(text) + 64);
    if (full) {
        strcpy(full, text);
        for (size_t i = 0; i < 4; i++) {
            char *at = strstr(full, fill[i][0]);
            CHECK(at != NULL);
            if (!at) continue;
            size_t a = strlen(fill[i][0]), b = strlen(fill[i][1]);
            memmove(at + b, at + a, strlen(at + a) + 1);
            memcpy(at, fill[i][1], b);
        }
        ah_model *m = parse(full);
        if (m) {
            const ah_layer_spec *l = ah_model_layer(m, 1);
            CHECK(l->num_q_heads == 4 && l->num_kv_heads == 4 && l->qk_head_size == 64);
            CHECK(l->block_size == 16 && l->q_dtype == AH_DTYPE_BF16 && !l->use_mla);
            ah_model_destroy(m);
        }
        ah__free(full);
    }
    const char *doc = slurp(ATTNHOST_SOURCE_DIR "/docs/configuration.md");
    CHECK_MSG(doc && strstr(doc, text), "docs/configuration.md lacks the current model-keys dump; "
                                        "regenerate it with `test_model --dump-keys`");
    ah__free(text);
}

/* Deterministic byte-level mutations of a valid input (a poor man's fuzzer
 * that runs in CI): whatever the text, a load either succeeds or fails with
 * a message naming the source, leaves nothing behind, and never crashes. */
static void mutations(void)
{
    const char *seed = ah_demo_model_text();
    size_t len = strlen(seed);
    uint32_t state = 12345;
    char buf[4096];
    int loaded = 0, refused = 0;
    for (int iter = 0; iter < 3000 && len < sizeof buf - 8; iter++) {
        memcpy(buf, seed, len + 1);
        mutate_text(buf, len, 1 + iter % 4, &state);
        long live = ah__alloc_live();
        ah_model *m = (ah_model *)&m;
        ah_error err = {""};
        ah_status s = ah_model_parse(buf, "m.ini", &m, &err);
        CHECK_MSG(s == AH_OK || s == AH_ERR_CONFIG, "iteration %d: status %d", iter, (int)s);
        loaded += s == AH_OK;
        refused += s == AH_ERR_CONFIG;
        if (s != AH_OK) {
            CHECK_MSG(!strncmp(err.msg, "m.ini", 5), "iteration %d: '%s'", iter, err.msg);
            CHECK(m == NULL);
        }
        if (s == AH_OK) ah_model_destroy(m);
        CHECK_MSG(ah__alloc_live() == live, "iteration %d leaked", iter);
    }
    /* Both outcomes occur, or the mutations test nothing. */
    CHECK(loaded > 100 && refused > 100);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--dump-keys")) {
        char *text = NULL;
        if (ah__model_keys_dump(&text) != AH_OK) return 1;
        fputs(text, stdout);
        ah__free(text);
        return 0;
    }
    patterns();
    values();
    mla();
    errors();
    out_of_memory(ah_demo_model_text());
    out_of_memory("[model]\nname = x\nnum_layers = 64\nnum_q_heads = 8\nhead_size = 64\n"
                  "[layers.1-63/2]\nsliding_window = 64\n[layers.5-*/6, 7]\nsoftcap = 30\n");
    examples();
    dump();
    mutations();
    return check_report("test_model");
}
