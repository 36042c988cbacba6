/*
 * The machine's ceilings, measured in the run that reports against them.
 */
#ifndef AH_CLI_CEILINGS_H
#define AH_CLI_CEILINGS_H

#include <attnhost/attnhost.h>

/* GB/s read by `threads` threads, each streaming its slice of 1 GiB (best
 * of 5); 0 when the buffer cannot be had or threads is 0 or past 256. */
double cpu_read_gbs(unsigned threads);
/* GB/s of a 1 GiB device-to-device copy on d, bytes read plus written
 * (best of 5 after a warm-up); 0 when the buffers cannot be had. */
double device_copy_gbs(ah_device *d);

#endif
