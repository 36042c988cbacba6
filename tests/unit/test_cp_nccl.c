/*
 * The NCCL transport of context parallelism without a GPU: a fake NCCL and
 * a fake CUDA driver (tests/cp_fakes) stand in for libnccl.so.2 and
 * libcuda.so.1. Checks the refusals at open (world, rank and device against
 * the communicator, a CPU device, a missing library or entry point), the
 * step's check and its time-out, errors from NCCL, that close frees what
 * open took, and ah_cp_nccl_comms_create / ah_cp_nccl_comm_destroy.
 *
 * One NCCL per process: the cases that must not load the fake come first.
 */
#include <dlfcn.h>
#include <time.h>

#include "alloc.h"
#include "check.h"
#include "cp_comm.h"
#include "fake_cp.h"

#define FAKE_NCCL ATTNHOST_BUILD_DIR "/tests/cp_fakes/libfake_nccl.so"
#define FAKE_CUDA ATTNHOST_BUILD_DIR "/tests/cp_fakes/cuda/libcuda.so.1"

static ah_cp_options opts(void *comm, uint32_t world, uint32_t rank, const char *lib)
{
    return (ah_cp_options){.struct_size = sizeof(ah_cp_options),
                           .world_size = world,
                           .rank = rank,
                           .nccl_comm = comm,
                           .nccl_library = lib};
}

static ah__cp_mem cuda_mem(int32_t index, void *stream)
{
    return (ah__cp_mem){.kind = AH_DEVICE_CUDA, .index = index, .stream = stream};
}

/* Open must fail with st and a message containing want, leaving nothing. */
static void open_fails(const ah_cp_options *o, const ah__cp_mem *m, ah_status st, const char *want)
{
    ah__cp_nccl *n = (ah__cp_nccl *)1;
    ah_error err = {""};
    long live = ah__alloc_live();
    CHECK(ah__cp_nccl_open(o, m, &n, &err) == st);
    CHECK(n == NULL);
    CHECK_CONTAINS(err.msg, want);
    CHECK(ah__alloc_live() == live);
}

static void test_before_loading(void)
{
    fake_nccl_comm c = {2, 0, 0, 0, 0, 0, 0};
    ah_cp_options o = opts(&c, 2, 0, "/nonexistent/libnccl.so.2");
    ah__cp_mem m = cuda_mem(0, NULL);
    /* a missing library: named, with dlerror()'s reason */
    open_fails(&o, &m, AH_ERR_UNAVAILABLE,
               "context parallel: cannot load the NCCL library /nonexistent/libnccl.so.2: "
               "/nonexistent/libnccl.so.2: cannot open shared object file");
    void *comms[2] = {NULL, NULL};
    ah_error err;
    int32_t devs[2] = {0, 1};
    CHECK(ah_cp_nccl_comms_create(2, devs, "/nonexistent/libnccl.so.2", comms, &err) ==
          AH_ERR_UNAVAILABLE);
    CHECK_CONTAINS(err.msg, "/nonexistent/libnccl.so.2");
    CHECK(!comms[0] && !comms[1]);
    /* a library that is not NCCL: the missing entry point is named */
    o.nccl_library = FAKE_CUDA;
    open_fails(&o, &m, AH_ERR_UNAVAILABLE, "libcuda.so.1 has no ncclAllGather");
    /* refused before any library is touched */
    ah__cp_mem cpu = {.kind = AH_DEVICE_CPU};
    open_fails(&o, &cpu, AH_ERR_UNSUPPORTED, "NCCL needs the rank's buffers on a CUDA device");
    ah_cp_options no_comm = opts(NULL, 2, 0, FAKE_NCCL);
    open_fails(&no_comm, &m, AH_ERR_INVALID_ARGUMENT, "ah_cp_options.nccl_comm is NULL");
    CHECK(ah_cp_nccl_comms_create(0, devs, FAKE_NCCL, comms, &err) == AH_ERR_INVALID_ARGUMENT);
}

