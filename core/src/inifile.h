/*
 * INI reading shared by the configuration and model descriptions: a driver
 * over inih that knows line numbers and sections, and typed keys declared
 * in tables (config_keys.def, model_keys.def) that parse and print values.
 *
 * The driver feeds inih line by line through its stream interface, so it
 * knows the line of every key and section header without inih's optional
 * INI_HANDLER_LINENO build. It also strips indentation (inih would treat an
 * indented line as the continuation of the previous value) and refuses lines
 * inih would silently split (longer than AH_INI_MAX_LINE).
 */
#ifndef AH_INIFILE_H
#define AH_INIFILE_H

#include <stddef.h>
#include <stdint.h>

#include <attnhost/attnhost.h>

#include "strbuf.h"

/* Longest line (after indentation) inih reads whole: its buffer of 200 bytes
 * less '\r', '\n' and '\0'. */
#define AH_INI_MAX_LINE 197

typedef struct ah_ini_callbacks {
    void *user;
    /* A section header "[name]" on line. Return AH_OK, or write the problem
     * into msg and return AH_ERR_CONFIG (or AH_ERR_OUT_OF_MEMORY). */
    ah_status (*section)(void *user, const char *name, int line, char *msg, size_t cap);
    /* "key = value" on line inside section (already validated by section()). */
    ah_status (*key)(void *user, const char *section, const char *key, const char *value, int line,
                     char *msg, size_t cap);
} ah_ini_callbacks;

/* Parse path (read whole; text ignored) or else text. source names the input
 * in messages (NULL: path, or "<text>"). Stops at the first error and writes
 * "<source>:<line>: [<section>] <key>: <problem>" (or "... [<section>]:
 * <problem>" for a section, "<source>:<line>: <problem>" for syntax outside
 * sections) into err. Returns AH_OK, AH_ERR_CONFIG, AH_ERR_IO or
 * AH_ERR_OUT_OF_MEMORY. */
ah_status ah__ini_parse(const char *path, const char *text, const char *source,
                        const ah_ini_callbacks *cb, ah_error *err);

/* ---------------------------------------------------------------------------
 * Typed keys. A table row names a key, its type, where its value lives
 * (offset into the section's struct), its default as INI text and its doc.
 * ------------------------------------------------------------------------ */

typedef enum ah_ini_type {
    AH_INI_STRING, /* char *: any text, "" allowed */
    AH_INI_NAME,   /* char *: a plugin name, [a-z0-9_]+ */
    AH_INI_LIST,   /* ah_strlist: comma-separated, no empty entry */
    AH_INI_NAMES,  /* ah_strlist: comma-separated plugin names, none twice */
    AH_INI_ENUM,   /* int (an enum field): one of arg->choices */
    AH_INI_UINT,   /* uint32_t in [arg->min, arg->max] */
    AH_INI_FLOAT,  /* float, finite, in [arg->min, arg->max] */
    AH_INI_BOOL    /* int: true | false */
} ah_ini_type;

typedef struct ah_key_choice {
    const char *name;
    int value;
} ah_key_choice;

typedef struct ah_key_arg {
    const ah_key_choice *choices; /* ENUM: terminated by a NULL name; UINT: names
                                     for special values ("auto"), or NULL */
    double min, max;              /* UINT, FLOAT */
} ah_key_arg;

typedef struct ah_key_def {
    const char *section; /* "search", "select", "run", "layer", "model", ... */
    const char *name;
    ah_ini_type type;
    const ah_key_arg *arg;
    size_t offset;   /* of the value in the section's struct */
    const char *def; /* default as INI text; NULL: not set */
    const char *doc;
} ah_key_def;

/* Parse text as key's type into the field at base + key->offset, replacing
 * (and freeing) what was there. On error returns AH_ERR_CONFIG or
 * AH_ERR_OUT_OF_MEMORY with the problem in msg ("'maybe' is not one of
 * error, warn, allow") and leaves the field as it was. */
ah_status ah__key_set(const ah_key_def *key, void *base, const char *text, char *msg, size_t cap);
/* The field as INI text, malloc'ed into *out; *out is NULL when the field is
 * not set (NULL string, empty list, enum value outside the choices). Returns
 * -1 on out-of-memory. */
int ah__key_format(const ah_key_def *key, const void *base, char **out);
/* Free what the field owns (strings, lists) and clear it. */
void ah__key_clear(const ah_key_def *key, void *base);
/* "error, warn, allow"-style text for a type: the choices, the range, ...,
 * for documentation. */
void ah__key_describe(const ah_key_def *key, char *buf, size_t cap);
/* The choice of an ENUM key (or the name of a UINT key's special value)
 * with value v, or NULL. */
const char *ah__key_choice_name(const ah_key_def *key, int v);


#endif
