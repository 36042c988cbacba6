/*
 * The INI driver over inih and the typed keys of the key tables (see
 * inifile.h). inih does the tokenizing; this file adds what it leaves out:
 * line numbers for every message, strict section headers, no silent
 * continuation lines or split long lines, and one parser per value type so
 * that every key of every table is checked and reported the same way.
 */
#include "inifile.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "config.h"

/* ---------------------------------------------------------------------------
 * The driver
 * ------------------------------------------------------------------------ */

typedef struct ini_run {
    const ah_ini_callbacks *cb;
    const char *source;
    const char *pos; /* next unread byte of the text */
    int line;        /* the line last handed to inih */
    char section[AH_INI_MAX_LINE + 1];
    int in_section;
    ah_status status; /* the first error */
    ah_error *err;
} ini_run;

static void run_fail(ini_run *r, ah_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void run_fail(ini_run *r, ah_status s, const char *fmt, ...)
{
    if (r->status != AH_OK) return;
    r->status = s;
    if (!r->err) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err->msg, sizeof r->err->msg, fmt, ap);
    va_end(ap);
}

/* "[select]: " inside a section, "" outside, for syntax messages. */
static void where(const ini_run *r, char *buf, size_t cap)
{
    if (r->in_section) snprintf(buf, cap, " [%s]:", r->section);
    else buf[0] = '\0';
}

/* inih's rule for where a token ends: at one of chars, or at an inline
 * comment (';' after whitespace). Mirrored so that the driver and inih agree
 * on what a line is. */
static const char *token_end(const char *s, const char *end, const char *chars)
{
    int was_space = 0;
    for (; s < end; s++) {
        if (strchr(chars, *s)) return s;
        if (*s == ';' && was_space) return s;
        was_space = isspace((unsigned char)*s);
    }
    return end;
}

/* A section header [b, e) with b[0] == '['. Returns 0 or sets the error. */
static int header_line(ini_run *r, const char *b, const char *e)
{
    char w[AH_INI_MAX_LINE + 8];
    const char *close = token_end(b + 1, e, "]");
    if (close == e || *close != ']') {
        where(r, w, sizeof w);
        run_fail(r, AH_ERR_CONFIG, "%s:%d: section header '%.*s' has no closing ']'", r->source,
                 r->line, (int)(e - b), b);
        return -1;
    }
    const char *after = close + 1;
    while (after < e && isspace((unsigned char)*after)) after++;
    if (after < e && *after != ';' && *after != '#') {
        run_fail(r, AH_ERR_CONFIG, "%s:%d: unexpected text after section header '%.*s'", r->source,
                 r->line, (int)(close + 1 - b), b);
        return -1;
    }
    size_t n = (size_t)(close - b - 1);
    memcpy(r->section, b + 1, n);
    r->section[n] = '\0';
    r->in_section = 1;
    char msg[768];
    msg[0] = '\0';
    ah_status s = r->cb->section(r->cb->user, r->section, r->line, msg, sizeof msg);
    if (s != AH_OK) {
        run_fail(r, s, "%s:%d: [%s]: %s", r->source, r->line, r->section, msg);
        return -1;
    }
    return 0;
}

/* inih's reader: hands over one line at a time, so r->line is the line of
 * whatever inih reports next. Classifies the line first and stops the parse
 * (returns NULL) at the first error. */
