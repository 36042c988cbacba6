/*
 * A fake libnccl (tests only): the few entry points attnhost resolves,
 * answering from the fake_nccl_comm the test passes (fake_cp.h). Its
 * all-gather copies the caller's bytes into every rank's slot at once, on
 * host memory (the fake CUDA driver's "device" memory is host memory).
 */
#include <stdlib.h>
#include <string.h>

#include "fake_cp.h"

static int live; /* communicators made and not destroyed */

int fake_nccl_live(void) { return live; }

int ncclGetVersion(int *version)
{
    *version = 22105; /* 2.21.5 */
    return 0;
}

const char *ncclGetErrorString(int r)
{
    switch (r) {
    case 0: return "no error";
    case 3: return "fake internal error";
    case 6: return "fake remote error";
    default: return "fake error";
    }
}

int ncclCommCount(const fake_nccl_comm *c, int *count)
{
    if (c->query_error) return c->query_error;
    *count = c->count;
    return 0;
}

int ncclCommUserRank(const fake_nccl_comm *c, int *rank)
{
    if (c->query_error) return c->query_error;
    *rank = c->rank;
    return 0;
}

int ncclCommCuDevice(const fake_nccl_comm *c, int *device)
{
    if (c->query_error) return c->query_error;
    *device = c->device;
    return 0;
}

int ncclCommGetAsyncError(const fake_nccl_comm *c, int *async_error)
{
    *async_error = c->async_error;
    return 0;
}

int ncclAllGather(const void *send, void *recv, size_t bytes, int dtype, fake_nccl_comm *c,
                  void *stream)
{
    (void)stream;
    if (dtype != 0) return 4; /* ncclInvalidArgument: raw bytes only */
    if (c->gather_error) return c->gather_error;
    for (int k = 0; k < c->count; k++) memcpy((char *)recv + (size_t)k * bytes, send, bytes);
    return 0;
}

int ncclCommInitAll(fake_nccl_comm **comms, int ndev, const int *devlist)
{
    for (int i = 0; i < ndev; i++)
        if (devlist[i] < 0) return 4;
    for (int i = 0; i < ndev; i++) {
        comms[i] = calloc(1, sizeof **comms);
        if (!comms[i]) return 1;
        *comms[i] = (fake_nccl_comm){.count = ndev, .rank = i, .device = devlist[i], .made = 1};
        live++;
    }
    return 0;
}

int ncclCommDestroy(fake_nccl_comm *c)
{
    if (!c->made) return 4;
    free(c);
    live--;
    return 0;
}
