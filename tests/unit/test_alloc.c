/*
 * The core allocator: counting, injecting a failure at exactly the n-th
 * allocation, the live-block count tests use to find leaks, the string
 * helpers, and the counters staying exact under concurrent use.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"

static void counting(void)
{
    long live = ah__alloc_live();
    ah__fault_inject_after(0);
    CHECK(ah__alloc_count() == 0);
    void *a = ah__malloc(10);
    void *b = ah__calloc(3, 4);
    void *c = ah__realloc(NULL, 5); /* a fresh block */
    CHECK(a && b && c);
    CHECK(((unsigned char *)b)[11] == 0);
    CHECK(ah__alloc_count() == 3);
    CHECK(ah__alloc_live() == live + 3);
    c = ah__realloc(c, 5000); /* a move, not a new block */
    CHECK(c != NULL);
    CHECK(ah__alloc_count() == 4);
    CHECK(ah__alloc_live() == live + 3);
    ah__free(a);
    ah__free(b);
    ah__free(c);
    ah__free(NULL);
    CHECK(ah__alloc_live() == live);
    void *z = ah__malloc(0); /* success is never NULL, even for nothing */
    CHECK(z != NULL);
    ah__free(z);
}

static void injection(void)
{
    long live = ah__alloc_live();
    ah__fault_inject_after(3);
    void *p1 = ah__malloc(8), *p2 = ah__calloc(1, 8), *p3 = ah__malloc(8), *p4 = ah__malloc(8);
    CHECK(p1 && p2 && !p3 && p4); /* only the third fails */
    CHECK(ah__alloc_count() == 4);
    ah__free(p1);
    ah__free(p2);
    ah__free(p4);

    /* A failed realloc keeps the old block, as realloc does. */
    char *s = ah__strdup("keep");
    ah__fault_inject_after(1);
    CHECK(ah__realloc(s, 1 << 20) == NULL);
    CHECK_STREQ(s, "keep");
    ah__free(s);

    ah__fault_inject_after(1);
    CHECK(ah__strdup("x") == NULL);
    ah__fault_inject_after(1);
    CHECK(ah__asprintf("%d", 42) == NULL);
    ah__fault_inject_after(1);
    CHECK(ah__calloc(2, 2) == NULL);
    ah__fault_inject_after(0);
    CHECK(ah__alloc_live() == live);
    /* Off means off: no failure however many allocations follow. */
    for (int i = 0; i < 100; i++) {
        void *p = ah__malloc(1);
        CHECK(p != NULL);
        ah__free(p);
    }
    CHECK(ah__alloc_count() == 100);
}

static void strings(void)
{
    CHECK(ah__strdup(NULL) == NULL);
    char *d = ah__strdup("attention");
    CHECK_STREQ(d, "attention");
    ah__free(d);
    char *f = ah__asprintf("%s:%d: [%s] %s", "f.ini", 12, "select", "fallback");
    CHECK_STREQ(f, "f.ini:12: [select] fallback");
    ah__free(f);
    char big[3000];
    memset(big, 'k', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    char *g = ah__asprintf("<%s>", big);
    CHECK(g && strlen(g) == sizeof big + 1 && g[0] == '<' && g[sizeof big] == '>');
    ah__free(g);
}

enum { THREADS = 4, PER_THREAD = 20000 };

static atomic_int failures;

static void *churn(void *arg)
{
    (void)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        void *p = ah__malloc((size_t)(i % 64) + 1);
        if (!p) atomic_fetch_add(&failures, 1);
        ah__free(p);
    }
    return NULL;
}

static void threads(void)
{
    long live = ah__alloc_live();
    ah__fault_inject_after(0);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, churn, NULL);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    CHECK(ah__alloc_count() == (long)THREADS * PER_THREAD);
    CHECK(ah__alloc_live() == live);

    CHECK(atomic_load(&failures) == 0);

    /* Exactly one allocation fails among all threads. */
    ah__fault_inject_after(12345);
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, churn, NULL);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    ah__fault_inject_after(0);
    CHECK(atomic_load(&failures) == 1);
    CHECK(ah__alloc_live() == live);
}

int main(void)
{
    counting();
    injection();
    strings();
    threads();
    return check_report("test_alloc");
}