static char *read_line(char *str, int num, void *stream)
{
    ini_run *r = stream;
    if (r->status != AH_OK || !*r->pos) return NULL;
    const char *b = r->pos, *nl = strchr(b, '\n');
    const char *e = nl ? nl : b + strlen(b);
    r->pos = nl ? nl + 1 : e;
    r->line++;
    if (r->line == 1 && !strncmp(b, "\xEF\xBB\xBF", 3)) b += 3; /* a UTF-8 byte-order mark */
    /* Indentation means nothing: whitespace as inih's isspace() sees it
     * (form feeds and vertical tabs too), or inih would read an indented
     * line as the previous key's continuation, under a name it truncates. */
    while (b < e && isspace((unsigned char)*b)) b++;
    while (e > b && isspace((unsigned char)e[-1])) e--;
    size_t len = (size_t)(e - b);
    char w[AH_INI_MAX_LINE + 8];
    if (len > AH_INI_MAX_LINE || len + 3 > (size_t)num) {
        where(r, w, sizeof w);
        run_fail(r, AH_ERR_CONFIG, "%s:%d:%s line is longer than %d characters", r->source, r->line,
                 w, AH_INI_MAX_LINE);
        return NULL;
    }
    if (len && *b == '[') {
        if (header_line(r, b, e)) return NULL;
    } else if (len && *b != ';' && *b != '#') {
        const char *sep = token_end(b, e, "=:");
        if (sep == e || (*sep != '=' && *sep != ':')) {
            where(r, w, sizeof w);
            run_fail(r, AH_ERR_CONFIG, "%s:%d:%s expected 'key = value', got '%.*s'", r->source,
                     r->line, w, (int)len, b);
            return NULL;
        }
    }
    memcpy(str, b, len);
    str[len] = '\n';
    str[len + 1] = '\0';
    return str;
}

static int on_key(void *user, const char *section, const char *name, const char *value)
{
    ini_run *r = user;
    (void)section; /* the driver's own r->section is the validated one */
    if (r->status != AH_OK) return 1;
    if (!*name) {
        char w[AH_INI_MAX_LINE + 8];
        where(r, w, sizeof w);
        run_fail(r, AH_ERR_CONFIG, "%s:%d:%s a key name is missing before '='", r->source, r->line,
                 w);
        return 0;
    }
    if (!r->in_section) {
        run_fail(r, AH_ERR_CONFIG, "%s:%d: %s: key before any [section]", r->source, r->line, name);
        return 0;
    }
    char msg[768];
    msg[0] = '\0';
    ah_status s = r->cb->key(r->cb->user, r->section, name, value, r->line, msg, sizeof msg);
    if (s != AH_OK) {
        run_fail(r, s, "%s:%d: [%s] %s: %s", r->source, r->line, r->section, name, msg);
        return 0;
    }
    return 1;
}

/* Reads a whole file into a NUL-terminated buffer. Refuses NUL bytes, which
 * would silently end the text. */
static ah_status read_file(const char *path, const char *source, char **out, ah_error *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (err)
            snprintf(err->msg, sizeof err->msg, "%s: cannot open: %s", source, strerror(errno));
        return AH_ERR_IO;
    }
    size_t cap = 4096, len = 0;
    char *buf = ah__malloc(cap);
    ah_status s = AH_OK;
    while (buf) {
        if (len + 1 == cap) {
            if (cap >= (64u << 20)) {
                if (err) snprintf(err->msg, sizeof err->msg, "%s: larger than 64 MiB", source);
                s = AH_ERR_CONFIG;
                break;
            }
            char *nb = ah__realloc(buf, cap * 2);
            if (!nb) {
                s = AH_ERR_OUT_OF_MEMORY;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - 1 - len, f);
        len += n;
        if (n == 0) {
            if (ferror(f)) {
                if (err)
                    snprintf(err->msg, sizeof err->msg, "%s: read error: %s", source,
                             strerror(errno));
                s = AH_ERR_IO;
            }
            break;
        }
    }
    fclose(f);
    if (!buf) s = AH_ERR_OUT_OF_MEMORY;
    if (s == AH_OK) {
        buf[len] = '\0';
        if (strlen(buf) != len) {
            int line = 1;
            for (const char *c = buf; *c; c++) line += *c == '\n';
            if (err)
                snprintf(err->msg, sizeof err->msg, "%s:%d: NUL byte: not a text file", source,
                         line);
            s = AH_ERR_CONFIG;
        }
    }
    if (s != AH_OK) {
        if (s == AH_ERR_OUT_OF_MEMORY && err)
            snprintf(err->msg, sizeof err->msg, "%s: out of memory", source);
        ah__free(buf);
        return s;
    }
    *out = buf;
    return AH_OK;
}

