/*
 * Fuzz target: model descriptions (ah_model_parse).
 *
 * Properties beyond "no crash, no leak": a failure says why and returns no
 * model; a success describes layers a plugin can be handed without further
 * checks (fuzz_layer.h).
 */
#include "fuzz_common.h"
#include "fuzz_layer.h"

#include "alloc.h"
#include <attnhost/attnhost.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fz_text(data, size);
    long live0 = ah__alloc_live();
    ah_model *m = (ah_model *)1;
    ah_error err;
    memset(&err, 0, sizeof err);
    ah_status s = ah_model_parse(text, "<fuzz>", &m, &err);
    if (s != AH_OK) {
        FZ_ASSERT(m == NULL, "failed parse returned a model");
        FZ_ASSERT(err.msg[0] != '\0', "status %d without a message", (int)s);
        FZ_ASSERT(s == AH_ERR_CONFIG || s == AH_ERR_OUT_OF_MEMORY, "unexpected status %d: %s",
                  (int)s, err.msg);
    } else {
        /* "name =" (empty) is accepted today: reported, not held here */
        FZ_ASSERT(m && ah_model_name(m), "model without a name");
        uint32_t n = ah_model_num_layers(m);
        FZ_ASSERT(n >= 1, "model with no layers");
        for (uint32_t i = 0; i < n; i++) fz_check_layer(ah_model_layer(m, i), i);
        FZ_ASSERT(ah_model_layer(m, n) == NULL, "layer past the end");
        ah_model_destroy(m);
    }
    FZ_ASSERT(ah__alloc_live() == live0, "%ld blocks left after %s", ah__alloc_live() - live0,
              s == AH_OK ? "destroy" : "a failed parse");
    free(text);
    return 0;
}