static void test_open_checks(void)
{
    ah__cp_mem m = cuda_mem(1, NULL);
    fake_nccl_comm c = {4, 1, 1, 0, 0, 0, 0};
    ah_cp_options o = opts(&c, 2, 1, FAKE_NCCL);
    /* the first open loads NCCL, whose record lives as long as the process */
    ah__cp_nccl *n = NULL;
    ah_error err;
    CHECK(ah__cp_nccl_open(&o, &m, &n, &err) == AH_ERR_INVALID_ARGUMENT && !n);
    open_fails(&o, &m, AH_ERR_INVALID_ARGUMENT,
               "context parallel: the NCCL communicator has 4 ranks, "
               "ah_cp_options.world_size says 2");
    c = (fake_nccl_comm){2, 0, 1, 0, 0, 0, 0};
    open_fails(&o, &m, AH_ERR_INVALID_ARGUMENT,
               "context parallel: the NCCL communicator is rank 0, ah_cp_options.rank says 1");
    c = (fake_nccl_comm){2, 1, 3, 0, 0, 0, 0};
    open_fails(&o, &m, AH_ERR_INVALID_ARGUMENT,
               "context parallel: the NCCL communicator is on CUDA device 3, the binding runs "
               "on CUDA device 1");
    c = (fake_nccl_comm){2, 1, 1, 3, 0, 0, 0};
    open_fails(&o, &m, AH_ERR_DEVICE,
               "ncclCommCount on the engine's communicator failed: "
               "fake internal error");
    /* one NCCL per process */
    c = (fake_nccl_comm){2, 1, 1, 0, 0, 0, 0};
    ah_cp_options other = opts(&c, 2, 1, "libnccl.so.2");
    open_fails(&other, &m, AH_ERR_INVALID_ARGUMENT,
               "NCCL is already loaded from " FAKE_NCCL " in this process; "
               "ah_cp_options.nccl_library asks for libnccl.so.2");
}

static double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1e3 + (t.tv_nsec - t0->tv_nsec) * 1e-6;
}

/* With the fake driver: the step's check, NCCL's errors and the time-out. */
static void test_step_check(int (*cuda_live)(void), int (*ctx_depth)(void))
{
    fake_cu_stream s = {0};
    ah__cp_mem m = cuda_mem(1, &s);
    fake_nccl_comm c = {3, 1, 1, 0, 0, 0, 0};
    ah_cp_options o = opts(&c, 3, 1, FAKE_NCCL);
    ah__cp_nccl *n = NULL;
    ah_error err = {""};
    long live = ah__alloc_live();
    CHECK_MSG(ah__cp_nccl_open(&o, &m, &n, &err) == AH_OK, "%s", err.msg);
    if (!n) return;
    CHECK(ctx_depth() == 0);
    /* every rank's integers, in rank order (the fake gathers ours thrice),
     * past the buffers' first size too */
    for (uint32_t count = 1; count <= 40; count += 13) {
        int32_t mine[40], all[120];
        for (uint32_t i = 0; i < count; i++) mine[i] = (int32_t)(i * 7 - 3);
        memset(all, 0x55, sizeof all);
        CHECK_MSG(ah__cp_nccl_exchange(n, &m, mine, all, count, &err) == AH_OK, "%s", err.msg);
        for (uint32_t k = 0; k < 3; k++)
            CHECK(!memcmp(all + k * count, mine, count * sizeof(int32_t)));
    }
    CHECK(ctx_depth() == 0);
    char send[8] = "abcdefg", recv[24];
    CHECK(ah__cp_nccl_all_gather(n, &m, send, recv, 8, &err) == AH_OK);
    CHECK(!memcmp(recv + 16, send, 8));
    c.gather_error = 5;
    CHECK(ah__cp_nccl_all_gather(n, &m, send, recv, 8, &err) == AH_ERR_DEVICE);
    CHECK_CONTAINS(err.msg, "ncclAllGather of 8 bytes (rank 1 of 3) failed: fake error");
    c.gather_error = 0;
    ah__cp_nccl_close(n);
    CHECK(cuda_live() == 0);
    /* all but the driver's record, loaded once per process */
    CHECK(ah__alloc_live() == live + 1);
    live = ah__alloc_live();

    /* a peer that never arrives: the check gives up after the time-out */
    o.timeout_ms = 50;
    n = NULL;
    CHECK_MSG(ah__cp_nccl_open(&o, &m, &n, &err) == AH_OK, "%s", err.msg);
    if (!n) return;
    s.busy = 1;
    int32_t mine[2] = {1, 2}, all[6];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(ah__cp_nccl_exchange(n, &m, mine, all, 2, &err) == AH_ERR_DEVICE);
    double waited = ms_since(&t0);
    CHECK_MSG(waited >= 50 && waited < 5000, "waited %.1f ms", waited);
    CHECK_CONTAINS(err.msg, "rank 1 of 3: the step's check");
    CHECK_CONTAINS(err.msg, "timed out after 50 ms");
    CHECK_CONTAINS(err.msg, "a rank failed or stopped");
    CHECK_CONTAINS(err.msg, "must ncclCommAbort the communicator before reusing it");
    CHECK(ctx_depth() == 0);
    /* the communicator stays failed: every later call says why at once */
    s.busy = 0;
    char first[1024];
    snprintf(first, sizeof first, "%s", err.msg);
    CHECK(ah__cp_nccl_exchange(n, &m, mine, all, 2, &err) == AH_ERR_DEVICE);
    CHECK_STREQ(err.msg, first);
    CHECK(ah__cp_nccl_all_gather(n, &m, mine, all, 8, &err) == AH_ERR_DEVICE);
    ah__cp_nccl_close(n); /* its check buffers stay with the stalled stream */
    CHECK(ah__alloc_live() == live);

    /* NCCL reports the failure before the time-out */
    o.timeout_ms = 60000;
    n = NULL;
    CHECK_MSG(ah__cp_nccl_open(&o, &m, &n, &err) == AH_OK, "%s", err.msg);
    if (!n) return;
    s.busy = 1;
    c.async_error = 6;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(ah__cp_nccl_exchange(n, &m, mine, all, 2, &err) == AH_ERR_DEVICE);
    CHECK(ms_since(&t0) < 5000);
    CHECK_CONTAINS(err.msg, "the NCCL communicator failed during the step's check: fake remote "
                            "error; the engine must ncclCommAbort it");
    ah__cp_nccl_close(n);
    s.busy = 0;
    c.async_error = 0;
}

