// One forward-kernel instance: head size 128, bf16, P double-buffered
// (pv_overlap = on; fwd_kernel PP).
#include "fa3_fwd_launch.cuh"
FA3_FWD_INSTANCE_PP(128, __nv_bfloat16, fa3_fwd_d128_bf16_pp)
