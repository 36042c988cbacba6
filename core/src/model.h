/*
 * Model descriptions: per-layer attention specs from an INI file.
 */
#ifndef AH_MODEL_H
#define AH_MODEL_H

#include <attnhost/attnhost.h>

struct ah_model {
    char *name;
    uint32_t num_layers;
    ah_layer_spec *layers;  /* kv_dtype/kv_layout may be AUTO */
};

/* Every model-description key with its documentation and default, as a
 * commented INI (for docs/configuration.md); *text is malloc'ed. */
ah_status ah__model_keys_dump(char **text);

#endif
