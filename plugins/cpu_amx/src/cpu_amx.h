/*
 * cpu_amx internal contracts: the description of one forward call that the
 * kernels read (cpu_amx_run), the unit of parallel work (cpu_amx_item: one
 * request, one KV head, a tile of query tokens and heads, a range of keys),
 * per-thread scratch, and the per-ISA kernel table.
 *
 * Every ISA compiles the same kernel sources in its own translation unit with
 * its own -m flags (kern_*.c); only the table chosen at run time from the
 * host's hardware facts is ever called, so the .so loads on any x86-64.
 */
#ifndef AH_CPU_AMX_H
#define AH_CPU_AMX_H

#include <stdint.h>

#include <attnhost/plugin.h>

/* Rows (query tokens x query heads of one KV head) one work item carries:
 * eight AMX tile heights, so each repacked K/V chunk serves 128 query rows
 * (packing is paid once per 128 rows, not per 16 or 64), while the fp32
 * accumulators (128 x head size, 64 KiB at 128) stay in L2. */
#define CPU_AMX_RMAX 128
/* Keys the tile path handles per softmax step (8 pieces of 16): per 128
 * keys, not 64, each row pays one max fold, one rescale test and one sum
 * fold, and the AMX P.V loads and stores its O tiles once. */
#define CPU_AMX_KCHUNK 128
/* KV heads one decode item may carry (so it reads whole NHD block rows
 * front to back), and the converted rows that takes: 16 keys per head. */
#define CPU_AMX_MAXKV 16
#define CPU_AMX_KVROWS (16 * CPU_AMX_MAXKV)

typedef enum cpu_amx_path {
    CPU_AMX_SCALAR = 0,
    CPU_AMX_AVX2,
    CPU_AMX_AVX512,
    CPU_AMX_AVX512BF16,
    CPU_AMX_AMX,
    CPU_AMX_PATH_COUNT
} cpu_amx_path;

/* Everything about the layer the kernels need, resolved once per state. */
typedef struct cpu_amx_layer {
    uint32_t hq, hk, group; /* group = hq / hk */
    uint32_t d, dv;         /* qk and v head sizes */
    uint32_t dpad;          /* d rounded up to 32 (AMX K step) */
    ah_dtype q_dtype, kv_dtype;
    uint32_t block_size;
    int causal;      /* decoder, unless its causal flag is OFF */
    int cross;       /* encoder-decoder: every key visible, encoder_seq_lens keys */
    int cacheless;   /* encoder / encoder-only: keys are the new rows (ABI 2.1) */
    int ragged;      /* ragged K/V (ABI 2.3): keys are the cu_seqlens_k rows of
                        forward's key/value; cacheless is set too */
    uint32_t window; /* 0: none */
    float softcap;   /* 0: none */
    float scale;
    int mla; /* V = K[..., :dv], value cache unused */
    int sinks, alibi;
} cpu_amx_layer;

/* One forward's pointers and strides (element strides). */
typedef struct cpu_amx_run {
    const cpu_amx_layer *L;
    const void *q;
    int64_t q_ts, q_hs;
    void *out;
    int64_t o_ts, o_hs;
    float *lse; /* NULL: not wanted */
    int64_t l_ts, l_hs;
    const void *kc, *vc;      /* vc == kc for MLA */
    int64_t k_bs, k_ts, k_hs; /* block, token-in-block, head strides of the key cache */
    int64_t v_bs, v_ts, v_hs;
    const float *sinks, *alibi;
    /* KV head h's K (V) scale is k_scale[h * scale_hs] (v_scale[...]):
     * scale_hs 0 for one scale per tensor, 1 for one per KV head; scales
     * are 1 when the cache is not FP8 */
    const float *k_scale, *v_scale;
    uint32_t scale_hs;
    const int32_t *qsl, *seq_lens, *block_table;
    uint32_t bt_stride;
    uint32_t pf_dist;    /* prefetch the 16-key piece this many ahead; 0: none */
    uint32_t interleave; /* AMX prefill: interleave tile stages with softmax rows */
    uint32_t tile_pf;    /* tile kernel: prefetch the pre-packed K/V chunk after next */
    /* K and V of prefill requests packed once per forward (cpu_amx_prepack
     * below): request r's block starts at pp + pp_off[r] (CPU_AMX_NO_PP:
     * none) and holds pp_np[r] pieces per KV head. */
    uint16_t *pp;
    const uint64_t *pp_off;
    const uint32_t *pp_np;
} cpu_amx_run;

/* A unit of work: KV heads [kvh, kvh + nkv), and for each of them the
 * query heads g0..g1 of its group for tokens t0..t1: rows = nkv * (t1 - t0)
 * * (g1 - g0), ordered head-major, then token, then group member (see
 * cpu_amx_row). Keys [k0, k1). part < 0: the item covers all keys and writes
 * the output; else it writes partial results to slot `part` and a merge
 * finishes the rows. nkv > 1 only for single-token items (decode). */
typedef struct cpu_amx_item {
    uint32_t req, kvh, nkv;
    uint32_t t0, t1, g0, g1;
    int32_t pos0; /* position of token t0 */
    int32_t k0, k1;
    int32_t part;
    uint32_t nparts; /* merge entries: parts [part, part + nparts) */
    uint32_t rows;
    uint64_t cost;
} cpu_amx_item;

