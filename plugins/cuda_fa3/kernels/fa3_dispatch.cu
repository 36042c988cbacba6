// Turns the run-time head size and dtype into a compiled forward instance,
// naming the unsupported value when there is none.
#include <stdio.h>

#include "fa3_launch.h"

#define FA3_DECL(NAME) extern "C" int NAME(const fa3_fwd_launch *, char *, size_t);
FA3_DECL(fa3_fwd_d64_bf16)
FA3_DECL(fa3_fwd_d64_fp16)
FA3_DECL(fa3_fwd_d128_bf16)
FA3_DECL(fa3_fwd_d128_fp16)
FA3_DECL(fa3_fwd_d256_bf16)
FA3_DECL(fa3_fwd_d256_fp16)
FA3_DECL(fa3_fwd_d64_bf16_kv8)
FA3_DECL(fa3_fwd_d64_fp16_kv8)
FA3_DECL(fa3_fwd_d128_bf16_kv8)
FA3_DECL(fa3_fwd_d128_fp16_kv8)
FA3_DECL(fa3_fwd_d256_bf16_kv8)
FA3_DECL(fa3_fwd_d256_fp16_kv8)
FA3_DECL(fa3_fwd_d128_bf16_f8c)
FA3_DECL(fa3_fwd_d128_fp16_f8c)
FA3_DECL(fa3_fwd_d192_bf16_ragged)
FA3_DECL(fa3_fwd_d192_fp16_ragged)

extern "C" int fa3_launch_forward(const fa3_fwd_launch *L, char *err, size_t errlen)
{
    const bool h = L->dtype == FA3_T_FP16;
    if (L->dtype != FA3_T_BF16 && !h) {
        snprintf(err, errlen, "forward: dtype code %d has no kernel instance", L->dtype);
        return 1;
    }
    if (L->ragged || L->v_head_dim != L->head_dim) {
        if (L->ragged && L->head_dim == 192 && L->v_head_dim == 128 && L->kv_dtype == L->dtype)
            return h ? fa3_fwd_d192_fp16_ragged(L, err, errlen)
                     : fa3_fwd_d192_bf16_ragged(L, err, errlen);
        snprintf(err, errlen, "forward: %s layer of head sizes qk %d / v %d has no kernel instance",
                 L->ragged ? "a ragged" : "a paged", L->head_dim, L->v_head_dim);
        return 1;
    }
    if (L->kv_dtype == FA3_T_FP8_E4M3 && L->fp8_compute && L->head_dim == 128)
        return h ? fa3_fwd_d128_fp16_f8c(L, err, errlen) : fa3_fwd_d128_bf16_f8c(L, err, errlen);
    if (L->kv_dtype == FA3_T_FP8_E4M3) {
        switch (L->head_dim) {
        case 64:
            return h ? fa3_fwd_d64_fp16_kv8(L, err, errlen) : fa3_fwd_d64_bf16_kv8(L, err, errlen);
        case 128:
            return h ? fa3_fwd_d128_fp16_kv8(L, err, errlen)
                     : fa3_fwd_d128_bf16_kv8(L, err, errlen);
        case 256:
            return h ? fa3_fwd_d256_fp16_kv8(L, err, errlen)
                     : fa3_fwd_d256_bf16_kv8(L, err, errlen);
        default:
            snprintf(err, errlen, "forward: head size %d has no FP8-KV instance", L->head_dim);
            return 1;
        }
    }
    if (L->kv_dtype != L->dtype) {
        snprintf(err, errlen,
                 "forward: KV dtype code %d with query dtype code %d has no kernel instance",
                 L->kv_dtype, L->dtype);
        return 1;
    }
    switch (L->head_dim) {
    case 64: return h ? fa3_fwd_d64_fp16(L, err, errlen) : fa3_fwd_d64_bf16(L, err, errlen);
    case 128: return h ? fa3_fwd_d128_fp16(L, err, errlen) : fa3_fwd_d128_bf16(L, err, errlen);
    case 256: return h ? fa3_fwd_d256_fp16(L, err, errlen) : fa3_fwd_d256_bf16(L, err, errlen);
    default:
        snprintf(err, errlen, "forward: head size %d has no kernel instance", L->head_dim);
        return 1;
    }
}
