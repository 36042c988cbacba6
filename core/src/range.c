/*
 * Layer ranges ("*", "7", "0-31", "1-47/2", "5-47/6,50", and "8-*" or
 * "1-* / 2" with an open end), the selector of [layer.<range>] and [layers.<range>] sections. The
 * parser is strict: every part must be fully consumed, numbers must fit, start <= end, step >= 1,
 * and an error names the offending part so the user sees which piece of a long list is wrong.
 */
#include "range.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"

static void fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(char *err, size_t cap, const char *fmt, ...)
{
    if (!err || !cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

static const char *skip_space(const char *p, const char *end)
{
    while (p < end && isspace((unsigned char)*p)) p++;
    return p;
}

/* Parses a layer number (or "*" when star_ok) at *p; 0 on success. */
static int parse_bound(const char **p, const char *end, int star_ok, uint32_t *out)
{
    const char *s = skip_space(*p, end);
    if (s < end && *s == '*' && star_ok) {
        *out = UINT32_MAX;
        *p = skip_space(s + 1, end);
        return 0;
    }
    if (s >= end || !isdigit((unsigned char)*s)) return -1;
    uint64_t v = 0;
    while (s < end && isdigit((unsigned char)*s)) {
        v = v * 10 + (uint64_t)(*s - '0');
        if (v >= UINT32_MAX) return -2; /* UINT32_MAX itself means "open" */
        s++;
    }
    *out = (uint32_t)v;
    *p = skip_space(s, end);
    return 0;
}

/* Parses one comma-free part [b, e) into *part. */
static int parse_part(const char *b, const char *e, ah_range_part *part, char *err, size_t cap)
{
    int len = (int)(e - b);
    const char *p = b;
    uint32_t lo, hi, step = 1;
    int rc = parse_bound(&p, e, 1, &lo);
    if (rc == -2) goto too_big;
    if (rc) goto not_number;
    if (lo == UINT32_MAX) { /* a lone "*", stepped or not: from layer 0 on */
        lo = 0;
        hi = UINT32_MAX;
    } else if (p < e && *p == '-') {
        p++;
        rc = parse_bound(&p, e, 1, &hi);
        if (rc == -2) goto too_big;
        if (rc) goto not_number;
    } else {
        hi = lo;
    }
    if (p < e && *p == '/') {
        if (hi == lo) {
            fail(err, cap, "part '%.*s': a step needs a range, as in 1-47/2", len, b);
            return -1;
        }
        p++;
        rc = parse_bound(&p, e, 0, &step);
        if (rc == -2) goto too_big;
        if (rc) goto not_number;
        if (step == 0) {
            fail(err, cap, "part '%.*s': the step must be at least 1", len, b);
            return -1;
        }
    }
    if (p != e) goto not_number;
    if (lo > hi) {
        fail(err, cap, "part '%.*s': start %u is after end %u", len, b, lo, hi);
        return -1;
    }
    part->lo = lo;
    part->hi = hi;
    part->step = step;
    return 0;

not_number:
    fail(err, cap, "part '%.*s' is not a layer, a range 'a-b', a stepped range 'a-b/s' or '*'", len,
         b);
    return -1;
too_big:
    fail(err, cap, "part '%.*s': layer number too large", len, b);
    return -1;
}

int ah__range_parse(const char *text, ah_range *out, char *err, size_t cap)
{
    out->parts = NULL;
    out->n_parts = 0;
    if (!text || !*skip_space(text, text + strlen(text))) {
        fail(err, cap, "empty layer range");
        return -1;
    }
    uint32_t n = 1;
    for (const char *c = text; *c; c++) n += *c == ',';
    ah_range_part *parts = ah__calloc(n, sizeof *parts);
    if (!parts) {
        fail(err, cap, "out of memory");
        return -1;
    }
    const char *b = text;
    for (uint32_t i = 0; i < n; i++) {
        const char *e = strchr(b, ',');
        if (!e) e = b + strlen(b);
        const char *s = skip_space(b, e);
        if (s == e) {
            fail(err, cap, "empty part in '%s'", text);
            ah__free(parts);
            return -1;
        }
        const char *t = e;
        while (t > s && isspace((unsigned char)t[-1])) t--;
        if (parse_part(s, t, &parts[i], err, cap)) {
            ah__free(parts);
            return -1;
        }
        b = e + 1;
    }
    out->parts = parts;
    out->n_parts = n;
    return 0;
}

int ah__range_contains(const ah_range *r, uint32_t layer)
{
    for (uint32_t i = 0; i < r->n_parts; i++) {
        const ah_range_part *p = &r->parts[i];
        if (layer >= p->lo && layer <= p->hi && (layer - p->lo) % p->step == 0) return 1;
    }
    return 0;
}

void ah__range_free(ah_range *r)
{
    if (!r) return;
    ah__free(r->parts);
    r->parts = NULL;
    r->n_parts = 0;
}