/* Per-thread scratch, 64-byte aligned buffers. */
typedef struct cpu_amx_scratch {
    float *q;       /* RMAX x dpad, fp32, scale folded in */
    float *o;       /* RMAX x dv accumulators */
    float *m, *l;   /* RMAX running max and sum */
    float *s;       /* RMAX x KCHUNK scores */
    float *kf, *vf; /* KVROWS x dpad, KVROWS x dv converted keys/values */
    uint16_t *qb;   /* RMAX x dpad bf16 queries (tile path) */
    uint16_t *pb;   /* RMAX x KCHUNK bf16 probabilities */
    uint16_t *kp;   /* KCHUNK/16 x dpad/2 x 16 x 2: K^T pair-interleaved */
    uint16_t *vp;   /* KCHUNK/2 x dv x 2: V pair-interleaved over tokens */
} cpu_amx_scratch;

/* Pre-packed K and V (bf16 tile kernel): for request r with pp_off[r] !=
 * CPU_AMX_NO_PP and KV head h, at pp + pp_off[r] + h * pp_np[r] *
 * CPU_AMX_PP_PIECE(L): pp_np[r] pieces of K^T pairs (16 keys at positions
 * 16p.., _pack_k's layout, dpad * 16 elements each), then pp_np[r] pieces
 * of V token pairs (_pack_v's layout, 16 * dv elements each). Keys at or
 * past seq_lens[r] are zero, and the last piece is all zero (a chunk's
 * padding piece). The prefill items of a request share them instead of
 * each packing every chunk it reads (a 4k-token prefill at GQA 4 packs each
 * chunk 32 times on average). */
#define CPU_AMX_NO_PP UINT64_MAX
#define CPU_AMX_PP_PIECE(L) ((size_t)(L)->dpad * 16 + (size_t)16 * (L)->dv)

/* One pre-packing task: pieces [p0, p1) of request req, KV head kvh. */
typedef struct cpu_amx_pptask {
    uint32_t req, kvh, p0, p1;
} cpu_amx_pptask;

/* Attention of one item: leaves unnormalised O, row max m and row sum l in
 * ws (m = -inf, l = 0 for a row that saw no visible key). */
typedef void (*cpu_amx_attend_fn)(const cpu_amx_run *run, const cpu_amx_item *it,
                                  cpu_amx_scratch *ws);

typedef struct cpu_amx_kernels {
    const char *name;
    cpu_amx_attend_fn attend;         /* any dtypes, fp32 arithmetic */
    cpu_amx_attend_fn attend_bf16;    /* bf16 q and KV, bf16 products; NULL: none */
    cpu_amx_attend_fn attend_dec;     /* bf16 q and KV, few rows per KV head; NULL: none */
    cpu_amx_attend_fn attend_dec_amx; /* the same on AMX tiles (falls back to attend_dec
                                         where it does not fit); NULL: none */
    void (*prepack)(const cpu_amx_run *run, const cpu_amx_pptask *t); /* with attend_bf16 */
} cpu_amx_kernels;

extern const cpu_amx_kernels cpu_amx_kernels_scalar;
extern const cpu_amx_kernels cpu_amx_kernels_avx2;
extern const cpu_amx_kernels cpu_amx_kernels_avx512;
extern const cpu_amx_kernels cpu_amx_kernels_avx512bf16;
extern const cpu_amx_kernels cpu_amx_kernels_amx;

/* isa.c: path names, the ISA bits each needs, and the automatic choice. */
const char *cpu_amx_path_name(cpu_amx_path p);
uint32_t cpu_amx_path_needs(cpu_amx_path p);
cpu_amx_path cpu_amx_path_best(uint32_t isa);
const cpu_amx_kernels *cpu_amx_path_kernels(cpu_amx_path p);

/* Visible key range [lo, hi] (inclusive) for a query at position p. */
static inline void cpu_amx_visible(const cpu_amx_layer *L, int32_t p, int32_t *lo, int32_t *hi)
{
    *lo = INT32_MIN;
    *hi = INT32_MAX;
    if (L->cross) return;
    if (L->window) *lo = p - (int32_t)L->window + 1;
    if (L->causal) *hi = p;
    else if (L->window) *hi = p + (int32_t)L->window - 1;
}

/* Row i of an item: its token, query head, token offset in the item and
 * the index of its KV head within the item. */
static inline void cpu_amx_row(const cpu_amx_layer *L, const cpu_amx_item *it, uint32_t i,
                               uint32_t *tok, uint32_t *head, uint32_t *toff, uint32_t *kk)
{
    const uint32_t ng = it->g1 - it->g0, per_head = (it->t1 - it->t0) * ng;
    const uint32_t k = i / per_head, rem = i % per_head;
    *kk = k;
    *toff = rem / ng;
    *tok = it->t0 + rem / ng;
    *head = (it->kvh + k) * L->group + it->g0 + rem % ng;
}

/* Address of the key cache row of (key position j, kv head h) of request r. */
static inline int64_t cpu_amx_kv_row(const cpu_amx_run *run, uint32_t r, int32_t j, int64_t bs_str,
                                     int64_t ts_str, int64_t hs_str, uint32_t h)
{
    uint32_t bsz = run->L->block_size;
    int32_t blk = run->block_table[(size_t)r * run->bt_stride + (uint32_t)j / bsz];
    return (int64_t)blk * bs_str + (int64_t)((uint32_t)j % bsz) * ts_str + (int64_t)h * hs_str;
}

#endif
