// One forward-kernel instance: head size 128, bf16 queries, FP8 e4m3 KV cache
// (widened to bf16 in shared memory). Its own translation unit, like the rest.
#include "fa3_fwd_launch.cuh"
FA3_FWD_INSTANCE_KV8(128, __nv_bfloat16, fa3_fwd_d128_bf16_kv8)
