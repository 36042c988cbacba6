/*
 * Parsing plugin configuration values against their declarations (see
 * plugin_keys.h). The spellings accepted for booleans and numbers are the
 * same as for the host's own keys.
 */
#include "plugin_keys.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const type_names[AH_KEY_TYPE_COUNT] = {"bool", "int", "float", "enum", "string"};

const char *ah__plugin_key_type_str(ah_key_type t)
{
    return (unsigned)t < AH_KEY_TYPE_COUNT ? type_names[t] : "?";
}

const ah_config_key *ah__plugin_key_find(const ah_config_key *keys, uint32_t n, const char *name)
{
    for (uint32_t i = 0; keys && name && i < n; i++)
        if (keys[i].name && strcmp(keys[i].name, name) == 0) return &keys[i];
    return NULL;
}

void ah__plugin_key_describe(const ah_config_key *k, char *buf, size_t cap)
{
    switch (k->type) {
    case AH_KEY_BOOL: snprintf(buf, cap, "true or false"); break;
    case AH_KEY_INT:
        snprintf(buf, cap, "an integer in %lld..%lld", (long long)k->int_min,
                 (long long)k->int_max);
        break;
    case AH_KEY_FLOAT: snprintf(buf, cap, "a number in %g..%g", k->float_min, k->float_max); break;
    case AH_KEY_ENUM: snprintf(buf, cap, "one of %s", k->choices ? k->choices : ""); break;
    case AH_KEY_STRING: snprintf(buf, cap, "text of at most 255 bytes"); break;
    default: snprintf(buf, cap, "nothing (unknown key type %d)", (int)k->type); break;
    }
}

/* The index of text among choices "a|b|c", or -1. */
static int choice_index(const char *choices, const char *text)
{
    size_t n = strlen(text);
    int idx = 0;
    for (const char *c = choices; c && *c; idx++) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && n && strncmp(c, text, n) == 0) return idx;
        if (!bar) break;
        c = bar + 1;
    }
    return -1;
}

static int parse_bool(const char *t, int64_t *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no",
                                                                                "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(t, yes[i]) == 0) return *out = 1, 0;
        if (strcmp(t, no[i]) == 0) return *out = 0, 0;
    }
    return -1;
}

int ah__plugin_key_parse(const ah_config_key *k, const char *text, ah_plugin_value *out, char *msg,
                         size_t cap)
{
    char want[160];
    ah__plugin_key_describe(k, want, sizeof want);
    memset(out, 0, sizeof *out);
    if (!text) text = "";
    char *end = NULL;
    switch (k->type) {
    case AH_KEY_BOOL:
        if (parse_bool(text, &out->i) == 0) return 0;
        break;
    case AH_KEY_INT: {
        /* digits with an optional '-': no blanks, no '+' (as the host's keys) */
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if ((*text == '-' ? text[1] : *text) >= '0' && (*text == '-' ? text[1] : *text) <= '9' &&
            !*end && !errno && v >= k->int_min && v <= k->int_max) {
            out->i = v;
            out->f = (double)v;
            return 0;
        }
        break;
    }
    case AH_KEY_FLOAT: {
        errno = 0;
        double v = strtod(text, &end);
        if (*text && !isspace((unsigned char)*text) && !*end && !errno && isfinite(v) &&
            v >= k->float_min && v <= k->float_max) {
            out->f = v;
            return 0;
        }
        break;
    }
    case AH_KEY_ENUM: {
        int idx = choice_index(k->choices, text);
        if (idx >= 0) {
            out->i = idx;
            return 0;
        }
        break;
    }
    case AH_KEY_STRING:
        if (strlen(text) <= 255) return 0;
        break;
    default: break;
    }
    snprintf(msg, cap, "'%.64s' is not %s", text, want);
    return -1;
}

int ah__plugin_value_equal(const ah_config_key *k, const ah_plugin_value *a, const char *ta,
                           const ah_plugin_value *b, const char *tb)
{
    switch (k->type) {
    case AH_KEY_BOOL:
    case AH_KEY_INT:
    case AH_KEY_ENUM: return a->i == b->i;
    case AH_KEY_FLOAT: return a->f == b->f;
    default: return strcmp(ta ? ta : "", tb ? tb : "") == 0;
    }
}
