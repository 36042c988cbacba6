/*
 * The collectives of context parallelism, behind one interface: NCCL for
 * ranks on CUDA devices (libnccl.so.2 with dlopen, so the library loads
 * without it) and the local group for ranks emulated in one process.
 * A binding opens one comm for its rank and uses only what a step needs:
 * an all-gather of bytes on the engine's stream, and a blocking exchange
 * of a few integers with a time-out (the step's check).
 */
#ifndef AH_CP_COMM_H
#define AH_CP_COMM_H

#include <stddef.h>

#include <attnhost/attnhost.h>

/* Memory and stream of the rank's device as the comm sees them: copies and
 * a wait on the engine's stream through the bound plugin's ops, unless the
 * plugin works in host memory (no memory slots). */
typedef struct ah__cp_mem {
    int host; /* 1: host memory, plain memcpy */
    const ah_plugin_ops *ops;
    ah_context *ctx;
    ah_device_kind kind;
    int32_t index; /* device index (CUDA ordinal) */
    void *stream;  /* the engine's stream of the step */
} ah__cp_mem;

#define AH__CP_MAX_WORLD 1024   /* ranks in a group, at most */
#define AH__CP_TIMEOUT_MS 60000 /* ah_cp_options.timeout_ms 0 */

typedef struct ah__cp_comm ah__cp_comm;

/* Open the comm of o (world_size > 1) for a rank whose buffers live on
 * mem's device: checks the rank and world against the communicator, and
 * for NCCL that the communicator is on mem's CUDA device. */
ah_status ah__cp_comm_open(const ah_cp_options *o, const ah__cp_mem *mem, ah__cp_comm **out,
                           ah_error *err);
void ah__cp_comm_close(ah__cp_comm *c);

/* 1: the all-gather is enqueued on the stream and may be captured in a
 * CUDA graph (NCCL); 0: it runs on the host (the local group). */
int ah__cp_comm_capturable(const ah__cp_comm *c);
const char *ah__cp_comm_name(const ah__cp_comm *c); /* "nccl", "local group" */

/* recv[k * bytes .. (k + 1) * bytes) = rank k's send, for every rank k,
 * ordered on mem->stream after what is already there. */
ah_status ah__cp_comm_all_gather(ah__cp_comm *c, const ah__cp_mem *mem, const void *send,
                                 void *recv, size_t bytes, ah_error *err);

/* all[k * n + i] = rank k's mine[i] (host memory), blocking until every
 * rank has contributed or the time-out passes (then an error naming the
 * ranks that did not arrive, when the transport knows them). */
ah_status ah__cp_comm_exchange(ah__cp_comm *c, const ah__cp_mem *mem, const int32_t *mine,
                               int32_t *all, uint32_t n, ah_error *err);

/* This rank failed a step after the step's check (its forward refused or
 * failed): a local group fails for good at once, so the other ranks' next
 * collective returns an error naming this rank and why, instead of waiting
 * out the time-out. NCCL has no such signal: the engine aborts its
 * communicator (docs/context-parallel.md). */
void ah__cp_comm_fail(ah__cp_comm *c, const char *why);

/* The NCCL transport (cp_nccl.c), used by ah__cp_comm_open. */
typedef struct ah__cp_nccl ah__cp_nccl;
ah_status ah__cp_nccl_open(const ah_cp_options *o, const ah__cp_mem *mem, ah__cp_nccl **out,
                           ah_error *err);
void ah__cp_nccl_close(ah__cp_nccl *n);
ah_status ah__cp_nccl_all_gather(ah__cp_nccl *n, const ah__cp_mem *mem, const void *send,
                                 void *recv, size_t bytes, ah_error *err);
ah_status ah__cp_nccl_exchange(ah__cp_nccl *n, const ah__cp_mem *mem, const int32_t *mine,
                               int32_t *all, uint32_t count, ah_error *err);

#endif
