/*
 * Plugin configuration keys: a plugin declares its [plugin.<name>] keys in
 * its descriptor (ah_config_key); this module parses a value against a
 * declaration. The host validates every configured value at creation, the
 * typed getters of the host services answer from the same parse, and
 * descriptor validation checks each default with it, so a value means the
 * same thing wherever it is read.
 */
#ifndef AH_PLUGIN_KEYS_H
#define AH_PLUGIN_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include <attnhost/plugin.h>

typedef struct ah_plugin_value {
    int64_t i; /* BOOL 0/1, INT, ENUM index */
    double f;  /* FLOAT, INT */
} ah_plugin_value;

/* Parse text as key's type. Returns 0, or -1 with the problem in msg
 * ("'7x' is not an integer in 1..64"). */
int ah__plugin_key_parse(const ah_config_key *key, const char *text, ah_plugin_value *out,
                         char *msg, size_t cap);

/* Whether two parsed values of key mean the same: "on" and "true", "8" and
 * "08", "0.5" and "5e-1" do; STRING compares the texts ta and tb. */
int ah__plugin_value_equal(const ah_config_key *key, const ah_plugin_value *a, const char *ta,
                           const ah_plugin_value *b, const char *tb);

/* The row of keys[0..n) named name, or NULL. */
const ah_config_key *ah__plugin_key_find(const ah_config_key *keys, uint32_t n, const char *name);

/* "integer 1..64", "one of auto|on|off", ... for messages and docs. */
void ah__plugin_key_describe(const ah_config_key *key, char *buf, size_t cap);

/* Text name of a key type ("bool", "int", ...). */
const char *ah__plugin_key_type_str(ah_key_type t);

#endif
