/*
 * The plugin key parser (plugin_keys.c): what each key type accepts and
 * refuses, with the message naming what would be right. The host checks
 * configured values with it at creation, the getters answer from it and
 * descriptor validation checks defaults with it.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "plugin_keys.h"

static int parses(const ah_config_key *k, const char *text, ah_plugin_value *v)
{
    char msg[256];
    ah_plugin_value tmp;
    return ah__plugin_key_parse(k, text, v ? v : &tmp, msg, sizeof msg) == 0;
}

static void refused(const ah_config_key *k, const char *text, const char *want_msg, int line)
{
    char msg[256] = "";
    ah_plugin_value v;
    int rc = ah__plugin_key_parse(k, text, &v, msg, sizeof msg);
    CHECK_MSG(rc == -1, "line %d: '%s' was accepted by key %s", line, text ? text : "(null)",
              k->name);
    if (want_msg)
        CHECK_MSG(strcmp(msg, want_msg) == 0, "line %d: got \"%s\", want \"%s\"", line, msg,
                  want_msg);
}
#define REFUSED(k, text, msg) refused(k, text, msg, __LINE__)

static void bools(void)
{
    const ah_config_key k = AH_KEY_BOOL_ROW("flag", "true", "doc");
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no",
                                                                                "off", "0"};
    ah_plugin_value v;
    for (int i = 0; i < 4; i++) {
        CHECK(parses(&k, yes[i], &v) && v.i == 1);
        CHECK(parses(&k, no[i], &v) && v.i == 0);
    }
    REFUSED(&k, "TRUE", "'TRUE' is not true or false");
    REFUSED(&k, "", "'' is not true or false");
    REFUSED(&k, NULL, "'' is not true or false");
    REFUSED(&k, "2", NULL);
    REFUSED(&k, "tru", NULL);
    REFUSED(&k, "true ", NULL);
    REFUSED(&k, " yes", NULL);
    REFUSED(&k, "enabled", NULL);
}

static void ints(void)
{
    const ah_config_key k = AH_KEY_INT_ROW("n", "0", -1, 64, "doc");
    ah_plugin_value v;
    CHECK(parses(&k, "-1", &v) && v.i == -1 && v.f == -1.0);
    CHECK(parses(&k, "64", &v) && v.i == 64 && v.f == 64.0);
    CHECK(parses(&k, "0", &v) && v.i == 0);
    CHECK(parses(&k, "08", &v) && v.i == 8); /* decimal, not octal */
    CHECK(parses(&k, "-0", &v) && v.i == 0);
    REFUSED(&k, "65", "'65' is not an integer in -1..64");
    REFUSED(&k, "-2", "'-2' is not an integer in -1..64");
    REFUSED(&k, "", NULL);
    REFUSED(&k, "-", NULL);
    REFUSED(&k, "+5", NULL);
    REFUSED(&k, " 5", NULL);
    REFUSED(&k, "5 ", NULL);
    REFUSED(&k, "0x10", NULL);
    REFUSED(&k, "1e1", NULL);
    REFUSED(&k, "1.0", NULL);
    REFUSED(&k, "7x", "'7x' is not an integer in -1..64");
    REFUSED(&k, "auto", NULL);

    /* The whole int64 range, and one past either end. */
    const ah_config_key all = AH_KEY_INT_ROW("all", "0", INT64_MIN, INT64_MAX, "doc");
    CHECK(parses(&all, "9223372036854775807", &v) && v.i == INT64_MAX);
    CHECK(parses(&all, "-9223372036854775808", &v) && v.i == INT64_MIN);
    REFUSED(&all, "9223372036854775808", NULL);
    REFUSED(&all, "-9223372036854775809", NULL);
    REFUSED(&all, "99999999999999999999999", NULL);
    /* A clamped overflow must not pass as the bound. */
    const ah_config_key top = AH_KEY_INT_ROW("top", "0", 0, INT64_MAX, "doc");
    REFUSED(&top, "18446744073709551616", NULL);
    /* A one-value range. */
    const ah_config_key one = AH_KEY_INT_ROW("one", "3", 3, 3, "doc");
    CHECK(parses(&one, "3", &v) && v.i == 3);
    REFUSED(&one, "4", "'4' is not an integer in 3..3");
}

static void floats(void)
{
    const ah_config_key k = AH_KEY_FLOAT_ROW("x", "0.5", 0.0, 1.0, "doc");
    ah_plugin_value v;
    CHECK(parses(&k, "0.5", &v) && v.f == 0.5);
    CHECK(parses(&k, "5e-1", &v) && v.f == 0.5);
    CHECK(parses(&k, "1", &v) && v.f == 1.0);
    CHECK(parses(&k, "0", &v) && v.f == 0.0);
    CHECK(parses(&k, "-0", &v) && v.f == 0.0);
    CHECK(parses(&k, ".25", &v) && v.f == 0.25);
    REFUSED(&k, "1.0000001", "'1.0000001' is not a number in 0..1");
    REFUSED(&k, "-0.1", NULL);
    REFUSED(&k, "nan", NULL);
    REFUSED(&k, "NaN", NULL);
    REFUSED(&k, "-nan", NULL);
    REFUSED(&k, "inf", NULL);
    REFUSED(&k, "infinity", NULL);
    REFUSED(&k, "", NULL);
    REFUSED(&k, " 0.5", NULL);
    REFUSED(&k, "0.5 ", NULL);
    REFUSED(&k, "0.5x", NULL);
    REFUSED(&k, ".", NULL);
    /* Unbounded ranges still refuse what is not finite. */
    const ah_config_key any = AH_KEY_FLOAT_ROW("any", "0", -INFINITY, INFINITY, "doc");
    CHECK(parses(&any, "-1e308", &v) && v.f == -1e308);
    CHECK(parses(&any, "1.7976931348623157e308", &v) && isfinite(v.f));
    REFUSED(&any, "1e309", NULL);
    REFUSED(&any, "-1e309", NULL);
    REFUSED(&any, "inf", NULL);
    REFUSED(&any, "-inf", NULL);
    REFUSED(&any, "nan", NULL);
    /* A NaN bound refuses everything (descriptor validation refuses such a row). */
    const ah_config_key nanr = AH_KEY_FLOAT_ROW("nanr", "0", NAN, 1.0, "doc");
    REFUSED(&nanr, "0.5", NULL);
}

