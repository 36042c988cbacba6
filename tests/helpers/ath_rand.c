/*
 * The drivers' one random generator (see ath.h): xorshift64, and its
 * jump-ahead so that large fills run on several threads.
 */
#include "ath.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

uint64_t ath_rand_u64(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

double ath_rand_unit(uint64_t *s) { return (double)(ath_rand_u64(s) >> 11) / 9007199254740992.0; }

double ath_rand_range(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * ath_rand_unit(s);
}

uint64_t ath_seed(uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    return s ? s : 1;
}

/* xorshift64 is linear over GF(2): k steps of it are the matrix M^k, so a
 * state k steps ahead takes log2(k) matrix squarings to reach. That lets
 * threads fill disjoint ranges of one sequence, bit for bit what one
 * thread would write (a B64 x 16k cache is 2^31 values, seconds of device
 * machine time per benchmark run when filled serially). */
typedef struct {
    uint64_t col[64];
} gf2_mat; /* col[j] = M e_j */

static uint64_t gf2_apply(const gf2_mat *m, uint64_t v)
{
    uint64_t r = 0;
    for (int j = 0; v; j++, v >>= 1)
        if (v & 1) r ^= m->col[j];
    return r;
}

uint64_t ath_rand_jump(uint64_t s, uint64_t k)
{
    gf2_mat p, q;
    for (int j = 0; j < 64; j++) {
        uint64_t e = 1ull << j;
        p.col[j] = ath_rand_u64(&e);
    }
    for (; k; k >>= 1) {
        if (k & 1) s = gf2_apply(&p, s);
        for (int j = 0; j < 64; j++) q.col[j] = gf2_apply(&p, p.col[j]);
        p = q;
    }
    return s;
}

typedef struct fill_job {
    void *buf;
    size_t begin, end;
    ah_dtype dt;
    float amp, scale;
    uint64_t rng; /* the state before value `begin` */
} fill_job;

/* Values in [-amp, amp), stored as value / scale in FP8 buffers. */
static void *fill_range(void *arg)
{
    fill_job *j = arg;
    const int fp8 = ah_dtype_is_fp8(j->dt);
    for (size_t i = j->begin; i < j->end; i++) {
        float v = (float)(ath_rand_unit(&j->rng) * 2.0 - 1.0) * j->amp;
        ah_store_f32(j->buf, i, j->dt, fp8 ? v / j->scale : v);
    }
    return NULL;
}

void ath_fill_uniform(void *buf, size_t n, ah_dtype dt, float amp, float scale, uint64_t *rng)
{
    enum { MAX_THREADS = 16, MIN_PER_THREAD = 1 << 22 };
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const size_t cap = cpus < 1 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : (size_t)cpus;
    size_t nt = n / MIN_PER_THREAD;
    nt = nt < 1 ? 1 : nt > cap ? cap : nt;
    fill_job jobs[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    int running[MAX_THREADS] = {0};
    for (size_t t = 0; t < nt; t++) {
        const size_t b = n / nt * t, e = t + 1 == nt ? n : n / nt * (t + 1);
        jobs[t] =
            (fill_job){buf, b, e, dt, amp, scale ? scale : 1.f, t ? ath_rand_jump(*rng, b) : *rng};
        if (t) running[t] = pthread_create(&th[t], NULL, fill_range, &jobs[t]) == 0;
    }
    fill_range(&jobs[0]);
    for (size_t t = 1; t < nt; t++) {
        if (running[t]) pthread_join(th[t], NULL);
        else fill_range(&jobs[t]); /* no thread could start: fill it here */
    }
    *rng = jobs[nt - 1].rng; /* the last range ends the sequence */
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void ath_sort_f(float *v, int n) { qsort(v, (size_t)n, sizeof *v, cmp_f); }
void ath_sort_d(double *v, int n) { qsort(v, (size_t)n, sizeof *v, cmp_d); }

double ath_median_f(float *v, int n)
{
    ath_sort_f(v, n);
    return n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + v[n / 2]);
}

double ath_median_d(double *v, int n)
{
    ath_sort_d(v, n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
