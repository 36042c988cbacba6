/*
 * Layer ranges, shared by [layer.<range>] in the configuration and
 * [layers.<range>] in model descriptions:
 *   "*"          every layer
 *   "7"          one layer
 *   "0-31"       inclusive range
 *   "1-47/2"     every second layer from 1 to 47 (alternating patterns)
 *   "5-47/6,50"  comma-separated parts of any of the above
 */
#ifndef AH_RANGE_H
#define AH_RANGE_H

#include <stddef.h>
#include <stdint.h>

typedef struct ah_range_part {
    uint32_t lo, hi, step; /* hi == UINT32_MAX: open ("*") */
} ah_range_part;

typedef struct ah_range {
    ah_range_part *parts;
    uint32_t n_parts;
} ah_range;

/* Parse text; on error returns -1 and writes a message naming the bad part
 * into err (cap bytes). */
int ah__range_parse(const char *text, ah_range *out, char *err, size_t cap);
int ah__range_contains(const ah_range *r, uint32_t layer);
void ah__range_free(ah_range *r);

#endif