static void enums(void)
{
    const ah_config_key k = AH_KEY_ENUM_ROW("mode", "auto", "auto|on|off", "doc");
    ah_plugin_value v;
    CHECK(parses(&k, "auto", &v) && v.i == 0);
    CHECK(parses(&k, "on", &v) && v.i == 1);
    CHECK(parses(&k, "off", &v) && v.i == 2);
    REFUSED(&k, "au", "'au' is not one of auto|on|off"); /* a prefix of a choice */
    REFUSED(&k, "o", NULL);
    REFUSED(&k, "auto|on", NULL);
    REFUSED(&k, "autox", NULL);
    REFUSED(&k, "Auto", NULL);
    REFUSED(&k, "", NULL);
    REFUSED(&k, "|", NULL);
    REFUSED(&k, "1", NULL); /* an index is not a choice */
    /* Empty entries in a choice list are never a value. */
    const ah_config_key gaps = AH_KEY_ENUM_ROW("gaps", "a", "|a||b|", "doc");
    CHECK(parses(&gaps, "a", &v) && v.i == 1);
    CHECK(parses(&gaps, "b", &v) && v.i == 3);
    REFUSED(&gaps, "", NULL);
    const ah_config_key none = AH_KEY_ENUM_ROW("none", "a", NULL, "doc");
    REFUSED(&none, "a", "'a' is not one of ");
    const ah_config_key single = AH_KEY_ENUM_ROW("single", "x", "x", "doc");
    CHECK(parses(&single, "x", &v) && v.i == 0);
}

static void strings(void)
{
    const ah_config_key k = AH_KEY_STRING_ROW("s", "", "doc");
    char text[300];
    memset(text, 'a', sizeof text);
    text[255] = '\0';
    CHECK(parses(&k, "", NULL));
    CHECK(parses(&k, "any text | at all", NULL));
    CHECK(parses(&k, text, NULL));
    text[255] = 'a';
    text[256] = '\0';
    REFUSED(&k, text, NULL);
}

static void other(void)
{
    ah_config_key bad = AH_KEY_STRING_ROW("bad", "", "doc");
    bad.type = AH_KEY_TYPE_COUNT;
    REFUSED(&bad, "x", "'x' is not nothing (unknown key type 5)");
    char buf[64];
    ah__plugin_key_describe(&bad, buf, sizeof buf);
    CHECK_STREQ(buf, "nothing (unknown key type 5)");
    CHECK_STREQ(ah__plugin_key_type_str(AH_KEY_ENUM), "enum");
    CHECK_STREQ(ah__plugin_key_type_str(AH_KEY_TYPE_COUNT), "?");
    /* A long value is quoted shortened in the message. */
    char text[300], msg[256];
    memset(text, '7', sizeof text);
    text[299] = '\0';
    ah_plugin_value v;
    const ah_config_key n = AH_KEY_INT_ROW("n", "0", 0, 1, "doc");
    CHECK(ah__plugin_key_parse(&n, text, &v, msg, sizeof msg) == -1 && strlen(msg) < 120);

    static const ah_config_key keys[] = {AH_KEY_BOOL_ROW("a", "true", "d"),
                                         AH_KEY_INT_ROW("b", "1", 0, 2, "d")};
    CHECK(ah__plugin_key_find(keys, 2, "b") == &keys[1]);
    CHECK(ah__plugin_key_find(keys, 2, "c") == NULL);
    CHECK(ah__plugin_key_find(keys, 1, "b") == NULL);
    CHECK(ah__plugin_key_find(NULL, 2, "a") == NULL);
    CHECK(ah__plugin_key_find(keys, 2, NULL) == NULL);

    /* Spellings of one value mean the same; another value does not. */
    ah_plugin_value x, y;
    CHECK(parses(&keys[0], "on", &x) && parses(&keys[0], "true", &y));
    CHECK(ah__plugin_value_equal(&keys[0], &x, "on", &y, "true"));
    CHECK(parses(&keys[0], "0", &y) && !ah__plugin_value_equal(&keys[0], &x, "on", &y, "0"));
    const ah_config_key s = AH_KEY_STRING_ROW("s", "", "d");
    CHECK(!ah__plugin_value_equal(&s, &x, "a", &y, "b") &&
          ah__plugin_value_equal(&s, &x, "a", &y, "a"));
}

int main(void)
{
    bools();
    ints();
    floats();
    enums();
    strings();
    other();
    return check_report("test_plugin_keys");
}
