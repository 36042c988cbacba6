/* An entry that declines with a reason. */
#include "common.h"

ABI_ENTRY_SIGNATURE;
ABI_ENTRY_SIGNATURE
{
    (void)host_abi_version;
    (void)host;
    *why = "needs a frobnicator, none found";
    return NULL;
}
