/* Prints the host sizes of the kernel parameter blocks, which
 * check_code_object.py compares with the kernels' argument sizes. */
#include <stdio.h>

#include "../kernels/ra_params.h"

int main(void)
{
    printf("%zu;%zu;%zu\n", sizeof(ra_attn_params), sizeof(ra_kv_params), sizeof(ra_merge_params));
    return 0;
}
