/*
 * The ceilings `attnhost bench` measures in the same run as its timings:
 * the CPU's read bandwidth with every core streaming, and a device's copy
 * bandwidth.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "ceilings.h"

/* CPU read bandwidth: every core streams its own slice of a large buffer. */
typedef struct bw_job {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} bw_job;

static void *bw_read(void *arg)
{
    bw_job *j = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= j->n; i += 4) {
        s0 += j->p[i];
        s1 += j->p[i + 1];
        s2 += j->p[i + 2];
        s3 += j->p[i + 3];
    }
    j->sum = s0 + s1 + s2 + s3;
    return NULL;
}

double cpu_read_gbs(unsigned threads)
{
    size_t bytes = (size_t)1 << 30, n = bytes / 8;
    uint64_t *buf = malloc(bytes);
    if (!buf || threads == 0 || threads > 256) {
        free(buf);
        return 0;
    }
    for (size_t i = 0; i < n; i++) buf[i] = i;
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        pthread_t t[256];
        bw_job jobs[256];
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (unsigned k = 0; k < threads; k++) {
            jobs[k] = (bw_job){buf + k * (n / threads), n / threads, 0};
            pthread_create(&t[k], NULL, bw_read, &jobs[k]);
        }
        for (unsigned k = 0; k < threads; k++) pthread_join(t[k], NULL);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
        if (bytes / s / 1e9 > best) best = bytes / s / 1e9;
    }
    free(buf);
    return best;
}

/* Device bandwidth: a large device-to-device copy, bytes read plus written. */
double device_copy_gbs(ah_device *d)
{
    size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    double best = 0;
    if (ah_device_alloc(d, bytes, &a) != AH_OK || ah_device_alloc(d, bytes, &b) != AH_OK) goto out;
    for (int rep = 0; rep < 6; rep++) {
        float ms = 0;
        if (ah_device_timer_start(d) != AH_OK ||
            ah_device_copy(d, b, a, bytes, AH_COPY_DEVICE_TO_DEVICE) != AH_OK ||
            ah_device_timer_stop(d, &ms) != AH_OK)
            break;
        if (rep && 2.0 * bytes / (ms * 1e-3) / 1e9 > best) best = 2.0 * bytes / (ms * 1e-3) / 1e9;
    }
out:
    ah_device_free(d, a);
    ah_device_free(d, b);
    return best;
}
