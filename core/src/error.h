/*
 * How the core fills an ah_error: the formatted message into err (when not
 * NULL), the status returned, so a check reads `return ah__fail(err, st,
 * "...", ...)`.
 */
#ifndef AH_ERROR_H
#define AH_ERROR_H

#include <attnhost/attnhost.h>

ah_status ah__fail(ah_error *err, ah_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
