/*
 * attnhost model: model descriptions.
 *
 *   attnhost model import config.json [-o model.ini] [--dtype D]
 *          [--kv-dtype D] [--block-size N|auto] [--tp N] [--name NAME]
 *          [--chunked-virtual-batches] [--kv-groups one|hybrid]
 *       a Hugging Face config.json as a model description (stdout or -o)
 *   attnhost model show [--model M]
 *       the layers of a description, one line each, non-attention layers
 *       named by their kind
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "cli.h"

static int parse_dtype(const char *v, int allow_fp8, ah_dtype *out)
{
    for (int i = 1; i < (allow_fp8 ? AH_DTYPE_COUNT : AH_DTYPE_FP8_E4M3); i++)
        if (!strcmp(v, ah_dtype_name((ah_dtype)i))) {
            *out = (ah_dtype)i;
            return 0;
        }
    return -1;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "attnhost model import: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (size_t r; b && (r = fread(b + n, 1, cap - n - 1, f)) > 0;) {
        n += r;
        if (n + 1 == cap) {
            char *g = realloc(b, cap *= 2);
            if (!g) free(b);
            b = g;
        }
    }
    fclose(f);
    if (b) b[n] = '\0';
    else fprintf(stderr, "attnhost model import: out of memory\n");
    return b;
}

static int import(cli_common *c)
{
    const char *in = NULL, *outp = NULL;
    ah_hf_import_options o = {sizeof o, AH_DTYPE_AUTO,      AH_DTYPE_AUTO, 0, 0, NULL, 0,
                              0,        AH_HF_KV_GROUPS_ONE};
    for (int i = 1; i < c->argc; i++) {
        const char *a = c->argv[i];
        const char *v = i + 1 < c->argc ? c->argv[i + 1] : NULL;
        int takes = !strcmp(a, "-o") || !strcmp(a, "--dtype") || !strcmp(a, "--kv-dtype") ||
                    !strcmp(a, "--block-size") || !strcmp(a, "--tp") || !strcmp(a, "--name") ||
                    !strcmp(a, "--kv-groups");
        if (takes && !v) {
            fprintf(stderr, "attnhost model import: %s needs a value\n", a);
            return 2;
        }
        char *end = NULL;
        if (!strcmp(a, "-o")) outp = v;
        else if (!strcmp(a, "--name")) o.name = v;
        else if (!strcmp(a, "--dtype") && parse_dtype(v, 0, &o.dtype)) {
            fprintf(stderr, "attnhost model import: --dtype %s: one of fp32, fp16, bf16\n", v);
            return 2;
        } else if (!strcmp(a, "--kv-dtype") && parse_dtype(v, 1, &o.kv_dtype)) {
            fprintf(stderr,
                    "attnhost model import: --kv-dtype %s: one of fp32, fp16, bf16, fp8_e4m3, "
                    "fp8_e5m2, fp8_e4m3fnuz, fp8_e5m2fnuz\n",
                    v);
            return 2;
        } else if (!strcmp(a, "--block-size") && !strcmp(v, "auto")) {
            o.block_size = AH_BLOCK_SIZE_AUTO; /* the prefill winner's preferred size */
        } else if (!strcmp(a, "--block-size") || !strcmp(a, "--tp")) {
            unsigned long n = strtoul(v, &end, 10);
            if (*end || !n || n > 65536) {
                fprintf(stderr, "attnhost model import: %s %s: a whole number, 1..65536\n", a, v);
                return 2;
            }
            if (!strcmp(a, "--tp")) o.tensor_parallel = (uint32_t)n;
            else o.block_size = (uint32_t)n;
        } else if (!strcmp(a, "--kv-groups")) {
            if (!strcmp(v, "one")) o.kv_groups = AH_HF_KV_GROUPS_ONE;
            else if (!strcmp(v, "hybrid")) o.kv_groups = AH_HF_KV_GROUPS_HYBRID;
            else {
                fprintf(stderr, "attnhost model import: --kv-groups %s: one of one, hybrid\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--chunked-virtual-batches")) {
            o.chunked_virtual_batches = 1;
            continue;
        } else if (!takes && a[0] == '-') {
            fprintf(stderr, "attnhost model import: unknown option '%s'\n", a);
            return 2;
        } else if (!takes) {
            if (in) {
                fprintf(stderr, "attnhost model import: one config.json at a time\n");
                return 2;
            }
            in = a;
            continue;
        }
        i++; /* the value */
    }
    if (!in) {
        fprintf(
            stderr,
            "usage: attnhost model import config.json [-o model.ini] [--dtype D] [--kv-dtype D] "
            "[--block-size N|auto] [--tp N] [--name NAME] [--chunked-virtual-batches] "
            "[--kv-groups one|hybrid]\n");
        return 2;
    }
    if (!ah_model_import_available()) {
        fprintf(stderr,
                "attnhost model import: this libattnhost was built without json-c, so it cannot "
                "import a config.json (install libjson-c-dev and rebuild)\n");
        return 1;
    }
    char *text = read_file(in);
    if (!text) return 1;
    ah_model *m = NULL;
    ah_error err;
    ah_status s = ah_model_import_hf_opts(text, in, &o, &m, &err);
    free(text);
    if (s != AH_OK) {
        fprintf(stderr, "attnhost model import: %s\n", err.msg);
        return 1;
    }
    char *ini = NULL;
    s = ah_model_to_ini(m, &ini);
    if (s != AH_OK) {
        if (s == AH_ERR_INVALID_ARGUMENT)
            fprintf(stderr,
                    "attnhost model import: the model's name '%s' cannot stand in INI text (give "
                    "--name)\n",
                    ah_model_name(m));
        else
            fprintf(stderr,
                    "attnhost model import: internal error: the description of '%s' would not "
                    "read back as the imported model (%s); nothing written\n",
                    ah_model_name(m), ah_status_str(s));
        ah_model_destroy(m);
        return 1;
    }
    FILE *f = outp ? fopen(outp, "w") : stdout;
    int rc = 0;
    if (!f) {
        fprintf(stderr, "attnhost model import: %s: %s\n", outp, strerror(errno));
        rc = 1;
    } else {
        fprintf(f, "# Generated by `attnhost model import` from %s", in);
        if (o.tensor_parallel > 1)
            fprintf(f, " (one rank of tensor parallel %u)", o.tensor_parallel);
        if (ah_model_num_kv_groups(m) > 1)
            fprintf(f, " (%u KV-cache groups)", ah_model_num_kv_groups(m));
        fprintf(f, ".\n%s", ini);
        if (outp && fclose(f)) {
            fprintf(stderr, "attnhost model import: %s: %s\n", outp, strerror(errno));
            rc = 1;
        }
    }
    if (outp && !rc)
        fprintf(stderr, "attnhost model import: wrote %s (%u layers, %u KV-cache group%s)\n", outp,
                ah_model_num_layers(m), ah_model_num_kv_groups(m),
                ah_model_num_kv_groups(m) > 1 ? "s" : "");
    free(ini);
    ah_model_destroy(m);
    return rc;
}

