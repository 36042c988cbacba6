/*
 * The host configuration: every key read into its field, defaults, the
 * exact message for each kind of malformed INI, failure of every allocation
 * ending in AH_ERR_OUT_OF_MEMORY with nothing leaked, and the dump reading
 * back as the configuration it came from.
 *
 * `test_config --dump` prints the documented default dump, the text that
 * docs/configuration.md embeds (this test checks that it does).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "check.h"
#include "mutate.h"
#include "config.h"

static const char rich[] =
    "; a configuration that sets every key\n"
    "[search]\n"
    "paths = /opt/a/plugins, /opt/b\n"
    "cache = /var/cache/attnhost.cache\n"
    "scan = in_process\n"
    "scan_timeout_ms = 2500\n"
    "\n"
    "[select]\n"
    "  priority = cuda_fa3, cuda_flashinfer , triton ; indentation and comments are fine\n"
    "prefill_priority = cuda_fa3\n"
    "decode_priority = cuda_flashinfer, triton\n"
    "disable = xpu\n"
    "force = triton\n"
    "fallback = error\n"
    "mixed_steps = whole\n"
    "[run]\n"
    "validate = false\n"
    "[layer.0-3]\n"
    "backend = cpu_amx\n"
    "[layer.1-47/2, 50]\n"
    "priority = triton\n"
    "prefill_priority = cuda_fa3\n"
    "decode_priority = cuda_flashinfer\n"
    "[plugin.cuda_fa3]\n"
    "num_splits = 4\n"
    "scheduler_metadata: yes\n"
    "[plugin.triton]\n"
    "kernel_dir = /opt/kernels;v2\n";

static ah_status load_text(ah_config *c, const char *text, ah_error *err)
{
    return ah__config_load(c, NULL, text, "t.ini", err);
}

static int is_empty(const ah_config *c)
{
    static const ah_config zero;
    return memcmp(c, &zero, sizeof zero) == 0;
}

static void every_key(void)
{
    ah_config c;
    ah_error err = {""};
    CHECK_MSG(load_text(&c, rich, &err) == AH_OK, "%s", err.msg);
    CHECK_STREQ(c.source, "t.ini");
    CHECK(c.search_paths.n == 2);
    if (c.search_paths.n == 2) {
        CHECK_STREQ(c.search_paths.items[0], "/opt/a/plugins");
        CHECK_STREQ(c.search_paths.items[1], "/opt/b");
    }
    CHECK_STREQ(c.cache_path, "/var/cache/attnhost.cache");
    CHECK(c.scan_mode == AH_SCAN_IN_PROCESS);
    CHECK(c.scan_timeout_ms == 2500);
    CHECK(c.priority.n == 3);
    if (c.priority.n == 3) {
        CHECK_STREQ(c.priority.items[0], "cuda_fa3");
        CHECK_STREQ(c.priority.items[1], "cuda_flashinfer");
        CHECK_STREQ(c.priority.items[2], "triton");
    }
    CHECK(c.prefill_priority.n == 1 && !strcmp(c.prefill_priority.items[0], "cuda_fa3"));
    CHECK(c.decode_priority.n == 2 && !strcmp(c.decode_priority.items[1], "triton"));
    CHECK(c.disable.n == 1 && !strcmp(c.disable.items[0], "xpu"));
    CHECK_STREQ(c.force, "triton");
    CHECK(c.fallback == AH_FALLBACK_ERROR);
    CHECK(c.mixed_steps == AH_MIXED_STEPS_WHOLE);
    CHECK(c.validate == 0);
    CHECK(c.n_layer_rules == 2);
    if (c.n_layer_rules == 2) {
        const ah_layer_rule *r0 = &c.layer_rules[0], *r1 = &c.layer_rules[1];
        CHECK_STREQ(r0->section, "layer.0-3");
        CHECK_STREQ(r0->backend, "cpu_amx");
        CHECK(r0->priority.n == 0 && r0->prefill_priority.n == 0);
        CHECK(ah__range_contains(&r0->range, 3) && !ah__range_contains(&r0->range, 4));
        CHECK_STREQ(r1->section, "layer.1-47/2, 50");
        CHECK(r1->backend == NULL);
        CHECK(r1->priority.n == 1 && r1->prefill_priority.n == 1 && r1->decode_priority.n == 1);
        CHECK(ah__range_contains(&r1->range, 47) && ah__range_contains(&r1->range, 50) &&
              !ah__range_contains(&r1->range, 48));
    }
    CHECK(c.n_plugin_keys == 3);
    CHECK_STREQ(ah__config_plugin_key(&c, "cuda_fa3", "num_splits"), "4");
    CHECK_STREQ(ah__config_plugin_key(&c, "cuda_fa3", "scheduler_metadata"), "yes");
    CHECK_STREQ(ah__config_plugin_key(&c, "triton", "kernel_dir"), "/opt/kernels;v2");
    CHECK(ah__config_plugin_key(&c, "triton", "num_splits") == NULL);
    CHECK(ah__config_plugin_key(&c, "cpu_amx", "kernel_dir") == NULL);
    if (c.n_plugin_keys == 3) CHECK(c.plugin_keys[2].line == 28);
    ah__config_free(&c);
    CHECK(is_empty(&c));
    ah__config_free(&c); /* freeing twice is harmless */
}

