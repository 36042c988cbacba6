/*
 * Batch validation inside the library: the checks of ah_batch_validate_fill
 * on one KV-cache group's view, with the window that decides which released
 * block-table entries are acceptable (the binding passes the smallest
 * window over the group's layers).
 */
#ifndef AH_BATCH_VALIDATE_H
#define AH_BATCH_VALIDATE_H

#include <attnhost/attnhost.h>

/* view: a batch whose paging fields are one group's (ah_batch_group_view);
 * group: that group, for messages (UINT32_MAX: say nothing of groups).
 * release_window: released (negative) entries are accepted where a window
 * of this size hides the block from every query of the request; 0 refuses
 * every released entry, naming why (release_why, static text, says what
 * makes every key visible). *released (may be NULL) is set to 1 when the
 * batch has an accepted released entry, else 0. empty_kv: a decoder
 * request of query length 1 may have seq_len 0 (a context-parallel rank's
 * batch, where the rank holds none of its keys yet). */
ah_status ah__batch_validate_group(const ah_batch *view, const ah_layer_spec *spec,
                                   const ah_limits *limits, int32_t seq_len_fill, uint32_t group,
                                   uint32_t release_window, const char *release_why, int *released,
                                   int empty_kv, ah_error *err);

/* What the oracle accepts: ah_batch_validate's rules, and decoder requests
 * of query length 1 with seq_len 0 (a context-parallel rank's share). */
ah_status ah__batch_validate_oracle(const ah_batch *batch, const ah_layer_spec *spec,
                                    ah_error *err);

#endif
