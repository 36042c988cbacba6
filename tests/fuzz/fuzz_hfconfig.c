/*
 * Fuzz target: the Hugging Face config.json importer
 * (ah_model_import_hf_opts), which reads whatever file an engine points it
 * at.
 *
 * The first input byte picks the options (tensor parallel 1, 2, 8 or 64;
 * one KV group or one per cache class; the config's dtype or bf16); the
 * rest is the JSON text. Properties beyond "no crash, no leak": a failure
 * says why and returns no model; a success describes layers a plugin can
 * be handed without further checks (fuzz_layer.h), and the model written
 * back as a description (ah_model_to_ini) parses to the same model: name,
 * layer kinds, every layer spec and ragged prefill form. A library built without json-c
 * refuses every input with AH_ERR_UNSUPPORTED and says why.
 */
#include "fuzz_common.h"
#include "fuzz_layer.h"

#include "alloc.h"
#include "model.h"
#include <attnhost/attnhost.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* m parsed back from its own description is the same model. */
static void hf_round_trip(const ah_model *m)
{
    char *text = NULL, why[512] = "";
    FZ_ASSERT(ah__model_to_ini(m, &text, why, sizeof why) == AH_OK && text,
              "an imported model's description: %s", why);
    ah__free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static const uint32_t tp[4] = {1, 2, 8, 64};
    ah_hf_import_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.tensor_parallel = tp[data[0] & 3];
    o.kv_groups = data[0] & 4 ? AH_HF_KV_GROUPS_HYBRID : AH_HF_KV_GROUPS_ONE;
    o.dtype = data[0] & 8 ? AH_DTYPE_BF16 : AH_DTYPE_AUTO;
    o.chunked_virtual_batches = (data[0] >> 4) & 1;
    char *text = fz_text(data + 1, size - 1);
    long live0 = ah__alloc_live();
    ah_model *m = (ah_model *)1;
    ah_error err;
    memset(&err, 0, sizeof err);
    ah_status s = ah_model_import_hf_opts(text, "<fuzz>", &o, &m, &err);
    if (!ah_model_import_available()) {
        FZ_ASSERT(s == AH_ERR_UNSUPPORTED && m == NULL && err.msg[0], "the stub accepted input");
    } else if (s != AH_OK) {
        FZ_ASSERT(m == NULL, "failed import returned a model");
        FZ_ASSERT(err.msg[0] != '\0', "status %d without a message", (int)s);
        FZ_ASSERT(s == AH_ERR_CONFIG || s == AH_ERR_OUT_OF_MEMORY, "unexpected status %d: %s",
                  (int)s, err.msg);
    } else {
        FZ_ASSERT(m && ah_model_name(m) && *ah_model_name(m), "model without a name");
        const uint32_t n = ah_model_num_layers(m);
        FZ_ASSERT(n >= 1, "model with no layers");
        for (uint32_t i = 0; i < n; i++)
            if (ah_model_layer_kind(m, i) == AH_LAYER_ATTENTION)
                fz_check_layer(ah_model_layer(m, i), i);
        FZ_ASSERT(ah_model_layer(m, n) == NULL, "layer past the end");
        hf_round_trip(m);
        ah_model_destroy(m);
    }
    FZ_ASSERT(ah__alloc_live() == live0, "%ld blocks left after %s", ah__alloc_live() - live0,
              s == AH_OK ? "destroy" : "a failed import");
    free(text);
    return 0;
}
