// One forward-kernel instance: head size 128, fp16 queries, FP8 e4m3 KV cache
// (widened to fp16 in shared memory). Its own translation unit, like the rest.
#include "fa3_fwd_launch.cuh"
FA3_FWD_INSTANCE_KV8(128, __half, fa3_fwd_d128_fp16_kv8)
