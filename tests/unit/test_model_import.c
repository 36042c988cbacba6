/*
 * Models without INI text: ah_model_create through the one layer check
 * (same messages as the INI path), layer kinds in descriptions, selections
 * and bindings, ah_model_to_ini round trips, and the Hugging Face importer
 * on one config.json per family (tests/data/hf_configs) compared layer by
 * layer with the expected specs, and its refusals, each naming the field.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "model.h"

#include <attnhost/plugin_util.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (b) b[n] = '\0';
    fclose(f);
    return b;
}

/* The model parses back from its own INI text to the same model (which
 * ah_model_to_ini checks before handing the text out). */
static void round_trip(const ah_model *m)
{
    char *text = NULL, why[512] = "";
    CHECK_MSG(ah__model_to_ini(m, &text, why, sizeof why) == AH_OK && text, "%s: %s",
              ah_model_name(m), why);
    ah__free(text);
}

/* ---------------------------------------------------------------------------
 * ah_model_create
 * ------------------------------------------------------------------------ */

static ah_layer_spec gqa(uint32_t q, uint32_t kv, uint32_t hd)
{
    ah_layer_spec s = {
        .struct_size = sizeof s, .num_q_heads = q, .num_kv_heads = kv, .qk_head_size = hd};
    return s;
}

