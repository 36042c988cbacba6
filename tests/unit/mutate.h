/*
 * Deterministic byte-level mutations of a text, for the config and model
 * tests' poor man's fuzzing in CI (the libFuzzer targets go further).
 */
#ifndef AH_TEST_MUTATE_H
#define AH_TEST_MUTATE_H

#include <stdint.h>
#include <string.h>

/* Apply `edits` random byte edits (replace, delete, insert) to the
 * NUL-terminated text buf of length n, which must have room for `edits`
 * more bytes; returns the new length. state is the generator's state. */
static inline size_t mutate_text(char *buf, size_t n, int edits, uint32_t *state)
{
    static const char alphabet[] = "[]=:;#,.-*/ \n\tazAZ09_\xEF";
    for (int k = 0; k < edits && n > 0; k++) {
        *state = *state * 1103515245u + 12345u;
        size_t at = (*state >> 8) % n;
        char ch = alphabet[(*state >> 20) % (sizeof alphabet - 1)];
        switch ((*state >> 28) % 3) {
        case 0: /* replace a byte */ buf[at] = ch; break;
        case 1: /* delete one */
            memmove(buf + at, buf + at + 1, n - at);
            n--;
            break;
        default: /* insert one */
            memmove(buf + at + 1, buf + at, n - at + 1);
            buf[at] = ch;
            n++;
            break;
        }
    }
    return n;
}

#endif
