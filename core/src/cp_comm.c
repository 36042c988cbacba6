/*
 * The collectives of context parallelism: the local group (ranks emulated
 * in one process, each a thread with its own binding) and the dispatch to
 * NCCL (cp_nccl.c).
 *
 * A local group's collective is two barriers around the copies: every rank
 * publishes its buffer, waits until all have, copies every rank's buffer
 * into its own result, and waits again so that no rank overwrites its
 * buffer (the next layer's partial) while another still reads it. A rank
 * that does not arrive within the time-out fails the group for good: the
 * waiting ranks return an error naming the absent ones.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "cp_comm.h"

struct ah_cp_local_group {
    uint32_t world;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t generation; /* barriers completed */
    uint32_t arrived;
    uint8_t *here;    /* per rank: arrived at the current barrier */
    const void **buf; /* per rank: the buffer it published */
    int failed;
    char why[512];
};

struct ah__cp_comm {
    uint32_t rank, world, timeout_ms;
    ah_cp_local_group *group; /* or */
    ah__cp_nccl *nccl;
};

ah_status ah_cp_local_group_create(uint32_t world_size, ah_cp_local_group **out, ah_error *err)
{
    *out = NULL;
    if (world_size < 1 || world_size > AH__CP_MAX_WORLD) {
        snprintf(err->msg, sizeof err->msg, "a local group has 1 .. %u ranks, not %u",
                 AH__CP_MAX_WORLD, world_size);
        return AH_ERR_INVALID_ARGUMENT;
    }
    ah_cp_local_group *g = ah__calloc(1, sizeof *g);
    if (!g || !(g->here = ah__calloc(world_size, 1)) ||
        !(g->buf = ah__calloc(world_size, sizeof *g->buf))) {
        if (g) ah__free(g->here);
        ah__free(g);
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return AH_ERR_OUT_OF_MEMORY;
    }
    g->world = world_size;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = g;
    return AH_OK;
}

void ah_cp_local_group_destroy(ah_cp_local_group *g)
{
    if (!g) return;
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    ah__free(g->here);
    ah__free(g->buf);
    ah__free(g);
}

/* Wait until every rank has arrived (publishing buf first, unless NULL:
 * the second barrier of a collective leaves the buffers others may still
 * be copying from), or fail the group after timeout_ms. */
static ah_status group_barrier(ah_cp_local_group *g, uint32_t rank, const void *buf,
                               uint32_t timeout_ms, ah_error *err)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&g->mu);
    if (!g->failed) {
        if (buf) g->buf[rank] = buf;
        g->here[rank] = 1;
        if (++g->arrived == g->world) {
            g->arrived = 0;
            memset(g->here, 0, g->world);
            g->generation++;
            pthread_cond_broadcast(&g->cv);
            pthread_mutex_unlock(&g->mu);
            return AH_OK;
        }
        const uint64_t gen = g->generation;
        while (g->generation == gen && !g->failed)
            if (pthread_cond_timedwait(&g->cv, &g->mu, &until) == ETIMEDOUT &&
                g->generation == gen && !g->failed) {
                int n = snprintf(g->why, sizeof g->why, "context parallel (local group): rank(s)");
                for (uint32_t k = 0; k < g->world && n < (int)sizeof g->why - 16; k++)
                    if (!g->here[k]) n += snprintf(g->why + n, sizeof g->why - (size_t)n, " %u", k);
                snprintf(g->why + n, sizeof g->why - (size_t)n,
                         " did not arrive within %u ms (failed or stopped); the group is failed "
                         "for good",
                         timeout_ms);
                g->failed = 1;
                pthread_cond_broadcast(&g->cv);
            }
        if (g->generation != gen) {
            pthread_mutex_unlock(&g->mu);
            return AH_OK;
        }
    }
    snprintf(err->msg, sizeof err->msg, "%s", g->why);
    pthread_mutex_unlock(&g->mu);
    return AH_ERR_UNAVAILABLE;
}

