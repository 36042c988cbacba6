/*
 * The core's one allocator: thin wrappers over libc that count allocations
 * and can fail a chosen one, so tests can walk every allocation site of an
 * operation and check that each ends in AH_ERR_OUT_OF_MEMORY with nothing
 * leaked (ah__alloc_live). Counters are C11 atomics because plugins allocate
 * through the host services from their own threads. Blocks are plain libc
 * blocks, so text the public API hands out "malloc'ed" may be released with
 * free() (the live count then stays high, which only tests read).
 */
#include "alloc.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_long fault_at;    /* 0: off; else fail when count reaches it */
static atomic_long alloc_count; /* allocations since the last fault_inject_after */
static atomic_long alloc_live;  /* blocks handed out and not yet freed */

void ah__fault_inject_after(long n)
{
    atomic_store(&alloc_count, 0);
    atomic_store(&fault_at, n > 0 ? n : 0);
}

long ah__alloc_count(void) { return atomic_load(&alloc_count); }

long ah__alloc_live(void) { return atomic_load(&alloc_live); }

/* Counts one allocation attempt; true when fault injection says it fails.
 * Only the n-th attempt fails: code that retries or frees and carries on
 * sees later allocations succeed, as it would after a transient failure. */
static int injected_failure(void)
{
    long n = atomic_fetch_add(&alloc_count, 1) + 1;
    long at = atomic_load(&fault_at);
    return at != 0 && n == at;
}

void *ah__malloc(size_t size)
{
    if (injected_failure()) return NULL;
    void *p = malloc(size ? size : 1); /* never NULL for success, even at 0 */
    if (p) atomic_fetch_add(&alloc_live, 1);
    return p;
}

void *ah__calloc(size_t n, size_t size)
{
    if (injected_failure()) return NULL;
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p) atomic_fetch_add(&alloc_live, 1);
    return p;
}

void *ah__realloc(void *ptr, size_t size)
{
    if (injected_failure()) return NULL; /* ptr stays valid, as with realloc */
    void *p = realloc(ptr, size ? size : 1);
    if (p && !ptr) atomic_fetch_add(&alloc_live, 1);
    return p;
}

void ah__free(void *ptr)
{
    if (!ptr) return;
    atomic_fetch_sub(&alloc_live, 1);
    free(ptr);
}

char *ah__strdup(const char *s)
{
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = ah__malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

char *ah__asprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = ah__malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}