static void create(void)
{
    ah_layer_spec l[4] = {gqa(32, 8, 128), gqa(32, 8, 128), gqa(16, 0, 0), gqa(32, 8, 128)};
    l[1].sliding_window = 4096;
    l[2].use_mla = 1; /* 576/512, one KV head */
    l[3].v_head_size = 64;
    l[3].softcap = 30.5f;
    ah_layer_kind kinds[5] = {AH_LAYER_ATTENTION, AH_LAYER_ATTENTION, AH_LAYER_ATTENTION,
                              AH_LAYER_ATTENTION, AH_LAYER_MAMBA};
    ah_layer_spec five[5] = {l[0], l[1], l[2], l[3], {0}};
    ah_model_desc d = {sizeof d, "made", 5, five, kinds, NULL};
    ah_model *m = NULL;
    ah_error err = {""};
    CHECK_MSG(ah_model_create(&d, &m, &err) == AH_OK, "%s", err.msg);
    if (m) {
        const ah_layer_spec *s0 = ah_model_layer(m, 0), *s2 = ah_model_layer(m, 2),
                            *s3 = ah_model_layer(m, 3);
        CHECK(s0->q_dtype == AH_DTYPE_BF16 && s0->block_size == 16 && s0->v_head_size == 128);
        CHECK(s2->num_kv_heads == 1 && s2->qk_head_size == 576 && s2->v_head_size == 512);
        CHECK(s3->qk_head_size == 128 && s3->v_head_size == 64 && s3->softcap == 30.5f);
        CHECK(ah_model_layer_kind(m, 4) == AH_LAYER_MAMBA &&
              ah_model_layer(m, 4)->num_q_heads == 0);
        CHECK(ah_model_layer_kind(m, 5) == AH_LAYER_KIND_COUNT);
        round_trip(m);
        ah_model_destroy(m);
    }
    /* the same refusals as the INI path, prefixed with the model's name */
    static const struct {
        ah_layer_spec s;
        const char *msg;
    } bad[] = {
        {{.struct_size = sizeof(ah_layer_spec),
          .num_q_heads = 32,
          .num_kv_heads = 6,
          .qk_head_size = 64},
         "made: layer 0: num_q_heads 32 is not a multiple of num_kv_heads 6"},
        {{.struct_size = sizeof(ah_layer_spec), .num_q_heads = 8},
         "made: layer 0: head_size (or qk_head_size) is not set"},
        {{.struct_size = sizeof(ah_layer_spec), .qk_head_size = 64},
         "made: layer 0: num_q_heads is not set"},
        {{.struct_size = sizeof(ah_layer_spec),
          .num_q_heads = 8,
          .qk_head_size = 64,
          .use_mla = 1,
          .v_head_size = 32,
          .num_kv_heads = 8},
         "made: layer 0: num_kv_heads = 8 conflicts with mla, which needs 1 (one KV head)"},
        {{.struct_size = sizeof(ah_layer_spec),
          .num_q_heads = 8,
          .use_mla = 1,
          .attn_type = AH_ATTN_ENCODER},
         "made: layer 0: mla needs attn_type = decoder, not encoder"},
        {{.struct_size = sizeof(ah_layer_spec),
          .num_q_heads = 8,
          .qk_head_size = 64,
          .sliding_window = 8,
          .attn_type = AH_ATTN_ENCODER_DECODER},
         "made: layer 0: sliding_window does not apply to encoder_decoder (cross-attention) layers"},
        {{.struct_size = sizeof(ah_layer_spec), .num_q_heads = 5000, .qk_head_size = 64},
         "made: layer 0: num_q_heads = 5000 is not allowed (whole number, 1..4096)"},
        {{.struct_size = sizeof(ah_layer_spec),
          .num_q_heads = 8,
          .qk_head_size = 64,
          .q_dtype = AH_DTYPE_FP8_E4M3},
         "made: layer 0: dtype = 4 is not allowed (one of fp32, fp16, bf16)"},
        {{.struct_size = sizeof(ah_layer_spec), .num_q_heads = 8, .qk_head_size = 64, .scale = NAN},
         "made: layer 0: scale = nan is not allowed (number, 0..1e+06)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ah_model_desc one = {sizeof one, "made", 1, &bad[i].s, NULL, NULL};
        m = (ah_model *)&m;
        long live = ah__alloc_live();
        CHECK_MSG(ah_model_create(&one, &m, &err) == AH_ERR_CONFIG, "case %zu", i);
        CHECK(m == NULL);
        CHECK_STREQ(err.msg, bad[i].msg);
        CHECK(ah__alloc_live() == live);
    }
    /* the INI path says the same about the same layer */
    CHECK(
        ah_model_parse("[model]\nname = made\nnum_layers = 1\nnum_q_heads = 32\nnum_kv_heads = 6\n"
                       "head_size = 64\n",
                       "m.ini", &m, &err) == AH_ERR_CONFIG);
    CHECK_STREQ(err.msg, "m.ini:5: layer 0: num_q_heads 32 is not a multiple of num_kv_heads 6");
    ah_model_desc nd = {sizeof nd, NULL, 1, l, NULL, NULL};
    CHECK(ah_model_create(&nd, &m, &err) == AH_ERR_CONFIG && m == NULL);
    CHECK_STREQ(err.msg, "<model>: name: not set (required)");
    /* an empty name: the INI path's message */
    nd.name = "";
    CHECK(ah_model_create(&nd, &m, &err) == AH_ERR_CONFIG && m == NULL);
    CHECK_STREQ(err.msg, "<model>: name: must not be empty");
    /* a name ah_model_to_ini could not write back */
    nd.name = "two\nlines";
    CHECK(ah_model_create(&nd, &m, &err) == AH_ERR_CONFIG && m == NULL);
    CHECK_STREQ(err.msg, "<model>: name: must not hold a control character (one line)");
    nd.name = "padded ";
    CHECK(ah_model_create(&nd, &m, &err) == AH_ERR_CONFIG && m == NULL);
    CHECK_STREQ(err.msg, "<model>: name: must not begin or end with a space");
    nd.name = "x";
    nd.num_layers = 0;
    CHECK(ah_model_create(&nd, &m, &err) == AH_ERR_CONFIG);
    CHECK_STREQ(err.msg, "x: num_layers = 0 is out of range 1..16384");
    nd.num_layers = 1;
    nd.struct_size = 4;
    CHECK(ah_model_create(&nd, &m, &err) == AH_ERR_ABI && m == NULL);
    CHECK(ah_model_create(NULL, &m, &err) == AH_ERR_INVALID_ARGUMENT);
    /* every allocation failing cleanly */
    for (long i = 1; i <= 4; i++) {
        long live = ah__alloc_live();
        ah__fault_inject_after(i);
        ah_status s = ah_model_create(&d, &m, &err);
        ah__fault_inject_after(0);
        CHECK(s == AH_ERR_OUT_OF_MEMORY && m == NULL);
        CHECK(ah__alloc_live() == live);
    }
}

/* ---------------------------------------------------------------------------
 * Layer kinds in descriptions
 * ------------------------------------------------------------------------ */

static void kinds(void)
{
    ah_model *m = NULL;
    ah_error err = {""};
    const char *jamba =
        "[model]\nname = j\nnum_layers = 16\nkind = mamba\nnum_q_heads = 32\nnum_kv_heads = 8\n"
        "head_size = 128\n[layers.4-15/8]\nkind = attention\n[layers.15]\nkind = mlp_only\n";
    CHECK_MSG(ah_model_parse(jamba, "j.ini", &m, &err) == AH_OK, "%s", err.msg);
    if (m) {
        for (uint32_t i = 0; i < 16; i++) {
            ah_layer_kind want = i == 4 || i == 12 ? AH_LAYER_ATTENTION
                                 : i == 15         ? AH_LAYER_MLP_ONLY
                                                   : AH_LAYER_MAMBA;
            CHECK_MSG(ah_model_layer_kind(m, i) == want, "layer %u", i);
        }
        CHECK(ah_model_layer(m, 4)->num_q_heads == 32 && ah_model_layer(m, 5)->num_q_heads == 0);
        round_trip(m);
        ah_model_destroy(m);
    }
    CHECK_STREQ(ah_layer_kind_str(AH_LAYER_GDN), "gdn");
    CHECK_STREQ(ah_layer_kind_str(AH_LAYER_KIND_COUNT), "?");
    /* an attention key in the section that makes the layer non-attention */
    CHECK(ah_model_parse("[model]\nname = j\nnum_layers = 4\nnum_q_heads = 8\nhead_size = 64\n"
                         "[layers.1]\nkind = gdn\nsliding_window = 64\n",
                         "j.ini", &m, &err) == AH_ERR_CONFIG);
    CHECK_STREQ(err.msg,
                "j.ini:8: layer 1: sliding_window applies only to attention layers; this is a gdn "
                "layer (kind, line 7)");
    CHECK(ah_model_parse("[model]\nname = j\nnum_layers = 4\nkind = conv\n", "j.ini", &m, &err) ==
          AH_ERR_CONFIG);
    CHECK_STREQ(err.msg,
                "j.ini:4: [model] kind: 'conv' is not one of attention, mamba, linear_attention, "
                "gdn, mlp_only, other");
    /* a model of no attention layer at all is a model */
    CHECK(ah_model_parse("[model]\nname = s\nnum_layers = 2\nkind = mamba\n", "s.ini", &m, &err) ==
          AH_OK);
    if (m) {
        round_trip(m);
        ah_model_destroy(m);
    }
}

/* Selection and binding skip non-attention layers. */
static void kinds_bound(void)
{
    ah_host_options o = {sizeof o,
                         .config_text = "[select]\nfallback = allow\n",
                         .plugin_dirs =
                             (const char *[]){ATTNHOST_BUILD_DIR "/lib/attnhost/plugins"},
                         .n_plugin_dirs = 1,
                         .no_default_dirs = 1,
                         .scan_mode = AH_SCAN_IN_PROCESS,
                         .cache_path = ""};
    ah_host *h = NULL;
    ah_error err = {""};
    if (ah_host_create(&o, &h, &err) != AH_OK) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    const ah_plugin_info *cpu = ah_host_find_plugin(h, "cpu_amx");
    if (!cpu || cpu->state != AH_PLUGIN_AVAILABLE) {
        printf("test_model_import: cpu_amx not available, binding of layer kinds skipped\n");
        ah_host_destroy(h);
        return;
    }
    ah_model *m = NULL;
    CHECK(ah_model_parse(
              "[model]\nname = hy\nnum_layers = 4\nnum_q_heads = 4\nhead_size = 64\ndtype = fp32\n"
              "[layers.0,2]\nkind = mamba\n",
              "hy.ini", &m, &err) == AH_OK);
    ah_selection *sel = NULL;
    CHECK_MSG(ah_host_select(h, m, &sel, &err) == AH_OK, "%s", err.msg);
    if (sel) {
        const ah_decision *d = ah_selection_decision(sel, 0, AH_PHASE_DECODE);
        CHECK(d && d->plugin == NULL && d->n_candidates == 0);
        CHECK_STREQ(d->list_source, "mamba layer: not attention");
        CHECK(ah_selection_layer_kind(sel, 0) == AH_LAYER_MAMBA);
        CHECK(ah_selection_layer_kind(sel, 1) == AH_LAYER_ATTENTION);
        CHECK_STREQ(ah_selection_decision(sel, 1, AH_PHASE_PREFILL)->plugin, "cpu_amx");
        uint32_t gl = 99;
        ah_selection_graph_level(sel, &gl);
        CHECK(gl == 1 || gl == 3);
        ah_binding_options bo = {
            sizeof bo, {sizeof(ah_limits), 4, 64, 8, 128, 64}, 0, 0, NULL, AH_MIXED_STEPS_CONFIG};
        ah_binding *b = NULL;
        CHECK_MSG(ah_binding_create(h, sel, &bo, &b, &err) == AH_OK, "%s", err.msg);
        if (b) {
            ah_forward_args a;
            memset(&a, 0, sizeof a);
            a.struct_size = sizeof a;
            CHECK(ah_binding_forward(b, 2, &a) == AH_ERR_INVALID_ARGUMENT);
            CHECK_CONTAINS(ah_binding_errmsg(b), "layer 2 is a mamba layer, not attention");
            ah_kv_cache_desc k = {.struct_size = sizeof k}, v = {.struct_size = sizeof v};
            CHECK(ah_binding_kv_cache_desc(b, 0, 8, &k, &v) == AH_ERR_INVALID_ARGUMENT);
            CHECK(ah_binding_kv_cache_desc(b, 1, 8, &k, &v) == AH_OK && k.ndim == 4);
            CHECK(ah_binding_device(b, 0, AH_PHASE_PREFILL) == NULL);
            CHECK(ah_binding_device(b, 1, AH_PHASE_PREFILL) != NULL);
            ah_binding_destroy(b);
        }
        ah_selection_destroy(sel);
    }
    ah_model_destroy(m);
    ah_host_destroy(h);
}

/* ---------------------------------------------------------------------------
 * Hugging Face import, one config per family
 * ------------------------------------------------------------------------ */

/* Per layer: g global decoder, W windowed decoder, E encoder, C cross,
 * B encoder-only, M mamba, D gdn. */
static char layer_char(const ah_model *m, uint32_t i)
{
    ah_layer_kind k = ah_model_layer_kind(m, i);
    if (k == AH_LAYER_MAMBA) return 'M';
    if (k == AH_LAYER_GDN) return 'D';
    if (k != AH_LAYER_ATTENTION) return '?';
    const ah_layer_spec *s = ah_model_layer(m, i);
    switch (s->attn_type) {
    case AH_ATTN_ENCODER: return 'E';
    case AH_ATTN_ENCODER_DECODER: return 'C';
    case AH_ATTN_ENCODER_ONLY: return 'B';
    default: return s->sliding_window ? 'W' : 'g';
    }
}

/* unit repeated times */
static const char *rep(const char *unit, int times)
{
    static char buf[32][512];
    static int k;
    char *b = buf[k++ % 32];
    b[0] = '\0';
    for (int i = 0; i < times; i++) strcat(b, unit);
    return b;
}

typedef struct hf_case {
    const char *file, *name;
    const char *pattern; /* layer_char per layer */
    uint32_t layer;      /* the attention layer checked in detail */
    uint32_t q, kv, qk, v, window;
    ah_dtype dtype;
    float softcap, scale; /* scale 0: the default */
    uint32_t sinks, mla;
} hf_case;

static ah_model *import_file(const char *file, const ah_hf_import_options *o, ah_error *err)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/hf_configs/%s", ATTNHOST_SOURCE_DIR, file);
    char *text = slurp(path);
    CHECK_MSG(text != NULL, "%s", path);
    ah_model *m = NULL;
    ah_status s = ah_model_import_hf_opts(text, file, o, &m, err);
    free(text);
    return s == AH_OK ? m : NULL;
}

