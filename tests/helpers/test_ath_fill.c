/*
 * The helpers' random fill on several threads against one thread's: the
 * jump-ahead of its xorshift64 (ath_rand_jump) against stepping, and
 * ath_fill_uniform's values and final state against a serial loop of the
 * same formula, for a 16-bit and an FP8 type. Runs without a GPU. (Was
 * cuda_flashinfer's fi_fill_test.)
 */
#include <stdlib.h>

#include <attnhost/plugin_util.h>

#include "check.h"
#include "ath.h"

static void check_jump(void)
{
    const uint64_t ks[] = {0, 1, 2, 63, 64, 1000, 123457};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        uint64_t s = 0x9e3779b97f4a7c15ull;
        const uint64_t jumped = ath_rand_jump(s, ks[i]);
        for (uint64_t k = 0; k < ks[i]; k++) ath_rand_u64(&s);
        CHECK_MSG(jumped == s, "jump of %llu steps: %016llx, stepping gives %016llx",
                  (unsigned long long)ks[i], (unsigned long long)jumped, (unsigned long long)s);
    }
}

/* n values as ath_fill_uniform documents them, one after another. */
static void serial_fill(void *buf, size_t n, ah_dtype dt, float amp, float scale, uint64_t *rng)
{
    const int fp8 = ah_dtype_is_fp8(dt);
    for (size_t i = 0; i < n; i++) {
        const float v = (float)(ath_rand_unit(rng) * 2.0 - 1.0) * amp;
        ah_store_f32(buf, i, dt, fp8 ? v / scale : v);
    }
}

static void check_fill(ah_dtype dt, size_t esize, float amp, float scale)
{
    const size_t n = 3 * ((size_t)1 << 22) + 12345; /* several threads, uneven split */
    unsigned char *a = malloc(n * esize), *b = malloc(n * esize);
    if (!a || !b) {
        CHECK_MSG(0, "out of memory for %zu values", n);
        free(a), free(b);
        return;
    }
    uint64_t ra = 12345, rb = 12345;
    ath_fill_uniform(a, n, dt, amp, scale, &ra);
    serial_fill(b, n, dt, amp, scale, &rb);
    size_t first = n;
    for (size_t i = 0; i < n * esize && first == n; i++)
        if (a[i] != b[i]) first = i / esize;
    CHECK_MSG(first == n, "dtype %d: value %zu of %zu differs from the serial fill", (int)dt, first,
              n);
    CHECK_MSG(ra == rb, "dtype %d: final state %016llx, serial %016llx", (int)dt,
              (unsigned long long)ra, (unsigned long long)rb);
    free(a);
    free(b);
}

int main(void)
{
    check_jump();
    check_fill(AH_DTYPE_BF16, 2, 1.f, 1.f);
    check_fill(AH_DTYPE_FP8_E4M3, 1, 1.f, 0.01f);
    return check_report("ath_fill_test");
}
