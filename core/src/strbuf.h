/*
 * A growing, NUL-terminated string for messages, dumps and keys. On
 * out-of-memory `failed` is set and further appends do nothing, so a writer
 * checks once at the end.
 */
#ifndef AH_STRBUF_H
#define AH_STRBUF_H

#include <stddef.h>

typedef struct ah_strbuf {
    char *data;
    size_t len, cap;
    int failed;
} ah_strbuf;

void ah__strbuf_printf(ah_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append text as "# "-prefixed comment lines wrapped at 78 columns. */
void ah__strbuf_comment(ah_strbuf *b, const char *text);
/* The string (caller frees), or NULL after a failure (the buffer is freed). */
char *ah__strbuf_take(ah_strbuf *b);

#endif