static void hf_families(void)
{
    char pat[1100];
    /* patterns built here */
    char q2swa[64], g3[64], jamba[64], qnext[64], whisper[128];
    snprintf(q2swa, sizeof q2swa, "%s%s", rep("g", 21), rep("W", 7));
    snprintf(g3, sizeof g3, "%s", rep("WWWWWg", 8));
    snprintf(jamba, sizeof jamba, "%s", rep("MMMMgMMM", 4));
    snprintf(qnext, sizeof qnext, "%s", rep("DDDg", 12));
    snprintf(whisper, sizeof whisper, "%s%s", rep("E", 32), rep("gC", 32));
    const double ds_scale = pow(0.1 * log(40.0) + 1.0, 2) / sqrt(192.0);
    const hf_case cases[] = {
        {"llama-2-7b.json", "Llama-2-7b-hf", rep("g", 32), 5, 32, 32, 128, 128, 0, AH_DTYPE_FP16, 0,
         0, 0, 0},
        {"llama-3-70b.json", "Meta-Llama-3-70B", rep("g", 80), 79, 64, 8, 128, 128, 0,
         AH_DTYPE_BF16, 0, 0, 0, 0},
        {"llama-3.1-8b.json", "llama", rep("g", 32), 0, 32, 8, 128, 128, 0, AH_DTYPE_BF16, 0, 0, 0,
         0},
        {"qwen2.5-7b.json", "qwen2", rep("g", 28), 27, 28, 4, 128, 128, 0, AH_DTYPE_BF16, 0, 0, 0,
         0},
        {"qwen2-7b-swa.json", "qwen2", q2swa, 21, 28, 4, 128, 128, 32768, AH_DTYPE_BF16, 0, 0, 0,
         0},
        {"qwen3-8b.json", "qwen3", rep("g", 36), 3, 32, 8, 128, 128, 0, AH_DTYPE_BF16, 0, 0, 0, 0},
        {"mistral-7b-v0.1.json", "mistral", rep("W", 32), 9, 32, 8, 128, 128, 4096, AH_DTYPE_BF16,
         0, 0, 0, 0},
        {"mixtral-8x7b.json", "mixtral", rep("g", 32), 9, 32, 8, 128, 128, 0, AH_DTYPE_BF16, 0, 0,
         0, 0},
        {"phi-3-mini-4k.json", "Phi-3-mini-4k-instruct", rep("W", 32), 0, 32, 32, 96, 96, 2047,
         AH_DTYPE_BF16, 0, 0, 0, 0},
        {"gemma-2-9b.json", "gemma2", rep("Wg", 21), 0, 16, 8, 256, 256, 4096, AH_DTYPE_FP32, 50,
         0.0625f, 0, 0},
        {"gemma-3-12b.json", "gemma3", g3, 5, 16, 8, 256, 256, 0, AH_DTYPE_BF16, 0, 0.0625f, 0, 0},
        {"gpt-oss-120b.json", "gpt_oss", rep("Wg", 18), 0, 64, 8, 64, 64, 128, AH_DTYPE_BF16, 0, 0,
         1, 0},
        {"deepseek-v3.json", "deepseek_v3", rep("g", 61), 60, 128, 1, 576, 512, 0, AH_DTYPE_BF16, 0,
         (float)ds_scale, 0, 1},
        {"whisper-large-v3.json", "whisper-large-v3", whisper, 33, 20, 20, 64, 64, 0, AH_DTYPE_FP16,
         0, 0, 0, 0},
        {"bert-base-uncased.json", "bert", rep("B", 12), 11, 12, 12, 64, 64, 0, AH_DTYPE_FP32, 0, 0,
         0, 0},
        {"jamba-v0.1.json", "jamba", jamba, 12, 32, 8, 128, 128, 0, AH_DTYPE_BF16, 0, 0, 0, 0},
        {"qwen3-next-80b-a3b.json", "qwen3_next", qnext, 47, 16, 2, 256, 256, 0, AH_DTYPE_BF16, 0,
         0, 0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const hf_case *e = &cases[c];
        ah_error err = {""};
        ah_model *m = import_file(e->file, NULL, &err);
        CHECK_MSG(m != NULL, "%s: %s", e->file, err.msg);
        if (!m) continue;
        uint32_t n = ah_model_num_layers(m);
        for (uint32_t i = 0; i < n && i < sizeof pat - 1; i++) pat[i] = layer_char(m, i);
        pat[n < sizeof pat - 1 ? n : sizeof pat - 1] = '\0';
        CHECK_MSG(!strcmp(pat, e->pattern), "%s: layers %s, expected %s", e->file, pat, e->pattern);
        CHECK_STREQ(ah_model_name(m), e->name);
        const ah_layer_spec *s = ah_model_layer(m, e->layer);
        CHECK_MSG(s->num_q_heads == e->q && s->num_kv_heads == e->kv, "%s: heads %u/%u", e->file,
                  s->num_q_heads, s->num_kv_heads);
        CHECK_MSG(s->qk_head_size == e->qk && s->v_head_size == e->v, "%s: qk %u v %u", e->file,
                  s->qk_head_size, s->v_head_size);
        CHECK_MSG(s->sliding_window == e->window, "%s: window %u", e->file, s->sliding_window);
        CHECK_MSG(s->q_dtype == e->dtype && s->kv_dtype == AH_DTYPE_AUTO, "%s: dtype %d", e->file,
                  s->q_dtype);
        CHECK_MSG(s->softcap == e->softcap, "%s: softcap %g", e->file, s->softcap);
        CHECK_MSG(fabsf(s->scale - e->scale) < 1e-7f, "%s: scale %.9g, expected %.9g", e->file,
                  s->scale, e->scale);
        CHECK_MSG(s->use_sinks == e->sinks && s->use_mla == e->mla && !s->use_alibi, "%s: flags",
                  e->file);
        CHECK(s->block_size == 16);
        round_trip(m);
        ah_model_destroy(m);
    }
    /* the shipped DeepSeek example's scale, to the digit it is written with */
    CHECK(fabs(ds_scale - 0.13523377) < 1e-8);

    /* transformers 5 saves rope_scaling as rope_parameters: the same
     * mscale; sizes other than DeepSeek's (the e2e tiny model's) */
    static const char *ds5 =
        "{\"model_type\": \"deepseek_v3\", \"num_hidden_layers\": 3, \"num_attention_heads\": 4, "
        "\"kv_lora_rank\": 64, \"qk_rope_head_dim\": 32, \"qk_nope_head_dim\": 48, "
        "\"v_head_dim\": 40, \"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 10000.0, "
        "\"factor\": 4.0, \"mscale_all_dim\": 1.0}}";
    ah_model *m5 = NULL;
    ah_error err5 = {""};
    CHECK_MSG(ah_model_import_hf(ds5, "ds5.json", &m5, &err5) == AH_OK, "%s", err5.msg);
    if (m5) {
        const ah_layer_spec *s = ah_model_layer(m5, 2);
        const double want = pow(0.1 * log(4.0) + 1.0, 2) / sqrt(80.0);
        CHECK(s->use_mla && s->num_q_heads == 4 && s->num_kv_heads == 1);
        CHECK(s->qk_head_size == 96 && s->v_head_size == 64);
        CHECK_MSG(fabsf(s->scale - (float)want) < 1e-7f, "scale %.9g, expected %.9g", s->scale,
                  want);
        /* beside it the ragged prefill form (ABI 2.3): non-absorbed
         * qk_nope + rope / v_head_dim, a KV head per query head, the
         * same scale */
        const ah_layer_spec *r = ah_model_layer_ragged(m5, 2);
        CHECK(r && ah_spec_ragged(r) && !r->use_mla && r->num_q_heads == 4 && r->num_kv_heads == 4);
        CHECK(r && r->qk_head_size == 80 && r->v_head_size == 40 && r->scale == s->scale);
        ah_model_destroy(m5);
    }

    /* options: tensor parallel, dtype, block size, name */
    ah_hf_import_options o = {
        sizeof o, AH_DTYPE_FP16, AH_DTYPE_FP8_E4M3, 64, 8, "l3-70b-tp8", 0, 0, AH_HF_KV_GROUPS_ONE};
    ah_error err = {""};
    ah_model *m = import_file("llama-3-70b.json", &o, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (m) {
        const ah_layer_spec *s = ah_model_layer(m, 0);
        CHECK(s->num_q_heads == 8 && s->num_kv_heads == 1 && s->q_dtype == AH_DTYPE_FP16);
        CHECK(s->kv_dtype == AH_DTYPE_FP8_E4M3 && s->block_size == 64);
        CHECK_STREQ(ah_model_name(m), "l3-70b-tp8");
        ah_model_destroy(m);
    }
    o.tensor_parallel = 16; /* 8 KV heads over 16 ranks: replicated, 1 each */
    o.name = NULL;
    m = import_file("llama-3-70b.json", &o, &err);
    CHECK(m && ah_model_layer(m, 0)->num_q_heads == 4 && ah_model_layer(m, 0)->num_kv_heads == 1);
    ah_model_destroy(m);
    o.tensor_parallel = 3;
    CHECK(import_file("llama-3-70b.json", &o, &err) == NULL);
    CHECK_STREQ(
        err.msg,
        "llama-3-70b.json: num_attention_heads = 64 is not a multiple of tensor_parallel = 3");

    /* Llama 4: chunked layers refused, or plain causal layers for an engine
     * that runs them as virtual batches */
    CHECK(import_file("llama-4-scout.json", NULL, &err) == NULL);
    CHECK_STREQ(
        err.msg,
        "llama-4-scout.json: text_config.attention_chunk_size = 8192: 36 layers (the first "
        "is layer 0) use chunked local attention, which no layer spec describes (a chunk is "
        "not a sliding window); an engine that runs them as one-chunk virtual batches "
        "(vLLM) imports them as plain causal layers with chunked_virtual_batches "
        "(--chunked-virtual-batches)");
    ah_hf_import_options v = {sizeof v, .chunked_virtual_batches = 1};
    m = import_file("llama-4-scout.json", &v, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (m) {
        CHECK(ah_model_num_layers(m) == 48);
        const ah_layer_spec *s = ah_model_layer(m, 3);
        CHECK(s->num_q_heads == 40 && s->num_kv_heads == 8 && s->qk_head_size == 128 &&
              !s->sliding_window);
        CHECK(s->q_dtype == AH_DTYPE_BF16);
        ah_model_destroy(m);
    }
}

/* ---------------------------------------------------------------------------
 * Hugging Face import: KV-cache groups (kv_groups = HYBRID)
 * ------------------------------------------------------------------------ */

/* Per layer: its kv_group as a digit (0-9, then a-z), '.' for layers
 * without a cache (not attention, cacheless). */
static void group_pattern(const ah_model *m, char *out, size_t cap)
{
    uint32_t n = ah_model_num_layers(m), i = 0;
    for (; i < n && i + 1 < cap; i++) {
        const ah_layer_spec *s = ah_model_layer(m, i);
        uint32_t g = s->kv_group;
        out[i] = ah_model_layer_kind(m, i) != AH_LAYER_ATTENTION || ah_spec_cacheless(s) ? '.'
                 : g < 10 ? (char)('0' + g)
                          : (char)('a' + g - 10);
    }
    out[i] = '\0';
}

static void hf_groups(void)
{
    char g3[64], q2swa[64], jamba[64], qnext[64], whisper[128], l4[64];
    snprintf(g3, sizeof g3, "%s", rep("000001", 8));
    snprintf(q2swa, sizeof q2swa, "%s%s", rep("0", 21), rep("1", 7));
    snprintf(jamba, sizeof jamba, "%s", rep("....0...", 4));
    snprintf(qnext, sizeof qnext, "%s", rep("...0", 12));
    snprintf(whisper, sizeof whisper, "%s%s", rep(".", 32), rep("01", 32));
    snprintf(l4, sizeof l4, "%s", rep("0001", 12)); /* chunked RoPE layers, global NoPE layers */
    static const struct {
        const char *file;
        uint32_t groups;
    } counts[] = {
        {"gemma-2-9b.json", 2},   {"gemma-3-12b.json", 2},        {"gpt-oss-120b.json", 2},
        {"qwen2-7b-swa.json", 2}, {"mistral-7b-v0.1.json", 1},    {"llama-3-70b.json", 1},
        {"deepseek-v3.json", 1},  {"whisper-large-v3.json", 2},   {"bert-base-uncased.json", 1},
        {"jamba-v0.1.json", 1},   {"qwen3-next-80b-a3b.json", 1},
    };
    const char *want[] = {rep("01", 21), g3,      rep("01", 18), q2swa, rep("0", 32), rep("0", 80),
                          rep("0", 61),  whisper, rep(".", 12),  jamba, qnext};
    ah_hf_import_options o = {sizeof o, .kv_groups = AH_HF_KV_GROUPS_HYBRID};
    char pat[128];
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
        ah_error err = {""};
        ah_model *m = import_file(counts[c].file, &o, &err);
        CHECK_MSG(m != NULL, "%s: %s", counts[c].file, err.msg);
        if (!m) continue;
        CHECK_MSG(ah_model_num_kv_groups(m) == counts[c].groups, "%s: %u groups", counts[c].file,
                  ah_model_num_kv_groups(m));
        group_pattern(m, pat, sizeof pat);
        CHECK_MSG(!strcmp(pat, want[c]), "%s: groups %s, expected %s", counts[c].file, pat,
                  want[c]);
        round_trip(m); /* kv_group survives INI text */
        ah_model_destroy(m);
        /* the default, and options of the layout before kv_groups (its
         * struct_size takes in the tail padding where reserved now lies,
         * here filled with garbage), keep one group */
        typedef struct {
            uint32_t struct_size;
            ah_dtype dtype, kv_dtype;
            uint32_t block_size, tensor_parallel;
            const char *name;
            int chunked_virtual_batches;
        } opts_2_1;
        ah_hf_import_options old;
        memset(&old, 0xff, sizeof old);
        opts_2_1 o21 = {sizeof o21, AH_DTYPE_AUTO, AH_DTYPE_AUTO, 0, 0, NULL, 0};
        memcpy(&old, &o21, sizeof o21);
        ah_model *one = import_file(counts[c].file, c % 2 ? NULL : &old, &err);
        CHECK_MSG(one && ah_model_num_kv_groups(one) == 1, "%s: default groups: %s", counts[c].file,
                  err.msg);
        ah_model_destroy(one);
    }
    /* gemma-2: the windowed layers (0, 2, ...) are group 0, the global
     * layers group 1; a block size applies to both */
    o.block_size = 32;
    ah_error err = {""};
    ah_model *m = import_file("gemma-2-9b.json", &o, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (m) {
        CHECK(ah_model_layer(m, 0)->sliding_window == 4096 && ah_model_layer(m, 0)->kv_group == 0);
        CHECK(ah_model_layer(m, 1)->sliding_window == 0 && ah_model_layer(m, 1)->kv_group == 1);
        CHECK(ah_model_layer(m, 41)->block_size == 32 && ah_model_layer(m, 41)->kv_group == 1);
        char *text = NULL;
        CHECK(ah_model_to_ini(m, &text) == AH_OK);
        CHECK_CONTAINS(text, "kv_group = 1");
        ah__free(text);
        ah_model_destroy(m);
    }
    /* Llama 4 under virtual batches: chunked local layers and the global
     * NoPE layers are different groups (vLLM's chunked local attention
     * spec), though both are plain causal layers here */
    o.block_size = 0;
    o.chunked_virtual_batches = 1;
    m = import_file("llama-4-scout.json", &o, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (m) {
        CHECK(ah_model_num_kv_groups(m) == 2);
        group_pattern(m, pat, sizeof pat);
        CHECK_MSG(!strcmp(pat, l4), "llama-4-scout: groups %s, expected %s", pat, l4);
        ah_model_destroy(m);
    }
    /* Gemma 2 with layer_types that start global: group 0 is the first
     * layer's class, whichever it is */
    static const char *gl =
        "{\"model_type\": \"gemma2\", \"num_hidden_layers\": 4, \"num_attention_heads\": 8, "
        "\"num_key_value_heads\": 4, \"head_dim\": 64, \"query_pre_attn_scalar\": 64, "
        "\"sliding_window\": 128, \"layer_types\": [\"full_attention\", \"sliding_attention\", "
        "\"sliding_attention\", \"full_attention\"]}";
    CHECK(ah_model_import_hf_opts(gl, "g.json", &o, &m, &err) == AH_OK);
    if (m) {
        group_pattern(m, pat, sizeof pat);
        CHECK_STREQ(pat, "0110");
        ah_model_destroy(m);
    }
}

typedef struct bad_json {
    const char *text, *msg;
} bad_json;

#define LLAMA "\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"hidden_size\": 256"

/* The model's name: the last part of _name_or_path where it makes a model
 * name (one that reads back from ah_model_to_ini's description), else
 * model_type. */
static void hf_names(void)
{
    static const struct {
        const char *name_or_path, *name;
    } cases[] = {
        {"meta-llama/Meta-Llama-3-8B", "Meta-Llama-3-8B"},
        {"/models/local/", "/models/local/"},
        {"org/has;semicolon", "llama"},
        {"org/ends-in-space ", "llama"},
        {"org/x123456789x123456789x123456789x123456789x123456789x123456789x123456789x123456789"
         "x123456789x123456789x123456789x123456789x12345678",
         "llama"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "{" LLAMA ", \"num_attention_heads\": 8, \"_name_or_path\": \"%s\"}",
                 cases[i].name_or_path);
        ah_model *m = NULL;
        ah_error err = {""};
        CHECK_MSG(ah_model_import_hf(text, "c.json", &m, &err) == AH_OK, "%s", err.msg);
        if (!m) continue;
        CHECK_STREQ(ah_model_name(m), cases[i].name);
        round_trip(m);
        ah_model_destroy(m);
    }
}

static void hf_refusals(void)
{
    static const bad_json bad[] = {
        {"{\"model_type\": \"llama\",", "c.json: not valid JSON: the text ends early"},
        {"{\"model_type\": \"llama\"]",
         "c.json: not valid JSON at offset 22: object value separator ',' expected"},
        {"{} x", "c.json: not valid JSON: text after the object at offset 3"},
        {"[1, 2]", "c.json: not a config.json: the top level is [1,2], not an object"},
        {"{\"num_hidden_layers\": 2}",
         "c.json: model_type: not set (required: it names the model family)"},
        {"{\"model_type\": \"rwkv\"}",
         "c.json: model_type = \"rwkv\": not a model type the importer knows (llama, mistral, mixtral, phi3, "
         "qwen2, qwen2_moe, qwen3, qwen3_moe, gemma2, gemma3_text, gpt_oss, deepseek_v2, deepseek_v3, whisper, "
         "bert, roberta, xlm-roberta, jamba, qwen3_next, llama4_text, llama4, gemma3)"},
        {"{" LLAMA "}", "c.json: num_attention_heads: not set (required for model_type llama)"},
        {"{" LLAMA ", \"num_attention_heads\": 32, \"num_key_value_heads\": 6}",
         "c.json: num_attention_heads = 32 is not a multiple of num_key_value_heads = 6"},
        {"{" LLAMA ", \"num_attention_heads\": 3}",
         "c.json: hidden_size = 256 is not a multiple of num_attention_heads = 3 (and head_dim is not set)"},
        {"{" LLAMA ", \"num_attention_heads\": \"8\"}",
         "c.json: num_attention_heads = \"8\": not a whole number"},
        {"{" LLAMA ", \"num_attention_heads\": 8, \"torch_dtype\": \"int8\"}",
         "c.json: torch_dtype = \"int8\": not a dtype the importer knows (bfloat16, float16, float32); give "
         "one (--dtype)"},
        {"{" LLAMA ", \"num_attention_heads\": 8, \"sliding_window\": 4096}",
         "c.json: sliding_window = 4096 changes attention, and the llama importer does not understand it"},
        {"{" LLAMA ", \"num_attention_heads\": 8, \"attention_multiplier\": 0.015625}",
         "c.json: attention_multiplier = 0.015625 changes attention, and the llama importer does not "
         "understand it"},
        {"{\"model_type\": \"mistral\", \"num_hidden_layers\": 2, \"hidden_size\": 256, \"num_attention_heads\": 8, "
         "\"sliding_window\": 64, \"layer_types\": [\"full_attention\", \"swa\"]}",
         "c.json: layer_types[1] = \"swa\": not a layer type the importer knows for model_type mistral "
         "(full_attention, sliding_attention)"},
        {"{\"model_type\": \"gpt_oss\", \"num_hidden_layers\": 2, \"head_dim\": 64, \"num_attention_heads\": 8, "
         "\"layer_types\": [\"sliding_attention\", \"full_attention\"]}",
         "c.json: layer_types[0] = \"sliding_attention\" but sliding_window is not set"},
        {"{\"model_type\": \"gpt_oss\", \"num_hidden_layers\": 3, \"head_dim\": 64, \"num_attention_heads\": 8, "
         "\"sliding_window\": 128, \"layer_types\": [\"sliding_attention\", \"full_attention\"]}",
         "c.json: layer_types has 2 entries, num_hidden_layers = 3"},
        {"{\"model_type\": \"deepseek_v3\", \"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
         "\"kv_lora_rank\": 512, \"qk_rope_head_dim\": 64, \"v_head_dim\": 128}",
         "c.json: qk_nope_head_dim: not set (required for model_type deepseek_v3)"},
        {"{\"model_type\": \"bert\", \"num_hidden_layers\": 2, \"hidden_size\": 256, \"num_attention_heads\": 4, "
         "\"position_embedding_type\": \"relative_key\"}",
         "c.json: position_embedding_type = \"relative_key\": relative position scores are added inside "
         "attention, which no layer spec describes (only \"absolute\")"},
        {"{\"model_type\": \"gemma3\"}",
         "c.json: text_config: not set (required for model_type gemma3)"},
        {"{\"model_type\": \"gemma3\", \"text_config\": {\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
         "\"alibi\": true}}",
         "c.json: text_config.alibi = true changes attention, and the gemma3_text importer does not "
         "understand it"},
        {"{\"model_type\": \"jamba\", \"num_hidden_layers\": 8, \"hidden_size\": 256, \"num_attention_heads\": 4, "
         "\"attn_layer_period\": 4, \"attn_layer_offset\": 4}",
         "c.json: attn_layer_offset = 4 must be below attn_layer_period = 4"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ah_model *m = (ah_model *)&m;
        ah_error err = {""};
        long live = ah__alloc_live();
        CHECK_MSG(ah_model_import_hf(bad[i].text, "c.json", &m, &err) == AH_ERR_CONFIG, "case %zu",
                  i);
        CHECK(m == NULL);
        CHECK_STREQ(err.msg, bad[i].msg);
        CHECK_MSG(ah__alloc_live() == live, "case %zu leaked", i);
    }
    ah_model *m = NULL;
    ah_error err;
    CHECK(ah_model_import_hf(NULL, "c.json", &m, &err) == AH_ERR_INVALID_ARGUMENT);
    ah_hf_import_options small = {.struct_size = 4};
    CHECK(ah_model_import_hf_opts("{}", "c.json", &small, &m, &err) == AH_ERR_ABI);
    CHECK_CONTAINS(err.msg, "ah_hf_import_options.struct_size 4 is too small");
    ah_hf_import_options range = {.struct_size = sizeof range, .kv_groups = 2};
    CHECK(ah_model_import_hf_opts("{}", "c.json", &range, &m, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK_STREQ(err.msg, "c.json: kv_groups = 2 is not an ah_hf_kv_groups (0 one, 1 hybrid)");
}

/* The causal flag (ABI 2.1) goes through C, INI text and back. */
static void causal_flag(void)
{
    ah_layer_spec l[2] = {gqa(8, 2, 64), gqa(8, 2, 64)};
    l[1].causal = AH_CAUSAL_OFF;
    ah_model_desc d = {sizeof d, "prefix-lm", 2, l, NULL, NULL};
    ah_model *m = NULL;
    ah_error err = {""};
    CHECK_MSG(ah_model_create(&d, &m, &err) == AH_OK, "%s", err.msg);
    if (m) {
        CHECK(ah_model_layer(m, 0)->causal == AH_CAUSAL_BY_TYPE &&
              ah_model_layer(m, 1)->causal == AH_CAUSAL_OFF);
        round_trip(m);
        ah_model_destroy(m);
    }
    l[1].attn_type = AH_ATTN_ENCODER_ONLY;
    l[1].causal = AH_CAUSAL_ON;
    CHECK(ah_model_create(&d, &m, &err) == AH_ERR_CONFIG && !m);
    CHECK_CONTAINS(err.msg, "causal = true applies only to decoder layers");
}

int main(void)
{
    create();
    causal_flag();
    kinds();
    kinds_bound();
    if (ah_model_import_available()) {
        hf_families();
        hf_groups();
        hf_refusals();
        hf_names();
    } else {
        ah_model *m = NULL;
        ah_error err;
        CHECK(ah_model_import_hf("{}", "c.json", &m, &err) == AH_ERR_UNSUPPORTED);
        printf("test_model_import: built without json-c, the importer's tests skipped\n");
    }
    return check_report("test_model_import");
}
