/*
 * The configuration in force when the host is given no file and no text.
 * It sets no priority list, so selection uses the default order (device
 * kind, the plugins' ranks, name), and falls back with a warning rather
 * than failing: a fresh install should run whatever model it can. The same
 * settings, with comments, ship as examples/configs/attnhost.ini (the
 * installed default file); test_config checks that both read the same.
 */
#include "config.h"

static const char default_config[] = "# attnhost built-in configuration\n"
                                     "[search]\n"
                                     "scan = child\n"
                                     "scan_timeout_ms = 10000\n"
                                     "\n"
                                     "[select]\n"
                                     "fallback = warn\n"
                                     "\n"
                                     "[run]\n"
                                     "validate = true\n";

const char *ah__default_config_text(void) { return default_config; }
