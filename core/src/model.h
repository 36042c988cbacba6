/*
 * Model descriptions: per-layer attention specs from an INI file, from C
 * (ah_model_create) or from a Hugging Face config.json (model_import_hf.c).
 * Every path checks its layers with ah__model_layer_check.
 */
#ifndef AH_MODEL_H
#define AH_MODEL_H

#include <attnhost/attnhost.h>

struct ah_model {
    char *name;
    uint32_t num_layers;
    ah_layer_spec *layers; /* kv_dtype/kv_layout may be AUTO; zeros for
                              non-attention layers */
    ah_layer_kind *kinds;
    ah_layer_spec *ragged;  /* per layer, its ragged prefill form (ragged_kv =
                               1); struct_size 0 where it has none */
    uint32_t num_kv_groups; /* 1 + the largest kv_group of a cache layer (1 without any) */
};

/* ah_model_to_ini, and on AH_ERR_INTERNAL (the text would not read back
 * as m: a bug) what differs in why (cap 0: not said). */
ah_status ah__model_to_ini(const ah_model *m, char **text, char *why, size_t cap);

/* The model-description keys, in model_keys.def order (K_name, ...). */
enum {
#define AH_MODEL_KEY(scope, key, type, arg, def, doc) AH_MK_##key,
#include "model_keys.def"
#undef AH_MODEL_KEY
    AH_MK_COUNT
};

/* The name of key k ("num_q_heads"). */
const char *ah__model_key_name(int k);

/* Check one resolved layer (num_kv_heads and the head sizes filled in; a
 * zero means "not set"), whatever it came from. On a fault returns
 * AH_ERR_CONFIG, writes the message (without a prefix) into msg and the
 * keys at fault into keys[0] and keys[1] (AH_MK_* or -1), the INI path
 * naming the line of the later one. A non-attention layer is always fine. */
ah_status ah__model_layer_check(const ah_layer_spec *s, ah_layer_kind kind, char *msg, size_t cap,
                                int keys[2]);

/* The ragged prefill form of a paged layer (ah_model_layer_ragged): MLA
 * non-absorbed over qk_nope + rope / v_head_dim with as many KV heads as
 * query heads, else the layer's own heads and sizes; everything that is
 * not about the cache is the layer's (the scale resolved, so both forms
 * compute the same softmax). qk_nope and v_dim matter for MLA only. */
void ah__model_ragged_form(const ah_layer_spec *paged, uint32_t qk_nope, uint32_t v_dim,
                           ah_layer_spec *out);

/* Check a layer's ragged form against its paged form (a zero struct_size:
 * none, fine). AH_ERR_CONFIG with the message (no prefix) in msg. */
ah_status ah__model_ragged_check(const ah_layer_spec *paged, const ah_layer_spec *ragged, char *msg,
                                 size_t cap);

/* The model-wide check of KV-cache groups, after every layer passed
 * ah__model_layer_check: groups numbered without gaps, and a group's
 * cache layers agree in block size (they share one block table) and, in a
 * model that declares groups (a kv_group above 0), in KV dtype (AUTO read
 * as the query dtype) and KV layout (AUTO agrees with either; the binding
 * checks the resolved layouts). A model without groups keeps mixing KV
 * dtypes and layouts as before. Sets m->num_kv_groups. On a fault returns
 * AH_ERR_CONFIG with the message (naming both layers, no prefix) in msg. */
ah_status ah__model_groups_check(ah_model *m, char *msg, size_t cap);

/* A model's name reads back from the description ah_model_to_ini writes:
 * 1 to AH_MODEL_NAME_MAX bytes, no control character, no space at either
 * end, no ';' or '#' (a description would read the rest as a comment).
 * NULL when name is one, else what is wrong ("is longer than 128 bytes"). */
#define AH_MODEL_NAME_MAX 128
const char *ah__model_name_problem(const char *name);

/* ah_model_create with source naming the model in messages instead of its
 * name ("config.json: layer 3: ..."). */
ah_status ah__model_create(const ah_model_desc *desc, const char *source, ah_model **out,
                           ah_error *err);

/* Every model-description key with its documentation and default, as a
 * commented INI (for docs/configuration.md); *text is malloc'ed. */
ah_status ah__model_keys_dump(char **text);

#endif
