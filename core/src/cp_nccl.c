/*
 * The NCCL transport of context parallelism (see cp_comm.h).
 */
#include <stdio.h>

#include "cp_comm.h"

ah_status ah__cp_nccl_open(const ah_cp_options *o, const ah__cp_mem *mem, ah__cp_nccl **out,
                           ah_error *err)
{
    (void)o;
    (void)mem;
    *out = NULL;
    snprintf(err->msg, sizeof err->msg, "context parallel: NCCL is not available in this build");
    return AH_ERR_UNAVAILABLE;
}
void ah__cp_nccl_close(ah__cp_nccl *n) { (void)n; }
ah_status ah__cp_nccl_all_gather(ah__cp_nccl *n, const ah__cp_mem *mem, const void *send,
                                 void *recv, size_t bytes, ah_error *err)
{
    (void)n, (void)mem, (void)send, (void)recv, (void)bytes, (void)err;
    return AH_ERR_UNAVAILABLE;
}
ah_status ah__cp_nccl_exchange(ah__cp_nccl *n, const ah__cp_mem *mem, const int32_t *mine,
                               int32_t *all, uint32_t count, ah_error *err)
{
    (void)n, (void)mem, (void)mine, (void)all, (void)count, (void)err;
    return AH_ERR_UNAVAILABLE;
}
ah_status ah_cp_nccl_comms_create(uint32_t n, const int32_t *devices, const char *nccl_library,
                                  void **comms, ah_error *err)
{
    (void)n, (void)devices, (void)nccl_library, (void)comms;
    snprintf(err->msg, sizeof err->msg, "NCCL is not available in this build");
    return AH_ERR_UNAVAILABLE;
}
void ah_cp_nccl_comm_destroy(void *comm) { (void)comm; }