static void defaults(void)
{
    ah_config c;
    ah_error err = {""};
    /* A file that sets nothing: the table's defaults. */
    CHECK_MSG(load_text(&c, "; nothing\n\n", &err) == AH_OK, "%s", err.msg);
    CHECK(c.search_paths.n == 0 && c.cache_path == NULL);
    CHECK(c.scan_mode == AH_SCAN_DEFAULT);
    CHECK(c.scan_timeout_ms == 10000);
    CHECK(c.priority.n == 0 && c.prefill_priority.n == 0 && c.decode_priority.n == 0);
    CHECK(c.disable.n == 0 && c.force == NULL);
    CHECK(c.fallback == AH_FALLBACK_WARN);
    CHECK(c.mixed_steps == AH_MIXED_STEPS_MEASURED);
    CHECK(c.validate == 1);
    CHECK(c.n_layer_rules == 0 && c.n_plugin_keys == 0);
    ah__config_free(&c);
    CHECK_MSG(load_text(&c, "[select]\nmixed_steps = split\n", &err) == AH_OK, "%s", err.msg);
    CHECK(c.mixed_steps == AH_MIXED_STEPS_SPLIT);
    ah__config_free(&c);

    /* No path, no text: the built-in configuration. */
    CHECK(ah__config_load(&c, NULL, NULL, NULL, &err) == AH_OK);
    CHECK_STREQ(c.source, "<embedded>");
    CHECK(c.fallback == AH_FALLBACK_WARN && c.validate == 1 && c.priority.n == 0);
    CHECK(c.scan_mode == AH_SCAN_CHILD);
    ah__config_free(&c);

    /* "cache =" means no cache: an empty string, not "not set". */
    CHECK(load_text(&c, "[search]\ncache =\n", &err) == AH_OK);
    CHECK(c.cache_path && c.cache_path[0] == '\0');
    ah__config_free(&c);

    /* The same section twice continues it. */
    CHECK(load_text(&c,
                    "[select]\nforce = a\n[run]\nvalidate = false\n[select]\nfallback = allow\n",
                    &err) == AH_OK);
    CHECK(c.fallback == AH_FALLBACK_ALLOW && c.force && !strcmp(c.force, "a") && !c.validate);
    ah__config_free(&c);

    /* The same layer range twice makes two rules, applied in file order. */
    CHECK(load_text(&c, "[layer.0-3]\nbackend = a\n[layer.0-3]\nbackend = b\n", &err) == AH_OK);
    CHECK(c.n_layer_rules == 2 && !strcmp(c.layer_rules[1].backend, "b"));
    ah__config_free(&c);

    /* An indented line after a key is a key of its own, not (as inih would
     * have it) a continuation of the previous value: spaces, tabs, and the
     * form feeds and vertical tabs inih counts as whitespace too. */
    CHECK(load_text(&c,
                    "[select]\nfallback = allow\n    force = a\n\tdisable = b\n\f\vpolicy = "
                    "measured\n",
                    &err) == AH_OK);
    CHECK(c.fallback == AH_FALLBACK_ALLOW && c.force && !strcmp(c.force, "a") && c.disable.n == 1);
    CHECK(c.policy == AH_POLICY_MEASURED);
    ah__config_free(&c);

    /* The longest line inih reads whole is accepted; one more is refused. */
    char text[512];
    int n = snprintf(text, sizeof text, "[plugin.p]\n  k = ");
    int value_len = 197 - 4;
    memset(text + n, 'v', (size_t)value_len);
    strcpy(text + n + value_len, "  \n");
    CHECK_MSG(load_text(&c, text, &err) == AH_OK, "%s", err.msg);
    CHECK(c.n_plugin_keys == 1 && strlen(c.plugin_keys[0].value) == (size_t)value_len);
    ah__config_free(&c);
    text[n + value_len] = 'v';
    CHECK(load_text(&c, text, &err) == AH_ERR_CONFIG);
    CHECK_STREQ(err.msg, "t.ini:2: [plugin.p]: line is longer than 197 characters");

    /* CRLF line ends, a UTF-8 BOM, no final newline. */
    CHECK_MSG(load_text(&c, "\xEF\xBB\xBF[run]\r\nvalidate = false\r\n[select]\r\nforce = x",
                        &err) == AH_OK,
              "%s", err.msg);
    CHECK(c.validate == 0 && c.force && !strcmp(c.force, "x"));
    ah__config_free(&c);
}