ah_status ah__ini_parse(const char *path, const char *text, const char *source,
                        const ah_ini_callbacks *cb, ah_error *err)
{
    if (!source) source = path ? path : "<text>";
    char *owned = NULL;
    if (path) {
        ah_status s = read_file(path, source, &owned, err);
        if (s != AH_OK) return s;
        text = owned;
    }
    if (!text) text = "";
    ini_run r = {.cb = cb, .source = source, .pos = text, .err = err};
    int rc = ini_parse_stream(read_line, &r, on_key, &r);
    if (r.status == AH_OK && rc != 0) /* inih found what the reader let pass */
        run_fail(&r, AH_ERR_CONFIG, "%s:%d: syntax error", source, rc);
    ah__free(owned);
    return r.status;
}

/* ---------------------------------------------------------------------------
 * String lists (config.h)
 * ------------------------------------------------------------------------ */

int ah__parse_strlist(const char *value, ah_strlist *out)
{
    out->items = NULL;
    out->n = 0;
    const char *p = value ? value : "";
    while (isspace((unsigned char)*p)) p++;
    if (!*p) return 0;
    uint32_t n = 1;
    for (const char *c = p; *c; c++) n += *c == ',';
    char **items = ah__calloc(n, sizeof *items);
    if (!items) return -1;
    for (uint32_t i = 0; i < n; i++) {
        const char *e = strchr(p, ',');
        if (!e) e = p + strlen(p);
        const char *b = p;
        while (b < e && isspace((unsigned char)*b)) b++;
        const char *t = e;
        while (t > b && isspace((unsigned char)t[-1])) t--;
        items[i] = ah__malloc((size_t)(t - b) + 1);
        if (!items[i]) {
            ah_strlist part = {items, i};
            ah__strlist_free(&part);
            return -1;
        }
        memcpy(items[i], b, (size_t)(t - b));
        items[i][t - b] = '\0';
        p = *e ? e + 1 : e;
    }
    out->items = items;
    out->n = n;
    return 0;
}

void ah__strlist_free(ah_strlist *l)
{
    if (!l) return;
    for (uint32_t i = 0; i < l->n; i++) ah__free(l->items[i]);
    ah__free(l->items);
    l->items = NULL;
    l->n = 0;
}

/* ---------------------------------------------------------------------------
 * Typed keys
 * ------------------------------------------------------------------------ */

