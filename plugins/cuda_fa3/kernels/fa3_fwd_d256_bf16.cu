// One forward-kernel instance: head size 256, bf16. Each instance is its own
// translation unit so the two-core CI compiles them in parallel.
#include "fa3_fwd_launch.cuh"
FA3_FWD_INSTANCE(256, __nv_bfloat16, fa3_fwd_d256_bf16)