typedef struct bad_case {
    const char *text;
    const char *message;
} bad_case;

#define LONG_LIST "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
static const bad_case bad_cases[] = {
    {"[select]\nfallback = maybe\n",
     "bad.ini:2: [select] fallback: 'maybe' is not one of error, warn, allow"},
    {"[select]\npriority = a,,b\n", "bad.ini:2: [select] priority: empty entry in 'a,,b'"},
    {"[select]\nmixed_steps = maybe\n",
     "bad.ini:2: [select] mixed_steps: 'maybe' is not one of split, whole, measured"},
    {"[select]\npriority = a, b,\n", "bad.ini:2: [select] priority: empty entry in 'a, b,'"},
    {"[select]\npriority =\n", "bad.ini:2: [select] priority: empty list"},
    {"[select]\ndisable = a, b, a\n", "bad.ini:2: [select] disable: 'a' is listed twice"},
    {"[select]\npriority = flash-infer\n",
     "bad.ini:2: [select] priority: 'flash-infer' is not a plugin name (a-z, 0-9 and _ only)"},
    {"[select]\nforce = Triton\n",
     "bad.ini:2: [select] force: 'Triton' is not a plugin name (a-z, 0-9 and _ only)"},
    {"[search]\ncache =;x\n",
     "bad.ini:2: [search] cache: ';x' starts with ';', which reads as a comment"},
    {"[search]\npaths = /a,;b\n",
     "bad.ini:2: [search] paths: entry ';b' starts with ';', which reads as a comment"},
    {"[plugin.cpu_amx]\nisa =#amx\n",
     "bad.ini:2: [plugin.cpu_amx] isa: '#amx' starts with '#', which reads as a comment"},
    {"[select]\nforce =\n", "bad.ini:2: [select] force: empty value; expected a plugin name"},
    {"[select]\nfallback = warn\nfallback = error\n",
     "bad.ini:3: [select] fallback: duplicate key (first set at line 2)"},
    {"[select]\nfallback = warn\n[run]\nvalidate = true\n[select]\nfallback = warn\n",
     "bad.ini:6: [select] fallback: duplicate key (first set at line 2)"},
    {"[select]\nforce = a\ndisable = b, a\n",
     "bad.ini:2: [select] force: 'a' is also in disable (line 3)"},
    {"[select]\nfalback = warn\n",
     "bad.ini:2: [select] falback: unknown key; this section takes priority, prefill_priority, "
     "decode_priority, disable, force, fallback, require_checked, policy, mixed_steps"},
    {"[search]\nscan_timeout_ms = 10s\n",
     "bad.ini:2: [search] scan_timeout_ms: '10s' is not a whole number"},
    {"[search]\nscan_timeout_ms = -5\n",
     "bad.ini:2: [search] scan_timeout_ms: '-5' is not a whole number"},
    {"[search]\nscan_timeout_ms =\n",
     "bad.ini:2: [search] scan_timeout_ms: '' is not a whole number"},
    {"[search]\nscan_timeout_ms = 0\n",
     "bad.ini:2: [search] scan_timeout_ms: '0' is out of range 1..3600000"},
    {"[search]\nscan_timeout_ms = 99999999999\n",
     "bad.ini:2: [search] scan_timeout_ms: '99999999999' is out of range 1..3600000"},
    {"[search]\nscan = thread\n",
     "bad.ini:2: [search] scan: 'thread' is not one of child, in_process"},
    {"[search]\npaths = /a, ,/b\n", "bad.ini:2: [search] paths: empty entry in '/a, ,/b'"},
    {"[run]\nvalidate = yes\n", "bad.ini:2: [run] validate: 'yes' is not one of true, false"},
    {"[layer.3-1]\nbackend = a\n",
     "bad.ini:1: [layer.3-1]: bad layer range: part '3-1': start 3 is after end 1"},
    {"[layer.0-3x]\n",
     "bad.ini:1: [layer.0-3x]: bad layer range: part '0-3x' is not a layer, a range 'a-b', a "
     "stepped range 'a-b/s' or '*'"},
    {"[layer.]\n",
     "bad.ini:1: [layer.]: no layer range: write [layer.<range>] with a layer '7', a range "
     "'0-31', a stepped range '1-47/2', '*', or a comma-separated list of these"},
    {"[layer]\n",
     "bad.ini:1: [layer]: no layer range: write [layer.<range>] with a layer '7', a range "
     "'0-31', a stepped range '1-47/2', '*', or a comma-separated list of these"},
    {"[layer.0-3]\nbackend = a\nbackend = b\n",
     "bad.ini:3: [layer.0-3] backend: duplicate key (first set at line 2)"},
    {"[layer.0-3]\nfallback = warn\n",
     "bad.ini:2: [layer.0-3] fallback: unknown key; this section takes priority, "
     "prefill_priority, decode_priority, backend"},
    {"[layer.*]\ndecode_priority = a,,\n",
     "bad.ini:2: [layer.*] decode_priority: empty entry in 'a,,'"},
    {"[plugin.Foo]\nx = 1\n",
     "bad.ini:1: [plugin.Foo]: 'Foo' is not a plugin name (a-z, 0-9 and _ only)"},
    {"[plugin.cuda-fa3]\n",
     "bad.ini:1: [plugin.cuda-fa3]: 'cuda-fa3' is not a plugin name (a-z, 0-9 and _ only)"},
    {"[plugin.]\n", "bad.ini:1: [plugin.]: no plugin name: write [plugin.<name>]"},
    {"[plugin.a]\nx = 1\n[plugin.b]\nx = 1\n[plugin.a]\nx = 2\n",
     "bad.ini:6: [plugin.a] x: duplicate key (first set at line 2)"},
    {"[selec]\n",
     "bad.ini:1: [selec]: unknown section; expected [search], [select], [run], [layer.<range>] or "
     "[plugin.<name>]"},
    {"[Select]\n",
     "bad.ini:1: [Select]: unknown section; expected [search], [select], [run], [layer.<range>] or "
     "[plugin.<name>]"},
    {"[]\n",
     "bad.ini:1: []: unknown section; expected [search], [select], [run], [layer.<range>] or "
     "[plugin.<name>]"},
    {"[select]\nfallback warn\n",
     "bad.ini:2: [select]: expected 'key = value', got 'fallback warn'"},
    {"[select]\nfallback ; = warn\n",
     "bad.ini:2: [select]: expected 'key = value', got 'fallback ; = warn'"},
    {"\n\nfallback\n", "bad.ini:3: expected 'key = value', got 'fallback'"},
    {"[select\nfallback = warn\n", "bad.ini:1: section header '[select' has no closing ']'"},
    {"[run]\n[select ; ]\n", "bad.ini:2: section header '[select ; ]' has no closing ']'"},
    {"[select] priority = a\n", "bad.ini:1: unexpected text after section header '[select]'"},
    {"fallback = warn\n", "bad.ini:1: fallback: key before any [section]"},
    {"[select]\n= warn\n", "bad.ini:2: [select]: a key name is missing before '='"},
    {"[select]\npriority = " LONG_LIST "," LONG_LIST "," LONG_LIST "\n",
     "bad.ini:2: [select]: line is longer than 197 characters"},
};

