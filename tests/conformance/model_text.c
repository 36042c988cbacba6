/*
 * One-layer model descriptions for the cases: the suite reaches the host
 * only through its public API, so each case is spelled as the INI text an
 * engine author would write and parsed by ah_model_parse.
 */
#include <stdio.h>
#include <stdlib.h>

#include <attnhost/plugin_util.h>

#include "suite.h"

/* The model: num_layers layers of spec s, then extra (more keys). */
static char *model_text(const ah_layer_spec *s, uint32_t num_layers, const char *extra)
{
    size_t cap = 1536;
    char *t = malloc(cap);
    if (!t) return NULL;
    int n = snprintf(t, cap,
                     "[model]\n"
                     "name = conformance\n"
                     "num_layers = %u\n"
                     "\n"
                     "[layers.*]\n"
                     "attn_type = %s\n"
                     "num_q_heads = %u\n"
                     "num_kv_heads = %u\n"
                     "qk_head_size = %u\n"
                     "v_head_size = %u\n"
                     "dtype = %s\n"
                     "kv_dtype = %s\n"
                     "block_size = %u\n"
                     "kv_layout = %s\n"
                     "sliding_window = %u\n"
                     "softcap = %.9g\n"
                     "scale = %.9g\n"
                     "mla = %s\n"
                     "sinks = %s\n"
                     "alibi = %s\n"
                     "fp8_attention = %s\n"
                     "kv_scales = %s\n"
                     "q_scale = %s\n"
                     "%s%s",
                     num_layers, ah_attn_type_str(s->attn_type), s->num_q_heads, s->num_kv_heads,
                     s->qk_head_size, s->v_head_size, ah_dtype_name(s->q_dtype),
                     ah_dtype_name(s->kv_dtype), s->block_size, ah_kv_layout_str(s->kv_layout),
                     s->sliding_window, (double)s->softcap, (double)s->scale,
                     s->use_mla ? "true" : "false", s->use_sinks ? "true" : "false",
                     s->use_alibi ? "true" : "false", s->fp8_attention ? "true" : "false",
                     ah_kv_scales_str(ah_spec_kv_scales(s)), ah_spec_q_scale(s) ? "true" : "false",
                     s->causal == AH_CAUSAL_OFF  ? "causal = false\n"
                     : s->causal == AH_CAUSAL_ON ? "causal = true\n"
                                                 : "",
                     extra);
    if (n < 0 || (size_t)n >= cap) {
        free(t);
        return NULL;
    }
    return t;
}

char *ah__conf_model_text(const ah_layer_spec *s) { return model_text(s, 1, ""); }

char *ah__conf_model_text_ragged(const ah__conf_case *c)
{
    char extra[160];
    int n = snprintf(extra, sizeof extra, "ragged_prefill = true\n");
    if (c->spec.use_mla)
        n += snprintf(extra + n, sizeof extra - (size_t)n,
                      "qk_nope_head_dim = %u\nv_head_dim = %u\n", c->ragged_nope, c->ragged_v);
    return model_text(&c->spec, 1, extra);
}
