/*
 * Helpers shared by the fuzz targets: a bounded reader over the fuzzer's
 * bytes (reads past the end give zeros, so every input decodes to
 * something), and a checked abort that names the broken property.
 */
#ifndef AH_FUZZ_COMMON_H
#define AH_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fz {
    const uint8_t *p;
    size_t n, off;
} fz;

static inline uint8_t fz_u8(fz *f) { return f->off < f->n ? f->p[f->off++] : 0; }

static inline uint16_t fz_u16(fz *f)
{
    uint16_t lo = fz_u8(f);
    return (uint16_t)(lo | (uint16_t)fz_u8(f) << 8);
}

static inline uint32_t fz_u32(fz *f)
{
    uint32_t lo = fz_u16(f);
    return lo | (uint32_t)fz_u16(f) << 16;
}

static inline size_t fz_left(const fz *f) { return f->n - f->off; }

/* A NUL-terminated string of up to max bytes taken from the input (length
 * byte first); malloc'ed, the caller frees. */
static inline char *fz_str(fz *f, size_t max)
{
    size_t len = fz_u8(f);
    if (len > max) len = max;
    if (len > fz_left(f)) len = fz_left(f);
    char *s = malloc(len + 1);
    if (!s) abort();
    memcpy(s, f->p + f->off, len);
    s[len] = '\0';
    f->off += len;
    return s;
}

/* The fuzzer's bytes as a C string (copied, NUL added). */
static inline char *fz_text(const uint8_t *data, size_t size)
{
    char *t = malloc(size + 1);
    if (!t) abort();
    memcpy(t, data, size);
    t[size] = '\0';
    return t;
}

#define FZ_ASSERT(cond, ...) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "fuzz property broken: %s: ", #cond); \
            fprintf(stderr, __VA_ARGS__); \
            fputc('\n', stderr); \
            abort(); \
        } \
    } while (0)

#endif