static void malformed(void)
{
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        ah_config c;
        memset(&c, 0x5a, sizeof c); /* whatever was there is overwritten */
        ah_error err = {""};
        long live = ah__alloc_live();
        ah_status s = ah__config_load(&c, NULL, bad_cases[i].text, "bad.ini", &err);
        CHECK_MSG(s == AH_ERR_CONFIG, "case %zu: status %d", i, (int)s);
        CHECK_STREQ(err.msg, bad_cases[i].message);
        CHECK_MSG(is_empty(&c), "case %zu left the config non-empty", i);
        CHECK_MSG(ah__alloc_live() == live, "case %zu leaked %ld blocks", i,
                  ah__alloc_live() - live);
        /* No error detail wanted: same status, no crash. */
        CHECK(ah__config_load(&c, NULL, bad_cases[i].text, "bad.ini", NULL) == AH_ERR_CONFIG);
    }
}

static void files(void)
{
    char path[] = "/tmp/ah_test_config_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    const char text[] = "[select]\npriority = triton\n\n[run]\nvalidate = maybe\n";
    CHECK(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
    close(fd);
    ah_config c;
    ah_error err;
    char expected[512];
    CHECK(ah__config_load(&c, path, NULL, NULL, &err) == AH_ERR_CONFIG);
    snprintf(expected, sizeof expected, "%s:5: [run] validate: 'maybe' is not one of true, false",
             path);
    CHECK_STREQ(err.msg, expected);

    FILE *f = fopen(path, "w");
    fputs("[select]\npriority = triton\n", f);
    fclose(f);
    CHECK(ah__config_load(&c, path, NULL, NULL, &err) == AH_OK);
    CHECK_STREQ(c.source, path);
    CHECK(c.priority.n == 1);
    ah__config_free(&c);
    /* The source name, when given, replaces the path in messages. */
    f = fopen(path, "w");
    fputs("[select]\nforce = a b\n", f);
    fclose(f);
    CHECK(ah__config_load(&c, path, NULL, "site.ini", &err) == AH_ERR_CONFIG);
    CHECK_STREQ(err.msg,
                "site.ini:2: [select] force: 'a b' is not a plugin name (a-z, 0-9 and _ only)");
    /* A NUL byte is not silently the end of the text. */
    f = fopen(path, "wb");
    fwrite("[run]\nvalidate = true\n\0[select]\n", 1, 32, f);
    fclose(f);
    CHECK(ah__config_load(&c, path, NULL, "nul.ini", &err) == AH_ERR_CONFIG);
    CHECK_STREQ(err.msg, "nul.ini:3: NUL byte: not a text file");
    unlink(path);

    CHECK(ah__config_load(&c, path, NULL, NULL, &err) == AH_ERR_IO);
    snprintf(expected, sizeof expected, "%s: cannot open: No such file or directory", path);
    CHECK_STREQ(err.msg, expected);
    CHECK(is_empty(&c));
}

/* Fail each allocation of a load in turn: every failure must end in
 * AH_ERR_OUT_OF_MEMORY with an empty config and nothing leaked. */
static void out_of_memory(const char *text, int expect_ok)
{
    ah_config c;
    ah_error err;
    ah__fault_inject_after(0);
    ah_status s = load_text(&c, text, &err);
    long n = ah__alloc_count();
    CHECK(s == (expect_ok ? AH_OK : AH_ERR_CONFIG));
    ah__config_free(&c);
    CHECK(n > 0);
    for (long i = 1; i <= n; i++) {
        long live = ah__alloc_live();
        ah__fault_inject_after(i);
        s = load_text(&c, text, &err);
        ah__fault_inject_after(0);
        CHECK_MSG(s == AH_ERR_OUT_OF_MEMORY, "allocation %ld of %ld: status %d (%s)", i, n, (int)s,
                  err.msg);
        CHECK_MSG(is_empty(&c), "allocation %ld of %ld: config not empty", i, n);
        ah__config_free(&c);
        CHECK_MSG(ah__alloc_live() == live, "allocation %ld of %ld: %ld blocks leaked", i, n,
                  ah__alloc_live() - live);
    }
}

static void out_of_memory_file(void)
{
    char path[] = "/tmp/ah_test_config_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return;
    /* Bigger than the first read buffer, so the buffer grows. */
    for (int i = 0; i < 400; i++) {
        char line[64];
        int n = snprintf(line, sizeof line, "[plugin.p%d]\nkey = value %d\n", i, i);
        CHECK(write(fd, line, (size_t)n) == n);
    }
    close(fd);
    ah_config c;
    ah_error err;
    ah__fault_inject_after(0);
    CHECK(ah__config_load(&c, path, NULL, NULL, &err) == AH_OK);
    long n = ah__alloc_count();
    CHECK(c.n_plugin_keys == 400);
    ah__config_free(&c);
    for (long i = 1; i <= n; i++) {
        long live = ah__alloc_live();
        ah__fault_inject_after(i);
        ah_status s = ah__config_load(&c, path, NULL, NULL, &err);
        ah__fault_inject_after(0);
        CHECK_MSG(s == AH_ERR_OUT_OF_MEMORY, "allocation %ld of %ld: status %d", i, n, (int)s);
        CHECK(is_empty(&c));
        CHECK_MSG(ah__alloc_live() == live, "allocation %ld: leak", i);
    }
    unlink(path);
}

/* Load text, dump it (effective), load the dump, dump again: same text. */
static void round_trip(const char *text)
{
    ah_config a, b;
    ah_error err;
    char *d1 = NULL, *d2 = NULL;
    CHECK_MSG(load_text(&a, text, &err) == AH_OK, "%s", err.msg);
    CHECK(ah__config_dump(&a, 1, &d1) == AH_OK);
    CHECK_MSG(ah__config_load(&b, NULL, d1, "t.ini", &err) == AH_OK, "%s\n%s", err.msg, d1);
    CHECK(ah__config_dump(&b, 1, &d2) == AH_OK);
    if (d1 && d2) CHECK_STREQ(d2, d1);
    ah__free(d1);
    ah__free(d2);
    ah__config_free(&a);
    ah__config_free(&b);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 17];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void dump(void)
{
    round_trip(rich);
    round_trip("");
    round_trip("[search]\ncache =\n");

    char *text = NULL;
    CHECK(ah__config_dump(NULL, 1, &text) == AH_ERR_INVALID_ARGUMENT && text == NULL);

    /* The documented dump names every key and reads back as the defaults. */
    CHECK(ah__config_dump(NULL, 0, &text) == AH_OK);
    if (!text) return;
    CHECK_CONTAINS(text, "# Value: one of error, warn, allow. Default: warn.\nfallback = warn\n");
    CHECK_CONTAINS(text, "#force =\n");
    CHECK_CONTAINS(text, "scan_timeout_ms = 10000\n");
    CHECK_CONTAINS(text, "#[layer.0-3]\n");
    CHECK_CONTAINS(text, "#backend =\n");
    CHECK_CONTAINS(text, "[plugin.<name>]");
    ah_config a, b;
    ah_error err;
    CHECK_MSG(load_text(&a, text, &err) == AH_OK, "%s", err.msg);
    CHECK(load_text(&b, "", &err) == AH_OK);
    char *da = NULL, *db = NULL;
    ah__config_dump(&a, 1, &da);
    ah__config_dump(&b, 1, &db);
    if (da && db) CHECK_STREQ(da, db);
    ah__free(da);
    ah__free(db);
    ah__config_free(&a);
    ah__config_free(&b);

    /* docs/configuration.md embeds this very text. */
    const char *doc = slurp(ATTNHOST_SOURCE_DIR "/docs/configuration.md");
    CHECK_MSG(doc && strstr(doc, text), "docs/configuration.md lacks the current dump; "
                                        "regenerate it with `test_config --dump`");
    /* The installed default file and the built-in text say the same. */
    CHECK(ah__config_load(&a, ATTNHOST_SOURCE_DIR "/examples/configs/attnhost.ini", NULL, "x",
                          &err) == AH_OK);
    CHECK(ah__config_load(&b, NULL, NULL, "x", &err) == AH_OK);
    ah__config_dump(&a, 1, &da);
    ah__config_dump(&b, 1, &db);
    if (da && db) CHECK_STREQ(da, db);
    ah__free(da);
    ah__free(db);
    ah__config_free(&a);
    ah__config_free(&b);

    /* Every allocation of the dump may fail, cleanly. */
    ah__fault_inject_after(0);
    char *t2 = NULL;
    CHECK(ah__config_dump(NULL, 0, &t2) == AH_OK);
    long n = ah__alloc_count();
    ah__free(t2);
    for (long i = 1; i <= n; i++) {
        long live = ah__alloc_live();
        ah__fault_inject_after(i);
        ah_status s = ah__config_dump(NULL, 0, &t2);
        ah__fault_inject_after(0);
        CHECK(s == AH_ERR_OUT_OF_MEMORY && t2 == NULL);
        CHECK(ah__alloc_live() == live);
    }
    ah__free(text);
}

/* Plugin sections from declared key tables: documented with type and
 * default, commented out; effective with set values live, the rest
 * commented; sections for plugins without a table as written; both read
 * back; every allocation may fail cleanly. The Markdown reference too. */
static void dump_plugins(void)
{
    static const ah_config_key keys[] = {
        AH_KEY_INT_ROW("threads", "0", 0, 64, "Threads; 0: all."),
        AH_KEY_ENUM_ROW("mode", "auto", "auto|on|off", "How | why."),
        AH_KEY_STRING_ROW("label", "", "A label.")};
    const ah_plugin_key_table t[] = {{"alpha", keys, 3}, {"beta", NULL, 0}};
    char *text = NULL;
    CHECK(ah__config_dump_plugins(NULL, 0, t, 2, &text) == AH_OK && text);
    if (!text) return;
    CHECK_CONTAINS(text, "[plugin.alpha]\n\n# Threads; 0: all.\n# Value: an integer in 0..64. "
                         "Default: 0.\n#threads = 0\n\n");
    CHECK_CONTAINS(text, "# Value: one of auto|on|off. Default: auto.\n#mode = auto\n");
    CHECK_CONTAINS(text, "#label = \n");
    CHECK_CONTAINS(text, "[plugin.beta]\n");
    ah_config a;
    ah_error err;
    CHECK_MSG(load_text(&a, text, &err) == AH_OK, "%s", err.msg);
    CHECK(a.n_plugin_keys == 0);
    ah__config_free(&a);
    ah__free(text);

    CHECK(load_text(&a, "[plugin.ghost]\nx = 1\n[plugin.alpha]\nmode = on\n[plugin.ghost]\ny = 2\n",
                    &err) == AH_OK);
    CHECK(ah__config_dump_plugins(&a, 1, t, 2, &text) == AH_OK && text);
    if (text) {
        CHECK_CONTAINS(text, "[plugin.alpha]\n#threads = 0\nmode = on\n#label = \n\n");
        CHECK_CONTAINS(text, "[plugin.ghost]\nx = 1\ny = 2\n");
        ah_config b;
        char *again = NULL;
        CHECK_MSG(load_text(&b, text, &err) == AH_OK, "%s", err.msg);
        CHECK(ah__config_dump_plugins(&b, 1, t, 2, &again) == AH_OK && again);
        /* the same but for the first line, which names the source */
        if (again) CHECK_STREQ(strchr(again, '\n'), strchr(text, '\n'));
        ah__free(again);
        ah__config_free(&b);
    }
    ah__free(text);

    CHECK(ah__plugin_keys_markdown(t, 1, &text) == AH_OK && text);
    if (text) {
        CHECK_CONTAINS(text, "<!-- plugin-keys:alpha -->\n#### [plugin.alpha]\n");
        CHECK_CONTAINS(text, "| `mode` | one of auto\\|on\\|off | `auto` | How \\| why. |\n");
        CHECK_CONTAINS(text, "| `label` | text of at most 255 bytes | (empty) | A label. |\n");
        CHECK_CONTAINS(text, "<!-- /plugin-keys:alpha -->\n");
    }
    ah__free(text);

    for (int md = 0; md < 2; md++) {
        ah__fault_inject_after(0);
        char *t2 = NULL;
        CHECK((md ? ah__plugin_keys_markdown(t, 2, &t2)
                  : ah__config_dump_plugins(&a, 1, t, 2, &t2)) == AH_OK);
        long n = ah__alloc_count();
        ah__free(t2);
        for (long i = 1; i <= n; i++) {
            long live = ah__alloc_live();
            ah__fault_inject_after(i);
            ah_status s = md ? ah__plugin_keys_markdown(t, 2, &t2)
                             : ah__config_dump_plugins(&a, 1, t, 2, &t2);
            ah__fault_inject_after(0);
            CHECK(s == AH_ERR_OUT_OF_MEMORY && t2 == NULL);
            CHECK(ah__alloc_live() == live);
        }
    }
    ah__config_free(&a);
}

/* Every example configuration parses. */
static void examples(void)
{
    static const char *const names[] = {"attnhost.ini", "phase-split.ini", "per-layer.ini",
                                        "forced.ini"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/examples/configs/%s", ATTNHOST_SOURCE_DIR, names[i]);
        ah_config c;
        ah_error err = {""};
        CHECK_MSG(ah__config_load(&c, path, NULL, NULL, &err) == AH_OK, "%s", err.msg);
        ah__config_free(&c);
    }
}

/* Deterministic byte-level mutations of a valid input (a poor man's fuzzer
 * that runs in CI): whatever the text, a load either succeeds or fails with
 * a message naming the source, leaves nothing behind, and never crashes. */
static void mutations(void)
{
    const char *seed = rich;
    size_t len = strlen(seed);
    uint32_t state = 12345;
    char buf[4096];
    int loaded = 0, refused = 0;
    for (int iter = 0; iter < 3000 && len < sizeof buf - 8; iter++) {
        memcpy(buf, seed, len + 1);
        mutate_text(buf, len, 1 + iter % 4, &state);
        long live = ah__alloc_live();
        ah_config c;
        ah_error err = {""};
        ah_status s = load_text(&c, buf, &err);
        CHECK_MSG(s == AH_OK || s == AH_ERR_CONFIG, "iteration %d: status %d", iter, (int)s);
        loaded += s == AH_OK;
        refused += s == AH_ERR_CONFIG;
        if (s != AH_OK) {
            CHECK_MSG(!strncmp(err.msg, "t.ini", 5), "iteration %d: '%s'", iter, err.msg);
            CHECK(is_empty(&c));
        }
        if (s == AH_OK) ah__config_free(&c);
        CHECK_MSG(ah__alloc_live() == live, "iteration %d leaked", iter);
    }
    /* Both outcomes occur, or the mutations test nothing. */
    CHECK(loaded > 100 && refused > 100);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--dump")) {
        char *text = NULL;
        if (ah__config_dump(NULL, 0, &text) != AH_OK) return 1;
        fputs(text, stdout);
        ah__free(text);
        return 0;
    }
    every_key();
    defaults();
    malformed();
    files();
    out_of_memory(rich, 1);
    out_of_memory("[select]\npriority = a, b\n[layer.0-3]\nbackend = c\nbackend = d\n", 0);
    out_of_memory_file();
    dump();
    dump_plugins();
    examples();
    mutations();
    return check_report("test_config");
}
