/*
 * What workload.c (steps on the plugins) and workload_oracle.c (the
 * oracle's side, which workload.c calls) share, beyond workload.h.
 */
#ifndef AH_CLI_WORKLOAD_INT_H
#define AH_CLI_WORKLOAD_INT_H

#include <stdarg.h>
#include <stdio.h>

#include "workload.h"

/* Write why into w->err; returns -1. */
static inline __attribute__((format(printf, 2, 3))) int wl_fail(workload *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* 1 when layer L runs its ragged prefill form on the planned step. */
static inline int wl_ragged_now(const workload *w, const wl_layer *L)
{
    return L->ragged && w->ragged_step && !w->enc_pass;
}

/* The step's new K/V of layer L into the host mirror of its cache
 * (workload_oracle.c). */
ah_status wl_ref_write_kv(const workload *w, const wl_layer *L, ah_error *err);

#endif