static int show(cli_common *c)
{
    ah_model *m = cli_model(c);
    if (!m) return 1;
    uint32_t n = ah_model_num_layers(m);
    printf("model %s: %u layers\n", ah_model_name(m), n);
    for (uint32_t l = 0; l < n; l++) {
        ah_layer_kind k = ah_model_layer_kind(m, l);
        if (k != AH_LAYER_ATTENTION) {
            printf("%-6u %s layer: not attention\n", l, ah_layer_kind_str(k));
            continue;
        }
        const ah_layer_spec *s = ah_model_layer(m, l);
        printf("%-6u %s %u/%u heads qk %u v %u %s", l, ah_attn_type_str(s->attn_type),
               s->num_q_heads, s->num_kv_heads, s->qk_head_size, s->v_head_size,
               ah_dtype_name(s->q_dtype));
        if (s->sliding_window) printf(" window %u", s->sliding_window);
        if (s->softcap > 0) printf(" softcap %g", s->softcap);
        if (s->scale > 0) printf(" scale %.9g", s->scale);
        if (s->use_mla) printf(" mla");
        if (s->use_sinks) printf(" sinks");
        if (s->use_alibi) printf(" alibi");
        if (ah_model_num_kv_groups(m) > 1) printf(" kv_group %u", s->kv_group);
        printf("\n");
    }
    ah_model_destroy(m);
    return 0;
}

int cmd_model(cli_common *c)
{
    const char *sub = c->argc > 0 ? c->argv[0] : "";
    if (!strcmp(sub, "import")) return import(c);
    if (!strcmp(sub, "show")) return show(c);
    fprintf(stderr, "usage: attnhost model import config.json [-o model.ini] [options]\n"
                    "       attnhost model show [--model M]\n");
    return 2;
}