void ah__cp_comm_fail(ah__cp_comm *c, const char *why)
{
    ah_cp_local_group *g = c->group;
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    if (!g->failed) {
        snprintf(g->why, sizeof g->why,
                 "context parallel (local group): rank %u failed: %.400s; the group is failed for "
                 "good",
                 c->rank, why);
        g->failed = 1;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
}

ah_status ah__cp_comm_open(const ah_cp_options *o, const ah__cp_mem *mem, ah__cp_comm **out,
                           ah_error *err)
{
    *out = NULL;
    ah__cp_comm *c = ah__calloc(1, sizeof *c);
    if (!c) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return AH_ERR_OUT_OF_MEMORY;
    }
    c->rank = o->rank;
    c->world = o->world_size;
    c->timeout_ms = o->timeout_ms ? o->timeout_ms : AH__CP_TIMEOUT_MS;
    ah_status s = AH_OK;
    if (o->local_group) {
        c->group = o->local_group;
        if (c->group->world != o->world_size) {
            snprintf(err->msg, sizeof err->msg,
                     "ah_cp_options: the local group has %u ranks, world_size says %u",
                     c->group->world, o->world_size);
            s = AH_ERR_INVALID_ARGUMENT;
        }
    } else {
        s = ah__cp_nccl_open(o, mem, &c->nccl, err);
    }
    if (s != AH_OK) {
        ah__free(c);
        return s;
    }
    *out = c;
    return AH_OK;
}

void ah__cp_comm_close(ah__cp_comm *c)
{
    if (!c) return;
    if (c->nccl) ah__cp_nccl_close(c->nccl);
    ah__free(c);
}

int ah__cp_comm_capturable(const ah__cp_comm *c) { return c->nccl != NULL; }
const char *ah__cp_comm_name(const ah__cp_comm *c) { return c->nccl ? "nccl" : "local group"; }

/* Wait for what the rank enqueued on its stream (a local group copies on
 * the host's time line). */
static ah_status mem_sync(const ah__cp_mem *m, ah_error *err)
{
    if (m->host || !m->ops->synchronize) return AH_OK;
    ah_status s = m->ops->synchronize(m->ctx, m->stream);
    if (s != AH_OK)
        snprintf(err->msg, sizeof err->msg, "context parallel: synchronize failed: %s",
                 m->ops->context_error(m->ctx));
    return s;
}

static ah_status group_gather(ah__cp_comm *c, const ah__cp_mem *mem, const void *send, void *recv,
                              size_t bytes, int device, ah_error *err)
{
    ah_status s = device ? mem_sync(mem, err) : AH_OK;
    if (s != AH_OK) return s;
    if ((s = group_barrier(c->group, c->rank, send, c->timeout_ms, err)) != AH_OK) return s;
    for (uint32_t k = 0; k < c->world && s == AH_OK; k++) {
        char *dst = (char *)recv + (size_t)k * bytes;
        const void *src = c->group->buf[k];
        if (!device) {
            memcpy(dst, src, bytes);
        } else if ((s = mem->ops->mem_copy(mem->ctx, dst, src, bytes, AH_COPY_DEVICE_TO_DEVICE,
                                           mem->stream)) != AH_OK) {
            snprintf(err->msg, sizeof err->msg,
                     "context parallel (local group): copying rank %u's partial failed: %s", k,
                     mem->ops->context_error(mem->ctx));
        }
    }
    if (s == AH_OK && device) s = mem_sync(mem, err);
    /* even a rank whose copy failed arrives, so the others are not held */
    ah_error e2;
    ah_status s2 = group_barrier(c->group, c->rank, NULL, c->timeout_ms, &e2);
    if (s == AH_OK && s2 != AH_OK) {
        *err = e2;
        s = s2;
    }
    return s;
}

ah_status ah__cp_comm_all_gather(ah__cp_comm *c, const ah__cp_mem *mem, const void *send,
                                 void *recv, size_t bytes, ah_error *err)
{
    if (c->nccl) return ah__cp_nccl_all_gather(c->nccl, mem, send, recv, bytes, err);
    return group_gather(c, mem, send, recv, bytes, !mem->host, err);
}

ah_status ah__cp_comm_exchange(ah__cp_comm *c, const ah__cp_mem *mem, const int32_t *mine,
                               int32_t *all, uint32_t n, ah_error *err)
{
    if (c->nccl) return ah__cp_nccl_exchange(c->nccl, mem, mine, all, n, err);
    return group_gather(c, mem, mine, all, n * sizeof(int32_t), 0, err);
}