static void test_comms(int (*nccl_live)(void))
{
    void *comms[3] = {NULL, NULL, NULL};
    int32_t devs[3] = {2, 0, 1};
    ah_error err;
    CHECK_MSG(ah_cp_nccl_comms_create(3, devs, FAKE_NCCL, comms, &err) == AH_OK, "%s", err.msg);
    CHECK(nccl_live() == 3);
    for (int i = 0; i < 3; i++) {
        const fake_nccl_comm *c = comms[i];
        CHECK(c && c->count == 3 && c->rank == i && c->device == devs[i]);
    }
    for (int i = 0; i < 3; i++) ah_cp_nccl_comm_destroy(comms[i]);
    ah_cp_nccl_comm_destroy(NULL);
    CHECK(nccl_live() == 0);
    int32_t bad[2] = {0, -1};
    void *none[2] = {NULL, NULL};
    CHECK(ah_cp_nccl_comms_create(2, bad, NULL, none, &err) == AH_ERR_INVALID_ARGUMENT);
    CHECK(ah_cp_nccl_comms_create(2, bad, FAKE_NCCL, none, &err) == AH_ERR_DEVICE);
    CHECK_CONTAINS(err.msg, "ncclCommInitAll over 2 CUDA devices (0, -1) failed: fake error "
                            "(NCCL 2.21.5 from " FAKE_NCCL ")");
    CHECK(!none[0] && !none[1]);
}

int main(void)
{
    test_before_loading();
    test_open_checks();
    /* The driver is whichever libcuda.so.1 the loader finds: CTest's
     * LD_LIBRARY_PATH names the fake; run by hand without it, the cases
     * that need it are skipped rather than run on a real GPU. */
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void *live = cuda ? dlsym(cuda, "fake_cuda_live") : NULL;
    void *depth = cuda ? dlsym(cuda, "fake_cuda_ctx_depth") : NULL;
    if (live && depth) {
        int (*live_fn)(void), (*depth_fn)(void);
        memcpy(&live_fn, &live, sizeof live);
        memcpy(&depth_fn, &depth, sizeof depth);
        test_step_check(live_fn, depth_fn);
    } else
        printf("the libcuda.so.1 found is not the fake one (LD_LIBRARY_PATH=%s/tests/cp_fakes/"
               "cuda): the step-check cases are skipped\n",
               ATTNHOST_BUILD_DIR);
    void *nccl = dlopen(FAKE_NCCL, RTLD_NOW | RTLD_LOCAL);
    void *nlive = nccl ? dlsym(nccl, "fake_nccl_live") : NULL;
    CHECK(nlive != NULL);
    if (nlive) {
        int (*fn)(void);
        memcpy(&fn, &nlive, sizeof nlive);
        test_comms(fn);
    }
    return check_report("test_cp_nccl");
}