static int is_plugin_name(const char *s)
{
    if (!*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return 0;
    return 1;
}

static void choices_text(const ah_key_arg *arg, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (const ah_key_choice *c = arg->choices; c->name && n < cap; c++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", c == arg->choices ? "" : ", ", c->name);
}

const char *ah__key_choice_name(const ah_key_def *key, int v)
{
    if ((key->type != AH_INI_ENUM && key->type != AH_INI_UINT) || !key->arg->choices) return NULL;
    for (const ah_key_choice *c = key->arg->choices; c->name; c++)
        if (c->value == v) return c->name;
    return NULL;
}

void ah__key_describe(const ah_key_def *key, char *buf, size_t cap)
{
    switch (key->type) {
    case AH_INI_STRING: snprintf(buf, cap, "text"); break;
    case AH_INI_NAME: snprintf(buf, cap, "a plugin name"); break;
    case AH_INI_LIST: snprintf(buf, cap, "comma-separated list"); break;
    case AH_INI_NAMES: snprintf(buf, cap, "comma-separated plugin names"); break;
    case AH_INI_ENUM: {
        char c[256];
        choices_text(key->arg, c, sizeof c);
        snprintf(buf, cap, "one of %s", c);
        break;
    }
    case AH_INI_UINT:
        if (key->arg->choices) {
            char c[256];
            choices_text(key->arg, c, sizeof c);
            snprintf(buf, cap, "whole number, %.0f..%.0f, or %s", key->arg->min, key->arg->max, c);
        } else {
            snprintf(buf, cap, "whole number, %.0f..%.0f", key->arg->min, key->arg->max);
        }
        break;
    case AH_INI_FLOAT: snprintf(buf, cap, "number, %g..%g", key->arg->min, key->arg->max); break;
    case AH_INI_BOOL: snprintf(buf, cap, "true or false"); break;
    }
}

static ah_status parse_uint(const ah_key_def *key, const char *text, uint32_t *v, char *msg,
                            size_t cap)
{
    const char *p = text;
    uint64_t x = 0;
    int big = 0;
    if (!isdigit((unsigned char)*p)) goto bad;
    for (; isdigit((unsigned char)*p); p++) {
        x = x * 10 + (uint64_t)(*p - '0');
        if (x > UINT32_MAX) big = 1, x = UINT32_MAX;
    }
    if (*p) goto bad;
    if (big || (double)x < key->arg->min || (double)x > key->arg->max) {
        snprintf(msg, cap, "'%s' is out of range %.0f..%.0f", text, key->arg->min, key->arg->max);
        return AH_ERR_CONFIG;
    }
    *v = (uint32_t)x;
    return AH_OK;
bad:
    snprintf(msg, cap, "'%s' is not a whole number", text);
    return AH_ERR_CONFIG;
}

static ah_status parse_float(const ah_key_def *key, const char *text, float *v, char *msg,
                             size_t cap)
{
    char *end;
    errno = 0;
    double x = *text && !isspace((unsigned char)*text) ? strtod(text, &end) : 0;
    if (!*text || isspace((unsigned char)*text) || *end || !isfinite(x) || errno == ERANGE) {
        snprintf(msg, cap, "'%s' is not a finite number", text);
        return AH_ERR_CONFIG;
    }
    if (x < key->arg->min || x > key->arg->max) {
        snprintf(msg, cap, "'%s' is out of range %g..%g", text, key->arg->min, key->arg->max);
        return AH_ERR_CONFIG;
    }
    *v = (float)x;
    return AH_OK;
}

/* A list value: no empty entry; for names, each a plugin name, none twice.
 * Returns the problem in msg, or "" when the list is fine. */
static void check_list(const ah_key_def *key, const char *text, const ah_strlist *l, char *msg,
                       size_t cap)
{
    if (l->n == 0) {
        snprintf(msg, cap, "empty list");
        return;
    }
    for (uint32_t i = 0; i < l->n; i++) {
        const char *it = l->items[i];
        if (!*it) {
            snprintf(msg, cap, "empty entry in '%s'", text);
            return;
        }
        if (*it == ';' || *it == '#') { /* the dump would read back as a comment */
            snprintf(msg, cap, "entry '%s' starts with '%c', which reads as a comment", it, *it);
            return;
        }
        if (key->type != AH_INI_NAMES) continue;
        if (!is_plugin_name(it)) {
            snprintf(msg, cap, "'%s' is not a plugin name (a-z, 0-9 and _ only)", it);
            return;
        }
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(l->items[j], it)) {
                snprintf(msg, cap, "'%s' is listed twice", it);
                return;
            }
    }
}

ah_status ah__key_set(const ah_key_def *key, void *base, const char *text, char *msg, size_t cap)
{
    void *dst = (char *)base + key->offset;
    msg[0] = '\0';
    switch (key->type) {
    case AH_INI_NAME:
        if (!is_plugin_name(text)) {
            if (*text) snprintf(msg, cap, "'%s' is not a plugin name (a-z, 0-9 and _ only)", text);
            else snprintf(msg, cap, "empty value; expected a plugin name");
            return AH_ERR_CONFIG;
        }
        /* fall through */
    case AH_INI_STRING: {
        if (*text == ';' || *text == '#') { /* the dump would read back as a comment */
            snprintf(msg, cap, "'%s' starts with '%c', which reads as a comment", text, *text);
            return AH_ERR_CONFIG;
        }
        char *s = ah__strdup(text);
        if (!s) {
            snprintf(msg, cap, "out of memory");
            return AH_ERR_OUT_OF_MEMORY;
        }
        ah__free(*(char **)dst);
        *(char **)dst = s;
        return AH_OK;
    }
    case AH_INI_LIST:
    case AH_INI_NAMES: {
        ah_strlist l;
        if (ah__parse_strlist(text, &l)) {
            snprintf(msg, cap, "out of memory");
            return AH_ERR_OUT_OF_MEMORY;
        }
        check_list(key, text, &l, msg, cap);
        if (msg[0]) {
            ah__strlist_free(&l);
            return AH_ERR_CONFIG;
        }
        ah__strlist_free((ah_strlist *)dst);
        *(ah_strlist *)dst = l;
        return AH_OK;
    }
    case AH_INI_ENUM:
        for (const ah_key_choice *c = key->arg->choices; c->name; c++)
            if (!strcmp(c->name, text)) {
                *(int *)dst = c->value;
                return AH_OK;
            }
        {
            char c[256];
            choices_text(key->arg, c, sizeof c);
            snprintf(msg, cap, "'%s' is not one of %s", text, c);
        }
        return AH_ERR_CONFIG;
    case AH_INI_UINT:
        /* a UINT key's choices name special values ("auto") */
        for (const ah_key_choice *c = key->arg->choices; c && c->name; c++)
            if (!strcmp(c->name, text)) {
                *(uint32_t *)dst = (uint32_t)c->value;
                return AH_OK;
            }
        return parse_uint(key, text, (uint32_t *)dst, msg, cap);
    case AH_INI_FLOAT: return parse_float(key, text, (float *)dst, msg, cap);
    case AH_INI_BOOL:
        if (!strcmp(text, "true") || !strcmp(text, "false")) {
            *(int *)dst = text[0] == 't';
            return AH_OK;
        }
        snprintf(msg, cap, "'%s' is not one of true, false", text);
        return AH_ERR_CONFIG;
    }
    snprintf(msg, cap, "internal: unknown key type");
    return AH_ERR_INTERNAL;
}

int ah__key_format(const ah_key_def *key, const void *base, char **out)
{
    const void *src = (const char *)base + key->offset;
    *out = NULL;
    switch (key->type) {
    case AH_INI_STRING:
    case AH_INI_NAME: {
        const char *s = *(char *const *)src;
        if (!s) return 0;
        *out = ah__strdup(s);
        break;
    }
    case AH_INI_LIST:
    case AH_INI_NAMES: {
        const ah_strlist *l = src;
        if (!l->n) return 0;
        ah_strbuf b = {0};
        /* no space after the comma: the dump of a line the reader accepted
         * must fit the reader's line limit again */
        for (uint32_t i = 0; i < l->n; i++)
            ah__strbuf_printf(&b, "%s%s", i ? "," : "", l->items[i]);
        *out = ah__strbuf_take(&b);
        break;
    }
    case AH_INI_ENUM: {
        const char *name = ah__key_choice_name(key, *(const int *)src);
        if (!name) return 0;
        *out = ah__strdup(name);
        break;
    }
    case AH_INI_UINT: {
        const char *name = key->arg->choices ? ah__key_choice_name(key, *(const int *)src) : NULL;
        *out = name ? ah__strdup(name) : ah__asprintf("%u", *(const uint32_t *)src);
        break;
    }
    case AH_INI_FLOAT: *out = ah__asprintf("%.9g", (double)*(const float *)src); break;
    case AH_INI_BOOL: *out = ah__strdup(*(const int *)src ? "true" : "false"); break;
    }
    return *out ? 0 : -1;
}

void ah__key_clear(const ah_key_def *key, void *base)
{
    void *dst = (char *)base + key->offset;
    switch (key->type) {
    case AH_INI_STRING:
    case AH_INI_NAME:
        ah__free(*(char **)dst);
        *(char **)dst = NULL;
        break;
    case AH_INI_LIST:
    case AH_INI_NAMES: ah__strlist_free((ah_strlist *)dst); break;
    default: break;
    }
}
