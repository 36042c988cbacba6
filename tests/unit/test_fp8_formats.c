/*
 * The four FP8 element types (OCP e4m3 / e5m2, AMD's e4m3fnuz / e5m2fnuz):
 * plugin_util.h's decoders over all 256 bytes against the formats'
 * definitions written out directly, its encoder against a search over
 * the codes, stores at ties, at the largest finite value and past it, of
 * NaN and of negative zero, and the dtype tables (names, sizes, DLPack,
 * is_fp8) the model keys and the oracle read.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <attnhost/plugin_util.h>

#include "check.h"

typedef struct fmt {
    ah_dtype t;
    const char *name;
    int exp_bits, man_bits, fnuz;
    double max;       /* largest finite value */
    uint8_t max_code; /* its byte */
    uint8_t nan_code; /* what a NaN stores as */
} fmt;

static const fmt fmts[4] = {
    {AH_DTYPE_FP8_E4M3, "fp8_e4m3", 4, 3, 0, 448.0, 0x7e, 0x7f},
    {AH_DTYPE_FP8_E5M2, "fp8_e5m2", 5, 2, 0, 57344.0, 0x7b, 0x7e},
    {AH_DTYPE_FP8_E4M3_FNUZ, "fp8_e4m3fnuz", 4, 3, 1, 240.0, 0x7f, 0x80},
    {AH_DTYPE_FP8_E5M2_FNUZ, "fp8_e5m2fnuz", 5, 2, 1, 57344.0, 0x7f, 0x80},
};

/* The value of byte b by the formats' definitions: OCP e4m3 has one NaN
 * magnitude (all ones) and no infinity, OCP e5m2 IEEE's infinities and
 * NaNs; the fnuz formats' bias is one larger and their only NaN is the
 * byte with just the sign bit set, so every other byte is finite. */
static double direct(const fmt *f, uint8_t b)
{
    const int mb = f->man_bits, emax = (1 << f->exp_bits) - 1;
    const int bias = (1 << (f->exp_bits - 1)) - 1 + f->fnuz;
    const int e = (b >> mb) & emax, m = b & ((1 << mb) - 1), neg = b >> 7;
    if (f->fnuz && b == 0x80) return NAN;
    if (!f->fnuz && f->exp_bits == 5 && e == emax) return m ? NAN : neg ? -INFINITY : INFINITY;
    if (!f->fnuz && f->exp_bits == 4 && e == emax && m == (1 << mb) - 1) return NAN;
    const double frac = (double)m / (double)(1 << mb);
    const double v = e ? ldexp(1.0 + frac, e - bias) : ldexp(frac, 1 - bias);
    return neg ? -v : v;
}

static void test_decode(void)
{
    for (int i = 0; i < 4; i++) {
        const fmt *f = &fmts[i];
        int bad = 0, nans = 0;
        for (int b = 0; b < 256; b++) {
            const uint8_t x[4] = {(uint8_t)b}; /* 4 bytes: ah_load_f32's widest type */
            const double want = direct(f, x[0]), got = ah_load_f32(x, 0, f->t);
            nans += isnan(got);
            if (isnan(want) ? isnan(got) : got == want && !signbit(got) == !signbit(want)) continue;
            if (bad++ < 4) CHECK_MSG(0, "%s 0x%02x: %g, want %g", f->name, b, got, want);
        }
        CHECK_MSG(bad == 0, "%s: %d bytes decode wrongly", f->name, bad);
        /* the fnuz formats: one NaN and no infinity or -0 */
        if (f->fnuz) CHECK_MSG(nans == 1, "%s: %d NaN bytes", f->name, nans);
        const uint8_t top[4] = {f->max_code};
        CHECK(ah_load_f32(top, 0, f->t) == (float)f->max);
    }
}

