/*
 * What the fake NCCL and the fake CUDA driver (tests only) answer: a test
 * passes a fake_nccl_comm as ah_cp_options.nccl_comm and a fake_cu_stream
 * as the engine's stream, and sets the fields to steer each call.
 */
#ifndef AH_TEST_FAKE_CP_H
#define AH_TEST_FAKE_CP_H

typedef struct fake_nccl_comm {
    int count, rank, device; /* ncclCommCount, ncclCommUserRank, ncclCommCuDevice */
    int query_error;         /* non-zero: those three fail with it */
    int gather_error;        /* non-zero: ncclAllGather fails with it */
    int async_error;         /* ncclCommGetAsyncError's answer */
    int made;                /* 1: made by ncclCommInitAll (freed by ncclCommDestroy) */
} fake_nccl_comm;

typedef struct fake_cu_stream {
    int busy; /* 1: cuStreamQuery says CUDA_ERROR_NOT_READY, for ever */
} fake_cu_stream;

#endif
