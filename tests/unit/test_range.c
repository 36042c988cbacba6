/*
 * Layer ranges: every form the syntax allows, membership at the edges, and
 * the exact message for each kind of malformed range.
 */
#include <stdint.h>
#include <stdio.h>

#include "alloc.h"
#include "check.h"
#include "range.h"

/* The layers of 0..n-1 the range selects, as a 0/1 string. */
static void members(const char *text, uint32_t n, char *out)
{
    ah_range r;
    char err[256];
    int rc = ah__range_parse(text, &r, err, sizeof err);
    CHECK_MSG(rc == 0, "'%s': %s", text, err);
    for (uint32_t i = 0; i < n; i++) out[i] = rc == 0 && ah__range_contains(&r, i) ? '1' : '0';
    out[n] = '\0';
    ah__range_free(&r);
}

static void good(void)
{
    char m[64];
    members("*", 8, m);
    CHECK_STREQ(m, "11111111");
    members("3", 8, m);
    CHECK_STREQ(m, "00010000");
    members("0", 8, m);
    CHECK_STREQ(m, "10000000");
    members("2-5", 8, m);
    CHECK_STREQ(m, "00111100");
    members("1-7/2", 8, m);
    CHECK_STREQ(m, "01010101");
    members("5-47/6", 24, m); /* the global layers of a 5:1 local/global model */
    CHECK_STREQ(m, "000001000001000001000001");
    members("0-2, 6", 8, m);
    CHECK_STREQ(m, "11100010");
    members(" 1 - 6 / 5 ,7", 8, m);
    CHECK_STREQ(m, "01000011");
    members("4-*", 8, m);
    CHECK_STREQ(m, "00001111");
    members("1-*/3", 8, m);
    CHECK_STREQ(m, "01001001");
    members("*/4", 8, m);
    CHECK_STREQ(m, "10001000");
    members("2-2", 8, m);
    CHECK_STREQ(m, "00100000");

    ah_range r;
    char err[64];
    CHECK(ah__range_parse("4294967294", &r, err, sizeof err) == 0);
    CHECK(ah__range_contains(&r, 4294967294u));
    CHECK(!ah__range_contains(&r, 0));
    ah__range_free(&r);
    CHECK(ah__range_parse("0-*", &r, err, sizeof err) == 0);
    CHECK(r.n_parts == 1 && r.parts[0].hi == UINT32_MAX && ah__range_contains(&r, 4000000000u));
    ah__range_free(&r);
    CHECK(r.parts == NULL && r.n_parts == 0);
}

static void bad(const char *text, const char *expected)
{
    ah_range r = {(ah_range_part *)&r, 99};
    char err[256] = "";
    CHECK_MSG(ah__range_parse(text, &r, err, sizeof err) == -1, "'%s' parsed", text);
    CHECK_STREQ(err, expected);
    CHECK(r.parts == NULL && r.n_parts == 0);
}

static void errors(void)
{
    bad("", "empty layer range");
    bad("  ", "empty layer range");
    bad("1,,2", "empty part in '1,,2'");
    bad("1,", "empty part in '1,'");
    bad("x", "part 'x' is not a layer, a range 'a-b', a stepped range 'a-b/s' or '*'");
    bad("1-", "part '1-' is not a layer, a range 'a-b', a stepped range 'a-b/s' or '*'");
    bad("-3", "part '-3' is not a layer, a range 'a-b', a stepped range 'a-b/s' or '*'");
    bad("1-2-3", "part '1-2-3' is not a layer, a range 'a-b', a stepped range 'a-b/s' or '*'");
    bad("0-3x", "part '0-3x' is not a layer, a range 'a-b', a stepped range 'a-b/s' or '*'");
    bad("1-9/*", "part '1-9/*' is not a layer, a range 'a-b', a stepped range 'a-b/s' or '*'");
    bad("0-3,5-1", "part '5-1': start 5 is after end 1");
    bad("1-9/0", "part '1-9/0': the step must be at least 1");
    bad("7/2", "part '7/2': a step needs a range, as in 1-47/2");
    bad("4294967295", "part '4294967295': layer number too large");
    bad("1-99999999999", "part '1-99999999999': layer number too large");
}

static void out_of_memory(void)
{
    ah_range r;
    char err[64];
    long live = ah__alloc_live();
    ah__fault_inject_after(1);
    CHECK(ah__range_parse("1-3", &r, err, sizeof err) == -1);
    ah__fault_inject_after(0);
    CHECK_STREQ(err, "out of memory");
    CHECK(ah__alloc_live() == live);
}

int main(void)
{
    good();
    errors();
    out_of_memory();
    return check_report("test_range");
}
