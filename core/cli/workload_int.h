/*
 * What workload.c (steps on the plugins) and workload_oracle.c (the
 * oracle's side) share, beyond workload.h.
 */
#ifndef AH_CLI_WORKLOAD_INT_H
#define AH_CLI_WORKLOAD_INT_H

#include "workload.h"

/* Write why into w->err; returns -1. */
int wl_fail(workload *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Layer L runs its ragged prefill form on the planned step. */
int wl_ragged_now(const workload *w, const wl_layer *L);
/* The step's new K/V of layer L into the host mirror of its cache. */
ah_status wl_ref_write_kv(const workload *w, const wl_layer *L, ah_error *err);

#endif
