/*
 * The scheduler: every launch decision of the plugin, made by plan on the
 * host from the batch, the layer and the device's facts. Launchers and
 * kernels carry the decisions out and decide nothing. Plain C++ without
 * CUDA calls, so fi_sched_test checks the choices on any machine.
 */
#ifndef FI_SCHEDULER_H
#define FI_SCHEDULER_H

#include <stdint.h>

#include <math.h>

#include "decode_heads.h"

namespace fi {

/* Element types the kernels are instantiated for. */
enum dtype_id { FI_F16 = 0, FI_BF16 = 1, FI_E4M3 = 2, FI_E5M2 = 3 };
inline bool dtype_is_fp8(int dtype) { return dtype == FI_E4M3 || dtype == FI_E5M2; }

/* What the scheduler knows of the device, asked once per context. */
struct sched_device {
    int sms;         /* streaming multiprocessors */
    int cc;          /* compute capability, major * 10 + minor; 0: unknown */
    bool sm90_built; /* the Hopper d128 prefill kernel (prefill_sm90.cu) is in the build */
    double hbm_tbps; /* peak memory read rate from the memory clock and bus width; 0: unknown */
};

/* Kernel family of a tensor-core pass (prefill, extend, mixed, cascade). */
enum prefill_family {
    FI_PREFILL_GENERAL = 0, /* any KV dtype, soft-cap, ALiBi (prefill_kernel.cuh) */
    FI_PREFILL_FAST = 1,    /* 16-bit KV of the query's type, plain logits (prefill_fast.cuh) */
    FI_PREFILL_SM90 = 2     /* 16-bit KV of the query's type at d128 on compute capability 9.0
                               (wgmma), soft-cap and ALiBi included (prefill_sm90.cu) */
};

inline prefill_family schedule_prefill_family(const sched_device &dev, int d, int q_dtype,
                                              int kv_dtype, float softcap, bool alibi)
{
    if (kv_dtype != q_dtype) return FI_PREFILL_GENERAL;
    if (dev.sm90_built && dev.cc == 90 && d == 128) return FI_PREFILL_SM90;
    return softcap > 0.f || alibi ? FI_PREFILL_GENERAL : FI_PREFILL_FAST;
}

/* Query rows (tokens x heads of a KV group) one CTA of the family covers:
 * the fast kernels 128 at d128 (4 warps of 32 rows), 64 elsewhere (4 warps
 * of 16); the general kernel 64. */
inline int prefill_cta_rows(prefill_family f, int d)
{
    return f != FI_PREFILL_GENERAL && d == 128 ? 128 : 64;
}

/* CTAs per SM the family's registers are fitted for: 2 (no spills), 1 for
 * the Hopper kernel (160 KiB of shared memory per CTA). */
inline int prefill_ctas_per_sm(prefill_family f) { return f == FI_PREFILL_SM90 ? 1 : 2; }

/* Absorbed MLA on the Hopper kernel (decode_mla_sm90.cu), 64 heads per
 * CTA, its head-group block: a cache of the query's type from 16 heads on
 * (a group of 16 or 96 pads the last block with zero queries; the kernel
 * stays bound by the cache read), an FP8 cache at any group. An FP8
 * cache's decode steps at 16 heads or fewer run decode_mla_fp8_sm90.cu,
 * one CTA a token, the same grid; below 16 heads the 64-row kernel's
 * token blocks (64 / group tokens where the group divides 64) keep its
 * rows real on longer requests. */
constexpr int FI_MLA_SM90_HEADS = 64;
inline bool schedule_mla_sm90(const sched_device &dev, int group, int q_dtype, int kv_dtype)
{
    return dev.sm90_built && dev.cc == 90 &&
           ((kv_dtype == q_dtype && group >= 16) || dtype_is_fp8(kv_dtype));
}
/* Of a layer on the Hopper MLA kernel, what decode_mla_fp8_sm90.cu takes
 * instead: an FP8 cache's steps of one query token a request, at up to
 * FI_MLA_KEYS_M_HEADS heads (its GEMMs' N). */
constexpr int FI_MLA_KEYS_M_HEADS = 16;
inline bool schedule_mla_keys_m(int kv_dtype, int group, bool one_token_reqs)
{
    return dtype_is_fp8(kv_dtype) && group <= FI_MLA_KEYS_M_HEADS && one_token_reqs;
}

/* Most keys one decode row sees: a causal window shows `window` keys, a
 * bidirectional one up to 2 x window - 1; the splits are cut from those. */
inline int64_t decode_visible_keys(int64_t max_seq, bool causal, int window)
{
    if (window <= 0) return max_seq;
    const int64_t w = causal ? window : 2 * (int64_t)window - 1;
    return w < max_seq ? w : max_seq;
}

/* Fill of the last wave when `ctas` CTAs run `per_sm` to an SM. */
inline double wave_fill(int sms, int64_t ctas, int per_sm)
{
    const double waves = (double)ctas / (double)((int64_t)sms * (per_sm > 0 ? per_sm : 1));
    return waves / ceil(waves);
}

/* Head blocks one register-load decode CTA serves at head size d: four
 * neighbouring ones, or two, where they divide the grid's evenly, their
 * CTA fits (regs_hpc_fits) and the keys are not split (split-KV's short
 * partitions keep one). */
inline int schedule_heads_per_cta(int kv_heads, int group, int gb, int d, int splits)
{
    if (splits != 1) return 1;
    const int64_t blocks = (int64_t)kv_heads * head_blocks_per_kv(group, gb);
    for (int hpc = 4; hpc > 1; hpc /= 2)
        if (blocks % hpc == 0 && regs_hpc_fits(d, gb, hpc)) return hpc;
    return 1;
}

/* Split-KV partitions, kernel and head blocks per CTA of a decode pass.
 * A CTA of the streaming kernel keeps (stages - 1) x 16 KiB in flight, so a
 * lone CTA on an SM is latency-bound: the grid should fill whole waves of
 * (SMs x resident CTAs). Every pass runs FI_DECODE_STAGES stages (4 CTAs
 * an SM): when the batch alone fills the last wave to decode_fill, no
 * split (no merge pass); otherwise the smallest split count whose last
 * wave is at least decode_fill full (or the fullest one), with partitions
 * of at least 256 keys, at most FI_MAX_DECODE_SPLITS of them, within the
 * workspace (ws_rows partial rows). Small batches took 4 stages (3 CTAs an
 * SM, more bytes in flight each) until 3 with more partitions proved
 * faster on the H200. A kernel of one CTA an SM (the Hopper MLA decode)
 * has no neighbour to hide its start (Q, the pipeline's fill) and end
 * behind, so every wave costs those whole, about decode_cta_fixed_keys
 * keys' worth. A batch that fits one wave splits only as far as one wave
 * holds (30 DeepSeek-V3 decodes at TP 8: 4 partitions in one wave, 0.74-0.78x
 * the time of 13 in three; 100 CTAs left whole, where 5 ways in 4 waves
 * took 1.05-1.22x the time); a larger one takes the split of the least
 * waves x (that + a partition's keys) (140 CTAs: 4 ways in 5 waves,
 * 0.75-0.85x the time of 2 waves whole). DECISIONS.md has the
 * measurements. */
struct decode_choice {
    int splits, heads_per_cta;
    bool stream; /* the streaming kernel in place of the register loads (below) */
};
constexpr int FI_DECODE_STAGES = 3;

/* Resident decode CTAs per SM at FI_DECODE_STAGES: own, of the layer's
 * decode kernel; stream, of the streaming kernel where it is the
 * alternative to a 16-bit d128 layer's register loads (else 0). */
struct decode_occ {
    int own, stream;
};

/* A 16-bit d128 decode takes the streaming kernel instead of the register
 * loads (64 KiB in flight an SM) when the chip reads at 4 TB/s or more and
 * the batch alone gives every SM at least decode_stream_grid head blocks
 * (at 3 stages, 4 CTAs an SM, 128 KiB in flight). Measured on an H200 (4.8 TB/s): 0.94-0.95x the
 * register loads' time at 256 head blocks, 0.93-0.95x at 512-2048, level below 132 where it was
 * tried at 3-4 stages (DECISIONS.md); on an H100 (3.35 TB/s) it lost at B64. */
constexpr double decode_stream_tbps = 4.0;
constexpr int decode_stream_grid = 1;

constexpr double decode_fill = 0.95;
/* A lone CTA's start and end in keys of its partition's stream (the
 * Hopper MLA decode: 7 tiles of 32, from 13 partitions in three waves
 * against 4 in one at DeepSeek-V3 TP 8's d30x4096, H200; 140 CTAs split
 * 4 ways agree with it, H200) */
constexpr double decode_cta_fixed_keys = 224;
/* Most KV partitions of one decode token (the workspace holds this many
 * partial rows per token, within its 64 MiB). */
constexpr int FI_MAX_DECODE_SPLITS = 128;

inline decode_choice schedule_decode(const sched_device &dev, const decode_occ &occ, int tokens,
                                     int kv_heads, int group, int gb, int d, int64_t visible_keys,
                                     int64_t ws_rows, int working_tokens = -1)
{
    /* working_tokens: the tokens whose CTAs work (an MLA token block's
     * first; the rest exit at once); -1: all */
    const int64_t hblocks = (int64_t)kv_heads * head_blocks_per_kv(group, gb);
    const int64_t base = (int64_t)(working_tokens < 0 ? tokens : working_tokens) * hblocks;
    decode_choice c = {1, 1, false};
    c.stream = occ.stream > 0 && dev.hbm_tbps >= decode_stream_tbps &&
               base >= (int64_t)decode_stream_grid * dev.sms;
    const int occupancy = c.stream ? occ.stream : occ.own;
    if (base > 0 && ws_rows && wave_fill(dev.sms, base, occupancy) < decode_fill - 1e-9) {
        int64_t cap = (visible_keys + 255) / 256;
        if (cap > FI_MAX_DECODE_SPLITS) cap = FI_MAX_DECODE_SPLITS;
        if (cap * tokens > ws_rows) cap = ws_rows / tokens;
        if (occupancy == 1) { /* the least waves x (fixed + partition), above */
            if (base <= dev.sms && dev.sms / base < cap) cap = dev.sms / base; /* one wave */
            double best = 0;
            for (int64_t s = 1; s <= cap; s++) {
                const int64_t waves = (base * s + dev.sms - 1) / dev.sms;
                const double cost =
                    (double)waves * ((double)decode_cta_fixed_keys + (double)visible_keys / s);
                if (s == 1 || cost < best - 1e-9) best = cost, c.splits = (int)s;
            }
        } else {
            double best_eff = 0;
            for (int64_t s = 1; s <= cap; s++) {
                const double eff = wave_fill(dev.sms, base * s, occupancy);
                if (eff >= decode_fill - 1e-9) {
                    c.splits = (int)s;
                    break;
                }
                if (eff > best_eff + 1e-9) best_eff = eff, c.splits = (int)s;
            }
        }
    }
    c.heads_per_cta = c.stream ? 1 : schedule_heads_per_cta(kv_heads, group, gb, d, c.splits);
    return c;
}

/* Cascade prefix pass: the tensor-core kernel over every row of the batch
 * has only ceil(T x group / rows per CTA) x Hk CTAs; cut the prefix's keys
 * into ranges so the grid fills one wave of resident CTAs without spilling
 * into a second, each range at least 512 keys and a multiple of 64, the
 * partial states (ranges + the suffix) within the workspace. */
struct prefix_choice {
    int splits, chunk;
};

inline prefix_choice schedule_prefix(const sched_device &dev, prefill_family f, int d, int tokens,
                                     int group, int kv_heads, int prefix_len, int64_t ws_rows)
{
    const int rows = prefill_cta_rows(f, d);
    const int64_t ctas = ((int64_t)tokens * group + rows - 1) / rows * kv_heads;
    int64_t s = prefill_ctas_per_sm(f) * (int64_t)dev.sms / ctas;
    if (s > prefix_len / 512) s = prefix_len / 512;
    if (s > 32) s = 32;
    if ((s + 1) * tokens > ws_rows) s = ws_rows / tokens - 1;
    if (s < 1) s = 1;
    int c = (int)((prefix_len + s - 1) / s);
    c = (c + 63) / 64 * 64;
    return prefix_choice{(prefix_len + c - 1) / c, c};
}

/* Cascade under a sliding window. The prefix pass reads request 0's page
 * entries for the rows of every request, and the entries of the blocks
 * request 0's window hides from its first query (at req0_first_pos) may
 * be released (negative, AH_FEAT_RELEASED_BLOCKS): every key below
 * floor((req0_first_pos - window + 1) / block_size) x block_size. The
 * pass follows none of them when no row sees such a key: the earliest
 * query of the batch (min_first_pos) starts its window at or past that
 * bound. Without a window nothing is released. */
inline bool schedule_cascade_window(int window, int64_t req0_first_pos, int64_t min_first_pos,
                                    int block_size)
{
    if (window <= 0) return true;
    const int64_t lo0 = req0_first_pos - window + 1, lo = min_first_pos - window + 1;
    const int64_t kept0 = lo0 > 0 ? lo0 / block_size * block_size : 0;
    return (lo > 0 ? lo : 0) >= kept0;
}

/* A decode token sees all its keys; only a window, ALiBi or the cascade's
 * prefix split give a key's position a part in the result. Without them the
 * plan's fill visits each decode request's pages in address order, deciding
 * per request on the device, so a graph's replays decide afresh. */
inline bool schedule_sort_pages(bool cascade, int window, bool alibi)
{
    return !cascade && !window && !alibi;
}

/* The split merge launched as a programmatic dependent of the kernel before
 * it (compute capability 9.0 and up): its grid is scheduled while the
 * kernel drains. */
inline bool schedule_merge_pdl(const sched_device &dev) { return dev.cc >= 90; }

} // namespace fi

#endif
