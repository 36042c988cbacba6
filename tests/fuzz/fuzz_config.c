/*
 * Fuzz target: the INI configuration parser (ah__config_load from text),
 * and what a loaded configuration feeds: the effective dump and the
 * [plugin.<name>] key lookup.
 *
 * Properties beyond "no crash, no leak": a failed load leaves the config
 * empty and says why; a successful one dumps, and the dump of the values
 * in force parses again to the same dump (what `attnhost config --dump`
 * prints is a valid configuration).
 */
#include "fuzz_common.h"

#include "alloc.h"
#include "config.h"
#include "inifile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fz_text(data, size);
    long live0 = ah__alloc_live();
    ah_config cfg;
    ah_error err;
    memset(&err, 0, sizeof err);
    ah_status s = ah__config_load(&cfg, NULL, text, "<fuzz>", &err);
    if (s != AH_OK) {
        FZ_ASSERT(err.msg[0] != '\0', "status %d without a message", (int)s);
        FZ_ASSERT(s == AH_ERR_CONFIG || s == AH_ERR_OUT_OF_MEMORY || s == AH_ERR_IO,
                  "unexpected status %d: %s", (int)s, err.msg);
        FZ_ASSERT(ah__alloc_live() == live0, "a failed load kept %ld blocks: %s",
                  ah__alloc_live() - live0, err.msg);
        free(text);
        return 0;
    }
    for (uint32_t i = 0; i < cfg.n_plugin_keys; i++) {
        const ah_plugin_kv *kv = &cfg.plugin_keys[i];
        FZ_ASSERT(ah__config_plugin_key(&cfg, kv->plugin, kv->key) != NULL,
                  "[plugin.%s] %s parsed but not found", kv->plugin, kv->key);
    }
    char *dump = NULL;
    if (ah__config_dump(&cfg, 1, &dump) != AH_OK) dump = NULL;
    if (dump) {
        ah_config again;
        ah_error err2;
        ah_status s2 = ah__config_load(&again, NULL, dump, "<fuzz>", &err2);
        FZ_ASSERT(s2 == AH_OK,
                  "the effective dump does not parse: %s\n--- input:\n%s\n--- dump:\n%s", err2.msg,
                  text, dump);
        char *dump2 = NULL;
        if (ah__config_dump(&again, 1, &dump2) == AH_OK) {
            FZ_ASSERT(strcmp(dump, dump2) == 0,
                      "dump is not stable\n--- first:\n%s\n--- second:\n%s", dump, dump2);
            ah__free(dump2);
        }
        ah__config_free(&again);
        ah__free(dump);
    }
    ah__config_free(&cfg);
    FZ_ASSERT(ah__alloc_live() == live0, "config_free left %ld blocks", ah__alloc_live() - live0);
    free(text);
    return 0;
}
