/*
 * The growing string of strbuf.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "strbuf.h"

void ah__strbuf_printf(ah_strbuf *b, const char *fmt, ...)
{
    if (b->failed) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + (size_t)n + 1) cap *= 2;
        char *d = ah__realloc(b->data, cap);
        if (!d) {
            b->failed = 1;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void ah__strbuf_comment(ah_strbuf *b, const char *text)
{
    const char *p = text;
    while (*p) {
        /* One output line: as many words as fit in 76 columns after "# ". */
        const char *line_end = strchr(p, '\n');
        if (!line_end) line_end = p + strlen(p);
        const char *e = line_end;
        if (e - p > 76) {
            e = p + 76;
            while (e > p && *e != ' ') e--;
            if (e == p) { /* one long word: let it overflow */
                e = p + 76;
                while (e < line_end && *e != ' ') e++;
            }
        }
        ah__strbuf_printf(b, e > p ? "# %.*s\n" : "#\n", (int)(e - p), p);
        p = e;
        while (*p == ' ') p++;
        if (*p == '\n') p++;
    }
}

char *ah__strbuf_take(ah_strbuf *b)
{
    if (b->failed || !b->data) {
        int failed = b->failed;
        ah__free(b->data);
        *b = (ah_strbuf){0};
        return failed ? NULL : ah__strdup("");
    }
    char *d = b->data;
    *b = (ah_strbuf){0};
    return d;
}
