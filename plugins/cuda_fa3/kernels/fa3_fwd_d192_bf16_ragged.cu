// One forward-kernel instance: ragged K/V, qk head size 192, v 128, bf16
// (MLA's non-absorbed prefill). Each instance is its own translation unit
// so the two-core CI compiles them in parallel.
#include "fa3_fwd_launch.cuh"
FA3_FWD_INSTANCE_RAGGED(192, 128, __nv_bfloat16, fa3_fwd_d192_bf16_ragged)
