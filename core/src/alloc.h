/*
 * The core's one allocator. Every allocation in libattnhost goes through
 * here, so tests can fail the n-th one (fault injection) and check that each
 * site ends in a clear error with nothing leaked.
 */
#ifndef AH_ALLOC_H
#define AH_ALLOC_H

#include <stddef.h>

void *ah__malloc(size_t size);
void *ah__calloc(size_t n, size_t size);
void *ah__realloc(void *ptr, size_t size);
void ah__free(void *ptr);
/* NULL when s is NULL or on failure. */
char *ah__strdup(const char *s);
/* malloc'ed printf; NULL on failure. */
char *ah__asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Fault injection (tests only): fail the n-th allocation from now (1-based);
 * 0 switches it off. ah__alloc_count() counts allocations since the last
 * ah__fault_inject_after() call. Thread-safe. */
void ah__fault_inject_after(long n);
long ah__alloc_count(void);
/* Blocks allocated through ah__malloc/calloc/realloc and not yet freed, so a
 * test can check that a failed operation released everything it took. */
long ah__alloc_live(void);

#endif