/* Encoding against a search over all 256 codes: the nearest finite value,
 * ties to the even code, magnitudes past the largest finite value
 * saturate, NaN encodes as the format's NaN; the sign (of zero too) is
 * kept, except that a fnuz zero has none. Inputs: every bf16 bit pattern,
 * so every binade, both signs, infinities, NaNs and the exact halfway
 * points between FP8 neighbours. */
static void test_encode_search(void)
{
    for (int i = 0; i < 4; i++) {
        const fmt *f = &fmts[i];
        long bad = 0;
        for (uint32_t h = 0; h < 65536; h++) {
            const float x = ah_bits_to_f32(h << 16);
            const uint8_t got = ah_f32_to_fp8(x, f->t);
            uint8_t want = 0;
            if (x != x) {
                want = f->nan_code;
            } else if (fabsf(x) >= f->max) { /* the search's doubles lose the gap up there */
                want = (uint8_t)(f->max_code | (x < 0 ? 0x80 : 0));
            } else {
                double best = INFINITY;
                for (int c = 0; c < 128; c++) { /* magnitudes; finite ones only */
                    const double v = direct(f, (uint8_t)c);
                    if (!isfinite(v)) continue;
                    const double d = fabs(fabs((double)x) - v);
                    if (d < best || (d == best && (c & 1) == 0)) best = d, want = (uint8_t)c;
                }
                if (signbit(x) && !(f->fnuz && want == 0)) want |= 0x80;
            }
            if (got != want && bad++ < 4)
                CHECK_MSG(0, "%s(%g = 0x%04x): 0x%02x, want 0x%02x", f->name, x, h, got, want);
        }
        CHECK_MSG(bad == 0, "%s: %ld bf16 inputs encoded wrongly", f->name, bad);
    }
}

