/*
 * ah_version and ah_abi_version: the library answers what its headers say.
 */
#include <attnhost/attnhost.h>

#include "check.h"

int main(void)
{
    CHECK(ah_version() != NULL);
    CHECK_STREQ(ah_version(), AH_VERSION_STRING);
    CHECK(ah_abi_version() == AH_ABI_VERSION);
    CHECK(AH_ABI_MAJOR(ah_abi_version()) == AH_ABI_VERSION_MAJOR);
    CHECK(AH_ABI_MINOR(ah_abi_version()) == AH_ABI_VERSION_MINOR);
    CHECK(AH_ABI_MAJOR(ah_abi_version()) == 2);
    return check_report("test_version");
}
