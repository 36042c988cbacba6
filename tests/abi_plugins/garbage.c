/* A probe that scribbles on every file descriptor it can find, the scan
 * child's record pipe included, then leaves quietly: the host must see a
 * garbage record, not trust it. Child-mode tests only. */
#include <unistd.h>

#include "common.h"

static ah_status probe(const ah_host_services *host, ah_probe_info *info)
{
    (void)host;
    (void)info;
    static const char junk[] = "AHRC\x01\x00\x00\x00\xff\xff\x00\x00 this is not a record";
    for (int fd = 3; fd < 256; fd++) (void)!write(fd, junk, sizeof junk - 1);
    _exit(0);
}

ABI_PROBE_PLUGIN("abi_garbage", probe)