/* Named stores, each worked out by hand from the formats' definitions. */
static void test_encode_cases(void)
{
    static const struct {
        ah_dtype t;
        float x;
        uint8_t want;
        const char *why;
    } cases[] = {
        /* e4m3fnuz: bias 8, so 1.0 is exponent 8 (0x40); quantum 2^-10 below 2^-7 */
        {AH_DTYPE_FP8_E4M3_FNUZ, 1.0f, 0x40, "1.0"},
        {AH_DTYPE_FP8_E4M3_FNUZ, -2.0f, 0xc8, "-2.0"},
        {AH_DTYPE_FP8_E4M3_FNUZ, 1.0625f, 0x40, "tie 1 | 1.125 to the even 1"},
        {AH_DTYPE_FP8_E4M3_FNUZ, 1.1875f, 0x42, "tie 1.125 | 1.25 to the even 1.25"},
        {AH_DTYPE_FP8_E4M3_FNUZ, 0x1p-10f, 0x01, "smallest subnormal"},
        {AH_DTYPE_FP8_E4M3_FNUZ, 0x1.8p-10f, 0x02, "subnormal tie 1 | 2 quanta to 2"},
        {AH_DTYPE_FP8_E4M3_FNUZ, 0x1p-11f, 0x00, "tie 0 | 1 quantum to 0"},
        {AH_DTYPE_FP8_E4M3_FNUZ, -0x1p-11f, 0x00, "negative tie to 0: no -0"},
        {AH_DTYPE_FP8_E4M3_FNUZ, -0.0f, 0x00, "-0 stores +0"},
        {AH_DTYPE_FP8_E4M3_FNUZ, -0x1p-12f, 0x00, "negative below half a quantum"},
        {AH_DTYPE_FP8_E4M3_FNUZ, 0x1.ep-8f, 0x08, "carry from the subnormals into exponent 1"},
        {AH_DTYPE_FP8_E4M3_FNUZ, 240.0f, 0x7f, "largest finite"},
        {AH_DTYPE_FP8_E4M3_FNUZ, 248.0f, 0x7f, "halfway past it saturates"},
        {AH_DTYPE_FP8_E4M3_FNUZ, 448.0f, 0x7f, "OCP's largest saturates"},
        {AH_DTYPE_FP8_E4M3_FNUZ, -1e30f, 0xff, "negative saturates"},
        {AH_DTYPE_FP8_E4M3_FNUZ, INFINITY, 0x7f, "infinity saturates"},
        {AH_DTYPE_FP8_E4M3_FNUZ, -INFINITY, 0xff, "-infinity saturates"},
        {AH_DTYPE_FP8_E4M3_FNUZ, NAN, 0x80, "NaN"},
        {AH_DTYPE_FP8_E4M3_FNUZ, -NAN, 0x80, "-NaN"},
        /* e5m2fnuz: bias 16; quantum 2^-17 below 2^-15 */
        {AH_DTYPE_FP8_E5M2_FNUZ, 1.0f, 0x40, "1.0"},
        {AH_DTYPE_FP8_E5M2_FNUZ, 1.125f, 0x40, "tie 1 | 1.25 to the even 1"},
        {AH_DTYPE_FP8_E5M2_FNUZ, 1.375f, 0x42, "tie 1.25 | 1.5 to the even 1.5"},
        {AH_DTYPE_FP8_E5M2_FNUZ, 0x1p-17f, 0x01, "smallest subnormal"},
        {AH_DTYPE_FP8_E5M2_FNUZ, -0x1p-18f, 0x00, "negative tie to 0: no -0"},
        {AH_DTYPE_FP8_E5M2_FNUZ, 57344.0f, 0x7f, "largest finite"},
        {AH_DTYPE_FP8_E5M2_FNUZ, 61440.0f, 0x7f, "halfway past it saturates"},
        {AH_DTYPE_FP8_E5M2_FNUZ, -INFINITY, 0xff, "-infinity saturates"},
        {AH_DTYPE_FP8_E5M2_FNUZ, NAN, 0x80, "NaN"},
        /* the OCP formats keep their -0 and NaNs */
        {AH_DTYPE_FP8_E4M3, -0.0f, 0x80, "OCP -0"},
        {AH_DTYPE_FP8_E4M3, 1.0f, 0x38, "OCP 1.0"},
        {AH_DTYPE_FP8_E4M3, 480.0f, 0x7e, "OCP saturates"},
        {AH_DTYPE_FP8_E5M2, NAN, 0x7e, "OCP e5m2 NaN"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t got[4] = {0xa5}; /* 4 bytes: ah_store_f32's widest type */
        ah_store_f32(got, 0, cases[i].t, cases[i].x);
        CHECK_MSG(got[0] == cases[i].want, "%s %s (%a): 0x%02x, want 0x%02x",
                  ah_dtype_name(cases[i].t), cases[i].why, cases[i].x, got[0], cases[i].want);
    }
}

static void test_tables(void)
{
    for (int i = 0; i < 4; i++) {
        const fmt *f = &fmts[i];
        const DLDataType d = ah_dtype_to_dl(f->t);
        CHECK_STREQ(ah_dtype_name(f->t), f->name);
        CHECK(ah_dtype_size(f->t) == 1 && ah_dtype_is_fp8(f->t));
        CHECK(ah_dtype_is_fnuz(f->t) == f->fnuz);
        CHECK(ah_fp8_max(f->t) == (float)f->max);
        CHECK(d.code == kDLUInt && d.bits == 8 && d.lanes == 1);
    }
    for (int t = AH_DTYPE_AUTO; t <= AH_DTYPE_BF16; t++)
        CHECK(!ah_dtype_is_fp8((ah_dtype)t) && !ah_dtype_is_fnuz((ah_dtype)t));
    CHECK(AH_DTYPE_FP8_E4M3_FNUZ == 6 && AH_DTYPE_FP8_E5M2_FNUZ == 7 && AH_DTYPE_COUNT == 8);
}

int main(void)
{
    test_decode();
    test_encode_search();
    test_encode_cases();
    test_tables();
    return check_report("test_fp8_formats");
}
