// One forward-kernel instance: head size 256, fp16. Each instance is its own
// translation unit so the two-core CI compiles them in parallel.
#include "fa3_fwd_launch.cuh"
FA3_FWD_INSTANCE(256, __half, fa3_fwd_d256_fp16)
