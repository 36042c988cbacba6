/*
 * The largest used block id of a batch (table_scan.h). At batch 256 with
 * 4k-token contexts that is 65k ids read every step, the bulk of the host's
 * per-step cost, so x86-64 gets AVX-512 and AVX2 versions that keep one
 * vector maximum across all rows (a reduction per row would cost as much
 * as the reads) and take each row's tail with a masked load. The version is
 * chosen once, by CPUID, without ifuncs (which ThreadSanitizer cannot run).
 */
#include <stddef.h>

#include "table_scan.h"

static uint32_t need_of(const int32_t *seq_lens, uint32_t r, const ah_divider *block_size)
{
    return (uint32_t)ah__blocks_for(block_size, (uint32_t)seq_lens[r]);
}

static uint32_t table_max_plain(const int32_t *table, uint32_t stride, const int32_t *seq_lens,
                                uint32_t num_reqs, const ah_divider *block_size)
{
    uint32_t m = 0;
    for (uint32_t r = 0; r < num_reqs; r++) {
        const int32_t *row = table + (size_t)r * stride;
        uint32_t need = need_of(seq_lens, r, block_size);
        for (uint32_t k = 0; k < need; k++) m = (uint32_t)row[k] > m ? (uint32_t)row[k] : m;
    }
    return m;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* Ids the AVX-512 scan asks the cache for ahead of its loads (2 KiB: the
 * next rows of a batch's table; measured 16% faster than the hardware
 * prefetcher alone at batch 256 x 4k; 256 was slower, 1024 no faster). */
#define PREFETCH_AHEAD 512

__attribute__((target("avx512f"))) static uint32_t
table_max_avx512(const int32_t *table, uint32_t stride, const int32_t *seq_lens, uint32_t num_reqs,
                 const ah_divider *block_size)
{
    __m512i m0 = _mm512_setzero_si512(), m1 = _mm512_setzero_si512();
    __m512i m2 = _mm512_setzero_si512(), m3 = _mm512_setzero_si512();
    for (uint32_t r = 0; r < num_reqs; r++) {
        const int32_t *row = table + (size_t)r * stride;
        uint32_t need = need_of(seq_lens, r, block_size), k = 0;
        for (; k + 64 <= need; k += 64) {
            const char *ahead = (const char *)(row + k + PREFETCH_AHEAD);
            _mm_prefetch(ahead, _MM_HINT_T0);
            _mm_prefetch(ahead + 64, _MM_HINT_T0);
            _mm_prefetch(ahead + 128, _MM_HINT_T0);
            _mm_prefetch(ahead + 192, _MM_HINT_T0);
            m0 = _mm512_max_epu32(m0, _mm512_loadu_si512(row + k));
            m1 = _mm512_max_epu32(m1, _mm512_loadu_si512(row + k + 16));
            m2 = _mm512_max_epu32(m2, _mm512_loadu_si512(row + k + 32));
            m3 = _mm512_max_epu32(m3, _mm512_loadu_si512(row + k + 48));
        }
        for (; k < need; k += 16) {
            __mmask16 live =
                need - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (need - k)) - 1);
            m0 = _mm512_max_epu32(m0, _mm512_maskz_loadu_epi32(live, row + k));
        }
    }
    return _mm512_reduce_max_epu32(
        _mm512_max_epu32(_mm512_max_epu32(m0, m1), _mm512_max_epu32(m2, m3)));
}

__attribute__((target("avx2"))) static uint32_t
table_max_avx2(const int32_t *table, uint32_t stride, const int32_t *seq_lens, uint32_t num_reqs,
               const ah_divider *block_size)
{
    __m256i m0 = _mm256_setzero_si256(), m1 = _mm256_setzero_si256();
    uint32_t tail = 0;
    for (uint32_t r = 0; r < num_reqs; r++) {
        const int32_t *row = table + (size_t)r * stride;
        uint32_t need = need_of(seq_lens, r, block_size), k = 0;
        for (; k + 16 <= need; k += 16) {
            m0 = _mm256_max_epu32(m0, _mm256_loadu_si256((const __m256i *)(row + k)));
            m1 = _mm256_max_epu32(m1, _mm256_loadu_si256((const __m256i *)(row + k + 8)));
        }
        for (; k < need; k++) tail = (uint32_t)row[k] > tail ? (uint32_t)row[k] : tail;
    }
    uint32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, _mm256_max_epu32(m0, m1));
    for (int i = 0; i < 8; i++) tail = lanes[i] > tail ? lanes[i] : tail;
    return tail;
}

typedef uint32_t (*table_max_fn)(const int32_t *, uint32_t, const int32_t *, uint32_t,
                                 const ah_divider *);

uint32_t ah__table_max_unsigned(const int32_t *table, uint32_t stride, const int32_t *seq_lens,
                                uint32_t num_reqs, const ah_divider *block_size)
{
    static table_max_fn chosen; /* every thread computes the same value */
    table_max_fn fn = __atomic_load_n(&chosen, __ATOMIC_RELAXED);
    if (!fn) {
        __builtin_cpu_init();
        fn = __builtin_cpu_supports("avx512f") ? table_max_avx512
             : __builtin_cpu_supports("avx2")  ? table_max_avx2
                                               : table_max_plain;
        __atomic_store_n(&chosen, fn, __ATOMIC_RELAXED);
    }
    return fn(table, stride, seq_lens, num_reqs, block_size);
}
#else
uint32_t ah__table_max_unsigned(const int32_t *table, uint32_t stride, const int32_t *seq_lens,
                                uint32_t num_reqs, const ah_divider *block_size)
{
    return table_max_plain(table, stride, seq_lens, num_reqs, block_size);
}
#endif
