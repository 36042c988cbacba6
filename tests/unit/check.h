/*
 * A minimal test harness: CHECK records a failure with file and line and
 * carries on; a test binary returns check_report() from main.
 */
#ifndef AH_TEST_CHECK_H
#define AH_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_failures, check_count;

#define CHECK(cond) \
    do { \
        check_count++; \
        if (!(cond)) { \
            check_failures++; \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        } \
    } while (0)

#define CHECK_MSG(cond, ...) \
    do { \
        check_count++; \
        if (!(cond)) { \
            check_failures++; \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__); \
            fputc('\n', stderr); \
        } \
    } while (0)

#define CHECK_STREQ(a, b) \
    CHECK_MSG(strcmp((a), (b)) == 0, "\n  got:      \"%s\"\n  expected: \"%s\"", (a), (b))

#define CHECK_CONTAINS(hay, needle) \
    CHECK_MSG(strstr((hay), (needle)) != NULL, "\n  \"%s\"\n  does not contain \"%s\"", (hay), \
              (needle))

/* The host's ABI version as refusals print it ("1.1"), for tests that
 * include plugin.h. */
#define HOST_ABI_STR2(a, b) #a "." #b
#define HOST_ABI_STR(a, b) HOST_ABI_STR2(a, b)
#define HOST_ABI HOST_ABI_STR(AH_ABI_VERSION_MAJOR, AH_ABI_VERSION_MINOR)

static inline int check_report(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
    return check_failures ? 1 : 0;
}

#endif
