// One forward-kernel instance: head size 128, bf16 queries, FP8 e4m3 KV cache
// with FP8 compute (e4m3 wgmma for QK^T and PV; fp8_compute = on).
#include "fa3_fwd_fp8c_launch.cuh"
FA3_FWD_INSTANCE_FP8C(__nv_bfloat16, fa3_fwd_d128_bf16_f8c)
