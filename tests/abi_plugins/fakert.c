/*
 * A stand-in for a GPU runtime such as CUDA's, for the scan tests: its state
 * belongs to the process that initialised it. A forked child inherits that
 * state but cannot use it ("initialization error"), exactly what a process
 * that initialised CUDA sees in its forks; a freshly started process
 * initialises its own. With ATTNHOST_TEST_FAKE_DEVICE naming a file, the
 * device exists only while that file does (a driver or device node that
 * comes and goes, the file of the plugin unchanged).
 */
#include <stdlib.h>
#include <unistd.h>

#include <attnhost/plugin.h>

static pid_t owner; /* the process that initialised the runtime, or 0 */

AH_EXPORT int abi_fakert_init(void);
AH_EXPORT int abi_fakert_init(void)
{
    if (owner && owner != getpid()) return -1;
    owner = getpid();
    return 0;
}

/* Devices, or -1 with *err. */
AH_EXPORT int abi_fakert_device_count(const char **err);
AH_EXPORT int abi_fakert_device_count(const char **err)
{
    if (abi_fakert_init() != 0) {
        *err = "fake runtime: initialization error (initialised by the parent; a fork cannot "
               "use it)";
        return -1;
    }
    const char *dev = getenv("ATTNHOST_TEST_FAKE_DEVICE");
    if (dev && access(dev, F_OK) != 0) {
        *err = "fake runtime: no device";
        return 0;
    }
    return 1;
}
