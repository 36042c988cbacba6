/* See error.h. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

ah_status ah__fail(ah_error *err, ah_status s, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return s;
}
