/*
 * attnhost-plugin-scanner: loads and probes one plugin for libattnhost in a
 * fresh process (installed in <libexecdir>/attnhost, found beside the
 * library). The host starts it; its whole behaviour, and the protocol it
 * speaks, live in the core (scan_child.c), shared with the forked child.
 */
#include "scan_int.h"

int main(int argc, char **argv) { return ah__scanner_main(argc, argv); }
