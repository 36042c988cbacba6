// One forward-kernel instance: head size 128, fp16 queries, FP8 e4m3 KV cache
// with FP8 compute (e4m3 wgmma for QK^T and PV; fp8_compute = on).
#include "fa3_fwd_fp8c_launch.cuh"
FA3_FWD_INSTANCE_FP8C(__half, fa3_fwd_d128_fp16_f8c)
